"""Adds the two-part export (per-frame encoder + head, DESIGN.md "Two-part models are the fast path") to a progress
model that train.py exported as one graph, without retraining: the weights are read back from the ONNX file.

    .venv/bin/python -m stagewise.training export-parts models/pick-place/pick-place-progress.toml [--step-only]

Writes <stem>.encoder.onnx and <stem>.head.onnx next to the model, checks that encoder + head reproduce the full
graph, and adds (or replaces) the manifest's [parts] section. train.py does the same for every model it trains.
For a model with frames >= 2 it also writes <stem>.step.onnx, the fused step graph (`compose_step`: the encoder's
and the head's nodes in one graph, so the actor's step is one Session::run), checks it against the full graph and
the encoder, and names it in [parts] (`step`, `step_sha256`). `--step-only` composes the step graph from the
encoder and head the manifest already names, leaving them as they are.
"""

from __future__ import annotations

import argparse
import os
import tomllib

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from . import train


# The fused step graph (manifest `[parts] step`): one graph per control step. Inputs: `frames` [N, V, 3, H, W]
# (each env's new frame of every view), `cached` [N, V, F-1, E] (the embeddings of the older frames of each env's
# window, oldest first; kept by the runtime) and the head's state input; outputs: the head's outputs and
# `embedding` [N * V, E] (the new frames' embeddings, for the runtime's window ring). Composed from the encoder and
# head graphs as they are (their nodes and weights), so one `Session::run` replaces the encoder's and the head's.
STEP_FRAMES, STEP_CACHED, STEP_EMBEDDING = "frames", "cached", "embedding"


def _renamed(graph, prefix, keep):
    """The nodes and initializers of `graph` with every value name except those in `keep` prefixed."""
    from onnx import NodeProto, TensorProto

    ren = lambda n: n if (n in keep or n == "") else prefix + n  # noqa: E731
    nodes, inits = [], []
    for n in graph.node:
        m = NodeProto()
        m.CopyFrom(n)
        m.name = prefix + n.name
        m.input[:] = [ren(i) for i in n.input]
        m.output[:] = [ren(o) for o in n.output]
        nodes.append(m)
    for i in graph.initializer:
        j = TensorProto()
        j.CopyFrom(i)
        j.name = ren(i.name)
        inits.append(j)
    return nodes, inits


def _fold_coord_channels(nodes, inits, frames_name):
    """CoordConv (train.py `--coord`): the encoder's first Conv reads Concat(frames, Expand(coords)); the coords
    part of that convolution is the same for every frame, so it becomes a constant bias map and the Conv reads the
    3 image channels alone: Conv(concat(x, c), W) + b = Conv(x, W[:, :3]) + (Conv(c, W[:, 3:]) + b), exact up to
    float rounding (the map is computed in float64). Drops the Expand and its shape arithmetic (about ten small
    nodes per run) and 2 of the 5 input channels of the costliest conv. Leaves the graph alone when the pattern is
    not there."""
    import torch
    import torch.nn.functional as tf
    from onnx import helper, numpy_helper

    by_out = {o: n for n in nodes for o in n.output}
    init = {i.name: i for i in inits}
    conv = next((n for n in nodes if n.op_type == "Conv"), None)
    cat = by_out.get(conv.input[0]) if conv is not None else None
    if cat is None or cat.op_type != "Concat" or len(cat.input) != 2 or cat.input[0] != frames_name:
        return nodes, inits
    exp = by_out.get(cat.input[1])
    if exp is None or exp.op_type != "Expand" or exp.input[0] not in init or len(conv.input) < 3:
        return nodes, inits
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    if attrs.get("group", 1) != 1 or any(d != 1 for d in attrs.get("dilations", [1, 1])) or "auto_pad" in attrs:
        return nodes, inits
    coords = numpy_helper.to_array(init[exp.input[0]]).astype(np.float64)
    w = numpy_helper.to_array(init[conv.input[1]]).astype(np.float64)
    b = numpy_helper.to_array(init[conv.input[2]]).astype(np.float64)
    if coords.ndim != 4 or coords.shape[0] != 1 or w.shape[1] != 3 + coords.shape[1]:
        return nodes, inits
    t, l, bo, r = attrs.get("pads", [0, 0, 0, 0])
    padded = np.pad(coords, ((0, 0), (0, 0), (t, bo), (l, r)))
    bias_map = tf.conv2d(torch.from_numpy(padded), torch.from_numpy(w[:, 3:]), torch.from_numpy(b),
                         stride=tuple(attrs.get("strides", [1, 1]))).numpy()
    w_name, map_name, y = conv.input[1] + "/image", conv.name + "/coord_bias", conv.output[0]
    new_conv = helper.make_node("Conv", [frames_name, w_name], [y + "/image"], name=conv.name + "/image", **attrs)
    add = helper.make_node("Add", [y + "/image", map_name], [y], name=conv.name + "/coord_bias")
    out = []
    for n in nodes:
        out += [new_conv, add] if n is conv else [n]
    inits = inits + [numpy_helper.from_array(np.ascontiguousarray(w[:, :3]).astype(np.float32), w_name),
                     numpy_helper.from_array(bias_map.astype(np.float32), map_name)]
    return out, inits


