"""The keypoint encoder (`python -m stagewise.training keypoints`, issue 47): trained on a recorded dataset's frames
alone, read by the pixel learner frozen (`--encoder-init FILE.pt --encoder-train head`), exported inside the
policy's ONNX graph. The learning figures are benchmarks (docs/lab), not tests."""

from __future__ import annotations

import subprocess
import tomllib

import numpy as np
import pytest
import torch

from stagewise import rl
from stagewise.rl import cli, runner
from stagewise.rl.agent import Agent, Replay, actor_onnx, feature_map
from stagewise.rl.config import PROPRIOCEPTION, AgentConfig
from stagewise.rl.pixels import PixelFeatures, PixelSpec, load_encoder
from stagewise.training import keypoints

SPEC = PixelSpec(["front", "side", "wrist"], 32, 32)


@pytest.fixture(scope="module")
def encoder_file(tmp_path_factory, recorded_keypoints):
    """A keypoint encoder trained for a few steps on 2 recorded push-target episodes (32x32, 3 views)."""
    return recorded_keypoints(tmp_path_factory.mktemp("kp"), episodes=2, seed=5, steps=30)


def test_spatial_softmax_returns_where_each_map_peaks():
    ss = keypoints.SpatialSoftmax(8, 16)
    with torch.no_grad():
        ss.log_temp.fill_(-3.0)  # sharp: the expectation sits on the peak
    maps = torch.zeros(1, 2, 8, 16)
    maps[0, 0, 0, 15] = 5.0  # top right: x = 1, y = -1
    maps[0, 1, 4, 0] = 5.0  # left edge, row 4 of 8: x = -1, y = -1 + 2 * 4 / 7
    np.testing.assert_allclose(ss(maps)[0].detach().numpy(), [1, -1, -1, -1 + 8 / 7], atol=1e-3)


def test_training_on_frames_moves_the_points_and_the_pixel_learner_reads_them_frozen(encoder_file):
    enc = load_encoder(str(encoder_file), SPEC)
    assert isinstance(enc, keypoints.KeypointEncoder) and enc.points == 4
    _, saved = keypoints.load(str(encoder_file))
    assert saved["views"] == SPEC.views and saved["info"]["frames"] > 100 and saved["info"]["steps"] == 30
    fresh = keypoints.KeypointEncoder(32, 32, 4, 8)
    assert any(not torch.equal(a, b) for a, b in zip(enc.conv.state_dict().values(), fresh.conv.state_dict().values()))
    # the output holds the points and every pair's displacement, standardised by their spread over the frames
    std = enc.conv[-1]
    assert std.std.shape == (2 * 4 + 4 * 3,) and (std.std > 0).all() and not torch.equal(std.std, torch.ones(20))
    with torch.no_grad():
        x = torch.randn(2, 3, 32, 32)
        pts = enc.locate(x).reshape(2, 4, 2)
        out = enc.conv(x) * std.std + std.mean
    np.testing.assert_allclose(out[:, :8].numpy(), pts.flatten(1).numpy(), atol=1e-5)
    np.testing.assert_allclose(out[:, 8:10].numpy(), (pts[:, 0] - pts[:, 1]).numpy(), atol=1e-5)
    # --encoder-train head: the replay caches those (per view) + the hand; only fc learns
    w, b = feature_map(list(PROPRIOCEPTION))
    pf = PixelFeatures(SPEC, enc, w, b, 2, train_convs=False)
    agent = Agent(list(PROPRIOCEPTION), 4, AgentConfig(net=(32, 32)), 0, pixels=pf)
    rng = np.random.default_rng(0)
    obs = np.concatenate([rng.integers(0, 256, (9, SPEC.size)), rng.uniform(-0.3, 0.3, (9, 4))], 1).astype(np.float32)
    z = pf.conv_features(obs[0])
    assert z.shape == (3 * 20 + 4,) and np.isfinite(z).all() and np.array_equal(z[-4:], obs[0, -4:])
    buf = Replay(16, len(z), 4)
    buf.transform = pf.conv_features
    for k in range(8):
        buf.add(obs[k], rng.uniform(-1, 1, 4), 1.0, obs[k + 1], 0.99)
    before = {k: v.clone() for k, v in enc.state_dict().items()}
    agent.update(buf.sample(8), actor_step=True)
    assert {k for k, v in enc.state_dict().items() if not torch.equal(v, before[k])} == {"fc.weight", "fc.bias"}
    # the exported policy computes the points itself from raw frames
    import onnxruntime as ort

    sess = ort.InferenceSession(actor_onnx(agent), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"state": obs})[0], agent.act(obs, deterministic=True), atol=1e-5)


def test_bad_encoder_files_are_named(tmp_path, encoder_file, binary):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="junk.pt: not a keypoint encoder"):
        load_encoder(str(junk), SPEC)
    other = tmp_path / "other.pt"
    torch.save({"state_dict": {}}, other)
    with pytest.raises(ValueError, match="other.pt: not a keypoint encoder file"):
        load_encoder(str(other), SPEC)
    with pytest.raises(ValueError, match="reads 32x32 frames, the policy 64x64"):
        load_encoder(str(encoder_file), PixelSpec(SPEC.views, 64, 64))
    with pytest.raises(SystemExit, match="none: missing meta/info.json"):
        keypoints.main(["--dataset", str(tmp_path / "none"), "--out", str(tmp_path / "x.pt"), "--steps", "1"])
    # datasets of two frame sizes are refused, naming the second
    subprocess.run([binary, "--log", "warn", "record", "--task", "push-target", "--episodes", "1", "--seed", "6",
                    "--width", "16", "--height", "16", "--out", str(tmp_path / "small")],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    with pytest.raises(SystemExit, match="small: frames of .*one size"):
        keypoints.main(["--dataset", str(encoder_file.parent / "data"), "--dataset", str(tmp_path / "small"),
                        "--out", str(tmp_path / "x.pt"), "--steps", "1"])  # fmt: skip
    assert not (tmp_path / "x.pt").exists()


def test_smoke_run_learns_on_frozen_keypoints_and_exports_a_pixel_policy(tmp_path, binary, encoder_file):
    out = tmp_path / "run"
    (run,) = runner.learn(cli.parse(["--smoke", "--task", "push-target", "--reward", "model", "--obs", "pixels",
                                     "--encoder-init", str(encoder_file), "--encoder-train", "head",
                                     "--episode-ends", "model", "--demos", "2", "--steps", "600", "--batch", "32",
                                     "--learning-starts", "300", "--out", str(out)]))  # fmt: skip
    assert run["updates"] > 0 and run["checkpoints"][-1]["steps"] >= 600
    manifest = tomllib.loads((out / "seed-0" / "policy" / "push-target-model-0.toml").read_text())
    assert manifest["pixels"] == SPEC.manifest() and manifest["state_names"] == list(PROPRIOCEPTION)
    assert rl.build("push-target", {"reward": "model", "obs": "pixels", "encoder_train": "head",
                                    "encoder_init": str(encoder_file)}).encoder_init == str(encoder_file)
