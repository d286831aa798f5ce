#!/usr/bin/env python3
"""Rewards that teach: an off-policy learner through `stagewise serve`, evaluated success against env steps for
the sparse reward, the learned-model shaping and the oracle shaping (issue 17).

    (matplotlib for the curves comes with scripts/setup.sh)
    STAGEWISE_BIN=target/release/stagewise nice -n 10 .venv/bin/python benches/learner_shaping.py \
        --task push-target --rewards sparse,model,oracle --seeds 0,1,2 --steps 150000 \
        --out benches/results/learner_shaping_push

One run = one reward condition x one seed:

1. `stagewise serve --task T --reward R --shaping-scale c --gamma g --max-steps M --envs N` serves the training
   envs (R = sparse, model: the shipped pixel-and-proprioception progress model, oracle: the simulator's
   ground-truth progress); a second `stagewise serve --reward sparse --envs E` serves the evaluation envs (no
   rendering: evaluation needs the task's success only).
2. The reward learned from is the served one, with the potential phi - `--phi-offset` (default 1: potential 0 at
   the goal) instead of phi: `r_task + c (gamma (phi' - 1) - (phi - 1))`, terminal potential 0. Still
   potential-based, so the optimal policy is the task's (see `offset_reward`). `--reward-form progress`
   (r_task + c (phi' - phi)) is NOT policy-invariant and only there to be measured against; it is the served
   potential part plus a level c (1 - gamma) phi', and `--potential-scale S` scales only the potential part (the
   same optimal policy for every S; a learned phi's per-step noise is paid S times).
3. The learner (defaults: the set-up of benches/learner_shaping.md, 2026-12-04: TD3, 128x128, each action held 4
   env steps, 2 critic updates per decision, gamma 0.99, every sampled transition mapped by a random symmetry of the
   square about the block, `Symmetry`) is a small SAC / TD3 in plain torch (learner_agent.py; SB3's per-update
   overhead made it 3-5x slower here): a tanh-Gaussian (SAC) or deterministic (TD3) actor and an ensemble of
   LayerNorm critics (RLPD), n-step returns, `--utd` critic updates per decision, one actor update every
   `--actor-every` critic updates, SAC's entropy coefficient tuned toward `-|A| * --target-entropy`.
   Inputs: the simulator's full state (the policy may read it: an asymmetric actor; the reward model may not, and
   does not: it is served from pixels + gripper width), through a fixed linear feature map (the state scaled to
   O(1), plus block-minus-gripper and target-minus-block offsets) that the exported ONNX policy carries.
   Truncation (the time limit) bootstraps; termination (success or failure) does not.
4. Every `--eval-every` env steps (and at 0): the current policy, deterministic (tanh of the mean), on
   `--eval-episodes` held-out seeds (`--eval-seed` + i, the same at every checkpoint, never trained on):
   success rate, mean final oracle progress, mean episode length.

Writes <out>/curves.json (args, per run: checkpoints, wall times, training-episode summary), <out>/curves.png,
and per run the best and the last actor as ONNX policies (<out>/policies/<task>-<reward>-<seed>-{best,last}.onnx;
`stagewise eval policy` takes the manifest written beside them; `--export-checkpoints`: every checkpoint's too).
`--smoke` is the CI-sized run (python/tests/test_learner_smoke.py); `--merge DIR...` plots runs made apart."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import sys
import time
from typing import List

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "python"))

from stagewise import launch  # noqa: E402
from stagewise.env import StagewiseEnv  # noqa: E402
from stagewise.errors import NoRuntimeError  # noqa: E402
from stagewise.session import open_session  # noqa: E402
from stagewise.vec_env import robot_names  # noqa: E402

sys.path.insert(0, HERE)
from learner_agent import SAC, GripperFlip, NStep, Replay, Symmetry, export_onnx, sample  # noqa: E402

COLORS = {"sparse": "tab:gray", "model": "tab:blue", "oracle": "tab:green"}


# --------------------------------------------------------------------------------------------- demonstrations
def record_demos(a) -> str:
    """`stagewise record --degraded 0` (the scripted expert, every episode successful) once per (task, count,
    seed); reused by later runs."""
    import subprocess

    path = os.path.join(a.demo_dir or a.out, f"demos-{a.task}-{a.demos}-{a.demo_seed}")
    if not os.path.isdir(os.path.join(path, "data")):
        # recorded beside it and renamed when complete: two runs sharing --demo-dir never read a half-written set
        tmp = f"{path}.tmp{os.getpid()}"
        cmd = [launch.find_binary(), "record", "--task", a.task, "--episodes", str(a.demos), "--degraded", "0",
               "--seed", str(a.demo_seed), "--width", "16", "--height", "16", "--threads", "1", "--out", tmp]
        subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        try:
            os.rename(tmp, path)
        except OSError:  # another run finished the same (deterministic) recording first
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def read_demos(path: str):
    """[(seed, states [T+1, S], actions [T, A])] from a `stagewise record` dataset."""
    import pyarrow.parquet as pq

    meta = json.load(open(os.path.join(path, "meta", "stagewise_record.json")))
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


def replay_demos(env: StagewiseEnv, demos, a, reward, out: "Replay") -> dict:
    """Replays each demonstration's actions after reset(seed) on a training env: the simulator is deterministic,
    so this reproduces the recorded states, and every demo transition carries the reward *this server* serves
    (sparse, or shaped with the same model, c and gamma as the online steps). Stored as n-step transitions."""
    returns, n, truncated = [], 0, 0
    for seed, states, actions in demos:
        o, info = reset(env, seed)
        if not np.allclose(o, states[0], atol=1e-5):
            raise RuntimeError(f"demo seed {seed}: the served reset state differs from the recorded one")
        ns, ret, lr = NStep(a.nstep, a.gamma), 0.0, LearnReward(a, reward)
        lr.reset(info)
        chunk, o0 = [], o
        for k, act in enumerate(actions):
            o2, r, term, trunc, info = env.step(act)
            if not np.allclose(o2, states[k + 1], atol=1e-4):
                raise RuntimeError(f"demo seed {seed}: the served state after step {k + 1} differs from the recorded "
                                   "one (simulator not deterministic?)")
            rl = lr(r, term, info)
            chunk.append((act, rl))
            if len(chunk) == a.action_repeat or term or trunc:
                # one decision of --action-repeat env steps: labelled with the chunk's mean action (the expert
                # commands velocities, so the mean reproduces the chunk's displacement; exact for k = 1)
                r_k = sum(a.gamma ** j * x for j, (_, x) in enumerate(chunk))
                ns.push(o0, np.mean([x for x, _ in chunk], 0), r_k, o2, term, term or trunc, out,
                        g=a.gamma ** len(chunk))
                chunk, o0 = [], o2
            ret, n = ret + rl, n + 1
            if term or trunc:
                break
        if trunc and not term:
            truncated += 1  # longer than --max-steps: its prefix, bootstrapped like any truncated episode
        elif not (info["success"] and k + 1 == len(actions)):
            raise RuntimeError(f"demo seed {seed}: the replay ended at step {k + 1}/{len(actions)} with success="
                               f"{info['success']}")
        returns.append(ret)
    return {"episodes": len(demos), "transitions": n, "truncated": truncated, "mean_return": float(np.mean(returns)) if returns else 0.0}


# ------------------------------------------------------------------------------------------------- rewards
def offset_reward(r, terminated, a, reward):
    """The served shaped reward with the potential phi - X (X = --phi-offset) instead of phi: served
    r_task + c (gamma phi' - phi) (phi' = 0 when terminated) plus c X (1 - gamma) on a non-terminal step and c X on
    a terminated one. Still potential-based (terminal potential 0), so the optimal policy is unchanged; it moves
    the shaping's -c phi "bill" from the success step (served: ~1 - c) to the first step. Sparse: unchanged."""
    if reward == "sparse" or a.phi_offset == 0:
        return r
    return r + a.phi_offset * a.shaping_scale * (1.0 if terminated else 1.0 - a.gamma)


