#!/usr/bin/env bash
# The main job on a fresh machine, with defaults that need nothing else (CPU provider, an embedded zenoh peer, no
# router, no GPU): the simulator (pick-place, 4 envs, 3 camera views), a reward model, potential-based shaping and
# zenoh streaming, with a replayable episode log in out/run.swlog. Extra arguments go to `stagewise run`.
# Honours CARGO_TARGET_DIR (the binary is built and run from there).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh
cargo build --release --bin stagewise
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
# A target dir outside the checkout: the binary cannot find the project's .venv from its own path (README, "The
# ONNX Runtime library"), so name the library explicitly.
if [ -z "${ORT_DYLIB_PATH:-}" ]; then
  ORT_DYLIB_PATH="$(ls "$root"/.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* | head -n 1)"
  export ORT_DYLIB_PATH
fi
exec "$target/release/stagewise" run --task pick-place --envs 4 --episodes 20 "$@"
