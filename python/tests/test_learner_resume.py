"""Crash-safe learning and bad inputs, with real `python -m stagewise.rl` and `stagewise serve` processes: a
smoke-sized run killed with SIGKILL after its first checkpoint resumes from it (no transition lost or counted twice,
its servers gone with it), and every bad input is refused before training with an error that names the file or
field, changing nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SMOKE = ["--smoke", "--task", "push-target", "--reward", "oracle", "--seeds", "0"]


def _learn(*args, **kw):
    return subprocess.run([sys.executable, "-m", "stagewise.rl", *args], capture_output=True, text=True, **kw)


def _children(pid: int):
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
    except OSError:
        return False


def _snapshot(d: Path):
    return {p.relative_to(d): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child processes from /proc (Linux)")
def test_a_run_killed_after_a_checkpoint_resumes_without_losing_or_repeating_a_transition(tmp_path, binary):
    out = tmp_path / "run"
    ck = out / "seed-0" / "checkpoint.pt"
    log = open(tmp_path / "first.log", "w")
    # with 2 replayed expert demonstrations: their buffer is part of the checkpoint too
    proc = subprocess.Popen([sys.executable, "-m", "stagewise.rl", *SMOKE, "--demos", "2", "--checkpoint-every", "800",
                             "--out", str(out)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while not ck.exists():
        assert proc.poll() is None, (tmp_path / "first.log").read_text()
        assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
        time.sleep(0.2)
    servers = _children(proc.pid)
    proc.kill()  # SIGKILL: no handler runs
    proc.wait()
    assert len(servers) == 2  # training and evaluation `serve`
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in servers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in servers), "the learner's servers outlived it"

    state = torch.load(ck, weights_only=False)
    before = state["record"]
    assert not state["done"] and before["env_steps"] >= 800
    # what the checkpoint holds is consistent: every decision is in the replay or in an n-step window
    assert before["replay_added"] + before["nstep_pending"] == before["decisions"]
    assert state["replay"]["added"] == before["replay_added"] and len(state["log"]) >= 1
    demo_added = state["demo_replay"]["added"]
    assert before["demos"]["episodes"] == 2 and demo_added >= 2 * 20  # 2 expert episodes of 4-step decisions

    done = _learn("--resume", str(out), timeout=900)
    assert done.returncode == 0, done.stderr
    run = json.loads((out / "curves.json").read_text())["runs"][0]
    assert run["done"] and run["resumed_from"] == [before["env_steps"]]
    assert run["demos"] == before["demos"]  # restored, not replayed again
    assert torch.load(ck, weights_only=False)["demo_replay"]["added"] == demo_added
    # the env steps planned (3000; decisions of 4 envs x 4 steps overshoot by < 16), each counted once
    assert 3000 <= run["env_steps"] < 3016
    assert run["replay_added"] + run["nstep_pending"] == run["decisions"]
    assert run["decisions"] > before["decisions"]
    # the curve so far carried over, then continued: evaluations at 0, ~1500 and the end, none repeated
    steps = [c["steps"] for c in run["checkpoints"]]
    assert steps[: len(before["checkpoints"])] == [c["steps"] for c in before["checkpoints"]]
    assert steps[0] == 0 and 1500 <= steps[1] < 1516 and steps[2] == run["env_steps"] and len(steps) == 3
    assert (out / "seed-0" / "policy" / "push-target-oracle-0.toml").is_file()
    assert (out / "curves.png").stat().st_size > 10_000
    # a finished run resumed again has nothing left to do and changes nothing
    snap = _snapshot(out)
    again = _learn("--resume", str(out), timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "curves.json").read_text())["runs"][0]["checkpoints"] == run["checkpoints"]
    assert {k for k in _snapshot(out)} == set(snap)
    # fewer steps is another recipe (refused); more steps extends the finished run from where it stopped
    fewer = _learn("--resume", str(out), "--steps", "2000", timeout=300)
    assert fewer.returncode == 2 and "steps: 3000 vs 2000" in fewer.stderr, fewer.stderr
    more = _learn("--resume", str(out), "--steps", "4000", timeout=900)
    assert more.returncode == 0, more.stderr
    ext = json.loads((out / "curves.json").read_text())["runs"][0]
    assert ext["done"] and 4000 <= ext["env_steps"] < 4016 and ext["resumed_from"] == [before["env_steps"],
                                                                                        run["env_steps"]]
    # the curve goes on: the old evaluations kept, one more at the new end, none repeated
    assert ext["checkpoints"][:3] == run["checkpoints"] and [c["steps"] for c in ext["checkpoints"][3:]] == [
        ext["env_steps"]]
    saved = json.loads((out / "run.json").read_text())
    assert saved["config"]["steps"] == 4000 and saved["extended"][0]["steps"] == [3000, 4000]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child processes from /proc (Linux)")
def test_a_learner_killed_while_its_server_runs_on_reconnects_to_it(tmp_path, binary):
    """--serve-endpoint: the training server is not the learner's child. The learner is killed with SIGKILL after
    its first checkpoint; the server keeps running, and `--resume` (nothing else given) reconnects to it."""
    from stagewise import launch
    from stagewise.rl import build
    from stagewise.rl.cli import SMOKE as SMOKE_SETUP
    from stagewise.rl.envs import serve_args

    cfg = build("push-target", {**SMOKE_SETUP, "reward": "oracle"})
    out = tmp_path / "run"
    ck = out / "seed-0" / "checkpoint.pt"
    with launch.serve(*serve_args(cfg, "oracle", "ext", cfg.envs, cfg.max_steps),
                      log=str(tmp_path / "serve.log")) as srv:
        log = open(tmp_path / "first.log", "w")
        proc = subprocess.Popen([sys.executable, "-m", "stagewise.rl", *SMOKE, "--checkpoint-every", "800",
                                 "--serve-endpoint", srv.endpoint, "--serve-robot", "ext", "--out", str(out)],
                                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while not ck.exists():
            assert proc.poll() is None, (tmp_path / "first.log").read_text()
            assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
            time.sleep(0.2)
        own = _children(proc.pid)
        proc.kill()
        proc.wait()
        assert len(own) == 1  # only the evaluation server is the learner's own
        before = torch.load(ck, weights_only=False)["record"]
        time.sleep(1.0)
        assert srv.alive(), "the running server died with the learner"

        done = _learn("--resume", str(out), timeout=900)
        assert done.returncode == 0, done.stderr
        assert srv.alive()
    run = json.loads((out / "curves.json").read_text())["runs"][0]
    assert run["done"] and run["resumed_from"] == [before["env_steps"]]
    assert 3000 <= run["env_steps"] < 3016
    assert run["replay_added"] + run["nstep_pending"] == run["decisions"] and run["decisions"] > before["decisions"]
    assert json.loads((out / "run.json").read_text())["config"]["serve_endpoint"] == srv.endpoint


def test_a_running_server_trains_one_seed(tmp_path):
    r = _learn(*SMOKE[:-1], "0,1", "--serve-endpoint", "tcp/127.0.0.1:9", "--out", str(tmp_path / "o"), timeout=60)
    assert r.returncode == 2 and "one running server trains one seed" in r.stderr
    assert not (tmp_path / "o").exists()


def _run_dir(tmp_path) -> Path:
    """A run directory as a run leaves it (run.json written by the learner's own code), without training."""
    from stagewise.rl import build, checkpoint

    out = tmp_path / "taken"
    cfg = build("push-target", {"reward": "oracle", "steps": 3000})
    checkpoint.write_json(out / "run.json", {"config": cfg.to_dict(), "seeds": [0], "argv": ["x"]})
    (out / "curves.json").write_text('{"keep": true}')
    return out


def test_an_out_dir_with_another_run_or_other_files_is_refused_and_left_alone(tmp_path):
    out = _run_dir(tmp_path)
    snap = _snapshot(out)
    r = _learn("--task", "push-target", "--reward", "oracle", "--steps", "6000", "--out", str(out), timeout=60)
    assert r.returncode == 2
    assert "holds a run of another config" in r.stderr and "steps: 3000 vs 6000" in r.stderr and "--resume" in r.stderr
    r = _learn("--task", "push-target", "--reward", "oracle", "--steps", "3000", "--out", str(out), timeout=60)
    assert r.returncode == 2 and "holds a run of this config: --resume to continue it" in r.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    r = _learn("--task", "push-target", "--reward", "oracle", "--out", str(other), timeout=60)
    assert r.returncode == 2 and "not an empty directory" in r.stderr
    assert _snapshot(out) == snap and (other / "notes.txt").read_text() == "mine"


def test_resume_with_another_config_or_of_no_run_is_refused(tmp_path):
    out = _run_dir(tmp_path)
    snap = _snapshot(out)
    r = _learn("--resume", str(out), "--lr", "0.001", "--reward", "model", timeout=60)
    assert r.returncode == 2
    assert "another config" in r.stderr and "agent.lr: 0.0003 vs 0.001" in r.stderr
    assert "reward: 'oracle' vs 'model'" in r.stderr and str(out / "run.json") in r.stderr
    r = _learn("--resume", str(out), "--seeds", "0,1", timeout=60)
    assert r.returncode == 2 and "seeds: [0] vs [0, 1]" in r.stderr
    r = _learn("--resume", str(tmp_path / "nothing"), timeout=60)
    assert r.returncode == 2 and "holds no run" in r.stderr
    assert _snapshot(out) == snap and not (tmp_path / "nothing").exists()


def _model_copy(tmp_path, edit) -> Path:
    """The shipped push-target reward model copied with its manifest edited."""
    src = REPO / "models" / "push-target"
    dst = tmp_path / "model"
    dst.mkdir()
    for f in src.glob("push-target-progress*"):
        shutil.copy(f, dst / f.name)
    manifest = dst / "push-target-progress.toml"
    manifest.write_text(edit(manifest.read_text()))
    return manifest


@pytest.mark.parametrize("edit, words", [
    (lambda t: t.replace('task = "push-target"', 'task = "stack"'), "a model for task 'stack' (manifest field task), not 'push-target'"),
    (lambda t: t.replace('state_names = ["gripper_width"]\nstate_size = 1',
                         'state_names = ["gripper_width", "wrist_torque"]'), "state_names ['wrist_torque']"),
])
def test_a_reward_model_for_another_task_or_state_is_refused_before_training(tmp_path, binary, edit, words):
    manifest = _model_copy(tmp_path, edit)
    out = tmp_path / "out"
    r = _learn("--task", "push-target", "--reward", "model", "--model", str(manifest), "--out", str(out), timeout=180)
    assert r.returncode == 2, r.stderr
    assert str(manifest) in r.stderr and words in r.stderr
    assert not out.exists()


def test_a_server_that_dies_is_a_clear_error_not_a_hang(tmp_path, binary):
    """A model whose ONNX does not match its manifest's sha256 passes the learner's own checks, and `serve`
    refuses it at start: the learner says so, with the server's log, within seconds."""
    manifest = _model_copy(tmp_path, lambda t: t.replace('sha256 = "6e5', 'sha256 = "0e5', 1))
    t0 = time.monotonic()
    args = [("model" if a == "oracle" else a) for a in SMOKE]
    r = _learn(*args, "--model", str(manifest), "--out", str(tmp_path / "out"), timeout=300)
    assert r.returncode == 2
    assert "exited with code" in r.stderr and "serve-train0.log" in r.stderr and "sha256" in r.stderr.lower()
    assert time.monotonic() - t0 < 200
