"""The envs a learner steps: `stagewise serve` processes it starts (training: the reward asked for; evaluation: the
sparse reward), their connection, and the evaluation of a policy on held-out seeds.

A learner's servers are its children and die with it (Linux: the parent-death signal), even under `kill -9`;
`--resume` starts fresh ones. A server that dies or never answers is an error that names its log, not a hang."""

from __future__ import annotations

import contextlib
import time
from typing import List, Optional, Sequence

import numpy as np

from .. import launch
from ..env import StagewiseEnv
from ..errors import NoRuntimeError, ServeError, StagewiseError, StepTimeoutError
from ..launch import serve_died
from ..session import open_session
from ..vec_env import robot_names
from ..wire import value_horizon
from ..env import EMBEDDING
from .config import PROPRIOCEPTION, LearnConfig
from .pixels import PixelSpec, frames_vector


class LearnerEnv(StagewiseEnv):
    """A served env whose observation is one flat float32 vector: the state (--obs state); the reward model's
    embeddings of every view, flattened, then the proprioception PROPRIOCEPTION taken by name from the state (--obs
    embeddings); or every view's frame as raw bytes (pixels.frames_vector), then that proprioception (--obs
    pixels; `pixels` the views and size). `remember_first` (pixels): each observation is followed by the
    episode's first one (what the runtime feeds a policy whose manifest says `pixels.remember_first`).
    `last_state` keeps the last observation's full state (for the demonstrations' replay check only: it never
    reaches the policy)."""

    def __init__(self, *args, obs: str = "state", remember_first: bool = False, **kw):
        self.obs_kind = obs
        self.remember_first = remember_first and obs == "pixels"
        self.first: Optional[np.ndarray] = None
        self.last_state: Optional[np.ndarray] = None
        self.pixels: Optional[PixelSpec] = None
        super().__init__(*args, **kw)
        if obs == "state":
            self.feature_names = list(self.spec_msg["state"]["names"])
            return
        where = self.client.keys["env_reset"]
        spaces = getattr(self.observation_space, "spaces", {})
        names = list(self.spec_msg["state"]["names"])
        missing = [n for n in PROPRIOCEPTION if n not in names]
        if missing:
            self.client.close()
            raise ServeError(f"{where}: the state has no {', '.join(missing)}")
        self.proprio = [names.index(n) for n in PROPRIOCEPTION]
        if obs == "embeddings":
            if EMBEDDING not in spaces:
                self.client.close()
                raise ServeError(f"{where}: --obs embeddings, but the server sends no `embedding` (start it with "
                                 "--embeddings)")
            views, e = spaces[EMBEDDING].shape
            self.feature_names = [f"emb{v}_{k}" for v in range(views) for k in range(e)] + list(PROPRIOCEPTION)
            return
        views = self.spec_msg.get("views") or []
        if not views:
            self.client.close()
            raise ServeError(f"{where}: --obs pixels, but the server sends no camera frames (start it with --images)")
        sizes = {(int(v["height"]), int(v["width"])) for v in views}
        if len(sizes) != 1:
            self.client.close()
            raise ServeError(f"{where}: --obs pixels needs every view at one size, the server sends {sorted(sizes)}")
        (h, w), = sizes
        self.pixels = PixelSpec([v["name"] for v in views], h, w)
        self.feature_names = [f"pix{k}" for k in range(self.pixels.size)] + list(PROPRIOCEPTION)
        if self.remember_first:
            self.feature_names += [f"first_{n}" for n in self.feature_names]

    def _obs(self, msg, key):
        o = super()._obs(msg, key)
        if isinstance(o, dict):
            self.last_state = o["state"]
            if self.obs_kind == "embeddings":
                return np.concatenate([o[EMBEDDING].reshape(-1), o["state"][self.proprio]]).astype(np.float32)
            if self.obs_kind == "pixels":
                row = np.concatenate([frames_vector(o, self.pixels), o["state"][self.proprio]]).astype(np.float32)
                if not self.remember_first:
                    return row
                if key == self.client.keys["env_reset"] or self.first is None:
                    self.first = row
                return np.concatenate([row, self.first])
            return o["state"]
        self.last_state = o
        return o


