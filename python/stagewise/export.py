"""Policies for the runtime: the one MLP -> ONNX builder (`mlp_to_onnx`) and the one `kind = "policy"` manifest
writer (`write_policy`) that every learner here uses (stagewise.rl, stagewise.bc, `sb3_policy_to_onnx`).

A policy graph takes one input `state` f32 [N, S] and gives one output `action` f32 [N, A] (what `stagewise eval
policy`, `stagewise run --policy` and `policy push` load; crates/model/src/policy.rs). What the input holds
(state fields by name, camera frames or a reward model's embeddings before them) and the action repeat live in
the graph's metadata (`with_inputs`), so that bare bytes pushed to an actor are bound as a manifest policy is. Built with `onnx.helper`
from the weights (no tracing, no torch exporter), opset 17, IR version 8."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

# ONNX metadata key the runtime reads to hold each action K steps (crates/model/src/policy.rs ACTION_REPEAT_KEY).
ACTION_REPEAT_KEY = "stagewise.action_repeat"
# ONNX metadata keys of a policy's inputs (crates/model/src/policy.rs PolicyInputs), each a JSON value: the state
# fields by name (a list of strings), the camera frames before them ({"views", "width", "height"}) or a reward
# model's frame embeddings before them ({"encoder_sha256", "views", "size"}). In the graph, the sha256 and a
# push's signature cover them: pushed bytes are bound by name as a manifest policy is.
STATE_NAMES_KEY = "stagewise.state_names"
PIXELS_KEY = "stagewise.pixels"
EMBEDDINGS_KEY = "stagewise.embeddings"
_PIXELS_FIELDS = ("views", "width", "height")
_EMBEDDINGS_FIELDS = ("encoder_sha256", "views", "size")


def mlp_to_onnx(layers: Sequence[Any], state_size: int, action_size: int,
                input_affine: Optional[Tuple[np.ndarray, np.ndarray]] = None, output: str = "tanh",
                low=None, high=None) -> bytes:
    """ONNX bytes of `state -> [W s + b] -> layers -> output -> action`.

    `layers`: torch `Linear` / `ReLU` / `Tanh` modules in order (the last Linear gives `action_size` values);
    `input_affine`: an optional fixed map (W [F, S], b [F]) applied to the state first; `output`: "tanh" (tanh, then
    a clip to [-1, 1]: ONNX Runtime's tanh can return 1 + 1e-7) or "clip" (clipped to [`low`, `high`], per action
    value or scalars)."""
    import onnx
    import torch.nn as nn
    from onnx import TensorProto, helper, numpy_helper

    if output not in ("tanh", "clip"):
        raise ValueError(f"output must be 'tanh' or 'clip', not {output!r}")
    if output == "clip" and (low is None or high is None):
        raise ValueError("output 'clip' needs low and high (the action bounds)")
    nodes, inits = [], []

    def gemm(x: str, w, b, name: str) -> str:
        inits.extend([numpy_helper.from_array(np.ascontiguousarray(w, np.float32), f"{name}_w"),
                      numpy_helper.from_array(np.ascontiguousarray(b, np.float32).reshape(-1), f"{name}_b")])
        nodes.append(helper.make_node("Gemm", [x, f"{name}_w", f"{name}_b"], [name], transB=1))
        return name

    x, width = "state", state_size
    if input_affine is not None:
        w, b = (np.asarray(v, np.float32) for v in input_affine)
        if w.ndim != 2 or w.shape[1] != state_size or b.shape != (w.shape[0],):
            raise ValueError(f"input_affine: W {w.shape} and b {b.shape} do not map a state of {state_size} values")
        x, width = gemm(x, w, b, "features"), w.shape[0]
    for k, m in enumerate(layers):
        if isinstance(m, nn.Linear):
            if m.in_features != width:
                raise ValueError(f"layer {k} (Linear {m.in_features}->{m.out_features}) gets {width} values")
            x = gemm(x, m.weight.detach().cpu().numpy(), m.bias.detach().cpu().numpy(), f"fc{k}")
            width = m.out_features
        elif isinstance(m, (nn.ReLU, nn.Tanh)):
            op = "Relu" if isinstance(m, nn.ReLU) else "Tanh"
            nodes.append(helper.make_node(op, [x], [f"{x}_{op.lower()}"]))
            x = f"{x}_{op.lower()}"
        elif not isinstance(m, nn.Identity):
            raise ValueError(f"cannot export layer {k} ({type(m).__name__}): supported are Linear, ReLU, Tanh")
    if width != action_size:
        raise ValueError(f"the last layer gives {width} values, the action has {action_size}")
    if output == "tanh":
        nodes.append(helper.make_node("Tanh", [x], ["squashed"]))
        lo, hi, x = np.array(-1.0, np.float32), np.array(1.0, np.float32), "squashed"
        inits += [numpy_helper.from_array(lo, "lo"), numpy_helper.from_array(hi, "hi")]
        nodes.append(helper.make_node("Clip", [x, "lo", "hi"], ["action"]))
    else:
        lo = np.broadcast_to(np.asarray(low, np.float32), (action_size,)).reshape(1, -1)
        hi = np.broadcast_to(np.asarray(high, np.float32), (action_size,)).reshape(1, -1)
        inits += [numpy_helper.from_array(np.ascontiguousarray(lo), "low"),
                  numpy_helper.from_array(np.ascontiguousarray(hi), "high")]
        nodes.append(helper.make_node("Max", [x, "low"], ["clipped_low"]))
        nodes.append(helper.make_node("Min", ["clipped_low", "high"], ["action"]))
    graph = helper.make_graph(nodes, "stagewise_policy",
                              [helper.make_tensor_value_info("state", TensorProto.FLOAT, ["N", state_size])],
                              [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["N", action_size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="stagewise")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _with_action_repeat(onnx_bytes: bytes, repeat: int) -> bytes:
    """The graph with `stagewise.action_repeat` in its metadata: the runtime reads the repeat from the graph (so
    the sha256 and a push's signature cover it), not from the manifest."""
    return with_inputs(onnx_bytes, action_repeat=repeat)


def _inputs_metadata(state_names, pixels, embeddings) -> Dict[str, str]:
    """The metadata entries of a policy's inputs, checked as the runtime checks them (it refuses what fails)."""
    props: Dict[str, str] = {}
    if pixels is not None and embeddings is not None:
        raise ValueError("a policy reads either pixels (camera frames) or embeddings (a reward model's frame "
                         "embeddings), not both")
    if state_names is not None:
        names = [str(n) for n in state_names]
        if isinstance(state_names, str) or any(not n.strip() for n in names) or len(set(names)) != len(names):
            raise ValueError(f"state_names must be a list of unique, non-empty field names, not {state_names!r}")
        props[STATE_NAMES_KEY] = json.dumps(names)
    for key, value, fields in ((PIXELS_KEY, pixels, _PIXELS_FIELDS), (EMBEDDINGS_KEY, embeddings, _EMBEDDINGS_FIELDS)):
        if value is None:
            continue
        optional = {"remember_first"} if key == PIXELS_KEY else set()
        if not isinstance(value, dict) or not set(fields) <= set(value) <= set(fields) | optional:
            extra = f" (optional: {', '.join(sorted(optional))})" if optional else ""
            raise ValueError(f"{key.split('.')[1]} must be a dict of exactly {', '.join(fields)}{extra}, not "
                             f"{value!r}")
        if key == PIXELS_KEY:
            views = [str(v) for v in value["views"]]
            w, h = int(value["width"]), int(value["height"])
            first = value.get("remember_first", False)
            if not views or len(set(views)) != len(views) or not (1 <= w <= 4096 and 1 <= h <= 4096) \
                    or not isinstance(first, bool):
                raise ValueError(f"pixels {value!r}: unique views, width and height in 1..=4096, remember_first "
                                 "true or false expected")
            props[key] = json.dumps({"views": views, "width": w, "height": h,
                                     **({"remember_first": True} if first else {})})
        else:
            sha, v, n = str(value["encoder_sha256"]), int(value["views"]), int(value["size"])
            if len(sha) != 64 or any(c not in "0123456789abcdefABCDEF" for c in sha) or v < 1 or n < 1:
                raise ValueError(f"embeddings {value!r}: a sha256 of 64 hex digits and views, size >= 1 expected")
            props[key] = json.dumps({"encoder_sha256": sha, "views": v, "size": n})
    return props


def _input_width(props: Dict[str, str], state: int) -> int:
    """Values of a policy's input row for `state` state fields, from its inputs' metadata: what comes before the
    state (frames or embeddings), then the state; twice with pixels' remember_first (now, then the first)."""
    if PIXELS_KEY in props:
        p = json.loads(props[PIXELS_KEY])
        return (len(p["views"]) * 3 * p["width"] * p["height"] + state) * (2 if p.get("remember_first") else 1)
    if EMBEDDINGS_KEY in props:
        e = json.loads(props[EMBEDDINGS_KEY])
        return e["views"] * e["size"] + state
    return state


def with_inputs(onnx_bytes: bytes, *, state_names: Optional[Sequence[str]] = None,
                pixels: Optional[Dict[str, Any]] = None, embeddings: Optional[Dict[str, Any]] = None,
                action_repeat: Optional[int] = None) -> bytes:
    """The graph with its inputs (and action repeat) in its ONNX metadata: push-ready bytes for
    `stagewise.publish_policy`, which an actor binds as it binds a manifest policy (state fields by name, frames
    from its cameras at their size, embeddings from its reward model's encoder) instead of reading its whole
    state. `state_names`: the state fields in input order (`stagewise.state_names`); `pixels` ({views, width,
    height[, remember_first]}: `stagewise.pixels`) or `embeddings` ({encoder_sha256, views, size}:
    `stagewise.embeddings`): what the input holds before them; `action_repeat` (1..=1000: `stagewise.action_repeat`). Keys left None are left as the
    graph has them. When `state_names` is given and the graph's input width is fixed, it must be the frames' or
    embeddings' values plus one per name."""
    import onnx
    from onnx import helper

    props = _inputs_metadata(state_names, pixels, embeddings)
    if action_repeat is not None:
        if not isinstance(action_repeat, int) or isinstance(action_repeat, bool) or not 1 <= action_repeat <= 1000:
            raise ValueError(f"action_repeat must be an integer in 1..=1000, not {action_repeat!r}")
        props[ACTION_REPEAT_KEY] = str(action_repeat)
    if not props:
        return onnx_bytes
    model = onnx.load_from_string(onnx_bytes)
    if state_names is not None and len(model.graph.input) == 1:
        dims = [d.dim_value if d.HasField("dim_value") else None for d in model.graph.input[0].type.tensor_type.shape.dim]
        want = _input_width(props, len(state_names))
        if len(dims) == 2 and dims[1] is not None and dims[1] != want:
            before = props.get(PIXELS_KEY) or props.get(EMBEDDINGS_KEY) or "nothing before them"
            raise ValueError(f"the graph's input has {dims[1]} values; these inputs are {want} "
                             f"({len(state_names)} state fields, {before})")
    merged = {p.key: p.value for p in model.metadata_props}
    merged.update(props)
    del model.metadata_props[:]
    helper.set_model_props(model, merged)
    return model.SerializeToString()


def _toml_value(key: str, v: Any) -> str:
    # JSON string escapes are valid TOML basic-string escapes
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)):
        return json.dumps(v)
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float, str)) for x in v):
        return "[" + ", ".join(json.dumps(x) for x in v) + "]"
    if isinstance(v, dict):  # an inline table of the same values
        return "{ " + ", ".join(f"{k} = {_toml_value(f'{key}.{k}', x)}" for k, x in v.items()) + " }"
    raise ValueError(f"manifest key {key}: cannot write {type(v).__name__} {v!r} (str, number, bool, a list or a "
                     "table of them)")


