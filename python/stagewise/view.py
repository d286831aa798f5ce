"""`stagewise view`: a run, an episode log or a LeRobot dataset as a Rerun recording (docs/view.md).

Three sources, one layout. Per env and episode (`env<E>/episode<K>/`; a dataset has no envs: `episode<K>/`), on
the `step` timeline (the step within the episode, so an env's episodes overlay in one plot):

- `camera/<view>`: the camera frames (a run streams them with `--stream-images`, which `run --rerun` turns on;
  a transition carries the frame after its action, so frame `t + 1` belongs to the action at `t`);
- `phi`: progress in [0, 1] of the state the action was taken in (`sarm_progress.parquet`'s `progress_sparse`
  for a dataset, `phi_dense` its `progress_dense`); `oracle_phi`: the simulator's ground truth when the source
  has it (a dataset's `progress_gt`, a transition's `oracle_phi`);
- `stage`: the reward model's stage (a dataset: its SARM annotation), `stage_probs` when the actor streams
  progress messages;
- `reward` (shaped) and `task_reward`, `success` (0/1), `action` (one series per action dimension);
- `summary`: a text line at the episode's end (return, success, final phi).

Sinks (`--rerun`): `spawn` (a Rerun viewer on this machine), `connect [ADDR]` (a viewer or `rerun --serve-grpc`
already running, default `127.0.0.1:9876`), `save FILE.rrd`.

Bad input is an error naming the file and what was wrong, and what could be read is still shown: a cut episode
log (`stagewise run` killed mid-record) views every complete record and exits with status 1 naming the byte
where it was cut; a message that does not decode is reported and skipped; a dataset without
`sarm_progress.parquet` is viewed without progress, with a warning. Live (`live`), the viewer never holds the
actor back: samples go into a bounded ring that drops the oldest (counted) when the viewer falls behind, and
the process lowers its own CPU priority; a viewer that cannot be reached is an error in this process only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .errors import StagewiseError
from .wire import decode, tensor

#: Magic line of an episode log (crates/runtime/src/log.rs).
LOG_MAGIC = b"STAGEWISE-LOG 1\n"
#: The log reader's limits (the same as the Rust reader's): a corrupt length must not allocate gigabytes.
MAX_RECORD = 256 << 20
MAX_KEY = 4096
#: Where `rerun` (and `rerun --serve-grpc`) listens for SDKs by default.
DEFAULT_VIEWER = "127.0.0.1:9876"
#: Message kinds a view shows, by the last part of their key (`stagewise/<robot>/<kind>`).
KINDS = ("transition", "progress", "episode", "steps")


class ViewError(StagewiseError):
    """A source or a viewer that cannot be used: names the file, address or field and what was wrong."""


class CutLog(ViewError):
    """An episode log whose last record is cut: everything before it was viewed."""


# --------------------------------------------------------------------------------------------------------------
# The sink: one Rerun recording stream


@dataclass
class Sink:
    """Where the recording goes: `spawn`, `connect [ADDR]` or `save FILE`."""

    mode: str
    target: Optional[str] = None

    @classmethod
    def parse(cls, words: Sequence[str]) -> "Sink":
        words = list(words)
        if not words:
            raise ViewError("--rerun needs a mode: spawn, connect [ADDR] or save FILE.rrd")
        mode, rest = words[0], words[1:]
        if mode == "spawn" and not rest:
            return cls("spawn")
        if mode == "connect" and len(rest) <= 1:
            return cls("connect", rest[0] if rest else DEFAULT_VIEWER)
        if mode == "save" and len(rest) == 1:
            return cls("save", rest[0])
        raise ViewError(
            f"--rerun {' '.join(words)}: expected `spawn`, `connect [ADDR]` (default {DEFAULT_VIEWER}) or "
            "`save FILE.rrd`"
        )

    def describe(self) -> str:
        return {"spawn": "a spawned Rerun viewer", "connect": f"the Rerun viewer at {self.target}"}.get(
            self.mode, str(self.target)
        )


def _grpc_url(addr: str) -> Tuple[str, str, int]:
    """`HOST:PORT` or a `rerun+http://HOST:PORT/proxy` URL -> (url, host, port)."""
    rest = addr.split("://", 1)[1] if "://" in addr else addr
    hostport = rest.split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ViewError(f"--rerun connect {addr}: expected HOST:PORT or rerun+http://HOST:PORT/proxy")
    url = addr if "://" in addr else f"rerun+http://{host}:{port}/proxy"
    return url, host, int(port)


def _port_open(host: str, port: int, timeout: float = 1.0) -> Optional[str]:
    """None when something accepts TCP connections at host:port, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as e:
        return e.strerror or str(e)


