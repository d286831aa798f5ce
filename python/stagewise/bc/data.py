"""Reading a LeRobot v3 dataset (meta/info.json + data/chunk-*/file-*.parquet) and its per-frame progress
(`sarm_progress.parquet`: `index, episode_index, frame_index, progress_sparse[, progress_dense]`, as
`stagewise label` writes it and LeRobot's RA-BC reads it) into the arrays BC trains on. Every check runs here,
before any training: a missing file or column is named, a progress file for another dataset is refused."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from ..errors import StagewiseError

STATE, ACTION = "observation.state", "action"
FRAME_COLUMNS = ["index", "episode_index", "frame_index", STATE, ACTION]
PROGRESS_FILE = "sarm_progress.parquet"
RECORD_META = "meta/stagewise_record.json"


class BCDataError(StagewiseError, ValueError):
    """A dataset, progress file or output directory that BC cannot use; the message names the file and field."""


@dataclass
class Frames:
    """Every frame of a dataset, in file order (index, episode, frame, state [N, S], action [N, A])."""

    root: Path
    files: List[Path]
    index: np.ndarray
    episode: np.ndarray
    frame: np.ndarray
    state: np.ndarray
    action: np.ndarray
    state_names: Optional[List[str]]
    extra: Dict[str, np.ndarray]

    def last_frames(self) -> np.ndarray:
        """True at each episode's last frame (`stagewise record` leaves its action zero: nothing follows it)."""
        last = np.zeros(len(self.index), dtype=bool)
        for e in np.unique(self.episode):
            rows = np.flatnonzero(self.episode == e)
            last[rows[np.argmax(self.frame[rows])]] = True
        return last


def _info(root: Path) -> dict:
    if not root.is_dir():
        raise BCDataError(f"{root}: no such dataset directory")
    path = root / "meta/info.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise BCDataError(f"{path}: missing (not a LeRobot v3 dataset?)") from None
    except json.JSONDecodeError as e:
        raise BCDataError(f"{path}: not JSON: {e}") from None


def _names(info: dict, path: Path, key: str) -> Optional[List[str]]:
    names = info.get("features", {}).get(key, {}).get("names")
    if isinstance(names, dict) and len(names) == 1:  # LeRobot also writes {"motors": [...]}
        names = next(iter(names.values()))
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise BCDataError(f"{path}: features.{key}.names is not a list of field names: {names!r}")
    return names


