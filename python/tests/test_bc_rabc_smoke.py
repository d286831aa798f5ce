"""The RA-BC benchmark's path, seeded and CI-sized: benches/bc_rabc.py (RA-BC mode) records a handful of degraded
pick-place demonstrations with `stagewise record --presets`, labels them with the shipped pick-place progress model
(`stagewise label`: per-frame progress and core's RA-BC weights), trains the three arms (BC, RA-BC with the model's
weights, RA-BC with oracle weights) for a few dozen steps on two training seeds, exports each policy to ONNX and
evaluates it with `stagewise eval --policy`. The success figures themselves are benchmark results
(benches/bc_rabc.md), not tests; this checks that the path runs and that its outputs say what they should."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
ARMS = ["BC", "RA-BC model", "RA-BC oracle"]
PRESETS = ["miss-grasp", "wrong-place", "freeze", "off-table"]


def test_rabc_bench_records_labels_trains_evaluates_and_reports(tmp_path, binary):
    import onnxruntime as ort
    from PIL import Image

    out = tmp_path / "bc_rabc_smoke"
    work = tmp_path / "work"
    episodes, eval_episodes, steps = 6, 3, 40
    cmd = [sys.executable, str(REPO / "benches" / "bc_rabc.py"), "--exe", binary, "--episodes", str(episodes),
           "--degraded", "0.6", "--presets", ",".join(PRESETS), "--data-seed", "4000000", "--steps", str(steps),
           "--batch", "64", "--hidden", "32", "--depth", "2", "--train-seeds", "0,1", "--eval-episodes",
           str(eval_episodes), "--jobs", "1", "--work", str(work), "--out", str(out)]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    rep = json.loads(Path(f"{out}.json").read_text())
    ds = rep["dataset"]
    assert ds["task"] == "pick-place" and ds["episodes"] == episodes and ds["presets"] == ",".join(PRESETS)
    assert 0.0 <= ds["demo_success_rate"] <= 1.0
    lab = rep["label"]
    assert lab["model"] == "models/pick-place/pick-place-progress.toml" and lab["chunk_size"] == 25
    # The oracle arm's numpy weights are LeRobot's formula; on the model's progress they reproduce `stagewise label`.
    assert lab["numpy_vs_label_max_abs_diff"] < 1e-5
    assert 0 < lab["frames"] and 0 <= lab["frames_of_failed_episodes"] <= lab["frames"]
    for src in ["model", "oracle"]:
        assert 0.0 < lab["mean_weight"][src] <= 1.0
    by_preset = lab["by_preset"]
    assert sum(c["episodes"] for c in by_preset.values()) == episodes
    # `record --degraded 0.6 --presets ...`: 60% of the episodes degraded, spread evenly, cycling over the presets.
    expected = {}
    for i in range(episodes):
        before, after = int(i * 0.6), int((i + 1) * 0.6)
        name = PRESETS[before % len(PRESETS)] if after > before else "none"
        expected[name] = expected.get(name, 0) + 1
    assert {k: c["episodes"] for k, c in by_preset.items()} == expected
    assert lab["degraded_frames"] == sum(c["frames"] for k, c in by_preset.items() if k != "none")
    assert sum(c["frames"] for c in by_preset.values()) == lab["frames"]
    assert by_preset["none"]["successes"] >= 1  # the clean expert succeeds on these seeds

    assert list(rep["results"]) == ARMS
    for arm, rs in rep["results"].items():
        assert [r["seed"] for r in rs] == [0, 1]
        for r in rs:
            assert r["arm"] == arm and r["episodes"] == eval_episodes
            assert 0 <= r["successes"] <= eval_episodes
            assert r["success_rate"] == r["successes"] / eval_episodes
            assert 0.0 <= r["mean_final_progress"] <= 1.0
            # The exported policy: state [N,14] in, action [N,4] out, dx/dy/dz in [-1,1], the gripper +-1.
            manifest = Path(r["manifest"])
            assert 'kind = "policy"' in manifest.read_text() and "state_size = 14" in manifest.read_text()
            sess = ort.InferenceSession(str(manifest.with_suffix(".onnx")))
            x = np.random.default_rng(0).normal(scale=0.2, size=(5, 14)).astype(np.float32)
            (y,) = sess.run(["action"], {"state": x})
            assert y.shape == (5, 4) and np.all(np.abs(y[:, :3]) <= 1.0) and set(np.abs(y[:, 3])) == {1.0}
        assert rep["mean_success"][arm] == np.mean([r["success_rate"] for r in rs])
    assert rep["training"]["steps"] == steps and rep["eval"]["episodes"] == eval_episodes
    # Same seed, same batches: the BC arm and the weighted arms differ only in the weights, so their policies differ.
    bc0, rabc0 = (Path(rep["results"][a][0]["manifest"]).with_suffix(".onnx").read_bytes() for a in ARMS[:2])
    assert bc0 != rabc0

    png = Image.open(f"{out}.png")
    assert png.format == "PNG" and png.size == (640, 360)
    md = Path(f"{out}.md").read_text()
    assert f"--task pick-place --episodes {episodes} --degraded 0.6 --presets {','.join(PRESETS)}" in md
    for arm, rs in rep["results"].items():
        row = next(line for line in md.splitlines() if line.startswith(f"| {arm} |"))
        assert all(f"{r['successes']}/{eval_episodes}" in row for r in rs)
        assert f"**{rep['mean_success'][arm]:.3f}**" in row
    assert f"![success rates]({out.name}.png)" in md
