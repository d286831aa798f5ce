"""Probe: what does a pick-place reward read when a learner's policy lets go of the block over the target?
(docs/lab/learner_shaping.md, "Pick-place: what a learner's release reads as, and gripper flips")

    STAGEWISE_BIN=target/release/stagewise .venv/bin/python benches/probe_release.py POLICY.toml \
        [--model models/pick-place/pick-place-progress.toml] [--episodes 20] [--after 2]

Rolls the policy (an exported learner checkpoint, its actions held as its graph says) through `stagewise serve
--reward model`, twice per seed: as it is, and with a forced release: once the simulator's stage has been `place`
for `--after` decisions, the gripper is opened (and the arm stays, then rises) for the rest of the episode. Prints
success for both, and around the release the served model's phi next to the oracle's progress: a model that
reads a released block as a regression charges the learner for letting go, which the oracle would not.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stagewise.rl.envs import one_model_env, reset  # noqa: E402

PLACE = 4  # the oracle's pick-place stage index of `place` (sim/src/oracle.rs)


def policy(path: str):
    """The policy manifest's ONNX graph as a function state -> action, and its action repeat."""
    with open(path, "rb") as f:
        onnx = os.path.join(os.path.dirname(path), tomllib.load(f)["onnx"])
    sess = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
    repeat = int(sess.get_modelmeta().custom_metadata_map.get("stagewise.action_repeat", "1"))
    name = sess.get_inputs()[0].name
    return (lambda s: sess.run(None, {name: np.asarray(s, np.float32)[None]})[0][0]), repeat


def rollout(env, act, repeat, seed, release_after):
    """One episode; release_after < 0: the policy as is. Returns success and per-step (oracle stage, oracle
    progress, model phi, released)."""
    obs, info = reset(env, seed)
    trace, in_place, released, t, a = [], 0, False, 0, None
    while True:
        if t % repeat == 0:
            a = np.array(act(obs), np.float32)
            if release_after >= 0:
                in_place = in_place + 1 if info.get("stage") == PLACE else 0
                released = released or in_place > release_after
            if released:
                a[:3] = 0.0
                a[3] = 1.0
                if trace and sum(r[3] for r in trace) >= 2 * repeat:  # open first, then rise
                    a[2] = 1.0
        obs, _, term, trunc, info = env.step(a)
        t += 1
        trace.append((info.get("stage"), float(info.get("progress_oracle") or 0.0), float(info["phi"]), released))
        if term or trunc:
            return bool(info.get("success")), trace


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("policy", help="policy manifest (.toml) of a pick-place learner checkpoint")
    ap.add_argument("--model", default="", help="reward model manifest (default: the shipped pick-place model)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--after", type=int, default=2, help="decisions in the place stage before the forced release")
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=7_600_000, help="first episode seed (episode i: seed + i)")
    a = ap.parse_args()
    act, repeat = policy(a.policy)
    with one_model_env("pick-place", a.model, a.max_steps, f"probe-release-{os.getpid()}") as env:
        plain, forced, dips = [], [], []
        for ep in range(a.episodes):
            ok, _ = rollout(env, act, repeat, a.seed + ep, -1)
            plain.append(ok)
            ok, tr = rollout(env, act, repeat, a.seed + ep, a.after)
            forced.append(ok)
            first = next((i for i, r in enumerate(tr) if r[3]), None)
            if first is None:
                print(f"  seed {a.seed + ep}: never {a.after + 1} decisions in the place stage (no release "
                      f"forced); as is {plain[-1]}")
                continue
            before = tr[max(first - 1, 0)]
            window = tr[first:first + 6 * repeat]
            lo_model = min(r[2] for r in window)
            lo_oracle = min(r[1] for r in window)
            end = tr[-1]
            dips.append((before[2] - lo_model, before[1] - lo_oracle, end[2] - before[2], end[1] - before[1]))
            print(f"  seed {a.seed + ep}: as is {plain[-1]!s:5} | released at step {first}: {ok!s:5}  "
                  f"model phi {before[2]:.2f} -> min {lo_model:.2f} -> end {end[2]:.2f} | "
                  f"oracle {before[1]:.2f} -> min {lo_oracle:.2f} -> end {end[1]:.2f} (stage {end[0]})")
    d = np.array(dips) if dips else np.zeros((1, 4))
    print(f"{a.policy}: as is {sum(plain)}/{len(plain)} succeed; forced release {sum(forced)}/{len(forced)} "
          f"({len(dips)} reached the place stage)")
    print(f"  within {6 * repeat} steps of the release: model phi dips {d[:, 0].mean():.2f} on average "
          f"(max {d[:, 0].max():.2f}), oracle {d[:, 1].mean():.2f} (max {d[:, 1].max():.2f}); "
          f"episode end minus before: model {d[:, 2].mean():+.2f}, oracle {d[:, 3].mean():+.2f}")


if __name__ == "__main__":
    main()
