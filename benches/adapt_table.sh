#!/usr/bin/env bash
# The before/after table of `stagewise adapt` (docs/own-task.md, "Adapt to a variant"): the shipped pick-place model
# on a task variant it never saw (the table painted near-black, TABLE), adapted from 1, 3 and 10 annotated
# demonstrations of the variant with three seeds each, evaluated with `stagewise eval` on HELDOUT fresh held-out
# episodes of the variant and of the original task (never trained on).
#
#   benches/adapt_table.sh             # env: STAGEWISE (CLI, default ${CARGO_TARGET_DIR:-target}/release/stagewise), DATA (default
#                                      # data/adapt), SEEDS (default "0 1 2"), NS (demo counts, default "1 3 10"),
#                                      # TABLE, HELDOUT (default 24), OUT (results stem, default
#                                      # benches/results/adapt_table: .json + .md), REPLAY (original-task episodes
#                                      # replayed, default 10; 0: none), REPLAY_FRAC (their share of each batch,
#                                      # default 0.5), STEPS (fine-tuning steps, default 500), MODEL (the model
#                                      # to adapt, default the shipped pick-place progress model), ADAPT_ARGS
#                                      # (extra adapt flags)
#
# Seeds: demonstrations 710000..710039 (one recording of 40), held-out 1000000.. (both held-out sets the same
# layouts; only the table differs). Clean expert episodes, 32x32 (the model's size). Demonstrations: seed s
# takes the eligible episodes number 10s .. 10s+N-1 of the recording (seeds never share a demonstration), where
# eligible means a single pick-and-place: every annotated stage lasts at most 3x its share of the model's stage
# proportions (the expert's retries, a second grasp after a misplaced block, are annotated as one long "release";
# 4 of the 40: episodes 0, 2, 6 and the failed 35). The held-out sets are taken as recorded, retries included.
# Replayed: REPLAY episodes of the original task (seeds 720000.., the user's own data of the task the model was
# trained on; neither held-out set), annotated, mixed into every batch and repainted in the demonstrations' colours
# by the adapt job (--replay-recolour, on by default).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${STAGEWISE:-${CARGO_TARGET_DIR:-target}/release/stagewise}
DATA=${DATA:-data/adapt}
TABLE=${TABLE:-30,30,34}
SEEDS=${SEEDS:-0 1 2}
NS=${NS:-1 3 10}
HELDOUT=${HELDOUT:-24}
REPLAY=${REPLAY:-10}
REPLAY_FRAC=${REPLAY_FRAC:-0.5}
STEPS=${STEPS:-500}
OUT=${OUT:-benches/results/adapt_table}
M=${MODEL:-models/pick-place/pick-place-progress.toml}
[ -x "$B" ] || { echo "no stagewise CLI at $B: cargo build --release (or set STAGEWISE)" >&2; exit 1; }
mkdir -p "$DATA" "$(dirname "$OUT")"
rec() { # out seed episodes [flags]
  [ -f "$1/meta/info.json" ] && return
  rm -rf "$1"
  "$B" --log warn record --task pick-place --episodes "$3" --degraded 0 --seed "$2" --width 32 --height 32 \
    --out "$1" "${@:4}" > /dev/null
}
rec "$DATA/demos-40" 710000 40 --table-color "$TABLE"
rec "$DATA/heldout-variant-$HELDOUT" 1000000 "$HELDOUT" --table-color "$TABLE"
rec "$DATA/heldout-original-$HELDOUT" 1000000 "$HELDOUT"
replay=()
if [ "$REPLAY" -gt 0 ]; then
  rec "$DATA/replay-original-$REPLAY" 720000 "$REPLAY"
  replay=(--replay "$DATA/replay-original-$REPLAY" --replay-frac "$REPLAY_FRAC")
