#!/usr/bin/env python3
"""docs/results.md and its figures, generated from the committed curves.json files (DESIGN.md, "What is committed
of an experiment"). Nothing in the table is typed by hand: each row names the runs it stands for (the `label` of a
merged curves.json, i.e. one reward condition over several seeds), and the script computes the rest.

    .venv/bin/python scripts/results_table.py            # writes docs/results.md, docs/results/<task>.png and
                                                         # the README's summary block
    .venv/bin/python scripts/results_table.py --check    # exits 1 when either text is not what it would write
    .venv/bin/python scripts/results_table.py --eval     # first rolls each run's last policy out on 200 fresh seeds

Per row: the seeds, the first evaluated step at which the mean success curve over the seeds reaches 80% (each run
evaluated its deterministic policy on 50 held-out seeds per checkpoint; the mean is taken over the steps every run
evaluated), and the final success of each run's last policy on 200 fresh seeds (7400000.., never trained on nor
used to choose a recipe), read from `fresh_eval.json` beside the run's curves.json. `--eval` writes those files with
`stagewise eval policy` (it needs the run's last policy, which stays out of git: run it where the runs were made).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FRESH_SEED, FRESH_EPISODES = 7_400_000, 200
TARGET = 0.8


@dataclass
class Row:
    reward: str  # what the table calls it
    label: str  # the runs' label in the merged curves.json
    policy: str = ""  # the shipped policy trained this way, if any
    learn: str = ""  # the same set-up as `stagewise learn` flags (its defaults are these set-ups; not re-run)
    runs: List[str] = field(default_factory=list)  # or its runs' own curves.json files (one seed each)


@dataclass
class Experiment:
    task: str
    merged: str  # the merged curves.json (learner_shaping.py --merge); "" when every row names its runs
    rows: List[Row] = field(default_factory=list)
    note: str = ""
    title: str = ""  # the section's title (default: the task)
    figure: str = ""  # docs/results/<figure>.png (default: the task)
    legend: str = "upper left"  # where the figure's legend goes

    @property
    def name(self) -> str:
        return self.figure or self.task


EXPERIMENTS = [
    Experiment(
        task="push-target",
        merged="benches/results/learner_shaping_push_sg/merged/curves.json",
        note="TD3, no demonstrations, symmetry augmentation, 150k env steps (sparse: seeds 2 and 3 to 300k, their final "
        "policies too); the progress form at c = 10 unless a row names the policy-invariant forms (docs/shaping.md, "
        "\"Which form teaches\"; `stagewise learn`'s default on this task is the potential form at c = 1). Learned = "
        "the shipped push-target model (round 6), pixels + gripper width.",
        rows=[
            Row("sparse (floor)", "sparse, 0 demos", learn="--task push-target --reward sparse"),
            Row("oracle progress (ceiling)", "oracle, c=10, 0 demos", learn="--task push-target --reward oracle"),
            Row("learned", "model, c=10, 0 demos, round 6 (shipped)",
                learn="--task push-target --reward model --shaping progress"),
            Row("learned, success read as phi = 1", "model, c=10, 0 demos, success phi 1, round 6 (shipped)",
                policy="models/policies/push-target-learned",
                learn="--task push-target --reward model --shaping progress --success-progress-one"),
            Row("learned, invariant (potential, c = 1)", "model, potential, c=1, 0 demos, round 6 (shipped)",
                policy="models/policies/push-target-invariant"),
            Row("learned, invariant (value potential K = 100, c = 1)",
                "model, value K=100, c=1, 0 demos, round 6 (shipped)"),
        ],
    ),
    Experiment(
        task="push-target",
        title="push-target, what a robot has (issue 47)",
        figure="push-target-robot",
        legend="lower right",
        merged="",
        note="TD3 with the symmetry augmentation, 20 demonstrations, the shipped reward model in the potential form "
        "(c = 1) and `--episode-ends model`: the learner's reward, success and episode ends are the reward model's; "
        "the simulator's success only evaluates. The pixel policies read three 32x32 camera views and the "
        "proprioception (hand xyz, gripper width); inside them a locator (keypoints + MLP, trained on marks of "
        "recorded frames, the oracle playing the person) puts the block and the target on the table "
        "(python/README.md, \"Locator\"; docs/lab/2026-12-08-locator-rollouts.md). The state row reads the "
        "simulator's block and target poses: a simulator result, for reference.",
        rows=[
            Row("state (simulator poses; reference)", "state, model ends",
                runs=["benches/results/robot_inputs/push_state_model_ends_demos_s0/curves.json"],
                learn="--task push-target --reward model --episode-ends model --demos 20"),
            Row("pixels + locator, 10k marks of demonstrations", "pixels, locator 200x3",
                runs=[f"benches/results/robot_inputs/push_loc200x3_s{s}/curves.json" for s in (0, 1, 2)],
                learn="--task push-target --reward model --obs pixels --locator LOC.pt --episode-ends model "
                      "--demos 20"),
            Row("pixels + locator, + 6k marks of random play", "pixels, locator A",
                runs=[f"benches/results/robot_inputs/push_locA_s{s}/curves.json" for s in (0, 1, 2)],
                policy="models/policies/push-target-pixels",
                learn="--task push-target --reward model --obs pixels --locator LOC_A.pt --episode-ends model "
                      "--demos 20"),
            Row("pixels + locator A, the target located on the episode's first frame", "pixels, locator A, at start",
                runs=[f"benches/results/robot_inputs/push_locAfirst_s{s}/curves.json" for s in (0, 1, 2)],
                learn="--task push-target --reward model --obs pixels --locator LOC_A.pt --locate-at-start "
                      "target_x,target_y --episode-ends model --demos 20"),
            Row("sparse, the simulator's success (not a robot's): pixels + locator A, target at start",
                "pixels, locator A, at start, sparse",
                runs=["benches/results/robot_inputs/push_locAfirst_sparse_s0/curves.json"],
                learn="--task push-target --reward sparse --obs pixels --locator LOC_A.pt --locate-at-start "
                      "target_x,target_y --demos 20"),
        ],
    ),
    Experiment(
        task="pick-place",
        merged="benches/results/learner_shaping_pick_sg/merged/curves.json",
        note="TD3, no demonstrations, progress form c = 10, gripper flips 0.02 x 8 with rise, binary gripper, "
        "300k env steps. Learned = the shipped pick-place model (round 10), pixels + proprioception.",
        rows=[
            Row("sparse (floor)", "sparse, 0 demos, flip 0.02 x8 rise, binary gripper",
                learn="--task pick-place --reward sparse"),
            Row("oracle progress (ceiling)", "oracle, c=10, 0 demos, flip 0.02 x8 rise, binary gripper",
                learn="--task pick-place --reward oracle --potential-scale 1 --no-success-progress-one"),
            Row("oracle progress, potential part x 0.1",
                "oracle, c=10 (potential part x0.1), 0 demos, flip 0.02 x8 rise, binary gripper",
                learn="--task pick-place --reward oracle --no-success-progress-one"),
            Row("learned, potential part x 0.1, success read as phi = 1",
                "model, c=10 (potential part x0.1), 0 demos, flip 0.02 x8 rise, binary gripper, success phi 1, "
                "round 10", policy="models/policies/pick-place-learned", learn="--task pick-place --reward model"),
        ],
    ),
]


@dataclass
class CloningResult:
    """A behaviour-cloning comparison written by benches/bc_rabc.py (arms x training seeds, fresh eval seeds)."""
    task: str
    path: str
    command: str
    note: str


CLONING = [
    CloningResult(
        task="pick-place",
        path="benches/results/bc_rabc_fail06_c25.json",
        command="benches/bc_rabc.py --degraded 0.6 --presets miss-grasp,wrong-place,freeze,off-table --chunk 25 "
        "--out benches/results/bc_rabc_fail06_c25",
        note="1000 recorded demonstrations, 60% degraded with failure presets only (61% of them fail); labels by "
        "`stagewise label` with the pick-place model shipped then (2026-12-02, before the learner-state rounds) or the oracle; RA-BC chunk 25, "
        "kappa 0.01; MLP 3x256 on the simulator's state, 8000 steps; each policy on 200 fresh seeds.",
    ),
]


def cloning_table() -> List[str]:
    lines = ["## Behaviour cloning with RA-BC weights", ""]
    for res in CLONING:
        with open(os.path.join(REPO, res.path)) as fh:
            d = json.load(fh)
        lines += [f"{res.task}: {res.note} Command: `{res.command}` (commit `{commit_of(res.path)}`).", "",
                  "| policy | seeds | success, 200 fresh seeds per seed: mean (min-max) | vs BC |", "|---|---|---|---|"]
        bc = d["mean_success"]["BC"]
        for arm, runs in d["results"].items():
            rates = [r["success_rate"] for r in runs]
            mean = d["mean_success"][arm]
            ratio = "" if arm == "BC" else f"{mean / bc:.2f}x"
            seeds = ", ".join(str(r["seed"]) for r in runs)
            lines.append(f"| {arm} | {seeds} | {100 * mean:.1f}% ({100 * min(rates):.1f}-{100 * max(rates):.1f}) | "
                         f"{ratio} |")
        lines.append("")
    return lines


def rel(path: str) -> str:
    """A run's path relative to the repository (merged files hold the absolute path of the machine they ran on)."""
    marker = "benches/results/"
    return path[path.index(marker):] if marker in path else path


