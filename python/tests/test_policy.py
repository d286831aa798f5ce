"""Policy push: signing, the SB3 -> ONNX export, and a pushed policy that a running `stagewise run` executes."""

import hashlib
import time
import signal

import msgpack
import numpy as np
import pytest

from stagewise import NoRuntimeError, StagewiseEnv, policy_message, publish_policy
from stagewise.policy import public_key
from stagewise.launch import free_port, wait_for_output


def test_ed25519_keys_match_rfc8032_test_vector_1():
    secret = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    assert public_key(secret).hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    assert public_key(secret.hex()) == public_key(secret)


def test_a_secret_key_of_another_length_is_refused():
    with pytest.raises(ValueError, match="32 bytes"):
        policy_message(b"onnx", 1, "11" * 31)


def test_policy_message_layout():
    m = msgpack.unpackb(policy_message(b"onnx-bytes", 3, "11" * 32), raw=False)
    assert list(m)[:2] == ["schema", "kind"] and m["kind"] == "policy" and m["version"] == 3
    assert m["sha256"] == hashlib.sha256(b"onnx-bytes").hexdigest()
    assert isinstance(m["onnx"], bytes) and len(m["signature"]) == 64
    assert msgpack.unpackb(policy_message(b"x", 1), raw=False)["signature"] is None
    with pytest.raises(ValueError, match="32 bytes"):
        policy_message(b"x", 1, b"short")


def test_signature_covers_robot_version_and_hash_pinned_with_rust():
    """The same bytes and signature as crates/stream (wire_tests) and crates/runtime (policy tests) pin."""
    from stagewise.policy import signing_message

    m = signing_message("arm0", 7, hashlib.sha256(b"onnx").digest())
    assert m.hex() == (
        "7374616765776973652d706f6c6963792d76310400000061726d300700000000000000"
        "87e93f89f2be0db364e8be052f79f389e6c2da239831922e24513288af522a43"
    )
    secret = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
    sig = msgpack.unpackb(policy_message(b"onnx", 7, secret, robot="arm0"), raw=False)["signature"]
    assert sig.hex() == (
        "8331abf8393af70951ded5b0a2e637d4d3fa3482924c7cdad100f3d408d49623"
        "f6a58629c8b815018a6de92d15834fe3365c7436d13e7ef97c04340f97734d0e"
    )
    # Another robot or version: another signature.
    assert msgpack.unpackb(policy_message(b"onnx", 7, secret, robot="arm1"), raw=False)["signature"] != sig
    assert msgpack.unpackb(policy_message(b"onnx", 8, secret, robot="arm0"), raw=False)["signature"] != sig


def test_publish_without_an_actor_names_the_policy_key():
    with pytest.raises(NoRuntimeError, match="stagewise/lonely/policy.*stagewise run --robot-name lonely"):
        publish_policy(b"x", 1, robot="lonely", connect=f"tcp/127.0.0.1:{free_port()}", wait=0.5)


def test_trained_policy_exports_and_runs_in_stagewise_run(serve, run_actor, tmp_path):
    """A few PPO steps through StagewiseEnv, export to ONNX (checked against SB3's own deterministic actions
    with ONNX Runtime), then a signed push to a running `stagewise run`, whose episodes then run it."""
    import onnxruntime as ort
    from stable_baselines3 import PPO

    from stagewise.export import sb3_policy_to_onnx

    p = serve("--task", "pick-place", "--reward", "oracle", "--max-steps", "16")
    env = StagewiseEnv(connect=p.endpoint, connect_timeout=30, gamma=0.99)
    try:
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, gamma=0.99, seed=0, device="cpu")
        model.learn(total_timesteps=32)
        states = np.stack([env.reset(seed=s)[0] for s in range(5)])
    finally:
        env.close()
    onnx_bytes = sb3_policy_to_onnx(model)
    sess = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["state"] and [o.name for o in sess.get_outputs()] == ["action"]
    got = sess.run(["action"], {"state": states.astype(np.float32)})[0]
    want, _ = model.predict(states, deterministic=True)
    np.testing.assert_allclose(got, np.clip(want, -1, 1), atol=1e-5)

    # A signed push to an actor that only accepts policies signed with this key; it streams the states so that
    # the actions it takes can be checked against the exported graph.
    from stagewise import TransitionStream

    secret = bytes(range(32))
    public = public_key(secret).hex()
    actor = run_actor(
        "--task", "pick-place", "--robot-name", "learner-test", "--policy", "random", "--reward", "oracle",
        "--envs", "1", "--episodes", "0", "--max-steps", "10", "--policy-key", public,
        "--stream-images", "--width", "16", "--height", "16",
    )
    stream = TransitionStream("learner-test", connect=actor.endpoint)
    try:
        sha = publish_policy(onnx_bytes, 2, secret.hex(), robot="learner-test", connect=actor.endpoint, wait=60)
        assert sha == hashlib.sha256(onnx_bytes).hexdigest()
        assert wait_for_output(actor, "learner policy v2", 60), actor.output()
        # Skip what was in flight (the actor runs as fast as it can, so thousands of transitions of the old
        # policy may be queued by now), then find consecutive steps: the action at step k+1 is the policy's
        # output for the state after step k.
        matched, prev = 0, None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            t = stream.recv(timeout=30)
            assert t.next_obs is not None and t.next_obs["state"].shape == (14,)
            if prev is not None and prev.episode == t.episode and t.step == prev.step + 1:
                want = sess.run(["action"], {"state": prev.next_obs["state"][None, :].astype(np.float32)})[0][0]
                if np.allclose(t.action, want, atol=1e-5):
                    matched += 1
                    if matched >= 10:
                        break
                else:
                    matched = 0
            prev = t
        assert matched >= 10, "the actor's actions never followed the pushed policy"
        assert stream.errors == 0
    finally:
        stream.close()
    actor.proc.send_signal(signal.SIGINT)
    actor.wait(60)
    out = actor.output()
    assert "policies: 1 accepted, 0 rejected" in out, out
