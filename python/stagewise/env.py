"""`StagewiseEnv`: a gymnasium Env that drives a remote env served by `stagewise serve` (docs/wire.md,
"Remote environment"), and `RemoteEnv`, the request/reply client under it."""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
import zenoh

from .errors import NoRuntimeError, RemoteError, StepTimeoutError, WireError
from .session import DEFAULT_ENDPOINT, DEFAULT_ROBOT, keys, open_session
from .wire import SCHEMA, decode, encode, observation, tensor


class PendingReply:
    """A query in flight; :meth:`result` waits for its reply."""

    def __init__(self, client: "RemoteEnv", key: str, kind: str, handler: Any, timeout: float):
        self._client, self.key, self.kind = client, key, kind
        self._handler, self._timeout, self._sent = handler, timeout, time.monotonic()

    def result(self) -> Dict[str, Any]:
        """The decoded reply. Raises StepTimeoutError, NoRuntimeError, RemoteError, WireError/SchemaError."""
        error = None
        for reply in self._handler:
            if reply.ok is not None:
                msg = decode(reply.ok.payload.to_bytes(), self.kind, self.key)
                if msg.get("error") is not None:
                    raise RemoteError(self.key, str(msg["error"]))
                return msg
            error = reply.err.payload.to_bytes().decode("utf-8", "replace")
        elapsed = time.monotonic() - self._sent
        if error is not None and "timeout" not in error.lower():
            raise RemoteError(self.key, error)
        if elapsed >= 0.9 * self._timeout or error is not None:
            raise StepTimeoutError(self.key, self._timeout, f"a `{self.kind}` reply")
        # Finalised early without a reply: no queryable matched the key (the server went away).
        raise NoRuntimeError(self.key, self._timeout, self._client.hint())