def progress_reward(r, terminated, phi_next, a, reward, task):
    """`--reward-form progress`, NOT policy-invariant: r_task + c (phi' - phi) with the terminal state keeping
    its potential, from the served reward: + c (1 - gamma) phi' (non-terminal), + c phi' (terminated).

    That is the served potential-based part c (gamma phi' - phi) plus a level c (1 - gamma) phi' (c phi' at the
    end). Only the level moves the optimal policy; the potential part only speeds learning and pays the model's
    per-step noise in full. `--potential-scale S` keeps the level and scales the potential part (S = 1: the plain
    progress form), so every S has the same optimal policy: r_task + S c (gamma phi' - phi) + level. `task` is the
    served step's task reward (what the potential part is measured from)."""
    if reward == "sparse":
        return r
    level = a.shaping_scale * phi_next * (1.0 if terminated else 1.0 - a.gamma)
    return task + a.potential_scale * (r - task) + level


def exp_potential(phi, a):
    """`--reward-form exp`: Phi(s) = gamma^(H (1 - phi(s))), H = --horizon (steps an expert needs). Where progress
    advances at the expert's pace this is the optimal value of the task reward (1 at success, discounted), the
    potential that Ng et al. (1999) name ideal: the critic then starts at the task's value scale (c = 1) instead of
    having to learn a large c * phi term and its noise."""
    return a.gamma ** (a.horizon * (1.0 - min(max(phi, 0.0), 1.0)))


