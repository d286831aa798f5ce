#!/usr/bin/env bash
# One labelled round of issue 48's loop, the oracle playing the person: roll out a learner's exported checkpoints
# as a robot would (`stagewise run --stream-images --log-file`), turn each log into a dataset (`stagewise log
# export`), label each episode with what a person gives (stage starts + outcome: benches/oracle_person.py) and
# apply the labels (`stagewise annotate --from`). Training the next model is the caller's `stagewise train` over the
# demonstrations and OUT/rollouts-*.
#
#   benches/label_round.sh CHECKPOINTS_DIR OUT 40 60 80 100 120     # the checkpoints <name>-<K>k.toml to roll out
#
# Environment: EPISODES per checkpoint (10), SEED of the first rollout (8000000; each checkpoint the next
# EPISODES), TASK (push-target), STAGES (the task's stage names: reach,descend,push), STAGEWISE_BIN.
# The run uses `--reward oracle` so that the log's progress column is the simulator's stage, which only
# oracle_person.py reads (to play the person); `stagewise train` reads the annotations alone.
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,13p "$0"; exit 2; }
ckpts=$1 out=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${STAGEWISE_BIN:-$root/target/release/stagewise}
py=$root/.venv/bin/python
task=${TASK:-push-target} stages=${STAGES:-reach,descend,push} episodes=${EPISODES:-10} seed=${SEED:-8000000}
mkdir -p "$out"
for k in "$@"; do
    policy=$(ls "$ckpts"/*-"${k}k".toml 2>/dev/null | head -1 || true)
    [ -n "$policy" ] || { echo "$ckpts: no checkpoint *-${k}k.toml" >&2; exit 1; }
    ds=$out/rollouts-${k}k
    rm -rf "$ds" "$out/rollouts-${k}k.swlog"
    if ! "$bin" run --task "$task" --policy "$policy" --reward oracle --stream-images --no-stream --hz 0 \
        --width 32 --height 32 --envs 2 --episodes "$episodes" --seed "$seed" \
        --log-file "$out/rollouts-${k}k.swlog" > "$out/run-${k}k.txt" 2>&1; then
        cat "$out/run-${k}k.txt" >&2
        exit 1
    fi
    grep "episodes," "$out/run-${k}k.txt"
    "$bin" log export "$out/rollouts-${k}k.swlog" --task "$task" --out "$ds" 2>&1 | grep -v "^note:"
    "$py" "$root/benches/oracle_person.py" "$ds" --stages "$stages" --out "$out/labels-${k}k.json"
    "$bin" annotate --dataset "$ds" --from "$out/labels-${k}k.json" | tail -1
    rm "$out/rollouts-${k}k.swlog" "$out/run-${k}k.txt"
    seed=$((seed + episodes))
done
