"""The gymnasium ids (stagewise.registration, stagewise.vector) against real `stagewise serve` processes: make and
make_vec, gymnasium's and SB3's env checkers, render, joining a running server, the server's lifetime, bad input."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest

import stagewise
from stagewise import ServeError
from stagewise.vector import StagewiseVectorEnv

IDS = {"stagewise/PickPlace-v0": ("pick-place", 400), "stagewise/PushTarget-v0": ("push-target", 300),
       "stagewise/Stack-v0": ("stack", 400)}


def running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def children() -> set:
    """Pids of this process's running children (from /proc: ppid is the 2nd field after the command)."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid() and fields[0] not in ("Z", "X"):
                out.add(int(d))
    return out


def ended(server) -> bool:
    pid = server.pid
    return server.process.proc.poll() is not None and not running(pid)


@pytest.mark.parametrize("env_id", list(IDS))
def test_each_id_makes_a_served_env_and_close_ends_its_server(env_id):
    task, max_steps = IDS[env_id]
    assert env_id in stagewise.env_ids() and env_id in gym.registry
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # make's passive checker says nothing either
        env = gym.make(env_id)
        try:
            assert env.spec.max_episode_steps == max_steps
            inner = env.unwrapped
            assert inner.spec_msg["task"] == task and inner.reward_spec["source"] == "sparse"
            assert running(inner.server.pid)
            assert isinstance(env.observation_space, gym.spaces.Box)
            obs, info = env.reset(seed=3)
            assert env.observation_space.contains(obs) and info["seed"] == 3
            obs, r, terminated, truncated, info = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs) and r == 0.0 and not terminated and not truncated
        finally:
            env.close()
    assert ended(inner.server), "close() ends the server the env started"
    env.close()  # twice is fine


def test_gymnasium_and_sb3_checkers_pass_on_push_target():
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make("stagewise/PushTarget-v0", reward="oracle", gamma=0.99)
    try:
        assert env.unwrapped.reward_spec["source"] == "oracle"
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # a checker's complaint fails the test
            check_env(env.unwrapped)
            sb3_check_env(env, warn=True)
    finally:
        env.close()


def test_rgb_array_render_passes_the_render_checks():
    from gymnasium.utils.env_checker import check_env

    env = gym.make("stagewise/PushTarget-v0", render_mode="rgb_array", width=24, height=20)
    try:
        inner = env.unwrapped
        assert "--images" in inner.server.process.argv
        assert isinstance(env.observation_space, gym.spaces.Box), "frames render; the observation stays the state"
        env.reset(seed=1)
        frame = env.render()
        views = len(inner.spec_msg["views"])
        assert views == 3 and frame.shape == (20, 24 * views, 3) and frame.dtype == np.uint8 and frame.any()
        assert inner.metadata["render_modes"] == ["rgb_array"] and inner.metadata["render_fps"] == 50.0
        # with the render checks: this also makes the id again with render_mode="rgb_array" (another server)
        check_env(inner)
    finally:
        env.close()
    plain = gym.make("stagewise/PushTarget-v0")
    try:
        # no frames served: rgb_array is not claimed
        assert plain.unwrapped.metadata["render_modes"] == [] and plain.unwrapped.render() is None
    finally:
        plain.close()


def test_model_reward_smoke():
    env = gym.make("stagewise/PushTarget-v0", reward="model")
    try:
        inner = env.unwrapped
        argv = inner.server.process.argv
        assert argv[argv.index("--width") + 1] == "32", "the model's input size, from its manifest"
        assert inner.reward_spec["source"] == "model" and inner.reward_spec["shaping"] == "potential"
        obs, info = env.reset(seed=0)
        assert 0.0 <= info["phi"] <= 1.0
        _, r, _, _, info = env.step(np.zeros(env.action_space.shape, np.float32))
        assert np.isfinite(r) and 0.0 <= info["phi"] <= 1.0 and info["task_reward"] == 0.0
    finally:
        env.close()
    assert ended(inner.server)


def test_make_vec_is_one_server_with_n_envs_stepped_together():
    envs = gym.make_vec("stagewise/PushTarget-v0", num_envs=2, reward="oracle", max_episode_steps=3)
    try:
        assert isinstance(envs, StagewiseVectorEnv)
        argv = envs.server.process.argv
        assert argv[argv.index("--envs") + 1] == "2" and argv[argv.index("--max-steps") + 1] == "3"
        assert envs.observation_space.shape == (2, 14) and envs.action_space.shape == (2, 4)
        a, info = envs.reset(seed=5)
        assert list(info["seed"]) == [5, 6] and not np.array_equal(a[0], a[1])
        b, _ = envs.reset(seed=5)
        np.testing.assert_array_equal(a, b)
        act = np.zeros(envs.action_space.shape, np.float32)
        for t in range(3):
            obs, rew, term, trunc, info = envs.step(act)
            assert obs.shape == (2, 14) and rew.dtype == np.float64 and "phi" in info
        assert trunc.all() and not term.any(), "the server truncates at max_episode_steps"
        obs, rew, term, trunc, info = envs.step(act)  # NEXT_STEP autoreset: the first observations, reward 0
        np.testing.assert_array_equal(rew, 0.0)
        assert not trunc.any() and "seed" in info
    finally:
        envs.close()
    assert ended(envs.server)


