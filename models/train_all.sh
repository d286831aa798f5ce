#!/usr/bin/env bash
# Records the training and validation sets and trains every shipped model (models/README.md, "Retrain").
#
#   models/train_all.sh [TASK...]               # default: pick-place push-target stack, then the pick-place hop model
#
# Env (each overrides the task's default, which is what the shipped model used; see its .train.json): STAGEWISE
# (the CLI; default ${CARGO_TARGET_DIR:-target}/release/stagewise), DATA (dataset dir; default data/), PY (default .venv/bin/python),
# EPISODES (training episodes; 300, push-target 2000), EPOCHS (40, push-target 50, hop 12), DEGRADED (share of
# degraded training episodes; 0.4, push-target 0.6), TARGETS (hybrid | oracle; hybrid, push-target oracle), THREADS
# (torch threads; default 1: torch's thread pool spins badly when the cores are shared; 2 on idle cores),
# ENC_CHANNELS (the encoder's conv widths; 16,32,32), STATE_NAMES (the proprioception the model reads;
# ee_x,ee_y,ee_z,gripper_width, stack and push-target gripper_width: models/README.md says why), BALANCE (progress
# bins sampled equally, `python -m stagewise.training train --balance-progress`; 0 = uniform over frames, push-target 20).
# push-target's shipped model is the one this trains, then fine-tuned on random play and RL learner states (20
# more epochs; models/README.md, "Learner states", has the commands).
# Models read the camera views and proprioception only, never block or target poses.
# Training sets are recorded with the palette's colours jittered (--random-colors); data/<task>-val-colours uses the
# simulator's held-out palette (reported after training, never trained on).
# Seeds: training 0.., validation 500000.., held-out colours 510000..; the CI test's held-out set starts at 1000000
# (tests/shipped_models.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${STAGEWISE:-${CARGO_TARGET_DIR:-target}/release/stagewise}
DATA=${DATA:-data}
PY=${PY:-.venv/bin/python}
THREADS=${THREADS:-1}
# What the caller set (empty: the task's default below).
user_episodes=${EPISODES:-} user_degraded=${DEGRADED:-} user_epochs=${EPOCHS:-} user_targets=${TARGETS:-}
user_state=${STATE_NAMES:-}
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
  episodes=300 degraded=0.4 epochs=40 targets=hybrid state=ee_x,ee_y,ee_z,gripper_width balance=0
  case "$t" in
    hop) task=pick-place kind=hop epochs=12 ;;
    stack) state=gripper_width ;;
    push-target) episodes=2000 degraded=0.6 epochs=50 targets=oracle state=gripper_width balance=20 ;;
  esac
  EPISODES=${user_episodes:-$episodes} DEGRADED=${user_degraded:-$degraded}
  record "$task" "train-n$EPISODES-d$DEGRADED" "$EPISODES" "$DEGRADED" 0 0.01 --random-colors
  record "$task" val 12 0.4 500000 0
  record "$task" val-colours 12 0.4 510000 0 --held-out-colors
  mkdir -p "models/$task"
  chans=${ENC_CHANNELS:-16,32,32}
  start=$(date +%s)
  "$PY" -m stagewise.training train --task "$task" --kind "$kind" --train "$DATA/$task-train-n$EPISODES-d$DEGRADED" \
    --val "$DATA/$task-val" --val-extra "$DATA/$task-val-colours" --out "models/$task" \
    --samples-per-epoch 16384 --eval-every 10 --targets "${user_targets:-$targets}" --threads "$THREADS" \
    --enc-channels "$chans" --epochs "${user_epochs:-$epochs}" --state-names "${user_state:-$state}" \
    --balance-progress "${BALANCE:-$balance}"
  echo "$t: trained in $(($(date +%s) - start)) s"
done
