"""Clear exceptions: no runtime reachable, a schema this client does not read, a timed-out step, refusals."""

import time

import msgpack
import numpy as np
import pytest
import zenoh

from stagewise import (
    NoRuntimeError,
    RemoteError,
    SchemaError,
    StagewiseEnv,
    StepTimeoutError,
    WireError,
    open_session,
)
from stagewise.env import RemoteEnv
from stagewise.launch import free_port
from stagewise.wire import decode, encode, tensor


def test_no_runtime_reachable_names_the_key_and_the_endpoint():
    endpoint = f"tcp/127.0.0.1:{free_port()}"  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(NoRuntimeError) as e:
        StagewiseEnv("nobody", connect=endpoint, connect_timeout=1.0)
    assert time.monotonic() - t0 < 10
    msg = str(e.value)
    assert "stagewise/nobody/env/step" in msg and "1 s" in msg
    assert "stagewise serve --robot-name nobody" in msg and endpoint in msg
    assert e.value.key == "stagewise/nobody/env/step"


def test_a_server_for_another_robot_is_not_the_runtime(serve):
    p = serve("--task", "pick-place", "--robot-name", "arm-a")
    with pytest.raises(NoRuntimeError, match="stagewise/arm-b/env/step"):
        StagewiseEnv("arm-b", connect=p.endpoint, connect_timeout=2.0)


def test_timed_out_step_names_the_key_and_the_wait(serve):
    # --hz 1 paces steps like a robot at 1 Hz: the second step comes a second after the first.
    p = serve("--task", "pick-place", "--hz", "1")
    env = StagewiseEnv(connect=p.endpoint, connect_timeout=30, timeout=0.4)
    try:
        env.reset(seed=0)
        env.step(np.zeros(4, np.float32))
        with pytest.raises(StepTimeoutError) as e:
            env.step(np.zeros(4, np.float32))
        assert e.value.key == "stagewise/sim0/env/step"
        assert "step_reply" in str(e.value) and "0.4 s" in str(e.value)
    finally:
        env.close()


def test_newer_schema_from_the_runtime_is_refused():
    """A runtime that answers with schema 2 (a newer build): a zenoh queryable in this process plays it."""
    port = free_port()
    server = open_session(listen=f"tcp/127.0.0.1:{port}", multicast=False)
    reply = encode({"schema": 2, "kind": "reset_reply", "spec": None, "obs": None, "error": None})
    q = server.declare_queryable("stagewise/future/env/*", lambda query: query.reply(query.key_expr, reply))
    try:
        with pytest.raises(SchemaError) as e:
            StagewiseEnv("future", connect=f"tcp/127.0.0.1:{port}", connect_timeout=10)
        assert e.value.key == "stagewise/future/env/reset"
        assert "schema 2" in str(e.value) and "1..=1" in str(e.value) and "reset_reply" in str(e.value)
    finally:
        q.undeclare()
        server.close()


def test_the_runtime_refuses_a_newer_schema_request(serve):
    p = serve("--task", "pick-place")
    client = RemoteEnv(connect=p.endpoint, connect_timeout=30)
    try:
        client.first_reset(0)
        handler = client.session.get(
            "stagewise/sim0/env/step",
            payload=msgpack.packb({"schema": 9, "kind": "step_request", "action": [0, 0, 0, 0]}),
            timeout=10,
        )
        r = decode(next(iter(handler)).ok.payload.to_bytes(), "step_reply", "stagewise/sim0/env/step")
        assert "schema 9" in r["error"], r["error"]
    finally:
        client.close()


def test_remote_refusal_is_a_remote_error(serve):
    p = serve("--task", "pick-place")
    client = RemoteEnv(connect=p.endpoint, connect_timeout=30)
    try:
        client.first_reset(0)
        with pytest.raises(RemoteError) as e:
            client.step([0.0])  # the env takes 4 values
        assert e.value.key == "stagewise/sim0/env/step" and "4" in e.value.reason
        with pytest.raises(RemoteError, match="finite"):
            client.step([float("nan"), 0, 0, 0])
    finally:
        client.close()


def test_decoder_errors_name_the_key_and_the_expected_kind():
    with pytest.raises(WireError, match=r"`k/1`: expected a `step_reply` message: .*not msgpack"):
        decode(b"\xc1", "step_reply", "k/1")
    with pytest.raises(WireError, match="got kind 'reset_reply'"):
        decode(encode({"schema": 1, "kind": "reset_reply"}), "step_reply", "k/1")
    with pytest.raises(WireError, match="`schema` and `kind`"):
        decode(encode([1, 2]), "step_reply", "k/1")
    with pytest.raises(SchemaError, match="schema 0"):
        decode(encode({"schema": 0, "kind": "step_reply"}), "step_reply", "k/1")
    with pytest.raises(WireError, match="5 bytes for float32"):
        tensor({"dtype": "float32", "shape": [2], "data": b"\0" * 5}, "k/1", "state")
    t = tensor({"dtype": "uint8", "shape": [2, 1, 3], "data": bytes(range(6))})
    assert t.shape == (2, 1, 3) and not t.flags.writeable  # a view of the message bytes
