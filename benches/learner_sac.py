#!/usr/bin/env python3
"""SAC with expert demonstrations in the replay buffer (RLPD / HIL-SERL style) through `stagewise serve`:
evaluated success rate against environment steps, per reward condition (sparse, oracle, model) and seed.

    (matplotlib for the curves comes with scripts/setup.sh)
    nice -n 10 .venv/bin/python benches/learner_sac.py --task push-target --rewards oracle --seeds 0 \
        --steps 30000 --out benches/results/learner_sac_push        # then --rewards sparse (see learner_shaping.md)

Defaults are the set-up of benches/learner_shaping.md (2026-12-01): 50 expert demos, half of every batch;
SAC 128x128, LayerNorm critics, batch 256, lr 3e-4, 2 train envs and one update per vec step (0.5 updates per
env step), entropy coefficient tuned from 0.01 towards -|A|, BC weight 1, c = 10, gamma 0.99, 200-step episodes,
potential phi - 1 (`--phi-offset 1`, still potential-based).

What one run does (one reward condition, one seed):

1. Demonstrations (the same for every condition): `stagewise record --task T --degraded 0 --episodes D
   --seed S` writes a LeRobot dataset once (<out>/demos, reused); the script reads each episode's seed and
   actions from its parquet and **replays the actions through the training server** after `reset(seed)`.
   The simulator is deterministic, so the replay reproduces the recorded states, and every transition carries
   the reward *that server* serves (sparse, or shaped with the same c, gamma and potential as the online
   steps). A replay that does not end in success is an error.
2. `stagewise serve --task T --reward R --shaping-scale c --gamma g --max-steps M --envs N` for training and a
   second server (`--envs E`) for evaluation.
3. SB3 SAC on the raw state; the networks first apply a fixed affine normalisation (mean/std of the
   demonstration states, std floored at 0.05) so that positions in metres and the target offset are O(1);
   actions are already in [-1, 1] (`tanh`-squashed policy). Each update samples half its batch from the
   demonstrations and half from the online buffer (RLPD's symmetric sampling); the demonstrations stay in
   the batch for the whole run. Options: LayerNorm critics (RLPD), a behaviour-cloning term on the demo rows
   (`--bc-weight`), the potential phi - 1 instead of phi (`--phi-offset`, computed from the served reward and
   the terminated flag, still potential-based), or the non-invariant progress reward (`--reward-form`).
4. Every `--eval-every` env steps (and at step 0): the current policy, deterministic, on `--eval-episodes`
   held-out seeds (`--eval-seed` + i, the same set at every checkpoint, never used for training or demos):
   success rate, mean final oracle progress, mean episode length.

Writes <out>/curves.json (args, per run: checkpoints, training episodes, wall times, demo stats),
<out>/learner_sac.png, and prints a table. Not part of CI."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(REPO, "python"))

from stable_baselines3 import SAC  # noqa: E402
from stable_baselines3.common.buffers import ReplayBuffer  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor  # noqa: E402
from stable_baselines3.common.type_aliases import ReplayBufferSamples  # noqa: E402
from stable_baselines3.common.utils import polyak_update  # noqa: E402

from stagewise import launch  # noqa: E402
from stagewise.env import StagewiseEnv  # noqa: E402
from stagewise.vec_env import StagewiseVecEnv  # noqa: E402

sys.path.insert(0, HERE)
from learner_shaping import read_demos  # noqa: E402  (the same reader: one copy)

COLORS = {"sparse": "tab:gray", "model": "tab:blue", "oracle": "tab:green"}


# --------------------------------------------------------------------------------------------- demonstrations
def record_demos(a) -> str:
    path = os.path.join(a.out, f"demos-{a.task}-{a.demos}-{a.demo_seed}")
    if not os.path.isdir(os.path.join(path, "data")):
        cmd = [launch.find_binary(), "record", "--task", a.task, "--episodes", str(a.demos), "--degraded", "0",
               "--seed", str(a.demo_seed), "--width", "16", "--height", "16", "--threads", "1", "--out", path]
        subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return path


def potential_offset(rew, terminated, a, reward):
    """The served shaped reward re-expressed with the potential phi - 1 instead of phi (`--phi-offset 1`):
    r_task + c (gamma (phi' - 1) - (phi - 1)) with terminal potential 0 = served r + c (1 - gamma) on a
    non-terminal step and + c on a terminated one. Still potential-based (policy-invariant), computed exactly
    from the served reward and the terminated flag; it moves the shaping's `-c phi` bill from the success step
    (served: r ~ 1 - c) to the start. Sparse rewards are left alone."""
    if reward == "sparse" or a.phi_offset == 0:
        return rew
    return rew + a.phi_offset * a.shaping_scale * np.where(terminated, 1.0, 1.0 - a.gamma)


def progress_reward(rew, terminated, phi_next, a, reward):
    """`--reward-form progress` (NOT policy-invariant): r_task + c (phi' - phi), the terminal state keeping its
    potential, from the served reward r_task + c (gamma phi'_s - phi) (phi'_s = phi', or 0 when terminated) and
    the served phi' (`info["phi"]`): r + c (1 - gamma) phi' on a non-terminal step, r + c phi' on a terminated
    one."""
    if reward == "sparse":
        return rew
    return rew + a.shaping_scale * phi_next * np.where(terminated, 1.0, 1.0 - a.gamma)


def transform_reward(rew, terminated, phi_next, a, reward):
    if a.reward_form == "progress":
        return progress_reward(rew, terminated, phi_next, a, reward)
    return potential_offset(rew, terminated, a, reward)


def replay_demos(env: StagewiseEnv, demos):
    """Replays each demo's actions after reset(seed) on a served env: the served transitions, exactly."""
    obs, act, rew, nxt, done, phis = [], [], [], [], [], []
    n_succ, returns = 0, []
    for seed, states, actions in demos:
        o, _ = env.reset(seed=seed)
        if not np.allclose(o, states[0], atol=1e-5):
            raise RuntimeError(f"demo seed {seed}: served reset state differs from the recorded one")
        ret = 0.0
        for k, a_ in enumerate(actions):
            o2, r, term, trunc, info = env.step(a_)
            obs.append(o), act.append(a_), rew.append(r), nxt.append(o2), done.append(term)
            phis.append(info.get("phi") or 0.0)
            ret += r
            o = o2
            if term or trunc:
                break
        if not (info["success"] and k + 1 == len(actions)):
            raise RuntimeError(f"demo seed {seed}: replay ended at step {k + 1}/{len(actions)} "
                               f"success={info['success']} (simulator not deterministic?)")
        n_succ += 1
        returns.append(ret)
    return (np.array(obs, np.float32), np.array(act, np.float32), np.array(rew, np.float32),
            np.array(nxt, np.float32), np.array(done, np.float32), np.array(phis, np.float32)), {"episodes": len(demos), "success": n_succ,
                                                                     "transitions": len(obs),
                                                                     "mean_return": float(np.mean(returns))}


# ------------------------------------------------------------------------------------------ learner pieces
class Normalize(BaseFeaturesExtractor):
    """Fixed (x - mean) / std with the demonstrations' statistics (set through features_extractor_kwargs)."""

    def __init__(self, observation_space, mean, std):
        super().__init__(observation_space, int(np.prod(observation_space.shape)))
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean, np.float32)))
        self.register_buffer("std", torch.as_tensor(np.asarray(std, np.float32)))

    def forward(self, obs):
        return ((obs - self.mean) / self.std).clamp(-10, 10)


class DemoReplayBuffer(ReplayBuffer):
    """Online replay buffer; each sample is `demo_ratio` demonstrations and the rest online (RLPD)."""

    demo = None  # (obs, act, rew, next_obs, done), set before learning
    demo_ratio = 0.5
    last_n_demo = 0  # the last `last_n_demo` rows of the latest sample are demonstrations

    def sample(self, batch_size, env=None):
        n_demo = int(round(self.demo_ratio * batch_size)) if self.demo is not None else 0
        if self.size() == 0:
            n_demo = batch_size
        self.last_n_demo = n_demo
        parts = []
        if n_demo < batch_size:
            parts.append(super().sample(batch_size - n_demo, env=env))
        if n_demo > 0:
            o, a_, r, o2, d = self.demo
            i = np.random.randint(0, len(o), size=n_demo)
            parts.append(ReplayBufferSamples(*(self.to_torch(x) for x in
                                               (o[i], a_[i], o2[i], d[i].reshape(-1, 1), r[i].reshape(-1, 1)))))
        if len(parts) == 1:
            return parts[0]
        return ReplayBufferSamples(*(None if xs[0] is None else torch.cat(xs) for xs in zip(*parts)))


def layer_norm_critics(model, net):
    """Rebuilds SB3's critics (and targets) as Linear-LayerNorm-ReLU MLPs (RLPD: LayerNorm keeps Q from
    extrapolating off the data), then a fresh optimiser."""
    for critic in (model.critic, model.critic_target):
        for i in range(len(critic.q_networks)):
            inp, layers = critic.features_extractor.features_dim + model.action_space.shape[0], []
            for h in net:
                layers += [nn.Linear(inp, h), nn.LayerNorm(h), nn.ReLU()]
                inp = h
            q = nn.Sequential(*layers, nn.Linear(inp, 1))
            critic.q_networks[i] = q
            critic.add_module(f"qf{i}", q)
    model.critic_target.load_state_dict(model.critic.state_dict())
    model.critic.optimizer = model.policy.optimizer_class(model.critic.parameters(), lr=model.lr_schedule(1),
                                                          **model.policy.optimizer_kwargs)


class DemoSAC(SAC):
    """SB3 SAC whose actor loss may add `bc_weight` * mean squared error between the deterministic action and
    the demonstrated action on the batch's demonstration rows (0 = plain SAC). Same updates otherwise; also
    keeps the mean Q of the last batch for the log."""

    bc_weight = 0.0
    bc_alpha = 0.0
    q_mean = float("nan")

    def train(self, gradient_steps: int, batch_size: int = 64) -> None:
        self.policy.set_training_mode(True)
        opts = [self.actor.optimizer, self.critic.optimizer] + ([self.ent_coef_optimizer]
                                                                  if self.ent_coef_optimizer is not None else [])
        self._update_learning_rate(opts)
        for _ in range(gradient_steps):
            d = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            n_demo = self.replay_buffer.last_n_demo
            actions_pi, log_prob = self.actor.action_log_prob(d.observations)
            log_prob = log_prob.reshape(-1, 1)
            if self.ent_coef_optimizer is not None:
                ent_coef = torch.exp(self.log_ent_coef.detach())
                ent_loss = -(self.log_ent_coef * (log_prob + self.target_entropy).detach()).mean()
                self.ent_coef_optimizer.zero_grad()
                ent_loss.backward()
                self.ent_coef_optimizer.step()
            else:
                ent_coef = self.ent_coef_tensor
            with torch.no_grad():
                na, nlp = self.actor.action_log_prob(d.next_observations)
                nq = torch.min(torch.cat(self.critic_target(d.next_observations, na), dim=1), dim=1,
                               keepdim=True)[0] - ent_coef * nlp.reshape(-1, 1)
                target = d.rewards + (1 - d.dones) * self.gamma * nq
            qs = self.critic(d.observations, d.actions)
            critic_loss = 0.5 * sum(F.mse_loss(q, target) for q in qs)
            self.critic.optimizer.zero_grad()
            critic_loss.backward()
            self.critic.optimizer.step()
            q_pi = torch.min(torch.cat(self.critic(d.observations, actions_pi), dim=1), dim=1, keepdim=True)[0]
            actor_loss = (ent_coef * log_prob - q_pi).mean()
            if self.bc_alpha > 0:  # TD3+BC: the RL term scaled by alpha / mean|Q|, so BC's share is reward-scale-free
                actor_loss = actor_loss * (self.bc_alpha / q_pi.abs().mean().detach().clamp(min=1e-3))
            if self.bc_weight > 0 and n_demo > 0:
                mu = self.actor(d.observations[-n_demo:], deterministic=True)
                actor_loss = actor_loss + self.bc_weight * F.mse_loss(mu, d.actions[-n_demo:])
            self.actor.optimizer.zero_grad()
            actor_loss.backward()
            self.actor.optimizer.step()
            polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)
            self.q_mean = float(q_pi.mean().detach())
        self._n_updates += gradient_steps