def open_recording(sink: Sink, name: str):
    """A Rerun recording stream sending to `sink`. A viewer that is not there is a ViewError (nothing is
    buffered for a viewer that never comes)."""
    try:
        import rerun as rr
    except ImportError:
        raise ViewError(
            f"the rerun-sdk package is not installed in {sys.executable}: run scripts/setup.sh (it pins it), or "
            "pip install './python[view]'"
        ) from None

    rec = rr.RecordingStream(application_id="stagewise", recording_id=None)
    rec.send_recording_name(name)
    if sink.mode == "save":
        path = Path(sink.target)
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        rec.save(str(path))
    elif sink.mode == "connect":
        url, host, port = _grpc_url(sink.target)
        why = _port_open(host, port)
        if why is not None:
            raise ViewError(
                f"no Rerun viewer at {sink.target} ({why}): start one there (`rerun`, in the project's "
                ".venv/bin) or write a file instead (--rerun save FILE.rrd)"
            )
        rec.connect_grpc(url)
    else:  # spawn
        _spawn_viewer(rec)
    return rec


def _spawn_viewer(rec, port: int = 9876, wait_s: float = 10.0) -> None:
    """Starts the Rerun viewer of the installed rerun-sdk (it is in this Python's bin folder) and connects to it;
    an error when it cannot show a window or does not come up."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise ViewError(
            "cannot spawn a Rerun viewer: no display (neither DISPLAY nor WAYLAND_DISPLAY is set); run a viewer "
            "where there is a screen and use --rerun connect HOST:PORT, or write a file (--rerun save FILE.rrd)"
        )
    bindir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    if _port_open("127.0.0.1", port) is None:
        rec.connect_grpc(f"rerun+http://127.0.0.1:{port}/proxy")  # a viewer is already there: use it
        return
    rec.spawn(port=port, connect=True)
    deadline = time.monotonic() + wait_s
    while _port_open("127.0.0.1", port, 0.5) is not None:
        if time.monotonic() > deadline:
            raise ViewError(f"the spawned Rerun viewer did not listen on 127.0.0.1:{port} within {wait_s:g} s")
        time.sleep(0.2)


# --------------------------------------------------------------------------------------------------------------
# The recorder: messages and dataset frames -> entities


@dataclass
class Counts:
    """What was shown and what was not."""

    transitions: int = 0
    progress: int = 0
    episodes: int = 0
    frames: int = 0
    skipped: int = 0
    dropped: int = 0
    errors: List[str] = field(default_factory=list)

    def line(self) -> str:
        s = (
            f"{self.transitions} transitions, {self.progress} progress, {self.episodes} episodes, "
            f"{self.frames} dataset frames"
        )
        if self.skipped:
            s += f", {self.skipped} messages skipped (did not decode)"
        if self.dropped:
            s += f", {self.dropped} dropped (the viewer fell behind)"
        return s


# How old buffered scalars get before they go to Rerun (what a live view lags by).
FLUSH_S = 0.25


class Recorder:
    """Logs Stagewise messages (decoded) and dataset frames to a Rerun recording stream."""

    def __init__(self, rec, frames_per_s: Optional[float] = None, by_robot: bool = False):
        """`frames_per_s`: show at most this many camera frames per second and env (live: a person cannot
        follow more, and images are most of a viewer's work); None shows every frame. `by_robot`: put each
        message under its robot's name (`<robot>/env<E>/...`: a view of several robots, e.g. the served envs
        of `serve --envs N --rerun`, each env 0 of its own robot)."""
        import rerun as rr

        self.rr = rr
        self.rec = rec
        self.counts = Counts()
        self.by_robot = by_robot
        self._frame_gap = 1.0 / frames_per_s if frames_per_s else 0.0
        self._last_frame: Dict[Tuple[str, int], float] = {}
        self._next_step: Dict[Tuple[str, int, int], int] = {}
        self._step = 0
        # Scalars wait here and go to Rerun as columns, one call per entity per flush: a `log` call per value was
        # most of the live viewer's CPU at 8 envs.
        self._columns: Dict[str, Tuple[List[int], List[np.ndarray]]] = {}
        # Batches of steps (`steps` messages) wait here as arrays: (steps, values [n] or [n, k]) per entity.
        self._chunks: Dict[str, List[Tuple[np.ndarray, np.ndarray]]] = {}
        self._buffered = 0
        self._flushed_at = time.monotonic()

    def _at(self, step: int) -> None:
        self._step = int(step)

    def _log(self, path: str, archetype: Any) -> None:
        """Logs one (non-scalar) archetype at the current step."""
        self.rec.set_time("step", sequence=self._step)
        self.rec.log(path, archetype)

    def _scalar(self, path: str, value: Any) -> None:
        """Buffers a value (a number, or a sequence of numbers: one series each) at the current step. The value is
        kept as it is and turned into arrays at the flush, one per entity: a numpy array per value was most of the
        viewer's CPU per message."""
        steps, values = self._columns.setdefault(path, ([], []))
        steps.append(self._step)
        values.append(value)
        self._buffered += 1
        if self._buffered >= 8192:
            self.flush()

    def _chunk(self, path: str, steps: np.ndarray, values: Any) -> None:
        """Buffers a column of values (one row per step; a row may be a vector) at `steps`."""
        a = np.asarray(values, dtype=np.float64)
        if a.ndim not in (1, 2) or len(a) != len(steps):
            raise ValueError(f"{path}: {a.shape} values for {len(steps)} steps")
        self._chunks.setdefault(path, []).append((steps, a))
        self._buffered += len(steps)
        if self._buffered >= 8192:
            self.flush()

    def flush(self, older_than_s: float = 0.0) -> None:
        """Sends the buffered scalars; with `older_than_s`, only when the last flush is older than that."""
        if older_than_s and time.monotonic() - self._flushed_at < older_than_s:
            return
        for path, chunks in self._chunks.items():
            steps = np.concatenate([c[0] for c in chunks])
            widths = {c[1].shape[1] if c[1].ndim == 2 else 1 for c in chunks}
            if len(widths) == 1:
                flat = np.concatenate([c[1].reshape(-1) for c in chunks])
                sizes = [widths.pop()] * len(steps)
            else:  # rows of different widths (a model with another stage count mid-run: not expected)
                rows = [r.reshape(-1) for c in chunks for r in (c[1] if c[1].ndim == 2 else c[1][:, None])]
                flat, sizes = np.concatenate(rows), [r.size for r in rows]
            column = self.rr.Scalars.columns(scalars=flat).partition(sizes)
            self.rec.send_columns(path, indexes=[self.rr.TimeColumn("step", sequence=steps)], columns=column)
        self._chunks.clear()
        for path, (steps, values) in self._columns.items():
            try:  # every value the same length: one array, rows of equal size
                a = np.asarray(values, dtype=np.float64)
                flat, sizes = a.reshape(-1), [a.shape[1] if a.ndim == 2 else 1] * len(values)
                if a.ndim > 2:
                    raise ValueError("nested")
            except ValueError:  # vectors of different lengths
                parts = [np.asarray(v, dtype=np.float64).reshape(-1) for v in values]
                flat, sizes = np.concatenate(parts), [p.size for p in parts]
            column = self.rr.Scalars.columns(scalars=flat).partition(sizes)
            self.rec.send_columns(path, indexes=[self.rr.TimeColumn("step", sequence=steps)], columns=column)
        self._columns.clear()
        self._buffered = 0
        self._flushed_at = time.monotonic()

    def _path(self, m: Dict[str, Any]) -> str:
        """`env<E>/episode<K>` of a message, under `<robot>/` when the view is by robot."""
        p = f"env{int(m['env'])}/episode{int(m['episode'])}"
        return f"{m['robot']}/{p}" if self.by_robot else p

    def transition(self, m: Dict[str, Any], key: str = "?") -> None:
        env, ep, t = int(m["env"]), int(m["episode"]), int(m["step"])
        robot = str(m.get("robot", "")) if self.by_robot else ""
        p = self._path(m)
        # Steps of an episode that never arrived were dropped on the way (a live viewer behind, or joined late).
        self.counts.dropped += max(t - self._next_step.get((robot, env, ep), 0), 0)
        self._next_step[(robot, env, ep)] = t + 1
        self._at(t)
        self._scalar(f"{p}/phi", float(m["phi"]))
        self._scalar(f"{p}/reward", float(m["reward"]))
        self._scalar(f"{p}/task_reward", float(m["task_reward"]))
        action = [float(a) for a in m["action"]]
        if action:
            self._scalar(f"{p}/action", action)
        self._at(t + 1)
        self._scalar(f"{p}/success", float(bool(m["success"])))
        if m.get("oracle_phi") is not None:  # the simulator's progress of the next state: beside phi at t + 1
            self._scalar(f"{p}/oracle_phi", float(m["oracle_phi"]))
        if m.get("stage") is not None:
            self._scalar(f"{p}/stage", int(m["stage"]))
        self._frames(p, (robot, env), m.get("next_obs"), key)
        self.counts.transitions += 1

    def _frames(self, p: str, who: Tuple[str, int], obs: Optional[Dict[str, Any]], key: str) -> None:
        """Logs `obs`'s RGB frames under `p/camera/<view>` at the current step, unless the env `who`'s last ones
        are less than the frame gap old (`frames_per_s`)."""
        if obs is None:
            return
        if self._frame_gap:
            now = time.monotonic()
            if now - self._last_frame.get(who, -1e9) < self._frame_gap:
                return
            self._last_frame[who] = now
        for view, img in (obs.get("images") or {}).items():
            a = tensor(img, key, f"next_obs.images[{view!r}]")
            self._log(f"{p}/camera/{view}", self.rr.Image(a, color_model="RGB"))

    def steps(self, m: Dict[str, Any], key: str = "?") -> None:
        """A batch of one env's consecutive steps (`serve --rerun`): its columns go to Rerun as columns, no Python
        per step."""
        env, ep, t0 = int(m["env"]), int(m["episode"]), int(m["step"])
        n = len(m["reward"])
        for name in ("phi", "task_reward", "action", "success", "oracle_phi", "stage", "stage_probs"):
            have = len(m.get(name) or [])
            if have != n and (have or name in ("phi", "task_reward", "action", "success")):
                raise ValueError(f"`steps` message: {have} values of `{name}` for {n} steps")
        robot = str(m.get("robot", "")) if self.by_robot else ""
        p = self._path(m)
        self.counts.dropped += max(t0 - self._next_step.get((robot, env, ep), 0), 0)
        self._next_step[(robot, env, ep)] = t0 + n
        at = np.arange(t0, t0 + n, dtype=np.int64)
        after = at + 1
        for name in ("phi", "reward", "task_reward"):
            self._chunk(f"{p}/{name}", at, m[name])
        if n and len(m["action"][0]):
            self._chunk(f"{p}/action", at, m["action"])
        self._chunk(f"{p}/success", after, np.asarray(m["success"], dtype=bool))
        for name in ("oracle_phi", "stage", "stage_probs"):  # empty when the source has none
            if m.get(name):
                self._chunk(f"{p}/{name}", after, m[name])
        self._at(t0 + n)  # the frames are of the state after the last row's action
        self._frames(p, (robot, env), m.get("next_obs"), key)
        self.counts.transitions += n

    def progress(self, m: Dict[str, Any]) -> None:
        probs = m.get("stage_probs") or []
        if probs:
            p = self._path(m)
            self._at(int(m["step"]))
            self._scalar(f"{p}/stage_probs", [float(x) for x in probs])
        self.counts.progress += 1

    def episode(self, m: Dict[str, Any]) -> None:
        p = self._path(m)
        self._at(int(m["length"]))
        self._log(
            f"{p}/summary",
            self.rr.TextLog(
                f"episode {m['episode']} of env {m['env']}: {m['length']} steps, return {m['return']:+.4f}, "
                f"task return {m['task_return']:+.4f}, success {m['success']}, final phi {m['final_phi']:.3f}"
                + (" (terminated)" if m.get("terminated") else " (truncated)" if m.get("truncated") else ""),
                level="INFO" if m["success"] else "WARN",
            ),
        )
        self.counts.episodes += 1

    def message(self, key: str, payload: bytes) -> None:
        """One wire message on `key`; a message that does not decode is reported and skipped."""
        kind = key.rsplit("/", 1)[-1]
        if kind not in KINDS:
            return
        try:
            m = decode(payload, kind, key)
            if kind == "transition":
                self.transition(m, key)
            elif kind == "steps":
                self.steps(m, key)
            elif kind == "progress":
                self.progress(m)
            else:
                self.episode(m)
            self.flush(older_than_s=FLUSH_S)
        except (StagewiseError, KeyError, TypeError, ValueError) as e:
            self.counts.skipped += 1
            why = str(e) if isinstance(e, StagewiseError) else f"`{key}`: {kind} message: {e!r}"
            if len(self.counts.errors) < 20:
                self.counts.errors.append(why)
            warnings.warn(f"skipped a message: {why}", RuntimeWarning, stacklevel=2)


