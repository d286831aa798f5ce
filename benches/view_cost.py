"""What `stagewise run --rerun` costs the actor: env-steps/s at N envs with and without the live viewer.

Runs `stagewise run --task T --policy expert --envs N --episodes E` in turn without a subscriber, with `--rerun
save FILE.rrd` (the `stagewise view live` child subscribing to the run's stream; --rerun also puts RGB frames on
every 10th step, whose encoding is part of the price) and with a bare zenoh subscriber that only takes the same
messages (the floor any consumer of the stream costs), R times each, and reads the actor's own rate from
the run's summary line (`... N env-steps/s (S s stepping)`: the stepping loop only, without start-up), and the CPU
time of the run and its viewer per env-step (start-up included; steadier than rates on a shared machine). The three
alternate so that a machine whose load drifts biases none. Writes the runs and the medians as JSON.

    .venv/bin/python benches/view_cost.py --envs 8 --episodes 24 --repeats 3 --out benches/view_cost.json

The binary: $STAGEWISE_BIN, else target/release/stagewise, else target/debug/stagewise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RATE = re.compile(r"([0-9.]+) env-steps/s \(([0-9.]+) s stepping\)")


def binary() -> str:
    if os.environ.get("STAGEWISE_BIN"):
        return os.environ["STAGEWISE_BIN"]
    for profile in ("release", "debug"):
        p = ROOT / "target" / profile / "stagewise"
        if p.is_file():
            return str(p)
    sys.exit("no stagewise binary: cargo build --release (or set STAGEWISE_BIN)")


# The floor: a subscriber that only takes the same messages off zenoh (Python, niced like the viewer), what any
# consumer of the stream (a learner, a logger) costs the actor before it does anything with them.
BARE_SUBSCRIBER = """
import os, sys, time, zenoh
os.nice(10)
conf = zenoh.Config()
conf.insert_json5("connect/endpoints", '["' + sys.argv[1] + '"]')
conf.insert_json5("scouting/multicast/enabled", "false")
session = zenoh.open(conf)
subs = [session.declare_subscriber("stagewise/sim0/" + k, zenoh.handlers.RingChannel(256))
        for k in ("transition", "progress", "episode")]
last = None
while last is None or time.monotonic() - last < 2.0:
    got = [s.try_recv() for s in subs]
    if any(g is not None for g in got):
        last = time.monotonic()
    else:
        time.sleep(0.005)
"""


def one(exe: str, args: argparse.Namespace, mode: str, tmp: Path, i: int) -> dict:
    """One run; `mode`: off (no subscriber), viewer (--rerun save) or bare (BARE_SUBSCRIBER)."""
    port = 17600 + i
    cmd = [exe, "run", "--task", args.task, "--policy", "expert", "--envs", str(args.envs),
           "--episodes", str(args.episodes), "--seed", str(args.seed), "--listen", f"tcp/127.0.0.1:{port}",
           "--log-file", str(tmp / f"run{i}.swlog")]  # fmt: skip
    viewer = mode == "viewer"
    if viewer:
        cmd += ["--rerun", "save", str(tmp / f"run{i}.rrd")]
    t0 = time.monotonic()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    bare = None
    if mode == "bare":
        cmd += ["--wait-subscribers", "30"]
        bare = subprocess.Popen([sys.executable, "-c", BARE_SUBSCRIBER, f"tcp/127.0.0.1:{port}"], cwd=ROOT)
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if bare is not None:
        bare.wait(timeout=60)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.monotonic() - t0
    # CPU seconds of the run and its viewer child (both waited for), start-up included.
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    m = RATE.search(out.stdout)
    if not m:
        sys.exit(f"no rate in the run's summary:\n{out.stdout}")
    shown = re.search(r"view: (\d+) transitions.*?(?:, (\d+) dropped)?", out.stderr)
    steps = int(re.search(r"(\d+) env-steps,", out.stdout).group(1))
    r = {
        "mode": mode,
        "env_steps_per_s": float(m.group(1)),
        "stepping_s": float(m.group(2)),
        "wall_s": wall,
        "env_steps": steps,
        "cpu_ms_per_env_step": 1000.0 * cpu / steps,
    }
    if viewer and shown:
        r["viewer_transitions"] = int(shown.group(1))
        d = re.search(r", (\d+) dropped", out.stderr)
        r["viewer_dropped"] = int(d.group(1)) if d else 0
    (tmp / f"run{i}.swlog").unlink(missing_ok=True)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="pick-place")
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    exe = binary()
    runs = []
    modes = ("off", "viewer", "bare")
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.repeats):
            for j, mode in enumerate(modes):
                r = one(exe, args, mode, Path(d), len(modes) * i + j)
                runs.append(r)
                print(json.dumps(r), flush=True)

    def median(mode: str, what: str) -> float:
        return statistics.median(r[what] for r in runs if r["mode"] == mode)

    off, on, bare = (median(m, "env_steps_per_s") for m in modes)
    cpu_off, cpu_on, cpu_bare = (median(m, "cpu_ms_per_env_step") for m in modes)
    result = {
        "command": " ".join(sys.argv),
        "binary": exe,
        "task": args.task,
        "envs": args.envs,
        "episodes": args.episodes,
        "cpus": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "median_env_steps_per_s_off": off,
        "median_env_steps_per_s_on": on,
        "cost_percent": 100.0 * (off - on) / off,
        "median_env_steps_per_s_bare_subscriber": bare,
        "bare_subscriber_cost_percent": 100.0 * (off - bare) / off,
        "median_cpu_ms_per_env_step_off": cpu_off,
        "median_cpu_ms_per_env_step_on": cpu_on,
        "median_cpu_ms_per_env_step_bare_subscriber": cpu_bare,
        "runs": runs,
    }
    print(
        f"off {off:.1f} env-steps/s, viewer {on:.1f} (cost {result['cost_percent']:.1f}%), bare subscriber "
        f"{bare:.1f} (cost {result['bare_subscriber_cost_percent']:.1f}%); CPU per env-step (run + consumer, "
        f"start-up included) {cpu_off:.2f} ms off, {cpu_on:.2f} ms viewer, {cpu_bare:.2f} ms bare subscriber"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
