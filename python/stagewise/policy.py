"""`publish_policy`: put an ONNX policy on `stagewise/<robot>/policy` for a running actor (`stagewise run`)."""

from __future__ import annotations

import hashlib
import os
import struct
import time
from typing import Optional, Sequence, Union

import zenoh
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .errors import NoRuntimeError
from .session import DEFAULT_ROBOT, keys, open_session
from .wire import SCHEMA, encode


#: Domain separation: the first bytes of every signed policy message (the same as the Rust side's
#: `stagewise_stream::POLICY_SIGNING_CONTEXT`).
SIGNING_CONTEXT = b"stagewise-policy-v1"


def signing_message(robot: str, version: int, sha256: bytes) -> bytes:
    """The bytes a policy signature covers: ``"stagewise-policy-v1" | u32 LE len(robot) | robot (UTF-8) |
    u64 LE version | sha256 (32 bytes)``. The robot and version are bound, so a signature for one robot does not
    move another and an old signed policy cannot be replayed under a higher version."""
    if len(sha256) != 32:
        raise ValueError(f"sha256 must be 32 bytes, got {len(sha256)}")
    name = robot.encode("utf-8")
    return SIGNING_CONTEXT + struct.pack("<I", len(name)) + name + struct.pack("<Q", version) + bytes(sha256)


def policy_message(
    onnx: bytes, version: int, key: Union[str, bytes, None] = None, *, robot: str = DEFAULT_ROBOT
) -> bytes:
    """The encoded `policy` message for `robot`: sha256 of the bytes and, with a secret `key` (32 bytes, or 64
    hex digits, as printed by `stagewise policy keygen`), an Ed25519 signature of `signing_message(robot,
    version, sha256)`."""
    if not isinstance(version, int) or version < 0 or version >= 2**64:
        raise ValueError(f"policy version must be a non-negative 64-bit int, got {version!r}")
    digest = hashlib.sha256(onnx)
    signature = None
    if key is not None:
        secret = bytes.fromhex(key.strip()) if isinstance(key, str) else bytes(key)
        if len(secret) != 32:
            raise ValueError(f"an Ed25519 secret key is 32 bytes (64 hex digits), got {len(secret)} bytes")
        signature = Ed25519PrivateKey.from_private_bytes(secret).sign(signing_message(robot, version, digest.digest()))
    return encode(
        {
            "schema": SCHEMA,
            "kind": "policy",
            "version": version,
            "sha256": digest.hexdigest(),
            "onnx": onnx,
            "signature": signature,
        }
    )


def public_key(secret: Union[str, bytes]) -> bytes:
    """The Ed25519 public key (32 bytes) of a secret key (32 bytes, or 64 hex digits): what `stagewise run
    --policy-key HEX` takes."""
    raw = bytes.fromhex(secret.strip()) if isinstance(secret, str) else bytes(secret)
    from cryptography.hazmat.primitives import serialization

    return Ed25519PrivateKey.from_private_bytes(raw).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def publish_policy(
    path_or_bytes: Union[str, os.PathLike, bytes],
    version: int,
    key: Union[str, bytes, None] = None,
    *,
    robot: str = DEFAULT_ROBOT,
    connect: Union[str, Sequence[str], None] = None,
    session: Optional[zenoh.Session] = None,
    wait: float = 10.0,
) -> str:
    """Publishes an ONNX policy (state f32 [N, S] in, action f32 [N, A] out) to the actor of `robot`. A graph whose
    metadata declares its inputs (`stagewise.export.with_inputs`: state fields by name, camera frames or a reward
    model's embeddings before them) is bound by the actor as a manifest policy is; one without reads the whole
    state.

    Waits up to `wait` seconds for the actor's policy subscriber (anything put before it is matched is lost) and
    raises NoRuntimeError when there is none. The actor checks the size, the hash, the signature (it covers
    `robot`, `version` and the hash) when it was started with `--policy-key`, the version (newer than the last
    one it accepted, kept across its restarts) and the graph's shapes, and swaps the policy in between
    episodes; it reports rejections in its log. Returns the sha256 sent."""
    onnx = bytes(path_or_bytes) if isinstance(path_or_bytes, (bytes, bytearray)) else open(path_or_bytes, "rb").read()
    payload = policy_message(onnx, version, key, robot=robot)
    k = keys(robot)["policy"]
    own = session is None
    s = session if session is not None else open_session(connect)
    try:
        pub = s.declare_publisher(k, congestion_control=zenoh.CongestionControl.BLOCK)
        deadline = time.monotonic() + wait
        while not pub.matching_status.matching:
            if time.monotonic() >= deadline:
                raise NoRuntimeError(
                    k, wait, f"expected a `stagewise run --robot-name {robot}` subscribed to its policy key"
                )
            time.sleep(0.01)
        pub.put(payload)
        # Give the put time to leave before the publisher (and maybe the session) goes.
        time.sleep(0.2)
        pub.undeclare()
    finally:
        if own:
            s.close()
    return hashlib.sha256(onnx).hexdigest()
