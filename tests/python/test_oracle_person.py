"""benches/oracle_person.py, the simulator's oracle playing the person of the labelled rounds (issue 48): per
episode only stage starts and an outcome, read off an exported `run --reward oracle` log, and `stagewise annotate
--from` takes them."""

import importlib.util
import json

import numpy as np
import pyarrow.parquet as pq

from conftest import ROOT, run

spec = importlib.util.spec_from_file_location("oracle_person", ROOT / "benches" / "oracle_person.py")
oracle_person = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle_person)


def test_stage_starts_are_first_entries_and_unreached_stages_start_at_the_end():
    # enters stage 1 at 2, falls back to 0 at 4 (not a new start), enters 2 at 6; never succeeds
    got = oracle_person.person_labels(np.array([0, 0, 1, 1, 0, 1, 2, 2]), np.zeros(8, bool), 3)
    assert got == {"start_frames": [0, 2, 6], "success": False}
    # skips stage 1 (straight to 2 at 3): stage 1 is empty, starting where 2 starts; succeeds on the last frame
    got = oracle_person.person_labels(np.array([0, 0, 0, 2, 2]), np.array([0, 0, 0, 0, 1], bool), 3)
    assert got == {"start_frames": [0, 3, 3], "success": True}
    # never leaves stage 0: the later stages start (empty) at the episode's end
    assert oracle_person.person_labels(np.zeros(5, int), np.zeros(5, bool), 3)["start_frames"] == [0, 5, 5]


def test_labels_of_an_exported_oracle_run_are_accepted_by_annotate(tmp_path):
    log, ds, labels = tmp_path / "run.swlog", tmp_path / "ds", tmp_path / "labels.json"
    run("run", "--task", "push-target", "--policy", "expert", "--reward", "oracle", "--envs", "2", "--episodes",
        "2", "--width", "24", "--height", "24", "--stream-images", "--no-stream", "--hz", "0",
        "--log-file", str(log))  # fmt: skip
    run("log", "export", str(log), "--task", "push-target", "--out", str(ds))
    assert oracle_person.main([str(ds), "--stages", "reach,descend,push", "--out", str(labels)]) == 0
    got = json.loads(labels.read_text())
    assert got["stages"] == ["reach", "descend", "push"] and len(got["episodes"]) == 2
    t = pq.read_table(next((ds / "data").glob("chunk-*/file-*.parquet"))).to_pydict()
    for e in got["episodes"]:
        assert set(e) == {"episode_index", "start_frames", "success"}, "only what a person gives"
        stage = np.array([s for s, i in zip(t["stagewise.stage"], t["episode_index"]) if i == e["episode_index"]])
        assert e["start_frames"] == [0] + [int(np.flatnonzero(stage >= k)[0]) for k in (1, 2)]
        assert e["success"], "the expert succeeds on push-target"
    out = run("annotate", "--dataset", str(ds), "--from", str(labels))
    assert "2 of 2 episodes annotated" in out


def test_a_dataset_without_the_oracles_stage_is_refused_by_name(tmp_path, capsys):
    log, ds = tmp_path / "run.swlog", tmp_path / "ds"
    run("run", "--task", "push-target", "--policy", "random", "--reward", "sparse", "--envs", "1", "--episodes",
        "1", "--max-steps", "5", "--width", "24", "--height", "24", "--stream-images", "--no-stream", "--hz", "0",
        "--log-file", str(log))  # fmt: skip
    run("log", "export", str(log), "--task", "push-target", "--out", str(ds))
    assert oracle_person.main([str(ds), "--stages", "reach,descend,push", "--out", str(tmp_path / "l.json")]) == 2
    assert "no column stagewise.stage" in capsys.readouterr().err
    assert not (tmp_path / "l.json").exists()
