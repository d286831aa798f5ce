#!/usr/bin/env python3
"""Side by side: Stagewise's rapier3d simulator and MuJoCo stepping a comparable scene, in the same run.

Scene on both sides: a table, two free boxes resting on it, and a 3-DoF Cartesian gripper (palm + two fingers)
that traces the same circle above the boxes. MuJoCo models the gripper as a position-controlled 3-joint arm
(three slide joints with position actuators); Stagewise moves kinematic bodies along the commanded Cartesian path.
Both use a 2 ms physics step, 10 physics steps per 50 Hz control step, one thread.

Also prints the simulator's control-step rates without rendering and with 3 ray-cast views at 96x96
(1 env, and N envs on all cores), against the rendering targets of 200 and (issue 20) 400 steps/s per core.

Usage: .venv/bin/python benches/sim_vs_mujoco.py [--steps 3000] [--out benches/results/sim_vs_mujoco.json]
Python requirements (MuJoCo; with Pillow and matplotlib for the other benches), one command, into the venv of
scripts/setup.sh: `.venv/bin/pip install -r benches/requirements-bench.txt`. Builds the Rust side with
cargo --release (or pass --exe). The summary records the load average at the start and the end of the run.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MJCF = """
<mujoco model="comparable">
  <option timestep="0.002" gravity="0 0 -9.81"/>
  <worldbody>
    <geom name="table" type="box" size="0.45 0.45 0.02" pos="0 0 -0.02" friction="0.8"/>
    <body name="gx" pos="0 0 0">
      <joint name="jx" type="slide" axis="1 0 0" range="-0.5 0.5" damping="5"/>
      <inertial pos="0 0 0" mass="0.3" diaginertia="1e-3 1e-3 1e-3"/>
      <body name="gy">
        <joint name="jy" type="slide" axis="0 1 0" range="-0.5 0.5" damping="5"/>
        <inertial pos="0 0 0" mass="0.3" diaginertia="1e-3 1e-3 1e-3"/>
        <body name="gz">
          <joint name="jz" type="slide" axis="0 0 1" range="0.02 0.35" damping="5"/>
          <geom name="palm" type="box" size="0.016 0.058 0.008" pos="0 0 0.028" mass="0.3"/>
          <geom name="finger_l" type="box" size="0.01 0.005 0.02" pos="0 0.045 0" mass="0.05"/>
          <geom name="finger_r" type="box" size="0.01 0.005 0.02" pos="0 -0.045 0" mass="0.05"/>
        </body>
      </body>
    </body>
    <body name="box_a" pos="0.08 -0.06 0.02"><freejoint/><geom type="box" size="0.02 0.02 0.02" mass="0.1"/></body>
    <body name="box_b" pos="-0.07 0.08 0.02"><freejoint/><geom type="box" size="0.026 0.026 0.02" mass="0.15"/></body>
  </worldbody>
  <actuator>
    <position joint="jx" kp="3000" kv="60"/>
    <position joint="jy" kp="3000" kv="60"/>
    <position joint="jz" kp="3000" kv="60"/>
  </actuator>
</mujoco>
"""


def mujoco_steps_per_s(control_steps: int, substeps: int = 10) -> tuple[float, float, str]:
    """(wall-clock steps/s, steps per CPU second, version)."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(MJCF)
    data = mujoco.MjData(model)
    data.qpos[0:3] = [0.0, 0.0, 0.15]
    mujoco.mj_forward(model, data)
    t0 = time.perf_counter()
    c0 = time.process_time()
    for k in range(control_steps):
        t = k * 0.02
        data.ctrl[:] = [0.12 * math.cos(t * 1.5), 0.12 * math.sin(t * 1.5), 0.15 + 0.03 * math.sin(t * 0.7)]
        for _ in range(substeps):
            mujoco.mj_step(model, data)
    dt = time.perf_counter() - t0
    dc = max(time.process_time() - c0, 1e-9)
    n = control_steps * substeps
    return n / dt, n / dc, mujoco.__version__


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000, help="control steps per measurement")
    ap.add_argument("--exe", help="a prebuilt sim_throughput example (skips the cargo build)")
    ap.add_argument("--out", help="also write the summary JSON to this file")
    args = ap.parse_args()

    load_start = os.getloadavg()
    env = dict(os.environ)
    target = env.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    exe = args.exe or os.path.join(target, "release", "examples", "sim_throughput")
    if not args.exe:
        subprocess.run(
            ["cargo", "build", "--release", "-p", "stagewise-sim", "--example", "sim_throughput"],
            cwd=ROOT,
            check=True,
            env=env,
        )
    out = subprocess.run([exe, str(args.steps)], cwd=ROOT, check=True, capture_output=True, text=True)
    rust = json.loads(out.stdout.strip().splitlines()[-1])

    mj_wall, mj, version = mujoco_steps_per_s(args.steps)

    cores = rust["cores"]
    n = rust["n_envs"]
    print(f"scene: table + 2 free boxes + 3-DoF gripper, dt 2 ms, 10 substeps per 50 Hz control step, 1 thread")
    print("rates per CPU second (fair on a shared machine); wall-clock rates in brackets")
    w = 60

    def row(label, key, extra=""):
        print(f"{label:{w}} {rust[key + '_per_cpu_s']:10.0f}  [{rust[key]:10.0f}]{extra}")

    print(f"{'MuJoCo ' + version + ' physics steps/s':{w}} {mj:10.0f}  [{mj_wall:10.0f}]")
    for key, label in [
        ("physics_steps_per_s_sleeping", "stagewise-sim physics steps/s (sleeping allowed)"),
        ("physics_steps_per_s_no_sleeping", "stagewise-sim physics steps/s (sleeping off)"),
    ]:
        row(label, key, f"   ratio vs MuJoCo {rust[key + '_per_cpu_s'] / mj:5.2f}x")
    row("control steps/s, no rendering, 1 env", "control_steps_per_s_headless_1env")
    row(f"control steps/s, no rendering, {n} envs ({cores} cores)", "control_steps_per_s_headless_nenv")
    r1 = rust["control_steps_per_s_3x96_1env_per_cpu_s"]
    rn = rust["control_steps_per_s_3x96_nenv_per_cpu_s"]
    row("control steps/s, 3 views 96x96, 1 env", "control_steps_per_s_3x96_1env",
        f"   vs 400/core target {r1 / 400:5.2f}x")
    row(f"control steps/s, 3 views 96x96, {n} envs ({cores} cores)", "control_steps_per_s_3x96_nenv",
        f"   vs 400/core target {rn / 400:5.2f}x")
    summary = {
        "mujoco_version": version,
        "mujoco_steps_per_cpu_s": mj,
        "mujoco_steps_per_s": mj_wall,
        **rust,
        "physics_ratio_sleeping": rust["physics_steps_per_s_sleeping_per_cpu_s"] / mj,
        "physics_ratio_no_sleeping": rust["physics_steps_per_s_no_sleeping_per_cpu_s"] / mj,
        "render_ratio_vs_200_per_core": r1 / 200,
        "render_ratio_vs_400_per_core": r1 / 400,
        "render_nenv_ratio_vs_400_per_core": rn / 400,
        "load_average_1_5_15_start": [round(x, 2) for x in load_start],
        "load_average_1_5_15_end": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(summary))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
