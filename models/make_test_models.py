#!/usr/bin/env python3
"""Builds small deterministic ONNX reward models for tests and benchmarks, with their manifests.

Each is a real conv net with fixed seeded weights (no training): per frame a two-layer strided conv encoder with
global average pooling, the embeddings of all views and window frames concatenated with the state, an MLP
trunk, a stage-logits head and a tau head (sigmoid). The input layout is the one Stagewise feeds:
images f32 [N, views, frames, 3, H, W] (normalised), state f32 [N, state_size]. Beside them: small tanh MLP policies
(state in, action out) and pixel3v8, a linear pixel policy ([pixels]: three 8x8 views, raw bytes, then the hand's
four fields) whose action a test can compute from the frames it was fed, and linear3x4 (action = the first three
state values, then 0) whose action says which state fields it was fed.

    .venv/bin/python models/make_test_models.py [--out models/test]

Outputs are byte-for-byte reproducible (same numpy seed, same onnx version); the manifests carry the sha256.
"""
import argparse
import hashlib
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MODELS = {
    # The benchmark shape of DESIGN.md / issue 2: one robot, 3 views at 96x96, window 4.
    "tiny3v": dict(views=["front", "side", "wrist"], frames=4, stride=2, size=96, state=8,
                   stages=["reach", "grasp", "lift", "place"], proportions=[0.2, 0.2, 0.25, 0.35],
                   tau="single", progress="hard", seed=1),
    # One view, one frame, no state, one tau per stage, soft progress.
    "tiny1v": dict(views=["front"], frames=1, stride=1, size=32, state=0,
                   stages=["approach", "push", "settle"], proportions=[1.0, 2.0, 1.0],
                   tau="per_stage", progress="soft", seed=2),
    # Broken on purpose: its tau is log(-1 - |x|) = NaN. Tests check the runtime refuses NaN outputs.
    "nan1v": dict(views=["front"], frames=1, stride=1, size=16, state=0,
                  stages=["only"], proportions=[1.0], tau="nan", progress="hard", seed=3),
}


