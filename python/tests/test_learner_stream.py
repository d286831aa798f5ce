"""`stagewise learn --from-stream` (issue 48): a learner of `stagewise run` actors that stream over zenoh. The
parts (decisions rebuilt from streamed steps, the exploring policy graph) and, with real processes, the loop: actors
that never wait, a learner killed with `kill -9` and resumed while they keep acting, signed policies they accept,
transitions of a robot the learner was not told of refused and counted. Learning figures are benchmarks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from stagewise import launch
from stagewise.policy import public_key
from stagewise.rl.agent import Replay
from stagewise.rl.stream_learn import Assembler, actor_report, exploring_onnx
from stagewise.stream import Transition


def _t(step, action, reward=1.0, episode=0, env=0, term=False, trunc=False, obs=True):
    o = {"state": np.array([float(step)], np.float32)}
    return Transition(robot="a", env=env, episode=episode, step=step, action=np.array(action, np.float32),
                      reward=reward, task_reward=0.0, phi=0.0, phi_next=0.0, gamma=0.9, shaping_scale=1.0,
                      terminated=term, truncated=trunc, success=term, stage=None, stamp_ns=0,
                      obs=o if (obs and step == 0) else None, next_obs={"state": np.array([step + 1.0], np.float32)},
                      key="stagewise/a/transition")


def test_streamed_steps_become_the_decisions_the_actor_held():
    buf = Replay(32, 1, 1)
    asm = Assembler(k=2, nstep=1, gamma=0.9, out=buf, obs_of=lambda o: np.asarray(o["state"], np.float32))
    steps = [_t(0, [0.5], 1.0), _t(1, [0.5], 2.0), _t(2, [-0.5], 3.0), _t(3, [-0.5], 4.0), _t(4, [0.1], 5.0, term=True)]
    made = [asm.add(t) for t in steps]
    assert made == [0, 1, 0, 1, 1]
    # decision 0: s0 -> s2, reward 1 + 0.9 * 2, discount 0.9^2; decision 2 ends the episode (terminated: factor 0)
    np.testing.assert_allclose(buf.s[:3, 0].numpy(), [0, 2, 4])
    np.testing.assert_allclose(buf.s2[:3, 0].numpy(), [2, 4, 5])
    np.testing.assert_allclose(buf.a[:3, 0].numpy(), [0.5, -0.5, 0.1])
    np.testing.assert_allclose(buf.r[:3].numpy(), [1 + 0.9 * 2, 3 + 0.9 * 4, 5], rtol=1e-6)
    np.testing.assert_allclose(buf.disc[:3].numpy(), [0.81, 0.81, 0.0], rtol=1e-6)
    assert asm.counts() | {} == {"received": 5, "trained": 5, "gaps": 0, "decisions": 3, "mixed_actions": 0}


def test_a_gap_is_counted_and_the_env_waits_for_its_next_decision_boundary():
    buf = Replay(32, 1, 1)
    asm = Assembler(k=2, nstep=1, gamma=0.9, out=buf, obs_of=lambda o: np.asarray(o["state"], np.float32))
    for t in (_t(0, [0.5]), _t(1, [0.5]), _t(2, [0.2])):
        asm.add(t)
    # step 3 lost: step 4 restarts the chain from its own next observation, step 5 starts no decision (odd), 6 does
    for t in (_t(4, [0.3]), _t(5, [0.3]), _t(6, [0.7]), _t(7, [0.7], trunc=True)):
        asm.add(t)
    c = asm.counts()
    assert c["gaps"] == 1 and c["received"] == 7 and c["decisions"] == 2 and c["trained"] == 4
    np.testing.assert_allclose(buf.s[:2, 0].numpy(), [0, 6])  # the half decision at step 2 was dropped
    # an actor whose action changes inside a decision is not holding the learner's repeat: dropped, counted
    asm.add(_t(0, [0.1], episode=1))
    asm.add(_t(1, [0.9], episode=1))
    assert asm.counts()["mixed_actions"] == 1 and asm.counts()["decisions"] == 2 and buf.n == 2


def test_the_exploring_policy_adds_noise_to_the_actor_inside_the_graph():
    import onnxruntime as ort
    import torch.nn as nn

    from stagewise.export import mlp_to_onnx

    lin = nn.Linear(3, 2)
    nn.init.zeros_(lin.weight)
    nn.init.zeros_(lin.bias)
    base = mlp_to_onnx([lin], 3, 2)
    x = np.zeros((4000, 3), np.float32)
    assert exploring_onnx(base, 0.0) == base  # no noise node (ONNX Runtime aborts on a normal of scale 0)
    noisy = ort.InferenceSession(exploring_onnx(base, 0.3), providers=["CPUExecutionProvider"])
    a = noisy.run(None, {"state": x})[0]
    assert a.shape == (4000, 2) and abs(a.std() - 0.3) < 0.03 and abs(a.mean()) < 0.03
    wide = ort.InferenceSession(exploring_onnx(base, 5.0), providers=["CPUExecutionProvider"]).run(None, {"state": x})[0]
    assert wide.min() >= -1.0 and wide.max() <= 1.0  # clipped to the action box


SHIPPED = "models/push-target/push-target-progress.toml"


def _msg(**extra):
    """A `transition` message as msgpack gives it to Python (docs/wire.md), with `extra` fields on top."""
    return {"schema": 1, "kind": "transition", "robot": "a", "env": 0, "episode": 0, "step": 1, "action": [0.5],
            "reward": 1.0, "task_reward": 0.0, "phi": 0.1, "phi_next": 0.2, "gamma": 0.9, "shaping_scale": 1.0,
            "terminated": False, "truncated": False, "success": False, "stage": None, "stamp_ns": 1, "obs": None,
            "next_obs": None, **extra}


def test_a_transition_names_its_reward_model_or_none():
    from stagewise.errors import WireError

    sha = "0123456789abcdef" * 4
    key = "stagewise/a/transition"
    assert Transition.from_msg(_msg(reward_model=sha), key).reward_model == sha
    assert Transition.from_msg(_msg(), key).reward_model is None  # an older actor, or --reward oracle|sparse
    assert Transition.from_msg(_msg(reward_model=None), key).reward_model is None
    for bad in (sha.upper(), sha[:63], sha + "0", sha[:63] + "g", "", 7):
        with pytest.raises(WireError, match=r"`stagewise/a/transition`: .*field `reward_model`"):
            Transition.from_msg(_msg(reward_model=bad), key)


def _stream_run(tmp_path, **overrides):
    """A --from-stream learner of robot `a` (nothing started: `_foreign` needs the config and an assembler)."""
    from stagewise.rl import config
    from stagewise.rl.stream_learn import StreamRun

    run = StreamRun(config.build("push-target", overrides), 0, tmp_path, ["a"], "tcp/127.0.0.1:1", None)
    run.assembler = Assembler(k=1, nstep=1, gamma=0.9, out=Replay(8, 1, 1),
                              obs_of=lambda o: np.asarray(o["state"], np.float32))
    return run


def _of(run, step=1, **fields):
    """A step of robot `a` shaped as `run`'s reward is (its gamma and scale), with `fields` on top."""
    import dataclasses

    r = run.cfg.reward_form
    return dataclasses.replace(_t(step, [0.5]), gamma=r.gamma, shaping_scale=r.shaping_scale, **fields)


