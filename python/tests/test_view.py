"""`stagewise view`: a real run's episode log, a real recorded LeRobot dataset and a live run, each written to an
.rrd and read back with the real rerun SDK (entities and their row counts); a cut log, a dataset without
progress and a viewer that is not there give clear errors and what could be shown is still shown."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from stagewise import launch
from stagewise.view import read_log
from stagewise.wire import decode

ROOT = Path(__file__).resolve().parents[2]
VIEWS = ("front", "side", "wrist")


def stagewise(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [launch.find_binary(), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def rows(rrd: Path) -> Counter:
    """Rows per entity path of a recording, read with the rerun SDK."""
    from rerun.chunk import RrdReader

    c: Counter = Counter()
    for chunk in RrdReader(rrd).stream().collect().stream():
        if not chunk.is_static:
            c[chunk.entity_path] += chunk.num_rows
    return c


def scalars(rrd: Path, entity: str) -> dict:
    """step -> value of a Scalars entity."""
    from rerun.chunk import RrdReader

    out = {}
    for chunk in RrdReader(rrd).stream().collect().stream():
        if chunk.entity_path == entity:
            b = chunk.to_record_batch()
            for step, v in zip(b.column("step").to_pylist(), b.column("Scalars:scalars").to_pylist()):
                out[step] = v[0]
    return out


@pytest.fixture(scope="module")
def run_log(tmp_path_factory) -> Path:
    """A real `stagewise run` log: 2 envs, one pick-place episode each, frames streamed, the shipped model."""
    log = tmp_path_factory.mktemp("view") / "run.swlog"
    out = stagewise("run", "--task", "pick-place", "--policy", "expert", "--envs", "2", "--episodes", "2",
                    "--width", "32", "--height", "32", "--stream-images", "--no-stream", "--log-file", str(log))  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return log


def logged(log: Path):
    """The log's transitions by (env, episode), read independently of the viewer."""
    by = {}
    for key, payload in read_log(log):
        if key.endswith("/transition"):
            m = decode(payload, "transition", key)
            by.setdefault((m["env"], m["episode"]), []).append(m)
    return by


def test_a_run_log_becomes_a_recording_with_every_step_of_every_env(run_log, tmp_path):
    rrd = tmp_path / "run.rrd"
    out = stagewise("view", "log", str(run_log), "--rerun", "save", str(rrd))
    assert out.returncode == 0, out.stderr
    by = logged(run_log)
    assert sorted(by) == [(0, 0), (1, 0)]
    got = rows(rrd)
    for (env, ep), ts in by.items():
        p = f"/env{env}/episode{ep}"
        n = len(ts)
        assert n > 50
        for name in ("phi", "reward", "task_reward", "action", "success", "stage", *(f"camera/{v}" for v in VIEWS)):
            assert got[f"{p}/{name}"] == n, (name, got)
        assert got[f"{p}/summary"] == 1
        # The values are the log's: phi at the step the action was taken.
        phi = scalars(rrd, f"{p}/phi")
        assert phi == pytest.approx({t["step"]: t["phi"] for t in ts})
        assert max(phi.values()) > 0.5
        # The simulator's own progress of the next state (`oracle_phi`, whatever the reward's source), one row
        # per transition, at the step of the state it describes (t + 1), beside the model's phi.
        assert got[f"{p}/oracle_phi"] == n, got
        oracle = scalars(rrd, f"{p}/oracle_phi")
        assert oracle == pytest.approx({t["step"] + 1: t["oracle_phi"] for t in ts})
        assert max(oracle.values()) > 0.5


def test_a_cut_log_is_an_error_and_every_complete_record_is_still_shown(run_log, tmp_path):
    data = run_log.read_bytes()
    cut = tmp_path / "cut.swlog"
    cut.write_bytes(data[: len(data) - 100])  # inside the last record
    rrd = tmp_path / "cut.rrd"
    out = stagewise("view", "log", str(cut), "--rerun", "save", str(rrd))
    assert out.returncode == 1, out.stderr
    assert f"{cut}: the log is cut at byte" in out.stderr, out.stderr
    complete = sum(1 for key, _ in _complete(data[: len(data) - 100]) if key.endswith("/transition"))
    got = rows(rrd)
    assert sum(v for k, v in got.items() if k.endswith("/phi")) == complete
    # Not a log at all: an error naming the file.
    bad = tmp_path / "bad.swlog"
    bad.write_bytes(b"hello")
    out = stagewise("view", "log", str(bad), "--rerun", "save", str(tmp_path / "bad.rrd"))
    assert out.returncode == 1 and f"{bad}: not a Stagewise episode log" in out.stderr, out.stderr


