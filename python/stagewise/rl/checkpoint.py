"""The learner's crash-safe files (checkpoint, curves.json, run.json), each written by `atomic_write`: a temporary
file beside its place, flushed and fsynced, renamed over the old one, the directory fsynced, so that a `kill -9` or
a power cut leaves either the old file or the new one, never a torn one."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import numpy as np
import torch

from ..export import atomic_write


def write_json(path, obj: Any) -> None:
    atomic_write(path, json.dumps(obj, indent=1).encode())


def save(path, state: dict) -> None:
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write(path, buf.getvalue())


def load(path) -> dict:
    # weights_only=False: the checkpoint holds numpy RNG states and python tuples; it is this learner's own file
    return torch.load(path, map_location="cpu", weights_only=False)


def rng_state(rng: np.random.Generator) -> dict:
    return {"numpy": rng.bit_generator.state, "torch": torch.get_rng_state(), "python": random.getstate()}


def set_rng_state(rng: np.random.Generator, d: dict) -> None:
    rng.bit_generator.state = d["numpy"]
    torch.set_rng_state(d["torch"])
    random.setstate(d["python"])
