"""The locator (`python -m stagewise.training locator`, issue 47): frames + proprioception -> the objects' table
positions, trained on a person's marks; the pixel learner reads it frozen (`--obs pixels --locator FILE.pt`) with
the state learner's symmetry augmentation, and the exported policy computes it from raw frames. benches/
oracle_marks.py (the oracle plays the person) writes marks and scores a locator. Learning figures are benchmarks
(docs/lab), not tests."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from stagewise import rl
from stagewise.rl import cli, runner
from stagewise.rl.agent import Agent, Replay, Symmetry, actor_onnx, feature_map
from stagewise.rl.config import PROPRIOCEPTION, AgentConfig
from stagewise.rl.pixels import LocatedFeatures, PixelSpec
from stagewise.training import keypoints, locator

ROOT = Path(__file__).resolve().parents[2]
SPEC = PixelSpec(["front", "side", "wrist"], 32, 32)
NAMES = ["block0_x", "block0_y", "target_x", "target_y"]


def bench(*args: str) -> str:
    return subprocess.run([sys.executable, str(ROOT / "benches" / "oracle_marks.py"), *args], check=True,
                          capture_output=True, text=True, timeout=300).stdout


@pytest.fixture(scope="module")
def trained(tmp_path_factory, recorded_keypoints):
    """(dir, locator file): a keypoint encoder and a locator trained for a few steps on 3 recorded push-target
    episodes (32x32), the oracle's marks of every 4th frame of the first 2."""
    d = tmp_path_factory.mktemp("loc")
    recorded_keypoints(d, episodes=3, seed=7, steps=20)
    bench("write", "--dataset", str(d / "data"), "--episodes", "2", "--every", "4", "--out", str(d / "marks.json"))
    locator.main(["--dataset", str(d / "data"), "--marks", str(d / "marks.json"), "--encoder", str(d / "kp.pt"),
                  "--out", str(d / "loc.pt"), "--steps", "300", "--hidden", "32", "--threads", "1"])  # fmt: skip
    return d, d / "loc.pt"


def test_marks_train_a_locator_that_reads_the_views(trained):
    d, path = trained
    marks = json.loads((d / "marks.json").read_text())
    assert marks["names"] == NAMES and {m["episode"] for m in marks["marks"]} == {0, 1}
    loc, saved = locator.load(str(path))
    assert loc.names == NAMES and loc.views == SPEC.views and loc.proprio == list(PROPRIOCEPTION)
    assert saved["info"]["marks"] == len(marks["marks"]) and saved["info"]["marked_episodes"] == 2
    # the keypoint convs are the encoder file's, untouched; the MLP fitted the marks
    enc, _ = keypoints.load(str(d / "kp.pt"))
    assert all(torch.equal(a, b) for a, b in zip(enc.state_dict().values(), loc.enc.state_dict().values()))
    assert max(saved["info"]["mean_abs_error_cm"]["train"].values()) < 3.0
    # scored on the unmarked third episode with and without its frames: blanking the views moves the answers
    score = json.loads(bench("score", "--locator", str(path), "--dataset", str(d / "data"), "--every", "3"))
    assert set(score["mean_abs_error_cm_views"]) == set(NAMES)
    assert score["mean_abs_error_cm_views"] != score["mean_abs_error_cm_blanked"]


