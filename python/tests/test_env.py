"""StagewiseEnv against a real `stagewise serve`: spaces, conformance checkers, seeding, rewards."""

import math
import subprocess
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from stagewise import StagewiseEnv, launch


def test_spaces_come_from_the_env_spec(sparse_env):
    env = sparse_env
    assert env.spec_msg["task"] == "pick-place"
    assert isinstance(env.observation_space, gym.spaces.Box)
    assert env.observation_space.shape == (len(env.spec_msg["state"]["names"]),) == (14,)
    assert env.observation_space.dtype == np.float32
    assert env.action_space.shape == (4,)
    np.testing.assert_array_equal(env.action_space.low, np.asarray(env.spec_msg["action"]["low"], np.float32))
    assert env.reward_spec["source"] == "sparse"
    obs, info = env.reset(seed=7)
    assert obs.dtype == np.float32 and obs.shape == (14,)
    assert env.observation_space.contains(obs)
    obs, r, terminated, truncated, info = env.step(np.zeros(4, np.float32))
    assert obs.shape == (14,) and r == 0.0 and not terminated and not truncated
    assert set(info) >= {"stage", "progress_oracle", "success", "is_success", "action_clipped"}


def test_gymnasium_check_env(sparse_env):
    from gymnasium.utils.env_checker import check_env

    check_env(sparse_env, skip_render_check=True)


def test_sb3_check_env(sparse_env):
    from stable_baselines3.common.env_checker import check_env

    check_env(sparse_env, warn=True)


def test_seeded_resets_reproduce_and_differ(sparse_env):
    env = sparse_env
    a, _ = env.reset(seed=11)
    b, _ = env.reset(seed=11)
    c, _ = env.reset(seed=12)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # Unseeded resets after a seeded one follow np_random: the same sequence again after reseeding.
    env.reset(seed=5)
    s1 = [env.reset()[1]["seed"] for _ in range(2)]
    env.reset(seed=5)
    s2 = [env.reset()[1]["seed"] for _ in range(2)]
    assert s1 == s2 and s1[0] != s1[1]


def test_wrong_action_shape_is_refused_before_sending(sparse_env):
    with pytest.raises(ValueError, match=r"stagewise/sim0/env/step.*shape \(4,\)"):
        sparse_env.step(np.zeros(3))


def test_images_make_a_dict_space(serve):
    p = serve("--task", "pick-place", "--images", "--width", "24", "--height", "20")
    env = StagewiseEnv(connect=p.endpoint, connect_timeout=30)
    try:
        space = env.observation_space
        assert isinstance(space, gym.spaces.Dict)
        views = [v["name"] for v in env.spec_msg["views"]]
        assert len(views) >= 1 and set(space.spaces) == {"state", *views}
        for v in views:
            assert space[v].shape == (20, 24, 3) and space[v].dtype == np.uint8
        obs, _ = env.reset(seed=1)
        assert space.contains(obs)
        assert obs[views[0]].any(), "a rendered frame is not all black"
        from gymnasium.utils.env_checker import check_env

        check_env(env, skip_render_check=True)
    finally:
        env.close()


def _directed_rollout(env, steps):
    """Moves towards the object (the first state entries are the gripper, see the env spec) with fixed actions
    so that progress changes; yields (info_reset, [(reward, info), ...])."""
    _, info0 = env.reset(seed=3)
    out = []
    for t in range(steps):
        a = np.array([0.6, 0.3, -0.5, 1.0], np.float32) if t % 2 == 0 else np.array([0.2, -0.4, -0.2, -1.0], np.float32)
        _, r, term, trunc, info = env.step(a)
        info["terminated"] = term
        out.append((r, info))
        if term or trunc:
            break
    return info0, out


@pytest.mark.parametrize("source", ["oracle", "model"])
def test_shaped_rewards_are_potential_based(serve, source):
    gamma, c = 0.97, 2.0
    args = ["--task", "pick-place", "--reward", source, "--gamma", str(gamma), "--shaping-scale", str(c)]
    if source == "model":
        args += ["--width", "32", "--height", "32"]  # the shipped model's input size
    p = serve(*args)
    env = StagewiseEnv(connect=p.endpoint, connect_timeout=60, gamma=gamma)
    try:
        assert env.reward_spec["source"] == source and env.reward_spec["gamma"] == gamma
        info0, steps = _directed_rollout(env, 30)
        phi = info0["phi"]
        phis = [phi]
        for r, info in steps:
            expected = info["task_reward"] + c * (gamma * (0.0 if info["terminated"] else info["phi"]) - phi)
            assert math.isclose(r, expected, rel_tol=1e-9, abs_tol=1e-9), (r, expected, info)
            assert 0.0 <= info["phi"] <= 1.0
            phi = info["phi"]
            phis.append(phi)
        if source == "oracle":
            assert phis[0] == 0.0
            np.testing.assert_allclose(phis[1:], [i["progress_oracle"] for _, i in steps], atol=1e-6)
        assert max(phis) - min(phis) > 1e-4, f"progress never moved: {phis}"
    finally:
        env.close()