class Envs:
    """The N envs of one `stagewise serve --envs N`, stepped concurrently (all queries out, then the replies).
    `srv`: the server process, checked while connecting so that a server that died is reported at once. `obs`:
    what each env observes (LearnerEnv)."""

    def __init__(self, endpoint: str, robot: str, n: int, gamma: Optional[float], srv: Optional[launch.Process] = None,
                 patience: float = 300.0, obs: str = "state", remember_first: bool = False):
        self.srv = srv
        self.session = open_session(endpoint)
        self.envs: List[LearnerEnv] = []
        deadline = time.monotonic() + patience
        try:
            for r in robot_names(robot, n):
                while True:
                    if srv is not None and not srv.alive():
                        raise serve_died(srv, f"connecting to {r}")
                    try:  # short waits, so that a dead server is noticed within seconds
                        self.envs.append(LearnerEnv(r, session=self.session, connect_timeout=2, gamma=gamma,
                                                    timeout=60, obs=obs, remember_first=remember_first))
                        break
                    except NoRuntimeError:
                        if time.monotonic() >= deadline:
                            raise ServeError(f"no `stagewise serve` answered as {r} at {endpoint} within "
                                             f"{patience:.0f} s") from None
        except BaseException:
            self.close()
            raise

    def check(self, err: Exception) -> Exception:
        """The error to raise for a failed query: the server's death (with its log) when it died."""
        if self.srv is not None and not self.srv.alive():
            return serve_died(self.srv, str(err))
        return err

    def close(self):
        for e in self.envs:
            e.client.close()
        self.session.close()


def reset(env: StagewiseEnv, seed=None, patience: float = 120.0, srv: Optional[launch.Process] = None):
    """env.reset, retried while no server answers (seen once in a long run on the loaded machine: a reset query
    finalised without a reply although the server was up; the session reconnects). A dead server is an error."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return env.reset(seed=seed)
        except NoRuntimeError:
            if srv is not None and not srv.alive():
                raise serve_died(srv, f"resetting {env.client.robot}") from None
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)


def step_all(envs: Envs, todo: Sequence[int], acts) -> dict:
    """Steps envs `todo` with `acts[i]` concurrently; {i: (obs, reward, terminated, truncated, info)}."""
    try:
        pend = [(i, envs.envs[i].step_async(acts[i])) for i in todo]
        return {i: envs.envs[i].step_wait(p) for i, p in pend}
    except (StagewiseError, StepTimeoutError) as e:
        raise envs.check(e) from e


def evaluate(agent, envs: Envs, seeds, repeat: int = 1) -> dict:
    """Deterministic success on `seeds`; each action is held `repeat` env steps (as the runtime runs the export)."""
    todo, results, active = list(seeds), [], {}
    while todo or active:
        for i, env in enumerate(envs.envs):
            if i not in active and todo:
                o, _ = reset(env, todo.pop(0), srv=envs.srv)
                active[i] = [o, 0, None]
        idx = sorted(active)
        need = [i for i in idx if active[i][1] % repeat == 0]
        if need:
            acts = agent.act(np.stack([active[i][0] for i in need]), deterministic=True)
            for j, i in enumerate(need):
                active[i][2] = acts[j]
        for i, (o, _, term, trunc, info) in step_all(envs, idx, {i: active[i][2] for i in idx}).items():
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


def uses_advice(cfg: LearnConfig) -> bool:
    """Look-ahead advice: the learner trains on the task reward and regresses the served phi (config.RewardConfig)."""
    return cfg.reward_form.shaping == "advice" and cfg.reward != "sparse"


def learner_reward(served: float, info: dict, advice: bool) -> float:
    """The reward the learner trains on: the served one, or with advice the step's task reward alone."""
    if not advice:
        return served
    if info.get("task_reward") is None:
        raise ServeError("--shaping advice: the training server's step reply has no `task_reward`")
    return float(info["task_reward"])


def shaping_args(cfg: LearnConfig) -> List[str]:
    """The reward-form flags of the training `serve` (the runtime's contract: `--shaping potential|progress`,
    `--potential-scale`, `--success-progress-one`, `--phi-offset`). The served default (potential, offset 0) adds
    no flag."""
    r = cfg.reward_form
    if cfg.reward == "sparse":
        return []
    if r.shaping == "advice":  # the server's default form; the learner reads its task reward and phi
        return []
    if r.shaping == "potential":
        return [] if r.phi_offset == 0.0 else ["--shaping", "potential", "--phi-offset", repr(r.phi_offset)]
    if r.shaping == "value":
        return ["--shaping", f"value:{r.value_horizon!r}"]
    out = ["--shaping", "progress", "--potential-scale", repr(r.potential_scale)]
    return out + (["--success-progress-one"] if r.success_progress_one else [])


