"""Stagewise, learner side: read transitions from a running actor, drive a served env as a gymnasium Env, and
publish trained policies back. Wire format: docs/wire.md (schema 1).

Importing it registers the gymnasium ids `stagewise/PickPlace-v0`, `stagewise/PushTarget-v0`, `stagewise/Stack-v0`
(stagewise.registration)."""

from .env import RemoteEnv, StagewiseEnv, spaces_from_spec
from .errors import (
    NoRuntimeError,
    RemoteError,
    SchemaError,
    ServeError,
    StagewiseError,
    StepTimeoutError,
    WireError,
)
from .policy import policy_message, publish_policy
from .registration import TaskEnv, env_ids, register_envs
from .session import open_session
from .stream import Transition, TransitionStream
from .wire import SCHEMA

__all__ = [
    "SCHEMA",
    "NoRuntimeError",
    "RemoteEnv",
    "RemoteError",
    "SchemaError",
    "ServeError",
    "StagewiseEnv",
    "StagewiseError",
    "StepTimeoutError",
    "TaskEnv",
    "Transition",
    "TransitionStream",
    "WireError",
    "env_ids",
    "open_session",
    "policy_message",
    "publish_policy",
    "register_envs",
    "spaces_from_spec",
]

register_envs()
