"""Gymnasium ids of the simulated tasks: `stagewise/PickPlace-v0`, `stagewise/PushTarget-v0`, `stagewise/Stack-v0`.

`gymnasium.make("stagewise/PushTarget-v0", reward="model")` starts a `stagewise serve` for the env (a child of this
process: it dies with it, and `close()` ends it), or joins a running one with `endpoint=` (and `robot_name=`).
`gymnasium.make_vec(id, num_envs=N)` gives :class:`stagewise.vector.StagewiseVectorEnv`: one `serve --envs N`.

The ids are registered on `import stagewise`. Gymnasium 1.x loads no plugins from package entry points, so after
`import gymnasium` alone name the module in the id: `gymnasium.make("stagewise:stagewise/PushTarget-v0")`.

Episode length: gymnasium's TimeLimit wrapper ends an episode after `max_episode_steps` (the id's default is the
simulator's: 300 steps for push-target, 400 for the others); a server an env starts for itself then runs episodes
without a limit of its own, so that any `max_episode_steps` holds. A vector env's server truncates itself."""

from __future__ import annotations

import os
import tempfile
import time
import weakref
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional, Sequence

import gymnasium as gym

from . import launch
from .wire import value_horizon
from .env import StagewiseEnv
from .errors import NoRuntimeError, ServeError
from .session import DEFAULT_ROBOT, open_session

#: id name -> `stagewise serve --task`.
TASKS = {"PickPlace": "pick-place", "PushTarget": "push-target", "Stack": "stack"}
#: The simulator's episode lengths (sim/src/config.rs, `SimConfig::new`): each id's `max_episode_steps`.
MAX_EPISODE_STEPS = {"pick-place": 400, "push-target": 300, "stack": 400}
REWARDS = ("sparse", "model", "oracle")
#: `serve --max-steps` of a server started for one env: the TimeLimit wrapper ends its episodes.
NO_LIMIT = 10**9


def env_ids() -> List[str]:
    """The registered ids."""
    return [f"stagewise/{name}-v0" for name in TASKS]


def register_envs() -> None:
    """Registers the ids with gymnasium (once; `import stagewise` does it)."""
    for name, task in TASKS.items():
        env_id = f"stagewise/{name}-v0"
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="stagewise.registration:TaskEnv",
            vector_entry_point="stagewise.vector:StagewiseVectorEnv",
            max_episode_steps=MAX_EPISODE_STEPS[task],
            kwargs={"task": task},
        )


