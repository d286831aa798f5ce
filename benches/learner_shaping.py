#!/usr/bin/env python3
"""Rewards that teach, side by side: the learner of `stagewise.rl` (`python -m stagewise.rl`, = `stagewise learn`)
run for several rewards (sparse: the floor; model: the learned reward; oracle: the ceiling) x seeds, and one figure
of them; `--merge` puts runs made apart (other processes, machines, set-ups) into one figure, each set-up labelled.

    nice -n 10 .venv/bin/python benches/learner_shaping.py --task push-target --rewards sparse,model,oracle \
        --seeds 0,1,2 --steps 150000 --out benches/results/learner_shaping_push
    .venv/bin/python benches/learner_shaping.py --out benches/results/merged --merge DIR1 DIR2 ...

Every other flag goes to `stagewise.rl` as it is (`python -m stagewise.rl --help`); each reward's run lands in
<out>/<reward>/ (its curves.json, figure, policies, checkpoints; `--resume` continues them), and <out>/curves.json +
curves.png merge them. What set-up measured what: docs/lab/learner_shaping.md (the lab notebook); the shipped results'
exact command lines are in their curves.json."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List

from stagewise.rl import cli, runner
from stagewise.rl.checkpoint import write_json
from stagewise.rl.plot import plot, run_label, title_of


def load_runs(sources: List[str]) -> tuple:
    """(runs, first file's set-up) of curves.json files or directories: each run keeps the set-up, the command line
    and the directory it came from (curves.json of stagewise.rl carry `config`; the bench script's before the
    package carried a flat `args`)."""
    runs, first = [], None
    for src in sources:
        path = os.path.join(src, "curves.json") if os.path.isdir(src) else src
        with open(path) as fh:
            saved = json.load(fh)
        setup = {k: saved[k] for k in ("config", "args") if k in saved}
        first = first or setup
        for r in saved["runs"]:
            runs.append({**setup, **r, "argv": r.get("argv", saved.get("argv")),
                         "source": os.path.dirname(os.path.abspath(path))})
    return runs, first


def merge(out: str, sources: List[str], model_names: dict) -> List[dict]:
    runs, first = load_runs(sources)
    run_label(runs, model_names)
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "curves.json"),
               {"note": f"merged by benches/learner_shaping.py --merge from {len(sources)} files", **first,
                "runs": runs})
    cfg = first.get("config")
    labelled = any("label" in r for r in runs)
    title = title_of(cfg) if cfg and not labelled else "via stagewise serve: set-up per legend (thin: seeds, thick: mean)"
    eval_episodes = (cfg or first.get("args", {})).get("eval_episodes", 50)
    plot(runs, title, os.path.join(out, "curves.png"), eval_episodes)
    return runs


def main(argv=None) -> List[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rewards", default="sparse,model,oracle", help="comma-separated rewards, one run each")
    ap.add_argument("--out", required=True)
    ap.add_argument("--merge", nargs="+", default=[], metavar="DIR",
                    help="merge the runs of these output dirs (or curves.json files) into <out> instead of running")
    ap.add_argument("--model-names", default={}, metavar="DIR=NAME,...",
                    type=lambda t: dict(kv.split("=", 1) for kv in t.split(",") if kv),
                    help="--merge: name the reward model of the runs whose model lay in DIR as NAME in the legend "
                         "(an empty DIR: runs that recorded no model)")
    a, rest = ap.parse_known_args(argv)
    if a.merge:
        runs = merge(a.out, a.merge, a.model_names)
    else:
        dirs = []
        for reward in a.rewards.split(","):
            d = os.path.join(a.out, reward)
            args = cli.parse([*rest, "--reward", reward, "--out", d])
            try:
                runner.learn(args)
            except runner.LearnError as e:
                sys.exit(f"error: {e}")
            dirs.append(d)
        runs = merge(a.out, dirs, a.model_names)
    print("task reward seed  eval success by evaluation (k steps: success)")
    for r in runs:
        print(f"{r['task']} {r.get('label', r['reward']):>6} {r['seed']:>3}  " +
              " ".join(f"{c['steps'] // 1000}k:{c['success']:.0%}" for c in r["checkpoints"]))
    return runs


if __name__ == "__main__":
    main()
