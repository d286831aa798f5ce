"""Fixtures: real `stagewise serve` / `stagewise run` processes on loopback ports (multicast off), killed in
teardown. The binary: $STAGEWISE_BIN, else the repository's debug build (see stagewise.launch.find_binary)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from stagewise import launch


@pytest.fixture(scope="session", autouse=True)
def sb3_log_dir(tmp_path_factory):
    """Stable-Baselines3 makes a log folder for every model it builds (in /tmp unless SB3_LOGDIR is set): keep
    them in pytest's own temporary area instead of littering the machine."""
    if "SB3_LOGDIR" not in os.environ:
        os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3-logs"))


@pytest.fixture(scope="session")
def binary() -> str:
    return launch.find_binary()


@pytest.fixture
def serve(tmp_path, binary):
    """Starts `stagewise serve ARGS` (call it); every started process is killed at teardown."""
    procs = []

    def start(*args: str) -> launch.Process:
        p = launch.serve(*args, log=str(tmp_path / f"serve{len(procs)}.log"))
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()


@pytest.fixture
def run_actor(tmp_path, binary):
    """Starts `stagewise run ARGS` (call it); killed at teardown."""
    procs = []

    def start(*args: str) -> launch.Process:
        p = launch.run(*args, "--log-file", str(tmp_path / f"run{len(procs)}.swlog"), log=str(tmp_path / f"run{len(procs)}.log"))
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()


@pytest.fixture
def sparse_env(serve):
    """A StagewiseEnv on a fresh pick-place server with the sparse reward, state observations."""
    from stagewise import StagewiseEnv

    p = serve("--task", "pick-place", "--reward", "sparse")
    env = StagewiseEnv(connect=p.endpoint, connect_timeout=30)
    yield env
    env.close()


@pytest.fixture(scope="session")
def recorded_keypoints(binary):
    """`make(d, episodes, seed, steps)` -> `d/kp.pt`: a small keypoint encoder (4 points, 8 channels) trained
    `steps` steps on `d/data`, `episodes` clean push-target episodes recorded from `seed` at 32x32 (3 views).
    A fixture, not an importable helper: tests/python has its own conftest module, and pytest runs both folders
    in one session."""
    from stagewise.training import keypoints

    def make(d: Path, episodes: int, seed: int, steps: int) -> Path:
        subprocess.run([binary, "--log", "warn", "record", "--task", "push-target", "--episodes", str(episodes),
                        "--degraded", "0", "--seed", str(seed), "--width", "32", "--height", "32",
                        "--out", str(d / "data")],
                       check=True, capture_output=True, timeout=300)  # fmt: skip
        keypoints.main(["--dataset", str(d / "data"), "--out", str(d / "kp.pt"), "--points", "4", "--chans", "8",
                        "--steps", str(steps), "--batch", "16", "--threads", "1"])  # fmt: skip
        return d / "kp.pt"

    return make
