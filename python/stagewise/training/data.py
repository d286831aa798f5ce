"""Reads a dataset written by `stagewise record` (LeRobot v3 layout) into numpy arrays.

Every frame: uint8 images per view (H, W, 3), the state vector, the ground-truth columns `progress_gt` and
`stage_gt`, `degraded`, and per episode the SARM `sparse_subtask_*` annotation and `success`.
"""

from __future__ import annotations

import glob
import io
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image


@dataclass
class Episode:
    index: int
    images: np.ndarray  # uint8 [T, V, H, W, 3]
    state: np.ndarray  # f32 [T, S]
    progress: np.ndarray  # f32 [T] oracle phi
    stage: np.ndarray  # int64 [T] oracle stage
    degraded: bool
    success: bool
    start_frames: list[int] | None = None
    end_frames: list[int] | None = None


@dataclass
class Dataset:
    root: str
    views: list[str]
    state_names: list[str]
    stage_names: list[str]
    proportions: list[float]
    episodes: list[Episode] = field(default_factory=list)


def _decode(b: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))


LABEL_COLUMNS = ("progress_gt", "stage_gt", "degraded")


def _column_or(t: pa.Table, name: str, dtype, fill) -> np.ndarray:
    """Column `name` of `t` as `dtype`, or `fill` on every row where the set lacks it."""
    if name in t.column_names:
        return np.asarray(t.column(name).to_numpy(), dtype=dtype)
    return np.full(t.num_rows, fill, dtype)


def load(
    root: str,
    stage_names: list[str] | None = None,
    proportions: list[float] | None = None,
    state_names: list[str] | None = None,
    labels: bool = True,
) -> Dataset:
    """Loads `root`. `state_names` picks those state fields, in that order (default: all of them); a name the
    dataset does not have is an error naming it. `labels=False` also reads a set without the oracle's labels
    (`progress_gt`, `stage_gt`, `degraded`: a robot's logged run, `stagewise log export`), its progress NaN and
    stage -1; with `labels=True` (training on them) a missing label column is an error naming it."""
    with open(os.path.join(root, "meta", "info.json")) as f:
        info = json.load(f)
    feats = info["features"]
    views = [k[len("observation.images."):] for k in feats if k.startswith("observation.images.")]
    all_names = list(feats["observation.state"]["names"])
    if state_names is None:
        state_names = all_names
    missing = [n for n in state_names if n not in all_names]
    if missing:
        raise SystemExit(
            f"{root}/meta/info.json: observation.state has no field(s) {missing} (it has: {', '.join(all_names)})"
        )
    cols = [all_names.index(n) for n in state_names]
    # episode metadata: success and annotations
    meta = {}
    for p in sorted(glob.glob(os.path.join(root, "meta", "episodes", "chunk-*", "file-*.parquet"))):
        t = pq.read_table(p).to_pylist()
        for row in t:
            meta[int(row["episode_index"])] = row
    props_path = os.path.join(root, "meta", "temporal_proportions_sparse.json")
    if stage_names is None:
        if not os.path.exists(props_path):
            raise SystemExit(f"{props_path}: missing (the set has no annotated clean success); stage names unknown")
        with open(props_path) as f:
            pj = json.load(f)
        stage_names = list(pj.keys())
        proportions = [float(v) for v in pj.values()]
    ds = Dataset(root, views, list(state_names), stage_names, list(proportions or []))
    files = sorted(glob.glob(os.path.join(root, "data", "chunk-*", "file-*.parquet")))
    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
    for p in files:
        t = pq.read_table(p)
        ep_idx = np.asarray(t.column("episode_index").to_numpy())
        state = np.stack(t.column("observation.state").to_pylist()).astype(np.float32)[:, cols]
        lacking = [c for c in LABEL_COLUMNS if c not in t.column_names]
        if lacking and labels:
            raise SystemExit(f"{p}: no column(s) {lacking}: the oracle's labels (a recorded set has them; a "
                             "logged run does not)")
        prog = _column_or(t, "progress_gt", np.float32, np.nan)
        stage = _column_or(t, "stage_gt", np.int64, -1)
        degr = _column_or(t, "degraded", np.int64, 0)
        # [rows, V, H, W, 3], decoded straight into one array per file (no per-frame arrays to stack: at a
        # million frames their copies and the heap they fragment would double the memory); an episode whose rows
        # are contiguous (as `stagewise record` writes them) is a view of it
        imgs = None
        for vi, v in enumerate(views):
            raw = t.column(f"observation.images.{v}").combine_chunks().field("bytes").to_pylist()
            for i, frame in enumerate(pool.map(_decode, raw)):
                if imgs is None:
                    imgs = np.empty((len(raw), len(views)) + frame.shape, np.uint8)
                imgs[i, vi] = frame
        if imgs is None:  # a set without cameras
            imgs = np.empty((t.num_rows, 0), np.uint8)
        for e in np.unique(ep_idx):
            m = ep_idx == e
            rows = np.flatnonzero(m)
            if rows[-1] - rows[0] + 1 == len(rows):
                m = slice(rows[0], rows[-1] + 1)
            row = meta.get(int(e), {})
            sf = row.get("sparse_subtask_start_frames")
            ef = row.get("sparse_subtask_end_frames")
            ds.episodes.append(
                Episode(
                    index=int(e),
                    images=imgs[m],
                    state=state[m],
                    progress=prog[m],
                    stage=stage[m],
                    degraded=bool(degr[m][0]),
                    success=bool(row.get("success", False)),
                    start_frames=list(sf) if sf is not None else None,
                    end_frames=list(ef) if ef is not None else None,
                )
            )
    pool.shutdown()
    ds.episodes.sort(key=lambda e: e.index)
    return ds


def window_indices(t: int, frames: int, stride: int) -> list[int]:
    """Frame indices of the window ending at t (oldest first), clamped at the episode start like the runtime's
    ring buffer (which fills with the first frame)."""
    return [max(0, t - (frames - 1 - i) * stride) for i in range(frames)]
