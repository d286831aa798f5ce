#!/usr/bin/env bash
# The whole test suite, on a fresh machine: set-up (pinned Python deps + ONNX Runtime wheel), formatting and
# lint checks, then every Rust test in the workspace (unit, integration, cross-process, Python parity) and the
# learner-side Python tests.
#
# Clippy and the tests share one build: clippy's own driver compiles our crates for the test build
# (RUSTC_WORKSPACE_WRAPPER, the mechanism `cargo clippy` itself uses, with `-D warnings`), so every target
# (`--all-targets`: libs, bins, tests, examples, benches) is linted while it is built, and the dependencies are
# compiled once instead of once for `cargo clippy` (check) and again for `cargo test` (codegen). A lint fails the
# build like a compile error. Dependencies are not linted and keep their fingerprints: a later plain
# `cargo test` reuses them and recompiles only the workspace crates.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
if [ ! -x "$clippy_driver" ]; then
  echo "test.sh: clippy is not installed ($clippy_driver missing): rustup component add clippy" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
# What `cargo clippy -- -D warnings` hands its driver (arguments joined by __CLIPPY_HACKERY__).
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
echo "== cargo test --no-run --all-targets, linted by clippy -D warnings"
cargo test --workspace --all-targets --no-run
echo "== cargo test"
cargo test --workspace
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
echo "== pytest (learner side against real stagewise processes)"
# The tests start ${CARGO_TARGET_DIR:-target}/debug/stagewise (built by cargo test above) unless STAGEWISE_BIN says
# otherwise. tests/python (if present) holds other Python interop tests with their own conftest.
export STAGEWISE_BIN="${STAGEWISE_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/stagewise}"
pytest_dirs=(python/tests)
[ -d tests/python ] && pytest_dirs+=(tests/python)
# Exit code 5 (no tests collected) fails the run like any other non-zero code.
"$root/.venv/bin/python" -m pytest -q "${pytest_dirs[@]}"
