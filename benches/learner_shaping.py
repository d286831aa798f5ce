#!/usr/bin/env python3
"""Shaped vs sparse: PPO success rate against environment steps on pick-place for three rewards served by
`stagewise serve` -- the sparse task reward, potential-based shaping with the shipped learned reward model, and
shaping with the simulator's oracle progress (the upper bound) -- over several seeds, with vectorised envs.

    .venv/bin/pip install -r benches/requirements-learner.txt      # matplotlib
    nice -n 10 .venv/bin/python benches/learner_shaping.py --steps 200000 --seeds 0,1,2 --envs 4

Writes <out>/curves.json (every finished training episode: env steps, success, final oracle progress, return),
<out>/learner_shaping.png and prints a summary table. Not part of CI (it takes hours at the full budget)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.vec_env import VecMonitor  # noqa: E402

from stagewise import launch  # noqa: E402
from stagewise.vec_env import StagewiseVecEnv  # noqa: E402

REWARDS = ["sparse", "model", "oracle"]


class EpisodeLog(BaseCallback):
    """Records (env steps so far, success, final oracle progress, episode return) for every finished episode."""

    def __init__(self):
        super().__init__()
        self.episodes = []

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"]):
            if done:
                ep = info.get("episode", {})
                self.episodes.append(
                    (int(self.num_timesteps), bool(info.get("is_success", False)),
                     float(info.get("progress_oracle") or 0.0), float(ep.get("r", float("nan"))))
                )
        return True


def one_run(reward: str, seed: int, a) -> dict:
    robot = f"bench-{reward}-{seed}"
    args = ["--task", "pick-place", "--reward", reward, "--envs", str(a.envs), "--robot", robot,
            "--gamma", str(a.gamma), "--max-steps", str(a.max_steps), "--seed", str(1000 * seed)]
    if reward == "model":
        args += ["--width", "32", "--height", "32"]
    log = os.path.join(a.out, f"serve-{reward}-{seed}.log")
    t0 = time.time()
    with launch.serve(*args, log=log) as srv:
        venv = VecMonitor(StagewiseVecEnv(a.envs, robot, connect=srv.endpoint, connect_timeout=120, gamma=a.gamma))
        venv.seed(seed)
        model = PPO("MlpPolicy", venv, n_steps=a.n_steps, batch_size=256, gamma=a.gamma, seed=seed,
                    device="cpu", verbose=0)
        cb = EpisodeLog()
        model.learn(total_timesteps=a.steps, callback=cb)
        venv.close()
    wall = time.time() - t0
    eps = cb.episodes
    print(f"{reward:>6} seed {seed}: {a.steps} steps in {wall:.0f} s, {len(eps)} episodes, "
          f"success {np.mean([e[1] for e in eps]) if eps else float('nan'):.1%} overall, "
          f"final oracle progress (last 20 eps) {np.mean([e[2] for e in eps[-20:]]) if eps else float('nan'):.3f}",
          flush=True)
    return {"reward": reward, "seed": seed, "steps": a.steps, "wall_s": wall, "episodes": eps}


def curve(eps, steps, bins, idx):
    """Mean of field `idx` over the episodes that ended in each bin of env steps (nan where none ended)."""
    edges = np.linspace(0, steps, bins + 1)
    out = np.full(bins, np.nan)
    t = np.array([e[0] for e in eps])
    v = np.array([float(e[idx]) for e in eps])
    for b in range(bins):
        m = (t > edges[b]) & (t <= edges[b + 1])
        if m.any():
            out[b] = v[m].mean()
    return edges[1:], out


def plot(runs, a, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"sparse": "tab:gray", "model": "tab:blue", "oracle": "tab:green"}
    for reward in REWARDS:
        rs = [r for r in runs if r["reward"] == reward]
        if not rs:
            continue
        for ax, idx, label in ((axes[0], 1, "success rate"), (axes[1], 2, "final oracle progress")):
            ys = []
            for r in rs:
                x, y = curve(r["episodes"], a.steps, a.bins, idx)
                ys.append(y)
                ax.plot(x, y, color=colors[reward], alpha=0.25, lw=1)
            with np.errstate(all="ignore"):
                mean = np.nanmean(np.array(ys), axis=0)
            ax.plot(x, mean, color=colors[reward], lw=2, label=f"{reward} ({len(rs)} seeds)")
            ax.set_xlabel("env steps")
            ax.set_ylabel(label)
    axes[0].set_ylim(-0.02, 1.02)
    axes[1].set_ylim(-0.02, 1.02)
    axes[0].legend()
    fig.suptitle(f"PPO on pick-place via stagewise serve: {a.steps} steps/run, {a.envs} envs, gamma {a.gamma}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    torch.set_num_threads(1)  # a 64x64 MLP: more threads only add overhead
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200_000, help="env steps per run (all envs together)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--rewards", default=",".join(REWARDS))
    ap.add_argument("--envs", type=int, default=4)
    ap.add_argument("--n-steps", type=int, default=256, help="PPO rollout length per env")
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--max-steps", type=int, default=200, help="episode length limit")
    ap.add_argument("--bins", type=int, default=10)
    ap.add_argument("--out", default="benches/results/learner_shaping")
    ap.add_argument("--plot-only", action="store_true", help="re-plot <out>/curves.json")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    curves = os.path.join(a.out, "curves.json")
    if a.plot_only:
        runs = json.load(open(curves))["runs"]
    else:
        runs = []
        t0 = time.time()
        for seed in [int(s) for s in a.seeds.split(",")]:
            for reward in a.rewards.split(","):
                runs.append(one_run(reward, seed, a))
                json.dump({"args": vars(a), "runs": runs, "wall_s": time.time() - t0}, open(curves, "w"))
        print(f"total wall time {time.time() - t0:.0f} s")
    plot(runs, a, os.path.join(a.out, "learner_shaping.png"))
    print("reward  seeds  success(last 20% of steps)  final-progress(last 20%)  wall s/run")
    for reward in REWARDS:
        rs = [r for r in runs if r["reward"] == reward]
        if not rs:
            continue
        late = [e for r in rs for e in r["episodes"] if e[0] > 0.8 * a.steps]
        print(f"{reward:>6}  {len(rs):>5}  {np.mean([e[1] for e in late]) if late else float('nan'):>26.1%}"
              f"  {np.mean([e[2] for e in late]) if late else float('nan'):>24.3f}"
              f"  {np.mean([r['wall_s'] for r in rs]):>10.0f}")


if __name__ == "__main__":
    main()
