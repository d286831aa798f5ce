#!/usr/bin/env bash
# The installable Stagewise end to end (docs/install.md): builds the wheel (pyproject.toml: maturin's `bin`
# bindings, the release binary + python/stagewise + the shipped models), installs it into a fresh venv, and from
# another directory, with no discovery variable set, checks that `stagewise doctor` finds that venv's ONNX
# Runtime, Python and models, that `stagewise learn --help` runs the venv's learner, and runs the main job
# (`stagewise run --task push-target --episodes 2`). Exits non-zero on any failure.
#
# Run it whenever packaging changes (pyproject.toml, packaging/, this script). On success it writes what it
# checked (the inputs' sha256 and links, the timings, the wheel's size) to scripts/wheel-check.stamp; CI does not
# build the wheel (a release build takes 10-15 min on 2 cores) but python/tests/test_packaging.py fails when the
# inputs no longer match the stamp, so a packaging change lands with a fresh run of this script.
#
# Honours CARGO_TARGET_DIR (the release build goes there; default target/) and PYTHON (the interpreter of the
# fresh venv; default python3). The dependencies are installed with the project's uv, constrained to
# scripts/requirements.txt (the versions the tests run with; uv's cache serves them). Extra arguments go to
# `stagewise run`. The scratch directory (wheel, venv) is kept after a failure, and with WHEEL_CHECK_KEEP=1.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh >/dev/null
python="${PYTHON:-python3}"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/stagewise-wheel-check.XXXXXX")"
passed=0
# Kept after a failure (the wheel, the venv, the main job's output) for a look; removed after a pass.
cleanup() {
  if [ "$passed" = 1 ] && [ "${WHEEL_CHECK_KEEP:-0}" != 1 ]; then rm -rf "$scratch"; else echo "wheel-check: kept $scratch"; fi
}
trap cleanup EXIT
now() { date +%s; }
t0=$(now)

echo "== wheel-check: maturin build --release (scratch $scratch)"
nice -n 10 "$root/.venv/bin/maturin" build --release --out "$scratch/dist"
wheels=("$scratch"/dist/stagewise-*.whl)
[ "${#wheels[@]}" = 1 ] && [ -f "${wheels[0]}" ] || { echo "wheel-check: expected one wheel in $scratch/dist" >&2; exit 1; }
wheel="${wheels[0]}"
wheel_bytes=$(stat -c %s "$wheel")
t1=$(now)

echo "== wheel-check: fresh venv + pip install $(basename "$wheel")"
"$python" -m venv "$scratch/venv"
"$root/.venv/bin/uv" pip install --quiet --python "$scratch/venv/bin/python" -c "$root/scripts/requirements.txt" "$wheel"
venv="$scratch/venv"
[ -x "$venv/bin/stagewise" ] || { echo "wheel-check: the wheel put no stagewise in $venv/bin" >&2; exit 1; }
t2=$(now)

echo "== wheel-check: the installed stagewise, from another directory"
away="$scratch/elsewhere"
mkdir -p "$away"
cd "$away"
clean=(env -u ORT_DYLIB_PATH -u STAGEWISE_PYTHON -u STAGEWISE_BIN -u VIRTUAL_ENV -u CARGO_TARGET_DIR)
doctor="$("${clean[@]}" "$venv/bin/stagewise" --log warn doctor)" ||
  { echo "$doctor"; echo "wheel-check: stagewise doctor found something missing (above)" >&2; exit 1; }
echo "$doctor"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
expect() {
  grep -q -F -- "$2" <<<"$doctor" || { echo "wheel-check: doctor's $1 is not the venv's ($2)" >&2; exit 1; }
}
expect onnxruntime "onnxruntime  $site/onnxruntime/capi/libonnxruntime.so"
expect python "python       $venv/bin/python"
expect model "model        push-target: $venv/share/stagewise/models/push-target/push-target-progress.toml"
"${clean[@]}" "$venv/bin/stagewise" learn --help >/dev/null
"${clean[@]}" "$venv/bin/stagewise" run --task push-target --episodes 2 "$@"
[ -s "$away/out/run.swlog" ] || { echo "wheel-check: the main job wrote no out/run.swlog" >&2; exit 1; }
t3=$(now)
passed=1
cd "$root"

inputs() {
  sha256sum pyproject.toml scripts/wheel-check.sh
  find packaging -type l -printf 'link %p -> %l\n' | LC_ALL=C sort
}
{
  echo "# scripts/wheel-check.sh passed: $(date -u +%Y-%m-%d), $(uname -m), $(nproc) cores."
  echo "# wheel $(basename "$wheel"): $((wheel_bytes / 1000)) kB; build $((t1 - t0)) s, venv + install $((t2 - t1)) s, doctor + learn --help + run --task push-target --episodes 2 $((t3 - t2)) s."
  echo "# The inputs it checked (python/tests/test_packaging.py compares them with the tree):"
  inputs
} >scripts/wheel-check.stamp
echo "wheel-check: ok ($((wheel_bytes / 1000)) kB wheel; build $((t1 - t0)) s, install $((t2 - t1)) s, run $((t3 - t2)) s); wrote scripts/wheel-check.stamp"
