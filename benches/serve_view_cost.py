"""What `stagewise serve --rerun` costs a learner: the Python client's env-steps/s at N served envs with and
without the live viewer.

Starts `stagewise serve --task T --envs N --reward R --images` in turn without and with `--rerun save FILE.rrd`
(each served env then publishes its steps in batches, RGB frames 20 a second across the envs or --frames-per-s
per env, and a `stagewise view live` child writes them), steps the N envs in parallel from one Python client (`RemoteEnv.step_async` on each, then every reply, as a
vectorised learner does) with random actions, resetting ended episodes, and times the stepping loop only (after
W warm-up steps; start-up excluded), with the CPU time per env-step of serve, its viewer child and the client in
that loop (steadier than rates on a shared machine). Off and on alternate, R times each, so that a machine whose load drifts biases
neither; the cost is 1 - median(on) / median(off), and the median of the per-pair ratios is given too. Writes the
runs and the medians as JSON.

    .venv/bin/python benches/serve_view_cost.py --envs 4 --steps 300 --repeats 5 --out benches/serve_view_cost.json

The binary: $STAGEWISE_BIN, else target/release/stagewise, else target/debug/stagewise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from stagewise import launch  # noqa: E402
from stagewise.env import RemoteEnv  # noqa: E402
from stagewise.session import open_session  # noqa: E402


def binary() -> str:
    if os.environ.get("STAGEWISE_BIN"):
        return os.environ["STAGEWISE_BIN"]
    for profile in ("release", "debug"):
        p = ROOT / "target" / profile / "stagewise"
        if p.is_file():
            return str(p)
    sys.exit("no stagewise binary: cargo build --release (or set STAGEWISE_BIN)")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc), 0 when it is gone."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def measure(args, rerun: bool, tmp: Path, k: int) -> dict:
    """One serve process, stepped by the client: env-steps/s of the timed loop, and what serve printed."""
    extra = ["--rerun", "save", str(tmp / f"serve{k}.rrd")] if rerun else []
    if rerun and args.frames_per_s:
        extra += ["--rerun-frames-per-s", str(args.frames_per_s)]
    log = tmp / f"serve{k}.log"
    p = launch.serve("--task", args.task, "--envs", str(args.envs), "--reward", args.reward, "--images",
                     "--width", str(args.size), "--height", str(args.size), *extra, log=str(log))  # fmt: skip
    robots = [f"sim0-{i}" for i in range(args.envs)] if args.envs > 1 else ["sim0"]
    session = open_session([p.endpoint])
    rng = np.random.default_rng(k)
    try:
        envs = [RemoteEnv(r, session=session, timeout=60, connect_timeout=120) for r in robots]
        first = [e.reset(seed=i) for i, e in enumerate(envs)]
        dim = len(first[0]["spec"]["action"]["low"])
        steps = 0
        start = None
        viewer = [int(c) for c in Path(f"/proc/{p.proc.pid}/task/{p.proc.pid}/children").read_text().split()]
        for n in range(args.warmup + args.steps):
            if n == args.warmup:
                start = time.perf_counter()
                cpu0 = (cpu_s(p.proc.pid), sum(cpu_s(c) for c in viewer), time.process_time())
            pending = [e.step_async(rng.uniform(-1, 1, dim).tolist()) for e in envs]
            for e, q in zip(envs, pending):
                reply = q.result()
                if reply.get("error"):
                    raise RuntimeError(f"{e.robot}: {reply['error']}")
                if reply["terminated"] or reply["truncated"]:
                    e.reset()
                if n >= args.warmup:
                    steps += 1
        secs = time.perf_counter() - start
        cpu1 = (cpu_s(p.proc.pid), sum(cpu_s(c) for c in viewer), time.process_time())
        for e in envs:
            e.close()
    finally:
        session.close()
        p.proc.send_signal(signal.SIGINT)
        try:
            p.wait(120)
        finally:
            p.stop()
    out = p.output()
    return {
        "rerun": rerun,
        "env_steps": steps,
        "seconds": secs,
        "env_steps_per_s": steps / secs,
        # CPU per env-step of the timed loop: serve (its threads), its viewer child, this client.
        "cpu_ms_per_step": {
            w: 1e3 * (b - a) / steps for w, a, b in zip(("serve", "viewer", "client"), cpu0, cpu1)
        },
        "serve_rerun_lines": [line for line in out.splitlines() if line.startswith("--rerun ")],
        "warnings": [line for line in out.splitlines() if "WARN" in line][:5],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="pick-place")
    ap.add_argument("--envs", type=int, default=4)
    ap.add_argument("--reward", default="oracle")
    ap.add_argument("--size", type=int, default=96, help="camera width and height (default 96)")
    ap.add_argument("--steps", type=int, default=300, help="timed steps per env (default 300)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps per env first (default 20)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--frames-per-s", type=float, help="serve --rerun-frames-per-s (default: serve's, 20 in all)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("STAGEWISE_BIN", binary())
    runs = []
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.repeats):
            # Alternate which goes first, so that neither always runs on the warmer machine.
            for rerun in ((False, True) if r % 2 == 0 else (True, False)):
                m = measure(args, rerun, Path(d), len(runs))
                runs.append(m)
                print(f"{'on ' if rerun else 'off'} {m['env_steps_per_s']:8.1f} env-steps/s  {m['serve_rerun_lines']}",
                      flush=True)  # fmt: skip
    off = [m["env_steps_per_s"] for m in runs if not m["rerun"]]
    on = [m["env_steps_per_s"] for m in runs if m["rerun"]]
    pairs = [b / a for a, b in zip(off, on)]
    cpu = {
        mode: {w: statistics.median(m["cpu_ms_per_step"][w] for m in runs if m["rerun"] == on_)
               for w in ("serve", "viewer", "client")}
        for mode, on_ in (("off", False), ("on", True))
    }  # fmt: skip
    result = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "binary": os.environ["STAGEWISE_BIN"],
        "load_average": os.getloadavg(),
        "runs": runs,
        "median_off": statistics.median(off),
        "median_on": statistics.median(on),
        "cost": 1 - statistics.median(on) / statistics.median(off),
        "median_pair_ratio": statistics.median(pairs),
        "median_cpu_ms_per_step": cpu,
    }
    print(
        f"off {result['median_off']:.1f}, on {result['median_on']:.1f} env-steps/s (medians of {args.repeats}): "
        f"cost {100 * result['cost']:.1f}% (median of per-pair ratios {result['median_pair_ratio']:.3f}); CPU ms "
        f"per env-step (medians): {json.dumps(cpu)}"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