class LearnReward:
    """The reward learned from, per env, from each served step (the served reward, task reward and phi').

    `potential` (the default): the served r_task + c (gamma phi' - phi) re-expressed with the potential phi - X
    (`offset_reward`); `exp`: r_task + c (gamma Phi(s') - Phi(s)), Phi = `exp_potential`, terminal potential 0 (also
    policy-invariant); `progress` (NOT policy-invariant): `progress_reward`. Sparse: the served task reward.
    Every shaped step checks the served reward against the phi cached here (a wrong cache is an error)."""

    def __init__(self, a, reward):
        self.a, self.reward, self.phi = a, reward, None

    def reset(self, info):
        self.phi = info.get("phi")
        self.psi = self.phi  # --phi-ema's smoothed potential

    def __call__(self, r, terminated, info):
        a = self.a
        if self.reward == "sparse":
            return r
        phi_next = float(info["phi"])
        task = float(info["task_reward"])
        served = task + a.shaping_scale * (a.gamma * (0.0 if terminated else phi_next) - self.phi)
        if abs(served - r) > 1e-4 * max(1.0, abs(r)):
            raise RuntimeError(f"served reward {r} != r_task + c (gamma phi' - phi) = {served} with the cached phi "
                               f"{self.phi} (is the server's --gamma/--shaping-scale {a.gamma}/{a.shaping_scale}?)")
        if a.reward_form == "exp":
            nxt = 0.0 if terminated else exp_potential(phi_next, a)
            out = task + a.shaping_scale * (a.gamma * nxt - exp_potential(self.phi, a))
        elif a.reward_form == "progress":
            # --success-progress-one: the task says it is done, progress 1 by definition, not the model's reading
            finished = a.success_progress_one and terminated and info.get("success")
            out = progress_reward(r, terminated, 1.0 if finished else phi_next, a, self.reward, task)
        elif a.phi_ema > 0:
            # NOT policy-invariant in the env's state: the potential is an EMA of the served phi over the episode
            # (a function of the history, not of the state), terminal potential 0, the --phi-offset term as above.
            psi_next = a.phi_ema * self.psi + (1.0 - a.phi_ema) * phi_next
            out = task + a.shaping_scale * (a.gamma * (0.0 if terminated else psi_next) - self.psi)
            out = offset_reward(out, terminated, a, self.reward)
            self.psi = psi_next
        else:
            out = offset_reward(r, terminated, a, self.reward)
        self.phi = phi_next
        return out


# ---------------------------------------------------------------------------------------------- envs, eval
class Envs:
    """The N envs of one `stagewise serve --envs N`, stepped concurrently (all queries out, then the replies)."""

    def __init__(self, endpoint, robot, n, gamma):
        self.session = open_session(endpoint)
        self.envs = [StagewiseEnv(r, session=self.session, connect_timeout=120, gamma=gamma, timeout=60)
                     for r in robot_names(robot, n)]

    def close(self):
        for e in self.envs:
            e.client.close()
        self.session.close()


@contextlib.contextmanager
def one_model_env(task: str, model: str, max_steps: int, robot: str):
    """One env of a `stagewise serve --reward model --envs 1` (32x32 frames; `model`: a manifest, or "" for the
    task's shipped model), closed on exit: what the probes (probe_phi_explore.py, probe_release.py) read phi from."""
    extra = ["--model", model] if model else []
    with launch.serve("--task", task, "--reward", "model", "--envs", "1", "--robot-name", robot, "--seed", "0",
                      "--width", "32", "--height", "32", "--max-steps", str(max_steps), *extra) as srv:
        envs = Envs(srv.endpoint, robot, 1, None)
        try:
            yield envs.envs[0]
        finally:
            envs.close()


def reset(env: StagewiseEnv, seed=None, patience: float = 120.0):
    """env.reset, retried while no server answers (seen once in a long run on the loaded machine: a reset query
    finalised without a reply although the server was up; the session reconnects)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return env.reset(seed=seed)
        except NoRuntimeError:
            if time.monotonic() >= deadline:
                raise
            print(f"  (no reply to a reset of {env.client.robot}: retrying)", flush=True)
            time.sleep(1.0)


def evaluate(agent: SAC, envs: Envs, seeds, repeat: int = 1) -> dict:
    """Deterministic success on `seeds`; each action is held `repeat` env steps (1: every step, as `stagewise eval
    policy` runs an exported policy)."""
    todo, results, active = list(seeds), [], {}
    while todo or active:
        for i, env in enumerate(envs.envs):
            if i not in active and todo:
                o, _ = reset(env, todo.pop(0))
                active[i] = [o, 0, None]
        idx = sorted(active)
        need = [i for i in idx if active[i][1] % repeat == 0]
        if need:
            acts = agent.act(np.stack([active[i][0] for i in need]), deterministic=True)
            for j, i in enumerate(need):
                active[i][2] = acts[j]
        pend = [(i, envs.envs[i].step_async(active[i][2])) for i in idx]
        for i, p in pend:
            o, _, term, trunc, info = envs.envs[i].step_wait(p)
            active[i][0] = o
            active[i][1] += 1
            if term or trunc:
                results.append((bool(info["success"]), float(info.get("progress_oracle") or 0.0), active[i][1],
                                int(info.get("stage") or 0)))
                del active[i]
    s = np.array(results, np.float64)
    stages = np.bincount(s[:, 3].astype(int), minlength=int(s[:, 3].max()) + 1)
    return {"success": float(s[:, 0].mean()), "final_progress": float(s[:, 1].mean()),
            "ep_len": float(s[:, 2].mean()), "episodes": len(results), "final_stages": stages.tolist()}


# ---------------------------------------------------------------------------------------------------- runs
def serve_args(a, reward, robot, envs, seed, max_steps):
    args = ["--task", a.task, "--reward", reward, "--envs", str(envs), "--robot-name", robot, "--gamma", str(a.gamma),
            "--seed", str(seed), "--shaping-scale", str(a.shaping_scale)]
    if max_steps:
        args += ["--max-steps", str(max_steps)]
    if reward == "model":
        args += ["--width", "32", "--height", "32"]
        if a.model:
            args += ["--model", a.model]
    return args


def train_seed_base(seed: int) -> int:
    """The first simulator seed of run `seed`'s training episodes; each episode takes the next one."""
    return 1_000_000 * (seed + 1)