@pytest.mark.parametrize("form", ["progress", "offset"])
def test_served_rewards_follow_the_shaping_flags(serve, form):
    """`serve --shaping progress --potential-scale S` and `--phi-offset X` serve their formulas (docs/shaping.md),
    and the reset reply says which form and parameters it serves."""
    gamma, c, s, x = 0.97, 2.0, 0.5, 0.25
    flags = ["--shaping", "progress", "--potential-scale", str(s)] if form == "progress" else ["--phi-offset", str(x)]
    p = serve("--task", "pick-place", "--reward", "oracle", "--gamma", str(gamma), "--shaping-scale", str(c), *flags)
    env = StagewiseEnv(connect=p.endpoint, connect_timeout=60, gamma=gamma)
    try:
        if form == "progress":
            assert env.reward_spec["shaping"] == "progress" and env.reward_spec["potential_scale"] == s
            assert env.reward_spec["success_progress_one"] is False and "phi_offset" not in env.reward_spec
        else:
            assert env.reward_spec["shaping"] == "potential" and env.reward_spec["phi_offset"] == x
        info0, steps = _directed_rollout(env, 30)
        phi = info0["phi"]
        for r, info in steps:
            nxt, task, end = info["phi"], info["task_reward"], info["terminated"]
            if form == "progress":
                level = c * nxt * (1.0 if end else 1.0 - gamma)
                expected = task + s * c * (gamma * (0.0 if end else nxt) - phi) + level
            else:
                expected = task + c * (gamma * (0.0 if end else nxt) - phi) + c * x * (1.0 if end else 1.0 - gamma)
            assert math.isclose(r, expected, rel_tol=1e-9, abs_tol=1e-9), (r, expected, info)
            phi = nxt
        assert any(i["phi"] > 0 for _, i in steps), "progress never moved"
    finally:
        env.close()


def test_gamma_mismatch_is_refused(serve):
    p = serve("--task", "pick-place", "--reward", "oracle", "--gamma", "0.9")
    with pytest.raises(ValueError, match=r"stagewise/sim0/env/reset.*gamma 0\.9.*0\.99"):
        StagewiseEnv(connect=p.endpoint, connect_timeout=30, gamma=0.99)


def test_vec_env_steps_every_served_env_and_auto_resets(serve):
    from stable_baselines3.common.vec_env import VecMonitor

    from stagewise.vec_env import StagewiseVecEnv

    p = serve("--task", "pick-place", "--envs", "3", "--robot-name", "vec", "--max-steps", "5")
    venv = VecMonitor(StagewiseVecEnv(3, "vec", connect=p.endpoint, connect_timeout=30))
    try:
        venv.seed(100)
        obs = venv.reset()
        assert obs.shape == (3, 14)
        assert len({tuple(o) for o in obs}) == 3, "three envs, three seeds, three different first states"
        dones_seen = 0
        for t in range(6):
            obs, rew, dones, infos = venv.step(np.zeros((3, 4), np.float32))
            assert obs.shape == (3, 14) and rew.shape == (3,)
            if dones.any():
                dones_seen += int(dones.sum())
                for i in np.flatnonzero(dones):
                    assert infos[i]["TimeLimit.truncated"] and "terminal_observation" in infos[i]
                    assert infos[i]["episode"]["l"] == 5
        assert dones_seen == 3, "every env truncated at --max-steps 5 and was reset"
    finally:
        venv.close()


