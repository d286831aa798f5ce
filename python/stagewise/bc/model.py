"""The BC policy network (an MLP on state features) and how it becomes the layer list `stagewise.export`'s
`mlp_to_onnx` takes (Linear / ReLU / Tanh in order, output clipped to [-1, 1])."""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import torch

# `rel` features pass their affine part through the exporter's Tanh scaled by 2^-20 (tanh(x) = x to float
# precision there: |x| < 1e-3 for |feature| < 1000) and the next layer scales it back.
PASS_SCALE = 2.0 ** -20
# The gripper's sign: its logit times 2^100 (exact in float) then clipped to [-1, 1] is +-1 for any logit
# further than 1e-30 from 0 (|logit| up to 1e8 stays finite).
SIGN_SCALE = 2.0 ** 100


class FeatureError(ValueError):
    pass


class Features(torch.nn.Module):
    """State -> network input, fields found by name (`names`, the dataset's state names).

    `raw`: the standardised state. `rel` adds what the pick-place expert's decisions hinge on, in units where its
    thresholds (millimetres) are not lost next to the workspace (decimetres): ee - block (3), block - target (2),
    ee - target (2), each x20 (5 cm -> 1) and the first two also through tanh(x200) (saturates at ~5 mm), plus the
    gripper width centred. `task = "stack"` reads block1's xy as the target."""

    def __init__(self, mean, std, kind: str, names: Optional[Sequence[str]] = None, task: Optional[str] = None):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean))
        self.register_buffer("std", torch.as_tensor(std))
        self.kind = kind
        if kind == "raw":
            return
        if task == "push-target":
            raise FeatureError("rel features for push-target (the push geometry: square root and division) "
                               "are not expressible as the exporter's Linear/ReLU/Tanh layers: use --features raw")
        if names is None:
            raise FeatureError("rel features find the state fields by name and the dataset names none "
                               "(meta/info.json features.observation.state.names): use --features raw")
        names = list(names)

        def at(first: str, n: int) -> int:
            if first not in names:
                raise FeatureError(f"rel features need the state field {first!r} (the state has {names}); "
                                   "use --features raw")
            i = names.index(first)
            if names[i:i + n] != [first[:-1] + c for c in "xyz"[:n]]:
                raise FeatureError(f"state fields {names[i:i + n]} are not {first[:-2]}_x.. (names: {names})")
            return i

        self.ee = at("ee_x", 3)
        self.blk = at("block0_x", 3)
        self.tgt = at("block1_x", 2) if task == "stack" else at("target_x", 2)
        if "gripper_width" not in names:
            raise FeatureError(f"rel features need the state field 'gripper_width' (the state has {names})")
        self.width = names.index("gripper_width")

    def forward(self, s):
        x = (s - self.mean) / self.std
        if self.kind == "raw":
            return x
        ee, blk = s[:, self.ee:self.ee + 3], s[:, self.blk:self.blk + 3]
        tgt = s[:, self.tgt:self.tgt + 2]
        d_eb = (ee - blk) * 20.0
        d_bt = (blk[:, :2] - tgt) * 20.0
        d_et = (ee[:, :2] - tgt) * 20.0
        w = (s[:, self.width:self.width + 1] - 0.04) * 25.0
        return torch.cat([x, d_eb, d_bt, d_et, w, torch.tanh(d_eb * 10.0), torch.tanh(d_bt * 10.0)], 1)

    def affine(self):
        """The features as (A, a, B, b) in float64: `[A s + a, tanh(B s + b)]` (B empty for `raw`)."""
        mean, std = self.mean.double().numpy(), self.std.double().numpy()
        n = len(mean)
        rows, bias = [np.diag(1.0 / std)], [-mean / std]
        if self.kind == "raw":
            return rows[0], bias[0], np.zeros((0, n)), np.zeros(0)

        def diff(i, j, k, scale):  # scale * (s[i..i+k] - s[j..j+k])
            m = np.zeros((k, n))
            m[range(k), range(i, i + k)] = scale
            m[range(k), range(j, j + k)] -= scale
            return m

        lin = [diff(self.ee, self.blk, 3, 20.0), diff(self.blk, self.tgt, 2, 20.0), diff(self.ee, self.tgt, 2, 20.0)]
        w = np.zeros((1, n))
        w[0, self.width] = 25.0
        a_mat = np.vstack(rows + lin + [w])
        a_vec = np.concatenate(bias + [np.zeros(7), [-0.04 * 25.0]])
        b_mat = np.vstack([diff(self.ee, self.blk, 3, 200.0), diff(self.blk, self.tgt, 2, 200.0)])
        return a_mat, a_vec, b_mat, np.zeros(5)