def test_the_learner_refuses_transitions_of_another_reward_model(tmp_path, capsys):
    import tomllib

    from stagewise.rl.stream_learn import manifest_sha256

    shipped = tomllib.loads((launch.repo_root() / SHIPPED).read_text())["sha256"]
    run = _stream_run(tmp_path)  # --reward model, the task's shipped model
    assert run.expected_model() == (shipped, str(launch.repo_root() / SHIPPED))
    assert run._foreign(_of(run, reward_model=shipped)) is None
    other = "ab" * 32
    who, why = run._foreign(_of(run, reward_model=other))
    assert who == "a:model"
    assert why == f"a: transitions shaped by reward model {other[:12]}, this learner's is {shipped[:12]} " \
                  f"({launch.repo_root() / SHIPPED})"
    # refused and counted as the gamma refusal is, logged once
    run._refuse(who, why)
    run._refuse(*run._foreign(_of(run, step=2, reward_model=other)))
    assert run.foreign == {"a:model": 2}
    assert capsys.readouterr().out.count("refused") == 1

    # --model: the manifest named, its sha256 read once (a copy of the shipped one with another hash)
    manifest = tmp_path / "m.toml"
    manifest.write_text((launch.repo_root() / SHIPPED).read_text().replace(shipped, other.upper()))
    assert manifest_sha256(str(manifest)) == other
    mine = _stream_run(tmp_path, model=str(manifest))
    assert mine._foreign(_of(mine, reward_model=other)) is None
    who, why = mine._foreign(_of(mine, reward_model=shipped))
    assert who == "a:model" and why.endswith(f"this learner's is {other[:12]} ({manifest})"), why
    manifest.write_text("sha256 = 'not it'")  # read once: a later change does not move it
    assert mine._foreign(_of(mine, reward_model=other)) is None


def test_a_transition_that_names_no_model_is_accepted_and_logged_once_per_robot(tmp_path, capsys):
    run = _stream_run(tmp_path)
    run.robots = ["a", "b"]
    assert run._foreign(_of(run)) is None and run._foreign(_of(run, step=2)) is None
    assert run._foreign(_of(run, robot="b")) is None
    out = capsys.readouterr().out
    assert out.count("a: transitions name no reward model") == 1, out
    assert out.count("b: transitions name no reward model") == 1, out
    assert "unverifiable" in out and run.unverified == {"a", "b"} and run.foreign == {}


