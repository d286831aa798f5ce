#!/usr/bin/env bash
# Reward-model training data on the states an RL learner visits: every policy manifest given is rolled out with
# `stagewise record --policy` (EPISODES noisy episodes each, the learner's own exploration noise), labelled by the
# oracle like any recording, one dataset per policy under OUT (`python -m stagewise.training train` takes them all with --train).
#
#   models/record_learner_states.sh TASK OUT EPISODES NOISE SEED0 POLICY.toml...
#   models/record_learner_states.sh push-target data/pol 20 0.2 300000 \
#       $(ls models/training/learner-checkpoints/push-target/*.toml | sort -V)     # the shipped model's data
#
# Policy i records seeds SEED0 + 1000 i ..; 32x32 frames, camera jitter 0.01 and random colours, as
# train_all.sh records the expert data. STAGEWISE (default ${CARGO_TARGET_DIR:-target}/release/stagewise) is the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 6 ] || { sed -n 2,11p "$0" >&2; exit 2; }
B=${STAGEWISE:-${CARGO_TARGET_DIR:-target}/release/stagewise}
task=$1 out=$2 episodes=$3 noise=$4 seed0=$5
shift 5
[ -x "$B" ] || { echo "no stagewise CLI at $B: cargo build --release (or set STAGEWISE)" >&2; exit 1; }
i=0
for m in "$@"; do
  dir="$out/$(basename "$m" .toml)"
  if [ -f "$dir/meta/info.json" ]; then
    echo "reusing $dir"
  else
    rm -rf "$dir"
    "$B" record --task "$task" --policy "$m" --policy-noise "$noise" --episodes "$episodes" \
      --seed $((seed0 + 1000 * i)) --width 32 --height 32 --camera-jitter 0.01 --random-colors --out "$dir"
  fi
  i=$((i + 1))
done