class RemoteEnv:
    """Request/reply client of one served env (`stagewise/<robot>/env/{reset,step}`).

    `session`: an open zenoh session (shared; not closed here) or None to open one with `connect`.
    `timeout`: seconds to wait for each reply. `connect_timeout`: seconds to wait for the server's queryable."""

    def __init__(
        self,
        robot: str = DEFAULT_ROBOT,
        *,
        connect: Union[str, Sequence[str], None] = None,
        session: Optional[zenoh.Session] = None,
        timeout: float = 10.0,
        connect_timeout: float = 10.0,
    ):
        self.robot = robot
        self.keys = keys(robot)
        self.timeout = float(timeout)
        self.connect = connect
        self._own_session = session is None
        self.session = session if session is not None else open_session(connect)
        self.connect_timeout = float(connect_timeout)
        self.wait_for_server(connect_timeout)

    def hint(self) -> str:
        where = f"at {self.connect}" if self.connect else f"at {DEFAULT_ENDPOINT} (the default; pass connect=...)"
        return (
            f"expected `stagewise serve --robot-name {self.robot}` (its env/reset and env/step queryables) "
            f"reachable {where}"
        )

    def wait_for_server(self, timeout: float) -> None:
        """Waits until the server's step queryable is reachable; NoRuntimeError after `timeout` seconds."""
        key = self.keys["env_step"]
        querier = self.session.declare_querier(key)
        try:
            deadline = time.monotonic() + timeout
            while not querier.matching_status.matching:
                if time.monotonic() >= deadline:
                    raise NoRuntimeError(key, timeout, self.hint())
                time.sleep(0.01)
        finally:
            querier.undeclare()

    def first_reset(self, seed: Optional[int] = None) -> Dict[str, Any]:
        """A reset retried until `connect_timeout`: right after a connection zenoh may report the queryable as
        matched before queries reach it (they then finalise at once without a reply)."""
        deadline = time.monotonic() + self.connect_timeout
        while True:
            try:
                return self.reset(seed)
            except NoRuntimeError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def _send(self, what: str, msg: Dict[str, Any], kind: str, timeout: Optional[float]) -> PendingReply:
        key = self.keys[what]
        t = self.timeout if timeout is None else float(timeout)
        handler = self.session.get(key, payload=encode(msg), timeout=t)
        return PendingReply(self, key, kind, handler, t)

    def reset_async(self, seed: Optional[int] = None, timeout: Optional[float] = None) -> PendingReply:
        req = {"schema": SCHEMA, "kind": "reset_request", "seed": None if seed is None else int(seed)}
        return self._send("env_reset", req, "reset_reply", timeout)

    def step_async(self, action: Sequence[float], timeout: Optional[float] = None) -> PendingReply:
        req = {"schema": SCHEMA, "kind": "step_request", "action": [float(a) for a in action]}
        return self._send("env_step", req, "step_reply", timeout)

    def reset(self, seed: Optional[int] = None, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The decoded `reset_reply` (spec, obs, reward spec)."""
        return self.reset_async(seed, timeout).result()

    def step(self, action: Sequence[float], timeout: Optional[float] = None) -> Dict[str, Any]:
        """The decoded `step_reply`."""
        return self.step_async(action, timeout).result()

    def close(self) -> None:
        if self._own_session and self.session is not None:
            self.session.close()
        self.session = None


def _box(b: Dict[str, Any], dtype=np.float32) -> gym.spaces.Box:
    low = np.asarray(b["low"], dtype=dtype)
    high = np.asarray(b["high"], dtype=dtype)
    return gym.spaces.Box(low=low, high=high, shape=low.shape, dtype=dtype)


def spaces_from_spec(
    spec: Dict[str, Any], images: bool = True, embedding: Optional[Tuple[int, ...]] = None
) -> Tuple[gym.Space, gym.spaces.Box]:
    """(observation_space, action_space) of an env spec: the state as a Box when the env serves no frames (or
    `images` is False) and no embedding, else a Dict with `state`, one uint8 [H, W, 3] Box per camera view and,
    when the server sends the reward model's embeddings (`serve --embeddings`; their shape `embedding`), an
    `embedding` float32 [views, E] Box."""
    state = _box(spec["state"])
    views = (spec.get("views") or []) if images else []
    if not views and embedding is None:
        return state, _box(spec["action"])
    d: Dict[str, gym.Space] = {"state": state}
    for v in views:
        d[v["name"]] = gym.spaces.Box(0, 255, (int(v["height"]), int(v["width"]), 3), np.uint8)
    if embedding is not None:
        d[EMBEDDING] = gym.spaces.Box(-np.inf, np.inf, tuple(embedding), np.float32)
    return gym.spaces.Dict(d), _box(spec["action"])


#: The observation key of the reward model's embeddings (`serve --embeddings`).
EMBEDDING = "embedding"


class StagewiseEnv(gym.Env):
    """A gymnasium Env backed by a remote env (`stagewise serve`).

    The constructor resets the remote env once to learn its spec (the `reset_reply` carries it) and builds
    `observation_space` (the state Box, or a Dict with the camera frames when the server sends them) and
    `action_space` from it. `info` carries `stage`, `progress_oracle`, `success`, `is_success` (read by SB3's
    Monitor), `action_clipped`, and with a shaped reward `task_reward` and `phi`.

    `gamma`: the learner's discount; when given, a shaped reward served with another gamma is refused (shaping is
    policy-invariant only when the two agree).

    `render_mode="rgb_array"`: :meth:`render` returns the last observation's camera frames side by side
    (uint8 [H, W * views, 3]); it needs a server that sends frames (`stagewise serve --images`), else ValueError.
    `observe_images=False`: the observation is the state alone even when the server sends frames (they are then
    kept for :meth:`render` only). `metadata["render_modes"]` is `["rgb_array"]` only when the server sends
    frames, and `render_fps` its control rate."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        robot: str = DEFAULT_ROBOT,
        *,
        connect: Union[str, Sequence[str], None] = None,
        session: Optional[zenoh.Session] = None,
        timeout: float = 10.0,
        connect_timeout: float = 10.0,
        gamma: Optional[float] = None,
        render_mode: Optional[str] = None,
        observe_images: bool = True,
    ):
        super().__init__()
        if render_mode not in (None, "rgb_array"):
            raise ValueError(
                f"render_mode={render_mode!r}: a Stagewise env renders 'rgb_array' (the camera frames the server "
                "sends) or nothing (None)"
            )
        self.render_mode = render_mode
        self._frames: Optional[Dict[str, np.ndarray]] = None
        self.client = RemoteEnv(
            robot, connect=connect, session=session, timeout=timeout, connect_timeout=connect_timeout
        )
        first = self.client.first_reset()
        self._check_reset(first)
        self.spec_msg: Dict[str, Any] = first["spec"]
        self.reward_spec: Optional[Dict[str, Any]] = first.get("reward")
        views = self.spec_msg.get("views") or []
        if render_mode == "rgb_array" and not views:
            self.client.close()
            raise ValueError(
                f"render_mode='rgb_array' needs camera frames, but `{self.client.keys['env_reset']}` sends the state "
                "only (start `stagewise serve` with --images)"
            )
        self.metadata = {
            **type(self).metadata,
            "render_modes": ["rgb_array"] if views else [],
            "render_fps": float(self.spec_msg.get("control_hz") or 50.0),
        }
        emb = first.get("embedding")
        emb_shape = tuple(tensor(emb, self.client.keys["env_reset"], "embedding").shape) if emb else None
        self.observation_space, self.action_space = spaces_from_spec(self.spec_msg, observe_images, emb_shape)
        self._keep_frames(observation(first["obs"], self.client.keys["env_reset"]))
        rs = self.reward_spec
        if gamma is not None and rs is not None and rs.get("source") != "sparse":
            if abs(float(rs["gamma"]) - float(gamma)) > 1e-9:
                self.client.close()
                raise ValueError(
                    f"`{self.client.keys['env_reset']}` shapes with gamma {rs['gamma']}, the learner uses {gamma}: "
                    "potential-based shaping keeps the optimal policy only when they are equal "
                    "(start `stagewise serve --gamma` with the learner's discount)"
                )
        self._needs_reset = True

    def _check_reset(self, msg: Dict[str, Any]) -> None:
        if msg.get("spec") is None or msg.get("obs") is None:
            raise WireError(self.client.keys["env_reset"], "reset_reply", "no `spec` or `obs` and no `error`")

    def _keep_frames(self, obs: Dict[str, Any]) -> None:
        if self.render_mode is not None:
            self._frames = obs["images"]

    def render(self):
        """The last observation's camera frames side by side, views in the spec's order (uint8 [H, W * views, 3]),
        with `render_mode="rgb_array"`; None without a render mode."""
        if self.render_mode is None or not self._frames:
            return None
        return np.concatenate([np.asarray(f) for f in self._frames.values()], axis=1)

    def _obs(self, msg: Dict[str, Any], key: str) -> Any:
        obs = observation(msg["obs"], key)
        self._keep_frames(obs)
        state = np.asarray(obs["state"], dtype=np.float32)
        if isinstance(self.observation_space, gym.spaces.Dict):
            out = {"state": state}
            for name in self.observation_space.spaces:
                if name == "state":
                    continue
                if name == EMBEDDING:
                    if msg.get(EMBEDDING) is None:
                        raise WireError(key, "reply", "no `embedding` (the server sent one at the first reset)")
                    out[name] = np.array(tensor(msg[EMBEDDING], key, EMBEDDING), dtype=np.float32)
                    continue
                if name not in obs["images"]:
                    raise WireError(key, "observation", f"no frame for view {name!r}")
                out[name] = obs["images"][name]
            return out
        return state

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        # A seeded reset is reproducible; later unseeded resets draw their seeds from np_random.
        episode_seed = int(seed) if seed is not None else int(self.np_random.integers(0, 2**63 - 1))
        msg = self.client.reset(episode_seed)
        self._check_reset(msg)
        self._needs_reset = False
        info = {"seed": episode_seed}
        if msg.get("phi") is not None:
            info["phi"] = float(msg["phi"])
        return self._obs(msg, self.client.keys["env_reset"]), info

    def step(self, action):
        return self.step_wait(self.step_async(action))

    def step_async(self, action) -> PendingReply:
        """Sends the step; :meth:`step_wait` returns gymnasium's 5-tuple (used by StagewiseVecEnv)."""
        a = np.asarray(action, dtype=np.float32).reshape(-1)
        if a.shape != self.action_space.shape:
            raise ValueError(
                f"`{self.client.keys['env_step']}`: expected an action of shape {self.action_space.shape}, "
                f"got {np.shape(action)}"
            )
        return self.client.step_async(a.tolist())

    def step_wait(self, pending: PendingReply):
        msg = pending.result()
        if msg.get("obs") is None:
            raise WireError(pending.key, "step_reply", "no `obs` and no `error`")
        info_msg = msg.get("info") or {}
        info: Dict[str, Any] = {
            "stage": info_msg.get("stage"),
            "progress_oracle": info_msg.get("progress_oracle"),
            "success": bool(info_msg.get("success", False)),
            "is_success": bool(info_msg.get("success", False)),
            "action_clipped": bool(info_msg.get("action_clipped", False)),
        }
        if msg.get("task_reward") is not None:
            info["task_reward"] = float(msg["task_reward"])
        if msg.get("phi") is not None:
            info["phi"] = float(msg["phi"])
        return (
            self._obs(msg, pending.key),
            float(msg["reward"]),
            bool(msg["terminated"]),
            bool(msg["truncated"]),
            info,
        )

    def close(self):
        if getattr(self, "client", None) is not None:
            self.client.close()
        super().close()