@dataclass
class ServeOptions:
    """What a started `stagewise serve` is asked for: the keyword arguments of the ids that become its flags
    (None: the server's default). Checked before anything starts; against a joined server, the reward options
    given are checked against the reward it serves."""

    reward: Optional[str] = None
    model: Optional[str] = None
    gamma: Optional[float] = None
    shaping_scale: Optional[float] = None
    shaping: Optional[str] = None
    potential_scale: Optional[float] = None
    success_progress_one: Optional[bool] = None
    phi_offset: Optional[float] = None
    width: Optional[int] = None
    height: Optional[int] = None
    serve_args: Sequence[str] = ()

    def validate(self, task: str) -> None:
        """ValueError naming the keyword and what it takes, for anything `serve` would refuse."""
        if task not in MAX_EPISODE_STEPS:
            raise ValueError(f"task={task!r}: one of {', '.join(MAX_EPISODE_STEPS)}")
        if self.reward is not None and self.reward not in REWARDS:
            raise ValueError(f"reward={self.reward!r}: one of {', '.join(map(repr, REWARDS))}")
        sparse = self.reward in (None, "sparse")
        shaping_kw = [k for k in ("shaping", "potential_scale", "success_progress_one", "phi_offset")
                      if getattr(self, k) not in (None, False)]
        if sparse and shaping_kw:
            raise ValueError(f"{', '.join(shaping_kw)}: the sparse reward has no progress to shape "
                             "(pass reward='model' or 'oracle')")
        if self.model is not None and self.reward != "model":
            raise ValueError(f"model={self.model!r} needs reward='model' (got reward={self.reward!r})")
        if self.shaping is not None and self.shaping not in ("potential", "progress") and not (
            self.shaping.startswith("rank:") and self.shaping[5:].isdigit()
        ) and value_horizon(self.shaping) is None:
            raise ValueError(f"shaping={self.shaping!r}: 'potential', 'value:K' (K > 0 steps per whole task), "
                             "'progress' or 'rank:W' (W a window in steps)")
        form = self.shaping or "potential"
        if self.potential_scale is not None and form != "progress":
            raise ValueError(f"potential_scale needs shaping='progress' (this is shaping={form!r})")
        if self.success_progress_one and form != "progress":
            raise ValueError(f"success_progress_one needs shaping='progress' (this is shaping={form!r})")
        if self.phi_offset is not None and form != "potential":
            raise ValueError(f"phi_offset needs shaping='potential' (this is shaping={form!r})")
        if self.gamma is not None and not 0.0 < float(self.gamma) <= 1.0:
            raise ValueError(f"gamma={self.gamma!r}: the learner's discount, in (0, 1]")
        for k in ("width", "height"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"{k}={v!r}: camera pixels, an int >= 1")
        if isinstance(self.serve_args, str) or not all(isinstance(a, str) for a in self.serve_args):
            raise ValueError(f"serve_args={self.serve_args!r}: a list of `stagewise serve` flags as strings")

    def argv(self, task: str, envs: int, robot: str, max_steps: int, images: bool) -> List[str]:
        """The `stagewise serve` flags (its own --listen comes from launch). The server runs in the checkout (for
        `models/`), so a relative `model` path is made absolute here."""
        if self.model is not None:
            self.model = os.path.abspath(self.model)
        args = ["--task", task, "--envs", str(envs), "--robot-name", robot, "--max-steps", str(max_steps)]
        if self.reward is not None:
            args += ["--reward", self.reward]
        for k in ("model", "gamma", "shaping_scale", "shaping", "potential_scale", "phi_offset", "width", "height"):
            v = getattr(self, k)
            if v is not None:
                args += [f"--{k.replace('_', '-')}", str(v) if not isinstance(v, float) else repr(v)]
        if self.success_progress_one:
            args.append("--success-progress-one")
        if images:
            args.append("--images")
        if self.reward == "model" and self.width is None and self.height is None:
            size = model_image_size(task, self.model)
            if size is not None:  # render no more than the model reads
                args += ["--width", str(size[0]), "--height", str(size[1])]
        return args + list(self.serve_args)

    def mismatch(self, served: Optional[Dict[str, Any]]) -> List[str]:
        """How a joined server's reward spec (its reset reply's `reward`) differs from the options given."""
        served = {"shaping": "potential", "phi_offset": 0.0, **(served or {"source": "sparse"})}
        want: Dict[str, Any] = {}
        if self.reward is not None:
            want["source"] = self.reward
        for k in ("shaping_scale", "shaping", "potential_scale", "phi_offset"):
            if getattr(self, k) is not None:
                want[k] = getattr(self, k)
        if self.success_progress_one is not None:
            want["success_progress_one"] = bool(self.success_progress_one)
        out = []
        for k, v in want.items():
            g = served.get(k)
            if k == "shaping" and value_horizon(v) is not None:  # "value:100" is "value:100.0"
                same = value_horizon(g) is not None and abs(value_horizon(g) - value_horizon(v)) <= 1e-9
            else:
                same = g is not None and abs(float(g) - float(v)) <= 1e-9 if isinstance(v, float) else g == v
            if not same:
                out.append(f"{k}: serves {g!r}, asked {v!r}")
        return out


