#!/usr/bin/env python3
"""PPO (Stable-Baselines3) on pick-place through StagewiseEnv, once with the shaped progress reward and once with
the sparse task reward; exports each policy to ONNX and pushes the shaped one to a running `stagewise run`,
which then executes it.

    cargo build                      # or set STAGEWISE_BIN
    .venv/bin/python python/examples/ppo_pick_place.py --steps 20000 --envs 4

Everything runs on loopback: the script starts `stagewise serve` (one per reward) and `stagewise run` itself
on free 127.0.0.1 ports with multicast scouting off."""

from __future__ import annotations

import argparse
import os
import signal
import time

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecMonitor

from stagewise import launch, publish_policy
from stagewise.export import sb3_policy_to_onnx
from stagewise.vec_env import StagewiseVecEnv


def serve_args(reward: str, envs: int, gamma: float, max_steps: int, robot: str) -> list:
    args = ["--task", "pick-place", "--reward", reward, "--envs", str(envs), "--robot-name", robot,
            "--gamma", str(gamma), "--max-steps", str(max_steps)]
    if reward == "model":
        args += ["--width", "32", "--height", "32"]  # the shipped reward model reads 32x32 frames
    return args


def train(reward: str, steps: int, envs: int, seed: int, gamma: float, max_steps: int, out: str):
    robot = f"ppo-{reward}"
    with launch.serve(*serve_args(reward, envs, gamma, max_steps, robot), log=os.path.join(out, f"serve-{reward}.log")) as srv:
        venv = VecMonitor(StagewiseVecEnv(envs, robot, connect=srv.endpoint, connect_timeout=60, gamma=gamma))
        venv.seed(seed)
        model = PPO("MlpPolicy", venv, n_steps=256, batch_size=256, gamma=gamma, seed=seed, device="cpu", verbose=0)
        t0 = time.time()
        model.learn(total_timesteps=steps)
        wall = time.time() - t0
        # PPO keeps the `is_success` of the last 100 finished episodes (StagewiseEnv's info carries it).
        rate = float(np.mean(model.ep_success_buffer)) if len(model.ep_success_buffer) else float("nan")
        venv.close()
    path = os.path.join(out, f"ppo-{reward}.onnx")
    with open(path, "wb") as f:
        f.write(sb3_policy_to_onnx(model))
    print(f"{reward:>6}: {steps} env steps in {wall:.0f} s ({steps / wall:.0f} steps/s), "
          f"success over the last {len(model.ep_success_buffer)} training episodes {rate:.0%}; policy -> {path}")
    return path


def push_and_run(path: str, out: str, version: int = 2) -> None:
    log = os.path.join(out, "run.log")
    with launch.run("--task", "pick-place", "--robot-name", "ppo-run", "--policy", "random", "--reward", "oracle",
                    "--envs", "1", "--episodes", "0", "--log-file", os.path.join(out, "run.swlog"), log=log) as actor:
        publish_policy(path, version, robot="ppo-run", connect=actor.endpoint, wait=60)
        if not launch.wait_for_output(actor, f"learner policy v{version}", 60):
            raise SystemExit(f"stagewise run did not take the policy; its output:\n{actor.output()}")
        time.sleep(5)  # let it run episodes with the pushed policy
        actor.proc.send_signal(signal.SIGINT)
        actor.wait(60)
        print("stagewise run with the pushed policy:")
        for line in actor.output().splitlines():
            if "accepted" in line or "episodes," in line:
                print("   ", line.strip())


def main() -> None:
    torch.set_num_threads(1)  # a 64x64 MLP: more threads only add overhead
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20_000, help="env steps per training run")
    ap.add_argument("--envs", type=int, default=4, help="served envs stepped together")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gamma", type=float, default=0.99, help="PPO's discount; the server shapes with it too")
    ap.add_argument("--max-steps", type=int, default=200, help="episode length limit")
    ap.add_argument("--rewards", default="model,sparse", help="comma list of sparse, model, oracle")
    ap.add_argument("--out", default="out/ppo-example")
    ap.add_argument("--no-push", action="store_true", help="do not push the first policy to `stagewise run`")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    paths = [train(r, a.steps, a.envs, a.seed, a.gamma, a.max_steps, a.out) for r in a.rewards.split(",")]
    if not a.no_push:
        push_and_run(paths[0], a.out)


if __name__ == "__main__":
    main()