def _consumers(nodes, name):
    return [n for n in nodes if name in n.input]


def _attrs(node):
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _fold_state_normalisation(nodes, inits, state_name):
    """train.py's head normalises the state, (state - mean) / std, before its first Gemm: folded into that
    Gemm's weights and bias (W' = W / std, b' = b - W' mean, in float64), two small nodes fewer per run. Leaves the
    graph alone when the pattern is not there."""
    from onnx import numpy_helper

    init = {i.name: i for i in inits}
    sub = next((n for n in nodes if n.op_type == "Sub" and n.input[0] == state_name and n.input[1] in init), None)
    div = _consumers(nodes, sub.output[0]) if sub is not None else []
    if len(div) != 1 or div[0].op_type != "Div" or div[0].input[1] not in init:
        return nodes, inits
    div = div[0]
    gemm = _consumers(nodes, div.output[0])
    if len(gemm) != 1 or gemm[0].op_type != "Gemm" or len(gemm[0].input) < 3:
        return nodes, inits
    gemm = gemm[0]
    a = _attrs(gemm)
    if a.get("transA", 0) or not a.get("transB", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
        return nodes, inits
    mean = numpy_helper.to_array(init[sub.input[1]]).astype(np.float64)
    std = numpy_helper.to_array(init[div.input[1]]).astype(np.float64)
    w = numpy_helper.to_array(init[gemm.input[1]]).astype(np.float64)
    b = numpy_helper.to_array(init[gemm.input[2]]).astype(np.float64)
    if mean.shape != (w.shape[1],) or std.shape != (w.shape[1],):
        return nodes, inits
    w2 = w / std[None, :]
    b2 = b - w2 @ mean
    w_name, b_name = gemm.input[1] + "/state_folded", gemm.input[2] + "/state_folded"
    gemm.input[:] = [state_name, w_name, b_name]
    nodes = [n for n in nodes if n is not sub and n is not div]
    inits = inits + [numpy_helper.from_array(w2.astype(np.float32), w_name),
                     numpy_helper.from_array(b2.astype(np.float32), b_name)]
    return nodes, inits


def _flat_window(nodes, inits, window_name, views, frames, embedding):
    """train.py's head flattens its window of embeddings [N, V, F, E] and concatenates it with the state features
    before the trunk's first Gemm. The step graph instead concatenates [cached (flattened), new (flattened),
    state features] and permutes that Gemm's weight columns to match: the same sums in another order, and one
    Concat and two Reshapes fewer than building the window first. Returns None when the pattern is not there."""
    from onnx import helper, numpy_helper

    init = {i.name: i for i in inits}
    flat = next((n for n in nodes if n.op_type == "Reshape" and n.input[0] == window_name), None)
    cat = _consumers(nodes, flat.output[0]) if flat is not None else []
    if len(cat) != 1 or cat[0].op_type != "Concat" or cat[0].input[0] != flat.output[0]:
        return None
    cat = cat[0]
    if _attrs(cat).get("axis") not in (1, -1):
        return None
    gemm = _consumers(nodes, cat.output[0])
    if len(gemm) != 1 or gemm[0].op_type != "Gemm" or gemm[0].input[1] not in init:
        return None
    gemm = gemm[0]
    a = _attrs(gemm)
    if a.get("transA", 0) or not a.get("transB", 0):
        return None
    w = numpy_helper.to_array(init[gemm.input[1]])
    V, F, E = views, frames, embedding
    if w.ndim != 2 or w.shape[1] < V * F * E:
        return None
    old = [v * F * E + f * E + k for v in range(V) for f in range(F - 1) for k in range(E)]
    new = [v * F * E + (F - 1) * E + k for v in range(V) for k in range(E)]
    rest = list(range(V * F * E, w.shape[1]))
    w_name = gemm.input[1] + "/step_order"
    gemm.input[1] = w_name
    glue = [
        helper.make_node("Reshape", [STEP_CACHED, "step/cached_shape"], ["step/cached_flat"], name="step/cached_flat"),
        helper.make_node("Reshape", [STEP_EMBEDDING, "step/new_shape"], ["step/new_flat"], name="step/new_flat"),
        helper.make_node("Concat", ["step/cached_flat", "step/new_flat"] + list(cat.input[1:]), [cat.output[0]],
                         axis=1, name="step/window"),
    ]
    nodes = glue + [n for n in nodes if n is not flat and n is not cat]
    inits = inits + [
        numpy_helper.from_array(np.array([-1, V * (F - 1) * E], np.int64), "step/cached_shape"),
        numpy_helper.from_array(np.array([-1, V * E], np.int64), "step/new_shape"),
        numpy_helper.from_array(np.ascontiguousarray(w[:, old + new + rest]), w_name),
    ]
    return nodes, inits


def _prune_and_sort(nodes, inits, inputs, outputs):
    """Drops nodes and initializers no output needs; orders the nodes topologically."""
    needed = set(outputs)
    while True:
        keep = [n for n in nodes if any(o in needed for o in n.output)]
        more = set(outputs) | {i for n in keep for i in n.input}
        if more == needed:
            break
        needed = more
    have, ordered, rest = set(inputs) | {i.name for i in inits}, [], keep
    while rest:
        i = next((i for i, n in enumerate(rest) if all(x in have or x == "" for x in n.input)), None)
        if i is None:
            raise SystemExit("step graph: the composed graph has a cycle or a missing input")
        have.update(rest[i].output)
        ordered.append(rest.pop(i))
    return ordered, [i for i in inits if i.name in needed]


def compose_step(encoder_path, head_path, views, frames, embedding, out_path, simplify=True):
    """Writes the fused step graph (see STEP_* above) composed from the encoder and head graphs. `simplify`: the
    exact rewrites below where their patterns are there (the CoordConv bias map, the folded state normalisation,
    the flat window concat); without it the graph holds the encoder's and head's nodes as they are."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if frames < 2:
        raise SystemExit("a step graph needs frames >= 2 (with one frame per window nothing is cached)")
    enc, head = onnx.load(encoder_path), onnx.load(head_path)
    (enc_in,), (enc_out,) = enc.graph.input, enc.graph.output
    head_emb = next(i for i in head.graph.input if i.name == "embeddings")
    head_other = [i for i in head.graph.input if i.name != "embeddings"]
    keep = {o.name for o in head.graph.output} | {i.name for i in head_other}
    c, h, w = (d.dim_value for d in enc_in.type.tensor_type.shape.dim[1:])
    if enc_out.name != STEP_EMBEDDING:
        raise SystemExit(f"{encoder_path}: the encoder's output is {enc_out.name!r}, expected {STEP_EMBEDDING!r}")
    en, ei = _renamed(enc.graph, "encoder/", {STEP_EMBEDDING})
    hn, hi = _renamed(head.graph, "head/", keep)
    h_in = "head/" + head_emb.name
    nodes = [helper.make_node("Reshape", [STEP_FRAMES, "step/frames_shape"], ["encoder/" + enc_in.name],
                              name="step/frames")] + en + hn
    inits = [numpy_helper.from_array(np.array([-1, c, h, w], np.int64), "step/frames_shape")] + ei + hi
    flat = _flat_window(nodes, inits, h_in, views, frames, embedding) if simplify else None
    if flat:
        nodes, inits = flat
    else:  # the head's window input, [cached, new] along the frames axis
        nodes += [
            helper.make_node("Reshape", [STEP_EMBEDDING, "step/new_shape"], ["step/new"], name="step/new"),
            helper.make_node("Concat", [STEP_CACHED, "step/new"], [h_in], axis=2, name="step/window"),
        ]
        inits += [numpy_helper.from_array(np.array([-1, views, 1, embedding], np.int64), "step/new_shape")]
    if simplify:
        nodes, inits = _fold_coord_channels(nodes, inits, "encoder/" + enc_in.name)
        for i in head_other:
            nodes, inits = _fold_state_normalisation(nodes, inits, i.name)
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(STEP_FRAMES, f32, ["batch", views, c, h, w]),
              helper.make_tensor_value_info(STEP_CACHED, f32, ["batch", views, frames - 1, embedding])] + head_other
    outputs = list(head.graph.output) + [helper.make_tensor_value_info(STEP_EMBEDDING, f32, ["frames", embedding])]
    nodes, inits = _prune_and_sort(nodes, inits, [i.name for i in inputs], [o.name for o in outputs])
    graph = helper.make_graph(nodes, "step", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=list(head.opset_import), ir_version=head.ir_version)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, out_path)
    return os.path.basename(out_path)


def check_step(single_path, encoder_path, step_path, man, n=5, tol=1e-4):
    """The step graph against the single graph on random windows (its outputs) and against the encoder (its
    new embeddings); exits when either differs by more than `tol`."""
    import onnxruntime as ort

    V, F, H, W = len(man["views"]), man["frames"], man["image"]["height"], man["image"]["width"]
    run = lambda p, feeds: ort.InferenceSession(p, providers=["CPUExecutionProvider"]).run(None, feeds)  # noqa: E731
    rng = np.random.default_rng(1)
    images = rng.normal(0, 1, (n, V, F, 3, H, W)).astype(np.float32)
    state = rng.normal(0, 1, (n, man["state_size"])).astype(np.float32)
    feeds = {man["inputs"]["images"]: images}
    st = man["inputs"].get("state")
    if st:
        feeds[st] = state
    full = run(single_path, feeds)
    (emb,) = run(encoder_path, {"frames": images.reshape(-1, 3, H, W)})
    emb = emb.reshape(n, V, F, -1)
    step_feeds = {STEP_FRAMES: np.ascontiguousarray(images[:, :, F - 1]),
                  STEP_CACHED: np.ascontiguousarray(emb[:, :, : F - 1])}
    if st:
        step_feeds[st] = state
    got = run(step_path, step_feeds)
    # relative to the outputs' scale: random windows can drive the logits to ~1e3, where float32's rounding (the
    # step graph sums in another order) alone is ~1e-4
    err = max(float(np.abs(a - b).max()) / max(1.0, float(np.abs(a).max())) for a, b in zip(full, got[:-1]))
    err_e = float(np.abs(got[-1].reshape(n, V, -1) - emb[:, :, F - 1]).max())
    print(f"step graph vs full graph max diff (relative to max(1, |output|)): {err:.2e}; its embeddings vs the "
          f"encoder's: {err_e:.2e}")
    if err > tol or err_e > tol:
        raise SystemExit(f"the step graph disagrees with the full graph ({err}) or the encoder ({err_e})")


def parts_section(d, enc, head, emb, step):
    """The manifest's [parts] section for the files `enc`, `head` and `step` (None: no step graph) in `d`."""
    text = (
        f'\n[parts]\nencoder = "{enc}"\nencoder_sha256 = "{train.sha256(os.path.join(d, enc))}"\n'
        f'head = "{head}"\nhead_sha256 = "{train.sha256(os.path.join(d, head))}"\nembedding = {emb}\n'
    )
    if step:
        text += f'step = "{step}"\nstep_sha256 = "{train.sha256(os.path.join(d, step))}"\n'
    return text


def main(argv=None, prog=None):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", help="a stage_progress manifest written by train.py")
    ap.add_argument("--step-only", action="store_true",
                    help="keep the manifest's encoder and head as they are; compose only the step graph from them")
    ap.add_argument("--no-simplify", action="store_true",
                    help="compose the step graph from the encoder's and head's nodes as they are (no rewrites)")
    args = ap.parse_args(argv)
    with open(args.manifest, "rb") as f:
        man = tomllib.load(f)
    if man.get("kind") != "stage_progress":
        raise SystemExit(f"{args.manifest}: kind is {man.get('kind')!r}, expected \"stage_progress\"")
    d = os.path.dirname(os.path.abspath(args.manifest))
    onnx_path = os.path.join(d, man["onnx"])
    stem = os.path.splitext(man["onnx"])[0]
    V, F = len(man["views"]), man["frames"]
    if args.step_only:
        if "parts" not in man:
            raise SystemExit(f"{args.manifest}: --step-only needs a [parts] section (run without it first)")
        enc, head, emb = man["parts"]["encoder"], man["parts"]["head"], man["parts"]["embedding"]
        step = None
    else:  # the encoder, the head and (frames >= 2) the step graph, as train.py writes them
        enc, head, emb, step = export_two_parts(man, d, onnx_path, stem)
    if F >= 2 and (args.step_only or args.no_simplify):
        step = compose_step(os.path.join(d, enc), os.path.join(d, head), V, F, emb,
                            os.path.join(d, stem + ".step.onnx"), simplify=not args.no_simplify)
        check_step(onnx_path, os.path.join(d, enc), os.path.join(d, step), man)
    with open(args.manifest) as f:
        text = f.read()
    text = text.split("\n[parts]\n")[0].rstrip("\n") + "\n" + parts_section(d, enc, head, emb, step)
    with open(args.manifest, "w") as f:
        f.write(text)
    print(f"wrote {enc}, {head}{', ' + step if step else ''} and the [parts] section of {args.manifest}")


def export_two_parts(man, d, onnx_path, stem):
    """Rebuilds the torch model from the single graph's weights and exports the encoder and the head."""
    weights = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy())
               for i in onnx.load(onnx_path).graph.initializer}
    V, F = len(man["views"]), man["frames"]
    H, W = man["image"]["height"], man["image"]["width"]
    K = len(man["stages"]["names"])
    # The encoder's conv widths, from its weights (`enc.conv.<i>.weight` is [out, in, 3, 3]).
    convs = sorted((int(k.split(".")[2]), v.shape[0]) for k, v in weights.items()
                   if k.startswith("enc.conv.") and k.endswith(".weight"))
    model = train.ProgressNet(V, F, H, W, weights["s_mean"].numpy(), weights["s_std"].numpy(), K,
                              chans=tuple(c for _, c in convs) or train.ENC_CHANNELS,
                              coord="enc.coords" in weights)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise SystemExit(f"{onnx_path}: not a train.py ProgressNet (missing {missing}, unexpected {unexpected})")
    model.eval()
    rng = np.random.default_rng(0)
    example = (torch.from_numpy(rng.normal(0, 1, (8, V, F, 3, H, W)).astype(np.float32)),
               weights["s_mean"][None].repeat(8, 1) + torch.from_numpy(rng.normal(0, 1, (8, man["state_size"]))
                                                                       .astype(np.float32)) * weights["s_std"])
    train.check_onnx(onnx_path, example, model)  # the rebuilt torch model is the graph
    return train.export_parts(model, onnx_path, example, os.path.join(d, stem))


if __name__ == "__main__":
    main()