class Policy(torch.nn.Module):
    """MLP on the features -> the action: all values but the last regressed and clipped to [-1, 1], the last
    (the gripper) per `gripper` (config.NetConfig)."""

    def __init__(self, features: Features, n_in: int, hidden: int, depth: int, gripper: str, action_size: int):
        super().__init__()
        self.features = features
        self.gripper = gripper
        layers, n = [], n_in
        for _ in range(depth):
            layers += [torch.nn.Linear(n, hidden), torch.nn.ReLU()]
            n = hidden
        self.net = torch.nn.Sequential(*layers, torch.nn.Linear(n, action_size))

    def raw(self, state):
        return self.net(self.features(state))

    def forward(self, state):
        o = self.raw(state)
        move = torch.clamp(o[:, :-1], -1.0, 1.0)
        g = o[:, -1:]
        if self.gripper == "mse":
            g = torch.clamp(g, -1.0, 1.0)
        else:
            g = torch.where(g > 0, torch.ones_like(g), -torch.ones_like(g))
        return torch.cat([move, g], 1)

    def loss(self, state, action, weight=None):
        """Mean over the batch of (motion MSE + gripper loss) per sample; with `weight`, each sample's loss is
        weighted by LeRobot's batch-normalised RA-BC weight `w * B / (sum w + eps)` (so the mean weight is 1)."""
        o = self.raw(state)
        per = ((o[:, :-1] - action[:, :-1]) ** 2).mean(1)
        if self.gripper == "bce":
            g = torch.nn.functional.binary_cross_entropy_with_logits(
                o[:, -1], (action[:, -1] > 0).float(), reduction="none")
        else:
            g = (o[:, -1] - action[:, -1]) ** 2
        if weight is None:
            return per.mean() + g.mean()
        wb = weight * len(weight) / (weight.sum() + 1e-6)
        return ((per + g) * wb).mean()

    def export_layers(self) -> List[torch.nn.Module]:
        """The same function as Linear/ReLU/Tanh layers whose output, clipped to [-1, 1], is `forward`'s (to
        float rounding): the features become a Linear (and, for `rel`, a Tanh that passes the affine part
        through at 2^-20 scale); the gripper's sign becomes its logit scaled by 2^100."""
        a_mat, a_vec, b_mat, b_vec = self.features.affine()
        nets = [m for m in self.net]
        first, last = nets[0], nets[-1]
        w1 = first.weight.detach().double().numpy().copy()
        layers: List[torch.nn.Module] = []
        if len(b_mat):
            k = len(a_mat)
            layers += [_linear(np.vstack([a_mat * PASS_SCALE, b_mat]), np.concatenate([a_vec * PASS_SCALE, b_vec])),
                       torch.nn.Tanh()]
            w1[:, :k] /= PASS_SCALE
        else:
            layers.append(_linear(a_mat, a_vec))
        layers.append(_linear(w1, first.bias.detach().double().numpy()))
        layers += [_copy(m) for m in nets[1:-1]]
        w, b = last.weight.detach().double().numpy().copy(), last.bias.detach().double().numpy().copy()
        if self.gripper != "mse":
            w[-1] *= SIGN_SCALE
            b[-1] *= SIGN_SCALE
        layers.append(_linear(w, b))
        return layers


def _linear(w: np.ndarray, b: np.ndarray) -> torch.nn.Linear:
    lin = torch.nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        lin.weight.copy_(torch.as_tensor(w.astype(np.float32)))
        lin.bias.copy_(torch.as_tensor(b.astype(np.float32)))
    return lin


def _copy(m: torch.nn.Module) -> torch.nn.Module:
    if isinstance(m, torch.nn.Linear):
        return _linear(m.weight.detach().double().numpy(), m.bias.detach().double().numpy())
    return type(m)()
