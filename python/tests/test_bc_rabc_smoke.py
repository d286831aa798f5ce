"""The user's RA-BC path, seeded and CI-sized, with real processes: `stagewise record` a handful of degraded
pick-place demonstrations (`--presets`), `stagewise label` them with the shipped pick-place progress model
(sarm_progress.parquet + core's RA-BC weights), train the three arms of benches/bc_rabc.py through the package
(`python -m stagewise.bc`: BC, RA-BC on the model's progress, RA-BC on the oracle's) for a few dozen steps on two
training seeds, and evaluate each policy directory with `stagewise eval policy`. The success figures themselves
are benchmark results (docs/lab/bc_rabc.md), not tests; this checks that the path runs and that its outputs say
what they should."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = "models/pick-place/pick-place-progress.toml"
PRESETS = ["miss-grasp", "wrong-place", "freeze", "off-table"]
EPISODES, EVAL_EPISODES, STEPS, CHUNK = 6, 3, 40, 25
SMALL = ["--steps", str(STEPS), "--batch", "64", "--hidden", "32", "--depth", "2", "--chunk", str(CHUNK)]


def sh(*cmd, cwd=REPO):
    run = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{cmd}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run.stdout


@pytest.fixture(scope="module")
def labelled(tmp_path_factory, binary):
    """A recorded and labelled degraded pick-place dataset, and an oracle progress file of its ground truth."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    work = tmp_path_factory.mktemp("rabc")
    ds = work / "ds"
    sh(binary, "--log", "warn", "record", "--task", "pick-place", "--episodes", EPISODES, "--degraded", 0.6,
       "--presets", ",".join(PRESETS), "--seed", 4000000, "--width", 32, "--height", 32, "--out", ds)
    sh(binary, "--log", "warn", "label", "--dataset", ds, "--model", MODEL, "--chunk-size", CHUNK, "--kappa", 0.01,
       "--weights-csv", work / "weights.csv", "--summary-json", work / "label.json", "--plots", 0,
       "--provider", "cpu", "--workers", 2)
    t = pa.concat_tables([pq.read_table(f, columns=["index", "episode_index", "frame_index", "progress_gt"])
                          for f in sorted((ds / "data").glob("*/*.parquet"))])
    oracle = work / "oracle_progress.parquet"
    pq.write_table(pa.table({"index": t.column("index"), "episode_index": t.column("episode_index"),
                             "frame_index": t.column("frame_index"),
                             "progress_sparse": t.column("progress_gt").cast(pa.float32())}), oracle)
    return work, ds, oracle


def test_weights_are_the_label_commands_and_the_data_is_what_record_wrote(labelled):
    from stagewise.bc import load_frames, load_progress, rabc_weights

    work, ds, _ = labelled
    f = load_frames(ds, ["degraded"])
    p = load_progress(ds / "sarm_progress.parquet", f, "progress_sparse")
    w, delta = rabc_weights(p, f.episode, f.frame, CHUNK, 0.01)
    # LeRobot's formula in numpy reproduces `stagewise label`'s (core's RabcWeights) on the same progress.
    with open(work / "weights.csv") as fh:
        lab = {int(r["index"]): float(r["weight"]) for r in csv.DictReader(fh)}
    assert np.abs(np.array([lab[int(i)] for i in f.index]) - w).max() < 1e-6
    summary = json.loads((work / "label.json").read_text())["rabc"]["summary"]
    assert summary["frames"] == len(w) and abs(summary["mean_weight"] - float(w.mean())) < 1e-6
    assert summary["num_zero_weight"] == int((w == 0).sum()) and summary["num_full_weight"] == int((w == 1).sum())
    assert abs(summary["delta_mean"] - delta.mean()) < 1e-6 and 0.0 < w.mean() <= 1.0
    # `record --degraded 0.6 --presets ...`: 60% of the episodes degraded, spread evenly, cycling over the presets.
    meta = json.loads((ds / "meta/stagewise_record.json").read_text())["episodes"]
    expected = {}
    for i in range(EPISODES):
        before, after = int(i * 0.6), int((i + 1) * 0.6)
        name = PRESETS[before % len(PRESETS)] if after > before else "none"
        expected[name] = expected.get(name, 0) + 1
    got = {}
    for e in meta:
        got[e["degradation"]] = got.get(e["degradation"], 0) + 1
    assert got == expected
    degraded_eps = {e["episode_index"] for e in meta if e["degradation"] != "none"}
    assert (f.extra["degraded"] == 1).sum() == np.isin(f.episode, list(degraded_eps)).sum()
    assert any(e["success"] for e in meta if e["degradation"] == "none")  # the clean expert succeeds here


