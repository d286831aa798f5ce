"""Typed configuration of `stagewise.bc`. The defaults are the measured set-up (docs/lab/bc_rabc.md): the recipe
of the shipped models/policies/pick-place-rabc (RA-BC, chunk 5, kappa 0.01, `rel` features, MLP 3x256, gripper
BCE, 8000 steps of batch 512, Adam 1e-3 with a cosine schedule, seed 0). `--mode bc` with the same defaults is
that comparison's BC arm; the shipped pick-place-bc adds `steps=20000, holdout=0.1, successful_only=True`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

MODES = ("bc", "rabc")
FEATURES = ("raw", "rel")
GRIPPERS = ("bce", "mse", "mse-sign")


@dataclass(frozen=True)
class NetConfig:
    """The policy network. `features`: `raw` = the standardised state; `rel` adds the relative positions the
    pick-place expert decides on (see `stagewise.bc.model.Features`; needs the state fields by name).
    `gripper` (the last action value): `bce` = a logit trained with binary cross-entropy on (action > 0) and
    exported as +-1; `mse` = regressed and clipped like the rest; `mse-sign` = regressed, exported as its sign."""

    features: str = "rel"
    hidden: int = 256
    depth: int = 3
    gripper: str = "bce"


@dataclass(frozen=True)
class TrainConfig:
    """The optimisation. `holdout`: share of episodes kept out of training for held-out action errors (the
    held-out episodes are drawn with seed 123, as the shipped pick-place-bc's were). `successful_only`: train on
    the episodes `stagewise record` marked successful (meta/stagewise_record.json) only. `threads`: torch threads
    (a small MLP: more only contend for the cores)."""

    steps: int = 8000
    batch: int = 512
    lr: float = 1e-3
    seed: int = 0
    holdout: float = 0.0
    successful_only: bool = False
    threads: int = 1
    log_every: int = 100


@dataclass(frozen=True)
class RabcConfig:
    """RA-BC weights (stagewise.bc.weights): `chunk` frames ahead, `kappa`, and the progress column of the
    progress parquet (`progress_sparse`, or `progress_dense` where a labeller wrote one)."""

    chunk: int = 5
    kappa: float = 0.01
    column: str = "progress_sparse"


@dataclass(frozen=True)
class BCConfig:
    """One training run. `mode`: `bc` (every frame weight 1) or `rabc` (each sample's loss times its RA-BC weight,
    normalised per batch as `w * B / (sum w + eps)`, LeRobot's RA-BC). `task`: the simulator task the policy is
    for (written to the manifest; `rel` features read `block1` as the target for `stack`); default: the task
    meta/stagewise_record.json names."""

    mode: str = "rabc"
    net: NetConfig = field(default_factory=NetConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    rabc: RabcConfig = field(default_factory=RabcConfig)
    task: Optional[str] = None

    def check(self) -> None:
        """Refuses values that cannot train, naming the field."""
        bad = []
        if self.mode not in MODES:
            bad.append(f"mode {self.mode!r} (one of {', '.join(MODES)})")
        if self.net.features not in FEATURES:
            bad.append(f"net.features {self.net.features!r} (one of {', '.join(FEATURES)})")
        if self.net.gripper not in GRIPPERS:
            bad.append(f"net.gripper {self.net.gripper!r} (one of {', '.join(GRIPPERS)})")
        for name, v in [("net.hidden", self.net.hidden), ("net.depth", self.net.depth),
                        ("train.steps", self.train.steps), ("train.batch", self.train.batch),
                        ("train.threads", self.train.threads), ("train.log_every", self.train.log_every),
                        ("rabc.chunk", self.rabc.chunk)]:
            if v < 1:
                bad.append(f"{name} {v} (must be >= 1)")
        if not 0.0 <= self.train.holdout < 1.0:
            bad.append(f"train.holdout {self.train.holdout} (a share of episodes in [0, 1))")
        if not self.train.lr > 0:
            bad.append(f"train.lr {self.train.lr} (must be > 0)")
        if not self.rabc.kappa >= 0:
            bad.append(f"rabc.kappa {self.rabc.kappa} (must be >= 0)")
        if bad:
            raise ValueError("bad BC config: " + "; ".join(bad))
