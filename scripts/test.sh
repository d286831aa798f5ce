#!/usr/bin/env bash
# The whole test suite, on a fresh machine: set-up (pinned Python deps + ONNX Runtime wheel), formatting and
# lint checks, then every Rust test in the workspace (unit, integration, cross-process, Python parity).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh
export ORT_DYLIB_PATH="${ORT_DYLIB_PATH:-$(ls "$root"/.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* | head -n 1)}"
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --workspace
echo "== pytest (learner side against real stagewise processes)"
# The tests start ${CARGO_TARGET_DIR:-target}/debug/stagewise (built by cargo test above) unless STAGEWISE_BIN says
# otherwise. tests/python (if present) holds other Python interop tests with their own conftest.
export STAGEWISE_BIN="${STAGEWISE_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/stagewise}"
pytest_dirs=(python/tests)
[ -d tests/python ] && pytest_dirs+=(tests/python)
# Exit code 5 (no tests collected) fails the run like any other non-zero code.
"$root/.venv/bin/python" -m pytest -q "${pytest_dirs[@]}"