def load_frames(root: Path, extra_columns: List[str] = ()) -> Frames:
    """Reads the columns BC needs (and `extra_columns`) from every data file; names the file and column missing."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    root = Path(root)
    info = _info(root)
    files = sorted((root / "data").glob("*/*.parquet"))
    if not files:
        raise BCDataError(f"{root / 'data'}: no parquet files (data/chunk-*/file-*.parquet)")
    cols = FRAME_COLUMNS + [c for c in extra_columns if c not in FRAME_COLUMNS]
    tables = []
    for f in files:
        have = set(pq.read_schema(f).names)
        for c in cols:
            if c not in have:
                raise BCDataError(f"{f}: no column {c!r} (BC reads {', '.join(cols)})")
        tables.append(pq.read_table(f, columns=cols))
    t = pa.concat_tables(tables)

    def matrix(c: str) -> np.ndarray:
        v = t.column(c).combine_chunks()
        # `stagewise record` writes fixed-size lists; other writers plain lists of one length
        if pa.types.is_list(v.type) or pa.types.is_large_list(v.type):
            lengths = pc.list_value_length(v).to_numpy(zero_copy_only=False)
            if len(lengths) and (lengths != lengths[0]).any():
                row = int(np.flatnonzero(lengths != lengths[0])[0])
                raise BCDataError(f"{root}: column {c!r} has {lengths[row]} values at row {row}, {lengths[0]} at row 0")
        elif not pa.types.is_fixed_size_list(v.type):
            raise BCDataError(f"{files[0]}: column {c!r} is {v.type}, not a list of floats")
        if v.null_count:
            raise BCDataError(f"{root}: column {c!r} has {v.null_count} missing (null) values")
        m = np.asarray(v.flatten().to_numpy(zero_copy_only=False), dtype=np.float32).reshape(len(v), -1)
        if not np.isfinite(m).all():
            row = int(np.flatnonzero(~np.isfinite(m).all(1))[0])
            raise BCDataError(f"{root}: column {c!r} has a non-finite value at row {row} (index "
                              f"{int(t.column('index')[row].as_py())})")
        return m

    state, action = matrix(STATE), matrix(ACTION)
    names = _names(info, root / "meta/info.json", STATE)
    if names is not None and len(names) != state.shape[1]:
        raise BCDataError(f"{root / 'meta/info.json'}: features.{STATE}.names has {len(names)} names, the "
                          f"data has {state.shape[1]} values per state")
    if action.shape[1] < 2:
        raise BCDataError(f"{files[0]}: column {ACTION!r} has {action.shape[1]} value(s); BC reads at least a "
                          "motion and the gripper")
    return Frames(root=root, files=files, index=t.column("index").to_numpy(),
                  episode=t.column("episode_index").to_numpy(), frame=t.column("frame_index").to_numpy(),
                  state=state, action=action, state_names=names,
                  extra={c: t.column(c).to_numpy() for c in cols if c not in FRAME_COLUMNS})


def load_progress(path: Path, frames: Frames, column: str) -> np.ndarray:
    """Per-frame progress from a sarm_progress.parquet, in `frames`' row order; refuses a file that does not
    match the dataset (episodes, frames per episode, frame indices) or lacks `column`."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise BCDataError(f"{path}: no progress file (write one with `stagewise label --dataset {frames.root} "
                          "--model M`, or name one with --progress)")
    cols = ["index", "episode_index", "frame_index", column]
    have = pq.read_schema(path).names
    for c in cols:
        if c not in have:
            raise BCDataError(f"{path}: no column {c!r} (columns: {', '.join(have)})")
    t = pq.read_table(path, columns=cols)
    p_idx = t.column("index").to_numpy()
    p_ep, p_fr = t.column("episode_index").to_numpy(), t.column("frame_index").to_numpy()
    _same_episodes(path, frames, p_ep)
    pos = {int(i): k for k, i in enumerate(p_idx)}
    if len(pos) != len(p_idx):
        raise BCDataError(f"{path}: column 'index' repeats values")
    rows = np.array([pos.get(int(i), -1) for i in frames.index])
    if (rows < 0).any():
        i = int(frames.index[np.argmax(rows < 0)])
        raise BCDataError(f"{path}: no row for the dataset's frame index {i}")
    if not ((p_ep[rows] == frames.episode).all() and (p_fr[rows] == frames.frame).all()):
        k = int(np.flatnonzero((p_ep[rows] != frames.episode) | (p_fr[rows] != frames.frame))[0])
        raise BCDataError(f"{path}: index {int(frames.index[k])} is episode {int(p_ep[rows[k]])} frame "
                          f"{int(p_fr[rows[k]])} there, episode {int(frames.episode[k])} frame "
                          f"{int(frames.frame[k])} in {frames.root}")
    progress = t.column(column).to_numpy().astype(np.float32)[rows]
    if not np.isfinite(progress).all():
        k = int(np.flatnonzero(~np.isfinite(progress))[0])
        raise BCDataError(f"{path}: column {column!r} is not finite at index {int(frames.index[k])}")
    return progress


def _same_episodes(path: Path, frames: Frames, p_ep: np.ndarray) -> None:
    d_eps, d_n = np.unique(frames.episode, return_counts=True)
    p_eps, p_n = np.unique(p_ep, return_counts=True)
    if len(d_eps) != len(p_eps) or (d_eps != p_eps).any():
        raise BCDataError(f"{path}: {len(p_eps)} episodes ({_span(p_eps)}), the dataset {frames.root} has "
                          f"{len(d_eps)} ({_span(d_eps)}): a progress file of another dataset?")
    if (d_n != p_n).any():
        k = int(np.flatnonzero(d_n != p_n)[0])
        raise BCDataError(f"{path}: episode {int(d_eps[k])} has {int(p_n[k])} frames there, {int(d_n[k])} in the "
                          f"dataset {frames.root} ({int(p_n.sum())} vs {int(d_n.sum())} frames in all)")


def _span(eps: np.ndarray) -> str:
    return f"{int(eps[0])}..{int(eps[-1])}" if len(eps) else "none"


def successful_episodes(root: Path) -> np.ndarray:
    """Episode indices `stagewise record` marked successful (meta/stagewise_record.json)."""
    path = Path(root) / RECORD_META
    try:
        meta = json.loads(path.read_text())
        return np.array([e["episode_index"] for e in meta["episodes"] if e["success"]], dtype=np.int64)
    except FileNotFoundError:
        raise BCDataError(f"{path}: missing; successful_only needs the success flags `stagewise record` "
                          "writes there") from None
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise BCDataError(f"{path}: no episodes[].success/episode_index ({e!r})") from None


def recorded_task(root: Path) -> Optional[str]:
    """The simulator task meta/stagewise_record.json names, if the dataset has one."""
    path = Path(root) / RECORD_META
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text()).get("task")
    except json.JSONDecodeError as e:
        raise BCDataError(f"{path}: not JSON: {e}") from None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
