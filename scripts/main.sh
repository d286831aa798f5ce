#!/usr/bin/env bash
# The main job on a fresh machine, with defaults that need nothing else (CPU provider, an embedded zenoh peer, no
# router, no GPU): the simulator (pick-place, 4 envs, 3 camera views), a reward model, potential-based shaping and
# zenoh streaming, with a replayable episode log in out/run.swlog. Extra arguments go to `stagewise run`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh
cargo build --release --bin stagewise
exec ./target/release/stagewise run --task pick-place --envs 4 --episodes 20 "$@"
