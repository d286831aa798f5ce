#!/usr/bin/env bash
# The main job on a fresh machine, with defaults that need nothing else (CPU provider, an embedded zenoh peer, no
# router, no GPU): the simulator (pick-place, 4 envs, 3 camera views), a reward model, potential-based shaping and
# zenoh streaming, with a replayable episode log in out/run.swlog. Extra arguments go to `stagewise run`
# (`scripts/main.sh --episodes 2` replaces the default of 20).
# Honours CARGO_TARGET_DIR (the binary is built and run from there).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh
cargo build --release --bin stagewise
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
# The binary finds the project's .venv (ONNX Runtime) from the checkout it was built from, wherever the target
# directory is (crates/model/README.md, "Finding ONNX Runtime and Python").
# The defaults below, each left out when the caller passes that flag (clap refuses a flag given twice).
defaults=()
for pair in "--task pick-place" "--envs 4" "--episodes 20"; do
  flag=${pair%% *}
  case " $* " in *" $flag "* | *" $flag="*) ;; *) defaults+=($pair) ;; esac
done
exec "$target/release/stagewise" run "${defaults[@]}" "$@"