def _complete(data: bytes):
    """The complete records of a log's bytes (an independent reader for the test)."""
    i = 16
    while i + 4 <= len(data):
        k = int.from_bytes(data[i : i + 4], "little")
        if i + 8 + k > len(data):
            return
        p = int.from_bytes(data[i + 4 + k : i + 8 + k], "little")
        if i + 8 + k + p > len(data):
            return
        yield data[i + 4 : i + 4 + k].decode(), data[i + 8 + k : i + 8 + k + p]
        i += 8 + k + p


def test_a_dataset_without_progress_is_shown_without_it_and_with_it_once_labelled(tmp_path):
    ds = tmp_path / "ds"
    out = stagewise("record", "--task", "pick-place", "--episodes", "2", "--degraded", "0", "--width", "32",
                    "--height", "32", "--threads", "1", "--out", str(ds))  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rrd = tmp_path / "ds.rrd"
    out = stagewise("view", "dataset", str(ds), "--rerun", "save", str(rrd))
    assert out.returncode == 0, out.stderr
    assert "no sarm_progress.parquet" in out.stderr and "stagewise label" in out.stderr, out.stderr
    got = rows(rrd)
    import pyarrow.parquet as pq

    frames = pq.read_table(next((ds / "data").rglob("*.parquet"))).column("episode_index").to_pylist()
    for ep in (0, 1):
        n = frames.count(ep)
        for name in ("oracle_phi", "stage", "action", *(f"camera/{v}" for v in VIEWS)):
            assert got[f"/episode{ep}/{name}"] == n, (name, got)
        assert f"/episode{ep}/phi" not in got
    out = stagewise("label", "--dataset", str(ds), "--model", "models/pick-place/pick-place-progress.toml")
    assert out.returncode == 0, out.stderr[-2000:]
    rrd2 = tmp_path / "ds2.rrd"
    out = stagewise("view", "dataset", str(ds), "--episodes", "1", "--rerun", "save", str(rrd2))
    assert out.returncode == 0 and "sarm_progress" not in out.stderr, out.stderr
    got = rows(rrd2)
    assert got["/episode1/phi"] == frames.count(1) and "/episode0/phi" not in got
    progress = pq.read_table(ds / "sarm_progress.parquet").to_pydict()
    want = [p for e, p in zip(progress["episode_index"], progress["progress_sparse"]) if e == 1]
    assert list(scalars(rrd2, "/episode1/phi").values()) == pytest.approx(want)
    # An episode the dataset does not have: an error naming it.
    out = stagewise("view", "dataset", str(ds), "--episodes", "7", "--rerun", "save", str(tmp_path / "x.rrd"))
    assert out.returncode == 1 and "no episode 7" in out.stderr, out.stderr