def test_a_logged_runs_frames_train_a_locator_beside_a_recording(tmp_path, trained, binary):
    """Marks of a robot's own logged run (`run --stream-images --log-file`, `log export`: no oracle labels) join
    the recording's: the locator reads both sets; a set without labels is refused where training needs them."""
    d, _ = trained
    subprocess.run([binary, "--log", "warn", "run", "--task", "push-target", "--width", "32", "--height", "32",
                    "--policy", str(ROOT / "models/policies/push-target-learned/push-target-learned.toml"),
                    "--allow-unsigned-policies", "--episodes", "2", "--envs", "1", "--seed", "11", "--hz", "0",
                    "--stream-images", "--no-stream", "--log-file", str(tmp_path / "r.swlog")],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    subprocess.run([binary, "--log", "warn", "log", "export", str(tmp_path / "r.swlog"), "--task", "push-target",
                    "--out", str(tmp_path / "logged")], check=True, capture_output=True, timeout=300)  # fmt: skip
    from stagewise.training import data

    with pytest.raises(SystemExit, match=r"file-000.parquet: no column\(s\) \['progress_gt', 'stage_gt', 'degraded'\]"):
        data.load(str(tmp_path / "logged"), stage_names=[], proportions=[])
    logged = data.load(str(tmp_path / "logged"), stage_names=[], proportions=[], labels=False)
    assert len(logged.episodes) == 2 and np.isnan(logged.episodes[0].progress).all()
    bench("write", "--dataset", str(tmp_path / "logged"), "--episodes", "2", "--every", "4", "--out",
          str(tmp_path / "logged.json"))  # fmt: skip
    common = ["--encoder", str(d / "kp.pt"), "--steps", "50", "--hidden", "16", "--threads", "1"]
    locator.main(["--dataset", str(d / "data"), "--marks", str(d / "marks.json"), "--dataset",
                  str(tmp_path / "logged"), "--marks", str(tmp_path / "logged.json"), "--out",
                  str(tmp_path / "both.pt"), *common])  # fmt: skip
    _, saved = locator.load(str(tmp_path / "both.pt"))
    mine = len(json.loads((d / "marks.json").read_text())["marks"])
    theirs = len(json.loads((tmp_path / "logged.json").read_text())["marks"])
    assert saved["info"]["marks"] == mine + theirs and saved["info"]["marked_episodes"] == 4
    assert len(saved["info"]["datasets"]) == 2
    with pytest.raises(SystemExit, match="2 --dataset but 1 --marks"):
        locator.main(["--dataset", str(d / "data"), "--dataset", str(tmp_path / "logged"), "--marks",
                      str(d / "marks.json"), "--out", str(tmp_path / "x.pt"), *common])  # fmt: skip
    other = json.loads((tmp_path / "logged.json").read_text())
    other["names"] = ["target_x", "target_y", "block0_x", "block0_y"]
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match=r"other.json: marks \['target_x'.*but .*marks.json marks \['block0_x'"):
        locator.main(["--dataset", str(d / "data"), "--marks", str(d / "marks.json"), "--dataset",
                      str(tmp_path / "logged"), "--marks", str(tmp_path / "other.json"), "--out",
                      str(tmp_path / "x.pt"), *common])  # fmt: skip
    assert not (tmp_path / "x.pt").exists()


def test_bad_marks_and_files_are_named(tmp_path, trained):
    d, path = trained
    args = ["--dataset", str(d / "data"), "--encoder", str(d / "kp.pt"), "--out", str(tmp_path / "x.pt")]
    (tmp_path / "junk.json").write_text("{")
    with pytest.raises(SystemExit, match="junk.json: not a marks file"):
        locator.main(["--marks", str(tmp_path / "junk.json"), *args])
    (tmp_path / "short.json").write_text(json.dumps({"names": NAMES, "marks": [{"episode": 0, "frame": 0,
                                                                                 "values": [0.1]}]}))
    with pytest.raises(SystemExit, match="short.json: every mark needs 4 finite values"):
        locator.main(["--marks", str(tmp_path / "short.json"), *args])
    (tmp_path / "far.json").write_text(json.dumps({"names": NAMES, "marks": [{"episode": 0, "frame": 99999,
                                                                               "values": [0.0] * 4}]}))
    with pytest.raises(SystemExit, match="far.json: a mark of episode 0 frame 99999"):
        locator.main(["--marks", str(tmp_path / "far.json"), *args])
    with pytest.raises(SystemExit, match="x.pt: not a keypoint encoder file"):
        locator.main(["--marks", str(d / "marks.json"), "--dataset", str(d / "data"), "--encoder",
                      str(tmp_path / "x.pt"), "--out", str(tmp_path / "y.pt")])  # fmt: skip
    assert not (tmp_path / "x.pt").exists() and not (tmp_path / "y.pt").exists()
    (tmp_path / "bad.pt").write_bytes(b"nope")
    with pytest.raises(ValueError, match="bad.pt: not a locator file"):
        locator.load(str(tmp_path / "bad.pt"))
    loc, _ = locator.load(str(path))
    w, b = feature_map(list(PROPRIOCEPTION) + NAMES)
    with pytest.raises(ValueError, match="the locator reads front, side, wrist at 32x32, the env sends front at 64x64"):
        LocatedFeatures(PixelSpec(["front"], 64, 64), loc, list(PROPRIOCEPTION), w, b)