@pytest.mark.parametrize("reward", ["oracle", "sparse"])
def test_a_learner_without_a_reward_model_refuses_a_models_transitions(tmp_path, reward):
    run = _stream_run(tmp_path, reward=reward)
    assert run._foreign(_of(run)) is None
    who, why = run._foreign(_of(run, reward_model="cd" * 32))
    assert who == "a:model" and why == f"a: transitions shaped by reward model {'cd' * 6}, this learner's reward " \
                                       f"is --reward {reward} (no model's)"


def test_an_actors_last_words_are_read():
    log = "stuff\nstream: 596 transitions sent, 3 dropped, 596 progress sent, 10 episodes sent; policies: 2 accepted, " \
          "1 rejected, 0 dropped (queue full)\n"
    assert actor_report(log) == {"sent": 596, "dropped": 3, "policies_accepted": 2, "policies_rejected": 1}
    assert actor_report("killed before it said anything") == {}


def _actor(binary, endpoint, name, key, tmp):
    return subprocess.Popen([binary, "--log", "info", "run", "--task", "push-target", "--reward", "model", "--envs", "2",
                             "--robot-name", name, "--stream-images", "--width", "32", "--height", "32", "--policy",
                             "random", "--episodes", "0", "--hz", "50", "--max-steps", "50", "--connect", endpoint,
                             "--client", "--policy-key", key, "--log-file", str(tmp / f"{name}.swlog")],
                            stdout=open(tmp / f"{name}.log", "wb"), stderr=subprocess.STDOUT, cwd=launch.repo_root())


def _learner(tmp, endpoint, secret_file, out, *extra):
    return subprocess.Popen([sys.executable, "-m", "stagewise.rl", "--task", "push-target", "--reward", "model",
                             "--from-stream", "--actors", "0", "--robots", "a0", "--stream-connect", endpoint,
                             "--policy-secret-file", str(secret_file), "--smoke", "--steps", "2400", "--max-steps",
                             "50", "--checkpoint-every", "600", "--push-every", "1", "--out", str(out), *extra],
                            stdout=open(tmp / "learner.log", "ab"), stderr=subprocess.STDOUT)


