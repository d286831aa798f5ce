"""Held-out success against env steps and against wall time, one line per run (the first seed of each
curves.json), for the experiments that compare set-ups on one task. Runs given the same label are seeds of one
set-up: their mean curve is drawn (the seeds faint), and the mean's first crossing of 80% is printed.

    .venv/bin/python benches/plot_runs.py stream_learner     # docs/robot-learning.md: 1, 2, 4 actors vs serve
    .venv/bin/python benches/plot_runs.py robot_inputs       # docs/lab/2026-12-07-pixels.md: what the policy reads
    .venv/bin/python benches/plot_runs.py keypoints --out benches/results/robot_inputs/keypoints/curves.png
    .venv/bin/python benches/plot_runs.py locator --out benches/results/robot_inputs/locator/curves.png
    .venv/bin/python benches/plot_runs.py locator_rollouts --out benches/results/robot_inputs/locator_rollouts/curves.png
    .venv/bin/python benches/plot_runs.py label_rounds       # docs/robot-learning.md: the labelled rounds
    .venv/bin/python benches/plot_runs.py label_readout      # ... and the served readout (hard / soft)
    .venv/bin/python benches/plot_runs.py label_pick         # ... on pick-place
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
    "keypoints": ("push-target, shipped reward model (potential, c = 1), model's episode ends, 20 demos", [
        ("state", f"{R}/robot_inputs/push_state_model_ends_demos_s0/curves.json"),
        *[("state without the block's orientation or grasped", f"{R}/robot_inputs/push_state_noquat_s{s}/curves.json")
          for s in (0, 1)],
        ("pixels, DrQ (batch 128, 1 update a decision)", f"{R}/robot_inputs/push_pix_demos_s0/curves.json"),
        ("frozen keypoints (16 a view)", f"{R}/robot_inputs/push_kp_demos_s0/curves.json"),
        ("frozen keypoints, standardised, 4x updates", f"{R}/robot_inputs/push_kpn_utd8_demos_s0/curves.json"),
        ("frozen keypoints + their displacements", f"{R}/robot_inputs/push_kprel_demos_s0/curves.json"),
        ("frozen keypoints + displacements, 64x64 frames", f"{R}/robot_inputs/push_kp64_demos_s0/curves.json"),
        ("state without orientation, no symmetry augmentation",
         f"{R}/robot_inputs/push_state_noquat_nosym_s0/curves.json"),
        ("state, no symmetry augmentation", f"{R}/robot_inputs/push_state_nosym_s0/curves.json"),
    ]),
    "locator": ("push-target, shipped reward model (potential, c = 1), model's episode ends, 20 demos", [
        ("state without the block's orientation or grasped", f"{R}/robot_inputs/push_state_noquat_s0/curves.json"),
        ("... block and target xy + noise 0.5 cm every step", f"{R}/robot_inputs/push_state_noisy05_s0/curves.json"),
        ("... block and target xy + noise 1.5 cm every step", f"{R}/robot_inputs/push_state_noisy15_s0/curves.json"),
        *[("pixels: locator on 32x32 keypoints, 10k marks (seeds 0-2)",
           f"{R}/robot_inputs/push_loc200x3_s{s}/curves.json") for s in (0, 1, 2)],
        ("... the same without the symmetry augmentation", f"{R}/robot_inputs/push_loc200x3_nosym_s0/curves.json"),
        ("pixels: locator on 64x64 keypoints, 10k marks", f"{R}/robot_inputs/push_loc64_200x3_s0/curves.json"),
        ("pixels, DrQ (no symmetry)", f"{R}/robot_inputs/push_pix_demos_s0/curves.json"),
        ("pixels, frozen keypoints (no symmetry)", f"{R}/robot_inputs/push_kprel_demos_s0/curves.json"),
    ]),
    "locator_rollouts": ("push-target, shipped reward model (potential, c = 1), model's episode ends, 20 demos", [
        *[("locator, 10k marks of demonstrations (seeds 0-2)", f"{R}/robot_inputs/push_loc200x3_s{s}/curves.json")
          for s in (0, 1, 2)],
        *[("... + 6k marks of random play (seeds 0-2)", f"{R}/robot_inputs/push_locA_s{s}/curves.json")
          for s in (0, 1, 2)],
        *[("... + the target located on the first frame (seeds 0-2)",
           f"{R}/robot_inputs/push_locAfirst_s{s}/curves.json") for s in (0, 1, 2)],
        ("locator A, success at phi >= 0.97 (stopped)", f"{R}/robot_inputs/push_locA_delta03_s0/curves.json"),
        ("locator A, success after 4 steps at phi >= 0.95 (stopped)",
         f"{R}/robot_inputs/push_locA_steps4_s0/curves.json"),
        ("sparse: the simulator's success (not a robot's), locator A, target at start",
         f"{R}/robot_inputs/push_locAfirst_sparse_s0/curves.json"),
    ]),
    "label_rounds": ("push-target, state policy, potential c = 1: rewards from labels a person gives (mean of seeds)", [
        *[("oracle reward", f"{R}/label_rounds/push_oracle_s{s}/curves.json") for s in (0, 1, 2)],
        ("round 0: 200 labelled demos (seed 0)", f"{R}/label_rounds/push_r0clean_s0/curves.json"),
        ("round 0 retrained: 200 labelled demos (seed 1)", f"{R}/label_rounds/push_r0clean_s1/curves.json"),
        ("round 1 (tau 0 on failures): + 50 labelled rollouts (seed 0)", f"{R}/label_rounds/push_r1_s0/curves.json"),
        *[("oracle reward, 20 demos", f"{R}/label_rounds/push_oracle_demos_s{s}/curves.json") for s in (0, 1, 2)],
        *[("round 0, 20 demos", f"{R}/label_rounds/push_r0clean_demos_s{s}/curves.json") for s in (0, 1, 2)],
        *[("round 1 (masked failures), 20 demos", f"{R}/label_rounds/push_r1mask_demos_s{s}/curves.json")
          for s in (0, 1, 2)],
        *[("round 1 (tau 0 on failures), 20 demos", f"{R}/label_rounds/push_r1zero_demos_s{s}/curves.json")
          for s in (0, 1, 2)],
        *[("round 2 (masked failures), 20 demos", f"{R}/label_rounds/push_r2mask_demos_s{s}/curves.json")
          for s in (0, 1, 2)],
    ]),
    "label_readout": ("push-target, 20 demos, state policy, potential c = 1: the served readout (mean of seeds)", [
        *[("oracle reward", f"{R}/label_rounds/push_oracle_demos_s{s}/curves.json") for s in (0, 1, 2)],
        *[("oracle reward", f"{R}/label_readout/push_oracle_demos_s{s}/curves.json") for s in (3, 4, 5)],
        *[("round 0, hard", f"{R}/label_rounds/push_r0clean_demos_s{s}/curves.json") for s in (0, 1, 2)],
        *[("round 0, soft", f"{R}/label_readout/push_r0soft_demos_s{s}/curves.json") for s in (0, 1, 2)],
        *[("round 1, hard", f"{R}/label_rounds/push_r1mask_demos_s{s}/curves.json") for s in (0, 1, 2)],
        *[("round 1, soft", f"{R}/label_readout/push_r1soft_demos_s{s}/curves.json") for s in (0, 1, 2, 3, 4, 5)],
        *[("round 1 + 'near' stage, hard", f"{R}/label_readout/push_r1near_demos_s{s}/curves.json")
          for s in (0, 1, 2)],
        *[("round 1 + 'near' stage, soft", f"{R}/label_readout/push_r1nearsoft_demos_s{s}/curves.json")
          for s in (0, 1, 2)],
    ]),
    "label_pick": ("pick-place, 20 demos, state policy, stagewise learn's pick-place defaults: labelled rounds", [
        *[("oracle reward", f"{R}/label_pick/pick_oracle_demos_s{s}/curves.json") for s in (0, 1, 2)],
        *[("round 0 (soft): 200 labelled demos", f"{R}/label_pick/pick_r0soft_demos_s{s}/curves.json")
          for s in (0, 1, 2)],
        *[("round 1: + 50 labelled rollouts", f"{R}/label_pick/pick_r1mask_demos_s{s}/curves.json")
          for s in (0, 1, 2)],
    ]),
}


def mean_curve(runs: list[dict]) -> tuple[list[float], list[float], list[float]]:
    """(steps, wall seconds, success) averaged over seeds, checkpoint by checkpoint, as far as every seed got."""
    n = min(len(r["checkpoints"]) for r in runs)
    cols = [[r["checkpoints"][i] for r in runs] for i in range(n)]
    return ([sum(c["steps"] for c in col) / len(col) for col in cols],
            [sum(c["wall_s"] for c in col) / len(col) for col in cols],
            [sum(c["success"] for c in col) / len(col) for col in cols])


def load(path: str) -> dict:
    p = Path(path) if Path(path).is_absolute() else ROOT / path
    try:
        return json.loads(p.read_text())["runs"][0]
    except (OSError, ValueError, KeyError, IndexError) as e:
        raise SystemExit(f"{p}: not a learner's curves.json ({e})") from None


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
    groups: dict[str, list[dict]] = {}
    for label, path in runs:
        groups.setdefault(label, []).append(load(path))
    for label, group in groups.items():
        steps, wall, succ = mean_curve(group)
        name = label if len(group) == 1 else f"{label} ({len(group)} seeds)"
        line = a.plot([s / 1000 for s in steps], succ, marker=".", label=name)[0]
        b.plot([w / 60 for w in wall], succ, marker=".", color=line.get_color(), label=name)
        if len(group) > 1:
            for run in group:
                cps = run["checkpoints"]
                a.plot([c["steps"] / 1000 for c in cps], [c["success"] for c in cps], color=line.get_color(),
                       lw=0.6, alpha=0.3)
        first = next((s for s, v in zip(steps, succ) if v >= 0.8), None)
        print(f"{name}: mean curve first >= 80% at "
              f"{f'{first / 1000:.0f}k' if first is not None else 'never'} env steps, last {succ[-1]:.0%}")
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
