"""docs/results.md and the README's results block are what scripts/results_table.py makes of the committed
curves.json and fresh_eval.json files (issue 45: the results table is generated, never typed by hand)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "results_table.py"


def test_results_table_is_up_to_date():
    r = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, f"scripts/results_table.py --check:\n{r.stdout}{r.stderr}"


def test_a_changed_curve_makes_the_check_fail(tmp_path):
    # the check must be able to fail: a copy with its own tables, then its push-target curves halved
    import json

    for rel in ["scripts/results_table.py", "README.md", "docs/results.md", "benches/results/bc_rabc_fail06_c25.json"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    shutil.copytree(REPO / "benches" / "results" / "learner_shaping_push_sg", tmp_path / "benches" / "results" /
                    "learner_shaping_push_sg")
    shutil.copytree(REPO / "benches" / "results" / "learner_shaping_pick_sg", tmp_path / "benches" / "results" /
                    "learner_shaping_pick_sg")
    # rows that name their runs' own curves.json (and the fresh evaluations beside them)
    sys.path.insert(0, str(REPO / "scripts"))
    import results_table

    for exp in results_table.EXPERIMENTS:
        for row in exp.rows:
            for rel in row.runs:
                for name in ("curves.json", "fresh_eval.json"):
                    src = (REPO / rel).parent / name
                    if src.exists():
                        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy(src, (tmp_path / rel).parent / name)
    script = [sys.executable, str(tmp_path / "scripts" / "results_table.py")]
    subprocess.run(script + ["--no-figures"], capture_output=True, cwd=tmp_path, check=True)  # this copy's tables
    assert subprocess.run(script + ["--check"], capture_output=True, cwd=tmp_path).returncode == 0
    merged = tmp_path / "benches" / "results" / "learner_shaping_push_sg" / "merged" / "curves.json"
    data = json.loads(merged.read_text())
    for run in data["runs"]:
        for c in run["checkpoints"]:
            c["success"] *= 0.5
    merged.write_text(json.dumps(data))
    r = subprocess.run(script + ["--check"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "out of date" in r.stderr