def test_the_learner_reads_located_positions_and_the_policy_computes_them_from_frames(trained):
    _, path = trained
    loc, _ = locator.load(str(path))
    names = list(PROPRIOCEPTION) + NAMES
    w, b = feature_map(names)
    lf = LocatedFeatures(SPEC, loc, list(PROPRIOCEPTION), w, b)
    assert lf.names == names and not [p for p in lf.parameters() if p.requires_grad]
    agent = Agent(list(PROPRIOCEPTION), 4, AgentConfig(net=(32, 32)), 0, pixels=lf)
    rng = np.random.default_rng(0)
    obs = np.concatenate([rng.integers(0, 256, (9, SPEC.size)), rng.uniform(-0.3, 0.3, (9, 4))], 1).astype(np.float32)
    s = lf.conv_features(obs[0])
    assert s.shape == (8,) and np.array_equal(s[:4], obs[0, -4:]) and np.isfinite(s).all()
    # the replay keeps (hand, located positions); the symmetry maps them as the state learner's (about the block)
    buf = Replay(16, 8, 4)
    buf.transform = lf.conv_features
    for k in range(8):
        buf.add(obs[k], rng.uniform(-1, 1, 4), 1.0, obs[k + 1], 0.99)
    batch = buf.sample(8)
    mapped = Symmetry(names, 1.0)(batch, torch.Generator().manual_seed(3))
    bx, by = names.index("block0_x"), names.index("block0_y")
    assert torch.equal(mapped[0][:, [bx, by]], batch[0][:, [bx, by]])  # the pivot stays
    assert not torch.equal(mapped[0], batch[0])
    before = {k: v.clone() for k, v in lf.state_dict().items()}
    agent.update(mapped, actor_step=True)
    assert all(torch.equal(v, before[k]) for k, v in lf.state_dict().items())  # the locator stays frozen
    import onnxruntime as ort

    sess = ort.InferenceSession(actor_onnx(agent), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"state": obs})[0], agent.act(obs, deterministic=True), atol=1e-5)


def test_config_takes_a_locator_only_with_pixels_and_keeps_the_symmetry_on(trained):
    _, path = trained
    cfg = rl.build("push-target", {"reward": "model", "obs": "pixels", "locator": str(path)})
    assert cfg.augment_symmetry == 1.0
    assert rl.build("push-target", {"reward": "model", "obs": "pixels"}).augment_symmetry == 0.0
    with pytest.raises(ValueError, match="locator: is an --obs pixels option"):
        rl.build("push-target", {"reward": "model", "locator": str(path)})
    with pytest.raises(ValueError, match="locator: replaces the encoder"):
        rl.build("push-target", {"reward": "model", "obs": "pixels", "locator": str(path), "encoder_train": "head",
                                 "encoder_init": str(path)})


