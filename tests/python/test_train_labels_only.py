"""What reaches a reward model's training from a dataset (issue 48 item 3): the frames, the proprioception it is
told to read, and a person's labels (the stage starts and ends, the success flag), never the simulator's own
columns. A recorded dataset is copied with every simulator-only column scrambled (`progress_gt`, `stage_gt`,
`degraded`, the state fields a robot does not measure: `grasped`, the block's and the target's poses) and
`stagewise train --prepare-only` writes byte-identical training arrays for both; moving one person's stage start
changes them (the targets do come from the labels).
"""

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run

READ = ("ee_x", "ee_y", "ee_z", "gripper_width")  # what the model is told to read (`--state`)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("labels")
    ds = tmp / "ds"
    run("record", "--task", "push-target", "--episodes", "4", "--degraded", "0.5", "--seed", "910000", "--width",
        "16", "--height", "16", "--threads", "1", "--out", str(ds))  # fmt: skip
    return tmp, ds


def _rewrite(path, fn):
    t = pq.read_table(path)
    pq.write_table(fn(t), path)


def _scramble_simulator_columns(ds):
    rng = np.random.default_rng(0)
    names = json.loads((ds / "meta/info.json").read_text())["features"]["observation.state"]["names"]
    hidden = [i for i, n in enumerate(names) if n not in READ]
    assert {"grasped", "block0_x", "target_x"} <= {names[i] for i in hidden}

    def fn(t):
        n = t.num_rows
        state = np.asarray(t.column("observation.state").to_pylist(), dtype=np.float32)
        state[:, hidden] = rng.normal(size=(n, len(hidden))).astype(np.float32)
        t = t.set_column(t.schema.get_field_index("observation.state"), t.schema.field("observation.state"),
                         pa.array(list(state), type=t.schema.field("observation.state").type))
        for col, values in (("progress_gt", rng.random(n).astype(np.float32)),
                            ("stage_gt", rng.integers(0, 3, n)), ("degraded", rng.integers(0, 2, n))):
            i = t.schema.get_field_index(col)
            t = t.set_column(i, t.schema.field(i), pa.array(values, type=t.schema.field(i).type))
        return t

    for f in (ds / "data").rglob("*.parquet"):
        _rewrite(f, fn)


def _prepare(tmp, ds, name):
    out = tmp / f"model-{name}"
    run("train", "--dataset", str(ds), "--views", "front,side,wrist", "--state", ",".join(READ), "--out", str(out),
        "--name", "m", "--val-every", "0", "--prepare-only")  # fmt: skip
    data = out / "m.train-data"
    arrays = {p.name: np.load(p) for p in sorted(data.glob("*.npy"))}
    assert set(arrays) == {"frames.npy", "state.npy", "stage.npy", "tau.npy"}, list(data.iterdir())
    meta = json.loads((data / "meta.json").read_text())
    assert [e["targets"] for e in meta["episodes"]] == ["annotation"] * 4
    return arrays


def _same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_no_simulator_column_reaches_training(recorded):
    tmp, ds = recorded
    scrambled = tmp / "scrambled"
    shutil.copytree(ds, scrambled)
    _scramble_simulator_columns(scrambled)
    original = _prepare(tmp, ds, "original")
    assert _same(original, _prepare(tmp, scrambled, "scrambled"))

    # a person's label moved: the second stage of episode 0 starts 3 frames later
    moved = tmp / "moved"
    shutil.copytree(ds, moved)

    def later(t):
        starts = t.column("sparse_subtask_start_frames").to_pylist()
        ends = t.column("sparse_subtask_end_frames").to_pylist()
        starts[0][1] += 3
        ends[0][0] += 3
        for col, v in (("sparse_subtask_start_frames", starts), ("sparse_subtask_end_frames", ends)):
            i = t.schema.get_field_index(col)
            t = t.set_column(i, t.schema.field(i), pa.array(v, type=t.schema.field(i).type))
        return t

    for f in (moved / "meta/episodes").rglob("*.parquet"):
        _rewrite(f, later)
    assert not _same(original, _prepare(tmp, moved, "moved"))


def test_the_readout_is_written_to_the_manifest_and_served(recorded):
    """`stagewise train` serves the readout the losses train (soft: every stage's progress weighted by its
    probability) unless told `-- --progress hard`; the runtime reads the model either way."""
    tmp, ds = recorded
    for readout, extra in (("soft", []), ("hard", ["--", "--progress", "hard"])):
        out = tmp / f"readout-{readout}"
        run("train", "--dataset", str(ds), "--views", "front,side,wrist", "--state", "gripper_width", "--out",
            str(out), "--name", "m", "--epochs", "1", "--samples-per-epoch", "64", "--val-every", "0",
            *extra)  # fmt: skip
        other = "hard" if readout == "soft" else "soft"
        manifest = (out / "m.toml").read_text()
        assert f'progress = "{readout}"' in manifest and f'progress = "{other}"' not in manifest
        assert json.loads((out / "m.train.json").read_text())["args"]["progress"] == readout
        labelled = tmp / f"labels-{readout}.parquet"
        run("label", "--dataset", str(ds), "--model", str(out / "m.toml"), "--out", str(labelled), "--plots", "0",
            "--provider", "cpu", "--workers", "1")  # fmt: skip
        t = pq.read_table(labelled).to_pydict()
        phi = np.asarray(t[next(c for c in t if "progress" in c and "delta" not in c)], dtype=float)
        assert len(phi) > 0 and np.isfinite(phi).all() and ((phi >= 0) & (phi <= 1)).all()
