"""RA-BC sample weights (DESIGN.md "Reward-aligned behaviour cloning"; LeRobot's `RABCWeights`; core's
`RabcWeights`, which `stagewise label` prints): from per-frame progress `phi`,

    r_i = phi[min(i + chunk, last)] - phi[i]           (within an episode)
    mu = max(mean r, 0), sigma = max(std r, eps)        (over the whole dataset)
    soft = clip((r - (mu - 2 sigma)) / (4 sigma + eps), 0, 1)
    w = 1 if r > kappa, soft if 0 <= r <= kappa, 0 if r < 0        (kappa = 0.01, eps = 1e-6)

Deltas are taken in float64 and cast to float32 for the rest, as LeRobot does; benches/bc_rabc.py checks these
weights against `stagewise label --weights-csv` on the same progress (max |diff| 0 on 233k frames)."""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

EPS = 1e-6


def rabc_deltas(progress: np.ndarray, episode: np.ndarray, frame: np.ndarray, chunk: int) -> np.ndarray:
    """`r_i = phi[min(i + chunk, last)] - phi[i]` per episode, in float64, in the input's row order."""
    if chunk < 1:
        raise ValueError(f"RA-BC chunk must be >= 1, got {chunk}")
    delta = np.zeros(len(progress), dtype=np.float64)
    for e in np.unique(episode):
        rows = np.flatnonzero(episode == e)
        rows = rows[np.argsort(frame[rows], kind="stable")]
        p = progress[rows].astype(np.float64)
        ahead = np.minimum(np.arange(len(rows)) + chunk, len(rows) - 1)
        delta[rows] = p[ahead] - p
    return delta


def rabc_weights(progress: np.ndarray, episode: np.ndarray, frame: np.ndarray, chunk: int,
                 kappa: float = 0.01, eps: float = EPS) -> Tuple[np.ndarray, np.ndarray]:
    """Per-frame RA-BC weights (float32) and the deltas `r` (float64) they came from."""
    delta = rabc_deltas(progress, episode, frame, chunk)
    mu = max(delta.mean(), 0.0)
    sigma = max(delta.std(), eps)
    d = delta.astype(np.float32)
    lower, denom = np.float32(mu - 2.0 * sigma), np.float32(4.0 * sigma + eps)
    soft = np.clip((d - lower) / denom, np.float32(0), np.float32(1))
    w = np.where(d > np.float32(kappa), np.float32(1), np.where(d >= 0, soft, np.float32(0)))
    return w.astype(np.float32), delta


def weight_summary(w: np.ndarray, delta: np.ndarray) -> Dict[str, float]:
    """The numbers `stagewise label` prints for the same weights."""
    return {"frames": int(len(w)), "mean_weight": float(w.mean()), "num_zero_weight": int((w == 0).sum()),
            "num_full_weight": int((w == 1).sum()), "delta_mean": float(delta.mean()),
            "delta_std": float(delta.std())}