def build(name, views, frames, stride, size, state, stages, proportions, tau, progress, seed):
    rng = np.random.default_rng(seed)
    v, f, k = len(views), frames, len(stages)
    c1, c2, hidden = 8, 16, 32

    def w(*shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else np.sqrt(2.0 / fan_in)
        return (rng.standard_normal(shape) * s).astype(np.float32)

    inits = [
        numpy_helper.from_array(np.array([-1, 3, size, size], dtype=np.int64), "frames_shape"),
        numpy_helper.from_array(w(c1, 3, 3, 3), "conv1_w"),
        numpy_helper.from_array(w(c1, scale=0.1), "conv1_b"),
        numpy_helper.from_array(w(c2, c1, 3, 3), "conv2_w"),
        numpy_helper.from_array(w(c2, scale=0.1), "conv2_b"),
        numpy_helper.from_array(np.array([-1, v * f * c2], dtype=np.int64), "emb_shape"),
    ]
    feat = v * f * c2 + state
    inits += [
        numpy_helper.from_array(w(feat, hidden), "fc1_w"),
        numpy_helper.from_array(w(hidden, scale=0.1), "fc1_b"),
        numpy_helper.from_array(w(hidden, k), "stage_w"),
        numpy_helper.from_array(w(k, scale=0.5), "stage_b"),
    ]
    tau_out = k if tau == "per_stage" else 1
    inits += [
        numpy_helper.from_array(w(hidden, tau_out, scale=0.05), "tau_w"),
        numpy_helper.from_array(w(tau_out, scale=0.1), "tau_b"),
    ]
    nodes = [
        helper.make_node("Reshape", ["images", "frames_shape"], ["frames"]),
        helper.make_node("Conv", ["frames", "conv1_w", "conv1_b"], ["h1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h1"], ["a1"]),
        helper.make_node("Conv", ["a1", "conv2_w", "conv2_b"], ["h2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h2"], ["a2"]),
        helper.make_node("GlobalAveragePool", ["a2"], ["pooled"]),
        helper.make_node("Reshape", ["pooled", "emb_shape"], ["emb"]),
    ]
    inputs = [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", v, f, 3, size, size])]
    if state:
        inputs.append(helper.make_tensor_value_info("state", TensorProto.FLOAT, ["N", state]))
        nodes.append(helper.make_node("Concat", ["emb", "state"], ["feat"], axis=1))
    else:
        nodes.append(helper.make_node("Identity", ["emb"], ["feat"]))
    nodes += [
        helper.make_node("Gemm", ["feat", "fc1_w", "fc1_b"], ["z1"]),
        helper.make_node("Relu", ["z1"], ["trunk"]),
        helper.make_node("Gemm", ["trunk", "stage_w", "stage_b"], ["stage_logits"]),
        helper.make_node("Gemm", ["trunk", "tau_w", "tau_b"], ["tau_logit"]),
    ]
    if tau == "nan":
        inits.append(numpy_helper.from_array(np.array([-1.0], dtype=np.float32), "minus_one"))
        nodes += [
            helper.make_node("Abs", ["tau_logit"], ["abs_tau"]),
            helper.make_node("Sub", ["minus_one", "abs_tau"], ["negative"]),
            helper.make_node("Log", ["negative"], ["tau"]),
        ]
    else:
        nodes.append(helper.make_node("Sigmoid", ["tau_logit"], ["tau"]))
    outputs = [
        helper.make_tensor_value_info("stage_logits", TensorProto.FLOAT, ["N", k]),
        helper.make_tensor_value_info("tau", TensorProto.FLOAT, ["N", tau_out]),
    ]
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="stagewise-test-models")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def build_policy(name, state, action, seed, repeat=None):
    """A small tanh MLP policy: state f32 [N, state] -> action f32 [N, action] in [-1, 1]. `repeat`: the
    `stagewise.action_repeat` metadata entry (each action held that many control steps), as a string."""
    rng = np.random.default_rng(seed)
    hidden = 32
    inits = [
        numpy_helper.from_array((rng.standard_normal((state, hidden)) * np.sqrt(1.0 / state)).astype(np.float32), "w1"),
        numpy_helper.from_array(np.zeros(hidden, dtype=np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((hidden, action)) * np.sqrt(1.0 / hidden)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.zeros(action, dtype=np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("Gemm", ["state", "w1", "b1"], ["z1"]),
        helper.make_node("Tanh", ["z1"], ["h1"]),
        helper.make_node("Gemm", ["h1", "w2", "b2"], ["z2"]),
        helper.make_node("Tanh", ["z2"], ["action"]),
    ]
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("state", TensorProto.FLOAT, ["N", state])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["N", action])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="stagewise-test-models")
    model.ir_version = 8
    if repeat is not None:
        helper.set_model_props(model, {"stagewise.action_repeat": repeat})
    onnx.checker.check_model(model)
    return model


# policy8x4r3: policy8x4's weights, each action held 3 steps; policy8x4r0: an action repeat no policy may declare.
POLICIES = {"policy8x4": dict(state=8, action=4, seed=4),
            "policy8x4r3": dict(state=8, action=4, seed=4, repeat="3"),
            "policy8x4r0": dict(state=8, action=4, seed=4, repeat="0")}


# A pixel policy ([pixels] in its manifest): camera frames (raw bytes as f32, channel-major) then named state.
PIXEL_POLICIES = {"pixel3v8": dict(views=["front", "side", "wrist"], size=8,
                                   state_names=["ee_x", "ee_y", "ee_z", "gripper_width"]),
                  # [pixels] remember_first: its frames means are the episode's first observation's
                  "pixel3v8first": dict(views=["front", "side", "wrist"], size=8,
                                        state_names=["ee_x", "ee_y", "ee_z", "gripper_width"], remember_first=True)}


def build_pixel_policy(name, views, size, state_names, remember_first=False):
    """A linear pixel policy, so that a test can compute its action from the frames it was fed:
    state f32 [N, len(views) * 3 * size * size + len(state_names)] -> action f32 [N, 4] with
    action[k] = mean of view k's channel k (k < 3: front red, side green, wrist blue) / 255 * 2 - 1 and
    action[3] = the last state field (gripper_width). No weights are random: nothing to seed. `remember_first`:
    the row is followed by the episode's first row, and action[k < 3] reads that one's frames."""
    plane, frame = size * size, 3 * size * size
    row = len(views) * frame + len(state_names)
    width = 2 * row if remember_first else row
    first = row if remember_first else 0
    w = np.zeros((width, 4), dtype=np.float32)
    b = np.zeros(4, dtype=np.float32)
    for k in range(min(3, len(views))):
        start = first + k * frame + k * plane
        w[start:start + plane, k] = 2.0 / (255.0 * plane)
        b[k] = -1.0
    w[row - 1, 3] = 1.0
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["state", "w", "b"], ["action"])], name,
        [helper.make_tensor_value_info("state", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="stagewise-test-models")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# A linear state policy: action[i] = state[i] (i < 3), action[3] = 0. Tests that bind its inputs by name (ONNX
# metadata, stagewise.state_names) read which fields it was fed from its action.
LINEAR_POLICIES = {"linear3x4": dict(state=3, action=4)}


def build_linear_policy(name, state, action):
    """state f32 [N, state] -> action f32 [N, action], action[i] = state[i] for i < min(state, action), else 0.
    No declared inputs (its manifest gives state_size): tests add metadata to its bytes."""
    w = np.zeros((state, action), dtype=np.float32)
    for i in range(min(state, action)):
        w[i, i] = 1.0
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["state", "w", "b"], ["action"])], name,
        [helper.make_tensor_value_info("state", TensorProto.FLOAT, ["N", state])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["N", action])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(action, dtype=np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="stagewise-test-models")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def write_linear_policy(out, name, spec):
    data = build_linear_policy(name, **spec).SerializeToString()
    path = os.path.join(out, f"{name}.onnx")
    with open(path, "wb") as fh:
        fh.write(data)
    sha = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out, f"{name}.toml"), "w") as fh:
        fh.write(policy_manifest(name, spec, sha).replace(
            "an untrained tanh MLP policy (seed None)", "a linear policy, action[i] = state[i] (i < 3), action[3] = 0").replace(
            "untrained policy with fixed seeded weights", "fixed linear policy"))
    print(f"{path}: {len(data)} bytes, sha256 {sha}")


