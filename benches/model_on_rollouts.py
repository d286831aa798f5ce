#!/usr/bin/env python3
"""How well reward models read a learner's own states: each model's progress (`stagewise label`) against the
simulator's `progress_gt` on held-out rollouts recorded with `stagewise record --policy CHECKPOINT` (never trained
on). Prints one JSON object per model: MAE, Spearman of progress with the truth pooled over all frames and per
episode (mean), the mean progress read and true, and the same split by the true progress (below the push stage,
in it, near the target), where the issue-48 rounds found the models blind. And what potential shaping pays per
step: the correlation of the model's step-to-step change of progress with the truth's, and the spread (std) of
their difference (the reward's noise at shaping scale 1); and the correlation of their changes over 10 frames.

    benches/model_on_rollouts.py --model r0=models/r0.toml --model r1=models/r1.toml \\
        --out results.json DATASET [DATASET ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from stagewise.training.train_dataset import ranks  # ties averaged: most of a failure's true progress is 0

ROOT = Path(__file__).resolve().parents[1]
BANDS = [(0.0, 0.37), (0.37, 0.8), (0.8, 1.01)]


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < 2 or a.std() < 1e-9 or b.std() < 1e-9:
        return None
    return round(float(np.corrcoef(ranks(a), ranks(b))[0, 1]), 4)


def read(model: str, dataset: Path, tmp: Path, bin_: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    out = tmp / f"{abs(hash((model, str(dataset))))}.parquet"
    r = subprocess.run([bin_, "label", "--dataset", str(dataset), "--model", model, "--out", str(out), "--plots",
                        "0", "--provider", "cpu", "--workers", "1"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"stagewise label --model {model} --dataset {dataset} failed:\n{r.stderr[-2000:]}")
    t = pq.read_table(next((dataset / "data").glob("chunk-*/file-*.parquet")),
                      columns=["episode_index", "progress_gt"]).to_pydict()
    lab = pq.read_table(out).to_pydict()
    key = next(c for c in lab if "progress" in c and "delta" not in c)
    if len(lab[key]) != len(t["progress_gt"]):
        raise SystemExit(f"{dataset}: {len(lab[key])} labels for {len(t['progress_gt'])} frames")
    return np.asarray(lab[key]), np.asarray(t["progress_gt"]), np.asarray(t["episode_index"])


def step_changes(x: np.ndarray, episode: np.ndarray, h: int = 1) -> np.ndarray:
    """Change over h frames within each episode (NaN where the frame h back is in another episode)."""
    d = np.full(len(x), np.nan)
    same = episode[h:] == episode[:-h]
    d[h:][same] = (x[h:] - x[:-h])[same]
    return d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, metavar="NAME=MANIFEST")
    ap.add_argument("--out", type=Path, help="also write the results here (JSON)")
    ap.add_argument("datasets", nargs="+", type=Path, help="recorded rollouts with progress_gt")
    args = ap.parse_args()
    bin_ = os.environ.get("STAGEWISE_BIN", str(ROOT / "target" / "debug" / "stagewise"))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.model:
            name, model = spec.split("=", 1)
            P, G, E = [], [], []
            for i, d in enumerate(args.datasets):
                p, g, e = read(model, d, Path(tmp), bin_)
                P.append(p), G.append(g), E.append(i * 100000 + e)
            P, G, E = np.concatenate(P), np.concatenate(G), np.concatenate(E)
            dP, dG = step_changes(P, E), step_changes(G, E)
            ok = ~np.isnan(dP)
            dP10, dG10 = step_changes(P, E, 10), step_changes(G, E, 10)
            ok10 = ~np.isnan(dP10)
            per = [s for e in np.unique(E) if (s := spearman(P[E == e], G[E == e])) is not None]
            res = {"model": name, "manifest": model, "frames": int(len(P)), "episodes": int(len(np.unique(E))),
                   "mae": round(float(np.abs(P - G).mean()), 4), "spearman_pooled": spearman(P, G),
                   "spearman_per_episode_mean": round(float(np.mean(per)), 4) if per else None,
                   "mean_progress": round(float(P.mean()), 4), "mean_progress_gt": round(float(G.mean()), 4),
                   "step_change_corr": round(float(np.corrcoef(dP[ok], dG[ok])[0, 1]), 4),
                   "step_change_noise": round(float((dP[ok] - dG[ok]).std()), 4),
                   "step_change_gt_std": round(float(dG[ok].std()), 4),
                   "change_10_corr": round(float(np.corrcoef(dP10[ok10], dG10[ok10])[0, 1]), 4),
                   "by_true_progress": []}
            for lo, hi in BANDS:
                m = (G >= lo) & (G < hi)
                res["by_true_progress"].append({
                    "band": [lo, min(hi, 1.0)], "frames": int(m.sum()),
                    "mae": round(float(np.abs(P - G)[m].mean()), 4) if m.any() else None,
                    "spearman": spearman(P[m], G[m]),
                    "mean_progress": round(float(P[m].mean()), 4) if m.any() else None,
                    "mean_progress_gt": round(float(G[m].mean()), 4) if m.any() else None})
            print(json.dumps(res), flush=True)
            results.append(res)
    if args.out:
        args.out.write_text(json.dumps({"datasets": [str(d) for d in args.datasets], "models": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