def eval_seed_clash(seed: int, a) -> str:
    """Why run `seed` would train on an evaluation seed ('' when it cannot): its training episodes, at most one per env
    step, take the simulator seeds from train_seed_base(seed) on."""
    lo, hi = train_seed_base(seed), train_seed_base(seed) + a.steps + a.envs
    if lo < a.eval_seed + a.eval_episodes and a.eval_seed < hi:
        return (f"--seeds {seed}: its training episodes take the simulator seeds {lo}.. (up to {hi}), which cover the "
                f"held-out eval seeds {a.eval_seed}..{a.eval_seed + a.eval_episodes - 1} (--eval-seed): pick another "
                f"seed or --eval-seed")
    return ""


def one_run(reward: str, seed: int, a, save, demos=()) -> dict:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    robot = f"rl-{reward}-{seed}-{os.getpid()}"
    t0 = time.time()
    logdir = os.path.join(a.out, "logs")
    os.makedirs(logdir, exist_ok=True)
    pol_dir = os.path.join(a.out, "policies")
    os.makedirs(pol_dir, exist_ok=True)
    eval_max = a.eval_max_steps if a.eval_max_steps >= 0 else a.max_steps
    with launch.serve(*serve_args(a, reward, robot, a.envs, train_seed_base(seed), a.max_steps),
                      log=os.path.join(logdir, f"serve-{a.task}-{reward}-{seed}.log")) as srv, \
            launch.serve(*serve_args(a, "sparse", robot + "-eval", a.eval_envs, 0, eval_max),
                         log=os.path.join(logdir, f"serve-eval-{a.task}-{reward}-{seed}.log")) as esrv:
        train = Envs(srv.endpoint, robot, a.envs, a.gamma)
        evals = Envs(esrv.endpoint, robot + "-eval", a.eval_envs, None)
        spec = train.envs[0].spec_msg
        names = list(spec["state"]["names"])
        s_dim, a_dim = len(names), len(spec["action"]["low"])
        action_names = list(spec["action"].get("names", []))
        flipper, grip = None, None
        if a.gripper_flip > 0 or a.gripper_binary:
            grip = action_names.index("gripper")
        rise = action_names.index("dz") if a.gripper_flip_rise else None
        if a.gripper_flip > 0:
            flipper = GripperFlip(a.envs, grip, a.gripper_flip, a.gripper_flip_hold, rise)
        agent = SAC(names, a_dim, a, seed, grip, rise)
        symmetry = Symmetry(names, a.augment_symmetry) if a.augment_symmetry > 0 else None
        buf = Replay(a.steps + 10, s_dim, a_dim)
        demo_buf, demo_stats = None, {"episodes": 0}
        if a.demos > 0:
            demo_buf = Replay(sum(len(d[2]) for d in demos) + 10, s_dim, a_dim)
            demo_stats = replay_demos(train.envs[0], demos, a, reward, demo_buf)
        nsteps = [NStep(a.nstep, a.gamma) for _ in train.envs]
        eval_seeds = range(a.eval_seed, a.eval_seed + a.eval_episodes)
        log: List[dict] = []
        episodes: List[tuple] = []  # (env steps at the end, success, final oracle progress, length, return)
        run = {"task": a.task, "reward": reward, "seed": seed, "steps": a.steps, "demos": demo_stats,
               "checkpoints": log}
        best = {"success": -1.0}
        timing = {"env_s": 0.0, "update_s": 0.0, "eval_s": 0.0}

        def checkpoint(step):
            te = time.time()
            ev = evaluate(agent, evals, eval_seeds, a.eval_repeat)
            timing["eval_s"] += time.time() - te
            recent = [e for e in episodes if e[0] > step - a.eval_every]
            ev.update(steps=step, updates=agent.updates, wall_s=time.time() - t0, **agent.stats,
                      train_episodes=len(episodes),
                      train_success=float(np.mean([e[1] for e in recent])) if recent else float("nan"),
                      train_return=float(np.mean([e[4] for e in recent])) if recent else float("nan"))
            log.append(ev)
            print(f"  {a.task} {reward} seed {seed} step {step:>7} upd {agent.updates:>7} wall {ev['wall_s']:>5.0f}s  "
                  f"eval {ev['success']:.0%} prog {ev['final_progress']:.2f} len {ev['ep_len']:.0f} st {ev['final_stages']}  "
                  f"train {ev['train_success']:.0%} ret {ev['train_return']:.2f}  "
                  f"Q {ev['q']:.2f} alpha {ev['alpha']:.4f}", flush=True)
            if a.export_checkpoints and step > 0:
                export_onnx(agent, os.path.join(pol_dir, f"{a.task}-{reward}-{seed}-{step // 1000}k.onnx"), s_dim,
                            f"{a.algo.upper()}, {reward} reward, seed {seed}, {step} env steps, held-out eval "
                            f"{ev['success']:.2f} (benches/learner_shaping.py)", a.action_repeat)
            if ev["success"] >= best["success"] and step > 0:
                best.update(success=ev["success"], steps=step)
                best.update(export_onnx(agent, os.path.join(pol_dir, f"{a.task}-{reward}-{seed}-best.onnx"), s_dim,
                                        f"{a.algo.upper()}, {reward} reward, seed {seed}, {step} env steps, held-out eval "
                                        f"{ev['success']:.2f} (benches/learner_shaping.py)", a.action_repeat))
            save(run)

        learn_rew = [LearnReward(a, reward) for _ in train.envs]
        obs = []
        for e, lr in zip(train.envs, learn_rew):
            o, info = reset(e)
            lr.reset(info)
            obs.append(o)
        ep_ret = [0.0] * a.envs
        ep_len = [0] * a.envs
        step, next_eval, decisions = 0, 0, 0
        debt = 0.0
        while step < a.steps:
            if step >= next_eval:
                checkpoint(step)
                next_eval += a.eval_every
            te = time.time()
            if a.expl_noise_end >= 0:
                agent.noise = a.expl_noise + (a.expl_noise_end - a.expl_noise) * min(step / a.steps, 1.0)
            if step < a.random_steps:
                acts = rng.uniform(-1, 1, (a.envs, a_dim)).astype(np.float32)
            else:
                acts = agent.act(np.stack(obs), deterministic=False)
                if flipper is not None:
                    flipper(acts, rng)
            # One decision per env: the action held for up to --action-repeat env steps (fewer when the episode
            # ends); its reward is the discounted sum of the served steps' rewards, its discount gamma^j.
            r_acc, g_acc = [0.0] * a.envs, [1.0] * a.envs
            live = list(range(a.envs))
            ends = {}
            for _ in range(a.action_repeat):
                pend = [(i, train.envs[i].step_async(acts[i])) for i in live]
                for i, p in pend:
                    o2, r, term, trunc, info = train.envs[i].step_wait(p)
                    rl = learn_rew[i](r, term, info)
                    r_acc[i] += g_acc[i] * rl
                    g_acc[i] *= a.gamma
                    ep_ret[i] += rl
                    ep_len[i] += 1
                    step += 1
                    ends[i] = (o2, term, term or trunc, info)
                live = [i for i in live if not ends[i][2]]
                if not live:
                    break
            for i in range(a.envs):
                o2, term, done, info = ends[i]
                nsteps[i].push(obs[i], acts[i], r_acc[i], o2, term, done, buf, g=g_acc[i])
                decisions += 1
                if done:
                    episodes.append((step, bool(info["success"]), float(info.get("progress_oracle") or 0.0),
                                     ep_len[i], ep_ret[i]))
                    ep_ret[i], ep_len[i] = 0.0, 0
                    o2, rinfo = reset(train.envs[i])
                    learn_rew[i].reset(rinfo)
                    if flipper is not None:
                        flipper.end_episode(i)
                obs[i] = o2
            timing["env_s"] += time.time() - te
            if step >= a.learning_starts and buf.n + (demo_buf.n if demo_buf else 0) >= a.batch:
                tu = time.time()
                debt += a.utd * a.envs
                while debt >= 1.0:
                    debt -= 1.0
                    batch = sample(buf, demo_buf, a.batch, a.demo_ratio)
                    agent.update(symmetry(batch) if symmetry else batch,
                                 actor_step=(agent.updates % a.actor_every == 0))
                timing["update_s"] += time.time() - tu
        checkpoint(step)
        torch.save({"actor": agent.actor.state_dict(), "q": agent.q.state_dict(), "names": names},
                   os.path.join(pol_dir, f"{a.task}-{reward}-{seed}-last.pt"))
        last = export_onnx(agent, os.path.join(pol_dir, f"{a.task}-{reward}-{seed}-last.onnx"), s_dim,
                           f"{a.algo.upper()}, {reward} reward, seed {seed}, {step} env steps (benches/learner_shaping.py)",
                           a.action_repeat)
        train.close()
        evals.close()
    wall = time.time() - t0
    run.update(wall_s=wall, **timing, updates=agent.updates, best=best, last=last,
               decisions=decisions, train_episodes=len(episodes), train_successes=int(sum(e[1] for e in episodes)),
               s_per_10k=wall / step * 1e4,
               first_80=next((c["steps"] for c in log if c["success"] >= 0.8), None))
    print(f"{a.task} {reward} seed {seed}: {step} env steps, {agent.updates} updates in {wall:.0f} s "
          f"(env {timing['env_s']:.0f} s, updates {timing['update_s']:.0f} s, eval {timing['eval_s']:.0f} s; "
          f"{wall / step * 1e4:.0f} s per 10k steps); best eval {best['success']:.0%} at {best.get('steps')}, "
          f"last {log[-1]['success']:.0%}; first >= 80%: {run['first_80']}", flush=True)
    return run


