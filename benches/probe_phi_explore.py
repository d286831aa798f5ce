"""Probe: how does a served reward model read the states an RL explorer visits? (docs/lab/learner_shaping.md)

    STAGEWISE_BIN=target/release/stagewise .venv/bin/python benches/probe_phi_explore.py \
        [--model models/push-target/push-target-progress.toml] [--task push-target] [--episodes 10] \
        [--policy LEARNER_CHECKPOINT.toml]

Rolls `--episodes` episodes of uniformly random actions, each held `--hold` env steps (what TD3's first
`--random-steps` and an untrained actor do), or with `--policy` a policy's deterministic actions (held as its graph
says), through `stagewise serve --reward model` (the model's phi per step) and compares the model's phi with the
simulator's oracle progress on the same frames: means, correlation, the per-step changes that potential shaping
rewards, and the model's reading per band of oracle progress (a flat reading across bands is a stretch where the
reward gives a learner nothing to climb).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stagewise.rl.envs import one_model_env, reset  # noqa: E402
from probe_release import policy  # noqa: E402

BANDS = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 1.01)  # oracle progress bands of the per-band table


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="push-target")
    ap.add_argument("--model", default="", help="reward model manifest (default: the task's shipped model)")
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--hold", type=int, default=4, help="env steps each random action is held")
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=8_000_000, help="first episode seed (episode i: seed + i)")
    ap.add_argument("--policy", default="", help="a policy manifest (.toml) to roll instead of random play")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    act, hold = policy(a.policy) if a.policy else (None, a.hold)
    successes = 0
    at_success = []  # (model phi at the success frame, model phi 10 steps before) per successful episode
    with one_model_env(a.task, a.model, a.max_steps, f"probe-phi-{os.getpid()}") as env:
        model, oracle, ep_of = [], [], []
        for ep in range(a.episodes):
            obs, _ = reset(env, a.seed + ep)
            t = 0
            while True:
                if t % hold == 0:
                    if act is None:
                        action = rng.uniform(-1, 1, len(env.spec_msg["action"]["low"])).astype(np.float32)
                    else:
                        action = np.asarray(act(obs), np.float32)
                obs, _, term, trunc, info = env.step(action)
                t += 1
                model.append(float(info["phi"]))
                oracle.append(float(info.get("progress_oracle") or 0.0))
                ep_of.append(ep)
                if term or trunc:
                    if info.get("success"):
                        successes += 1
                        at_success.append((model[-1], model[-11] if t > 10 else model[-t]))
                    break
    p, o, e = np.array(model), np.array(oracle), np.array(ep_of)
    same = e[1:] == e[:-1]  # steps within one episode
    dp, do = np.diff(p)[same], np.diff(o)[same]
    what = f"policy {a.policy} ({successes} succeeded)" if a.policy else f"random play (actions held {a.hold} steps)"
    print(f"{a.task}, {a.model or 'shipped model'}: {len(p)} frames of {what}, {a.episodes} episodes")
    print(f"  oracle phi: mean {o.mean():.3f}, max {o.max():.3f}")
    print(f"  model phi:  mean {p.mean():.3f}, p90 {np.percentile(p, 90):.3f}, max {p.max():.3f}; "
          f"MAE {np.abs(p - o).mean():.3f}, correlation {np.corrcoef(p, o)[0, 1]:.2f}")
    print(f"  per-step change: oracle std {do.std():.4f}, model std {dp.std():.4f} ({dp.std() / max(do.std(), 1e-9):.0f}x), "
          f"correlation {np.corrcoef(dp, do)[0, 1]:.2f}")
    if at_success:
        s = np.array(at_success)
        # progress form: the release that ends the task pays c (phi at success - phi before); a low reading here
        # makes finishing cost reward
        print(f"  at the success frame ({len(s)} episodes): model phi mean {s[:, 0].mean():.3f} (min {s[:, 0].min():.3f});"
              f" 10 steps before: {s[:, 1].mean():.3f}")
    print("  model phi per band of oracle progress:")
    for lo, hi in zip(BANDS[:-1], BANDS[1:]):
        m = (o >= lo) & (o < hi)
        if m.any():
            print(f"    oracle [{lo:.2f}, {min(hi, 1.0):.2f}{')' if hi < 1 else ']'}: {m.sum():5d} frames, model mean "
                  f"{p[m].mean():.3f} (sd {p[m].std():.3f}), MAE {np.abs(p[m] - o[m]).mean():.3f}")


if __name__ == "__main__":
    main()