from stable_baselines3.common.vec_env import VecEnvWrapper  # noqa: E402


class OffsetReward(VecEnvWrapper):
    """Applies :func:`potential_offset` to the served rewards of a VecEnv."""

    def __init__(self, venv, a, reward):
        super().__init__(venv)
        self.a, self.reward = a, reward

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        obs, rew, done, infos = self.venv.step_wait()
        term = np.array([d and not i.get("TimeLimit.truncated", False) for d, i in zip(done, infos)])
        phi = np.array([i.get("phi") or 0.0 for i in infos], np.float64)
        return obs, transform_reward(rew, term, phi, self.a, self.reward).astype(np.float32), done, infos


class Evaluator:
    """Deterministic policy on held-out seeds, E envs of one server stepped concurrently."""

    def __init__(self, endpoint, robot, n_envs, seeds, gamma):
        from stagewise.vec_env import robot_names
        from stagewise.session import open_session

        self.session = open_session(endpoint)
        self.envs = [StagewiseEnv(r, session=self.session, connect_timeout=120, gamma=gamma)
                     for r in robot_names(robot, n_envs)]
        self.seeds = list(seeds)

    def __call__(self, model) -> dict:
        todo = list(self.seeds)
        results = []
        active = {}  # env index -> [obs, steps]
        while todo or active:
            for i, env in enumerate(self.envs):
                if i not in active and todo:
                    o, _ = env.reset(seed=todo.pop(0))
                    active[i] = [o, 0]
            idx = sorted(active)
            acts, _ = model.predict(np.stack([active[i][0] for i in idx]), deterministic=True)
            pend = [(i, self.envs[i].step_async(acts[j])) for j, i in enumerate(idx)]
            for i, p in pend:
                o, r, term, trunc, info = self.envs[i].step_wait(p)
                active[i][0] = o
                active[i][1] += 1
                if term or trunc:
                    results.append((bool(info["success"]), float(info.get("progress_oracle") or 0.0), active[i][1]))
                    del active[i]
        s = np.array(results, dtype=np.float64)
        return {"success": float(s[:, 0].mean()), "final_progress": float(s[:, 1].mean()),
                "ep_len": float(s[:, 2].mean()), "episodes": len(results)}

    def close(self):
        for e in self.envs:
            e.client.close()
        self.session.close()


