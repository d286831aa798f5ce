#!/usr/bin/env bash
# The main job on a fresh machine, with defaults that need nothing else (CPU provider, no GPU, no router).
# Extra arguments go to `stagewise score`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh
cargo build --release --bin stagewise
exec ./target/release/stagewise score --model models/test/tiny3v.toml --envs 4 --steps 200 --out out/scores.csv "$@"
