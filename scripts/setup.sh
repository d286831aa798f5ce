#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: a project-local Python virtualenv with the pinned ONNX Runtime wheel
# (the runtime loads its libonnxruntime.so; nothing downloads binaries at build time) and the Python tools the
# tests use. Safe to run again: it only installs what is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  "$python" -m venv "$venv"
fi
stamp="$venv/.stagewise-requirements"
req="$root/scripts/requirements.txt"
if ! cmp -s "$req" "$stamp" 2>/dev/null; then
  # uv (from PyPI, pinned) downloads in parallel: the torch + CUDA wheel set (about 3 GB) took 37 s with uv
  # against 48 min with pip on the same machine.
  if [ ! -x "$venv/bin/uv" ]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check uv==0.13.9
  fi
  echo "setup: installing $req into $venv"
  "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" -r "$req"
  cp "$req" "$stamp"
fi
# The learner-side package (python/), editable, without re-resolving its dependencies (pinned above).
if ! "$venv/bin/python" -c "import stagewise, sys; sys.exit(0 if stagewise.__file__.startswith('$root/python/') else 1)" 2>/dev/null; then
  echo "setup: installing the stagewise Python package (python/, editable) into $venv"
  "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps -e "$root/python"
fi
lib="$("$venv/bin/python" - <<'PY'
import glob, os, onnxruntime
capi = os.path.join(os.path.dirname(onnxruntime.__file__), "capi")
libs = sorted(glob.glob(os.path.join(capi, "libonnxruntime.so*")))
print(libs[0] if libs else "")
PY
)"
if [ -z "$lib" ]; then
  echo "setup: the onnxruntime wheel in $venv has no libonnxruntime.so" >&2
  exit 1
fi
echo "setup: ONNX Runtime library: $lib"