def pixel_policy_manifest(name, spec, sha):
    quoted = lambda xs: "[" + ", ".join(f'"{x}"' for x in xs) + "]"
    return "\n".join([
        "# Generated by models/make_test_models.py: a linear pixel policy (action[k] from view k's channel k).",
        'kind = "policy"',
        'task = "pick-place"',
        f'onnx = "{name}.onnx"',
        f'sha256 = "{sha}"',
        'description = "fixed linear policy over camera frames, for tests only"',
        f'state_names = {quoted(spec["state_names"])}',
        f'state_size = {len(spec["state_names"])}',
        "",
        "[pixels]",
        f'views = {quoted(spec["views"])}',
        f'width = {spec["size"]}',
        f'height = {spec["size"]}',
        *(["remember_first = true"] if spec.get("remember_first") else []),
        "",
        "[inputs]",
        'state = "state"',
        "",
        "[outputs]",
        'action = "action"',
        "",
    ])


def write_pixel_policy(out, name, spec):
    data = build_pixel_policy(name, **spec).SerializeToString()
    path = os.path.join(out, f"{name}.onnx")
    with open(path, "wb") as fh:
        fh.write(data)
    sha = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out, f"{name}.toml"), "w") as fh:
        fh.write(pixel_policy_manifest(name, spec, sha))
    print(f"{path}: {len(data)} bytes, sha256 {sha}")


def policy_manifest(name, spec, sha):
    held = f', each action held {spec["repeat"]} steps' if spec.get("repeat") else ""
    return "\n".join([
        f'# Generated by models/make_test_models.py: an untrained tanh MLP policy (seed {spec.get("seed")}){held}.',
        'kind = "policy"',
        f'onnx = "{name}.onnx"',
        f'sha256 = "{sha}"',
        'description = "untrained policy with fixed seeded weights, for tests only"',
        f'state_size = {spec["state"]}',
        "",
        "[inputs]",
        'state = "state"',
        "",
        "[outputs]",
        'action = "action"',
        "",
    ])