def test_three_arms_train_export_and_evaluate(labelled, binary, tmp_path):
    import onnxruntime as ort

    from stagewise.bc import BCConfig, NetConfig, RabcConfig, TrainConfig, train

    work, ds, oracle = labelled
    arms = {"BC": ["--mode", "bc"], "RA-BC model": ["--mode", "rabc"],
            "RA-BC oracle": ["--mode", "rabc", "--progress", oracle]}
    onnx = {}
    for arm, flags in arms.items():
        for seed in [0, 1]:
            out = tmp_path / f"{flags[1]}{'-oracle' if '--progress' in flags else ''}-seed{seed}"
            if (arm, seed) == ("RA-BC model", 0):  # the command line once, the same through the API else
                sh(sys.executable, "-m", "stagewise.bc", "--dataset", ds, *flags, "--out", out, "--seed", seed,
                   *SMALL)
            else:
                cfg = BCConfig(mode=flags[1], net=NetConfig(hidden=32, depth=2), rabc=RabcConfig(chunk=CHUNK),
                               train=TrainConfig(steps=STEPS, batch=64, seed=seed))
                train(ds, out, cfg, progress=oracle if "--progress" in flags else None, log=lambda _: None)
            rec = json.loads((out / "training.json").read_text())
            assert rec["mode"] == flags[1] and rec["task"] == "pick-place" and rec["config"]["train"]["seed"] == seed
            assert rec["episodes"] == EPISODES and rec["train_episodes"] == EPISODES
            assert rec["train_frames"] == rec["frames"] - EPISODES  # every frame but each episode's last
            assert len(rec["losses"]) == 1 and np.isfinite(rec["losses"]).all()
            assert rec["export_check"]["max_abs_diff_motion"] < 1e-4
            if flags[1] == "rabc":
                assert rec["progress"]["path"] == str((oracle if "--progress" in flags
                                                       else ds / "sarm_progress.parquet").resolve())
                assert 0.0 < rec["weights"]["mean_weight"] <= 1.0
            # The exported policy: state [N,14] in, action [N,4] out, dx/dy/dz in [-1,1], the gripper +-1.
            manifest = out / f"{out.name}.toml"
            text = manifest.read_text()
            assert 'kind = "policy"' in text and "state_size = 14" in text and 'task = "pick-place"' in text
            assert 'state_names = ["ee_x", "ee_y", "ee_z", "gripper_width", "grasped", "block0_x"' in text
            onnx[(arm, seed)] = (out / f"{out.name}.onnx").read_bytes()
            sess = ort.InferenceSession(onnx[(arm, seed)], providers=["CPUExecutionProvider"])
            x = np.random.default_rng(0).normal(scale=0.2, size=(5, 14)).astype(np.float32)
            (y,) = sess.run(["action"], {"state": x})
            assert y.shape == (5, 4) and np.all(np.abs(y[:, :3]) <= 1.0) and set(np.abs(y[:, 3])) == {1.0}
            # The policy directory is what `stagewise eval policy` takes, as it is.
            res = tmp_path / f"{out.name}.eval.json"
            sh(binary, "--log", "warn", "eval", "policy", "--policy", manifest, "--task", "pick-place",
               "--episodes", EVAL_EPISODES, "--seed", 3000000, "--json", res, "--provider", "cpu")
            r = json.loads(res.read_text())
            assert r["episodes"] == EVAL_EPISODES and 0 <= r["successes"] <= EVAL_EPISODES
            assert r["success_rate"] == r["successes"] / EVAL_EPISODES and 0.0 <= r["mean_final_progress"] <= 1.0
    # `stagewise run --policy` takes the manifest as it is, too.
    from stagewise import launch

    log = tmp_path / "run.swlog"
    out = sh(binary, "--log", "warn", "run", "--task", "pick-place", "--reward", "oracle", "--policy",
             tmp_path / "rabc-seed0" / "rabc-seed0.toml", "--episodes", 1, "--listen",
             f"tcp/127.0.0.1:{launch.free_port()}", "--log-file", log, "--provider", "cpu")
    assert "env-steps" in out and log.stat().st_size > 0
    # Same seed, same batches: the arms differ only in the weights, so their policies differ; seeds differ too.
    assert len({onnx[(arm, 0)] for arm in arms}) == 3
    assert onnx[("BC", 0)] != onnx[("BC", 1)]
