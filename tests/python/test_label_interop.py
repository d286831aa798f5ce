"""`stagewise label` output read the way LeRobot reads it (pyarrow), checked against the dataset and against
LeRobot's RA-BC formula (a numpy transcription of `RABCWeights` in lerobot/policies/sarm/rabc.py: float32 deltas
`phi[min(i + chunk, T - 1)] - phi[i]`, dataset-wide mean/std, soft weights between 0 and kappa).
"""

import csv

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from conftest import CHUNK, KAPPA, MODEL

COLUMNS = ["index", "episode_index", "frame_index", "progress_sparse"]


def data_frames(ds):
    """(index, episode_index, frame_index) of every row of the dataset's data files."""
    tables = [pq.read_table(p, columns=COLUMNS[:3]) for p in sorted((ds / "data").glob("chunk-*/file-*.parquet"))]
    t = pa.concat_tables(tables)
    return {c: t.column(c).to_numpy() for c in COLUMNS[:3]}


def lerobot_rabc_weights(episode_index, frame_index, progress, chunk_size, kappa, eps=1e-6):
    """Per-row weights as LeRobot computes them (rows in the given order)."""
    deltas = np.zeros(len(progress), dtype=np.float64)
    for ep in np.unique(episode_index):
        rows = np.flatnonzero(episode_index == ep)
        rows = rows[np.argsort(frame_index[rows])]
        phi = progress[rows].astype(np.float64)
        last = len(phi) - 1
        ahead = np.minimum(np.arange(len(phi)) + chunk_size, last)
        deltas[rows] = phi[ahead] - phi
    d = np.array(deltas, dtype=np.float32)
    mean = max(float(np.mean(d)), 0.0)
    std = max(float(np.std(d)), eps)
    lower = np.float32(mean - 2 * std)
    soft = np.clip((d - lower) / np.float32(4 * std + eps), 0, 1)
    w = np.where(d > np.float32(kappa), np.float32(1.0), np.where(d >= 0, soft, np.float32(0.0)))
    return w.astype(np.float64), mean, std


def test_column_contract(labelled):
    table = pq.read_table(labelled["progress"])
    assert table.column_names == COLUMNS
    assert [str(t) for t in table.schema.types] == ["int64", "int64", "int64", "float"]
    meta = table.schema.metadata or {}
    assert meta.get(b"reward_model_path") == MODEL.encode()

    cols = {c: table.column(c).to_numpy() for c in COLUMNS}
    assert np.all(np.diff(cols["index"]) > 0), "rows sorted by index, each once"
    frames = data_frames(labelled["dataset"])
    order = np.argsort(frames["index"])
    for c in COLUMNS[:3]:
        np.testing.assert_array_equal(cols[c], frames[c][order], err_msg=c)
    p = cols["progress_sparse"]
    assert p.dtype == np.float32
    assert np.all(np.isfinite(p)) and p.min() >= 0.0 and p.max() <= 1.0
    # An untrained model still moves: the labels are not one constant.
    assert p.std() > 0


def test_weights_match_core_and_lerobots_formula(labelled):
    t = pq.read_table(labelled["progress"])
    ep, fr, p = (t.column(c).to_numpy() for c in ["episode_index", "frame_index", "progress_sparse"])
    ours, mean, std = lerobot_rabc_weights(ep, fr, p, CHUNK, KAPPA)

    with open(labelled["weights"]) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(p)
    core = {int(r["index"]): float(r["weight"]) for r in rows}
    idx = t.column("index").to_numpy()
    core_w = np.array([core[int(i)] for i in idx])
    # same cases (0 / soft / 1) everywhere; soft weights equal up to float32 rounding of the mean and std
    np.testing.assert_array_equal(core_w == 0.0, ours == 0.0)
    np.testing.assert_array_equal(core_w == 1.0, ours == 1.0)
    np.testing.assert_allclose(core_w, ours, rtol=0, atol=1e-6)
    # and the weights are not all one value (the check would be vacuous)
    assert 0 < np.count_nonzero(ours == 1.0) < len(ours)

    s = labelled["summary"]["rabc"]["summary"]
    assert labelled["summary"]["frames"] == len(p)
    np.testing.assert_allclose(s["mean_weight"], core_w.mean(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(s["mean_weight"], ours.mean(), rtol=0, atol=1e-6)
    assert s["num_zero_weight"] == int(np.count_nonzero(ours == 0.0))
    assert s["num_full_weight"] == int(np.count_nonzero(ours == 1.0))
    np.testing.assert_allclose([s["delta_mean"], s["delta_std"]], [mean, std], rtol=1e-6, atol=1e-9)
    assert f"mean weight {s['mean_weight']:.4f}" in labelled["stdout"]


def test_plot_written(labelled):
    png = labelled["dataset"] / "sarm_progress_plots" / "episode_0000.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (labelled["dataset"] / "sarm_progress_plots" / "episode_0001.png").exists()
