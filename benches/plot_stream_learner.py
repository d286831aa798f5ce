"""The streaming learner's curves (issue 48, docs/robot-learning.md): held-out success against env steps and against
wall time, for `stagewise learn --from-stream` with 1, 2 and 4 actors and the synchronous `serve` learner on the
same task, reward and seed.

    .venv/bin/python benches/plot_stream_learner.py --out benches/results/stream_learner/curves.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = [
    ("synchronous serve learner", "benches/results/invariant_push/pot_c1/curves.json"),
    ("--from-stream, 1 actor", "benches/results/stream_learner/push_1actor_s0/curves.json"),
    ("--from-stream, 2 actors", "benches/results/stream_learner/push_2actors_s0/curves.json"),
    ("--from-stream, 4 actors", "benches/results/stream_learner/push_4actors_s0/curves.json"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "benches/results/stream_learner/curves.png"))
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for label, path in RUNS:
        run = json.loads((ROOT / path).read_text())["runs"][0]
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
    a.legend(fontsize=8)
    fig.suptitle("push-target, shipped reward model (potential, c = 1), state policy, seed 0")
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(args.out)


if __name__ == "__main__":
    main()
