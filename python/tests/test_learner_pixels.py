"""`stagewise learn --obs pixels` (issue 47 (b)): the policy and its critics read the camera frames through a conv
encoder the critics train with random shifts (DrQ), started from the reward model's encoder, and the hand's
position and gripper width; the replay keeps the frames as bytes; the export is one ONNX graph on raw frames +
proprioception whose manifest names its views and size. The learning figures are benchmarks (docs/lab), not
tests."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from stagewise import rl
from stagewise.rl import cli, runner
from stagewise.rl.agent import Agent, Replay, actor_onnx, feature_map
from stagewise.rl.config import PROPRIOCEPTION, AgentConfig
from stagewise.rl.pixels import PixelFeatures, PixelSpec, frames_vector, load_encoder, random_shift

ROOT = Path(__file__).resolve().parents[2]
PUSH_MODEL = ROOT / "models/push-target/push-target-progress.toml"
SPEC = PixelSpec(["front", "side", "wrist"], 32, 32)


def _features(shift: int = 2) -> PixelFeatures:
    w, b = feature_map(list(PROPRIOCEPTION))
    return PixelFeatures(SPEC, load_encoder(str(PUSH_MODEL), SPEC), w, b, shift)


def _obs(rng, n: int) -> np.ndarray:
    return np.concatenate([rng.integers(0, 256, (n, SPEC.size)), rng.uniform(-0.3, 0.3, (n, 4))], 1).astype(np.float32)


def test_a_random_shift_is_an_edge_padded_crop_of_each_image():
    x = torch.arange(2 * 3 * 5 * 6, dtype=torch.float32).reshape(2, 3, 5, 6)
    assert torch.equal(random_shift(x, 0), x)
    gen = torch.Generator().manual_seed(0)
    y = random_shift(x, 2, gen)
    assert y.shape == x.shape
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2), mode="replicate")
    for i in range(2):  # each image is one window of its padded self, all channels alike
        hits = [(dy, dx) for dy in range(5) for dx in range(5) if torch.equal(y[i], padded[i, :, dy:dy + 5, dx:dx + 6])]
        assert hits, f"image {i} is not a crop of its padded self"


def test_the_replay_keeps_frames_as_bytes_and_returns_them_as_they_were_seen():
    rng = np.random.default_rng(0)
    buf = Replay(8, SPEC.size + 4, 4, pix=SPEC.size)
    assert buf.s_pix.dtype == torch.uint8 and buf.s.shape == (8, 4)
    obs = _obs(rng, 3)
    for k in range(2):
        buf.add(obs[k], np.zeros(4), 1.0, obs[k + 1], 0.99)
    s, a, r, s2, disc, _ = buf.sample(16)
    rows = {tuple(o) for o in obs[:2]}
    assert s.shape == (16, SPEC.size + 4) and all(tuple(x) in rows for x in s.numpy())
    # a checkpoint's buffer goes back in; one of another layout is refused naming the camera bytes
    other = Replay(8, SPEC.size + 4, 4, pix=SPEC.size)
    other.load_state_dict(buf.state_dict())
    assert torch.equal(other.s_pix[:2], buf.s_pix[:2]) and torch.equal(other.s2[:2], buf.s2[:2])
    with pytest.raises(ValueError, match="camera bytes"):
        Replay(8, SPEC.size + 4, 4).load_state_dict(buf.state_dict())


def test_the_critics_train_the_encoder_and_the_actor_does_not():
    import copy

    rng = np.random.default_rng(1)
    agent = Agent(list(PROPRIOCEPTION), 4, AgentConfig(net=(32, 32)), 0, pixels=_features())
    buf = Replay(64, SPEC.size + 4, 4, pix=SPEC.size)
    obs = _obs(rng, 33)
    for k in range(32):
        buf.add(obs[k], rng.uniform(-1, 1, 4), float(k % 3), obs[k + 1], 0.99)
    batch = buf.sample(16)
    before = {k: v.clone() for k, v in agent.pix.encoder.state_dict().items()}
    grads = []
    for actor_step in (False, True):  # the same update with and without the actor's step
        a = copy.deepcopy(agent)
        torch.manual_seed(0)
        a.update(batch, actor_step=actor_step)
        grads.append([p.grad.clone() for p in a.pix.encoder.parameters()])
        moved = [k for k, v in a.pix.encoder.state_dict().items() if not torch.equal(v, before[k])]
        assert moved, "a critic update left the encoder as it was"
    # the encoder's gradient is the critics' alone: the actor reads its features detached (DrQ)
    assert all(torch.equal(g0, g1) for g0, g1 in zip(*grads))


def test_with_head_training_the_replay_holds_conv_features_and_only_the_linear_layer_learns():
    rng = np.random.default_rng(4)
    w, b = feature_map(list(PROPRIOCEPTION))
    pf = PixelFeatures(SPEC, load_encoder(str(PUSH_MODEL), SPEC), w, b, 2, train_convs=False)
    agent = Agent(list(PROPRIOCEPTION), 4, AgentConfig(net=(32, 32)), 0, pixels=pf)
    obs = _obs(rng, 17)
    z = pf.conv_features(obs[0])
    assert z.shape == (3 * 512 + 4,) and np.array_equal(z[-4:], obs[0, -4:])
    buf = Replay(32, len(z), 4)
    buf.transform = pf.conv_features
    for k in range(16):
        buf.add(obs[k], rng.uniform(-1, 1, 4), 1.0, obs[k + 1], 0.99)
    # the features of a cached observation are those of the raw one
    raw = agent.features(torch.as_tensor(obs[:2]), raw=True)
    np.testing.assert_allclose(agent.features(buf.s[:2]).detach().numpy(), raw.detach().numpy(), atol=1e-5)
    before = {k: v.clone() for k, v in pf.encoder.state_dict().items()}
    agent.update(buf.sample(8), actor_step=True)
    moved = {k for k, v in pf.encoder.state_dict().items() if not torch.equal(v, before[k])}
    assert moved == {"fc.weight", "fc.bias"}, moved
    with pytest.raises(ValueError, match="encoder_train"):
        rl.build("push-target", {"reward": "model", "obs": "pixels", "encoder_train": "head",
                                 "encoder_init": "random"})


def test_the_exported_policy_is_the_actor_on_raw_frames_and_hand(tmp_path):
    import onnxruntime as ort

    rng = np.random.default_rng(2)
    agent = Agent(list(PROPRIOCEPTION), 4, AgentConfig(net=(32, 32)), 0, pixels=_features())
    sess = ort.InferenceSession(actor_onnx(agent), providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    assert inp.name == "state" and inp.shape[1] == SPEC.size + 4
    obs = _obs(rng, 5)
    got = sess.run(None, {"state": obs})[0]
    np.testing.assert_allclose(got, agent.act(obs, deterministic=True), atol=1e-5)
    # the frames matter: another image, another action
    other = obs.copy()
    other[:, :SPEC.size] = 255 - other[:, :SPEC.size]
    assert np.abs(sess.run(None, {"state": other})[0] - got).max() > 1e-4
    manifest = tomllib.loads(rl.export_policy(agent, tmp_path, "p", task="push-target",
                                              state_names=list(PROPRIOCEPTION), description="test",
                                              pixels=SPEC.manifest()).read_text())  # fmt: skip
    assert manifest["pixels"] == {"views": ["front", "side", "wrist"], "width": 32, "height": 32}
    assert manifest["state_names"] == list(PROPRIOCEPTION) and manifest["state_size"] == 4


def test_frames_become_the_policys_leading_values_and_bad_frames_are_named():
    rng = np.random.default_rng(3)
    images = {v: rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for v in SPEC.views}
    vec = frames_vector(images, SPEC)
    assert vec.dtype == np.float32 and vec.shape == (SPEC.size,)
    np.testing.assert_array_equal(vec[:3 * 32 * 32].reshape(3, 32, 32), images["front"].transpose(2, 0, 1))
    np.testing.assert_array_equal(vec[-3 * 32 * 32:].reshape(3, 32, 32), images["wrist"].transpose(2, 0, 1))
    with pytest.raises(ValueError, match="'side'"):
        frames_vector({k: v for k, v in images.items() if k != "side"}, SPEC)
    with pytest.raises(ValueError, match="'wrist'.*16"):
        frames_vector({**images, "wrist": np.zeros((16, 16, 3), np.uint8)}, SPEC)
    with pytest.raises(ValueError, match="reads 32x32"):
        load_encoder(str(PUSH_MODEL), PixelSpec(["front"], 64, 64))


def test_pixels_options_are_checked_before_anything_starts():
    cfg = rl.build("push-target", {"reward": "sparse", "obs": "pixels"})
    assert cfg.augment_symmetry == 0.0
    train, evals = rl.serve_args(cfg, "sparse", "r", 4, 100), rl.serve_args(cfg, "sparse", "r-eval", 10, 0)
    for args in (train, evals):  # both servers put their frames, at the learner's size, on the observations
        assert "--images" in args and args[args.index("--width") + 1] == "32"
    with pytest.raises(ValueError, match="augment_symmetry"):
        rl.build("push-target", {"reward": "model", "obs": "pixels", "augment_symmetry": 1.0})
    with pytest.raises(ValueError, match="encoder_init"):
        rl.build("push-target", {"reward": "model", "encoder_init": "random"})
    with pytest.raises(ValueError, match="pixel_shift"):
        rl.build("push-target", {"reward": "model", "obs": "pixels", "pixel_shift": 20})


def test_smoke_run_learns_from_pixels_and_exports_a_pixel_policy(tmp_path, binary):
    """The CI smoke test of the pixel learner: the shipped push-target reward model's reward, episodes ended by its
    success detection, 2 demonstrations, the encoder started from the reward model's."""
    out = tmp_path / "run"
    (run,) = runner.learn(cli.parse(["--smoke", "--task", "push-target", "--reward", "model", "--obs", "pixels",
                                     "--episode-ends", "model", "--demos", "2", "--steps", "800", "--batch", "32",
                                     "--learning-starts", "400", "--out", str(out)]))  # fmt: skip
    assert run["demos"]["episodes"] == 2 and run["checkpoints"][-1]["steps"] >= 800 and run["updates"] > 0
    manifest = tomllib.loads((out / "seed-0" / "policy" / "push-target-model-0.toml").read_text())
    assert manifest["pixels"] == SPEC.manifest() and manifest["state_names"] == list(PROPRIOCEPTION)
    assert "embeddings" not in manifest
    # the runtime runs it as it is: eval policy renders its views at its size (no reward model needed)
    report = tmp_path / "eval.json"
    r = subprocess.run([binary, "--log", "warn", "eval", "policy", "--task", "push-target", "--policy",
                        str(out / "seed-0" / "policy" / "push-target-model-0.toml"), "--episodes", "2",
                        "--json", str(report)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0 and json.loads(report.read_text())["episodes"] == 2, r.stdout + r.stderr
    # a random encoder is the other start; a manifest that is not a progress model is named
    with pytest.raises(Exception, match="encoder-init"):
        runner.learn(cli.parse(["--smoke", "--task", "push-target", "--reward", "sparse", "--obs", "pixels",
                                "--encoder-init", str(tmp_path / "missing.toml"), "--steps", "100",
                                "--out", str(tmp_path / "bad")]))  # fmt: skip