def load_runs(exp: Experiment) -> Dict[str, List[dict]]:
    by_label: Dict[str, List[dict]] = {}
    if exp.merged:
        with open(os.path.join(REPO, exp.merged)) as fh:
            merged = json.load(fh)
        for run in merged["runs"]:
            by_label.setdefault(run["label"], []).append(run)
    for row in exp.rows:
        for path in row.runs:  # a stagewise.rl curves.json: its set-up, then its runs
            with open(os.path.join(REPO, path)) as fh:
                saved = json.load(fh)
            for run in saved["runs"]:
                by_label.setdefault(row.label, []).append(
                    {**run, "argv": run.get("argv", saved.get("argv")), "label": row.label,
                     "source": os.path.dirname(path)})
    for row in exp.rows:
        if row.label not in by_label:
            raise SystemExit(f"{exp.merged}: no runs labelled {row.label!r} (labels: {sorted(by_label)})")
    return by_label


def mean_curve(runs: List[dict]):
    """[(step, mean success)] over the evaluations every run made: the i-th checkpoint of each run (runs evaluate
    at the same interval; their step counts differ by the few steps of a decision), up to the shortest run."""
    n = min(len(r["checkpoints"]) for r in runs)
    out = []
    for i in range(n):
        steps = [r["checkpoints"][i]["steps"] for r in runs]
        out.append((max(steps), sum(r["checkpoints"][i]["success"] for r in runs) / len(runs)))
    return out