def atomic_write(path, data: bytes) -> None:
    """Writes `path` crash-safe: a temporary file beside it, flushed and fsynced, renamed over it, the directory
    fsynced; a crash leaves the old file or the new one, never a torn one. Mode as `open` would give (umask)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)  # the rename survives a crash only once the directory is on disk
    finally:
        os.close(dfd)


def write_policy(out_dir, name: str, onnx_bytes: bytes, *, task: str, state_size: int, action_size: int,
                 description: str, extra: Optional[Dict[str, Any]] = None) -> pathlib.Path:
    """Writes `<out_dir>/<name>.onnx` and its `kind = "policy"` manifest `<out_dir>/<name>.toml` (each replaced
    atomically); returns the manifest's path.

    `extra`: more manifest keys (e.g. `state_names`). `action_repeat` (K > 1: the policy chooses an action every K
    control steps, as it was trained) is not a manifest key: it goes into the graph's metadata, where the runtime
    reads it. The policy's inputs (`state_names`, `pixels`, `embeddings`) stay manifest keys and go into the
    graph's metadata too (`with_inputs`), so the sha256 covers them and the `.onnx` alone is push-ready; the
    runtime refuses a manifest that disagrees with its graph. `action_size` is checked against the graph's
    output."""
    import onnx

    extra = dict(extra or {})
    repeat = extra.pop("action_repeat", 1)
    onnx_bytes = with_inputs(onnx_bytes, state_names=extra.get("state_names"), pixels=extra.get("pixels"),
                             embeddings=extra.get("embeddings"), action_repeat=None if repeat == 1 else repeat)
    model = onnx.load_from_string(onnx_bytes)
    dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    if len(dims) != 2 or dims[1] != action_size:
        raise ValueError(f"policy {name}: the graph's output is {dims}, not [N, {action_size}]")
    reserved = {"kind", "onnx", "sha256", "state_size", "description", "task", "inputs", "outputs"}
    clash = reserved & set(extra)
    if clash:
        raise ValueError(f"policy {name}: extra keys {sorted(clash)} are written by write_policy itself")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines: List[str] = [
        'kind = "policy"',
        f"onnx = {json.dumps(name + '.onnx')}",
        f'sha256 = "{hashlib.sha256(onnx_bytes).hexdigest()}"',
        f"task = {json.dumps(task)}",
        f"state_size = {int(state_size)}",
        f"description = {json.dumps(description)}",
    ]
    lines += [f"{k} = {_toml_value(k, v)}" for k, v in extra.items()]
    lines += ["", "[inputs]", 'state = "state"', "", "[outputs]", 'action = "action"', ""]
    atomic_write(out / f"{name}.onnx", onnx_bytes)
    manifest = out / f"{name}.toml"
    atomic_write(manifest, "\n".join(lines).encode())
    return manifest


def sb3_layers(seq: Any) -> List[Any]:
    """The Linear / activation modules of an SB3 network, in order."""
    import torch.nn as nn

    out = []
    for m in seq.modules() if isinstance(seq, nn.Sequential) else [seq]:
        if isinstance(m, (nn.Sequential, nn.Flatten)):
            continue
        if isinstance(m, (nn.Linear, nn.Tanh, nn.ReLU, nn.Identity)):
            out.append(m)
        else:
            raise ValueError(f"cannot export layer {type(m).__name__}: supported are Linear, Tanh, ReLU")
    return out


def sb3_policy_to_onnx(model: Any) -> bytes:
    """ONNX bytes of an SB3 on-policy actor (PPO/A2C `MlpPolicy` on a Box observation and a Box action): the
    mean action of the Gaussian, clipped to the action space. Observation normalisation is not supported."""
    policy = model.policy
    obs_space, act_space = model.observation_space, model.action_space
    if len(obs_space.shape) != 1 or len(act_space.shape) != 1:
        raise ValueError("only flat Box observations and actions export (use the state-only env)")
    if getattr(policy, "squash_output", False):
        raise ValueError("squashed (tanh) policies are not supported by this exporter")
    layers = sb3_layers(policy.mlp_extractor.policy_net) + [policy.action_net]
    return mlp_to_onnx(layers, int(obs_space.shape[0]), int(act_space.shape[0]), output="clip",
                       low=act_space.low, high=act_space.high)
