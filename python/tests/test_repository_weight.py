"""Issue 45: the tracked tree stays light. Checkpoints and intermediate weights of experiments are ignored (a run
keeps its curves.json, figure and notes; models/<task>/lineage.json names what a shipped model was trained on by
sha256 and commit), and the tracked files stay within 40 MB."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIMIT_BYTES = 40_000_000


def tracked():
    r = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if r.returncode != 0:
        pytest.skip("not a git checkout")
    return [p for p in r.stdout.decode().split("\0") if p]


def test_tracked_files_stay_within_the_budget():
    # lstat: a tracked symlink (the wheel's data files, packaging/wheel-data, point into models/) weighs its link,
    # not its target a second time.
    sizes = {p: (REPO / p).lstat().st_size for p in tracked() if (REPO / p).is_file()}
    total = sum(sizes.values())
    biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    assert total <= LIMIT_BYTES, f"tracked files {total / 1e6:.1f} MB > {LIMIT_BYTES / 1e6:.0f} MB; largest: {biggest}"


def test_no_experiment_weights_are_tracked():
    weights = [p for p in tracked() if p.startswith(("benches/results/", "models/training/"))
               and p.endswith((".onnx", ".pt"))]
    assert not weights, f"checkpoints are tracked (they belong in lineage.json, not git): {weights[:5]}"
