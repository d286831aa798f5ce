#!/usr/bin/env python3
"""Side by side: Stagewise's rapier3d simulator and MuJoCo stepping a comparable scene, in the same run.

Scene on both sides: a table, two free boxes resting on it, and a 3-DoF Cartesian gripper (palm + two fingers)
that traces the same circle above the boxes. MuJoCo models the gripper as a position-controlled 3-joint arm
(three slide joints with position actuators); Stagewise moves kinematic bodies along the commanded Cartesian path.
Both use a 2 ms physics step, 10 physics steps per 50 Hz control step, one thread.

Also prints the simulator's control-step rates without rendering and with 3 ray-cast views at 96x96
(1 env, and N envs on all cores), against the 200 steps/s-per-core rendering target.

Usage: .venv/bin/python benches/sim_vs_mujoco.py [--steps 3000]
(needs `pip install -r benches/requirements-bench.txt`; builds the Rust side with cargo --release)
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


def mujoco_steps_per_s(control_steps: int, substeps: int = 10) -> tuple[float, str]:
    import mujoco

    model = mujoco.MjModel.from_xml_string(MJCF)
    data = mujoco.MjData(model)
    data.qpos[0:3] = [0.0, 0.0, 0.15]
    mujoco.mj_forward(model, data)
    t0 = time.perf_counter()
    for k in range(control_steps):
        t = k * 0.02
        data.ctrl[:] = [0.12 * math.cos(t * 1.5), 0.12 * math.sin(t * 1.5), 0.15 + 0.03 * math.sin(t * 0.7)]
        for _ in range(substeps):
            mujoco.mj_step(model, data)
    dt = time.perf_counter() - t0
    return control_steps * substeps / dt, mujoco.__version__


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000, help="control steps per measurement")
    args = ap.parse_args()

    env = dict(os.environ)
    target = env.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    subprocess.run(
        ["cargo", "build", "--release", "-p", "stagewise-sim", "--example", "sim_throughput"],
        cwd=ROOT,
        check=True,
        env=env,
    )
    exe = os.path.join(target, "release", "examples", "sim_throughput")
    out = subprocess.run([exe, str(args.steps)], cwd=ROOT, check=True, capture_output=True, text=True)
    rust = json.loads(out.stdout.strip().splitlines()[-1])

    mj, version = mujoco_steps_per_s(args.steps)

    cores = rust["cores"]
    print(f"scene: table + 2 free boxes + 3-DoF gripper, dt 2 ms, 10 substeps / 50 Hz control, 1 thread ({cores} cores seen)")
    print(f"{'measure':58} {'value':>12}")
    print(f"{'MuJoCo ' + version + ' physics steps/s':58} {mj:12.0f}")
    for key, label in [
        ("physics_steps_per_s_sleeping", "stagewise-sim physics steps/s (sleeping allowed)"),
        ("physics_steps_per_s_no_sleeping", "stagewise-sim physics steps/s (sleeping off)"),
    ]:
        print(f"{label:58} {rust[key]:12.0f}   ratio vs MuJoCo {rust[key] / mj:5.2f}x")
    r1 = rust["control_steps_per_s_3x96_1env"]
    rn = rust["control_steps_per_s_3x96_nenv"]
    print(f"{'control steps/s, no rendering, 1 env':58} {rust['control_steps_per_s_headless_1env']:12.0f}")
    print(f"{'control steps/s, no rendering, ' + str(rust['n_envs']) + ' envs':58} {rust['control_steps_per_s_headless_nenv']:12.0f}")
    print(f"{'control steps/s, 3 views 96x96, 1 env (1 core)':58} {r1:12.0f}   vs 200/core target {r1 / 200:5.2f}x")
    print(
        f"{'control steps/s, 3 views 96x96, ' + str(rust['n_envs']) + ' envs (' + str(cores) + ' cores)':58} {rn:12.0f}"
        f"   per core {rn / cores:6.0f} = {rn / cores / 200:5.2f}x target"
    )
    print(json.dumps({"mujoco_steps_per_s": mj, "mujoco_version": version, **rust,
                      "physics_ratio_sleeping": rust["physics_steps_per_s_sleeping"] / mj,
                      "physics_ratio_no_sleeping": rust["physics_steps_per_s_no_sleeping"] / mj}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
