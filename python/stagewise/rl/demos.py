"""Expert demonstrations: recorded once by `stagewise record --degraded 0` (the scripted expert), read from the
LeRobot dataset, and replayed through the training server so that every demo transition carries the reward this
server serves (the same model, form, c and gamma as the online steps)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np

from .. import launch
from .agent import NStep, Replay
from .config import LearnConfig
from .envs import learner_reward, uses_advice


def record_demos(cfg: LearnConfig, where: str) -> str:
    """The demonstrations' dataset directory under `where`, recorded on first use (beside it, then renamed: two
    runs sharing a directory never read a half-written set)."""
    path = os.path.join(where, f"demos-{cfg.task}-{cfg.demos}-{cfg.demo_seed}")
    if not os.path.isdir(os.path.join(path, "data")):
        tmp = f"{path}.tmp{os.getpid()}"
        cmd = [launch.find_binary(), "record", "--task", cfg.task, "--episodes", str(cfg.demos), "--degraded", "0",
               "--seed", str(cfg.demo_seed), "--width", "16", "--height", "16", "--threads", "1", "--out", tmp]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        try:
            os.rename(tmp, path)
        except OSError:  # another run finished the same (deterministic) recording first
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def read_demos(path: str):
    """[(seed, states [T+1, S], actions [T, A])] from a `stagewise record` dataset."""
    import pyarrow.parquet as pq

    with open(os.path.join(path, "meta", "stagewise_record.json")) as fh:
        meta = json.load(fh)
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(path, "data")) for f in fs
                   if f.endswith(".parquet"))
    cols = ["observation.state", "action", "episode_index", "frame_index"]
    ep, st, ac, fr = [], [], [], []
    for f in files:
        t = pq.read_table(f, columns=cols)
        ep += t.column("episode_index").to_pylist()
        fr += t.column("frame_index").to_pylist()
        st += t.column("observation.state").to_pylist()
        ac += t.column("action").to_pylist()
    ep, fr = np.array(ep), np.array(fr)
    st, ac = np.array(st, np.float32), np.array(ac, np.float32)
    out = []
    for e in meta["episodes"]:
        m = ep == e["episode_index"]
        order = np.argsort(fr[m])
        # frame t is the state after t actions; the last frame is the final state (its action is unused)
        out.append((int(e["seed"]), st[m][order], ac[m][order][:-1]))
    return out


def replay_demos(env, demos, cfg: LearnConfig, out: Replay, reset) -> dict:
    """Replays each demonstration's actions after reset(seed) on a training env: the simulator is deterministic,
    so this reproduces the recorded states, and each transition gets the served reward. Stored as n-step
    transitions of `action_repeat`-step decisions."""
    gamma, k_rep, advice = cfg.reward_form.gamma, cfg.action_repeat, uses_advice(cfg)
    # With --episode-ends model the served episode ends where the model detects success, which need not be where
    # the demonstration (recorded to the simulator's success) stops: the replay ends at whichever comes first, a
    # demonstration's end without a detection cut there and bootstrapped (no success label is added).
    model_ends = cfg.episode_ends == "model"
    returns, n, truncated, detected = [], 0, 0, 0
    for seed, states, actions in demos:
        o, info = reset(env, seed)
        if not np.allclose(env.last_state, states[0], atol=1e-5):
            raise RuntimeError(f"demo seed {seed}: the served reset state differs from the recorded one")
        ns, ret = NStep(cfg.nstep, gamma), 0.0
        chunk, o0 = [], o
        for k, act in enumerate(actions):
            o2, r, term, trunc, info = env.step(act)
            cut = model_ends and k + 1 == len(actions) and not (term or trunc)
            if not np.allclose(env.last_state, states[k + 1], atol=1e-4):
                raise RuntimeError(f"demo seed {seed}: the served state after step {k + 1} differs from the recorded "
                                   "one (simulator not deterministic?)")
            chunk.append((act, learner_reward(r, info, advice)))
            if len(chunk) == k_rep or term or trunc or cut:
                # one decision: labelled with the chunk's mean action (the expert commands velocities, so the mean
                # reproduces the chunk's displacement; exact for k = 1)
                r_k = sum(gamma ** j * x for j, (_, x) in enumerate(chunk))
                ns.push(o0, np.mean([x for x, _ in chunk], 0), r_k, o2, term, term or trunc or cut, out,
                        g=gamma ** len(chunk), adv=float(info.get("phi") or 0.0) if advice else 0.0)
                chunk, o0 = [], o2
            ret, n = ret + r, n + 1
            if term or trunc:
                break
        if trunc and not term:
            truncated += 1  # longer than max_steps: its prefix, bootstrapped like any truncated episode
        elif model_ends:
            detected += int(term)
        elif not (info["success"] and k + 1 == len(actions)):
            raise RuntimeError(f"demo seed {seed}: the replay ended at step {k + 1}/{len(actions)} with success="
                               f"{info['success']}")
        returns.append(ret)
    return {"episodes": len(demos), "transitions": n, "truncated": truncated,
            "mean_return": float(np.mean(returns)) if returns else 0.0,
            **({"detected": detected} if model_ends else {})}
