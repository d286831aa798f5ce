"""Held-out success against env steps and against wall time, one line per run (the first seed of each
curves.json), for the experiments that compare set-ups on one task.

    .venv/bin/python benches/plot_runs.py stream_learner     # docs/robot-learning.md: 1, 2, 4 actors vs serve
    .venv/bin/python benches/plot_runs.py robot_inputs       # docs/lab/2026-12-07-pixels.md: what the policy reads
    .venv/bin/python benches/plot_runs.py --run "label=path/curves.json" ... --title T --out fig.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
R = "benches/results"
FIGURES = {
    "stream_learner": ("push-target, shipped reward model (potential, c = 1), state policy, seed 0", [
        ("synchronous serve learner", f"{R}/invariant_push/pot_c1/curves.json"),
        ("--from-stream, 1 actor", f"{R}/stream_learner/push_1actor_s0/curves.json"),
        ("--from-stream, 2 actors", f"{R}/stream_learner/push_2actors_s0/curves.json"),
        ("--from-stream, 4 actors", f"{R}/stream_learner/push_4actors_s0/curves.json"),
    ]),
    "robot_inputs": ("push-target, shipped reward model (potential, c = 1), seed 0: what the policy reads", [
        ("state, simulator's episode ends (reference)", f"{R}/invariant_push/pot_c1/curves.json"),
        ("state, model's ends, 20 demos", f"{R}/robot_inputs/push_state_model_ends_demos_s0/curves.json"),
        ("frozen embeddings, model's ends", f"{R}/robot_inputs/push_emb_model_ends_s0/curves.json"),
        ("frozen embeddings, model's ends, 20 demos", f"{R}/robot_inputs/push_emb_demos_s0/curves.json"),
        ("pixels, convs frozen (head), model's ends, 20 demos", f"{R}/robot_inputs/push_pixhead_demos_s0/curves.json"),
        ("pixels, DrQ, model's ends, 20 demos", f"{R}/robot_inputs/push_pix_demos_s0/curves.json"),
    ]),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("figure", nargs="?", choices=sorted(FIGURES), help="a preset: its runs, title and "
                    "benches/results/<figure>/curves.png")
    ap.add_argument("--run", action="append", default=[], metavar="LABEL=CURVES_JSON", help="a run (repeatable)")
    ap.add_argument("--title", default="")
    ap.add_argument("--out", help="the figure (default: the preset's)")
    args = ap.parse_args()
    if args.figure:
        title, runs = FIGURES[args.figure]
        out = args.out or str(ROOT / R / args.figure / "curves.png")
    else:
        if not args.run or not args.out:
            ap.error("name a preset, or give --run LABEL=PATH (repeatable) and --out")
        title, runs, out = args.title, [tuple(r.split("=", 1)) for r in args.run], args.out
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for label, path in runs:
        p = Path(path) if Path(path).is_absolute() else ROOT / path
        try:
            run = json.loads(p.read_text())["runs"][0]
        except (OSError, ValueError, KeyError, IndexError) as e:
            raise SystemExit(f"{p}: not a learner's curves.json ({e})") from None
        cps = run["checkpoints"]
        succ = [c["success"] for c in cps]
        a.plot([c["steps"] / 1000 for c in cps], succ, marker=".", label=label)
        b.plot([c["wall_s"] / 60 for c in cps], succ, marker=".", label=label)
    a.set_xlabel("env steps (thousands)")
    b.set_xlabel("wall time (minutes, this 2-core machine)")
    a.set_ylabel("held-out success (50 seeds)")
    for ax in (a, b):
        ax.axhline(0.8, color="grey", lw=0.5, ls="--")
        ax.grid(alpha=0.3)
    a.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(out)


if __name__ == "__main__":
    main()
