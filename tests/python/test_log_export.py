"""`stagewise log export` read the way LeRobot reads a v3 dataset (pyarrow on meta/info.json, the data files and
the episodes file), against the episode log decoded with the package's own reader (`stagewise.view.read_log`,
`stagewise.wire.decode`): a real `stagewise run --stream-images` of push-target on the CPU provider.
"""

import json
from io import BytesIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import run
from stagewise.view import read_log
from stagewise.wire import decode, observation

STEPS = 15


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    log, ds = tmp / "run.swlog", tmp / "ds"
    run(
        "run", "--task", "push-target", "--provider", "cpu", "--envs", "2", "--episodes", "2",
        "--max-steps", str(STEPS), "--width", "24", "--height", "24", "--stream-images", "--no-stream",
        "--log-file", str(log),
    )  # fmt: skip
    stdout = run("log", "export", str(log), "--task", "push-target", "--out", str(ds))
    return {"log": log, "dataset": ds, "stdout": stdout}


def logged(log):
    """Transitions, progress and summaries by (env, episode)."""
    by = {}
    for key, payload in read_log(log):
        kind = key.rsplit("/", 1)[-1]
        if kind not in ("transition", "progress", "episode"):
            continue
        m = decode(payload, kind, key)
        ep = by.setdefault((m["env"], m["episode"]), {"transition": [], "progress": {}, "episode": None})
        if kind == "transition":
            ep["transition"].append(m)
        elif kind == "progress":
            ep["progress"][m["step"]] = m
        else:
            ep["episode"] = m
    return by


def test_the_layout_is_lerobot_v3(exported):
    ds = exported["dataset"]
    info = json.loads((ds / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert info["total_episodes"] == 2 and info["total_frames"] == 2 * STEPS
    f = info["features"]
    for view in ("front", "side", "wrist"):
        assert f[f"observation.images.{view}"]["dtype"] == "image"
        assert f[f"observation.images.{view}"]["shape"] == [24, 24, 3]
    assert f["observation.state"]["shape"] == [14] and len(f["observation.state"]["names"]) == 14
    assert f["action"]["names"] == ["dx", "dy", "dz", "gripper"]
    for k, dtype in [("next.reward", "float32"), ("next.done", "int64"), ("stagewise.progress", "float32"),
                     ("stagewise.stage", "int64")]:  # fmt: skip
        assert f[k]["dtype"] == dtype, k
    assert "progress_gt" not in f and "stage_gt" not in f
    tasks = pq.read_table(ds / "meta" / "tasks.parquet").to_pylist()
    assert [t["task_index"] for t in tasks] == [0]
    episodes = pa.concat_tables(
        [pq.read_table(p) for p in sorted((ds / "meta" / "episodes").glob("chunk-*/file-*.parquet"))]
    )
    assert episodes.column("length").to_pylist() == [STEPS, STEPS]
    assert episodes.column("success").to_pylist() == [False, False]


def test_the_frames_are_the_logged_steps(exported):
    ds = exported["dataset"]
    meta = json.loads((ds / "meta" / "stagewise_export.json").read_text())
    by = logged(exported["log"])
    t = pa.concat_tables([pq.read_table(p) for p in sorted((ds / "data").glob("chunk-*/file-*.parquet"))])
    ep_index = t.column("episode_index").to_numpy()
    for e in meta["episodes"]:
        rows = np.flatnonzero(ep_index == e["episode_index"])
        log = by[(e["env"], e["episode"])]
        ts = log["transition"]
        assert len(rows) == len(ts) == e["length"]
        state = np.stack([np.asarray(t.column("observation.state")[int(r)].as_py(), np.float32) for r in rows])
        # frame 0: the reset observation; frame k: the observation after action k - 1
        obs = [observation(ts[0]["obs"])] + [observation(m["next_obs"]) for m in ts[:-1]]
        np.testing.assert_array_equal(state, np.stack([o["state"] for o in obs]))
        action = np.stack([np.asarray(t.column("action")[int(r)].as_py(), np.float32) for r in rows])
        np.testing.assert_array_equal(action, np.asarray([m["action"] for m in ts], np.float32))
        reward = t.column("next.reward").to_numpy()[rows]
        np.testing.assert_array_equal(reward, np.asarray([m["reward"] for m in ts], np.float32))
        done = t.column("next.done").to_numpy()[rows]
        assert done.tolist() == [0] * (len(ts) - 1) + [1]
        progress = t.column("stagewise.progress").to_numpy()[rows]
        want = np.asarray([log["progress"][k]["phi"] for k in range(len(ts))], np.float32)
        np.testing.assert_array_equal(progress, want)
        # a camera frame: PNG bytes in the image struct, decoded as LeRobot does (PIL), equal to the logged pixels
        png = t.column("observation.images.front")[int(rows[3])].as_py()["bytes"]
        np.testing.assert_array_equal(np.asarray(Image.open(BytesIO(png)).convert("RGB")), obs[3]["images"]["front"])
