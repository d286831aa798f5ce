#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: a project-local Python virtualenv with the pinned ONNX Runtime wheel
# (the runtime loads its libonnxruntime.so; nothing downloads binaries at build time) and the Python tools the
# tests use. Safe to run again: it only installs what is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"

# ffmpeg (LeRobot video features: crates/dataset decodes and encodes MP4 through it) from the distribution's
# packages; skipped when one is on PATH. Debian 12's ffmpeg 5.1 has libdav1d (AV1 decoding), libsvtav1 and
# libaom-av1 (AV1 encoding) and libx264. STAGEWISE_SKIP_FFMPEG=1 skips this step (video datasets then fail with
# an error that says what to install).
if [ "${STAGEWISE_SKIP_FFMPEG:-0}" != 1 ] && ! command -v ffmpeg >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && sudo="sudo -n"; }
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; }; then
    echo "setup: installing ffmpeg (apt-get)"
    if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
        --no-install-recommends ffmpeg >/dev/null; }; then
      echo "setup: apt-get could not install ffmpeg (see above); install it by hand or set STAGEWISE_SKIP_FFMPEG=1" >&2
      exit 1
    fi
  else
    echo "setup: ffmpeg is not installed and cannot be installed here (needs apt-get as root or passwordless" \
      "sudo): install the distribution's ffmpeg package (e.g. 'apt-get install ffmpeg', 'dnf install ffmpeg')," \
      "or set STAGEWISE_SKIP_FFMPEG=1 to go on without video datasets" >&2
    exit 1
  fi
  command -v ffmpeg >/dev/null 2>&1 || { echo "setup: ffmpeg still not on PATH after installing it" >&2; exit 1; }
fi
if command -v ffmpeg >/dev/null 2>&1; then echo "setup: $(ffmpeg -hide_banner -version | sed -n 1p)"; fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  "$python" -m venv "$venv"
fi
stamp="$venv/.stagewise-requirements"
# Every pinned Python package: the runtime's ONNX Runtime wheel, the test tools, the learner side and the
# reward-model training (python/stagewise/training, run by `stagewise train` / `adapt`).
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
