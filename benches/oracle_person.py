#!/usr/bin/env python3
"""The simulator's oracle playing the person of issue 48's labelled rounds.

Reads a dataset that `stagewise log export` wrote from a `stagewise run --reward oracle --stream-images` log (its
`stagewise.stage` column is then the simulator's stage, `stagewise.progress` its progress, `next.success` its
success) or one that `stagewise record` wrote (`stage_gt`, `progress_gt`, the episode's `success`), and writes, for
`stagewise annotate --from`, only what a person gives per episode: the frames where its stages start (a stage never
reached starts, empty, at the episode's end) and its outcome. Nothing else of the oracle leaves this script, and
`stagewise train` reads nothing else of the dataset (tests/python/test_train_labels_only.py).

`--split NAME:PROGRESS` adds a stage a person can mark inside the task's last one: NAME starts at the first frame
whose oracle progress is >= PROGRESS (push-target: progress 0.35 + 0.65 * tau, tau = 1 - (d - 2.5 cm) / 11.5 cm
for the block's distance d to the target; 0.75 is "the block half-way, 7 cm from the target").

    benches/oracle_person.py DATASET --stages reach,descend,push [--split near:0.75] --out labels.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# (stage, progress, success) columns of an exported oracle run, and of a recorded dataset (success per episode)
EXPORTED = ("stagewise.stage", "stagewise.progress", "next.success")
RECORDED = ("stage_gt", "progress_gt", None)


def person_labels(stage: np.ndarray, success: np.ndarray, n_stages: int, progress: np.ndarray | None = None,
                  split_at: float | None = None) -> dict:
    """One episode's labels from its per-frame oracle stage and success flags: stage k starts at the first frame
    whose stage is >= k (a person marks where a stage is first entered; going back is not a new start). With
    `split_at`, one more stage starts at the first frame of the last stage or later whose progress is >= split_at."""
    length = len(stage)
    starts = [0]
    for k in range(1, n_stages):
        reached = np.flatnonzero(stage >= k)
        starts.append(int(reached[0]) if len(reached) else length)  # frames >= k+1 are frames >= k: ordered
    if split_at is not None:
        after = np.flatnonzero((np.arange(length) >= starts[-1]) & (progress >= split_at))
        starts.append(int(after[0]) if len(after) else length)
    return {"start_frames": starts, "success": bool(success.any())}


def read_episodes(dataset: Path):
    """(episode index, stage, progress, success) per episode, frames in order; an error string when unreadable."""
    files = sorted((dataset / "data").glob("chunk-*/file-*.parquet"))
    if not files:
        return f"{dataset}: no data/chunk-*/file-*.parquet"
    names = pq.read_schema(files[0]).names
    stage_col, progress_col, success_col = EXPORTED if "stage_gt" not in names else RECORDED
    cols = ["episode_index", "frame_index", stage_col, progress_col] + ([success_col] if success_col else [])
    missing = [c for c in cols if c not in names]
    if missing:
        return (f"{files[0]}: no column {', '.join(missing)} (export a `run --reward oracle --stream-images` log, "
                "or give a `stagewise record` dataset)")
    t = pa.concat_tables([pq.read_table(p, columns=cols) for p in files]).to_pydict()
    ep, fr = np.asarray(t["episode_index"]), np.asarray(t["frame_index"])
    if success_col is None:
        meta = sorted((dataset / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        m = pa.concat_tables([pq.read_table(p, columns=["episode_index", "success"]) for p in meta]).to_pydict()
        outcome = dict(zip(m["episode_index"], m["success"]))
    out = []
    for e in np.unique(ep):
        m = ep == e
        order = np.argsort(fr[m])
        stage, progress = np.asarray(t[stage_col])[m][order], np.asarray(t[progress_col])[m][order]
        if success_col:
            success = np.asarray(t[success_col])[m][order].astype(bool)
        else:
            success = np.array([bool(outcome[int(e)])])
        out.append((int(e), stage, progress, success))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--stages", required=True, help="the task's stage names, in order (comma-separated)")
    ap.add_argument("--split", metavar="NAME:PROGRESS",
                    help="one more stage, NAME, starting inside the last where the oracle's progress reaches PROGRESS")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    task_stages = args.stages.split(",")
    names, split_at = list(task_stages), None
    if args.split:
        name, _, at = args.split.partition(":")
        try:
            split_at = float(at)
        except ValueError:
            ap.error(f"--split {args.split}: want NAME:PROGRESS, e.g. near:0.75")
        names.append(name)
    episodes = read_episodes(args.dataset)
    if isinstance(episodes, str):
        print(episodes, file=sys.stderr)
        return 2
    labelled = [{"episode_index": e, **person_labels(stage, success, len(task_stages), progress, split_at)}
                for e, stage, progress, success in episodes]
    args.out.write_text(json.dumps({"stages": names, "episodes": labelled}, indent=1))
    ok = sum(e["success"] for e in labelled)
    print(f"{args.out}: {len(labelled)} episodes labelled ({ok} successes), {len(labelled) * len(names)} stage "
          f"starts + {len(labelled)} outcomes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