def test_make_vec_same_step_autoreset_gives_the_final_observation():
    envs = gym.make_vec("stagewise/PushTarget-v0", num_envs=2, max_episode_steps=2, autoreset_mode="SameStep")
    try:
        envs.reset(seed=0)
        act = np.zeros(envs.action_space.shape, np.float32)
        envs.step(act)
        obs, rew, term, trunc, info = envs.step(act)
        assert trunc.all() and info["_final_obs"].all()
        assert not np.array_equal(obs[0], info["final_obs"][0]), "the observation is the next episode's first"
        obs, rew, term, trunc, info = envs.step(act)
        assert not trunc.any() and "final_obs" not in info
    finally:
        envs.close()


def test_joining_a_running_serve_leaves_it_running(serve):
    p = serve("--task", "push-target", "--reward", "oracle", "--robot-name", "arm")
    env = gym.make("stagewise/PushTarget-v0", endpoint=p.endpoint, robot_name="arm", reward="oracle")
    try:
        assert env.unwrapped.server is None and env.unwrapped.reward_spec["source"] == "oracle"
        env.reset(seed=0)
        env.step(env.action_space.sample())
    finally:
        env.close()
    assert p.alive(), "a joined server is not the env's to end"
    with pytest.raises(ValueError, match=r"serves another reward.*source: serves 'oracle', asked 'model'"):
        gym.make("stagewise/PushTarget-v0", endpoint=p.endpoint, robot_name="arm", reward="model")
    with pytest.raises(ValueError, match=r"serves task 'push-target', not 'stack'"):
        gym.make("stagewise/Stack-v0", endpoint=p.endpoint, robot_name="arm")
    with pytest.raises(ValueError, match=r"width: options of the server this env would start"):
        gym.make("stagewise/PushTarget-v0", endpoint=p.endpoint, robot_name="arm", width=32)
    envs = gym.make_vec("stagewise/PushTarget-v0", num_envs=1, endpoint=p.endpoint, robot_name="arm")
    envs.reset(seed=0)
    envs.close()
    assert p.alive()


@pytest.mark.filterwarnings("ignore:.*render_mode='ansi' that is not in the possible render_modes")
def test_bad_input_is_a_clear_error_and_leaves_no_server(tmp_path):
    before = children()
    for kwargs, match in [
        ({"reward": "dense"}, r"reward='dense': one of 'sparse', 'model', 'oracle'"),
        ({"shaping": "progress"}, r"shaping: the sparse reward has no progress to shape"),
        ({"reward": "oracle", "shaping": "exp"},
         r"shaping='exp': 'potential', 'value:K' \(K > 0 steps per whole task\), 'progress' or 'rank:W'"),
        ({"reward": "oracle", "potential_scale": 0.1}, r"potential_scale needs shaping='progress'"),
        ({"gamma": 1.5}, r"gamma=1.5"),
        ({"render_mode": "ansi"}, r"render_mode='ansi'"),
        ({"model": "m.toml"}, r"needs reward='model'"),
    ]:
        with pytest.raises(ValueError, match=match):
            gym.make("stagewise/PushTarget-v0", **kwargs)
    with pytest.raises(TypeError, match="unexpected keyword argument 'rewrd'"):
        gym.make("stagewise/PushTarget-v0", rewrd="model")
    with pytest.raises(ValueError, match=r"num_envs=0"):
        gym.make_vec("stagewise/PushTarget-v0", num_envs=0)
    assert children() == before, "nothing was started"
    # A server that cannot start: its exit and its error, at once (not a timeout).
    t0 = time.monotonic()
    with pytest.raises(ServeError, match=r"exited with code 1.*\n.*Error: loading reward model.*missing\.toml") as e1:
        gym.make("stagewise/PushTarget-v0", reward="model", model=str(tmp_path / "missing.toml"))
    assert time.monotonic() - t0 < 30
    with pytest.raises(ServeError, match=r"(?s)exited with code 2.*unexpected argument '--bogus'") as e2:
        gym.make("stagewise/PushTarget-v0", serve_args=["--bogus"])
    for e in (e1, e2):  # the log the message names is kept (and removed here)
        log = re.search(r"\(log (\S+)\)", str(e.value)).group(1)
        assert "Error" in open(log).read() or "error" in open(log).read()
        os.unlink(log)
    assert children() == before, "the failed servers are gone"


def test_the_server_dies_with_the_python_process():
    """`import gymnasium` alone and the module-qualified id; the process is then killed (SIGKILL): its server
    (started with the parent-death signal) goes with it."""
    code = textwrap.dedent("""
        import os, signal, sys, gymnasium as gym
        env = gym.make("stagewise:stagewise/PushTarget-v0")
        env.reset(seed=0)
        print(env.unwrapped.server.pid, env.unwrapped.server.log, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == -9, out.stderr
    pid, log = out.stdout.split()[-2:]
    pid = int(pid)
    deadline = time.monotonic() + 15
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(pid), f"serve {pid} outlived the process that started it"
    os.unlink(log)  # nobody was left to remove it


def test_the_value_potential_is_a_shaping_the_ids_take_and_check():
    """`shaping='value:K'` (the policy-invariant value potential, docs/shaping.md) passes the ids' checks, a bad K
    does not, and a joined server's "value:100" is the same as the asked "value:100.0"."""
    from stagewise.registration import ServeOptions

    ok = ServeOptions(reward="oracle", shaping="value:100.0")
    ok.validate("push-target")
    assert "value:100.0" in ok.argv("push-target", 1, "r", 300, False)
    for bad in ("value:0", "value:x", "value:-3", "value:inf"):
        with pytest.raises(ValueError, match="value:K"):
            ServeOptions(reward="oracle", shaping=bad).validate("push-target")
    served = {"source": "oracle", "shaping": "value:100"}
    assert ok.mismatch(served) == []
    assert ok.mismatch({**served, "shaping": "value:50"}) == ["shaping: serves 'value:50', asked 'value:100.0'"]
