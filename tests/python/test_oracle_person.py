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


def test_a_split_starts_inside_the_last_stage_where_progress_first_reaches_the_mark():
    stage, progress = np.array([0, 0, 1, 2, 2, 2, 2]), np.array([0.1, 0.8, 0.3, 0.5, 0.8, 0.6, 0.9])
    # progress 0.8 at frame 1 is in stage 0 (not the last stage): the split starts at 4, not 1; a fall back is no
    # new start
    got = oracle_person.person_labels(stage, np.zeros(7, bool), 3, progress, 0.75)
    assert got["start_frames"] == [0, 2, 3, 4]
    # never reached: the split stage starts, empty, at the end
    assert oracle_person.person_labels(stage, np.zeros(7, bool), 3, progress, 0.95)["start_frames"] == [0, 2, 3, 7]


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


def test_a_recorded_dataset_is_labelled_from_its_ground_truth_columns_and_episode_outcomes(tmp_path):
    ds, labels = tmp_path / "rec", tmp_path / "labels.json"
    run("record", "--task", "push-target", "--episodes", "2", "--degraded", "0", "--width", "24", "--height", "24", "--threads", "1",
        "--out", str(ds))  # fmt: skip
    assert oracle_person.main([str(ds), "--stages", "reach,descend,push", "--split", "near:0.75",
                               "--out", str(labels)]) == 0  # fmt: skip
    got = json.loads(labels.read_text())
    assert got["stages"] == ["reach", "descend", "push", "near"]
    t = pq.read_table(next((ds / "data").glob("chunk-*/file-*.parquet"))).to_pydict()
    for e in got["episodes"]:
        m = np.array(t["episode_index"]) == e["episode_index"]
        stage, progress = np.array(t["stage_gt"])[m], np.array(t["progress_gt"])[m]
        assert e["start_frames"][:3] == [0] + [int(np.flatnonzero(stage >= k)[0]) for k in (1, 2)]
        near = e["start_frames"][3]
        assert progress[near] >= 0.75 and (progress[e["start_frames"][2]:near] < 0.75).all()
        assert e["success"], "the recorder's expert succeeds (meta/episodes success)"
    assert "2 of 2 episodes annotated" in run("annotate", "--dataset", str(ds), "--from", str(labels))


def test_a_dataset_without_the_oracles_stage_is_refused_by_name(tmp_path, capsys):
    log, ds = tmp_path / "run.swlog", tmp_path / "ds"
    run("run", "--task", "push-target", "--policy", "random", "--reward", "sparse", "--envs", "1", "--episodes",
        "1", "--max-steps", "5", "--width", "24", "--height", "24", "--stream-images", "--no-stream", "--hz", "0",
        "--log-file", str(log))  # fmt: skip
    run("log", "export", str(log), "--task", "push-target", "--out", str(ds))
    assert oracle_person.main([str(ds), "--stages", "reach,descend,push", "--out", str(tmp_path / "l.json")]) == 2
    assert "no column stagewise.stage" in capsys.readouterr().err
    assert not (tmp_path / "l.json").exists()
