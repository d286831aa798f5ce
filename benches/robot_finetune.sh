#!/usr/bin/env bash
# On the robot (issue 48 item 5): a policy trained in simulation, fine-tuned on the firmware emulator over the
# authenticated UDP bridge at 50 Hz through the actor-learner loop: `stagewise run --bridge` is the actor on the
# "robot" (the reward model, shaping and stream on its side; it takes the learner's signed policies), and
# `stagewise learn --from-stream --actors 0 --init RUN` is the learner beside it, meeting it at a loopback zenoh
# router. Success over EPISODES emulator episodes (seeds no training used) before and after, with the same
# seeds; what the loop lost; the bridge's safety record.
#
#   STAGEWISE_BIN=target/debug/stagewise benches/robot_finetune.sh INIT_RUN POLICY_MANIFEST OUT [MINUTES] \
#       [EPISODES] [SEED] [-- LEARN_FLAGS...]
#
# INIT_RUN: the simulation learner's run directory (or checkpoint.pt) whose agent the learner starts from;
# POLICY_MANIFEST: that agent's exported policy, which the robot runs before and at the start. MINUTES of
# fine-tuning (default 30) are MINUTES x 60 x 50 env steps received: at most 50 a second, so at least that long.
# EPISODES (default 40) per evaluation, seeds SEED.. (default 5300000, far from every training and evaluation
# range); the fine-tune's own episodes start at seed 6300000. LEARN_FLAGS (after `--`) go to the learner (the
# init run's set-up, e.g. `--obs pixels --batch 128 --utd 1`). Writes OUT/robot_finetune.{json,md}, the processes' logs,
# and the learner's run under OUT/learner.
#
# Success is counted as benches/sim_to_robot.sh does: a robot reports no task success, so the emulator's plant,
# which *is* the simulator, logs how each of its episodes ended (evaluation only; nothing of it reaches the host,
# the reward model or the learner). The emulator is restarted for each evaluation so each log holds one phase.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n 2,22p "$0" >&2; exit 2; }
INIT=$1; POLICY=$2; OUT=$3; shift 3
MINUTES=30; EPISODES=40; SEED=5300000
for v in MINUTES EPISODES SEED; do
    [ $# -gt 0 ] && [ "$1" != "--" ] && { printf -v "$v" '%s' "$1"; shift; }
done
[ "${1:-}" = "--" ] && shift
LEARN_FLAGS=("$@")
BIN=${STAGEWISE_BIN:-${CARGO_TARGET_DIR:-target}/release/stagewise}
PY=${PYTHON:-.venv/bin/python}
PORT=${PORT:-9170}
ZPORT=${ZPORT:-7471}
TASK=${TASK:-push-target}
[ -x "$BIN" ] || { echo "no stagewise binary at $BIN (cargo build --release, or set STAGEWISE_BIN)" >&2; exit 2; }
[ -f "$POLICY" ] || { echo "$POLICY: no such policy manifest" >&2; exit 2; }
[ -e "$OUT" ] && [ -n "$(ls -A "$OUT")" ] && { echo "$OUT is not empty" >&2; exit 2; }
mkdir -p "$OUT"
export RUST_BACKTRACE=0 NO_COLOR=1 STAGEWISE_BIN=$BIN

TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

"$BIN" robot keygen "$TMP/robot.key" > /dev/null
"$BIN" policy keygen > "$TMP/keys.txt"
PUB=$(awk '/^public/{print $2}' "$TMP/keys.txt")
awk '/^secret/{print $2}' "$TMP/keys.txt" > "$TMP/policy.secret"
BRIDGE=(--bridge udp://127.0.0.1:$PORT --link-key-file "$TMP/robot.key" --robot-name arm0 --hz 50 --envs 1
        --width 32 --height 32 --task "$TASK")

# --link-timeout-ms 1000: a shared 2-core machine's scheduling gaps trip the 50 ms default (as sim_to_robot.sh)
emulator() {  # $1: log
    "$BIN" emulator --bind 127.0.0.1:$PORT --task "$TASK" --width 32 --height 32 --link-key-file "$TMP/robot.key" \
        --link-timeout-ms 1000 > "$1" 2>&1 &
    EMU=$!; PIDS+=("$EMU"); sleep 1
}

evaluate() {  # $1: phase name, $2: policy manifest; the robot runs it alone on seeds SEED..
    emulator "$OUT/emulator-$1.log"
    "$BIN" run "${BRIDGE[@]}" --policy "$2" --episodes "$EPISODES" --seed "$SEED" --no-stream --max-steps 300 \
        --log-file "$TMP/$1.swlog" > "$OUT/run-$1.log" 2>&1 || { tail -20 "$OUT/run-$1.log" >&2; exit 1; }
    kill "$EMU"; wait "$EMU" 2>/dev/null || true
}

t0=$(date +%s)
evaluate before "$POLICY"

# the fine-tune: router, emulator, the actor on the robot, the learner beside it
"$PY" -m stagewise.rl.router tcp/127.0.0.1:$ZPORT > "$OUT/router.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q listening "$OUT/router.log" && break; sleep 0.1; done
emulator "$OUT/emulator-finetune.log"
"$BIN" run "${BRIDGE[@]}" --policy "$POLICY" --policy-key "$PUB" --episodes 0 --seed 6300000 --max-steps 200 \
    --stream-images --gamma 0.99 --shaping-scale 1 \
    --connect tcp/127.0.0.1:$ZPORT --client --policy-state "$TMP/arm0.policy-state" --log-file "$TMP/ft.swlog" \
    > "$OUT/run-finetune.log" 2>&1 &
ACTOR=$!; PIDS+=("$ACTOR")
t1=$(date +%s)
# The learner below the control loop's priority, as on a robot's computer: on 2 shared cores, at the same priority,
# its updates starved the emulator's telemetry for 425 ms and the host watchdog stopped the robot (first try).
nice -n 10 "$BIN" learn --task "$TASK" --reward model --from-stream --actors 0 --robots arm0 \
    --stream-connect tcp/127.0.0.1:$ZPORT --policy-secret-file "$TMP/policy.secret" --init "$INIT" \
    --steps $((MINUTES * 60 * 50)) --eval-every $((MINUTES * 60 * 50 / 2)) --out "$OUT/learner" "${LEARN_FLAGS[@]}" \
    > "$OUT/learn.log" 2>&1 || { tail -20 "$OUT/learn.log" >&2; exit 1; }
t2=$(date +%s)
kill -INT "$ACTOR"; wait "$ACTOR" 2>/dev/null || true
kill "$EMU"; wait "$EMU" 2>/dev/null || true

AFTER=$(ls "$OUT"/learner/seed-*/policy/"$TASK"-model-*[0-9].toml | head -1)
evaluate after "$AFTER"

"$PY" - "$OUT" "$SEED" "$EPISODES" "$POLICY" "$AFTER" "$((t2 - t1))" "$(($(date +%s) - t0))" <<'EOF'
import json, re, sys
out, seed, n, before, after, ft_s, wall = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6], \
    int(sys.argv[6]), int(sys.argv[7])
