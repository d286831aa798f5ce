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
