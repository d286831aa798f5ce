"""stagewise.bc on a real recorded and labelled dataset: RA-BC weights against DESIGN.md's formula, runs that
reproduce bit for bit, and the clear errors before training (a column missing, a progress file of another
dataset, an output directory holding another run) that write nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stagewise.bc import BCConfig, BCDataError, NetConfig, RabcConfig, TrainConfig, rabc_weights, train

REPO = Path(__file__).resolve().parents[2]
TINY = BCConfig(train=TrainConfig(steps=20, batch=32))


def sh(*cmd):
    run = subprocess.run([str(c) for c in cmd], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, binary):
    ds = tmp_path_factory.mktemp("bc") / "ds"
    sh(binary, "--log", "warn", "record", "--task", "pick-place", "--episodes", 3, "--degraded", 0.5, "--seed",
       4100000, "--width", 32, "--height", 32, "--out", ds)
    sh(binary, "--log", "warn", "label", "--dataset", ds, "--model", "models/pick-place/pick-place-progress.toml",
       "--plots", 0, "--provider", "cpu", "--workers", 1)
    return ds


@pytest.fixture
def copy(dataset, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(dataset, dst)
    return dst


def test_weights_follow_the_formula():
    # One episode, chunk 1: r = [0.1, 0, -0.05, 0.25, 0] (the last frame looks at itself).
    p = np.array([0.0, 0.1, 0.1, 0.05, 0.3], dtype=np.float32)
    w, r = rabc_weights(p, np.zeros(5, dtype=np.int64), np.arange(5), chunk=1, kappa=0.01)
    assert np.allclose(r, [0.1, 0.0, -0.05, 0.25, 0.0], atol=1e-7)
    mu, sigma = max(r.mean(), 0), max(r.std(), 1e-6)
    soft = min(max((0.0 - (mu - 2 * sigma)) / (4 * sigma + 1e-6), 0), 1)
    assert np.allclose(w, [1.0, soft, 0.0, 1.0, soft], atol=1e-6) and 0 < soft < 1
    # Episodes do not see each other's frames; chunk past the end takes the episode's last frame.
    w2, r2 = rabc_weights(np.array([0.2, 0.4, 0.9, 0.0], np.float32), np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), 5)
    assert np.allclose(r2, [0.2, 0.0, -0.9, 0.0], atol=1e-7) and w2[2] == 0 and w2[0] == 1


def test_same_seed_same_policy_and_modes_differ(dataset, tmp_path):
    a = train(dataset, tmp_path / "a", TINY, log=lambda _: None)
    b = train(dataset, tmp_path / "b", TINY, log=lambda _: None)
    c = train(dataset, tmp_path / "c", BCConfig(mode="bc", train=TINY.train), log=lambda _: None)
    assert a.onnx.read_bytes() == b.onnx.read_bytes() != c.onnx.read_bytes()
    assert a.record["losses"] == b.record["losses"] and a.manifest == tmp_path / "a" / "a.toml"
    rec = json.loads(a.training_json.read_text())
    assert rec["files"] and all(len(h) == 64 for h in rec["files"].values()) and len(rec["progress"]["sha256"]) == 64


def test_missing_column_is_named_before_training(copy, tmp_path):
    import pyarrow.parquet as pq

    f = sorted((copy / "data").glob("*/*.parquet"))[0]
    pq.write_table(pq.read_table(f).drop_columns(["action"]), f)
    with pytest.raises(BCDataError, match=r"file-000\.parquet: no column 'action'"):
        train(copy, tmp_path / "out", TINY)
    assert not (tmp_path / "out").exists()


def test_progress_of_another_dataset_is_refused(copy, tmp_path):
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = copy / "sarm_progress.parquet"
    t = pq.read_table(path)
    pq.write_table(t.filter(pc.not_equal(t.column("episode_index"), 2)), tmp_path / "fewer_episodes.parquet")
    with pytest.raises(BCDataError, match=r"fewer_episodes\.parquet: 2 episodes \(0\.\.1\), the dataset .* has 3"):
        train(copy, tmp_path / "out", TINY, progress=tmp_path / "fewer_episodes.parquet")
    pq.write_table(t.filter(pc.not_equal(t.column("index"), 5)), tmp_path / "short.parquet")
    with pytest.raises(BCDataError, match=r"short\.parquet: episode 0 has (\d+) frames there, (\d+) in the dataset"):
        train(copy, tmp_path / "out", TINY, progress=tmp_path / "short.parquet")
    with pytest.raises(BCDataError, match="no column 'progress_dense'"):
        train(copy, tmp_path / "out", BCConfig(rabc=RabcConfig(column="progress_dense"), train=TINY.train))
    path.unlink()
    with pytest.raises(BCDataError, match=r"sarm_progress\.parquet: no progress file .*stagewise label"):
        train(copy, tmp_path / "out", TINY)
    train(copy, tmp_path / "bc", BCConfig(mode="bc", train=TINY.train), log=lambda _: None)  # BC reads none
    assert not (tmp_path / "out").exists()


def test_rel_features_need_the_state_names(copy, tmp_path):
    info = json.loads((copy / "meta/info.json").read_text())
    info["features"]["observation.state"]["names"] = None
    (copy / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(BCDataError, match=r"meta/info\.json: rel features .* --features raw"):
        train(copy, tmp_path / "out", TINY)
    (copy / "meta/stagewise_record.json").unlink()
    raw = BCConfig(net=NetConfig(features="raw"), train=TINY.train)
    with pytest.raises(BCDataError, match=r"names no task .*--task"):
        train(copy, tmp_path / "out", raw)
    res = train(copy, tmp_path / "out", BCConfig(net=raw.net, train=raw.train, task="pick-place"), log=lambda _: None)
    assert json.loads(res.training_json.read_text())["task"] == "pick-place"


def test_out_directory_holding_another_run_is_refused_unless_overwrite(dataset, tmp_path):
    out = tmp_path / "policy"
    out.mkdir()
    (out / "notes.txt").write_text("another run")
    cmd = [sys.executable, "-m", "stagewise.bc", "--dataset", dataset, "--mode", "rabc", "--out", out,
           "--steps", "5", "--batch", "16"]
    run = subprocess.run([str(c) for c in cmd], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and f"{out}: holds another run (notes.txt...); pass --overwrite" in run.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    run = subprocess.run([str(c) for c in cmd + ["--overwrite"]], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "policy.onnx", "policy.toml", "training.json"]
    bad = subprocess.run([sys.executable, "-m", "stagewise.bc", "--dataset", str(dataset), "--mode", "rabc",
                          "--out", str(tmp_path / "x"), "--chunk", "0"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "rabc.chunk 0 (must be >= 1)" in bad.stderr and not (tmp_path / "x").exists()


def test_plain_list_columns_read_as_fixed_size_ones(dataset, copy):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stagewise.bc import load_frames

    # `stagewise record` writes fixed-size lists; other LeRobot writers may write plain lists of one length.
    f = sorted((copy / "data").glob("*/*.parquet"))[0]
    t = pq.read_table(f)
    for c in ["observation.state", "action"]:
        t = t.set_column(t.schema.get_field_index(c), c, t.column(c).cast(pa.list_(pa.float32())))
    pq.write_table(t, f)
    a, b = load_frames(dataset), load_frames(copy)
    assert np.array_equal(a.state, b.state) and np.array_equal(a.action, b.action) and b.state.shape[1] == 14
    ragged = t.set_column(t.schema.get_field_index("action"), "action",
                          pa.array([[0.0] * (3 if i == 7 else 4) for i in range(len(t))], pa.list_(pa.float32())))
    pq.write_table(ragged, f)
    with pytest.raises(BCDataError, match="column 'action' has 3 values at row 7, 4 at row 0"):
        load_frames(copy)


def test_successful_only_and_holdout_pick_episodes_as_the_shipped_bc_did(dataset, tmp_path):
    # The fixture: episodes 0 and 2 succeed, 1 (miss-grasp) fails. holdout 0.1 of 2 episodes holds one out.
    meta = json.loads((dataset / "meta/stagewise_record.json").read_text())["episodes"]
    assert [e["success"] for e in meta] == [True, False, True]
    cfg = BCConfig(mode="bc", train=TrainConfig(steps=5, batch=16, holdout=0.1, successful_only=True))
    rec = train(dataset, tmp_path / "p", cfg, log=lambda _: None).record
    frames = {e["episode_index"]: e["frames"] for e in meta}
    assert rec["train_episodes"] == 1 and rec["held_out_episodes"] == 1
    assert rec["train_frames"] in (frames[0] - 1, frames[2] - 1)  # each episode's last frame left out
    assert len(rec["val_mse_move"]) == 3 and 0.0 <= rec["val_gripper_sign_acc"] <= 1.0
    # One successful episode cannot be split: refused before training.
    one = tmp_path / "one"
    shutil.copytree(dataset, one)
    rec_meta = json.loads((one / "meta/stagewise_record.json").read_text())
    for e in rec_meta["episodes"]:
        e["success"] = e["episode_index"] == 0
    (one / "meta/stagewise_record.json").write_text(json.dumps(rec_meta))
    with pytest.raises(BCDataError, match="holdout 0.1 leaves no training episode of 1"):
        train(one, tmp_path / "q", cfg)
    assert not (tmp_path / "q").exists()