# --------------------------------------------------------------------------------------------------- plots
def run_label(runs, model_names=None):
    """Merged runs made with different demonstrations, shaping scales, gripper flips, a binary gripper, success read
    as progress 1 or reward model manifests get a label naming them ("model, c=3, 20 demos, flip 0.05, binary
    gripper, success phi 1, data/r5model"; a --potential-scale too), so the plot and its legend keep them apart; runs of one set-up keep the
    reward's name. `model_names` (--model-names) renames a model's folder in the label ("" = runs that recorded
    no --model: the shipped model of their day)."""
    model_names = model_names or {}
    def setup(r):
        if not r.get("argv"):
            return (None, None, 0.0, 1, False, False, False, 1.0), ""
        a = parse(r["argv"][1:])
        return ((a.demos, a.shaping_scale, a.gripper_flip, a.gripper_flip_hold, a.gripper_binary, a.gripper_flip_rise,
                 a.success_progress_one, a.potential_scale), os.path.dirname(a.model))

    setups = [setup(r) for r in runs]
    models = {m for r, (_, m) in zip(runs, setups) if r["reward"] == "model"}
    if len({su for su, _ in setups}) > 1 or len(models) > 1:
        for r, ((demos, c, flip, hold, binary, rise, one, pot), model) in zip(runs, setups):
            scale = "" if r["reward"] == "sparse" or c is None else f", c={c:g}"
            scale += "" if r["reward"] == "sparse" or pot == 1.0 else f" (potential part x{pot:g})"
            flips = "" if not flip else f", flip {flip:g}" + (f" x{hold}" if hold > 1 else "") + (" rise" if rise else "")
            r["label"] = (f"{r['reward']}{scale}" + ("" if demos is None else f", {demos} demos") + flips
                          + (", binary gripper" if binary else "")
                          + (", success phi 1" if one and r["reward"] == "model" else "")
                          + (f", {model_names.get(model, model or 'shipped model')}"
                             if r["reward"] == "model" and len(models) > 1 else ""))