def steps_to_target(curve) -> Optional[int]:
    return next((s for s, v in curve if v >= TARGET), None)


def kilo(steps: int) -> str:
    return f"{int(round(steps / 1000.0))}k"


def fresh_eval_path(run: dict) -> str:
    return os.path.join(REPO, rel(run["source"]), "fresh_eval.json")


def fresh_success(runs: List[dict]) -> Optional[List[float]]:
    rates = []
    for run in runs:
        path = fresh_eval_path(run)
        if not os.path.exists(path):
            return None
        with open(path) as fh:
            rates.append(json.load(fh)["success_rate"])
    return rates


def commit_of(path: str) -> str:
    """The commit that last changed a run's curves.json."""
    out = subprocess.run(["git", "log", "-1", "--format=%h", "--", path], cwd=REPO, capture_output=True,
                         text=True)
    return (out.returncode == 0 and out.stdout.strip()) or "uncommitted"


def evaluate(exp: Experiment, runs: List[dict], binary: str) -> None:
    for run in runs:
        last = run["last"]  # learner_shaping.py: {onnx, manifest}; stagewise.rl: the manifest
        manifest = os.path.join(REPO, rel(last["manifest"] if isinstance(last, dict) else last))
        out = fresh_eval_path(run)
        if os.path.exists(out):
            continue
        if not os.path.exists(manifest):
            raise SystemExit(f"{manifest}: the run's last policy is not here (checkpoints stay out of git; "
                             "restore it with `git show 6d505fc:PATH`)")
        print(f"eval {rel(run['source'])} ...", file=sys.stderr, flush=True)
        subprocess.run([binary, "--log", "warn", "eval", "policy", "--policy", manifest, "--task", exp.task,
                        "--episodes", str(FRESH_EPISODES), "--seed", str(FRESH_SEED), "--json", out],
                       cwd=REPO, check=True, stdout=subprocess.DEVNULL)


