"""models/lineage.py --check (issue 45): each shipped model's lineage manifest (models/<task>/lineage.json) matches
what git holds at the commits it names, and the shipped graphs are the heads of their chains."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "models" / "lineage.py"

history = pytest.mark.skipif(
    subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", "6d505fc^{commit}"], capture_output=True).returncode
    != 0,
    reason="needs the git history back to 6d505fc, where the checkpoints live (a shallow clone lacks it)",
)


def _check(*flags: str) -> None:
    r = subprocess.run([sys.executable, str(SCRIPT), "--check", *flags], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, f"models/lineage.py --check {' '.join(flags)}:\n{r.stdout}{r.stderr}"


@history
def test_lineage_manifests_match_git():
    _check("--git-only")


@history
def test_shipped_models_are_the_heads_of_their_lineage():
    _check()