def test_a_learner_killed_mid_run_resumes_while_its_actors_keep_acting(tmp_path, binary):
    """Actors at 50 Hz through a router; the learner is killed with kill -9 after its first checkpoint and resumed:
    the actors never stop, accept the learner's signed policies before and after, and a robot the learner was not
    told of is refused and counted."""
    endpoint = f"tcp/127.0.0.1:{launch.free_port()}"
    secret = os.urandom(32).hex()
    secret_file = tmp_path / "learner.key"
    secret_file.write_text(secret)
    key = public_key(secret).hex()
    router = subprocess.Popen([sys.executable, "-m", "stagewise.rl.router", endpoint], stdout=subprocess.PIPE)
    assert b"listening" in router.stdout.readline()
    actors = [_actor(binary, endpoint, n, key, tmp_path) for n in ("a0", "intruder")]
    out = tmp_path / "run"
    try:
        learner = _learner(tmp_path, endpoint, secret_file, out)
        deadline = time.monotonic() + 240
        while not (out / "seed-0" / "checkpoint.pt").exists() or \
                json.loads((out / "curves.json").read_text())["runs"][0]["env_steps"] < 600:
            assert learner.poll() is None, (tmp_path / "learner.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "learner.log").read_text()
            time.sleep(0.5)
        learner.send_signal(signal.SIGKILL)
        learner.wait(30)
        time.sleep(3)
        assert all(a.poll() is None for a in actors), "an actor stopped when its learner died"
        resumed = _learner(tmp_path, endpoint, secret_file, out, "--resume")
        assert resumed.wait(300) == 0, (tmp_path / "learner.log").read_text()
        assert all(a.poll() is None for a in actors), "an actor stopped"
    finally:
        for a in actors:
            a.send_signal(signal.SIGINT)
        for a in actors:
            a.wait(30)
        router.terminate()
        router.wait(10)
    run = json.loads((out / "curves.json").read_text())["runs"][0]
    s = run["stream"]
    assert run["env_steps"] >= 2400 and run["resumed_from"] and s["foreign"].get("intruder", 0) > 0
    # a0's transitions named the reward model this learner expects (the shipped one): none refused as another
    # model's, none accepted unverified
    assert "a0:model" not in s["foreign"], s["foreign"]
    assert "name no reward model" not in (tmp_path / "learner.log").read_text()
    # every step arrived; the actors' `--policy random` phase before the first push held no action (dropped)
    assert s["gaps"] == 0 and s["decisions"] > 300 and s["received"] >= run["env_steps"]
    report = actor_report((tmp_path / "a0.log").read_text())
    assert report["policies_accepted"] >= 2 and report["policies_rejected"] == 0, report


def test_a_pixel_learner_pushes_policies_its_actor_binds_to_its_frames(tmp_path, binary):
    """--from-stream --obs pixels: the pushed graph names its inputs (frames of 3 views at 32x32, the hand's
    fields) in its metadata, and the actor, rendering at that size, accepts every push and acts on its frames."""
    from stagewise.rl import cli, runner

    out = tmp_path / "run"
    (run,) = runner.learn(cli.parse(["--smoke", "--task", "push-target", "--reward", "model", "--from-stream",
                                     "--obs", "pixels", "--actors", "1", "--batch", "32", "--steps", "1600",
                                     "--push-every", "1", "--out", str(out)]))  # fmt: skip
    s = run["stream"]
    (report,) = s["actor_reports"]
    assert report["policies_accepted"] >= 2 and report["policies_rejected"] == 0, report
    assert s["gaps"] == 0 and s["decisions"] > 0 and run["updates"] > 0
    # its encoder started as the actors' reward model's (the shipped push-target model: its evaluation server
    # serves no reward to ask), not a random one of another shape
    from stagewise.rl import checkpoint as ckpt
    from stagewise.rl.pixels import PixelSpec, load_encoder

    state = ckpt.load(out / "seed-0" / "checkpoint.pt")["agent"]["pixels"]
    model = load_encoder(str(launch.repo_root() / "models/push-target/push-target-progress.toml"),
                         PixelSpec(("front", "side", "wrist"), 32, 32)).state_dict()
    assert {k.removeprefix("encoder.") for k in state if k.startswith("encoder.")} == set(model)
    assert all(state[f"encoder.{k}"].shape == v.shape for k, v in model.items())

    # --init: a fine-tune starts from that agent: its first evaluation (same held-out seeds, deterministic
    # actor) reads what the source's last one read
    fine = tmp_path / "fine"
    (tuned,) = runner.learn(cli.parse(["--smoke", "--task", "push-target", "--reward", "model", "--from-stream",
                                       "--obs", "pixels", "--actors", "1", "--batch", "32", "--steps", "800",
                                       "--push-every", "1", "--init", str(out), "--init-replay",
                                       "--out", str(fine)]))  # fmt: skip
    assert tuned["initialised_from"]["checkpoint"] == str(out / "seed-0" / "checkpoint.pt")
    assert tuned["initialised_from"]["updates"] == run["updates"]
    # the source's replay came along, and this run's transitions went in beside it
    assert tuned["initialised_from"]["replay"] == run["replay_added"] > 0
    assert tuned["replay_added"] > run["replay_added"]
    first, last = tuned["checkpoints"][0], run["checkpoints"][-1]
    assert first["steps"] == 0 and last["steps"] == run["env_steps"]
    assert (first["success"], first["final_progress"]) == (last["success"], last["final_progress"])


def test_init_refuses_a_checkpoint_of_another_set_up(tmp_path):
    """--init names the file and every field that shapes the agent differently."""
    from stagewise.rl import checkpoint as ckpt, config
    from stagewise.rl.train import LearnError, SeedRun

    theirs = config.build("push-target", {"obs": "pixels", "agent.net": (64, 64)})
    ckpt.save(tmp_path / "checkpoint.pt", {"config": theirs.to_dict(), "agent": {}, "counters": {"step": 0}})
    mine = config.build("push-target", {"init": str(tmp_path)})
    assert mine.random_steps == 0  # a trained policy explores with its own actions
    with pytest.raises(LearnError) as e:
        SeedRun(mine, 0, tmp_path / "out").init_from(str(tmp_path))
    text = str(e.value)
    assert str(tmp_path / "checkpoint.pt") in text and "obs 'pixels' (this run: 'state')" in text
    assert "agent.net [64, 64] (this run: [128, 128])" in text
    (tmp_path / "empty").mkdir()
    with pytest.raises(LearnError, match="expected one checkpoint.pt .* found 0"):
        SeedRun(mine, 0, tmp_path / "out").init_from(str(tmp_path / "empty"))
    with pytest.raises(LearnError, match="no such checkpoint"):
        SeedRun(mine, 0, tmp_path / "out").init_from(str(tmp_path / "nowhere"))
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "checkpoint.pt").write_bytes(b"PK\x03\x04 not a whole file")
    with pytest.raises(LearnError, match="not a learner's checkpoint"):
        SeedRun(mine, 0, tmp_path / "out").init_from(str(tmp_path / "torn"))
