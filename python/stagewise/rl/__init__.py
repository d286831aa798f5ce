"""The off-policy learner of Stagewise's results: TD3 / SAC with a LayerNorm critic ensemble, n-step returns,
replayed demonstrations, symmetry augmentation and the gripper options, learning through `stagewise serve` from the
reward the runtime serves, evaluated on held-out seeds, exported as ONNX policies, checkpointed crash-safe.

Command line: `python -m stagewise.rl --help` (= `stagewise learn --help`). From Python::

    from stagewise.rl import build, learn
    cfg = build("push-target", {"reward": "oracle", "steps": 60_000})  # a LearnConfig: the set-up, typed

Needs the `[learn]` extra (torch, matplotlib, onnx, onnxruntime)."""

from .agent import Agent, GripperFlip, NStep, Replay, Symmetry, actor_onnx, export_policy, feature_map, sample
from .config import TASK_DEFAULTS, AgentConfig, LearnConfig, RewardConfig, build
from .envs import Envs, ServeError, evaluate, reset, serve_args, shaping_args
from .runner import LearnError, learn
from .train import SeedRun, eval_seed_clash, train_seed_base

__all__ = [
    "TASK_DEFAULTS", "Agent", "AgentConfig", "Envs", "GripperFlip", "LearnConfig", "LearnError", "NStep", "Replay",
    "RewardConfig", "SeedRun", "ServeError", "Symmetry", "actor_onnx", "build", "eval_seed_clash", "evaluate",
    "export_policy", "feature_map", "learn", "reset", "sample", "serve_args", "shaping_args", "train_seed_base",
]
