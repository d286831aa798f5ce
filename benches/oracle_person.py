#!/usr/bin/env python3
"""The simulator's oracle playing the person of issue 48's labelled rounds.

Reads a dataset that `stagewise log export` wrote from a `stagewise run --reward oracle --stream-images` log (its
`stagewise.stage` column is then the simulator's stage, its `next.success` the simulator's success) and writes, for
`stagewise annotate --from`, only what a person gives per episode: the frames where its stages start (a stage never
reached starts, empty, at the episode's end) and its outcome. Nothing else of the oracle leaves this script, and
`stagewise train` reads nothing else of the dataset (tests/python/test_train_labels_only.py).

    benches/oracle_person.py DATASET --stages reach,descend,push --out labels.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def person_labels(stage: np.ndarray, success: np.ndarray, n_stages: int) -> dict:
    """One episode's labels from its per-frame oracle stage and success flags: stage k starts at the first frame
    whose stage is >= k (a person marks where a stage is first entered; going back is not a new start)."""
    length = len(stage)
    starts = [0]
    for k in range(1, n_stages):
        reached = np.flatnonzero(stage >= k)
        starts.append(int(reached[0]) if len(reached) else length)  # frames >= k+1 are frames >= k: ordered
    return {"start_frames": starts, "success": bool(success.any())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--stages", required=True, help="the task's stage names, in order (comma-separated)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    names = args.stages.split(",")
    files = sorted((args.dataset / "data").glob("chunk-*/file-*.parquet"))
    if not files:
        print(f"{args.dataset}: no data/chunk-*/file-*.parquet", file=sys.stderr)
        return 2
    cols = ["episode_index", "frame_index", "stagewise.stage", "next.success"]
    missing = [c for c in cols if c not in pq.read_schema(files[0]).names]
    if missing:
        print(f"{files[0]}: no column {', '.join(missing)} (export a `run --reward oracle --stream-images` log)",
              file=sys.stderr)
        return 2
    t = pa.concat_tables([pq.read_table(p, columns=cols) for p in files]).to_pydict()
    ep, fr = np.asarray(t["episode_index"]), np.asarray(t["frame_index"])
    stage, succ = np.asarray(t["stagewise.stage"]), np.asarray(t["next.success"]).astype(bool)
    episodes = []
    for e in np.unique(ep):
        m = ep == e
        order = np.argsort(fr[m])
        episodes.append({"episode_index": int(e), **person_labels(stage[m][order], succ[m][order], len(names))})
    args.out.write_text(json.dumps({"stages": names, "episodes": episodes}, indent=1))
    ok = sum(e["success"] for e in episodes)
    print(f"{args.out}: {len(episodes)} episodes labelled ({ok} successes), {len(episodes) * len(names)} stage "
          f"starts + {len(episodes)} outcomes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