def model_image_size(task: str, model: Optional[str]):
    """(width, height) of a reward model's frames (its manifest's [image]); None when it cannot be read here
    (the server then renders at its default size and reports any error itself)."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        try:
            import tomli as tomllib
        except ImportError:
            return None
    path = model or os.path.join(launch.repo_root(), "models", task, f"{task}-progress.toml")
    try:
        with open(path, "rb") as f:
            image = tomllib.load(f).get("image") or {}
        return int(image["width"]), int(image["height"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class OwnedServe:
    """A `stagewise serve` started for an env: a child that dies with this process (Linux: the parent-death
    signal), logging to a temporary file, stopped by :meth:`stop` (also when the env is garbage-collected). The
    log is removed with it, unless `keep_log` (an error message names it)."""

    def __init__(self, args: Sequence[str]):
        fd, self.log = tempfile.mkstemp(prefix="stagewise-serve-", suffix=".log")
        os.close(fd)
        try:
            self.process = launch.serve(*args, log=self.log, die_with_parent=True)
        except BaseException:
            os.unlink(self.log)
            raise
        self._keep = [False]
        self._finalizer = weakref.finalize(self, _stop, self.process, self.log, self._keep)

    @property
    def endpoint(self) -> str:
        return self.process.endpoint

    @property
    def pid(self) -> int:
        return self.process.proc.pid

    def stop(self, keep_log: bool = False) -> None:
        """Ends the server (SIGTERM, then SIGKILL after 10 s) and removes its log (unless `keep_log`)."""
        self._keep[0] = self._keep[0] or keep_log
        self._finalizer()


def _stop(process: launch.Process, log: str, keep: list) -> None:
    process.stop()
    if keep[0]:
        return
    try:
        os.unlink(log)
    except OSError:
        pass


def connect(name: str, attempt, *, server: Optional[OwnedServe], endpoint: str, patience: float):
    """`attempt(connect_timeout)` (which builds a StagewiseEnv for robot `name`), retried while a started server
    comes up: its exit is reported at once with its log, and one that does not answer within `patience`
    seconds too. Against a joined server (`server` None) one attempt with `patience` as its wait."""
    if server is None:
        return attempt(patience)
    deadline = time.monotonic() + patience
    while True:
        if not server.process.alive():
            raise launch.serve_died(server.process, f"starting the env {name!r}")
        try:
            return attempt(2.0)
        except NoRuntimeError:
            if time.monotonic() >= deadline:
                raise ServeError(f"`{' '.join(server.process.argv[1:])}` did not answer as {name!r} at {endpoint} "
                                 f"within {patience:g} s (log {server.log}):\n    "
                                 f"{launch.log_tail(server.process)}") from None


def check_joined(env: StagewiseEnv, opts: ServeOptions) -> None:
    wrong = opts.mismatch(env.reward_spec)
    if wrong:
        raise ValueError(f"`{env.client.keys['env_reset']}` serves another reward than asked: " + "; ".join(wrong)
                         + " (the options of a joined server are its own: start it with them, or leave them out)")


class TaskEnv(StagewiseEnv):
    """The env behind the ids: a :class:`StagewiseEnv` over a `stagewise serve` it starts (and owns) or joins.

    Reward and shaping (as `stagewise serve` takes them; None: the server's default): `reward`
    ('sparse' | 'model' | 'oracle', default sparse), `model` (a manifest, reward='model'), `gamma` (the learner's
    discount; also checked against the served one), `shaping_scale`, `shaping` ('potential' | 'value:K' |
    'progress' | 'rank:W'), `potential_scale`, `success_progress_one`, `phi_offset`. Cameras: `width`, `height` (reward='model'
    defaults to the model's input size), `images=True` (frames in the observation: a Dict space),
    `render_mode='rgb_array'` (the frames side by side from render()). `serve_args`: more `serve` flags as
    strings (e.g. ['--random-colors', '--hz', '50']). `endpoint` (+ `robot_name`, default sim0): join that server
    instead (the reward options given are checked against what it serves). `timeout`: seconds per step reply;
    `connect_timeout`: seconds for the server to come up."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(
        self,
        task: str = "push-target",
        *,
        reward: Optional[str] = None,
        model: Optional[str] = None,
        gamma: Optional[float] = None,
        shaping_scale: Optional[float] = None,
        shaping: Optional[str] = None,
        potential_scale: Optional[float] = None,
        success_progress_one: Optional[bool] = None,
        phi_offset: Optional[float] = None,
        width: Optional[int] = None,
        height: Optional[int] = None,
        images: bool = False,
        render_mode: Optional[str] = None,
        serve_args: Sequence[str] = (),
        endpoint: Optional[str] = None,
        robot_name: Optional[str] = None,
        timeout: float = 10.0,
        connect_timeout: float = 60.0,
    ):
        opts = ServeOptions(reward, model, gamma, shaping_scale, shaping, potential_scale, success_progress_one,
                            phi_offset, width, height, tuple(serve_args))
        self.server: Optional[OwnedServe] = None
        self._session = None
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}: 'rgb_array' (the camera frames) or None")
        if endpoint is None:
            opts.validate(task)
        else:
            ServeOptions(reward=reward, gamma=gamma).validate(task)
            own = [f.name for f in fields(ServeOptions) if f.name not in ("reward", "gamma", "shaping_scale",
                   "shaping", "potential_scale", "success_progress_one", "phi_offset") and getattr(opts, f.name)]
            if own:
                raise ValueError(f"{', '.join(own)}: options of the server this env would start; with endpoint= "
                                 "the running server has its own")
        robot = robot_name or DEFAULT_ROBOT
        if endpoint is None:
            self.server = OwnedServe(opts.argv(task, 1, robot, NO_LIMIT, images or render_mode is not None))
        try:
            where = endpoint or self.server.endpoint
            self._session = open_session(where)
            connect(robot, lambda wait: StagewiseEnv.__init__(
                self, robot, connect=where, session=self._session, timeout=timeout, connect_timeout=wait,
                gamma=gamma, render_mode=render_mode, observe_images=images),
                server=self.server, endpoint=where, patience=connect_timeout)
            if endpoint is not None:
                check_joined(self, opts)
            if images and isinstance(self.observation_space, gym.spaces.Box):
                raise ValueError(f"images=True: `{self.client.keys['env_reset']}` sends the state only (a server "
                                 "started with --images sends the frames)")
            task_served = self.spec_msg.get("task")
            if task_served != task:
                raise ValueError(f"`{self.client.keys['env_reset']}` serves task {task_served!r}, not {task!r}")
        except BaseException:
            self.close(keep_log=True)
            raise

    def close(self, keep_log: bool = False):
        """Closes the connection and ends the server this env started (`keep_log`: keep its log file)."""
        super().close()
        if self._session is not None:
            self._session.close()
            self._session = None
        if self.server is not None:
            self.server.stop(keep_log)