def reward_mismatch(cfg: LearnConfig, spec: Optional[dict]) -> List[str]:
    """How the reward a training server says it serves (its reset reply's `reward` map, docs/wire.md) differs from
    the one asked for ([] when it is the same): the learner takes the served reward as it is, so it checks."""
    r, spec = cfg.reward_form, spec or {"source": "sparse"}
    want = {"source": cfg.reward}
    if cfg.reward != "sparse" and r.shaping == "advice":
        want.update(shaping_scale=r.shaping_scale, shaping="potential", phi_offset=0.0)
    elif cfg.reward != "sparse":
        want.update(shaping_scale=r.shaping_scale, shaping=r.shaping)
        if r.shaping == "progress":
            want.update(potential_scale=r.potential_scale, success_progress_one=r.success_progress_one)
        elif r.shaping == "value":
            want.update(value_horizon=r.value_horizon)
        else:
            want.update(phi_offset=r.phi_offset)
    # a server older than the reward forms sends no `shaping`: it shaped with the potential, offset 0
    got = {"shaping": "potential", "phi_offset": 0.0, **spec}
    k = value_horizon(got["shaping"])
    if k is not None:  # "value:K" carries its K (a malformed one is reported as a mismatch of `shaping`)
        got.update(shaping="value", value_horizon=k)
    out = []
    for k, v in want.items():
        g = got.get(k)
        same = abs(float(g) - float(v)) <= 1e-9 if isinstance(v, float) and g is not None else g == v
        if not same:
            out.append(f"{k}: serves {g!r}, asked {v!r}")
    return out


def serve_args(cfg: LearnConfig, reward: str, robot: str, envs: int, max_steps: int) -> List[str]:
    """`stagewise serve`'s flags for the training server (`reward` = cfg.reward) or the evaluation server
    ("sparse": the simulator's success is what is evaluated). With --obs embeddings both serve the reward model's
    embeddings, which the policy reads (the evaluation server's reward is then the model's, unread); with --obs
    pixels both put their --width x --height camera frames on the observations."""
    training = reward == cfg.reward
    if cfg.obs == "embeddings":
        reward = "model"
    args = ["--task", cfg.task, "--reward", reward, "--envs", str(envs), "--robot-name", robot,
            "--gamma", repr(cfg.reward_form.gamma), "--shaping-scale", repr(cfg.reward_form.shaping_scale)]
    if max_steps:
        args += ["--max-steps", str(max_steps)]
    if cfg.obs == "embeddings":
        args += ["--embeddings"]
    if cfg.obs == "pixels":
        args += ["--images"]
    if reward == "model" or cfg.obs == "pixels":
        args += ["--width", str(cfg.width), "--height", str(cfg.height)]
        if cfg.model:
            args += ["--model", cfg.model]
    if training:
        args += shaping_args(cfg)
        if cfg.oracle_trap:
            args += [f"--oracle-trap={cfg.oracle_trap}"]  # one word: Z may be negative
        if cfg.episode_ends == "model":
            args += ["--episode-ends", "model", "--success-delta", repr(cfg.success_delta),
                     "--success-steps", str(cfg.success_steps)]
    return args


@contextlib.contextmanager
def one_model_env(task: str, model: str, max_steps: int, robot: str):
    """One env of a `stagewise serve --reward model --envs 1` (32x32 frames; `model`: a manifest, or "" for the
    task's shipped model), closed on exit: what the probes (benches/probe_*.py) read phi from."""
    extra = ["--model", model] if model else []
    with launch.serve("--task", task, "--reward", "model", "--envs", "1", "--robot-name", robot, "--seed", "0",
                      "--width", "32", "--height", "32", "--max-steps", str(max_steps), *extra) as srv:
        envs = Envs(srv.endpoint, robot, 1, None, srv)
        try:
            yield envs.envs[0]
        finally:
            envs.close()