# --------------------------------------------------------------------------------------------------------------
# Episode logs


def read_log(path: Path) -> Iterator[Tuple[str, bytes]]:
    """The records of an episode log, in order. A cut last record raises CutLog after every complete record
    was yielded; a corrupt record (implausible length, key not UTF-8) raises ViewError where it is."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise ViewError(f"{path}: cannot open the episode log ({e.strerror or e})") from None
    with f:
        magic = f.read(len(LOG_MAGIC))
        if magic != LOG_MAGIC:
            raise ViewError(
                f"{path}: not a Stagewise episode log (it starts with {magic[:16]!r}, expected {LOG_MAGIC!r})"
            )
        offset, records = len(LOG_MAGIC), 0

        def cut(part: str, have: int) -> CutLog:
            size = path.stat().st_size
            return CutLog(
                f"{path}: the log is cut at byte {offset} (its last record stops in its {part}, "
                f"{size - offset} bytes; {have} complete records before it were viewed): the actor was stopped "
                "mid-write"
            )

        while True:
            head = f.read(4)
            if not head:
                return
            if len(head) < 4:
                raise cut("key length", records)
            (klen,) = struct.unpack("<I", head)
            if klen == 0 or klen > MAX_KEY:
                raise ViewError(f"{path}: corrupt record at byte {offset}: key length {klen} (1..={MAX_KEY})")
            kb = f.read(klen)
            if len(kb) < klen:
                raise cut("key", records)
            try:
                key = kb.decode("utf-8")
            except UnicodeDecodeError:
                raise ViewError(f"{path}: corrupt record at byte {offset}: its key is not UTF-8") from None
            head = f.read(4)
            if len(head) < 4:
                raise cut("payload length", records)
            (plen,) = struct.unpack("<I", head)
            if plen > MAX_RECORD:
                raise ViewError(
                    f"{path}: corrupt record at byte {offset}: payload length {plen} is over {MAX_RECORD}"
                )
            payload = f.read(plen)
            if len(payload) < plen:
                raise cut("payload", records)
            yield key, payload
            records += 1
            offset += 8 + klen + plen


def view_log(path: Path, recorder: Recorder) -> None:
    """Every message of an episode log into `recorder` (a cut log: every complete record, then CutLog)."""
    for key, payload in read_log(path):
        recorder.message(key, payload)


# --------------------------------------------------------------------------------------------------------------
# LeRobot v3 datasets


def _read_parquets(files: List[Path], what: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not files:
        raise ViewError(f"{what}: no parquet files")
    tables = []
    for f in files:
        try:
            tables.append(pq.read_table(f))
        except (OSError, pa.ArrowException) as e:
            raise ViewError(f"{f}: cannot read the parquet file ({e})") from None
    return pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]


def _column(table, name: str, where: Path) -> list:
    if name not in table.column_names:
        raise ViewError(f"{where}: no column `{name}`")
    return table.column(name).to_pylist()


@dataclass
class Dataset:
    root: Path
    info: Dict[str, Any]
    episodes: Dict[int, Dict[str, Any]]
    cameras: List[Tuple[str, str]]  # (feature key, "image" | "video")

    @classmethod
    def open(cls, root: Path) -> "Dataset":
        info_path = root / "meta" / "info.json"
        try:
            info = json.loads(info_path.read_text())
        except OSError as e:
            raise ViewError(f"{info_path}: cannot read ({e.strerror or e}): is {root} a LeRobot v3 dataset?") from None
        except json.JSONDecodeError as e:
            raise ViewError(f"{info_path}: not JSON ({e})") from None
        for k in ("fps", "features", "data_path"):
            if k not in info:
                raise ViewError(f"{info_path}: no field `{k}`")
        if not str(info.get("codebase_version", "")).startswith("v3"):
            raise ViewError(f"{info_path}: codebase_version {info.get('codebase_version')!r}, expected v3.x")
        ep_files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        table = _read_parquets(ep_files, str(root / "meta" / "episodes"))
        rows = table.to_pylist()
        episodes = {int(r["episode_index"]): r for r in rows}
        cameras = [
            (k, f["dtype"])
            for k, f in info["features"].items()
            if isinstance(f, dict) and f.get("dtype") in ("image", "video")
        ]
        return cls(root, info, episodes, cameras)

    def data(self, episode: int):
        ep = self.episodes[episode]
        rel = self.info["data_path"].format(
            chunk_index=int(ep["data/chunk_index"]), file_index=int(ep["data/file_index"])
        )
        import pyarrow.compute as pc

        table = _read_parquets([self.root / rel], str(self.root / rel))
        table = table.filter(pc.equal(table.column("episode_index"), episode))
        return table.sort_by("frame_index"), self.root / rel

    def video_frames(self, key: str, episode: int, length: int) -> np.ndarray:
        """The episode's frames of video camera `key`, decoded by ffmpeg: uint8 [length, h, w, 3]."""
        ep = self.episodes[episode]
        feat = self.info["features"][key]
        h, w = int(feat["shape"][0]), int(feat["shape"][1])
        rel = self.info["video_path"].format(
            video_key=key,
            chunk_index=int(ep[f"videos/{key}/chunk_index"]),
            file_index=int(ep[f"videos/{key}/file_index"]),
        )
        path = self.root / rel
        if not path.is_file():
            raise ViewError(f"{path}: no such video file (camera `{key}`, episode {episode})")
        fps = float(self.info["fps"])
        start = max(float(ep[f"videos/{key}/from_timestamp"]) - 0.5 / fps, 0.0)
        ffmpeg = os.environ.get("STAGEWISE_FFMPEG", "ffmpeg")
        cmd = [ffmpeg, "-v", "error", "-ss", f"{start:.6f}", "-i", str(path), "-frames:v", str(length),
               "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]  # fmt: skip
        try:
            out = subprocess.run(cmd, capture_output=True, check=False)
        except FileNotFoundError:
            raise ViewError(
                f"{ffmpeg}: not found; video datasets need ffmpeg (scripts/setup.sh installs it)"
            ) from None
        if out.returncode != 0:
            raise ViewError(f"{path}: ffmpeg could not decode it: {out.stderr.decode(errors='replace')[-300:]}")
        n = len(out.stdout) // (h * w * 3)
        if n < length:
            raise ViewError(f"{path}: {n} frames from {start:.3f} s, episode {episode} has {length}")
        return np.frombuffer(out.stdout[: length * h * w * 3], np.uint8).reshape(length, h, w, 3)


def _progress(root: Path) -> Optional[Dict[int, Tuple[float, Optional[float]]]]:
    """`sarm_progress.parquet` by global `index`: (sparse, dense or None); None when the file is absent."""
    path = root / "sarm_progress.parquet"
    if not path.exists():
        return None
    t = _read_parquets([path], str(path))
    index = _column(t, "index", path)
    sparse = _column(t, "progress_sparse", path)
    dense = t.column("progress_dense").to_pylist() if "progress_dense" in t.column_names else [None] * len(index)
    return {int(i): (s, d) for i, s, d in zip(index, sparse, dense)}


def _stages(ep: Dict[str, Any], length: int) -> Optional[np.ndarray]:
    starts = ep.get("sparse_subtask_start_frames") or ep.get("subtask_start_frames")
    if not starts:
        return None
    stage = np.zeros(length, dtype=np.int64)
    for k, s in enumerate(starts):
        stage[int(s) :] = k
    return stage


def view_dataset(root: Path, recorder: Recorder, episodes: Optional[List[int]] = None) -> List[str]:
    """The dataset's episodes (all, or `episodes`) into `recorder`; returns the warnings it gave."""
    import rerun as rr

    ds = Dataset.open(root)
    said: List[str] = []
    progress = _progress(root)
    if progress is None:
        said.append(
            f"{root}: no sarm_progress.parquet: the view has no progress (phi); write it with `stagewise label`"
        )
        warnings.warn(said[-1], RuntimeWarning, stacklevel=2)
    wanted = sorted(ds.episodes) if episodes is None else episodes
    for e in wanted:
        if e not in ds.episodes:
            raise ViewError(f"{root}: no episode {e} (it has {len(ds.episodes)}: 0..{len(ds.episodes) - 1})")
        table, file = ds.data(e)
        n = table.num_rows
        frames = _column(table, "frame_index", file)
        index = _column(table, "index", file)
        action = table.column("action").to_pylist() if "action" in table.column_names else None
        oracle = table.column("progress_gt").to_pylist() if "progress_gt" in table.column_names else None
        reward = table.column("next.reward").to_pylist() if "next.reward" in table.column_names else None
        stage = _stages(ds.episodes[e], n)
        p = f"episode{e}"
        for key, kind in ds.cameras:
            view = key.rsplit(".", 1)[-1]
            if kind == "image":
                cells = _column(table, key, file)
                for f, cell in zip(frames, cells):
                    recorder._at(f)
                    data = cell.get("bytes") if isinstance(cell, dict) else None
                    if not data:
                        raise ViewError(f"{file}: column `{key}`, frame {f} of episode {e}: no embedded image bytes")
                    recorder._log(f"{p}/camera/{view}", rr.EncodedImage(contents=data, media_type="image/png"))
            else:
                for f, img in zip(frames, ds.video_frames(key, e, n)):
                    recorder._at(f)
                    recorder._log(f"{p}/camera/{view}", rr.Image(img, color_model="RGB"))
        for i, f in enumerate(frames):
            recorder._at(f)
            if progress is not None and int(index[i]) in progress:
                sparse, dense = progress[int(index[i])]
                if sparse is not None and not np.isnan(sparse):
                    recorder._scalar(f"{p}/phi", sparse)
                if dense is not None and not np.isnan(dense):
                    recorder._scalar(f"{p}/phi_dense", dense)
            if oracle is not None:
                recorder._scalar(f"{p}/oracle_phi", oracle[i])
            if stage is not None:
                recorder._scalar(f"{p}/stage", stage[i])
            if reward is not None:
                recorder._scalar(f"{p}/reward", reward[i])
            if action is not None and action[i] is not None:
                recorder._scalar(f"{p}/action", np.asarray(action[i], dtype=np.float64))
        ok = ds.episodes[e].get("success")
        if ok is not None:
            recorder._at(frames[-1] if frames else 0)
            recorder._scalar(f"{p}/success", float(bool(ok)))
            recorder._log(
                f"{p}/summary",
                rr.TextLog(f"episode {e}: {n} frames, success {bool(ok)}", level="INFO" if ok else "WARN"),
            )
        recorder.counts.frames += n
        recorder.counts.episodes += 1
    return said


def episode_frames(ds: Dataset, e: int, view: Optional[str], table, file: Path) -> Tuple[str, np.ndarray]:
    """(camera key, uint8 [n, h, w, 3]) of episode `e`'s frames of camera `view` (default the first)."""
    if not ds.cameras:
        raise ViewError(f"{ds.root}: the dataset has no camera")
    keys = {k.rsplit(".", 1)[-1]: (k, kind) for k, kind in ds.cameras}
    name = view or next(iter(keys))
    if name not in keys:
        raise ViewError(f"{ds.root}: no camera `{name}` (it has: {', '.join(keys)})")
    key, kind = keys[name]
    if kind == "video":
        return key, ds.video_frames(key, e, table.num_rows)
    import io

    from PIL import Image

    out = []
    for f, cell in zip(_column(table, "frame_index", file), _column(table, key, file)):
        data = cell.get("bytes") if isinstance(cell, dict) else None
        if not data:
            raise ViewError(f"{file}: column `{key}`, frame {f} of episode {e}: no embedded image bytes")
        out.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
    return key, np.stack(out)


def write_sheet(root: Path, e: int, out: Path, every: int = 0, view: Optional[str] = None,
                tiles: int = 40) -> Dict[str, Any]:
    """A labelling sheet of episode `e`: every `every`-th frame of camera `view` (default: the first camera; every:
    about `tiles` frames in all) with its frame index, above the episode's progress (`sarm_progress.parquet`, and
    the recorder's ground truth when the dataset has it) with the current stage starts drawn: what a person reads
    stage-start frames and success from (`stagewise annotate --from`). Returns what it drew."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = Dataset.open(root)
    if e not in ds.episodes:
        raise ViewError(f"{root}: no episode {e} (it has {len(ds.episodes)}: 0..{len(ds.episodes) - 1})")
    table, file = ds.data(e)
    n = table.num_rows
    key, frames = episode_frames(ds, e, view, table, file)
    every = every or max(1, -(-n // tiles))
    shown = list(range(0, n, every))
    if shown[-1] != n - 1:
        shown.append(n - 1)
    cols = min(10, len(shown))
    rows_ = -(-len(shown) // cols)
    fig = plt.figure(figsize=(1.6 * cols, 1.7 * rows_ + 3.2))
    grid = fig.add_gridspec(rows_ + 2, cols, height_ratios=[1] * rows_ + [0.25, 2.2])
    for k, f in enumerate(shown):
        ax = fig.add_subplot(grid[k // cols, k % cols])
        ax.imshow(frames[f])
        ax.set_title(f"{f}", fontsize=8)
        ax.axis("off")
    ax = fig.add_subplot(grid[rows_ + 1, :])
    progress = _progress(root)
    index = _column(table, "index", file)
    drawn = {"frames": shown, "camera": key, "progress": False, "ground_truth": False}
    if progress is not None:
        phi = [progress.get(int(i), (np.nan, None))[0] for i in index]
        ax.plot(range(n), phi, label="model progress (sarm_progress.parquet)")
        drawn["progress"] = True
    if "progress_gt" in table.column_names:
        ax.plot(range(n), table.column("progress_gt").to_pylist(), "--", label="recorder's ground truth")
        drawn["ground_truth"] = True
    ep = ds.episodes[e]
    names = ep.get("sparse_subtask_names") or []
    for k, s0 in enumerate(ep.get("sparse_subtask_start_frames") or []):
        ax.axvline(int(s0), color="grey", lw=0.8)
        ax.text(int(s0), 1.02, names[k] if k < len(names) else str(k), fontsize=8, rotation=45)
    for f in shown:
        ax.axvline(f, color="grey", lw=0.3, ls=":")
    ax.set_xlim(0, max(n - 1, 1))
    ax.set_ylim(-0.02, 1.1)
    ax.set_xlabel("frame")
    ax.set_ylabel("progress")
    if drawn["progress"] or drawn["ground_truth"]:
        ax.legend(loc="lower right", fontsize=8)
    ok = ep.get("success")
    fig.suptitle(f"{root.name}: episode {e}, {n} frames, camera {key}"
                 + ("" if ok is None else f", success {bool(ok)}")
                 + ("" if progress is not None else " (no sarm_progress.parquet: `stagewise label` draws it)"))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return drawn


# --------------------------------------------------------------------------------------------------------------
# Live: a running actor's stream


def view_live(
    recorder: Recorder,
    robots: Sequence[str],
    connect: Sequence[str],
    config_file: Optional[str] = None,
    ring: int = 256,
    idle_exit_s: Optional[float] = None,
    stop_after: Optional[int] = None,
    until_stdin_closes: bool = False,
) -> None:
    """Subscribes to `stagewise/<robot>/{transition,progress,episode}` of each of `robots` and shows what
    arrives until Ctrl-C (or `idle_exit_s` seconds without a message once something arrived, e.g. when the actor
    ended). Samples wait in a ring of `ring` per key that drops the oldest when the viewer falls behind
    (counted): zenoh's receiving thread never waits on this process, so a slow viewer never slows the actor. With
    `until_stdin_closes` it also ends when its standard input closes (`run --rerun` and `serve --rerun` close it
    when they end, or died), after showing what had arrived."""
    import threading

    import zenoh

    from .session import open_session

    session = open_session(list(connect) or None, config_file=config_file)
    subs = {}
    try:
        # Transitions and steps last: a sender waiting for its transition (run --rerun) or steps (serve --rerun)
        # subscriber then finds the progress and episode subscribers already there.
        for kind in ("progress", "episode", "steps", "transition"):
            for robot in robots:
                subs[(robot, kind)] = session.declare_subscriber(
                    f"stagewise/{robot}/{kind}", zenoh.handlers.RingChannel(ring)
                )
        for robot in robots:
            print(f"view: listening on stagewise/{robot}/{{{','.join(KINDS)}}}", file=sys.stderr, flush=True)
        stop = threading.Event()
        if until_stdin_closes:

            def watch() -> None:
                try:
                    while sys.stdin.buffer.read(4096):
                        pass
                finally:
                    stop.set()

            threading.Thread(target=watch, daemon=True).start()
        last = None
        shown = 0
        ending = None
        while True:
            got = False
            for sub in subs.values():
                for _ in range(64):  # at most 64 per key in turn: no key starves the others
                    s = sub.try_recv()
                    if s is None:
                        break
                    got = True
                    shown += 1
                    recorder.message(str(s.key_expr), s.payload.to_bytes())
            now = time.monotonic()
            if got:
                last = now
            elif last is not None and idle_exit_s is not None and now - last > idle_exit_s:
                return
            if stop.is_set() and ending is None:
                ending = now + 0.5  # what is still on its way arrives, then the rings are drained
            if ending is not None and now > ending and not got:
                return
            if stop_after is not None and shown >= stop_after:
                return
            if not got:
                recorder.flush(older_than_s=FLUSH_S)
                time.sleep(0.005)
    finally:
        for sub in subs.values():
            sub.undeclare()
        session.close()


# --------------------------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stagewise view",
        description="Show a run, an episode log or a LeRobot dataset in Rerun (docs/view.md).",
    )
    sub = p.add_subparsers(dest="source", required=True)
    rerun_help = (
        "where the recording goes: `spawn` (a viewer on this machine), `connect [ADDR]` (a running viewer, "
        f"default {DEFAULT_VIEWER}), `save FILE.rrd`"
    )
    lg = sub.add_parser("log", help="an episode log written by `stagewise run` (--log-file, out/run.swlog)")
    lg.add_argument("path", type=Path)
    ds = sub.add_parser("dataset", help="a LeRobot v3 dataset (with its sarm_progress.parquet when present)")
    ds.add_argument("path", type=Path)
    ds.add_argument("--episodes", help="comma-separated episode indices (default: all)")
    sh = sub.add_parser("sheet", help="a PNG labelling sheet of one dataset episode: its frames with their indices "
                        "above its progress and stage starts (what a person labels stage starts and success from)")
    sh.add_argument("path", type=Path)
    sh.add_argument("--episode", type=int, required=True)
    sh.add_argument("--out", type=Path, required=True, help="the PNG to write")
    sh.add_argument("--every", type=int, default=0, help="every N-th frame (default: about 40 frames in all)")
    sh.add_argument("--camera", help="camera view (default: the dataset's first)")
    lv = sub.add_parser("live", help="a running `stagewise run`'s stream")
    lv.add_argument(
        "--robot",
        action="append",
        default=[],
        help="the actor's --robot-name (default sim0); given more than once, each robot's stream is shown under "
        "its name (`<robot>/env<E>/...`)",
    )
    lv.add_argument("--connect", action="append", default=[], help="zenoh endpoint (default tcp/127.0.0.1:7447)")
    lv.add_argument("--zenoh-config", help="zenoh JSON5 config file")
    lv.add_argument("--ring", type=int, default=256, help="samples kept per key while the viewer is behind")
    lv.add_argument("--idle-exit", type=float, default=None, help="exit after S seconds without a message")
    lv.add_argument(
        "--frames-per-s",
        type=float,
        default=10.0,
        help="camera frames shown per second and env (default 10; 0 = every frame); scalars are all shown",
    )
    lv.add_argument("--nice", type=int, default=10, help="lower this process's CPU priority by N (default 10)")
    lv.add_argument(
        "--until-stdin-closes", action="store_true", help="end when standard input closes (run --rerun's child)"
    )
    for s in (lg, ds, lv):
        s.add_argument("--rerun", nargs="+", required=True, metavar="MODE", help=rerun_help)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    warnings.simplefilter("default")
    warnings.formatwarning = lambda msg, cat, *a, **k: f"view: warning: {msg}\n"
    if args.source == "sheet":
        try:
            drawn = write_sheet(args.path, args.episode, args.out, args.every, args.camera)
        except ViewError as e:
            print(f"view: error: {e}", file=sys.stderr)
            return 1
        print(f"view: episode {args.episode}: {len(drawn['frames'])} frames of {drawn['camera']}"
              f"{', progress' if drawn['progress'] else ''} -> {args.out}", file=sys.stderr)
        return 0
    try:
        sink = Sink.parse(args.rerun)
        if args.source == "live" and args.nice:
            os.nice(args.nice)
        robots = (getattr(args, "robot", None) or ["sim0"]) if args.source == "live" else []
        name = {"log": lambda: args.path.name, "dataset": lambda: args.path.name}.get(
            args.source, lambda: f"live {' '.join(robots)}"
        )()
        rec = open_recording(sink, name)
        recorder = Recorder(rec, getattr(args, "frames_per_s", None), by_robot=len(robots) > 1)
    except ViewError as e:
        print(f"view: error: {e}", file=sys.stderr)
        return 2
    status = 0
    try:
        if args.source == "log":
            view_log(args.path, recorder)
        elif args.source == "dataset":
            try:
                eps = [int(x) for x in args.episodes.split(",")] if args.episodes else None
            except ValueError:
                raise ViewError(f"--episodes {args.episodes}: expected comma-separated episode indices") from None
            view_dataset(args.path, recorder, eps)
        else:
            view_live(
                recorder,
                robots,
                args.connect,
                args.zenoh_config,
                args.ring,
                args.idle_exit,
                until_stdin_closes=args.until_stdin_closes,
            )
    except ViewError as e:
        print(f"view: error: {e}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:
        pass
    finally:
        recorder.flush()
        rec.flush()
        rec.disconnect()
    print(f"view: {recorder.counts.line()} -> {sink.describe()}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
