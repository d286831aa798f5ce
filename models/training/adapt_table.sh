#!/usr/bin/env bash
# The before/after table of `stagewise adapt` (docs/own-task.md, "Adapt to a variant"): the shipped pick-place model
# on a task variant it never saw (the table painted near-black, TABLE), adapted from 1, 3 and 10 annotated
# demonstrations of the variant, evaluated on 12 fresh held-out episodes of the variant and of the original task.
#
#   models/training/adapt_table.sh            # env: STAGEWISE (CLI, default target/release/stagewise), DATA
#                                             # (default data/adapt), SEEDS (adapt seeds, default "0"), TABLE
# Seeds: demonstrations 710000.. (the first N of one recording), held-out 1000000..1000011 (both sets the same
# layouts; only the table differs). Clean expert episodes, 32x32 (the model's size).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${STAGEWISE:-target/release/stagewise}
DATA=${DATA:-data/adapt}
TABLE=${TABLE:-30,30,34}
SEEDS=${SEEDS:-0}
M=models/pick-place/pick-place-progress.toml
[ -x "$B" ] || { echo "no stagewise CLI at $B: cargo build --release (or set STAGEWISE)" >&2; exit 1; }
mkdir -p "$DATA"
rec() { # out seed episodes [flags]
  [ -f "$1/meta/info.json" ] && return
  rm -rf "$1"
  "$B" --log warn record --task pick-place --episodes "$3" --degraded 0 --seed "$2" --width 32 --height 32 \
    --out "$1" "${@:4}" > /dev/null
}
rec "$DATA/demos" 710000 10 --table-color "$TABLE"
rec "$DATA/heldout-variant" 1000000 12 --table-color "$TABLE"
rec "$DATA/heldout-original" 1000000 12
ev() { # model dataset -> "VOC MAE"
  "$B" --log warn eval --model "$1" --dataset "$2" 2>/dev/null |
    awk '/^VOC /{v=$2} /^progress MAE/{m=$3} END{printf "%s | %s", v, m}'
}
echo "| model | demos | seed | adapt s (wall) | variant VOC | variant MAE | original VOC | original MAE |"
echo "|---|---|---|---|---|---|---|---|"
echo "| shipped | 0 | - | - | $(ev $M "$DATA/heldout-variant") | $(ev $M "$DATA/heldout-original") |"
for n in 1 3 10; do
  for seed in $SEEDS; do
    out="$DATA/adapted-n$n-s$seed"
    rm -rf "$out"
    t=$(date +%s.%N)
    "$B" --log warn adapt --model $M --demo "$DATA/demos:0-$((n - 1))" --out "$out" --seed "$seed" > "$out.log" 2>&1
    secs=$(echo "$(date +%s.%N) - $t" | bc)
    m="$out/$(basename "$out")-progress.toml"
    printf '| adapted | %s | %s | %.0f | %s | %s |\n' "$n" "$seed" "$secs" \
      "$(ev "$m" "$DATA/heldout-variant")" "$(ev "$m" "$DATA/heldout-original")"
  done
done