def plot(runs, a, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import FuncFormatter

    tasks = sorted({r["task"] for r in runs})
    # one legend row per line of each task, under its pair of plots (long set-up labels do not fit inside)
    lines = [len({(r["reward"], r.get("label", r["reward"])) for r in runs if r["task"] == t}) for t in tasks]
    legend_h = 0.22 * max(lines)
    fig, axes = plt.subplots(len(tasks), 2, figsize=(11, (4 + legend_h) * len(tasks)), squeeze=False)
    for row, task in zip(axes, tasks):
        for reward, color in COLORS.items():
            # runs merged from different set-ups carry a label (run_label); one line style per label
            labels = list(dict.fromkeys(r.get("label", reward) for r in runs
                                        if r["reward"] == reward and r["task"] == task))
            for label, style in zip(labels, itertools.cycle(["-", "--", ":", "-."])):
                rs = [r for r in runs
                      if r["reward"] == reward and r["task"] == task and r.get("label", reward) == label]
                for k, r in enumerate(rs):
                    x = [c["steps"] for c in r["checkpoints"]]
                    for ax, key in ((row[0], "success"), (row[1], "final_progress")):
                        ax.plot(x, [c[key] for c in r["checkpoints"]], color=color, ls=style, lw=0.8, alpha=0.45)
                if rs:
                    n = min(len(r["checkpoints"]) for r in rs)
                    x = [c["steps"] for c in rs[0]["checkpoints"][:n]]
                    for ax, key in ((row[0], "success"), (row[1], "final_progress")):
                        m = np.mean([[c[key] for c in r["checkpoints"][:n]] for r in rs], 0)
                        ax.plot(x, m, color=color, ls=style, lw=2.2, label=f"{label} (mean of {len(rs)})")
        row[0].axhline(0.8, color="k", ls=":", lw=0.8)
        row[0].set_ylabel(f"{task}: eval success ({a.eval_episodes} held-out seeds)")
        row[1].set_ylabel(f"{task}: eval final oracle progress")
        for ax in row:
            ax.set_xlabel("env steps")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k"))
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
        row[0].legend(loc="upper left", bbox_to_anchor=(0.0, -0.14), fontsize=8, frameon=False)
    form = f"potential phi-{a.phi_offset}" if a.reward_form == "potential" else f"{a.reward_form} form"
    if getattr(a, "potential_scale", 1.0) != 1.0:
        form += f", potential part x{a.potential_scale}"
    varied = "set-up per legend" if any("label" in r for r in runs) else f"{a.demos} demos, c={a.shaping_scale}"
    fig.suptitle(f"{a.algo.upper()} via stagewise serve: {varied}, gamma={a.gamma}, {form}, "
                 f"\nmax-steps {a.max_steps}, utd {a.utd}, n-step {a.nstep}, symmetry aug. "
                 f"{getattr(a, 'augment_symmetry', 0)} (thin: seeds, thick: mean)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="push-target")
    ap.add_argument("--rewards", default="sparse,model,oracle")
    ap.add_argument("--seeds", default="0",
                    help="comma-separated; run s trains on the simulator seeds from 1000000 (s + 1) on, and a seed "
                         "whose training seeds would cover the eval seeds (--eval-seed) is refused")
    ap.add_argument("--steps", type=int, default=150_000, help="env steps per run (all training envs together)")
    ap.add_argument("--envs", type=int, default=4, help="training envs (one server, stepped concurrently)")
    ap.add_argument("--max-steps", type=int, default=200, help="training episode length (truncation)")
    ap.add_argument("--eval-max-steps", type=int, default=0,
                    help="evaluation episode length (0: the task's own, as `stagewise eval policy`; -1: --max-steps)")
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--shaping-scale", type=float, default=10.0)
    ap.add_argument("--phi-offset", type=float, default=1.0)
    ap.add_argument("--phi-ema", type=float, default=0.0,
                    help="--reward-form potential: shape with an EMA of the served phi (weight of the previous "
                         "value; 0 = off). NOT policy-invariant (the potential depends on the episode's history)")
    ap.add_argument("--reward-form", choices=["potential", "exp", "progress"], default="potential",
                    help="potential: served (phi - offset); exp: Phi = gamma^(H (1 - phi)) (both policy-invariant); "
                         "progress: r_task + c (phi' - phi), NOT policy-invariant")
    ap.add_argument("--success-progress-one", action="store_true",
                    help="--reward-form progress: a step that ends in success reads phi' = 1 (the task's success "
                         "signal, which the sparse reward also gets) instead of the model's reading of its frame: "
                         "the finishing step pays r_task + c (1 - phi). Also NOT policy-invariant; the oracle reads 1 "
                         "there anyway, sparse is unchanged")
    ap.add_argument("--potential-scale", type=float, default=1.0,
                    help="--reward-form progress: scale of its potential-based part c (gamma phi' - phi), the level "
                         "c (1 - gamma) phi' kept (same optimal policy for every value; 1 = the plain progress form): "
                         "a learned phi's per-step noise is paid S times")
    ap.add_argument("--horizon", type=float, default=100.0, help="H of --reward-form exp (steps an expert needs)")
    ap.add_argument("--model", default="", help="reward model manifest for --rewards model (default: shipped)")
    ap.add_argument("--algo", choices=["sac", "td3"], default="td3",
                    help="sac, or td3 (deterministic actor, Gaussian exploration --expl-noise, target smoothing)")
    ap.add_argument("--expl-noise", type=float, default=0.2, help="td3: exploration noise std at the start")
    ap.add_argument("--expl-noise-end", type=float, default=-1.0,
                    help="td3: exploration noise std at the end of the run, linear in env steps (-1: constant)")
    ap.add_argument("--gripper-flip", type=float, default=0.0,
                    help="exploration: in this share of decisions the gripper command is set to its other extreme "
                         "(open <-> shut). Gaussian noise cannot get a learner whose actor holds the gripper shut "
                         "(-0.9) past the release threshold (> 0.1); the same for every reward (0 = off)")
    ap.add_argument("--gripper-flip-hold", type=int, default=1,
                    help="decisions each --gripper-flip holds the gripper at its other extreme")
    ap.add_argument("--gripper-flip-rise", action="store_true",
                    help="a --gripper-flip that opens the gripper also commands the hand up (dz = +1) while it holds; "
                         "with --gripper-binary the open choice is valued as that finishing move (open and dz = +1)")
    ap.add_argument("--gripper-binary", action="store_true",
                    help="td3: the gripper as a binary choice (shut/open, HIL-SERL's discrete gripper): the critic's "
                         "target takes the better choice, the actor's gripper output is regressed onto it")
    ap.add_argument("--net", default="128,128")
    ap.add_argument("--critics", type=int, default=2)
    ap.add_argument("--layer-norm", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--tau", type=float, default=0.005)
    ap.add_argument("--utd", type=float, default=2.0, help="critic updates per decision (env step / action repeat)")
    ap.add_argument("--actor-every", type=int, default=2, help="one actor update per this many critic updates")
    ap.add_argument("--nstep", type=int, default=3, help="n-step returns (in decisions)")
    ap.add_argument("--action-repeat", type=int, default=4,
                    help="each decision's action is held this many env steps in training (evaluation: --eval-repeat)")
    ap.add_argument("--alpha", type=float, default=0.05, help="initial entropy coefficient")
    ap.add_argument("--auto-alpha", type=int, default=1)
    ap.add_argument("--target-entropy", type=float, default=1.0, help="target entropy = -this * |A|")
    ap.add_argument("--random-steps", type=int, default=5000, help="uniform random actions for the first steps")
    ap.add_argument("--learning-starts", type=int, default=5000)
    ap.add_argument("--eval-every", type=int, default=10_000)
    ap.add_argument("--eval-episodes", type=int, default=50)
    ap.add_argument("--eval-repeat", type=int, default=0,
                    help="hold each evaluated action this many env steps (default 0: --action-repeat, the policy as "
                         "trained and as `stagewise eval policy` runs its export; 1: every step, how the curves before "
                         "2026-12-02 evening were measured; benches/learner_shaping.md)")
    ap.add_argument("--eval-envs", type=int, default=10)
    ap.add_argument("--eval-seed", type=int, default=7_000_000)
    ap.add_argument("--demos", type=int, default=0, help="expert demonstrations replayed into a second buffer")
    ap.add_argument("--demo-seed", type=int, default=100_000)
    ap.add_argument("--demo-ratio", type=float, default=0.5, help="share of each batch from the demonstrations")
    ap.add_argument("--demo-dir", default="", help="where recorded demonstrations are kept (default: --out)")
    ap.add_argument("--out", default="benches/results/learner_shaping_push")
    ap.add_argument("--augment-symmetry", type=float, default=1.0,
                    help="share of each batch's transitions mapped by a random turn (0/90/180/270 degrees, with or "
                         "without a mirror) about the vertical axis through block 0 (states, action dx/dy; reward "
                         "kept): the task's symmetry as data augmentation (default 1: every transition; 0: off; `Symmetry`)")
    ap.add_argument("--export-checkpoints", action="store_true",
                    help="also export the policy at every checkpoint (<out>/policies/<task>-<reward>-<seed>-<k>k.onnx "
                         "+ manifest): `stagewise record --policy` rolls them out for reward-model training data")
    ap.add_argument("--plot-only", action="store_true", help="re-plot <out>/curves.json")
    ap.add_argument("--merge", nargs="+", default=[], metavar="DIR",
                    help="merge the runs of these output dirs (or curves.json files) into <out>/curves.json and plot "
                         "them (the set-up in the title is the first one's)")
    ap.add_argument("--model-names", default={}, metavar="DIR=NAME,...",
                    type=lambda t: dict(kv.split("=", 1) for kv in t.split(",") if kv),
                    help="--merge: name the reward model of the runs whose --model lay in DIR as NAME in the legend "
                         "(an empty DIR: runs that recorded no --model)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI size: 3000 steps, 1000 random, 100-step episodes, eval every 1500 on 5 seeds, 64x64 nets, utd 0.5")
    a = ap.parse_args(argv)
    if a.eval_repeat < 0:
        ap.error(f"--eval-repeat must be >= 0 (got {a.eval_repeat})")
    a.eval_repeat = a.eval_repeat or a.action_repeat
    if a.gripper_binary and a.algo != "td3":
        ap.error("--gripper-binary is a td3 option (the actor's gripper output is regressed onto the better choice)")
    if a.success_progress_one and a.reward_form != "progress":
        ap.error("--success-progress-one is a --reward-form progress option (the other forms end at potential 0)")
    if a.potential_scale != 1.0 and a.reward_form != "progress":
        ap.error("--potential-scale is a --reward-form progress option (the potential forms are the potential part)")
    if a.smoke:
        a.steps, a.random_steps, a.learning_starts, a.eval_every, a.eval_episodes = 3000, 1000, 1000, 1500, 5
        a.net, a.eval_envs, a.max_steps, a.eval_max_steps, a.utd = "64,64", 5, 100, -1, 0.5
    if not a.merge:
        for seed in [int(s) for s in a.seeds.split(",")]:
            clash = eval_seed_clash(seed, a)
            if clash:
                ap.error(clash)
    return a


def main(argv=None):
    torch.set_num_threads(1)
    a = parse(argv)
    os.makedirs(a.out, exist_ok=True)
    curves = os.path.join(a.out, "curves.json")
    if a.merge:
        # one figure of runs made by separate processes: each run keeps the argv and the directory it came from
        runs, note = [], []
        for src in a.merge:
            path = os.path.join(src, "curves.json") if os.path.isdir(src) else src
            saved = json.load(open(path))
            for r in saved["runs"]:
                runs.append({**r, "argv": saved.get("argv"), "source": os.path.dirname(os.path.abspath(path))})
            note.append(path)
        run_label(runs, a.model_names)
        args = {**json.load(open(os.path.join(a.merge[0], "curves.json") if os.path.isdir(a.merge[0])
                                 else a.merge[0])).get("args", {}), "out": a.out}
        with open(curves, "w") as fh:
            json.dump({"note": f"merged by learner_shaping.py --merge from {len(note)} files", "args": args,
                       "runs": runs}, fh)
        a = argparse.Namespace(**{**vars(a), **args, "out": a.out})
    elif a.plot_only:
        saved = json.load(open(curves))
        runs = saved["runs"]
        # the title tells the set-up the runs were made with, not this call's defaults
        a = argparse.Namespace(**{**vars(a), **saved.get("args", {}), "out": a.out, "plot_only": True})
    else:
        runs: List[dict] = []
        t0 = time.time()
        demos = read_demos(record_demos(a)) if a.demos > 0 else []

        def save(current):
            with open(curves, "w") as fh:
                json.dump({"args": vars(a), "argv": sys.argv, "runs": runs + [current],
                           "wall_s": time.time() - t0}, fh)

        for seed in [int(s) for s in a.seeds.split(",")]:
            for reward in a.rewards.split(","):
                runs.append(one_run(reward, seed, a, save, demos))
                with open(curves, "w") as fh:
                    json.dump({"args": vars(a), "argv": sys.argv, "runs": runs, "wall_s": time.time() - t0}, fh)
        print(f"total wall time {time.time() - t0:.0f} s")
    try:
        plot(runs, a, os.path.join(a.out, "curves.png"))
    except ImportError as e:
        print(f"no plot ({e}); run scripts/setup.sh (it installs matplotlib)")
    print("task reward seed  eval success by checkpoint (k steps: success)")
    for r in runs:
        print(f"{r['task']} {r['reward']:>6} {r['seed']:>3}  " +
              " ".join(f"{c['steps'] // 1000}k:{c['success']:.0%}" for c in r["checkpoints"]))
    return runs


if __name__ == "__main__":
    main()
