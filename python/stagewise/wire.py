"""The MessagePack wire format (docs/wire.md): decoding with schema and kind checks, tensors as numpy arrays."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import msgpack
import numpy as np

from .errors import SchemaError, WireError

#: The schema version this package writes, and the newest it reads.
SCHEMA = 1

_DTYPES = {"uint8", "uint16", "int32", "int64", "float32", "float64"}


def encode(msg: Dict[str, Any]) -> bytes:
    """Encodes a message (a dict with `schema` and `kind` first) as msgpack; bytes become `bin`."""
    return msgpack.packb(msg, use_bin_type=True)


def decode(payload: bytes, kind: str, key: str = "?") -> Dict[str, Any]:
    """Decodes a message, checking that it is a map of kind `kind` with a schema this client reads.

    Raises :class:`WireError` (not a message, wrong kind) or :class:`SchemaError` naming `key`."""
    try:
        msg = msgpack.unpackb(payload, raw=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise WireError(key, kind, f"{len(payload)} bytes are not msgpack ({e})") from None
    if not isinstance(msg, dict) or "schema" not in msg or "kind" not in msg:
        raise WireError(key, kind, "not a msgpack map with `schema` and `kind`")
    schema = msg["schema"]
    if msg["kind"] != kind:
        raise WireError(key, kind, f"got kind {msg['kind']!r}")
    if not isinstance(schema, int) or isinstance(schema, bool) or not 1 <= schema <= SCHEMA:
        raise SchemaError(key, kind, schema, SCHEMA)
    return msg


def tensor(t: Dict[str, Any], key: str = "?", field: str = "tensor") -> np.ndarray:
    """A wire tensor as a read-only numpy array viewing the message bytes (no copy)."""
    try:
        dtype = t["dtype"]
        shape = tuple(int(s) for s in t["shape"])
        data = t["data"]
    except (KeyError, TypeError) as e:
        raise WireError(key, "tensor", f"{field}: missing {e}") from None
    if dtype not in _DTYPES:
        raise WireError(key, "tensor", f"{field}: unknown dtype {dtype!r}")
    dt = np.dtype(dtype).newbyteorder("<")
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(data) != n * dt.itemsize:
        raise WireError(
            key, "tensor", f"{field}: {len(data)} bytes for {dtype} {list(shape)} (expected {n * dt.itemsize})"
        )
    return np.frombuffer(data, dtype=dt).reshape(shape)


def observation(o: Optional[Dict[str, Any]], key: str = "?") -> Optional[Dict[str, Any]]:
    """An observation map with its tensors as numpy arrays: `{step, time, images: {view: uint8 HxWx3},
    depth: {view: float32 HxW}, state: float32 [n]}` (None stays None)."""
    if o is None:
        return None
    return {
        "step": o.get("step"),
        "time": o.get("time"),
        "images": {k: tensor(v, key, f"images[{k!r}]") for k, v in (o.get("images") or {}).items()},
        "depth": {k: tensor(v, key, f"depth[{k!r}]") for k, v in (o.get("depth") or {}).items()},
        "state": tensor(o["state"], key, "state"),
    }


def value_horizon(shaping: Any) -> Optional[float]:
    """K of a reward spec's `shaping` "value:K" (the value potential, docs/shaping.md), K finite and > 0; else
    None (another form, or a malformed K)."""
    if not isinstance(shaping, str) or not shaping.startswith("value:"):
        return None
    try:
        k = float(shaping[len("value:"):])
    except ValueError:
        return None
    return k if math.isfinite(k) and k > 0 else None
