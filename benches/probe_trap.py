#!/usr/bin/env python3
"""Where a push-target policy ends its episodes with the semantic trap on (docs/lab/2026-12-06-invariant-shaping.md):
per episode the final hand height, the progress the trapped oracle reads there, the clean oracle's and success.

    STAGEWISE_BIN=target/debug/stagewise .venv/bin/python benches/probe_trap.py POLICY.onnx [--trap 0.22:1.0] [--episodes 10]
"""

import argparse

import gymnasium as gym
import numpy as np
import onnxruntime as ort

import stagewise  # noqa: F401  (registers the gymnasium ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("policy")
    ap.add_argument("--trap", default="0.22:1.0")
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7400000)
    ap.add_argument("--repeat", type=int, default=4, help="env steps each action is held (the policy's)")
    a = ap.parse_args()
    sess = ort.InferenceSession(a.policy, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    env = gym.make("stagewise/PushTarget-v0", reward="oracle", serve_args=["--oracle-trap", a.trap],
                   max_episode_steps=200)
    zs, trapped, clean, wins = [], [], [], 0
    for i in range(a.episodes):
        obs, _ = env.reset(seed=a.seed + i)
        done, t, info = False, 0, {}
        while not done:
            if t % a.repeat == 0:
                act = sess.run(None, {name: obs[None].astype(np.float32)})[0][0]
            obs, _, term, trunc, info = env.step(act)
            done, t = term or trunc, t + 1
        zs.append(float(obs[2]))
        trapped.append(float(info.get("phi", np.nan)))
        clean.append(float(info.get("progress_oracle") or 0.0))
        wins += bool(info.get("success"))
    env.close()
    print(f"{a.policy}: success {wins}/{a.episodes}; final hand z mean {np.mean(zs):.3f} m (min {min(zs):.3f}); "
          f"served phi at the end {np.mean(trapped):.2f}; trapped oracle progress {np.mean(clean):.2f}")


if __name__ == "__main__":
    main()