def test_run_rerun_shows_the_live_stream_and_a_missing_viewer_never_stops_the_run(tmp_path):
    rrd = tmp_path / "live.rrd"
    port = launch.free_port()
    out = stagewise("run", "--task", "pick-place", "--policy", "expert", "--envs", "2", "--episodes", "2",
                    "--width", "32", "--height", "32", "--listen", f"tcp/127.0.0.1:{port}",
                    "--log-file", str(tmp_path / "live.swlog"), "--rerun", "save", str(rrd))  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = rows(rrd)
    # The viewer may drop what it cannot keep up with (never the actor's log): most steps arrive.
    logged_n = sum(len(v) for v in logged(tmp_path / "live.swlog").values())
    shown = sum(v for k, v in got.items() if k.endswith("/phi"))
    assert 0.5 * logged_n <= shown <= logged_n, (shown, logged_n)
    # Frames: the run puts them on every 10th step of an episode and its last (RGB, no depth), the viewer shows at
    # most 10 per second and env of those: some, never more than a tenth of the steps plus the episodes' ends.
    frames = [v for k, v in got.items() if k.endswith("/camera/front")]
    assert frames and 0 < sum(frames) <= logged_n // 10 + 2, (frames, logged_n)
    for ts in logged(tmp_path / "live.swlog").values():
        for m in ts:
            obs, last = m.get("next_obs"), m["terminated"] or m["truncated"]
            assert (obs is not None) == ((m["step"] + 1) % 10 == 0 or last), (m["step"], last)
            assert obs is None or not obs.get("depth"), "no depth on a viewer's frames"

    assert sum(v for k, v in got.items() if k.endswith("/summary")) == 2
    # No viewer at the address: the viewer says so, the run finishes every episode.
    closed = launch.free_port()
    out = stagewise("run", "--task", "pick-place", "--policy", "expert", "--envs", "2", "--episodes", "2",
                    "--width", "32", "--height", "32", "--listen", f"tcp/127.0.0.1:{launch.free_port()}",
                    "--log-file", str(tmp_path / "nv.swlog"), "--rerun", "connect", f"127.0.0.1:{closed}")  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"no Rerun viewer at 127.0.0.1:{closed}" in out.stderr, out.stderr[-3000:]
    assert "2 episodes" in out.stdout, out.stdout
    # Bad --rerun words are refused before anything starts.
    out = stagewise("run", "--task", "pick-place", "--rerun", "show")
    assert out.returncode != 0 and "save FILE.rrd" in out.stderr, out.stderr[-2000:]


def test_images_in_the_recording_are_the_logged_frames(run_log, tmp_path):
    rrd = tmp_path / "img.rrd"
    assert stagewise("view", "log", str(run_log), "--rerun", "save", str(rrd)).returncode == 0
    from rerun.chunk import RrdReader

    ts = logged(run_log)[(1, 0)]
    want = ts[10]["next_obs"]["images"]["wrist"]
    for chunk in RrdReader(rrd).stream().collect().stream():
        if chunk.entity_path == "/env1/episode0/camera/wrist":
            b = chunk.to_record_batch()
            steps = b.column("step").to_pylist()
            if 11 in steps:
                buf = b.column("Image:buffer").to_pylist()[steps.index(11)][0]
                assert np.array_equal(np.frombuffer(bytes(buf), np.uint8), np.frombuffer(want["data"], np.uint8))
                return
    pytest.fail("frame 11 of env 1 not found")