def test_smoke_run_learns_on_a_locator_and_exports_a_pixel_policy(tmp_path, trained):
    _, path = trained
    out = tmp_path / "run"
    (run,) = runner.learn(cli.parse(["--smoke", "--task", "push-target", "--reward", "model", "--obs", "pixels",
                                     "--locator", str(path), "--episode-ends", "model", "--demos", "2",
                                     "--steps", "600", "--batch", "32", "--learning-starts", "300",
                                     "--out", str(out)]))  # fmt: skip
    assert run["updates"] > 0 and run["checkpoints"][-1]["steps"] >= 600
    manifest = tomllib.loads((out / "seed-0" / "policy" / "push-target-model-0.toml").read_text())
    assert manifest["pixels"] == SPEC.manifest() and manifest["state_names"] == list(PROPRIOCEPTION)
    curves = json.loads((out / "curves.json").read_text())
    assert curves["config"]["locator"] == str(path) and curves["config"]["augment_symmetry"] == 1.0


def test_positions_located_at_the_start_come_from_the_episodes_first_observation(trained):
    """--locate-at-start target_x,target_y: the input is (now, first); the target is located on the first
    observation's frames, the block and the hand on the current one, in the agent and in its ONNX alike."""
    _, path = trained
    loc, _ = locator.load(str(path))
    names = list(PROPRIOCEPTION) + NAMES
    w, b = feature_map(names)
    lf = LocatedFeatures(SPEC, loc, list(PROPRIOCEPTION), w, b, ["target_x", "target_y"])
    plain = LocatedFeatures(SPEC, loc, list(PROPRIOCEPTION), w, b)
    row = SPEC.size + len(PROPRIOCEPTION)
    assert lf.in_size == 2 * row and plain.in_size == row
    rng = np.random.default_rng(1)
    rows = np.concatenate([rng.integers(0, 256, (6, SPEC.size)), rng.uniform(-0.3, 0.3, (6, 4))], 1)
    obs = np.concatenate([rows[:3], rows[3:]], 1).astype(np.float32)  # now: rows 0-2, first: rows 3-5
    got = lf.located_state(torch.as_tensor(obs)).numpy()
    now, first = (plain.located_state(torch.as_tensor(r, dtype=torch.float32)).numpy() for r in (rows[:3], rows[3:]))
    np.testing.assert_allclose(got[:, :6], now[:, :6], atol=1e-6)  # hand, block: now
    np.testing.assert_allclose(got[:, 6:], first[:, 6:], atol=1e-6)  # target: the first observation
    agent = Agent(list(PROPRIOCEPTION), 4, AgentConfig(net=(32, 32)), 0, pixels=lf)
    import onnxruntime as ort

    sess = ort.InferenceSession(actor_onnx(agent), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"state": obs})[0], agent.act(obs, deterministic=True), atol=1e-5)
    with pytest.raises(ValueError, match="locate_at_start: names a --locator's positions"):
        rl.build("push-target", {"reward": "model", "obs": "pixels", "locate_at_start": "target_x"})


def test_remembering_envs_append_each_episodes_first_observation(serve):
    from stagewise.rl.envs import LearnerEnv

    p = serve("--task", "push-target", "--images", "--width", "32", "--height", "32")
    env = LearnerEnv(connect=p.endpoint, connect_timeout=30, obs="pixels", remember_first=True)
    try:
        half = SPEC.size + len(PROPRIOCEPTION)
        assert len(env.feature_names) == 2 * half
        o0, _ = env.reset(seed=3)
        assert o0.shape == (2 * half,) and np.array_equal(o0[:half], o0[half:])
        for _ in range(3):
            o, *_ = env.step(np.array([1.0, 0.0, 0.0, 0.0], np.float32))
        assert np.array_equal(o[half:], o0[:half]) and not np.array_equal(o[:half], o0[:half])
        o1, _ = env.reset(seed=4)  # a new episode: its own first observation
        assert np.array_equal(o1[:half], o1[half:]) and not np.array_equal(o1[half:], o0[half:])
    finally:
        env.close()