want = set(range(seed, seed + n))


def outcomes(phase):
    got = {}
    for line in open(f"{out}/emulator-{phase}.log"):
        m = re.search(r"plant episode ended seed=(\d+) success=(\w+) terminated=(\w+) steps=(\d+)", line)
        if m and int(m[1]) in want and int(m[1]) not in got:
            got[int(m[1])] = m[2] == "true"
    missing = sorted(want - got.keys())
    if missing:
        sys.exit(f"emulator-{phase}.log has no outcome for seeds {missing}")
    return got


def counts(phase):
    text = open(f"{out}/run-{phase}.log").read()
    c = {}
    m = re.search(r"bridge \S+: (\d+) commands, (\d+) limit hits \(clamped\), (\d+) watchdog trips, (\d+) firmware "
                  r"stops, (\d+) stop frames, (\d+) auth failures, (\d+) replays, (\d+) bad frames, (\d+) late steps",
                  text)
    if m:
        c.update(zip(("commands", "limit_hits", "watchdog_trips", "firmware_stops", "stop_frames", "auth_failures",
                      "replays", "bad_frames", "late_steps"), map(int, m.groups())))
    m = re.search(r"(\d+) deadline misses", text)
    c["deadline_misses"] = int(m[1]) if m else None
    m = re.search(r"stream: (\d+) transitions sent, (\d+) dropped.*policies: (\d+) accepted, (\d+) rejected", text)
    if m:
        c.update(zip(("sent", "dropped", "policies_accepted", "policies_rejected"), map(int, m.groups())))
    c["estops"] = len(re.findall(r"(?i)e-stop latched|EStop", text))
    return c


b, a = outcomes("before"), outcomes("after")
curves = json.load(open(f"{out}/learner/curves.json"))
run = curves["runs"][0]
stream = run["stream"]
res = {"task": "push-target", "episodes": n, "seeds": [seed, seed + n - 1], "before": {"policy": before,
       "success": sum(b.values()) / n, **counts("before")}, "after": {"policy": after, "success": sum(a.values()) / n,
       **counts("after")}, "finetune": {"wall_s": ft_s, **counts("finetune"), "stream": run.get("stream"),
       "updates": run["updates"] - run["initialised_from"]["updates"], "env_steps": run.get("env_steps"), "sim_eval": [
           {"steps": c["steps"], "success": c["success"]} for c in run["checkpoints"]]},
       "both_ways": {str(s): [b[s], a[s]] for s in sorted(want)}, "wall_s": wall}
json.dump(res, open(f"{out}/robot_finetune.json", "w"), indent=1)
f = res["finetune"]
md = [f"Fine-tune on the emulator over the authenticated bridge at 50 Hz: `run --bridge` actor + `learn --from-stream "
      f"--actors 0 --init` learner, {ft_s} s, {f.get('env_steps')} env steps received, {f.get('updates')} updates.",
      "", f"**Emulator success on seeds {seed}..{seed + n - 1}: before {res['before']['success']:.0%}, after "
      f"{res['after']['success']:.0%}.**", "",
      "| phase | success | limit hits | watchdog trips | firmware stops | e-stops | deadline misses | sent | dropped | "
      "policies accepted/rejected |", "|---|---|---|---|---|---|---|---|---|---|"]
for ph in ("before", "finetune", "after"):
    c = res[ph] if ph != "finetune" else f
    md.append(f"| {ph} | {c['success']:.0%} | " if "success" in c else f"| {ph} | - | ")
    md[-1] += " | ".join(str(c.get(k, "-")) for k in ("limit_hits", "watchdog_trips", "firmware_stops", "estops",
                                                         "deadline_misses", "sent", "dropped"))
    md[-1] += f" | {c.get('policies_accepted', '-')}/{c.get('policies_rejected', '-')} |"
open(f"{out}/robot_finetune.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
EOF
