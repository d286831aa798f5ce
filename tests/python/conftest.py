"""Fixtures for the Python interop tests of `stagewise label`: the CLI binary and a small labelled dataset.

The binary is $STAGEWISE_BIN, else ${CARGO_TARGET_DIR:-target}/debug/stagewise (built by `cargo test --workspace`
or `cargo build`). The dataset is recorded fresh with `stagewise record` (4 pick-place episodes at 32x32, half
degraded) and labelled with the untrained test model models/test/tiny1v.toml, so the whole module runs in seconds.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = "models/test/tiny1v.toml"
CHUNK = 10
KAPPA = 0.01


def stagewise_bin() -> Path:
    env = os.environ.get("STAGEWISE_BIN")
    if env:
        path = Path(env)
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        if not target.is_absolute():
            target = ROOT / target
        path = target / "debug" / "stagewise"
    if not path.is_file():
        pytest.fail(f"stagewise binary not found at {path}: build it (cargo build) or set STAGEWISE_BIN")
    return path


def run(*args: str) -> str:
    out = subprocess.run(
        [str(stagewise_bin()), *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    if out.returncode != 0:
        raise AssertionError(f"stagewise {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


@pytest.fixture(scope="session")
def labelled(tmp_path_factory):
    """Records and labels a dataset; returns a dict of paths and the label command's stdout and summary."""
    tmp = tmp_path_factory.mktemp("label")
    ds = tmp / "ds"
    run(
        "record", "--task", "pick-place", "--episodes", "4", "--degraded", "0.5", "--seed", "11",
        "--width", "32", "--height", "32", "--threads", "2", "--out", str(ds),
    )
    weights = tmp / "weights.csv"
    summary = tmp / "summary.json"
    stdout = run(
        "label", "--dataset", str(ds), "--model", MODEL, "--chunk-size", str(CHUNK), "--kappa", str(KAPPA),
        "--plots", "1", "--weights-csv", str(weights), "--summary-json", str(summary),
    )
    return {
        "dataset": ds,
        "progress": ds / "sarm_progress.parquet",
        "weights": weights,
        "summary": json.loads(summary.read_text()),
        "stdout": stdout,
    }