def figure(exp: Experiment, by_label: Dict[str, List[dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    for row in exp.rows:
        runs = by_label[row.label]
        curve = mean_curve(runs)
        xs = [s / 1000.0 for s, _ in curve]
        n = len(curve)
        lo = [min(r["checkpoints"][i]["success"] for r in runs) for i in range(n)]
        hi = [max(r["checkpoints"][i]["success"] for r in runs) for i in range(n)]
        line, = ax.plot(xs, [v for _, v in curve], label=f"{row.reward} ({len(runs)} seeds)")
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.12, linewidth=0)
    ax.axhline(TARGET, color="k", linestyle=":", linewidth=0.8)
    ax.set_xlabel("env steps (k)")
    ax.set_ylabel("success on 50 held-out seeds")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{exp.title or exp.task}: mean over seeds (band: min-max)")
    ax.legend(fontsize=7, loc=exp.legend)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})  # no version stamp: the file changes only with the data
    plt.close(fig)


README_BEGIN = "<!-- results: written by scripts/results_table.py from docs/results.md's data -->"
README_END = "<!-- /results -->"


def row_figures(row: Row, by_label: Dict[str, List[dict]]):
    """(runs sorted by seed, steps-to-80% text, final-success text) of one row."""
    runs = sorted(by_label[row.label], key=lambda r: r["seed"])
    curve = mean_curve(runs)
    hit = steps_to_target(curve)
    reach = kilo(hit) if hit is not None else f"not within {kilo(curve[-1][0])} (max {max(v for _, v in curve):.0%})"
    rates = fresh_success(runs)
    final = (f"{100 * sum(rates) / len(rates):.1f}% ({100 * min(rates):.1f}-{100 * max(rates):.1f})"
             if rates else "not evaluated")
    return runs, reach, final


def readme_block() -> str:
    lines = [README_BEGIN, "| task | reward | seeds | steps to 80% | final success (200 fresh seeds) | policy |",
             "|---|---|---|---|---|---|"]
    for exp in EXPERIMENTS:
        by_label = load_runs(exp)
        for row in exp.rows:
            runs, reach, final = row_figures(row, by_label)
            policy = f"`{row.policy}`" if row.policy else ""
            lines.append(f"| {exp.task} | {row.reward} | {len(runs)} | {reach} | {final} | {policy} |")
    lines.append(README_END)
    return "\n".join(lines)


def with_readme_block(readme: str) -> str:
    start, end = readme.find(README_BEGIN), readme.find(README_END)
    if start < 0 or end < start:
        raise SystemExit(f"README.md: no {README_BEGIN!r} ... {README_END!r} block to write the summary into")
    return readme[:start] + readme_block() + readme[end + len(README_END):]