class Checkpoints(BaseCallback):
    def __init__(self, every, evaluate, log, on_checkpoint):
        super().__init__()
        self.every, self.evaluate, self.log, self.on_checkpoint = every, evaluate, log, on_checkpoint
        self.next = every
        self.episodes = []
        self.t0 = time.time()
        self.eval_s = 0.0

    def checkpoint(self):
        t = time.time()
        ev = self.evaluate(self.model)
        self.eval_s += time.time() - t
        ev.update(steps=int(self.num_timesteps), updates=int(self.model._n_updates),
                  wall_s=time.time() - self.t0, ent_coef=float(self._ent_coef()), q_mean=self.model.q_mean)
        self.log.append(ev)
        print(f"    step {ev['steps']:>6} updates {ev['updates']:>6} wall {ev['wall_s']:>6.0f}s  eval success "
              f"{ev['success']:.0%}  final progress {ev['final_progress']:.2f}  len {ev['ep_len']:.0f}  "
              f"ent_coef {ev['ent_coef']:.4f}  Q {ev['q_mean']:.2f}  train eps {len(self.episodes)}", flush=True)
        self.on_checkpoint()

    def _on_training_start(self):
        self.checkpoint()  # step 0: the untrained policy

    def _ent_coef(self):
        m = self.model
        if m.log_ent_coef is not None:
            return torch.exp(m.log_ent_coef.detach()).item()
        return m.ent_coef_tensor.item()

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"]):
            if done:
                self.episodes.append((int(self.num_timesteps), bool(info.get("is_success", False)),
                                      float(info.get("progress_oracle") or 0.0)))
        if self.num_timesteps >= self.next:
            self.next += self.every
            self.checkpoint()
        return True


