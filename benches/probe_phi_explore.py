"""Probe: how does a served reward model read the states an RL explorer visits? (benches/learner_shaping.md)

    STAGEWISE_BIN=target/release/stagewise .venv/bin/python benches/probe_phi_explore.py \
        [--model models/push-target/push-target-progress.toml] [--task push-target] [--episodes 10]

Rolls `--episodes` episodes of uniformly random actions, each held `--hold` env steps (what TD3's first
`--random-steps` and an untrained actor do), through `stagewise serve --reward model` (the model's phi per step)
and compares the model's phi with the simulator's oracle progress on the same frames: means, correlation, and
the per-step changes that potential shaping rewards.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from learner_shaping import one_model_env, reset  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="push-target")
    ap.add_argument("--model", default="", help="reward model manifest (default: the task's shipped model)")
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--hold", type=int, default=4, help="env steps each random action is held")
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=8_000_000, help="first episode seed (episode i: seed + i)")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    with one_model_env(a.task, a.model, a.max_steps, f"probe-phi-{os.getpid()}") as env:
        model, oracle, ep_of = [], [], []
        for ep in range(a.episodes):
            reset(env, a.seed + ep)
            t = 0
            while True:
                if t % a.hold == 0:
                    act = rng.uniform(-1, 1, len(env.spec_msg["action"]["low"])).astype(np.float32)
                _, _, term, trunc, info = env.step(act)
                t += 1
                model.append(float(info["phi"]))
                oracle.append(float(info.get("progress_oracle") or 0.0))
                ep_of.append(ep)
                if term or trunc:
                    break
    p, o, e = np.array(model), np.array(oracle), np.array(ep_of)
    same = e[1:] == e[:-1]  # steps within one episode
    dp, do = np.diff(p)[same], np.diff(o)[same]
    print(f"{a.task}, {a.model or 'shipped model'}: {len(p)} frames of random play ({a.episodes} episodes, "
          f"actions held {a.hold} steps)")
    print(f"  oracle phi: mean {o.mean():.3f}, max {o.max():.3f}")
    print(f"  model phi:  mean {p.mean():.3f}, p90 {np.percentile(p, 90):.3f}, max {p.max():.3f}; "
          f"MAE {np.abs(p - o).mean():.3f}, correlation {np.corrcoef(p, o)[0, 1]:.2f}")
    print(f"  per-step change: oracle std {do.std():.4f}, model std {dp.std():.4f} ({dp.std() / max(do.std(), 1e-9):.0f}x), "
          f"correlation {np.corrcoef(dp, do)[0, 1]:.2f}")


if __name__ == "__main__":
    main()