def table() -> str:
    lines = [
        "# Results",
        "",
        "Generated by `scripts/results_table.py` from the committed `curves.json` files; do not edit by hand. "
        "Steps to 80%: the first evaluation at which the mean success over the seeds (each checkpoint's deterministic "
        "policy on 50 held-out seeds) reaches 80%. Final: each seed's last policy on 200 fresh seeds "
        f"({FRESH_SEED}..), mean (min-max). How the runs were chosen and what else was tried: "
        "[the lab notebooks](lab/README.md).",
        "",
        "What each learner reads: the state policy reads the simulator's state (block and target poses: a "
        "simulator result); the learned reward reads camera frames and proprioception only; `oracle` is the "
        "simulator's ground-truth progress (the ceiling), `sparse` the task's success alone (the floor).",
        "",
    ]
    commands = []
    for exp in EXPERIMENTS:
        by_label = load_runs(exp)
        lines += [f"## {exp.title or exp.task}", "", exp.note, "",
                  "| reward | seeds | steps to 80% (mean curve) | final success, 200 fresh seeds | command | commit | policy |",
                  "|---|---|---|---|---|---|---|"]
        for row in exp.rows:
            runs, reach, final = row_figures(row, by_label)
            learn = f" Today: `stagewise learn {row.learn} --seeds {','.join(str(r['seed']) for r in runs)} --out DIR`." \
                if row.learn else ""
            commands.append(f"`{' '.join(runs[0]['argv'])}`{learn}")
            commit = commit_of(os.path.join(rel(runs[0]["source"]), "curves.json"))
            policy = f"[`{os.path.basename(row.policy)}`](../{row.policy}/)" if row.policy else ""
            seeds = ", ".join(str(r["seed"]) for r in runs)
            lines.append(f"| {row.reward} | {seeds} | {reach} | {final} | [{len(commands)}](#commands) | "
                         f"`{commit}` | {policy} |")
        lines.append("")
        lines += [f"![{exp.name}](results/{exp.name}.png)", ""]
    lines += cloning_table()
    lines += ["## Commands", "", "The RL rows' first seed's command (the other seeds differ in `--seeds` and "
              "`--out`; the learner was `benches/learner_shaping.py`, or `python -m stagewise.rl`, which `stagewise "
              "learn` runs). \"Today\" is the same set-up as a `stagewise learn` command (its defaults per task are these set-ups); those commands were not re-run for this table.", ""]
    lines += [f"{i}. {c}" for i, c in enumerate(commands, 1)]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/results.md is out of date")
    ap.add_argument("--eval", action="store_true",
                    help="roll out each run's last policy on 200 fresh seeds first (fresh_eval.json)")
    ap.add_argument("--no-figures", action="store_true", help="do not redraw docs/results/<task>.png")
    a = ap.parse_args()
    if a.eval:
        binary = os.environ.get("STAGEWISE_BIN", os.path.join(REPO, "target", "release", "stagewise"))
        for exp in EXPERIMENTS:
            by_label = load_runs(exp)
            for row in exp.rows:
                evaluate(exp, by_label[row.label], binary)
    path = os.path.join(REPO, "docs", "results.md")
    readme_path = os.path.join(REPO, "README.md")
    with open(readme_path) as fh:
        readme = fh.read()
    wanted = {path: table(), readme_path: with_readme_block(readme)}
    if a.check:
        stale = []
        for p, text in wanted.items():
            with open(p) as fh:
                if fh.read() != text:
                    stale.append(p)
        for p in stale:
            print(f"{p} is out of date: run scripts/results_table.py", file=sys.stderr)
        return 1 if stale else 0
    for p, text in wanted.items():
        with open(p, "w") as fh:
            fh.write(text)
    if not a.no_figures:
        os.makedirs(os.path.join(REPO, "docs", "results"), exist_ok=True)
        for exp in EXPERIMENTS:
            figure(exp, load_runs(exp), os.path.join(REPO, "docs", "results", f"{exp.name}.png"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