# ----------------------------------------------------------------------------------------------------- runs
def serve_args(a, reward, robot, envs, seed):
    args = ["--task", a.task, "--reward", reward, "--envs", str(envs), "--robot-name", robot, "--gamma", str(a.gamma),
            "--max-steps", str(a.max_steps), "--seed", str(seed), "--shaping-scale", str(a.shaping_scale)]
    if reward == "model":
        args += ["--width", "32", "--height", "32"]
    return args


def one_run(reward: str, seed: int, demos, a, save) -> dict:
    torch.manual_seed(seed)
    np.random.seed(seed)
    robot = f"sac-{reward}-{seed}"
    t0 = time.time()
    logdir = os.path.join(a.out, "logs")
    os.makedirs(logdir, exist_ok=True)
    with launch.serve(*serve_args(a, reward, robot, a.envs, 1_000_000 * (seed + 1)),
                      log=os.path.join(logdir, f"serve-{reward}-{seed}.log")) as srv, \
            launch.serve(*serve_args(a, reward, robot + "-eval", a.eval_envs, 0),
                         log=os.path.join(logdir, f"serve-eval-{reward}-{seed}.log")) as esrv:
        venv = StagewiseVecEnv(a.envs, robot, connect=srv.endpoint, connect_timeout=120, gamma=a.gamma)
        venv.seed(seed)
        demo, demo_stats = (None, {"episodes": 0})
        if demos:
            demo, demo_stats = replay_demos(venv.envs[0], demos)
            venv.reset()  # the replay left env 0 mid-episode or done
            demo = demo[:2] + (transform_reward(demo[2], demo[4] > 0, demo[5], a, reward).astype(np.float32),) \
                + demo[3:5]
        train_env = OffsetReward(venv, a, reward)
        states = np.concatenate([d[1] for d in demos]) if demos else None
        mean = states.mean(0) if demos else np.zeros(venv.observation_space.shape, np.float32)
        std = np.maximum(states.std(0), 0.05) if demos else np.ones(venv.observation_space.shape, np.float32)
        DemoReplayBuffer.demo = demo
        DemoReplayBuffer.demo_ratio = a.demo_ratio
        net = [int(x) for x in a.net.split(",")]
        model = DemoSAC("MlpPolicy", train_env, learning_rate=a.lr, buffer_size=a.steps + 1000, batch_size=a.batch,
                    gamma=a.gamma, tau=0.005, learning_starts=a.learning_starts, train_freq=1,
                    gradient_steps=a.gradient_steps, ent_coef=a.ent_coef,
                    target_entropy=(-a.target_entropy_per_dim * venv.action_space.shape[0]),
                    replay_buffer_class=DemoReplayBuffer, seed=seed, device="cpu", verbose=0,
                    policy_kwargs=dict(net_arch=net, features_extractor_class=Normalize,
                                       features_extractor_kwargs=dict(mean=mean, std=std)))
        model.bc_weight = a.bc_weight
        model.bc_alpha = a.bc_alpha
        if a.layer_norm:
            layer_norm_critics(model, net)
        evaluator = Evaluator(esrv.endpoint, robot + "-eval", a.eval_envs,
                              range(a.eval_seed, a.eval_seed + a.eval_episodes), a.gamma)
        log = []
        run = {"reward": reward, "seed": seed, "steps": a.steps, "demos": demo_stats, "checkpoints": log}
        cb = Checkpoints(a.eval_every, evaluator, log, lambda: save(run))
        t_learn = time.time()
        model.learn(total_timesteps=a.steps, callback=cb)
        learn_s = time.time() - t_learn
        if not log or log[-1]["steps"] < model.num_timesteps:
            cb.checkpoint()
        evaluator.close()
        venv.close()
        if a.save_policy:
            model.save(os.path.join(a.out, f"sac-{reward}-{seed}.zip"))
    wall = time.time() - t0
    run.update(wall_s=wall, learn_s=learn_s, eval_s=cb.eval_s, train_episodes=cb.episodes,
               updates=int(model._n_updates),
               updates_per_s=model._n_updates / max(learn_s - cb.eval_s, 1e-9))
    print(f"{reward:>6} seed {seed}: {a.steps} steps, {model._n_updates} updates in {wall:.0f} s "
          f"(learn {learn_s:.0f} s of which eval {cb.eval_s:.0f} s; {run['updates_per_s']:.1f} updates/s); "
          f"final eval success {log[-1]['success']:.0%}", flush=True)
    return run


