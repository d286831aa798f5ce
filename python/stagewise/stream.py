"""`TransitionStream`: iterate the transitions (and episodes) an actor (`stagewise run`) publishes."""

from __future__ import annotations

import queue
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
import zenoh

from .errors import StagewiseError, StepTimeoutError, WireError
from .session import open_session
from .wire import decode, observation


@dataclass
class Transition:
    """One environment step (docs/wire.md, `transition`). Arrays view the message bytes (read-only, no copy)."""

    robot: str
    env: int
    episode: int
    step: int
    action: np.ndarray
    reward: float
    task_reward: float
    phi: float
    phi_next: float
    gamma: float
    shaping_scale: float
    terminated: bool
    truncated: bool
    success: bool
    stage: Optional[int]
    stamp_ns: int
    #: `{step, time, images: {view: uint8 [H, W, 3]}, depth: {view: float32 [H, W]}, state: float32 [n]}`
    obs: Optional[Dict[str, Any]]
    next_obs: Optional[Dict[str, Any]]
    key: str
    #: The reward model whose progress shaped `reward`: the lowercase hex sha256 of its ONNX (its manifest's
    #: `sha256`); None when the reward is no model's (`--reward oracle|sparse`) or the actor predates the field.
    reward_model: Optional[str] = None

    @classmethod
    def from_msg(cls, m: Dict[str, Any], key: str) -> "Transition":
        return cls(
            robot=m["robot"],
            env=int(m["env"]),
            episode=int(m["episode"]),
            step=int(m["step"]),
            action=np.asarray(m["action"], dtype=np.float32),
            reward=float(m["reward"]),
            task_reward=float(m["task_reward"]),
            phi=float(m["phi"]),
            phi_next=float(m["phi_next"]),
            gamma=float(m["gamma"]),
            shaping_scale=float(m["shaping_scale"]),
            terminated=bool(m["terminated"]),
            truncated=bool(m["truncated"]),
            success=bool(m["success"]),
            stage=m.get("stage"),
            stamp_ns=int(m["stamp_ns"]),
            obs=observation(m.get("obs"), key),
            next_obs=observation(m.get("next_obs"), key),
            key=key,
            reward_model=reward_model_of(m, key),
        )


def reward_model_of(m: Dict[str, Any], key: str = "?") -> Optional[str]:
    """A transition's `reward_model` (docs/wire.md): absent or nil is None; anything but 64 lowercase hex digits
    raises :class:`WireError` naming the field."""
    v = m.get("reward_model")
    if v is None:
        return None
    if not (isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)):
        raise WireError(key, "transition", f"field `reward_model`: {v!r} is not a sha256 (64 lowercase hex digits)")
    return v


class TransitionStream:
    """Subscribes to `stagewise/<robot>/transition` (`robot="*"`: every robot) and iterates :class:`Transition`s.

    Messages that do not decode are counted in `errors` (with a warning) and skipped: malformed bytes never stop
    the stream. With `episodes=True` the finished-episode messages are kept too (:meth:`episodes`).
    `gamma`: the learner's discount; transitions shaped with another gamma raise (potential-based shaping is
    policy-invariant only when they agree)."""

    def __init__(
        self,
        robot: str = "*",
        *,
        connect: Union[str, Sequence[str], None] = None,
        session: Optional[zenoh.Session] = None,
        maxsize: int = 100_000,
        gamma: Optional[float] = None,
        episodes: bool = False,
    ):
        self.robot = robot
        self.key = f"stagewise/{robot}/transition"
        self.gamma = gamma
        self.errors = 0
        self.last_error: Optional[StagewiseError] = None
        self._own = session is None
        self.session = session if session is not None else open_session(connect)
        self._q: "queue.Queue[Transition]" = queue.Queue(maxsize)
        self._eq: "queue.Queue[Dict[str, Any]]" = queue.Queue(maxsize)
        self.dropped = 0
        self._sub = self.session.declare_subscriber(self.key, self._on_sample)
        self._esub = (
            self.session.declare_subscriber(f"stagewise/{robot}/episode", self._on_episode) if episodes else None
        )

    def _on_sample(self, sample: zenoh.Sample) -> None:
        key = str(sample.key_expr)
        try:
            t = Transition.from_msg(decode(sample.payload.to_bytes(), "transition", key), key)
        except (StagewiseError, KeyError, TypeError, ValueError) as e:
            self.errors += 1
            self.last_error = e if isinstance(e, StagewiseError) else StagewiseError(f"`{key}`: {e!r}")
            warnings.warn(str(self.last_error), RuntimeWarning, stacklevel=1)
            return
        try:
            self._q.put_nowait(t)
        except queue.Full:
            self.dropped += 1

    def _on_episode(self, sample: zenoh.Sample) -> None:
        key = str(sample.key_expr)
        try:
            self._eq.put_nowait(decode(sample.payload.to_bytes(), "episode", key))
        except StagewiseError as e:
            self.errors += 1
            self.last_error = e
        except queue.Full:
            self.dropped += 1

    def recv(self, timeout: Optional[float] = None) -> Transition:
        """The next transition; StepTimeoutError when none arrives within `timeout` seconds."""
        try:
            t = self._q.get(timeout=timeout)
        except queue.Empty:
            raise StepTimeoutError(self.key, float(timeout or 0), "a `transition` message") from None
        if self.gamma is not None and t.shaping_scale != 0 and abs(t.gamma - self.gamma) > 1e-9:
            raise ValueError(
                f"`{t.key}`: transition shaped with gamma {t.gamma}, the learner uses {self.gamma} "
                "(potential-based shaping keeps the optimal policy only when they are equal)"
            )
        return t

    def episodes(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The next `episode` message (needs `episodes=True`)."""
        if self._esub is None:
            raise StagewiseError("TransitionStream(episodes=True) keeps episode messages")
        try:
            return self._eq.get(timeout=timeout)
        except queue.Empty:
            raise StepTimeoutError(f"stagewise/{self.robot}/episode", float(timeout or 0), "an `episode` message") from None

    def __iter__(self):
        return self

    def __next__(self) -> Transition:
        return self.recv()

    def close(self) -> None:
        self._sub.undeclare()
        if self._esub is not None:
            self._esub.undeclare()
        if self._own:
            self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