def test_episodes_end_on_the_model_not_the_simulator(serve):
    """`serve --episode-ends model` (what a robot has): success detection on the served progress ends an episode
    with task reward 1 even where the simulator says no success (an over-reading oracle here: the hand is always
    above the trap's height), the simulator's success stays in `info`; otherwise only the time limit ends one."""
    from stagewise.env import RemoteEnv
    from stagewise.session import open_session

    def episode(p, action, steps):
        session = open_session([p.endpoint])
        try:
            env = RemoteEnv("sim0", session=session, timeout=60, connect_timeout=60)
            env.reset(seed=5)
            replies = []
            for _ in range(steps):
                replies.append(env.step(action))
                if replies[-1]["terminated"] or replies[-1]["truncated"]:
                    break
            env.close()
            return replies
        finally:
            session.close()

    still = [0.0, 0.0, 0.0, 0.0]
    p = serve("--task", "push-target", "--reward", "oracle", "--episode-ends", "model", "--oracle-trap=-1:1",
              "--success-delta", "0.01", "--success-steps", "3")  # fmt: skip
    replies = episode(p, still, 10)
    assert [r["terminated"] for r in replies] == [False, False, True], replies
    assert [r["task_reward"] for r in replies] == [0.0, 0.0, 1.0]
    assert [r["phi"] for r in replies] == [1.0, 1.0, 1.0]
    assert not any(r["info"]["success"] for r in replies), "the simulator saw no success"
    # Without the trap the hand standing still never reaches progress 1: the time limit ends the episode.
    p = serve("--task", "push-target", "--reward", "oracle", "--episode-ends", "model", "--max-steps", "12")
    replies = episode(p, still, 20)
    assert len(replies) == 12 and replies[-1]["truncated"] and not any(r["terminated"] for r in replies)
    assert all(r["task_reward"] == 0.0 for r in replies)
    out = subprocess.run([launch.find_binary(), "serve", "--task", "push-target", "--episode-ends", "model"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode != 0 and "--reward sparse has none" in out.stderr, out.stderr


def test_served_embeddings_are_the_reward_models_encoding_of_the_served_frames(serve):
    """`serve --embeddings`: every reply carries the reward model's embeddings of its observation's frames, float32
    [views, E], equal to the model's encoder (run here with onnxruntime) on the frames the reply carries; absent
    without the flag; refused without a reward model."""
    import onnxruntime as ort

    from stagewise.env import RemoteEnv
    from stagewise.session import open_session
    from stagewise.wire import tensor

    model_dir = Path(__file__).resolve().parents[2] / "models" / "push-target"
    enc = ort.InferenceSession(str(model_dir / "push-target-progress.encoder.onnx"))
    views = ["front", "side", "wrist"]

    def encode(obs):
        frames = np.stack([(tensor(obs["images"][v]).astype(np.float32) / 255.0 - 0.5) / 0.25 for v in views])
        return enc.run(["embedding"], {"frames": frames.transpose(0, 3, 1, 2).copy()})[0]

    for flags, want in ((["--embeddings"], True), ([], False)):
        p = serve("--task", "push-target", "--reward", "model", "--images", "--width", "32", "--height", "32", *flags)
        session = open_session([p.endpoint])
        try:
            env = RemoteEnv("sim0", session=session, timeout=60, connect_timeout=60)
            replies = [env.reset(seed=3)] + [env.step([0.6, -0.3, -0.5, 0.0]) for _ in range(3)]
            env.close()
        finally:
            session.close()
        for r in replies:
            assert ("embedding" in r) == want, sorted(r)
            if want:
                e = tensor(r["embedding"])
                assert e.shape == (3, 64) and e.dtype == np.float32
                np.testing.assert_allclose(e, encode(r["obs"]), atol=1e-4)
        if want:
            assert np.abs(tensor(replies[0]["embedding"]) - tensor(replies[-1]["embedding"])).max() > 1e-3
    out = subprocess.run([launch.find_binary(), "serve", "--task", "push-target", "--reward", "oracle", "--embeddings"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode != 0 and "need --reward model" in out.stderr, out.stderr


def test_a_gymnasium_env_observes_the_served_embeddings(serve):
    """With `serve --embeddings` the observation is a Dict of `state` and `embedding` (float32 [views, E]), and
    gymnasium's checker passes on it."""
    from gymnasium.utils.env_checker import check_env

    p = serve("--task", "push-target", "--reward", "model", "--embeddings", "--width", "32", "--height", "32")
    env = StagewiseEnv(connect=p.endpoint, connect_timeout=60)
    try:
        assert set(env.observation_space.spaces) == {"state", "embedding"}
        assert env.observation_space["embedding"].shape == (3, 64)
        obs, _ = env.reset(seed=1)
        obs2, *_ = env.step(env.action_space.sample())
        assert obs["embedding"].shape == (3, 64) and obs2["embedding"].dtype == np.float32
        assert env.observation_space.contains(obs2)
        check_env(env, skip_render_check=True)
    finally:
        env.close()
