"""Decodes Rust-encoded Stagewise messages the way docs/wire.md tells a Python client to, and encodes requests
for Rust to decode. Run by tests/python_interop.rs: `python check_wire.py DIR` (needs msgpack and numpy)."""
import hashlib
import os
import sys

import msgpack
import numpy as np

SCHEMA = 1


def tensor(t):
    return np.frombuffer(t["data"], dtype=np.dtype(t["dtype"]).newbyteorder("<")).reshape(t["shape"])


def decode(payload, kind):
    msg = msgpack.unpackb(payload, raw=False)
    if not isinstance(msg, dict) or msg.get("kind") != kind:
        raise ValueError(f"not a {kind} message")
    if not 1 <= msg["schema"] <= SCHEMA:
        raise ValueError(f"schema {msg['schema']} is newer than this client ({SCHEMA})")
    return msg


def read(d, name):
    with open(os.path.join(d, name), "rb") as f:
        return f.read()


def main(d):
    t = decode(read(d, "transition.msgpack"), "transition")
    assert list(t)[:2] == ["schema", "kind"], list(t)
    assert t["robot"] == "py-arm" and t["env"] == 1 and t["episode"] == 4 and t["step"] == 5, t
    assert abs(t["gamma"] - 0.99) < 1e-12 and t["stage"] == 1 and t["obs"] is None
    assert np.allclose(t["action"], [1.25, -1.0, 0.5])
    assert t["oracle_phi"] == 0.75, t.get("oracle_phi")  # float32, after `stage`; absent when the env has none
    obs = t["next_obs"]
    images = {name: tensor(x) for name, x in obs["images"].items()}
    assert list(images) == ["front", "wrist", "top"], list(images)
    for img in images.values():
        assert img.dtype == np.uint8 and img.shape == (96, 96, 3), (img.dtype, img.shape)
    # frame(96, 96, seed): pixel (x, y) = v, v+1, v+2 with v = x*7 + y*13 + seed*31 (mod 256); seed = 6*3 + i
    y, x = 10, 20
    v = (x * 7 + y * 13 + 18 * 31) % 256
    assert list(images["front"][y, x]) == [v, (v + 1) % 256, (v + 2) % 256], images["front"][y, x]
    state = tensor(obs["state"])
    assert state.dtype == np.float32 and np.allclose(state, [i * 0.5 + 6 for i in range(7)]), state
    p = decode(read(d, "progress.msgpack"), "progress")
    assert p["stage"] == 2 and np.allclose(p["stage_probs"], [0.1, 0.2, 0.7]) and abs(p["phi"] - 0.8) < 1e-6
    e = decode(read(d, "episode.msgpack"), "episode")
    assert e["return"] == 2.5 and e["length"] == 10 and e["success"] is True
    pol = decode(read(d, "policy.msgpack"), "policy")
    assert hashlib.sha256(pol["onnx"]).hexdigest() == pol["sha256"] and pol["signature"] is None
    try:
        decode(read(d, "newer.msgpack"), "progress")
        raise AssertionError("schema 2 accepted")
    except ValueError as err:
        assert "schema 2" in str(err)

    def write(name, obj):
        with open(os.path.join(d, name), "wb") as f:
            f.write(msgpack.packb(obj, use_bin_type=True))

    write("py_step_request.msgpack", {"schema": 1, "kind": "step_request", "action": [0.5, 1, -2]})
    write("py_reset_request.msgpack", {"schema": 1, "kind": "reset_request", "seed": 7})
    onnx = b"not really onnx"
    write("py_policy.msgpack", {"schema": 1, "kind": "policy", "version": 3,
                                "sha256": hashlib.sha256(onnx).hexdigest(), "onnx": onnx, "signature": None})
    print("python decoded and encoded OK")


if __name__ == "__main__":
    main(sys.argv[1])
