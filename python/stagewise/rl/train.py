"""One seed's learning run against `stagewise serve`, crash-safe.

The training server serves the reward asked for (`LearnConfig.reward`, `reward_form`): the learner takes it as it
is. Every `eval_every` env steps (and at 0) the deterministic policy is evaluated on held-out seeds by a second,
sparse server. Every `checkpoint_every` env steps the whole learning state (nets, target critics, optimisers,
replay and demo buffers, n-step windows, exploration state, RNG states, counters, the curve so far) is written
atomically to `<out>/seed-<s>/checkpoint.pt`; `resume` continues from it with fresh servers: the episodes the
crash cut short end there as truncated (their transitions kept, each once) and the envs start new ones."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np
import torch

from .. import launch
from . import checkpoint as ckpt
from .agent import Agent, GripperFlip, NStep, Replay, Symmetry, export_policy, feature_map, sample
from .pixels import LocatedFeatures, PixelFeatures, load_encoder, random_encoder
from .config import PROPRIOCEPTION, LearnConfig
from .envs import (Envs, ServeError, evaluate, learner_reward, reset, reward_mismatch, serve_args, step_all,
                   uses_advice)


class LearnError(RuntimeError):
    """A run that cannot start: says what was wrong, with which file or field."""


def detection_stats(episodes) -> dict:
    """With --episode-ends model, how the model's success detection did on the learner's own episodes, judged by
    the simulator (which the learner never trains on): `train_sim_success` the share of episodes in the simulator's
    success at their end, `false_success` the share of detected successes that were not, `missed_success` the share
    of episodes in success at their end the model did not detect (cut by the time limit)."""
    detected = [e for e in episodes if e[1]]
    sim = [e for e in episodes if (e[5] if len(e) > 5 else e[1])]
    return {"train_sim_success": len(sim) / len(episodes) if episodes else float("nan"),
            "false_success": (sum(1 for e in detected if not e[5]) / len(detected)) if detected else float("nan"),
            "missed_success": (sum(1 for e in sim if not e[1]) / len(sim)) if sim else float("nan"),
            "detected": len(detected)}


def embedding_spec(env) -> dict:
    """The `[embeddings]` of a policy trained on `env`'s served embeddings: the served reward model's encoder
    (its manifest's `parts.encoder_sha256`), views and embedding size, checked against what the env observes."""
    import tomllib

    path = (env.reward_spec or {}).get("model")
    if not path:
        raise ServeError(f"{env.client.keys['env_reset']}: --obs embeddings, but the server names no reward model")
    try:
        with open(path, "rb") as fh:
            m = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ServeError(f"{path} (the served reward model): cannot read its manifest ({e})") from None
    parts = m.get("parts") or {}
    spec = {"encoder_sha256": parts.get("encoder_sha256"), "views": len(m.get("views") or []),
            "size": parts.get("embedding")}
    if not spec["encoder_sha256"] or (spec["views"], spec["size"]) != env.observation_space["embedding"].shape:
        raise ServeError(f"{path}: its [parts] ({spec}) are not the embeddings the server sends "
                         f"{env.observation_space['embedding'].shape}")
    return spec


def located_features(env, cfg: LearnConfig) -> LocatedFeatures:
    """The pixel policy's input layers with `cfg.locator`: its located positions beside the proprioception, through
    the state learner's feature map; a locator of other views, size or proprioception is an error naming it."""
    from ..training import locator

    try:
        loc, _ = locator.load(cfg.locator)
        names = list(PROPRIOCEPTION) + list(loc.names)
        if cfg.augment_symmetry > 0 and not {"block0_x", "block0_y"} <= set(names):
            raise ValueError(f"it locates {', '.join(loc.names)}; the symmetry maps pivot on block0_x, block0_y "
                             "(or pass --augment-symmetry 0)")
        at_start = [n for n in cfg.locate_at_start.split(",") if n]
        unknown = [n for n in at_start if n not in loc.names]
        if unknown:
            raise ValueError(f"--locate-at-start {cfg.locate_at_start}: it locates {', '.join(loc.names)}, not "
                             f"{', '.join(unknown)}")
        w, b = feature_map(names)
        return LocatedFeatures(env.pixels, loc, list(PROPRIOCEPTION), w, b, at_start)
    except (ValueError, KeyError) as e:
        raise ServeError(f"--locator {cfg.locator}: {e}") from None


def pixel_features(env, cfg: LearnConfig, served: Optional[str] = None) -> PixelFeatures:
    """The pixel policy's input layers for `env`'s frames: the encoder from `cfg.encoder_init` (a model manifest,
    "random", or "" for the reward model's: `served`, else `env`'s, random when there is none) and the
    proprioception's map."""
    init = cfg.encoder_init or served or (env.reward_spec or {}).get("model") or "random"
    if init == "random" and cfg.encoder_train == "head":
        raise ServeError("--encoder-train head keeps the convs of a reward model's encoder, and this run has none "
                         "(--reward sparse): pass --encoder-init MANIFEST")
    try:
        enc = random_encoder(env.pixels) if init == "random" else load_encoder(init, env.pixels)
    except (ValueError, OSError, SystemExit) as e:
        raise ServeError(f"--encoder-init {init}: {e}") from None
    w, b = feature_map(list(PROPRIOCEPTION))
    return PixelFeatures(env.pixels, enc, w, b, cfg.pixel_shift, train_convs=cfg.encoder_train == "all")


def train_seed_base(seed: int) -> int:
    """The first simulator seed of run `seed`'s training episodes; each episode takes the next one."""
    return 1_000_000 * (seed + 1)


def eval_seed_clash(seed: int, cfg: LearnConfig) -> str:
    """Why run `seed` would train on an evaluation seed ('' when it cannot): its training episodes, at most one per
    env step, take the simulator seeds from train_seed_base(seed) on."""
    lo, hi = train_seed_base(seed), train_seed_base(seed) + cfg.steps + cfg.envs
    if lo < cfg.eval_seed + cfg.eval_episodes and cfg.eval_seed < hi:
        return (f"seed {seed}: its training episodes take the simulator seeds {lo}.. (up to {hi}), which cover the "
                f"held-out eval seeds {cfg.eval_seed}..{cfg.eval_seed + cfg.eval_episodes - 1} (--eval-seed): pick "
                f"another seed or --eval-seed")
    return ""


class SeedRun:
    """The state of one seed's run and its loop. `report(step, last_success)` is called after every decision."""

    def __init__(self, cfg: LearnConfig, seed: int, out: Path, demos=(), report: Optional[Callable] = None):
        self.cfg, self.seed, self.dir, self.demos = cfg, seed, out / f"seed-{seed}", demos
        self.report = report or (lambda step, success: None)
        self.policy_dir = self.dir / "policy"
        # the name a running server was given; else one of this process's own (unique on the machine)
        self.robot = cfg.serve_robot if cfg.serve_endpoint else f"rl-{cfg.reward}-{seed}-{os.getpid()}"
        self.eval_robot = f"rl-{cfg.reward}-{seed}-{os.getpid()}-eval"
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.step = self.decisions = self.resets = 0
        self.next_eval, self.next_ckpt, self.debt = 0, cfg.checkpoint_every, 0.0
        self.log: List[dict] = []
        # (env steps at the end, success, final oracle progress, length, return, the simulator's success at the end):
        # success is the episode's end as the learner saw it (with --episode-ends model: the model's detection)
        self.episodes: List[tuple] = []
        self.best = {"success": -1.0}
        self.timing = {"env_s": 0.0, "update_s": 0.0, "eval_s": 0.0, "wall_before_s": 0.0}
        self.resumed_from: List[int] = []
        self.initialised_from: Optional[dict] = None  # --init: the checkpoint the agent started from
        self.demo_stats = {"episodes": 0}
        self.last: Optional[str] = None

    # ------------------------------------------------------------------------------------------- set-up
    def _build(self, env) -> None:
        """The learner's parts, sized by the training env's observation (`env.feature_names`) and action."""
        cfg, spec = self.cfg, env.spec_msg
        self.names = list(env.feature_names)
        self.export_names, self.export_embeddings, self.export_pixels = self.names, None, None
        if cfg.obs == "embeddings":
            self.export_names, self.export_embeddings = list(PROPRIOCEPTION), embedding_spec(env)
        pixels = None
        if cfg.obs == "pixels":
            self.export_names, self.export_pixels = list(PROPRIOCEPTION), env.pixels.manifest()
            if cfg.locate_at_start:
                self.export_pixels["remember_first"] = True
            pixels = located_features(env, cfg) if cfg.locator else pixel_features(env, cfg, self.reward_model())
        s_dim, a_dim = len(self.names), len(spec["action"]["low"])
        action_names = list(spec["action"].get("names", []))
        grip = action_names.index("gripper") if cfg.gripper_flip > 0 or cfg.agent.gripper_binary else None
        rise = action_names.index("dz") if cfg.gripper_flip_rise else None
        self.flipper = GripperFlip(cfg.envs, grip, cfg.gripper_flip, cfg.gripper_flip_hold, rise) \
            if cfg.gripper_flip > 0 else None
        self.agent = Agent(self.export_names if pixels else self.names, a_dim, cfg.agent, self.seed, grip, rise,
                           advice=cfg.reward_form.shaping_scale if uses_advice(cfg) else 0.0, pixels=pixels)
        # the replay's names: with a locator, the hand's and the located positions (what the symmetry maps)
        replay_names = pixels.names if isinstance(pixels, LocatedFeatures) else self.names
        self.symmetry = Symmetry(replay_names, cfg.augment_symmetry) if cfg.augment_symmetry > 0 else None
        pix = env.pixels.size if pixels else 0
        # one transition per decision: camera bytes are sized by decisions (a few more for episodes' short last
        # ones), the state by env steps (as the shipped runs were)
        cap = cfg.steps // cfg.action_repeat + cfg.steps // 20 + 10 if pix else cfg.steps + 10
        transform = None
        if pixels is not None and pixels.cached:  # the replay keeps the frozen convs' output, not the frames
            transform = pixels.conv_features
            s_dim, pix = len(transform(np.zeros(s_dim, np.float32))), 0
        self.buf = Replay(cap, s_dim, a_dim, pix)
        self.demo_buf = Replay(sum(len(d[2]) for d in self.demos) + 10, s_dim, a_dim, pix) if self.demos else None
        for b in (self.buf, self.demo_buf):
            if b is not None:
                b.transform = transform
        self.nsteps = [NStep(cfg.nstep, cfg.reward_form.gamma) for _ in range(cfg.envs)]
        self.a_dim = a_dim

    def reward_model(self) -> Optional[str]:
        """The manifest of the reward model the learner's experience is shaped with, when this learner knows it
        other than from its training server's replies (None: ask the server)."""
        return None

    def state_dict(self) -> dict:
        return {"seed": self.seed, "config": self.cfg.to_dict(), "agent": self.agent.state_dict(),
                "replay": self.buf.state_dict(), "demo_replay": self.demo_buf.state_dict() if self.demo_buf else None,
                "nsteps": [ns.state_dict() for ns in self.nsteps], "obs": [np.asarray(o) for o in self.obs],
                "flipper": self.flipper.state_dict() if self.flipper else None, "rng": ckpt.rng_state(self.rng),
                "counters": {"step": self.step, "decisions": self.decisions, "resets": self.resets,
                             "next_eval": self.next_eval, "next_ckpt": self.next_ckpt, "debt": self.debt},
                "log": self.log, "episodes": self.episodes, "best": self.best, "demo_stats": self.demo_stats,
                "timing": {**self.timing, "wall_before_s": self.wall()}, "resumed_from": self.resumed_from,
                "initialised_from": self.initialised_from}

    def load_state_dict(self, d: dict) -> None:
        self.agent.load_state_dict(d["agent"])
        self._grow_replay(d["replay"]["cap"])  # an --init-replay run's holds its source's too
        self.buf.load_state_dict(d["replay"])
        if self.demo_buf is not None:
            self.demo_buf.load_state_dict(d["demo_replay"])
        if self.flipper is not None:
            self.flipper.load_state_dict(d["flipper"])
        for ns, st, o in zip(self.nsteps, d["nsteps"], d["obs"]):
            # the episodes the crash cut short end at their last state, truncated: each transition kept once
            ns.load_state_dict(st)
            ns.flush(o, self.buf)
        ckpt.set_rng_state(self.rng, d["rng"])
        c = d["counters"]
        self.step, self.decisions, self.resets = c["step"], c["decisions"], c["resets"]
        self.next_eval, self.next_ckpt, self.debt = c["next_eval"], c["next_ckpt"], c["debt"]
        self.log, self.episodes, self.best = d["log"], d["episodes"], d["best"]
        self.demo_stats, self.timing = d["demo_stats"], d["timing"]
        self.resumed_from = d["resumed_from"] + [self.step]
        self.initialised_from = d.get("initialised_from")

    # what an agent's weights are shaped by: a fine-tune (--init) must agree on each
    INIT_KEYS = ("task", "obs", "width", "height", "encoder_train", "locator", "locate_at_start",
                 "action_repeat", "agent.algo",
                 "agent.net", "agent.critics", "agent.layer_norm", "agent.gripper_binary")

    def init_from(self, where: str) -> None:
        """--init: the agent (weights, optimisers, its update count) of another run's checkpoint, and with
        --init-replay its replay; that run's counters and curve stay there. Raises LearnError naming the file and
        each field that disagrees."""
        path = Path(where)
        if path.is_dir():
            found = [path / "checkpoint.pt"] if (path / "checkpoint.pt").is_file() else \
                sorted(path.glob("seed-*/checkpoint.pt"))
            if len(found) != 1:
                raise LearnError(f"--init {path}: expected one checkpoint.pt (in it or one seed-*/), found "
                                 f"{len(found)}")
            path = found[0]
        if not path.is_file():
            raise LearnError(f"--init {path}: no such checkpoint")
        try:
            d = ckpt.load(path)
            theirs = LearnConfig.from_dict(d["config"]).to_dict()
        except Exception as e:  # torch.load of a torn or foreign file raises many kinds
            raise LearnError(f"--init {path}: not a learner's checkpoint ({type(e).__name__}: {e})") from None
        mine = self.cfg.to_dict()

        def get(c, key):
            for part in key.split("."):
                c = c[part]
            return c
        wrong = [f"{k} {get(theirs, k)!r} (this run: {get(mine, k)!r})" for k in self.INIT_KEYS
                 if get(theirs, k) != get(mine, k)]
        if wrong:
            raise LearnError(f"--init {path}: trained with another set-up: {'; '.join(wrong)}")
        try:
            self.agent.load_state_dict(d["agent"])
            if self.cfg.init_replay:  # room for both: the source's experience and this run's
                self._grow_replay(self.buf.cap + d["replay"]["cap"])
                self.buf.load_state_dict(d["replay"])
        except (RuntimeError, KeyError, ValueError) as e:
            raise LearnError(f"--init {path}: its agent or replay does not fit this run's: {e}") from None
        self.initialised_from = {"checkpoint": str(path), "steps": d["counters"]["step"],
                                 "updates": int(self.agent.updates),
                                 "replay": int(d["replay"]["n"]) if self.cfg.init_replay else 0}

    def _grow_replay(self, cap: int) -> None:
        """The replay, emptied, with room for `cap` transitions (a buffer to load a larger one into)."""
        if cap > self.buf.cap:
            old = self.buf
            self.buf = Replay(cap, old.s.shape[1] + old.pix, old.a.shape[1], old.pix)
            self.buf.transform = old.transform

    def own_updates(self) -> int:
        """Critic updates this run made (not counting those of an --init agent)."""
        return self.agent.updates - (self.initialised_from or {}).get("updates", 0)

    def wall(self) -> float:
        return self.timing["wall_before_s"] + time.time() - self.t0

    # ------------------------------------------------------------------------------------------- the loop
    def run(self, resume: bool) -> dict:
        cfg = self.cfg
        self.t0 = time.time()
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        tag = f"{len(list(logs.glob('serve-train*.log')))}"  # a resumed run's servers log beside the first ones
        eval_max = cfg.eval_max_steps if cfg.eval_max_steps >= 0 else cfg.max_steps
        # The training server: a running one (--serve-endpoint: it outlives this process) or one of our own,
        # which dies with us (a resumed run starts a fresh one).
        own = contextlib.nullcontext(None) if cfg.serve_endpoint else launch.serve(
            *serve_args(cfg, cfg.reward, self.robot, cfg.envs, cfg.max_steps), "--seed",
            str(train_seed_base(self.seed)), log=str(logs / f"serve-train{tag}.log"), die_with_parent=True)
        with own as srv, \
                launch.serve(*serve_args(cfg, "sparse", self.eval_robot, cfg.eval_envs, eval_max),
                             log=str(logs / f"serve-eval{tag}.log"), die_with_parent=True) as esrv:
            where = cfg.serve_endpoint or srv.endpoint
            first = bool(cfg.locate_at_start)
            self.train = Envs(where, self.robot, cfg.envs, cfg.reward_form.gamma, srv, obs=cfg.obs,
                              remember_first=first)
            self.evals = Envs(esrv.endpoint, self.eval_robot, cfg.eval_envs, None, esrv, obs=cfg.obs,
                              remember_first=first)
            try:
                wrong = reward_mismatch(cfg, self.train.envs[0].reward_spec)
                if wrong:
                    what = srv.log if srv is not None else f"{self.robot} at {where}"
                    raise ServeError(f"the training server ({what}) serves another reward: " + "; ".join(wrong))
                self._build(self.train.envs[0])
                if resume and (self.dir / "checkpoint.pt").exists():
                    self.load_state_dict(ckpt.load(self.dir / "checkpoint.pt"))
                else:
                    if cfg.init:
                        self.init_from(cfg.init)
                    if self.demo_buf is not None:
                        self.demo_stats = self._replay_demos()
                self._start_episodes()
                self._loop()
                self._evaluate(self.step)
                self.last = str(self._export(self.policy_dir, self._name(),
                                             self._describe(f"{self.step} env steps")))
            finally:
                self.train.close()
                self.evals.close()
        self.save_checkpoint(done=True)
        return self.record(done=True)

    def _replay_demos(self) -> dict:
        from .demos import replay_demos

        return replay_demos(self.train.envs[0], self.demos, self.cfg, self.demo_buf,
                            lambda env, seed: reset(env, seed, srv=self.train.srv))

    def _start_episodes(self) -> None:
        self.obs = [self._reset(i) for i in range(self.cfg.envs)]
        self.ep_ret, self.ep_len = [0.0] * self.cfg.envs, [0] * self.cfg.envs
        if self.flipper is not None:
            for i in range(self.cfg.envs):
                self.flipper.end_episode(i)

    def _reset(self, i: int):
        # explicit seeds counted in the checkpoint: a resumed run's fresh servers never repeat a training episode
        o, _ = reset(self.train.envs[i], train_seed_base(self.seed) + self.resets, srv=self.train.srv)
        self.resets += 1
        return o

    def _loop(self) -> None:
        cfg = self.cfg
        while self.step < cfg.steps:
            if self.step >= self.next_eval:
                self._evaluate(self.step)
                self.next_eval += cfg.eval_every
            if cfg.checkpoint_every and self.step >= self.next_ckpt:
                self.next_ckpt += cfg.checkpoint_every
                self.save_checkpoint(done=False)
            te = time.time()
            self._collect()
            self.timing["env_s"] += time.time() - te
            tu = time.time()
            self._learn()
            self.timing["update_s"] += time.time() - tu
            self.report(self.step, self.log[-1]["success"] if self.log else None)

    def _collect(self) -> None:
        """One decision per env: the action held up to `action_repeat` env steps (fewer when the episode ends); its
        reward is the discounted sum of the served rewards, its discount gamma^j."""
        cfg, gamma = self.cfg, self.cfg.reward_form.gamma
        if cfg.agent.algo == "td3" and cfg.expl_noise_end >= 0:
            frac = min(self.step / cfg.steps, 1.0)
            self.agent.noise = cfg.agent.expl_noise + (cfg.expl_noise_end - cfg.agent.expl_noise) * frac
        if self.step < cfg.random_steps:
            acts = self.rng.uniform(-1, 1, (cfg.envs, self.a_dim)).astype(np.float32)
        else:
            acts = self.agent.act(np.stack(self.obs), deterministic=False)
            if self.flipper is not None:
                self.flipper(acts, self.rng)
        r_acc, g_acc = [0.0] * cfg.envs, [1.0] * cfg.envs
        live, ends, advice = list(range(cfg.envs)), {}, uses_advice(cfg)
        for _ in range(cfg.action_repeat):
            for i, (o2, r, term, trunc, info) in step_all(self.train, live, acts).items():
                r = learner_reward(r, info, advice)
                r_acc[i] += g_acc[i] * r
                g_acc[i] *= gamma
                self.ep_ret[i] += r
                self.ep_len[i] += 1
                self.step += 1
                ends[i] = (o2, term, term or trunc, info)
            live = [i for i in live if not ends[i][2]]
            if not live:
                break
        for i in range(cfg.envs):
            o2, term, done, info = ends[i]
            self.nsteps[i].push(self.obs[i], acts[i], r_acc[i], o2, term, done, self.buf, g=g_acc[i],
                                adv=float(info.get("phi") or 0.0) if advice else 0.0)
            self.decisions += 1
            if done:
                sim_success = bool(info["success"])
                success = bool(term) if cfg.episode_ends == "model" else sim_success
                self.episodes.append((self.step, success, float(info.get("progress_oracle") or 0.0),
                                      self.ep_len[i], self.ep_ret[i], sim_success))
                self.ep_ret[i], self.ep_len[i] = 0.0, 0
                o2 = self._reset(i)
                if self.flipper is not None:
                    self.flipper.end_episode(i)
            self.obs[i] = o2

    def _learn(self) -> None:
        cfg = self.cfg
        if self.step < cfg.learning_starts or self.buf.n + (self.demo_buf.n if self.demo_buf else 0) < cfg.batch:
            return
        self.debt += cfg.utd * cfg.envs
        while self.debt >= 1.0:
            self.debt -= 1.0
            batch = sample(self.buf, self.demo_buf, cfg.batch, cfg.demo_ratio)
            self.agent.update(self.symmetry(batch) if self.symmetry else batch,
                              actor_step=(self.agent.updates % cfg.actor_every == 0))

    # ------------------------------------------------------------------------------------ eval and files
    def _export(self, out_dir, name: str, description: str, agent=None):
        """The actor (of `agent`, default this run's) as a policy the runtime runs: its manifest names the state
        fields it reads and, with --obs embeddings, the reward model's encoder whose embeddings come first in its
        input."""
        return export_policy(agent or self.agent, out_dir, name, task=self.cfg.task, state_names=self.export_names,
                             description=description, action_repeat=self.cfg.action_repeat,
                             embeddings=self.export_embeddings, pixels=self.export_pixels)

    def _name(self, suffix: str = "") -> str:
        return f"{self.cfg.task}-{self.cfg.reward}-{self.seed}{suffix}"

    def _describe(self, what: str) -> str:
        cfg = self.cfg
        return (f"{cfg.agent.algo.upper()}, {cfg.reward} reward ({cfg.reward_form.shaping} form), seed {self.seed}, "
                f"{what} (python -m stagewise.rl)")

    def _evaluate(self, step: int) -> None:
        if self.log and self.log[-1]["steps"] == step:
            return  # a finished run extended (--resume --steps) was evaluated here at its end
        te = time.time()
        ev = evaluate(self.agent, self.evals, self.eval_seeds(), self.cfg.eval_repeat or self.cfg.action_repeat)
        self.timing["eval_s"] += time.time() - te
        self._record_eval(step, ev, self.agent)

    def eval_seeds(self) -> range:
        return range(self.cfg.eval_seed, self.cfg.eval_seed + self.cfg.eval_episodes)

    def _record_eval(self, step: int, ev: dict, agent, wall: Optional[float] = None) -> None:
        """An evaluation of `agent` (this run's, or a copy taken at `step` and wall time `wall`) into the curve;
        the best policy so far exported."""
        cfg = self.cfg
        recent = [e for e in self.episodes if e[0] > step - cfg.eval_every]
        ev.update(steps=step, updates=agent.updates, wall_s=self.wall() if wall is None else wall, **agent.stats,
                  train_episodes=len(self.episodes),
                  train_success=float(np.mean([e[1] for e in recent])) if recent else float("nan"),
                  train_return=float(np.mean([e[4] for e in recent])) if recent else float("nan"))
        if cfg.episode_ends == "model":
            ev.update(detection_stats(recent))
        if self.log and self.log[-1]["steps"] == step:
            self.log[-1] = ev  # the final evaluation of a run that ended on an evaluation step
        else:
            self.log.append(ev)
        desc = self._describe(f"{step} env steps, held-out eval {ev['success']:.2f}")
        self.on_evaluate(ev)
        if cfg.export_checkpoints and step > 0:
            self._export(self.dir / "checkpoints", self._name(f"-{step // 1000}k"), desc, agent)
        if ev["success"] >= self.best["success"] and step > 0:
            path = self._export(self.policy_dir, self._name("-best"), desc, agent)
            self.best = {"success": ev["success"], "steps": step, "manifest": str(path)}

    def record(self, done: bool) -> dict:
        """This run's entry of curves.json."""
        cfg, wall = self.cfg, self.wall()
        rec = {"task": cfg.task, "reward": cfg.reward, "seed": self.seed, "steps": cfg.steps, "done": done,
               "demos": self.demo_stats, "checkpoints": self.log, "env_steps": self.step, "decisions": self.decisions,
               "replay_added": self.buf.added,
               "nstep_pending": sum(len(ns.buf) for ns in self.nsteps), "updates": self.agent.updates, "best": self.best,
               "train_episodes": len(self.episodes), "train_successes": int(sum(e[1] for e in self.episodes)),
               **({"detection": detection_stats(self.episodes)} if cfg.episode_ends == "model" else {}),
               "wall_s": wall, **{k: v for k, v in self.timing.items() if k != "wall_before_s"},
               "s_per_10k": wall / max(self.step, 1) * 1e4, "resumed_from": self.resumed_from,
               "first_80": next((c["steps"] for c in self.log if c["success"] >= 0.8), None)}
        if self.initialised_from:
            rec["initialised_from"] = self.initialised_from
        if self.last:
            rec["last"] = self.last  # the final policy's manifest
        return rec

    def save_checkpoint(self, done: bool) -> None:
        state = self.state_dict()
        state["done"], state["record"] = done, self.record(done)
        ckpt.save(self.dir / "checkpoint.pt", state)
        self.on_checkpoint(state["record"])

    def on_checkpoint(self, record: dict) -> None:
        """Hook: the caller rewrites curves.json with the curve so far."""

    def on_evaluate(self, ev: dict) -> None:
        """Hook: the caller shows the evaluation."""