def test_spawn_without_a_display_is_a_clear_error(run_log, tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    out = subprocess.run([launch.find_binary(), "view", "log", str(run_log), "--rerun", "spawn"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert out.returncode == 2 and "cannot spawn a Rerun viewer: no display" in out.stderr, out.stderr


def step_served(endpoint: str, robots, steps: int, seed: int = 0):
    """Steps each served env `steps` times with random actions through the Python client (the N envs in parallel,
    as a vectorised learner does), resetting when an episode ends; returns each robot's replies per episode."""
    from stagewise.env import RemoteEnv
    from stagewise.session import open_session

    session = open_session([endpoint])
    rng = np.random.default_rng(seed)
    try:
        envs = [RemoteEnv(r, session=session, timeout=60, connect_timeout=120) for r in robots]
        first = [e.reset(seed=100 + i) for i, e in enumerate(envs)]
        dim = len(first[0]["spec"]["action"]["low"])
        episodes = {r: [[]] for r in robots}
        for _ in range(steps):
            pending = [e.step_async(rng.uniform(-1, 1, dim).tolist()) for e in envs]
            for r, e, p in zip(robots, envs, pending):
                reply = p.result()
                episodes[r][-1].append(reply)
                if reply["terminated"] or reply["truncated"]:
                    e.reset()
                    episodes[r].append([])
        for e in envs:
            e.close()
    finally:
        session.close()
    return episodes


def test_serve_rerun_shows_every_served_env_under_its_robot(tmp_path):
    """A real `stagewise serve --envs 2 --reward oracle --images --rerun save` stepped by the Python client: each
    served env's steps under its robot's name, one row per step, the oracle's progress, frames at most 10 a second
    and env (the first step's among them), the finished episodes' summaries."""
    import signal
    import time

    rrd = tmp_path / "serve.rrd"
    log = tmp_path / "serve.log"
    p = launch.serve("--task", "pick-place", "--envs", "2", "--reward", "oracle", "--images", "--width", "32",
                     "--height", "32", "--max-steps", "25", "--rerun", "save", str(rrd), log=str(log))  # fmt: skip
    try:
        robots = ["sim0-0", "sim0-1"]
        t0 = time.monotonic()
        episodes = step_served(p.endpoint, robots, 40)
        elapsed = time.monotonic() - t0
        p.proc.send_signal(signal.SIGINT)  # Ctrl-C: serve flushes its queues and lets the viewer finish
        assert p.wait(120) == 0, p.output()[-3000:]
    finally:
        p.stop()
    out = p.output()
    assert "did not subscribe" not in out and "no viewer" not in out, out[-3000:]
    for r in robots:
        # Steps go in batches (one every 0.1 s and env, one at an episode's end): far fewer messages than steps.
        sent = re.search(rf"--rerun {r}: 40 steps sent in (\d+) messages \(0 failed\), 1 episodes sent", out)
        assert sent and 2 <= int(sent.group(1)) < 40, out[-3000:]
    got = rows(rrd)
    assert not [k for k in got if k.startswith("/env")], "with 2 robots every path is under its robot"
    for r in robots:
        eps = episodes[r]
        assert [len(e) for e in eps] == [25, 15], [len(e) for e in eps]
        frames = 0
        for k, replies in enumerate(eps):
            pre = f"/{r}/env0/episode{k}"
            n = len(replies)
            for name in ("phi", "oracle_phi", "reward", "task_reward", "action", "success"):
                assert got[f"{pre}/{name}"] == n, (pre, name, got)
            # The oracle's progress of state t + 1 is what the client was served as phi for it.
            oracle = scalars(rrd, f"{pre}/oracle_phi")
            assert oracle == pytest.approx({t + 1: rep["info"]["progress_oracle"] for t, rep in enumerate(replies)})
            assert oracle == pytest.approx({t + 1: rep["phi"] for t, rep in enumerate(replies)})
            reward = scalars(rrd, f"{pre}/reward")
            assert reward == pytest.approx({t: rep["reward"] for t, rep in enumerate(replies)})
            # Frames (RGB of every view): serve sends them when the env's last ones are 0.1 s old and on an
            # episode's last step, the viewer shows at most 10 a second and env; the very first step's go out.
            done = replies[-1]["terminated"] or replies[-1]["truncated"]
            steps = [frame_steps(rrd, f"{pre}/camera/{v}") for v in VIEWS]
            assert all(s == steps[0] for s in steps), steps  # every view of a step, or none
            if k == 0:
                assert 1 in steps[0], steps[0]
            frames += len(steps[0])
            assert got[f"{pre}/summary"] == (1 if done else 0), (pre, got)
        # far fewer than one a step (40 steps per env in well under 4 s here): time-sampled, plus episodes' last
        assert 0 < frames <= 10 * elapsed + len(eps) + 1, (r, frames, elapsed)


def test_serve_rerun_without_a_viewer_serves_on(tmp_path):
    """No Rerun viewer at the address: the viewer child says so, serve warns and answers every step; bad --rerun
    words are refused before anything starts."""
    import signal

    closed = launch.free_port()
    log = tmp_path / "serve.log"
    p = launch.serve("--task", "pick-place", "--reward", "oracle", "--max-steps", "25",
                     "--rerun", "connect", f"127.0.0.1:{closed}", log=str(log))  # fmt: skip
    try:
        episodes = step_served(p.endpoint, ["sim0"], 30)
        p.proc.send_signal(signal.SIGINT)
        assert p.wait(120) == 0, p.output()[-3000:]
    finally:
        p.stop()
    out = p.output()
    assert [len(e) for e in episodes["sim0"]] == [25, 5]
    assert f"no Rerun viewer at 127.0.0.1:{closed}" in out and "exited" in out, out[-3000:]
    out = stagewise("serve", "--task", "pick-place", "--rerun", "show")
    assert out.returncode != 0 and "save FILE.rrd" in out.stderr, out.stderr[-2000:]
    out = stagewise("serve", "--task", "pick-place", "--rerun-frames-per-s", "2")
    assert out.returncode != 0 and "needs --rerun" in out.stderr, out.stderr[-2000:]


def frame_steps(rrd: Path, entity: str) -> list:
    """The steps at which an image entity has a frame."""
    from rerun.chunk import RrdReader

    out = []
    for chunk in RrdReader(rrd).stream().collect().stream():
        if chunk.entity_path == entity:
            out.extend(chunk.to_record_batch().column("step").to_pylist())
    return sorted(out)


def test_batches_of_steps_are_shown_as_rows_and_a_bad_one_is_skipped(tmp_path):
    """`steps` messages (what serve --rerun sends): each column's rows at their steps (the state after the action
    for success and oracle_phi), a gap between batches counted as dropped, a batch whose columns do not hold
    together skipped with a warning and nothing of it shown."""
    import warnings

    import msgpack

    from stagewise.view import Recorder, Sink, open_recording

    def batch(step: int, n: int, **spoil) -> bytes:
        m = {"schema": 1, "kind": "steps", "robot": "r", "env": 0, "episode": 3, "step": step,
             "action": [[0.1 * i, -0.1] for i in range(n)], "reward": [0.5 * i for i in range(n)],
             "task_reward": [0.0] * n, "phi": [0.1 * i for i in range(n)], "success": [False] * n,
             "oracle_phi": [0.2] * n, "stage": [], "stage_probs": [], "stamp_ns": 1, "next_obs": None}  # fmt: skip
        m.update(spoil)
        return msgpack.packb(m, use_bin_type=True)

    rrd = tmp_path / "steps.rrd"
    rec = open_recording(Sink("save", str(rrd)), "steps")
    r = Recorder(rec)
    r.message("stagewise/r/steps", batch(0, 4))
    r.message("stagewise/r/steps", batch(6, 3))  # steps 4 and 5 never arrived
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r.message("stagewise/r/steps", batch(9, 2, phi=[0.5]))
    assert r.counts.skipped == 1 and "1 values of `phi` for 2 steps" in str(w[0].message), r.counts.errors
    assert (r.counts.transitions, r.counts.dropped) == (7, 2), r.counts.line()
    r.flush()
    rec.flush()
    del rec, r
    got = {k.rsplit("/", 1)[1]: v for k, v in rows(rrd).items()}
    assert got == {"phi": 7, "reward": 7, "task_reward": 7, "action": 7, "success": 7, "oracle_phi": 7}, got
    p = "/env0/episode3"
    assert scalars(rrd, f"{p}/reward") == pytest.approx({0: 0, 1: 0.5, 2: 1.0, 3: 1.5, 6: 0, 7: 0.5, 8: 1.0})
    assert sorted(scalars(rrd, f"{p}/oracle_phi")) == [1, 2, 3, 4, 7, 8, 9]


def test_a_labelling_sheet_shows_an_episodes_frames_and_progress(tmp_path):
    """`stagewise view sheet`: one episode's frames (every k-th, with their indices, the last always) above its
    progress and stage starts, as a PNG a person labels from; an episode or camera the dataset lacks is an error
    naming it."""
    from PIL import Image

    from stagewise.view import write_sheet

    ds = tmp_path / "ds"
    out = stagewise("record", "--task", "push-target", "--episodes", "1", "--degraded", "0", "--width", "32",
                    "--height", "32", "--threads", "1", "--out", str(ds))  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    png = tmp_path / "sheet.png"
    out = stagewise("view", "sheet", str(ds), "--episode", "0", "--every", "10", "--out", str(png))
    assert out.returncode == 0, out.stderr
    w, h = Image.open(png).size
    assert w > 600 and h > 300, (w, h)
    drawn = write_sheet(ds, 0, tmp_path / "again.png", every=10, view="wrist")
    import pyarrow.parquet as pq

    n = pq.read_table(next((ds / "data").rglob("*.parquet"))).num_rows
    assert drawn["frames"][:3] == [0, 10, 20] and drawn["frames"][-1] == n - 1
    assert drawn["camera"].endswith("wrist") and drawn["ground_truth"] and not drawn["progress"]
    for bad, why in ((["--episode", "3"], "no episode 3"), (["--episode", "0", "--camera", "top"], "no camera `top`")):
        out = stagewise("view", "sheet", str(ds), *bad, "--out", str(tmp_path / "x.png"))
        assert out.returncode == 1 and why in out.stderr, out.stderr