def test_smoke_run_with_positions_located_at_the_start_runs_in_the_runtime(tmp_path, trained, binary):
    """The learner's envs append each episode's first observation; the exported policy says remember_first, and
    `stagewise eval policy` feeds it (the runtime keeps each env's first observation)."""
    from types import SimpleNamespace

    from stagewise.errors import ServeError
    from stagewise.rl.train import located_features

    _, path = trained
    cfg = rl.build("push-target", {"reward": "model", "obs": "pixels", "locator": str(path),
                                   "locate_at_start": "target_x,block9_x"})
    with pytest.raises(ServeError, match="--locate-at-start target_x,block9_x: it locates .*, not block9_x"):
        located_features(SimpleNamespace(pixels=SPEC), cfg)
    out = tmp_path / "run"
    runner.learn(cli.parse(["--smoke", "--task", "push-target", "--reward", "model", "--obs", "pixels",
                            "--locator", str(path), "--locate-at-start", "target_x,target_y", "--episode-ends",
                            "model", "--demos", "2", "--steps", "400", "--batch", "32", "--learning-starts", "200",
                            "--out", str(out)]))  # fmt: skip
    policy = out / "seed-0" / "policy" / "push-target-model-0.toml"
    manifest = tomllib.loads(policy.read_text())
    assert manifest["pixels"] == {**SPEC.manifest(), "remember_first": True}
    r = subprocess.run([binary, "--log", "warn", "eval", "policy", "--policy", str(policy), "--task", "push-target",
                        "--episodes", "2", "--seed", "3", "--json", str(tmp_path / "ev.json")],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "ev.json").read_text())["episodes"] == 2


def test_the_learner_refuses_a_locator_it_cannot_use_naming_the_file(tmp_path, trained):
    from types import SimpleNamespace

    from stagewise.errors import ServeError
    from stagewise.rl.train import located_features

    _, path = trained
    loc, saved = locator.load(str(path))
    env = SimpleNamespace(pixels=SPEC)
    cfg = rl.build("push-target", {"reward": "model", "obs": "pixels", "locator": str(path)})
    assert located_features(env, cfg).names == list(PROPRIOCEPTION) + NAMES
    with pytest.raises(ServeError, match=r"loc.pt: the locator reads front, side, wrist at 32x32, the env sends"):
        located_features(SimpleNamespace(pixels=PixelSpec(SPEC.views, 64, 64)), cfg)
    # a locator of the target alone gives the symmetry maps no pivot
    target_only = locator.Locator(loc.enc, loc.views, loc.proprio, ["target_x", "target_y"], 32)
    locator.save(str(tmp_path / "target.pt"), target_only, saved["encoder"], {})
    cfg = rl.build("push-target", {"reward": "model", "obs": "pixels", "locator": str(tmp_path / "target.pt")})
    with pytest.raises(ServeError, match="target.pt: it locates target_x, target_y; the symmetry maps pivot"):
        located_features(env, cfg)
    cfg = rl.build("push-target", {"reward": "model", "obs": "pixels", "augment_symmetry": 0.0,
                                   "locator": str(tmp_path / "target.pt")})
    assert located_features(env, cfg).names == list(PROPRIOCEPTION) + ["target_x", "target_y"]


def test_train_convs_fine_tunes_the_keypoint_convs_on_the_marks(tmp_path, trained):
    d, _ = trained
    locator.main(["--dataset", str(d / "data"), "--marks", str(d / "marks.json"), "--encoder", str(d / "kp.pt"),
                  "--out", str(tmp_path / "tc.pt"), "--train-convs", "1", "--steps", "3", "--batch", "4",
                  "--hidden", "16", "--threads", "1"])  # fmt: skip
    loc, saved = locator.load(str(tmp_path / "tc.pt"))
    enc, _ = keypoints.load(str(d / "kp.pt"))
    assert saved["info"]["train_convs"] is True
    before, after = enc.conv.state_dict().values(), loc.enc.conv.state_dict().values()
    assert any(not torch.equal(a, b) for a, b in zip(before, after))