def manifest(name, spec, sha):
    lines = [
        f'# Generated by models/make_test_models.py: a deterministic, untrained test model (seed {spec["seed"]}).',
        'kind = "stage_progress"',
        f'onnx = "{name}.onnx"',
        f'sha256 = "{sha}"',
        'description = "untrained conv net with fixed seeded weights, for tests and benchmarks only"',
        "views = [" + ", ".join(f'"{x}"' for x in spec["views"]) + "]",
        f'frames = {spec["frames"]}',
        f'stride = {spec["stride"]}',
        f'state_size = {spec["state"]}',
        "",
        "[image]",
        f'width = {spec["size"]}',
        f'height = {spec["size"]}',
        "mean = [0.485, 0.456, 0.406]",
        "std = [0.229, 0.224, 0.225]",
        "",
        "[inputs]",
        'images = "images"',
    ]
    if spec["state"]:
        lines.append('state = "state"')
    lines += [
        "",
        "[outputs]",
        'stage_logits = "stage_logits"',
        'tau = "tau"',
        "",
        "[stages]",
        "names = [" + ", ".join(f'"{x}"' for x in spec["stages"]) + "]",
        "proportions = [" + ", ".join(repr(float(x)) for x in spec["proportions"]) + "]",
        f'progress = "{spec["progress"]}"',
        "",
    ]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "test"))
    ap.add_argument("--policy", nargs=3, metavar=("FILE", "STATE", "ACTION"),
                    help="write only a policy ONNX file for the given state and action sizes, and exit")
    ap.add_argument("--seed", type=int, default=5, help="weights seed for --policy")
    ap.add_argument("--pixel-policy", nargs=2, metavar=("DIR", "SIZE"),
                    help="write only pixel3v8's policy at SIZE x SIZE frames into DIR (as pixel3v<SIZE>), and exit")
    ap.add_argument("--linear-policy", metavar="DIR",
                    help="write only the linear state policies (linear3x4) into DIR, and exit")
    args = ap.parse_args()
    if args.linear_policy:
        os.makedirs(args.linear_policy, exist_ok=True)
        for name, spec in LINEAR_POLICIES.items():
            write_linear_policy(args.linear_policy, name, spec)
        return
    if args.pixel_policy:
        out, size = args.pixel_policy[0], int(args.pixel_policy[1])
        spec = dict(PIXEL_POLICIES["pixel3v8"], size=size)
        os.makedirs(out, exist_ok=True)
        write_pixel_policy(out, f"pixel3v{size}", spec)
        return
    if args.policy:
        path, state, action = args.policy[0], int(args.policy[1]), int(args.policy[2])
        data = build_policy("policy", state, action, args.seed).SerializeToString()
        with open(path, "wb") as fh:
            fh.write(data)
        print(f"{path}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
        return
    os.makedirs(args.out, exist_ok=True)
    for name, spec in POLICIES.items():
        data = build_policy(name, **spec).SerializeToString()
        path = os.path.join(args.out, f"{name}.onnx")
        with open(path, "wb") as fh:
            fh.write(data)
        sha = hashlib.sha256(data).hexdigest()
        with open(os.path.join(args.out, f"{name}.toml"), "w") as fh:
            fh.write(policy_manifest(name, spec, sha))
        print(f"{path}: {len(data)} bytes, sha256 {sha}")
    for name, spec in PIXEL_POLICIES.items():
        write_pixel_policy(args.out, name, spec)
    for name, spec in LINEAR_POLICIES.items():
        write_linear_policy(args.out, name, spec)
    for name, spec in MODELS.items():
        data = build(name, **spec).SerializeToString()
        path = os.path.join(args.out, f"{name}.onnx")
        with open(path, "wb") as fh:
            fh.write(data)
        sha = hashlib.sha256(data).hexdigest()
        with open(os.path.join(args.out, f"{name}.toml"), "w") as fh:
            fh.write(manifest(name, spec, sha))
        print(f"{path}: {len(data)} bytes, sha256 {sha}")


if __name__ == "__main__":
    main()
