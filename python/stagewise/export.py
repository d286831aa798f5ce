"""Export a trained Stable-Baselines3 policy to the ONNX form `stagewise run --policy FILE` and `policy push`
accept: one input `state` f32 [N, S], one output `action` f32 [N, A] (the deterministic action, clipped to the
action bounds). Built with `onnx.helper` from the network's weights (no tracing, no torch exporter)."""

from __future__ import annotations

from typing import Any, List

import numpy as np


def _layers(seq: Any) -> List[Any]:
    import torch.nn as nn

    out = []
    for m in seq.modules() if isinstance(seq, nn.Sequential) else [seq]:
        if isinstance(m, nn.Sequential):
            continue
        if isinstance(m, (nn.Linear, nn.Tanh, nn.ReLU, nn.Identity)):
            out.append(m)
        elif isinstance(m, nn.Flatten):
            continue
        else:
            raise ValueError(f"cannot export layer {type(m).__name__}: supported are Linear, Tanh, ReLU")
    return out


def sb3_policy_to_onnx(model: Any, opset: int = 17) -> bytes:
    """ONNX bytes of an SB3 on-policy actor (PPO/A2C `MlpPolicy` on a Box observation and a Box action): the
    mean action of the Gaussian, clipped to the action space. Observation normalisation is not supported."""
    import onnx
    import torch.nn as nn
    from onnx import TensorProto, helper, numpy_helper

    policy = model.policy
    obs_space, act_space = model.observation_space, model.action_space
    if len(obs_space.shape) != 1 or len(act_space.shape) != 1:
        raise ValueError("only flat Box observations and actions export (use the state-only env)")
    if getattr(policy, "squash_output", False):
        raise ValueError("squashed (tanh) policies are not supported by this exporter")
    layers = _layers(policy.mlp_extractor.policy_net) + [policy.action_net]
    nodes, inits = [], []
    x = "state"
    for i, m in enumerate(layers):
        y = f"h{i}"
        if isinstance(m, nn.Linear):
            w = m.weight.detach().cpu().numpy().astype(np.float32)
            b = m.bias.detach().cpu().numpy().astype(np.float32)
            inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
            nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [y], transB=1))
        elif isinstance(m, nn.Tanh):
            nodes.append(helper.make_node("Tanh", [x], [y]))
        elif isinstance(m, nn.ReLU):
            nodes.append(helper.make_node("Relu", [x], [y]))
        else:
            continue
        x = y
    low = np.asarray(act_space.low, dtype=np.float32).reshape(1, -1)
    high = np.asarray(act_space.high, dtype=np.float32).reshape(1, -1)
    inits += [numpy_helper.from_array(low, "low"), numpy_helper.from_array(high, "high")]
    nodes.append(helper.make_node("Max", [x, "low"], ["clipped_low"]))
    nodes.append(helper.make_node("Min", ["clipped_low", "high"], ["action"]))
    s, a = int(obs_space.shape[0]), int(act_space.shape[0])
    graph = helper.make_graph(
        nodes,
        "stagewise_policy",
        [helper.make_tensor_value_info("state", TensorProto.FLOAT, ["N", s])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["N", a])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="stagewise")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()