def plot(runs, a, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for reward in COLORS:
        rs = [r for r in runs if r["reward"] == reward]
        for k, r in enumerate(rs):
            x = [c["steps"] for c in r["checkpoints"]]
            for ax, key in ((axes[0], "success"), (axes[1], "final_progress")):
                ax.plot(x, [c[key] for c in r["checkpoints"]], color=COLORS[reward], marker="o", ms=3,
                        alpha=1.0 if len(rs) == 1 else 0.6,
                        label=f"{reward}" if k == 0 else None, ls=["-", "--", ":", "-."][k % 4])
    axes[0].set_ylabel(f"eval success ({a.eval_episodes} held-out seeds, deterministic)")
    axes[1].set_ylabel("eval final oracle progress")
    for ax in axes:
        ax.set_xlabel("env steps")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"SAC + {a.demos} demos on {a.task} via stagewise serve: c={a.shaping_scale}, gamma={a.gamma}, "
                 f"max-steps {a.max_steps}, ent {a.ent_coef}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="push-target")
    ap.add_argument("--rewards", default="oracle,sparse")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--steps", type=int, default=30_000, help="env steps per run (all training envs together)")
    ap.add_argument("--envs", type=int, default=2, help="training envs")
    ap.add_argument("--gradient-steps", type=int, default=1, help="SAC updates per vec-env step (of --envs steps)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--net", default="128,128")
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--shaping-scale", type=float, default=10.0)
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--ent-coef", default="auto_0.01", help="SAC entropy coefficient (auto_X: tuned from X)")
    ap.add_argument("--target-entropy-per-dim", type=float, default=1.0,
                    help="target entropy = -this * action dims (SB3 default 1; HIL-SERL: 0.5)")
    ap.add_argument("--learning-starts", type=int, default=500)
    ap.add_argument("--demos", type=int, default=50)
    ap.add_argument("--demo-seed", type=int, default=100_000)
    ap.add_argument("--demo-ratio", type=float, default=0.5, help="share of each batch from the demonstrations")
    ap.add_argument("--eval-every", type=int, default=2500)
    ap.add_argument("--eval-episodes", type=int, default=20)
    ap.add_argument("--eval-envs", type=int, default=4)
    ap.add_argument("--eval-seed", type=int, default=7_000_000)
    ap.add_argument("--phi-offset", type=float, default=1.0,
                    help="shape with the potential phi - X instead of phi (X = 1: potential 0 at the goal; still "
                         "potential-based), computed from the served reward: see potential_offset")
    ap.add_argument("--reward-form", choices=["potential", "progress"], default="potential",
                    help="potential: the served potential-based reward (with --phi-offset); progress: "
                         "r_task + c (phi' - phi), NOT policy-invariant (see progress_reward)")
    ap.add_argument("--layer-norm", type=int, default=1, help="LayerNorm in the critics (RLPD)")
    ap.add_argument("--bc-weight", type=float, default=1.0,
                    help="weight of an MSE behaviour-cloning term on the demo rows in the actor loss (0 = off)")
    ap.add_argument("--bc-alpha", type=float, default=0.0,
                    help="TD3+BC normalisation: scale the actor's RL term by alpha / mean|Q| (0 = off; TD3+BC: 2.5)")
    ap.add_argument("--save-policy", action="store_true")
    ap.add_argument("--out", default="benches/results/learner_sac_push")
    ap.add_argument("--plot-only", action="store_true", help="re-plot <out>/curves.json")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    curves = os.path.join(a.out, "curves.json")
    if a.plot_only:
        runs = json.load(open(curves))["runs"]
    else:
        demos = read_demos(record_demos(a)) if a.demos > 0 else []
        runs = []
        t0 = time.time()

        def save(current):
            json.dump({"args": vars(a), "argv": sys.argv, "runs": runs + [current], "wall_s": time.time() - t0},
                      open(curves, "w"))

        for seed in [int(s) for s in a.seeds.split(",")]:
            for reward in a.rewards.split(","):
                run = one_run(reward, seed, demos, a, save)
                runs.append(run)
                json.dump({"args": vars(a), "argv": sys.argv, "runs": runs, "wall_s": time.time() - t0},
                          open(curves, "w"))
        print(f"total wall time {time.time() - t0:.0f} s")
    try:
        plot(runs, a, os.path.join(a.out, "learner_sac.png"))
    except ImportError as e:
        print(f"no plot ({e}); run scripts/setup.sh (it installs matplotlib)")
    print("reward  seed  eval success by checkpoint (steps: success)")
    for r in runs:
        print(f"{r['reward']:>6}  {r['seed']:>4}  " +
              "  ".join(f"{c['steps'] // 1000}k:{c['success']:.0%}" for c in r["checkpoints"]))


if __name__ == "__main__":
    main()
