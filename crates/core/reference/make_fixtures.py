#!/usr/bin/env python3
"""Reference values for stagewise-core's metrics and RA-BC weights.

Writes crates/core/fixtures/metrics.json and crates/core/fixtures/rabc.json from fixed, seeded inputs (ties and
constants included). The Rust tests (crates/core/tests/*_fixtures.rs) load them with include_str! and must match
to 1e-9. Regenerate (from the repository root):

    .venv/bin/pip install -r crates/core/reference/requirements.txt
    .venv/bin/python crates/core/reference/make_fixtures.py

Metrics use scipy / scikit-learn directly. RA-BC re-implements, in numpy, what LeRobot does in
src/lerobot/policies/sarm/rabc.py (huggingface/lerobot, class RABCWeights: _compute_global_stats,
_compute_delta, _compute_weights), including its float32 cast of the deltas.
"""

import json
import math
from pathlib import Path

import numpy as np
import scipy
import sklearn
from scipy.stats import rankdata, spearmanr
from sklearn.metrics import accuracy_score, mean_absolute_error, roc_auc_score

OUT = Path(__file__).resolve().parent.parent / "fixtures"


def spearman0(x, y):
    """scipy's Spearman, with the project's convention: constant input (scipy: NaN) -> 0."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if np.all(x == x[0]) or np.all(y == y[0]):
        return 0.0
    rho = spearmanr(x, y).statistic
    assert math.isfinite(rho)
    return float(rho)


def progress_episode(rng, n, step=0.08, noise=0.05, decimals=None):
    """A noisy, mostly rising progress curve in [0, 1]; rounding makes ties (plateaus)."""
    p = np.clip(np.cumsum(rng.uniform(-noise, step, size=n)), 0.0, 1.0)
    if decimals is not None:
        p = np.round(p, decimals)
    return [float(v) for v in p]


def metrics_fixture():
    rng = np.random.default_rng(20260101)
    spearman_cases = []
    pairs = [
        (rng.normal(size=12), rng.normal(size=12)),
        (np.round(rng.normal(size=15)), np.round(rng.normal(size=15))),  # many ties on both sides
        (rng.integers(0, 3, size=20).astype(float), rng.normal(size=20)),  # heavy ties
        ([1.0, 2.0], [2.0, 1.0]),
        ([0.5, 0.5, 0.5, 0.5], [1.0, 2.0, 3.0, 4.0]),  # constant -> 0
        ([0.1, 0.2, 0.2, 0.4, 0.4, 0.4], [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]),
        (rng.uniform(size=40), rng.uniform(size=40)),
    ]
    for x, y in pairs:
        x = [float(v) for v in x]
        y = [float(v) for v in y]
        spearman_cases.append({"x": x, "y": y, "rho": spearman0(x, y)})

    rank_cases = []
    for v in [[3.0, 1.0, 3.0, 2.0], [0.2, 0.2, 0.2], list(np.round(rng.normal(size=25), 1))]:
        v = [float(a) for a in v]
        rank_cases.append({"values": v, "ranks": [float(r) for r in rankdata(v, method="average")]})

    episodes = [
        progress_episode(rng, 30),
        progress_episode(rng, 50, decimals=1),  # plateaus
        progress_episode(rng, 25, step=0.02, noise=0.04, decimals=2),
        [0.3] * 10,  # constant -> VOC 0
        [0.0, 1.0],
        [1.0, 0.0],
        [0.0, 0.5, 0.5, 0.4, 0.9, 1.0, 1.0],
        progress_episode(rng, 200, step=0.02, noise=0.012),
    ]
    episode_cases = []
    for phi in episodes:
        n = len(phi)
        t = np.arange(n, dtype=np.float64)
        # the model's reading of the reversed playback: here a noisy mirror of the forward reading
        phi_rev = [float(v) for v in np.clip(np.asarray(phi[::-1]) + rng.normal(0, 0.03, size=n), 0, 1)]
        voc = spearman0(phi, t)
        vroc = spearman0(phi_rev, t[::-1])
        f1 = 2 * voc * vroc / (voc + vroc) if voc > 0 and vroc > 0 else 0.0
        nr = float(np.mean(np.diff(np.asarray(phi)) < 0))
        episode_cases.append(
            {"phi": phi, "phi_reversed": phi_rev, "voc": voc, "vroc": vroc, "voc_f1": f1, "nr": nr}
        )

    stage_cases = []
    for n, k in [(40, 3), (17, 5), (1, 2)]:
        truth = rng.integers(0, k, size=n)
        pred = np.where(rng.uniform(size=n) < 0.7, truth, rng.integers(0, k, size=n))
        stage_cases.append(
            {
                "predicted": [int(v) for v in pred],
                "annotated": [int(v) for v in truth],
                "accuracy": float(accuracy_score(truth, pred)),
            }
        )

    mae_cases = []
    for n in [1, 33, 120]:
        a = rng.uniform(size=n)
        p = np.clip(a + rng.normal(0, 0.1, size=n), 0, 1)
        mae_cases.append(
            {
                "predicted": [float(v) for v in p],
                "annotated": [float(v) for v in a],
                "mae": float(mean_absolute_error(a, p)),
            }
        )

    auroc_cases = []
    for n_s, n_f, decimals in [(10, 8, None), (12, 12, 1), (3, 4, 0), (1, 1, None)]:
        s = np.clip(rng.normal(0.8, 0.15, size=n_s), 0, 1)
        f = np.clip(rng.normal(0.55, 0.2, size=n_f), 0, 1)
        scores = np.concatenate([s, f])
        if decimals is not None:
            scores = np.round(scores, decimals)  # ties across classes
        labels = np.concatenate([np.ones(n_s, dtype=bool), np.zeros(n_f, dtype=bool)])
        perm = rng.permutation(len(scores))
        scores, labels = scores[perm], labels[perm]
        auroc_cases.append(
            {
                "scores": [float(v) for v in scores],
                "labels": [bool(v) for v in labels],
                "auroc": float(roc_auc_score(labels, scores)),
            }
        )

    return {
        "generator": "crates/core/reference/make_fixtures.py",
        "versions": {"numpy": np.__version__, "scipy": scipy.__version__, "sklearn": sklearn.__version__},
        "rankdata": rank_cases,
        "spearman": spearman_cases,
        "episodes": episode_cases,
        "stage_accuracy": stage_cases,
        "progress_mae": mae_cases,
        "auroc": auroc_cases,
    }


# ---------------------------------------------------------------------------------------------------------------
# RA-BC: LeRobot's RABCWeights (src/lerobot/policies/sarm/rabc.py), re-implemented on in-memory progress.
# ---------------------------------------------------------------------------------------------------------------


def lerobot_rabc(episodes, chunk_size, kappa, epsilon=1e-6, dtype=np.float32):
    # The parquet rows: global index, episode_index, progress (frames of an episode are contiguous).
    progress_lookup, episode_lookup, bounds = {}, {}, {}
    index = 0
    for ep, phis in enumerate(episodes):
        start = index
        for p in phis:
            progress_lookup[index] = float(p)
            episode_lookup[index] = ep
            index += 1
        bounds[ep] = {"start": start, "end": index}  # end = max index + 1

    def compute_delta(global_idx):  # RABCWeights._compute_delta
        current = progress_lookup.get(global_idx)
        b = bounds[episode_lookup[global_idx]]
        future_idx = global_idx + chunk_size
        if future_idx >= b["end"]:
            future_idx = b["end"] - 1  # near the end of the episode: the last frame's progress
        return progress_lookup[future_idx] - current

    # RABCWeights._compute_global_stats: over every frame with progress; np.mean / np.std (ddof=0)
    all_deltas = [compute_delta(i) for i in progress_lookup]
    delta_mean = max(float(np.mean(all_deltas)), 0.0)
    delta_std = max(float(np.std(all_deltas)), epsilon)

    # compute_batch_weights: deltas as float32, then _compute_weights (numpy does the rest in float32)
    deltas = np.array([compute_delta(i) for i in range(index)], dtype=dtype)
    lower_bound = delta_mean - 2 * delta_std
    soft = np.clip((deltas - lower_bound) / (4 * delta_std + epsilon), 0.0, 1.0)
    weights = np.zeros_like(deltas, dtype=dtype)
    weights[deltas > kappa] = 1.0
    moderate = (deltas >= 0) & (deltas <= kappa)
    weights[moderate] = soft[moderate]

    out_w, out_d, i = [], [], 0
    for phis in episodes:
        out_w.append([float(w) for w in weights[i : i + len(phis)]])
        out_d.append([compute_delta(j) for j in range(i, i + len(phis))])
        i += len(phis)
    summary = {
        "frames": int(index),
        "mean_weight": float(np.mean(weights.astype(np.float64))),
        "num_zero_weight": int(np.sum(weights == 0)),
        "num_full_weight": int(np.sum(weights == 1.0)),
        "delta_mean": delta_mean,
        "delta_std": delta_std,
    }
    return out_d, out_w, summary


def rabc_fixture():
    rng = np.random.default_rng(7)
    datasets = {
        "mixed": [
            progress_episode(rng, 120, step=0.02, noise=0.015),
            progress_episode(rng, 80, step=0.03, noise=0.03, decimals=2),  # ties, dips
            progress_episode(rng, 7),  # shorter than the chunk
            [0.4] * 12,  # constant: every delta 0 (soft weights)
            [0.9],  # one frame
            [float(v) for v in np.clip(1 - np.cumsum(rng.uniform(0, 0.05, size=40)), 0, 1)],  # regressing
        ],
        "flat": [[0.5] * 20, [0.5] * 5],  # std 0 -> eps, all weights soft
        "regress": [[1.0, 0.8, 0.6, 0.4], [0.9, 0.7, 0.2]],  # mean < 0 -> clamped to 0
    }
    cases = []
    for name, episodes in datasets.items():
        for chunk_size, kappa in [(1, 0.01), (10, 0.01), (50, 0.01), (10, 0.1), (3, 0.0)]:
            for precision, dtype in [("le_robot_f32", np.float32), ("f64", np.float64)]:
                d, w, s = lerobot_rabc(episodes, chunk_size, kappa, dtype=dtype)
                cases.append(
                    {
                        "dataset": name,
                        "chunk_size": chunk_size,
                        "kappa": kappa,
                        "epsilon": 1e-6,
                        "precision": precision,
                        "deltas": d,
                        "weights": w,
                        "summary": s,
                    }
                )
    batch = [float(v) for v in rng.uniform(size=16)]
    batch[3] = 0.0
    norm = {"weights": batch, "epsilon": 1e-6, "normalized": [float(v) for v in np.asarray(batch) * len(batch) / (np.sum(batch) + 1e-6)]}
    return {
        "generator": "crates/core/reference/make_fixtures.py",
        "source": "huggingface/lerobot src/lerobot/policies/sarm/rabc.py (RABCWeights)",
        "versions": {"numpy": np.__version__},
        "datasets": datasets,
        "cases": cases,
        "normalize_batch": norm,
    }


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for name, data in [("metrics.json", metrics_fixture()), ("rabc.json", rabc_fixture())]:
        path = OUT / name
        path.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
