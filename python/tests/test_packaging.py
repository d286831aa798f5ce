"""Issue 49: the installable wheel (pyproject.toml at the repository root, maturin) stays in step with the rest of
the tree without building it (a release build takes 10-15 min on 2 cores; scripts/wheel-check.sh does that):

- its data files (packaging/wheel-data: links into models/) hold every shipped reward model and policy with
  every file its manifest names, so `stagewise run --task T` finds T's model in <venv>/share/stagewise/models;
- its dependencies are python/pyproject.toml's (and the extras the CLI runs: learn, training, bc), with
  onnxruntime pinned as scripts/requirements.txt pins it (the library the binary was tested with);
- scripts/wheel-check.stamp (written by a passing scripts/wheel-check.sh) matches the packaging inputs as they
  are now: a change to pyproject.toml, packaging/ or the script fails here until the script has run again.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "packaging/wheel-data"
MODELS = DATA / "data/share/stagewise/models"
STAMP = REPO / "scripts/wheel-check.stamp"


def _toml(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def _shipped_manifests():
    """The shipped reward models (models/<task>/<task>-progress.toml) and policies (models/policies/*/*.toml)."""
    models = REPO / "models"
    tasks = sorted(p for p in models.glob("*/*-progress.toml") if p.parent.name == p.stem.removesuffix("-progress"))
    return tasks + sorted(models.glob("policies/*/*.toml"))


def _named_files(manifest: Path):
    """The manifest and every file it names (the ONNX graph, the two-part model's parts)."""
    m = _toml(manifest)
    names = [manifest.name, m["onnx"]]
    parts = m.get("parts", {})
    names += [parts[k] for k in ("encoder", "head", "step") if k in parts]
    return names


def test_the_wheel_ships_every_shipped_model_with_every_file_its_manifest_names():
    manifests = _shipped_manifests()
    assert {p.parent.name for p in manifests} >= {"pick-place", "push-target", "stack"}, manifests
    missing = []
    for manifest in manifests:
        rel = manifest.parent.relative_to(REPO / "models")
        for name in _named_files(manifest):
            link = MODELS / rel / name
            if not link.is_file():
                missing.append(str(link.relative_to(REPO)))
    assert not missing, f"the wheel would lack (add links into models/ under packaging/wheel-data): {missing}"


def test_the_data_files_are_links_to_the_same_path_under_models():
    assert DATA.is_dir()
    # maturin takes only these folders in a wheel's data directory (PEP 427's schemes).
    assert {p.name for p in DATA.iterdir()} <= {"data", "scripts", "headers", "purelib", "platlib"}
    links = []
    for dirpath, dirnames, filenames in os.walk(DATA):
        for name in filenames + [d for d in dirnames if Path(dirpath, d).is_symlink()]:
            p = Path(dirpath, name)
            assert p.is_symlink(), f"{p.relative_to(REPO)}: a copy, not a link into models/"
            target = p.resolve()
            rel = p.relative_to(MODELS)
            assert target == (REPO / "models" / rel).resolve() and target.is_file(), \
                f"{p.relative_to(REPO)} -> {os.readlink(p)}: not models/{rel}"
            links.append(p)
    assert links


def _names(reqs):
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in reqs}


def test_the_wheels_dependencies_follow_the_package_and_the_pins():
    root = _toml(REPO / "pyproject.toml")["project"]
    pkg = _toml(REPO / "python/pyproject.toml")["project"]
    deps = root["dependencies"]
    want = set(pkg["dependencies"])
    for extra in ("learn", "training", "bc", "view"):
        want |= {r for r in pkg["optional-dependencies"][extra] if "python_version <" not in r}
    assert _names(want) <= _names(deps), f"the wheel lacks {sorted(_names(want) - _names(deps))}"
    pins = dict(line.split("==") for line in (REPO / "scripts/requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert f"onnxruntime=={pins['onnxruntime']}" in deps, "onnxruntime: pin it as scripts/requirements.txt does"
    assert "maturin" in pins, "scripts/requirements.txt installs maturin (scripts/wheel-check.sh runs it)"
    zenoh = [d for d in deps if d.startswith("eclipse-zenoh")]
    assert zenoh == [d for d in pkg["dependencies"] if d.startswith("eclipse-zenoh")], zenoh
    assert root["name"] == pkg["name"] == "stagewise"
    cargo = (REPO / "Cargo.toml").read_text()
    assert f'version = "{pkg["version"]}"' in cargo, "python/pyproject.toml's version is Cargo.toml's (the wheel's)"


def _inputs():
    """What scripts/wheel-check.sh's `inputs` prints: sha256sum lines, then `find packaging -type l` sorted."""
    lines = [f"{hashlib.sha256((REPO / p).read_bytes()).hexdigest()}  {p}"
             for p in ("pyproject.toml", "scripts/wheel-check.sh")]
    links = []
    for dirpath, dirnames, filenames in os.walk(REPO / "packaging"):
        for name in filenames + dirnames:
            p = Path(dirpath, name)
            if p.is_symlink():
                links.append(f"link {p.relative_to(REPO)} -> {os.readlink(p)}")
    return lines + sorted(links)


def test_the_wheel_was_checked_since_packaging_last_changed():
    if not STAMP.is_file():
        pytest.fail(f"{STAMP.relative_to(REPO)} is missing: run scripts/wheel-check.sh (10-15 min) and commit it")
    recorded = [l for l in STAMP.read_text().splitlines() if l and not l.startswith("#")]
    now = _inputs()
    changed = sorted(set(recorded) ^ set(now))
    assert recorded == now, (
        "packaging changed since scripts/wheel-check.sh last passed (pyproject.toml, packaging/ or the script): "
        f"run it (10-15 min; it rewrites {STAMP.relative_to(REPO)}) and commit the stamp. Differs: {changed[:6]}")
