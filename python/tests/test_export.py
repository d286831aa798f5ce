"""The one policy exporter (`mlp_to_onnx`) and the one policy-manifest writer (`write_policy`): the graph computes
what the torch layers compute, the manifest is one the runtime loads (`stagewise eval policy` rolls it out), and
bad arguments are refused with what was wrong."""

from __future__ import annotations

import hashlib
import json
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn

from stagewise.export import mlp_to_onnx, write_policy


def _run(onnx_bytes, x):
    import onnxruntime as ort

    sess = ort.InferenceSession(onnx_bytes)
    return sess.run(["action"], {"state": x})[0], sess.get_modelmeta().custom_metadata_map


def test_tanh_policy_with_an_input_map_is_the_torch_network():
    torch.manual_seed(0)
    layers = [nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 3)]
    w = np.random.default_rng(0).normal(size=(5, 7)).astype(np.float32)
    b = np.arange(5, dtype=np.float32)
    x = np.random.default_rng(1).normal(size=(9, 7)).astype(np.float32)
    y, meta = _run(mlp_to_onnx(layers, 7, 3, input_affine=(w, b)), x)
    with torch.no_grad():
        want = torch.tanh(nn.Sequential(*layers)(torch.as_tensor(x @ w.T + b))).numpy()
    np.testing.assert_allclose(y, want, atol=1e-5)
    assert y.shape == (9, 3) and np.all(np.abs(y) <= 1.0)
    assert "stagewise.action_repeat" not in meta


def test_clip_policy_clips_to_the_bounds_per_action_value():
    lin = nn.Linear(2, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(2) * 10)
        lin.bias.zero_()
    x = np.array([[1.0, -1.0], [0.01, 0.02]], np.float32)
    y, _ = _run(mlp_to_onnx([lin], 2, 2, output="clip", low=[-1.0, -0.5], high=[0.5, 2.0]), x)
    np.testing.assert_allclose(y, [[0.5, -0.5], [0.1, 0.2]], atol=1e-6)


@pytest.mark.parametrize("kwargs, words", [
    (dict(output="clip"), "low and high"),
    (dict(output="sigmoid"), "'tanh' or 'clip'"),
    (dict(input_affine=(np.zeros((4, 3)), np.zeros(4))), "state of 7"),
])
def test_bad_exporter_arguments_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        mlp_to_onnx([nn.Linear(7, 3)], 7, 3, **kwargs)
    with pytest.raises(ValueError, match="gives 3 values, the action has 4"):
        mlp_to_onnx([nn.Linear(7, 3)], 7, 4)
    with pytest.raises(ValueError, match="BatchNorm1d"):
        mlp_to_onnx([nn.Linear(7, 3), nn.BatchNorm1d(3)], 7, 3)