fi
"$B" --log warn annotate --dataset "$DATA/demos-40" --export "$DATA/demos-40.stages.json" > /dev/null
eligible=$(python3 - "$DATA/demos-40.stages.json" "$M" <<'EOF'
import json, sys, tomllib
ann = json.load(open(sys.argv[1]))
prop = tomllib.load(open(sys.argv[2], "rb"))["stages"]["proportions"]
prop = [p / sum(prop) for p in prop]
ok = []
for e in ann["episodes"]:
    n = e["end_frames"][-1] - e["start_frames"][0]
    if all((b - a) / n <= 3 * p for a, b, p in zip(e["start_frames"], e["end_frames"], prop)):
        ok.append(e["episode_index"])
print(" ".join(map(str, ok)))
EOF
)
read -r -a ELIG <<< "$eligible"
ev() { # model dataset -> "VOC MIN MAE" (stage accuracy last)
  "$B" --log warn eval model --model "$1" --dataset "$2" --no-plots --out "$3" 2>/dev/null |
    awk '/^VOC /{v=$2; m=$4; sub(/\)/, "", m)} /^progress MAE/{e=$3} /^stage accuracy/{s=$3} END{print v, m, e, s}'
}
json="$OUT.json.tmp"
echo "[" > "$json"
row() { # model demos seed wall cpu variant(4) original(4)
  printf '| %s | %s | %s | %s | %s | %.4f (%.2f) | %.4f | %.4f (%.2f) | %.4f |\n' "$1" "$2" "$3" "$4" "$5" \
    "$6" "$7" "$8" "${10}" "${11}" "${12}"
  local ok=false
  awk -v v="$6" -v e="$8" -v o="${10}" 'BEGIN{exit !(v >= 0.95 && e <= 0.06 && o >= 0.95)}' && ok=true
  printf '  {"model": "%s", "demos": "%s", "seed": "%s", "wall_s": "%s", "cpu_s": "%s", "variant": {"voc": %s, "voc_min": %s, "mae": %s, "stage_acc": %s}, "original": {"voc": %s, "voc_min": %s, "mae": %s, "stage_acc": %s}, "meets_bar": %s},\n' \
    "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" "${10}" "${11}" "${12}" "${13}" "$ok" >> "$json"
}
{
echo "Held-out: $HELDOUT episodes each (variant: table $TABLE; original). Eligible demonstrations: ${ELIG[*]}." \
  "Replayed original-task episodes: $REPLAY. Adapt flags: ${replay[*]} --steps $STEPS ${ADAPT_ARGS:-}"
echo
echo "| model | demos (episodes) | seed | adapt s (wall) | adapt s (CPU) | variant VOC (min) | variant MAE | original VOC (min) | original MAE |"
echo "|---|---|---|---|---|---|---|---|---|"
# shellcheck disable=SC2046
row shipped 0 - - - $(ev $M "$DATA/heldout-variant-$HELDOUT" "$DATA/eval-shipped-v") \
  $(ev $M "$DATA/heldout-original-$HELDOUT" "$DATA/eval-shipped-o")
for n in $NS; do
  for seed in $SEEDS; do
    sel=$(IFS=,; echo "${ELIG[*]:$((10 * seed)):$n}")
    [ "$(echo "$sel" | tr ',' '\n' | wc -l)" -eq "$n" ] || { echo "not enough eligible demonstrations" >&2; exit 1; }
    out="$DATA/adapted-n$n-s$seed"
    rm -rf "$out"
    /usr/bin/time -f "%e %U %S" -o "$out.time" \
      "$B" --log warn adapt --model $M --demo "$DATA/demos-40:$sel" --out "$out" --seed "$seed" "${replay[@]}" --steps "$STEPS" ${ADAPT_ARGS:-} \
      > "$out.log" 2>&1
    read -r wall user sys < "$out.time"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN{printf "%.0f", u + s}')
    m="$out/$(basename "$out")-progress.toml"
    # shellcheck disable=SC2046
    row adapted "$n ($sel)" "$seed" "$(printf %.0f "$wall")" "$cpu" \
      $(ev "$m" "$DATA/heldout-variant-$HELDOUT" "$out/eval-v") $(ev "$m" "$DATA/heldout-original-$HELDOUT" "$out/eval-o")
  done
done
} | tee "$OUT.md"
sed -i '$ s/},$/}/' "$json"
echo "]" >> "$json"
mv "$json" "$OUT.json"
