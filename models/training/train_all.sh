#!/usr/bin/env bash
# Records the training and validation sets and trains every shipped model (models/README.md, "Retrain").
#
#   models/training/train_all.sh [TASK...]      # default: pick-place push-target stack, then the pick-place hop model
#
# Env: STAGEWISE (the CLI; default target/release/stagewise), DATA (dataset dir; default data/), PY (default
# .venv/bin/python), EPISODES (training episodes per task; default 300), EPOCHS (default 40), DEGRADED (share of
# degraded training episodes; default 0.4), TARGETS (hybrid | oracle; default hybrid), THREADS (torch threads;
# default 2 — use 1 when the cores are shared: torch's thread pool spins badly under contention), ENC_CHANNELS
# (the encoder's conv widths; default 16,32,32).
# Models read the camera views and proprioception only (train.py --state-names, default ee_x,ee_y,ee_z,gripper_width).
# Training sets are recorded with the palette's colours jittered (--random-colors); data/<task>-val-colours uses the
# simulator's held-out palette (reported after training, never trained on).
# Seeds: training 0.., validation 500000.., held-out colours 510000..; the CI test's held-out set starts at 1000000
# (tests/shipped_models.rs).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${STAGEWISE:-target/release/stagewise}
DATA=${DATA:-data}
PY=${PY:-.venv/bin/python}
EPISODES=${EPISODES:-300}
EPOCHS=${EPOCHS:-40}
DEGRADED=${DEGRADED:-0.4}
TARGETS=${TARGETS:-hybrid}
THREADS=${THREADS:-2}
TASKS=("$@")
[ ${#TASKS[@]} -gt 0 ] || TASKS=(pick-place push-target stack hop)
[ -x "$B" ] || { echo "no stagewise CLI at $B: cargo build --release (or set STAGEWISE)" >&2; exit 1; }

record() { # task split episodes degraded seed jitter [record flags...]
  local out="$DATA/$1-$2"
  if [ -f "$out/meta/info.json" ]; then echo "reusing $out"; return; fi
  rm -rf "$out"
  "$B" record --task "$1" --episodes "$3" --degraded "$4" --seed "$5" --width 32 --height 32 \
    --camera-jitter "$6" --out "$out" "${@:7}"
}

for t in "${TASKS[@]}"; do
  task=$t kind=progress
  if [ "$t" = hop ]; then task=pick-place kind=hop; fi
  record "$task" "train-n$EPISODES-d$DEGRADED" "$EPISODES" "$DEGRADED" 0 0.01 --random-colors
  record "$task" val 12 0.4 500000 0
  record "$task" val-colours 12 0.4 510000 0 --held-out-colors
  mkdir -p "models/$task"
  chans=${ENC_CHANNELS:-16,32,32}
  start=$(date +%s)
  "$PY" models/training/train.py --task "$task" --kind "$kind" --train "$DATA/$task-train-n$EPISODES-d$DEGRADED" \
    --val "$DATA/$task-val" --val-extra "$DATA/$task-val-colours" --out "models/$task" --epochs "$EPOCHS" \
    --samples-per-epoch 16384 --eval-every 10 --targets "$TARGETS" --threads "$THREADS" --enc-channels "$chans"
  echo "$t: trained in $(($(date +%s) - start)) s"
done