def test_write_policy_writes_a_manifest_the_runtime_rolls_out(tmp_path, binary):
    torch.manual_seed(3)
    data = mlp_to_onnx([nn.Linear(14, 32), nn.ReLU(), nn.Linear(32, 4)], 14, 4)
    # the runtime feeds a policy the state fields its manifest names: push-target's, here in the simulator's order
    names = ["ee_x", "ee_y", "ee_z", "gripper_width", "grasped", "block0_x", "block0_y", "block0_z", "block0_qw",
             "block0_qx", "block0_qy", "block0_qz", "target_x", "target_y"]
    path = write_policy(tmp_path / "pol", "p", data, task="push-target", state_size=14, action_size=4,
                        description='a "quoted"\nrandom policy', extra={"action_repeat": 4, "state_names": names})
    assert path == tmp_path / "pol" / "p.toml"
    onnx_bytes = (tmp_path / "pol" / "p.onnx").read_bytes()
    import tomllib

    m = tomllib.loads(path.read_text())
    assert m["kind"] == "policy" and m["task"] == "push-target" and m["state_size"] == 14
    assert m["sha256"] == hashlib.sha256(onnx_bytes).hexdigest()
    assert m["description"] == 'a "quoted"\nrandom policy' and m["state_names"] == names
    assert "action_repeat" not in m  # it lives in the graph, where the runtime reads it
    x = np.zeros((2, 14), np.float32)
    assert _run(onnx_bytes, x)[1]["stagewise.action_repeat"] == "4"
    out = tmp_path / "eval.json"
    subprocess.run([binary, "--log", "warn", "eval", "policy", "--policy", str(path), "--task", "push-target",
                    "--episodes", "2", "--json", str(out)], check=True, capture_output=True, timeout=300)
    report = json.loads(out.read_text())
    assert report["episodes"] == 2 and report["action_repeat"] == 4
    # names the simulator does not have are refused, naming one
    bad = write_policy(tmp_path / "bad", "p", data, task="push-target", state_size=14, action_size=4,
                       description="d", extra={"state_names": [f"s{i}" for i in range(14)]})
    r = subprocess.run([binary, "eval", "policy", "--policy", str(bad), "--task", "push-target", "--episodes", "1"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode != 0 and '"s0"' in r.stderr, r.stderr


def test_write_policy_refuses_a_wrong_action_size_and_its_own_keys_and_writes_nothing(tmp_path):
    data = mlp_to_onnx([nn.Linear(3, 2)], 3, 2)
    with pytest.raises(ValueError, match=r"not \[N, 4\]"):
        write_policy(tmp_path, "p", data, task="t", state_size=3, action_size=4, description="d")
    with pytest.raises(ValueError, match="sha256"):
        write_policy(tmp_path, "p", data, task="t", state_size=3, action_size=2, description="d",
                     extra={"sha256": "x"})
    with pytest.raises(ValueError, match="1..=1000"):
        write_policy(tmp_path, "p", data, task="t", state_size=3, action_size=2, description="d",
                     extra={"action_repeat": 0})
    assert list(tmp_path.iterdir()) == []


def _meta(onnx_bytes):
    import onnx

    return {p.key: p.value for p in onnx.load_from_string(onnx_bytes).metadata_props}


def test_write_policy_puts_the_inputs_in_the_graph_metadata(tmp_path):
    """The manifest keeps its keys; the graph carries the same inputs as JSON (the sha256 covers them), so the
    .onnx alone is push-ready."""
    pixels = {"views": ["front", "wrist"], "width": 2, "height": 3}
    data = mlp_to_onnx([nn.Linear(2 * 3 * 2 * 3 + 2, 4)], 2 * 3 * 2 * 3 + 2, 4)
    path = write_policy(tmp_path, "pix", data, task="pick-place", state_size=2, action_size=4, description="d",
                        extra={"state_names": ["gripper_width", "ee_z"], "pixels": pixels, "action_repeat": 2})
    import tomllib

    m = tomllib.loads(path.read_text())
    assert m["state_names"] == ["gripper_width", "ee_z"] and m["pixels"] == pixels
    onnx_bytes = (tmp_path / "pix.onnx").read_bytes()
    assert m["sha256"] == hashlib.sha256(onnx_bytes).hexdigest()
    meta = _meta(onnx_bytes)
    assert json.loads(meta["stagewise.state_names"]) == ["gripper_width", "ee_z"]
    assert json.loads(meta["stagewise.pixels"]) == pixels
    assert meta["stagewise.action_repeat"] == "2" and "stagewise.embeddings" not in meta
    sha = "ab" * 32
    data = mlp_to_onnx([nn.Linear(2 * 8 + 1, 4)], 2 * 8 + 1, 4)
    write_policy(tmp_path, "emb", data, task="pick-place", state_size=1, action_size=4, description="d",
                 extra={"state_names": ["ee_x"], "embeddings": {"encoder_sha256": sha, "views": 2, "size": 8}})
    meta = _meta((tmp_path / "emb.onnx").read_bytes())
    assert json.loads(meta["stagewise.embeddings"]) == {"encoder_sha256": sha, "views": 2, "size": 8}
    assert "stagewise.action_repeat" not in meta
    # A policy without named inputs (the older form) gets no input metadata.
    write_policy(tmp_path, "bare", mlp_to_onnx([nn.Linear(3, 4)], 3, 4), task="t", state_size=3, action_size=4,
                 description="d")
    assert _meta((tmp_path / "bare.onnx").read_bytes()) == {}


def test_with_inputs_makes_push_ready_bytes_and_refuses_what_the_runtime_would():
    from stagewise.export import with_inputs

    data = mlp_to_onnx([nn.Linear(3, 4)], 3, 4)
    out = with_inputs(data, state_names=["ee_z", "ee_x", "gripper_width"], action_repeat=3)
    meta = _meta(out)
    assert json.loads(meta["stagewise.state_names"]) == ["ee_z", "ee_x", "gripper_width"]
    assert meta["stagewise.action_repeat"] == "3"
    # Again: the keys are replaced, not repeated; the graph computes what it did.
    again = with_inputs(out, state_names=["ee_x", "ee_y", "ee_z"])
    assert json.loads(_meta(again)["stagewise.state_names"]) == ["ee_x", "ee_y", "ee_z"]
    assert _meta(again)["stagewise.action_repeat"] == "3"
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(again, x)[0], _run(data, x)[0])
    assert with_inputs(data) == data
    first = {"views": ["front"], "width": 1, "height": 1, "remember_first": True}
    wide = mlp_to_onnx([nn.Linear(8, 4)], 8, 4)
    assert json.loads(_meta(with_inputs(wide, state_names=["ee_x"], pixels=first))["stagewise.pixels"]) == first
    sha = "0" * 64
    for kwargs, words in [
        (dict(state_names=["ee_x", "ee_x", "ee_y"]), "unique"),
        (dict(state_names=["ee_x", "ee_y"]), "input has 3 values; these inputs are 2"),
        (dict(state_names=["a"], pixels={"views": ["front"], "width": 1, "height": 1},
              embeddings={"encoder_sha256": sha, "views": 1, "size": 1}), "not both"),
        (dict(pixels={"views": ["front"], "width": 1}), "exactly views, width, height"),
        (dict(pixels={"views": ["front"], "width": 0, "height": 1}), "1..=4096"),
        (dict(pixels={"views": ["front"], "width": 1, "height": 1, "remember_first": 1}), "remember_first true"),
        # remember_first: (3 frame values + 1 state value) x 2 = 8, not the graph's 3
        (dict(state_names=["ee_x"], pixels={"views": ["front"], "width": 1, "height": 1, "remember_first": True}),
         "input has 3 values; these inputs are 8"),
        (dict(embeddings={"encoder_sha256": "abc", "views": 1, "size": 1}), "64 hex digits"),
        (dict(action_repeat=0), "1..=1000"),
    ]:
        with pytest.raises(ValueError, match=words):
            with_inputs(data, **kwargs)


def test_a_manifest_that_disagrees_with_its_graph_is_refused(tmp_path, binary):
    """The runtime reads the graph's inputs and the manifest's: when they differ it refuses the policy, naming the
    manifest and the field."""
    names = ["ee_x", "ee_y", "ee_z", "gripper_width"]
    data = mlp_to_onnx([nn.Linear(4, 4)], 4, 4)
    path = write_policy(tmp_path, "p", data, task="pick-place", state_size=4, action_size=4, description="d",
                        extra={"state_names": names})
    eval_cmd = [binary, "--log", "warn", "eval", "policy", "--policy", str(path), "--task", "pick-place",
                "--episodes", "1"]
    r = subprocess.run(eval_cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    text = path.read_text()
    path.write_text(text.replace('"ee_x", "ee_y"', '"ee_y", "ee_x"'))
    r = subprocess.run(eval_cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0, r.stderr
    assert str(path) in r.stderr and "state_names" in r.stderr and "must agree" in r.stderr, r.stderr
