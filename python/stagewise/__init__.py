"""Stagewise, learner side: read transitions from a running actor, drive a served env as a gymnasium Env, and
publish trained policies back. Wire format: docs/wire.md (schema 1)."""

from .env import RemoteEnv, StagewiseEnv, spaces_from_spec
from .errors import (
    NoRuntimeError,
    RemoteError,
    SchemaError,
    StagewiseError,
    StepTimeoutError,
    WireError,
)
from .policy import policy_message, publish_policy
from .session import open_session
from .stream import Transition, TransitionStream
from .wire import SCHEMA

__all__ = [
    "SCHEMA",
    "NoRuntimeError",
    "RemoteEnv",
    "RemoteError",
    "SchemaError",
    "StagewiseEnv",
    "StagewiseError",
    "StepTimeoutError",
    "Transition",
    "TransitionStream",
    "WireError",
    "open_session",
    "policy_message",
    "publish_policy",
    "spaces_from_spec",
]
