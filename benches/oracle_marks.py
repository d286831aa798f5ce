"""The oracle plays the person who marks where the objects are (issue 47: a locator's labels, counted), and scores
a locator on episodes no mark came from.

    # marks: every 10th frame of the first 100 episodes, the recorded positions with a click's error (3 mm)
    .venv/bin/python benches/oracle_marks.py write --dataset data/demos --episodes 100 --every 10 --out marks.json
    # score: mean error (cm) on a held-out recorded dataset, with every view and with the views blanked (a locator
    # that reads the proprioception alone, or guesses the mean, fails the blanked check by little)
    .venv/bin/python benches/oracle_marks.py score --locator loc.pt --dataset data/val --out score.json

The recorded simulator state is the person's eye here (write) and the yardstick (score); it is never an input of
the locator or of a policy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

DEFAULT_NAMES = "block0_x,block0_y,target_x,target_y"


def write(a) -> None:
    from stagewise.training import data

    names = a.names.split(",")
    ds = data.load(a.dataset, stage_names=[], proportions=[], state_names=names, labels=False)
    rng = np.random.default_rng(a.seed)
    marks = []
    for e in ds.episodes[: a.episodes]:
        for t in range(a.offset % a.every, len(e.state), a.every):
            vals = e.state[t] + rng.normal(0.0, a.noise_cm / 100.0, len(names))
            marks.append({"episode": int(e.index), "frame": int(t), "values": [round(float(v), 5) for v in vals]})
    out = {"names": names, "marks": marks, "by": "benches/oracle_marks.py (the oracle plays the person)",
           "dataset": str(Path(a.dataset).resolve()), "every": a.every, "episodes": a.episodes,
           "noise_cm": a.noise_cm, "seed": a.seed}
    Path(a.out).write_text(json.dumps(out) + "\n")
    print(f"{len(marks)} marks of {min(a.episodes, len(ds.episodes))} episodes -> {a.out}")


def score(a) -> dict:
    import torch

    from stagewise.training import data, locator

    loc, _ = locator.load(a.locator)
    ds = data.load(a.dataset, stage_names=[], proportions=[], state_names=loc.proprio + loc.names, labels=False)
    if ds.views != loc.views:
        raise SystemExit(f"{a.dataset}: views {ds.views}, the locator reads {loc.views}")
    frames = np.concatenate([e.images[:: a.every] for e in ds.episodes])
    state = np.concatenate([e.state[:: a.every] for e in ds.episodes]).astype(np.float32)
    p, y = torch.as_tensor(state[:, : len(loc.proprio)]), torch.as_tensor(state[:, len(loc.proprio):])
    out = {"locator": a.locator, "dataset": a.dataset, "frames": int(len(frames)),
           "spread_cm": {n: round(float(y[:, k].std()) * 100, 2) for k, n in enumerate(loc.names)}}
    for what, f in (("views", frames), ("blanked", np.zeros_like(frames))):
        with torch.no_grad():
            err = (loc.head(locator.features(loc, f), p) - y).abs()
        out[f"mean_abs_error_cm_{what}"] = {n: round(float(err[:, k].mean()) * 100, 2)
                                           for k, n in enumerate(loc.names)}
        out[f"median_abs_error_cm_{what}"] = {n: round(float(err[:, k].median()) * 100, 2)
                                             for k, n in enumerate(loc.names)}
        out[f"p90_abs_error_cm_{what}"] = {n: round(float(err[:, k].quantile(0.9)) * 100, 2)
                                          for k, n in enumerate(loc.names)}
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="marks of a recorded dataset's frames, as a person would make them")
    w.add_argument("--dataset", required=True)
    w.add_argument("--names", default=DEFAULT_NAMES, help=f"the marked positions (default {DEFAULT_NAMES})")
    w.add_argument("--episodes", type=int, default=100, help="the first N episodes are marked (default 100)")
    w.add_argument("--every", type=int, default=10, help="every n-th frame of them (default 10)")
    w.add_argument("--offset", type=int, default=0, help="first marked frame (default 0)")
    w.add_argument("--noise-cm", type=float, default=0.3, help="a click's error, standard deviation (default 0.3)")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--out", required=True)
    s = sub.add_parser("score", help="a locator's error on a recorded dataset no mark came from")
    s.add_argument("--locator", required=True)
    s.add_argument("--dataset", required=True)
    s.add_argument("--every", type=int, default=2)
    s.add_argument("--out", default="")
    a = ap.parse_args()
    write(a) if a.cmd == "write" else score(a)


if __name__ == "__main__":
    main()
