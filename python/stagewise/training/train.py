"""Trains a stage-aware multi-view progress model (or a pairwise hop model) on a dataset written by
`stagewise record`, exports it to ONNX (opset 17, dynamic batch axis) and writes its manifest.

    .venv/bin/python -m stagewise.training train --task pick-place --train data/pick-place-train \
        --val data/pick-place-val --out models/pick-place

Progress model (kind = "stage_progress"): images f32 [N, V, F, 3, H, W] (normalised with the manifest's mean/std),
state f32 [N, S] -> stage_logits [N, K], tau [N, K] (sigmoid; one per stage; hard progress).
A shared conv encoder embeds every frame of every view; the embeddings of all views and frames and an MLP
embedding of the (standardised) state go through an MLP trunk to the stage head and the tau head. In training a
view is blanked (all zeros after normalisation = the mean colour) with probability --view-dropout, so a missing
camera (fed as a mean-colour frame) degrades gracefully; frames are shifted by up to --shift pixels per view, and
each sample's colours are transformed (hue rotation, saturation, channel gains: --colour) so unseen block and table
colours still read as a scene. The state is the proprioception a real robot has (--state-names, default
ee_x,ee_y,ee_z,gripper_width), picked from the dataset by name and written to the manifest's `state_names`: never
block or target poses, which only a simulator knows.

Every progress model is also exported in two parts (DESIGN.md's fast path; manifest [parts]): the per-frame encoder
(frames [M, 3, H, W] -> embedding [M, E]) and the head (embeddings [N, V, F, E] + state -> stage_logits, tau),
checked against the single graph; `stagewise label` runs them so each frame is encoded once. With --frames >= 2
the fused step graph (<stem>.step.onnx, [parts] step: encoder + head in one graph, the actor's one run per
control step) is written and checked too.

Hop model (kind = "hop", --kind hop): images f32 [N, V, 2, 3, H, W] (frame 0 = s_p, frame 1 = s_q), state
f32 [N, 2, S] -> hop [N, 1] = H(s_p, s_q) in [-1, 1] (tanh). Label (Robo-Dopamine's relative hop, from the oracle
progress): d = phi_q - phi_p; H = d / (1 - phi_p) when d >= 0, else d / phi_p.

Targets (progress model): frames of clean expert episodes that carry a SARM annotation use DESIGN.md's
formula (stage = annotated stage k, tau = clip((t - s_k) / (e_k - s_k), 0, 1)); frames of degraded episodes
(pauses, regressions, failures: time-linear targets would be wrong there) use the per-frame oracle
(stage_gt, tau = (progress_gt - P_k) / a_k). `--targets oracle` uses the oracle everywhere.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import data as dsmod

# The simulator's stage proportions (sim/src/config.rs `Task::stage_proportions`): the oracle's phi uses them,
# so the model's hard progress is on the same scale as the ground truth.
PROPORTIONS = {
    "pick-place": [0.35, 0.08, 0.12, 0.19, 0.20, 0.06],
    "stack": [0.34, 0.07, 0.16, 0.19, 0.19, 0.05],
    "push-target": [0.20, 0.15, 0.65],
}
MEAN = [0.5, 0.5, 0.5]
# What a real robot knows about itself: the model's default state (DESIGN.md "A reward model sees what a real robot
# sees"). The simulator's state also holds block and target poses and a `grasped` flag: never model inputs.
PROPRIO = ["ee_x", "ee_y", "ee_z", "gripper_width"]
STD = [0.25, 0.25, 0.25]


# Output channels of the encoder's convs (the last repeats for larger images): the hop model's widths. Progress
# models take `--enc-channels` (the shipped pick-place model: 4,16,16, a quarter of the FLOPs of 16,32,32; its first conv, on full-size
# frames, costs the most).
ENC_CHANNELS = (16, 32, 32)


class Encoder(nn.Module):
    """Per-frame conv encoder: [B, 3, H, W] -> [B, E]; stride-2 3x3 convs down to 4x4, then a linear layer.
    With `coord`, two constant channels holding each pixel's x and y in [-1, 1] join the image (CoordConv): where
    a block is in the picture is what progress depends on, and plain convolutions are blind to position."""

    def __init__(self, h: int, w: int, emb: int, chans=ENC_CHANNELS, coord: bool = False, min_size: int = 4):
        super().__init__()
        self.coord = coord
        if coord:
            ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
            self.register_buffer("coords", torch.stack([xs, ys])[None])
        layers, c_in, size = [], 5 if coord else 3, min(h, w)
        while size > min_size:
            c = chans[min(len(layers) // 2, len(chans) - 1)]
            layers += [nn.Conv2d(c_in, c, 3, 2, 1), nn.ReLU()]
            c_in, size, h, w = c, size // 2, (h + 1) // 2, (w + 1) // 2
        self.conv = nn.Sequential(*layers)
        self.fc = nn.Linear(c_in * h * w, emb)

    def forward(self, x):
        if self.coord:
            x = torch.cat([x, self.coords.expand(x.shape[0], -1, -1, -1)], 1)
        return F.relu(self.fc(self.conv(x).flatten(1)))


class ProgressNet(nn.Module):
    def __init__(
        self, views, frames, h, w, state_mean, state_std, k, emb=64, hidden=256, chans=ENC_CHANNELS, coord=False,
        min_size=4,
    ):
        super().__init__()
        self.v, self.f, self.h, self.w, self.emb = views, frames, h, w, emb
        self.enc = Encoder(h, w, emb, chans, coord, min_size)
        self.register_buffer("s_mean", torch.tensor(state_mean, dtype=torch.float32))
        self.register_buffer("s_std", torch.tensor(state_std, dtype=torch.float32))
        s = len(state_mean)
        self.state_mlp = nn.Sequential(nn.Linear(s, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.trunk = nn.Sequential(
            nn.Linear(views * frames * emb + 64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.stage = nn.Linear(hidden, k)
        self.tau = nn.Linear(hidden, k)

    def forward(self, images, state):
        x = images.reshape(-1, 3, self.h, self.w)
        return self.head(self.enc(x).reshape(-1, self.v, self.f, self.emb), state)

    def forward_with_embeddings(self, images, state):
        """(stage_logits, tau, embeddings [N, V*F*E]): training only (the auxiliary head reads the embeddings;
        the exported graph is `forward`)."""
        x = images.reshape(-1, 3, self.h, self.w)
        emb = self.enc(x).reshape(-1, self.v, self.f, self.emb)
        logits, tau = self.head(emb, state)
        return logits, tau, emb.reshape(-1, self.v * self.f * self.emb)

    def head(self, emb, state):
        """Everything after the per-frame encoder: embeddings [N, V, F, E] + state -> (stage_logits, tau)."""
        e = emb.reshape(-1, self.v * self.f * self.emb)
        s = self.state_mlp((state - self.s_mean) / self.s_std)
        z = self.trunk(torch.cat([e, s], dim=1))
        return self.stage(z), torch.sigmoid(self.tau(z))


class Head(nn.Module):
    """The head of a ProgressNet as its own module, for the two-part export (DESIGN.md: the runtime encodes each
    new frame once and keeps its embedding in the window ring, instead of re-encoding every frame of every window)."""

    def __init__(self, net: ProgressNet):
        super().__init__()
        self.net = net

    def forward(self, emb, state):
        return self.net.head(emb, state)


# Auxiliary training targets (`--aux-targets`): any state field of the dataset by name (e.g. block0_x, target_y,
# ee_z) or one of these, derived from the block and target poses. Training labels only: the auxiliary head reads
# the view embeddings and is dropped at export, so the model's inputs stay the views and `--state-names`.
AUX_DERIVED = {
    "block_target_dx": (["block0_x", "target_x"], lambda c: c[0] - c[1]),
    "block_target_dy": (["block0_y", "target_y"], lambda c: c[0] - c[1]),
    "block_target_dist": (["block0_x", "block0_y", "target_x", "target_y"],
                          lambda c: np.hypot(c[0] - c[2], c[1] - c[3])),
}


def aux_fields(aux_names):
    """The raw state fields the auxiliary targets need."""
    out = []
    for n in aux_names:
        for f in (AUX_DERIVED[n][0] if n in AUX_DERIVED else [n]):
            if f not in out:
                out.append(f)
    return out


def split_aux(flat, loaded_names, state_names, aux_names):
    """`flat` was built from a dataset loaded with `loaded_names` (the model's state names first, then the
    auxiliary fields): keeps the model's state in `flat.state` and puts the auxiliary targets [G, A] in
    `flat.aux`."""
    full = flat.state
    col = {n: full[:, loaded_names.index(n)] for n in loaded_names}
    aux = [AUX_DERIVED[n][1]([col[f] for f in AUX_DERIVED[n][0]]) if n in AUX_DERIVED else col[n] for n in aux_names]
    flat.aux = np.stack(aux, 1).astype(np.float32) if aux else None
    flat.state = np.ascontiguousarray(full[:, : len(state_names)])
    return flat


class AuxHead(nn.Module):
    """Predicts the (standardised) auxiliary targets from a ProgressNet's view embeddings [N, V*F*E]: a training
    signal that makes the encoder localise what progress depends on; never exported."""

    def __init__(self, d_in, n_out, hidden=128):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))

    def forward(self, e):
        return self.mlp(e)


def phi_loss_weights(phi, spec):
    """Per-sample loss weights from `--phi-weight LO,HI,W`: frames whose target progress is in [LO, HI] weigh W,
    the others 1. None: unweighted."""
    if not spec:
        return None
    lo, hi, w = spec
    return 1.0 + (w - 1.0) * ((phi >= lo) & (phi <= hi)).float()


def wmean(x, w):
    return x.mean() if w is None else (w * x).sum() / w.sum().clamp(min=1e-12)


def and_weights(w, mask):
    """Loss weights `w` (None: all 1) with the samples outside `mask` (None: none) weighing 0."""
    if mask is None:
        return w
    m = mask.float()
    return m if w is None else w * m


class HopNet(nn.Module):
    def __init__(self, views, h, w, state_mean, state_std, emb=64, hidden=256, coord=False, min_size=4):
        super().__init__()
        self.v, self.h, self.w, self.emb = views, h, w, emb
        self.enc = Encoder(h, w, emb, coord=coord, min_size=min_size)
        self.register_buffer("s_mean", torch.tensor(state_mean, dtype=torch.float32))
        self.register_buffer("s_std", torch.tensor(state_std, dtype=torch.float32))
        s = len(state_mean)
        self.state_mlp = nn.Sequential(nn.Linear(s, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.embed = nn.Sequential(nn.Linear(views * emb + 64, hidden), nn.ReLU(), nn.Linear(hidden, 64))
        self.head = nn.Sequential(nn.Linear(3 * 64, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, images, state):
        # images [N, V, 2, 3, H, W] -> per (pair member, view) embeddings
        x = images.transpose(1, 2).reshape(-1, 3, self.h, self.w)  # [N*2*V, 3, H, W]
        e = self.enc(x).reshape(-1, self.v * self.emb)  # [N*2, V*E]
        s = self.state_mlp((state.reshape(-1, self.s_mean.shape[0]) - self.s_mean) / self.s_std)
        z = self.embed(torch.cat([e, s], dim=1)).reshape(-1, 2, 64)
        zp, zq = z[:, 0], z[:, 1]
        return torch.tanh(self.head(torch.cat([zp, zq, zq - zp], dim=1)))


class Flat:
    """All frames of a dataset in flat arrays, with per-frame episode start/end for window gathering."""

    def __init__(self, ds: dsmod.Dataset, proportions, targets: str):
        # [G, V, H, W, 3] uint8, filled episode by episode, each episode's frames dropped once they are in (a
        # recorded file's array, which data.load's episodes are views of, goes with its last episode): a concatenate
        # would hold every frame twice (all of a round's learner data would not fit in 24 GiB)
        self.images = np.empty((sum(len(e.images) for e in ds.episodes),) + ds.episodes[0].images.shape[1:], np.uint8)
        at = 0
        for e in ds.episodes:
            self.images[at:at + len(e.images)] = e.images
            at += len(e.images)
            e.images = None
        self.state = np.concatenate([e.state for e in ds.episodes])
        self.phi_gt = np.concatenate([e.progress for e in ds.episodes])
        starts, ends, stage, tau, phi, succ, ep_id = [], [], [], [], [], [], []
        P = np.concatenate([[0.0], np.cumsum(proportions)[:-1]])
        a = np.asarray(proportions)
        off = 0
        for i, e in enumerate(ds.episodes):
            T = len(e.progress)
            starts.append(np.full(T, off))
            ends.append(np.full(T, off + T))
            succ.append(np.full(T, e.success))
            ep_id.append(np.full(T, i))
            k_or = np.clip(e.stage, 0, len(a) - 1)
            tau_or = np.clip((e.progress - P[k_or]) / a[k_or], 0, 1)
            use_ann = targets == "hybrid" and not e.degraded and e.start_frames is not None
            if use_ann:
                t = np.arange(T)
                k = np.zeros(T, dtype=np.int64)
                ta = np.zeros(T)
                for j, (s, en) in enumerate(zip(e.start_frames, e.end_frames)):
                    m = (t >= s) & (t < en)
                    k[m] = j
                    ta[m] = np.clip((t[m] - s) / max(en - s, 1), 0, 1)
                # the final (success) frame: the end of the last stage
                if e.success:
                    ta[-1] = 1.0
                stage.append(k)
                tau.append(ta)
            else:
                stage.append(k_or)
                tau.append(tau_or)
            phi.append(P[stage[-1]] + a[stage[-1]] * tau[-1])
            off += T
        self.start = np.concatenate(starts)
        self.end = np.concatenate(ends)
        self.stage = np.concatenate(stage).astype(np.int64)
        self.tau = np.concatenate(tau).astype(np.float32)
        self.phi = np.concatenate(phi).astype(np.float32)
        self.success = np.concatenate(succ)
        self.ep = np.concatenate(ep_id)
        self.n = len(self.stage)

    def window(self, g: np.ndarray, frames: int, stride: int) -> np.ndarray:
        idx = np.stack([np.maximum(self.start[g], g - (frames - 1 - i) * stride) for i in range(frames)], 1)
        return self.images[idx]  # [B, F, V, H, W, 3]


def to_tensor(imgs: np.ndarray) -> torch.Tensor:
    """uint8 [B, F, V, H, W, 3] -> normalised f32 [B, V, F, 3, H, W]."""
    x = torch.from_numpy(imgs).permute(0, 2, 1, 5, 3, 4).float().div_(255.0)
    mean = torch.tensor(MEAN).view(1, 1, 1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 1, 1, 3, 1, 1)
    return (x - mean) / std


def colour_matrices(b: int, strength: float, rng: np.random.Generator) -> torch.Tensor:
    """[b, 3, 3] random colour transforms in RGB space: a hue rotation about the grey axis (uniform angle, with
    probability `strength`), a saturation change (0.4x-1.4x) and per-channel gains (0.85-1.15). One per sample,
    the same for all its views and frames (one scene, one lighting), so block, table and target colours the
    training palette never had still look like a scene the model knows (the colour bars of
    tests/shipped_models.rs use colours no training episode has)."""
    k = np.ones(3) / np.sqrt(3.0)
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    kk = np.outer(k, k)
    out = np.empty((b, 3, 3), dtype=np.float32)
    for i in range(b):
        th = rng.uniform(-np.pi, np.pi) if rng.random() < strength else 0.0
        rot = np.cos(th) * np.eye(3) + np.sin(th) * kx + (1 - np.cos(th)) * kk
        sat = rng.uniform(0.4, 1.4)
        s_m = sat * np.eye(3) + (1 - sat) * np.full((3, 3), 1 / 3)
        gain = np.diag(rng.uniform(0.85, 1.15, size=3))
        out[i] = gain @ s_m @ rot
    return torch.from_numpy(out)


def augment(
    x: torch.Tensor, shift: int, view_dropout: float, rng: np.random.Generator, colour: float = 0.0
) -> torch.Tensor:
    b, v = x.shape[0], x.shape[1]
    if colour > 0:
        mean = torch.tensor(MEAN).view(1, 1, 1, 3, 1, 1)
        std = torch.tensor(STD).view(1, 1, 1, 3, 1, 1)
        rgb = (x * std + mean).clamp_(0, 1)
        m = colour_matrices(b, colour, rng)
        rgb = (m[:, None, None] @ rgb.flatten(4)).reshape(rgb.shape).clamp_(0, 1)
        x = (rgb - mean) / std
    if shift > 0:
        # each (sample, view) shifted by its own (dy, dx) in [-shift, shift]: gathered from a padded copy
        h, w = x.shape[-2], x.shape[-1]
        flat = F.pad(x.reshape(b * v, -1, h, w), (shift, shift, shift, shift), mode="replicate")
        dy = torch.from_numpy(rng.integers(0, 2 * shift + 1, size=b * v))
        dx = torch.from_numpy(rng.integers(0, 2 * shift + 1, size=b * v))
        rows = (dy[:, None] + torch.arange(h)[None])[:, :, None]  # [bv, h, 1]
        cols = (dx[:, None] + torch.arange(w)[None])[:, None, :]  # [bv, 1, w]
        idx = torch.arange(b * v)[:, None, None]
        out = flat.permute(0, 2, 3, 1)[idx, rows, cols]  # [bv, h, w, F*3]
        x = out.permute(0, 3, 1, 2).reshape(x.shape)
    if view_dropout > 0:
        drop = rng.random((b, v)) < view_dropout
        drop[drop.all(axis=1), 0] = False  # keep at least one view
        x = x * torch.from_numpy(~drop).float().view(b, v, 1, 1, 1, 1)
    # brightness jitter
    x = x + torch.from_numpy(rng.normal(0, 0.1, size=(b, v, 1, 1, 1, 1)).astype(np.float32))
    return x


def drop_state(st: torch.Tensor, p: float, mean: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
    """Modality dropout: each sample's state (both members of a hop or step pair, [B, 2, S]) replaced by the
    training mean with probability `p`, so the cameras alone must carry the estimate on those samples and the model
    cannot lean on proprioception where the pixels say more."""
    if p <= 0:
        return st
    m = torch.from_numpy(rng.random(st.shape[0]) < p)
    st = st.clone()
    st[m] = torch.from_numpy(mean.astype(np.float32))
    return st


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def toml_list(xs, fmt="{:.6g}"):
    return "[" + ", ".join(fmt.format(x) for x in xs) + "]"


def write_manifest(
    path, kind, onnx_name, views, frames, stride, state_names, h, w, outputs, stages, description, parts=None,
    readout="hard",
):
    lines = [
        f'kind = "{kind}"',
        f'onnx = "{onnx_name}"',
        f'sha256 = "{sha256(os.path.join(os.path.dirname(path), onnx_name))}"',
        "views = [" + ", ".join(f'"{v}"' for v in views) + "]",
        f"frames = {frames}",
        f"stride = {stride}",
        "state_names = [" + ", ".join(f'"{n}"' for n in state_names) + "]",
        f"state_size = {len(state_names)}",
        f'description = """{description}"""',
        "",
        "[image]",
        f"width = {w}",
        f"height = {h}",
        f"mean = {toml_list(MEAN)}",
        f"std = {toml_list(STD)}",
        "",
        "[inputs]",
        'images = "images"',
        'state = "state"',
        "",
        "[outputs]",
    ] + [f'{k} = "{v}"' for k, v in outputs]
    if stages is not None:
        names, props = stages
        lines += [
            "",
            "[stages]",
            "names = [" + ", ".join(f'"{n}"' for n in names) + "]",
            f"proportions = {toml_list(props)}",
            f'progress = "{readout}"',
        ]
    if parts is not None:
        enc, head, emb, step = parts
        d = os.path.dirname(path)
        lines += [
            "",
            "[parts]",
            f'encoder = "{enc}"',
            f'encoder_sha256 = "{sha256(os.path.join(d, enc))}"',
            f'head = "{head}"',
            f'head_sha256 = "{sha256(os.path.join(d, head))}"',
            f"embedding = {emb}",
        ]
        if step is not None:
            lines += [f'step = "{step}"', f'step_sha256 = "{sha256(os.path.join(d, step))}"']
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def progress_phi(logits, tau, P, a):
    k = logits.argmax(1)
    return P[k] + a[k] * tau.gather(1, k[:, None])[:, 0]


def soft_progress_phi(logits, tau, P, a):
    """The soft readout: every stage's progress weighted by its probability (differentiable, what the losses use)."""
    return (logits.softmax(1) * (P[None] + a[None] * tau)).sum(1)


def predict(model, flat, frames, stride, P, a, batch=512, blank=False, readout="hard"):
    """Progress phi (the `readout` a manifest serves: hard or soft) and stage of every frame of `flat`; `blank`:
    every frame replaced by its own mean colour (the pixel dependence ablation of tests/shipped_models.rs: a model
    that reads its cameras must get much worse)."""
    phi_of = soft_progress_phi if readout == "soft" else progress_phi
    model.eval()
    phis, ks = [], []
    with torch.no_grad():
        for s in range(0, flat.n, batch):
            g = np.arange(s, min(s + batch, flat.n))
            imgs = flat.window(g, frames, stride)
            if blank:
                imgs = np.broadcast_to(imgs.mean(axis=(3, 4), keepdims=True).round(), imgs.shape).astype(np.uint8)
            logits, tau = model(to_tensor(imgs), torch.from_numpy(flat.state[g]))
            phis.append(phi_of(logits, tau, P, a).numpy())
            ks.append(logits.argmax(1).numpy())
    return np.concatenate(phis), np.concatenate(ks)


def evaluate_progress(model, flat, frames, stride, P, a, batch=512, blank=False, readout="hard"):
    """(progress MAE, stage accuracy) on `flat` ([`predict`]'s phi and stage against the truth)."""
    phi, k = predict(model, flat, frames, stride, P, a, batch, blank, readout)
    mae = float(np.abs(phi - flat.phi_gt).mean())
    acc = float((k == flat.stage).mean())
    return mae, acc


def export(model, example, path, input_names, output_names):
    model.eval()
    dyn = {n: {0: "batch"} for n in input_names + output_names}
    torch.onnx.export(
        model, example, path, input_names=input_names, output_names=output_names, dynamic_axes=dyn,
        opset_version=17, dynamo=False,
    )


def check_onnx(path, example, model):
    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), example)}
    got = sess.run(None, feeds)
    with torch.no_grad():
        ref = model(*example)
    ref = ref if isinstance(ref, tuple) else (ref,)
    err = max(float(np.abs(g - r.numpy()).max()) for g, r in zip(got, ref))
    print(f"onnx vs torch max abs diff: {err:.2e}")
    if err > 1e-4:
        raise SystemExit(f"exported graph disagrees with torch: {err}")


def export_parts(model: ProgressNet, full_path: str, example, stem_path: str):
    """Exports the encoder (frames [M, 3, H, W] -> embedding [M, E]) and the head (embeddings [N, V, F, E] +
    state -> stage_logits, tau) as two graphs and checks that encoder + head reproduces the full graph. With
    frames >= 2 it also writes the fused step graph (export_parts.compose_step: the actor's one run per control
    step) and checks it against the full graph and the encoder. Returns (encoder, head, embedding, step or None),
    the files' names, for write_manifest's [parts]."""
    import onnxruntime as ort

    images, state = example
    enc_path, head_path = stem_path + ".encoder.onnx", stem_path + ".head.onnx"
    frames = images.reshape(-1, 3, model.h, model.w)
    export(model.enc, (frames[:1],), enc_path, ["frames"], ["embedding"])
    emb_example = torch.zeros(1, model.v, model.f, model.emb)
    export(Head(model), (emb_example, state[:1]), head_path, ["embeddings", "state"], ["stage_logits", "tau"])
    run = lambda p, feeds: ort.InferenceSession(p, providers=["CPUExecutionProvider"]).run(None, feeds)  # noqa: E731
    full = run(full_path, {"images": images.numpy(), "state": state.numpy()})
    (emb,) = run(enc_path, {"frames": frames.numpy()})
    parts = run(head_path, {"embeddings": emb.reshape(len(images), model.v, model.f, model.emb),
                            "state": state.numpy()})
    err = max(float(np.abs(a - b).max()) for a, b in zip(full, parts))
    print(f"encoder + head vs full graph max abs diff: {err:.2e}")
    if err > 1e-4:
        raise SystemExit(f"two-part export disagrees with the full graph: {err}")
    step = None
    if model.f >= 2:
        from . import export_parts as xp  # it imports this module, so not at the top

        step_path = stem_path + ".step.onnx"
        step = xp.compose_step(enc_path, head_path, model.v, model.f, model.emb, step_path)
        man = {"views": [None] * model.v, "frames": model.f, "image": {"height": model.h, "width": model.w},
               "state_size": state.shape[1], "inputs": {"images": "images", "state": "state"}}
        xp.check_step(full_path, enc_path, step_path, man)
    return os.path.basename(enc_path), os.path.basename(head_path), model.emb, step


def load_onnx_weights(model: nn.Module, path: str):
    """Starts `model` from the weights of a single graph that train.py exported for the same architecture (its
    initializers carry the parameter names); the state normalisation is the graph's too."""
    import onnx
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    sd = model.state_dict()
    missing = [k for k in sd if k not in inits]
    if missing:
        raise SystemExit(f"{path}: no initializer(s) {missing}: not a graph of this architecture")
    for k in sd:
        if tuple(inits[k].shape) != tuple(sd[k].shape):
            raise SystemExit(f"{path}: {k} has shape {list(inits[k].shape)}, the model {list(sd[k].shape)}")
    model.load_state_dict({k: torch.from_numpy(inits[k].copy()) for k in sd})
    print(f"initialised from {path}", flush=True)


def next_frames(flat: Flat, g: np.ndarray) -> np.ndarray:
    """The frame after each of `g` in its episode (an episode's last frame: itself, a change of 0)."""
    return np.minimum(g + 1, flat.end[g] - 1)


def step_change_loss(phi, phi_next, target, target_next, max_change, known=None):
    """`--step-consistency`: mean squared error of the model's change of phi over one step against the target's.
    Steps where the target itself jumps by more than `max_change` (a stage entered or left) are left out: no camera
    times those to the frame, and their squared errors would outweigh every smooth step; so are the steps `known`
    (None: all) says the labels give no target for. 0 when none is left."""
    d_t = target_next - target
    smooth = (d_t.abs() <= max_change).float()
    if known is not None:
        smooth = smooth * known.float()
    return (smooth * ((phi_next - phi) - d_t).pow(2)).sum() / smooth.sum().clamp(min=1.0)


def progress_balanced_p(phi: np.ndarray, bins: int):
    """Sampling probabilities that make every progress bin (of `bins` in [0, 1]) equally likely: a frozen or
    stalled episode repeats one label for hundreds of frames, while the frames near success, the ones that tell
    success from near-success, are few (an episode ends at its first successful frame). None: uniform."""
    if bins <= 0:
        return None
    b = np.clip((phi * bins).astype(np.int64), 0, bins - 1)
    counts = np.bincount(b, minlength=bins).astype(np.float64)
    w = 1.0 / counts[b]
    return w / w.sum()


def train_progress(args, train, val, proportions, names, on_step=None):
    """Trains a ProgressNet. `on_step(step, steps, loss)`, when given, is called after every optimiser step
    (`stagewise train` draws its progress bar from it)."""
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    V = train.images.shape[1]
    H, W = train.images.shape[2], train.images.shape[3]
    K = len(proportions)
    sm = train.state.mean(0)
    ss = np.maximum(train.state.std(0), 1e-3)
    model = ProgressNet(
        V, args.frames, H, W, sm, ss, K, chans=args.enc_channels, coord=args.coord, min_size=args.enc_min_size
    )
    init = getattr(args, "init_onnx", None)
    if init:
        load_onnx_weights(model, init)
    aux_w = getattr(args, "aux_weight", 0.0)
    use_aux = aux_w > 0 and getattr(train, "aux", None) is not None
    aux_head, params = None, list(model.parameters())
    if use_aux:
        aux_head = AuxHead(V * args.frames * model.emb, train.aux.shape[1])
        params += list(aux_head.parameters())
        aux_mean = torch.from_numpy(train.aux.mean(0))
        aux_std = torch.from_numpy(np.maximum(train.aux.std(0), 1e-4))
    phi_w_spec = getattr(args, "phi_weight", None)
    cons_w = getattr(args, "step_consistency", 0.0)
    cons_max = getattr(args, "step_consistency_max", 1.0)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-4)
    steps = args.epochs * (min(train.n, args.samples_per_epoch) // args.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=max(steps, 1))
    P = torch.tensor(np.concatenate([[0.0], np.cumsum(proportions)[:-1]]), dtype=torch.float32)
    a = torch.tensor(proportions, dtype=torch.float32)
    sample_p = progress_balanced_p(train.phi, args.balance_progress)
    t0 = time.time()
    for ep in range(args.epochs):
        model.train()
        if sample_p is None:
            order = rng.permutation(train.n)[: args.samples_per_epoch]
        else:
            order = rng.choice(train.n, size=min(train.n, args.samples_per_epoch), p=sample_p)
        tot, aux_tot, cons_tot = 0.0, 0.0, 0.0
        for b in range(0, len(order) - args.batch + 1, args.batch):
            g = order[b:b + args.batch]
            imgs = train.window(g, args.frames, args.stride)
            if cons_w > 0:
                # each frame with its successor in the episode (the last frame with itself), stacked on the frame
                # axis so that both get the same augmentation: one camera, one lighting, one step apart
                g1 = next_frames(train, g)
                imgs = np.concatenate([imgs, train.window(g1, args.frames, args.stride)], axis=1)
            x = augment(to_tensor(imgs), args.shift, args.view_dropout, rng, args.colour)
            st = torch.from_numpy(train.state[g])
            if cons_w > 0:
                # the pair's states stacked [B, 2, S]: drop_state drops both members of a pair together
                x, x1 = x[:, :, : args.frames], x[:, :, args.frames:]
                st = torch.stack([st, torch.from_numpy(train.state[g1])], 1)
            st = st + torch.randn_like(st) * 0.002 * torch.from_numpy(ss.astype(np.float32))
            st = drop_state(st, args.state_dropout, sm, rng)
            if cons_w > 0:
                st, st1 = st[:, 0], st[:, 1]
            k = torch.from_numpy(train.stage[g])
            tau_t = torch.from_numpy(train.tau[g])
            phi_t = torch.from_numpy(train.phi[g])
            if use_aux:
                logits, tau, emb = model.forward_with_embeddings(x, st)
            else:
                logits, tau = model(x, st)
            wt = phi_loss_weights(phi_t, phi_w_spec)
            ce = wmean(F.cross_entropy(logits, k, reduction="none"), wt)
            # --failed-tau mask (train_dataset): frames whose tau no label gives train the stage head alone
            known = None if getattr(train, "tau_known", None) is None else torch.from_numpy(train.tau_known[g])
            wk = and_weights(wt, known)
            tau_k = tau.gather(1, k[:, None])[:, 0]
            l_tau = wmean((tau_k - tau_t) ** 2, wk)
            phi_soft = soft_progress_phi(logits, tau, P, a)
            l_phi = wmean((phi_soft - phi_t) ** 2, wk)
            loss = ce + 5.0 * l_tau + 20.0 * l_phi
            if cons_w > 0:
                # --step-consistency: the model's change of phi over one control step regressed onto the target's
                # change (the shaping reward is made of these changes; squared error on phi alone leaves them noisy)
                logits1, tau1 = model(x1, st1)
                phi1 = soft_progress_phi(logits1, tau1, P, a)
                known1 = None if known is None else known & torch.from_numpy(train.tau_known[g1])
                l_cons = step_change_loss(phi_soft, phi1, phi_t, torch.from_numpy(train.phi[g1]), cons_max, known1)
                loss = loss + cons_w * l_cons
                cons_tot += float(l_cons.detach()) * len(g)
            if use_aux:
                y = (torch.from_numpy(train.aux[g]) - aux_mean) / aux_std
                l_aux = F.mse_loss(aux_head(emb), y)
                loss = loss + aux_w * l_aux
                aux_tot += float(l_aux.detach()) * len(g)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += float(loss.detach()) * len(g)
            if on_step is not None:
                on_step(ep * (len(order) // args.batch) + b // args.batch + 1, steps, float(loss.detach()))
        msg = f"epoch {ep + 1}/{args.epochs} loss {tot / max(len(order), 1):.4f} ({time.time() - t0:.0f}s)"
        if use_aux:
            msg += f" aux {aux_tot / max(len(order), 1):.4f}"
        if cons_w > 0:
            msg += f" step-change MSE {cons_tot / max(len(order), 1):.2e}"
        if val is not None and (ep + 1 == args.epochs or (ep + 1) % args.eval_every == 0):
            mae, acc = evaluate_progress(model, val, args.frames, args.stride, P, a,
                                         readout=getattr(args, "progress", "hard"))
            msg += f" | val MAE {mae:.4f} stage acc {acc:.3f}"
        print(msg, flush=True)
    return model, time.time() - t0


def hop_label(pp, pq):
    d = pq - pp
    h = np.where(d >= 0, d / np.maximum(1 - pp, 1e-3), d / np.maximum(pp, 1e-3))
    return np.clip(h, -1, 1).astype(np.float32)


def sample_pairs(flat: Flat, n: int, rng, step_share: float = 0.0):
    """Pairs (p, q) and a mask of the step pairs: p = q - 1, the pair a gap-1 HopFusion integrates at every step
    (a share `step_share` of the batch, taken from the random same-episode pairs; tried for gap-1 fusion, see
    models/README.md)."""
    q = rng.integers(0, flat.n, size=n)
    kind = rng.random(n)
    s, e = flat.start[q], flat.end[q]
    p = s + (rng.random(n) * (e - s)).astype(np.int64)  # same episode, random
    m = kind < 0.2  # start anchor
    p[m] = s[m]
    m = (kind >= 0.2) & (kind < 0.4)  # small gaps (incremental estimate)
    gap = rng.integers(-4, 5, size=n)
    p[m] = np.clip(q[m] + gap[m], s[m], e[m] - 1)
    # goal anchor: the last frame of a successful episode (any episode)
    goals = np.unique(flat.end[flat.success] - 1)
    m = (kind >= 0.4) & (kind < 0.6)
    if len(goals):
        p[m] = goals[rng.integers(0, len(goals), size=int(m.sum()))]
    step = (kind >= 0.6) & (kind < 0.6 + min(step_share, 0.3))
    p[step] = np.maximum(q[step] - 1, s[step])
    # random cross-episode pairs
    m = kind >= 0.9
    p[m] = rng.integers(0, flat.n, size=int(m.sum()))
    return p, q, step


def hop_batch(flat: Flat, p, q):
    imgs = np.stack([flat.images[p], flat.images[q]], axis=1)  # [B, 2, V, H, W, 3]
    x = to_tensor(imgs)  # [B, V, 2, 3, H, W]
    st = torch.from_numpy(np.stack([flat.state[p], flat.state[q]], 1))
    y = torch.from_numpy(hop_label(flat.phi_gt[p], flat.phi_gt[q]))
    return x, st, y


def train_hop(args, train, val):
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    V, H, W = train.images.shape[1], train.images.shape[2], train.images.shape[3]
    sm = train.state.mean(0)
    ss = np.maximum(train.state.std(0), 1e-3)
    model = HopNet(V, H, W, sm, ss, coord=args.coord, min_size=args.enc_min_size)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    per = args.samples_per_epoch // args.batch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.epochs * per)
    t0 = time.time()
    for ep in range(args.epochs):
        model.train()
        tot = 0.0
        for _ in range(per):
            p, q, step = sample_pairs(train, args.batch, rng, args.step_pairs)
            x, st, y = hop_batch(train, p, q)
            x = augment(x, args.shift, args.view_dropout, rng, args.colour)
            st = drop_state(st, args.state_dropout, sm, rng)
            h = model(x, st)[:, 0]
            # step pairs carry tiny targets whose errors a gap-1 HopFusion integrates over the whole episode
            w = 1.0 + (args.step_weight - 1.0) * torch.from_numpy(step).float()
            loss = (w * (h - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += float(loss.detach())
        msg = f"epoch {ep + 1}/{args.epochs} loss {tot / per:.5f} ({time.time() - t0:.0f}s)"
        if val is not None:
            model.eval()
            with torch.no_grad():
                p, q, _ = sample_pairs(val, 1024, np.random.default_rng(0))
                x, st, y = hop_batch(val, p, q)
                msg += f" | val MAE {float((model(x, st)[:, 0] - y).abs().mean()):.4f}"
        print(msg, flush=True)
    return model, time.time() - t0


def main(argv=None, prog=None):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True, choices=sorted(PROPORTIONS))
    ap.add_argument("--train", required=True, nargs="+", help="dataset dir(s) from `stagewise record`")
    ap.add_argument("--val", help="held-out dataset dir (reporting only)")
    ap.add_argument("--val-extra", nargs="*", default=[],
                    help="more held-out dataset dirs to report on after training (e.g. held-out colours)")
    ap.add_argument("--out", required=True, help="output directory, e.g. models/pick-place")
    ap.add_argument("--kind", default="progress", choices=["progress", "hop"])
    ap.add_argument("--name", help="file stem (default: <task>-progress or <task>-hop)")
    ap.add_argument("--frames", type=int, default=2)
    ap.add_argument("--stride", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--samples-per-epoch", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--view-dropout", type=float, default=0.15)
    ap.add_argument("--shift", type=int, default=2)
    ap.add_argument("--hop-gap", type=int, default=8,
                    help="hop: the manifest's stride, the gap in control steps of the pairs HopFusion's incremental "
                         "estimate takes (chosen on validation: models/README.md)")
    ap.add_argument("--step-pairs", type=float, default=0.0,
                    help="hop: share of pairs (t-1, t), a gap-1 fusion's incremental pair (at most 0.3)")
    ap.add_argument("--step-weight", type=float, default=1.0, help="hop: loss weight of those step pairs")
    ap.add_argument("--balance-progress", type=int, default=0,
                    help="progress model: sample frames so that each of this many progress bins is equally likely "
                         "(0: uniform over frames)")
    ap.add_argument("--aux-targets", default="", type=lambda t: [n for n in t.split(",") if n],
                    help="progress model: auxiliary training targets predicted from the view embeddings by a head "
                         "that is dropped at export (training labels only, never inputs): state fields by name "
                         f"(e.g. block0_x,target_y) or {','.join(AUX_DERIVED)}; empty (default): none")
    ap.add_argument("--aux-weight", type=float, default=1.0,
                    help="loss weight of the auxiliary targets (MSE on the standardised targets)")
    ap.add_argument("--phi-weight", default=None,
                    type=lambda t: tuple(float(x) for x in t.split(",")) if t else None,
                    help="progress model: LO,HI,W weighs the loss of frames whose target progress is in [LO, HI] "
                         "W times (default: unweighted)")
    ap.add_argument("--step-consistency", type=float, default=0.0,
                    help="progress model: weight of a loss on the change of phi over one step (each sample's frame "
                         "and the next frame of its episode, same augmentation) against the target's change: a "
                         "shaping reward is made of these changes (0, default: off; doubles the training time)")
    ap.add_argument("--step-consistency-max", type=float, default=1.0,
                    help="steps whose target progress changes by more than this (a stage entered or left) are left "
                         "out of that loss (default 1: none)")
    ap.add_argument("--init-onnx", default=None,
                    help="progress model: start from the weights of this single graph (exported by train.py for "
                         "the same architecture; fine-tuning) instead of a random initialisation")
    ap.add_argument("--state-dropout", type=float, default=0.0,
                    help="share of training samples whose state is replaced by the training mean (modality dropout)")
    ap.add_argument("--targets", default="hybrid", choices=["hybrid", "oracle"])
    ap.add_argument("--state-names", default=",".join(PROPRIO),
                    type=lambda t: [n for n in t.split(",") if n],
                    help="state fields the model reads, by name (default: the proprioception a real robot has, "
                         f"{','.join(PROPRIO)}; never object or target poses: DESIGN.md)")
    ap.add_argument("--enc-min-size", type=int, default=4,
                    help="the encoder's stride-2 convs stop at this feature-map size (4: 32x32 -> 4x4; 8 keeps "
                         "8x8 positions for the linear layer)")
    ap.add_argument("--coord", type=int, default=1, choices=[0, 1],
                    help="1: the encoder sees each pixel's x, y as two extra channels (CoordConv); 0: plain")
    ap.add_argument("--colour", type=float, default=0.8,
                    help="probability of a random hue rotation per training sample (plus saturation and "
                         "channel-gain jitter whenever > 0); 0 = no colour augmentation")
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--enc-channels", type=lambda t: tuple(int(c) for c in t.split(",")), default=ENC_CHANNELS,
                    help="output channels of the encoder's stride-2 convs, e.g. 4,16,16 (progress models; "
                         "default 16,32,32)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    proportions = PROPORTIONS[args.task]
    t0 = time.time()
    # the auxiliary targets' fields are loaded after the model's state fields and split off (split_aux)
    loaded = list(args.state_names) + [f for f in aux_fields(args.aux_targets) if f not in args.state_names]
    dss = [dsmod.load(args.train[0], state_names=loaded)]
    # the other sets are of the same task: they take the first one's stages (a set with no clean success, e.g.
    # random play or learner rollouts, has no meta/temporal_proportions_sparse.json of its own)
    dss += [dsmod.load(d, dss[0].stage_names, dss[0].proportions, loaded) for d in args.train[1:]]
    names = dss[0].stage_names
    if len(names) != len(proportions):
        raise SystemExit(f"dataset has {len(names)} stages, {args.task} has {len(proportions)}")
    train_ds = dss[0]
    for d in dss[1:]:
        train_ds.episodes += d.episodes
    train = split_aux(Flat(train_ds, proportions, args.targets), loaded, args.state_names, args.aux_targets)
    val = Flat(dsmod.load(args.val, state_names=args.state_names), proportions, args.targets) if args.val else None
    if args.aux_targets:
        print(f"auxiliary targets {args.aux_targets} (weight {args.aux_weight}), dropped at export", flush=True)
    print(f"loaded {len(train_ds.episodes)} episodes, {train.n} frames in {time.time() - t0:.0f}s", flush=True)
    V = len(train_ds.views)
    H, W = train.images.shape[2], train.images.shape[3]
    os.makedirs(args.out, exist_ok=True)
    stem = args.name or f"{args.task}-{args.kind}"
    onnx_path = os.path.join(args.out, stem + ".onnx")
    seeds = f"{len(train_ds.episodes)} episodes ({', '.join(args.train)})"
    if args.kind == "progress":
        model, secs = train_progress(args, train, val, proportions, names)
        report = {}
        if val is not None:
            P_ = torch.tensor(np.concatenate([[0.0], np.cumsum(proportions)[:-1]]), dtype=torch.float32)
            a_ = torch.tensor(proportions, dtype=torch.float32)
            for label, d in [("val", val)] + [(os.path.basename(p.rstrip("/")), Flat(
                    dsmod.load(p, state_names=args.state_names), proportions, args.targets)) for p in args.val_extra]:
                mae, acc = evaluate_progress(model, d, args.frames, args.stride, P_, a_)
                mae_b, _ = evaluate_progress(model, d, args.frames, args.stride, P_, a_, blank=True)
                report[label] = {"mae": round(mae, 4), "stage_acc": round(acc, 4), "mae_views_blanked": round(mae_b, 4)}
                print(f"{label}: MAE {mae:.4f}, stage acc {acc:.3f}; every view blanked: MAE {mae_b:.4f} "
                      f"({mae_b / max(mae, 1e-9):.1f}x)", flush=True)
        example = (torch.zeros(1, V, args.frames, 3, H, W), torch.from_numpy(train.state[:1]))
        export(model, example, onnx_path, ["images", "state"], ["stage_logits", "tau"])
        check_onnx(onnx_path, example, model)
        # a real batch for the parts check (validation frames when there are some)
        src = val if val is not None else train
        g = np.linspace(0, src.n - 1, 8).astype(np.int64)
        batch = (to_tensor(src.window(g, args.frames, args.stride)), torch.from_numpy(src.state[g]))
        parts = export_parts(model, onnx_path, batch, os.path.join(args.out, stem))
        desc = (
            f"Stage-aware multi-view progress model for the sim task {args.task}, trained by "
            f"`python -m stagewise.training train` on {seeds} for {args.epochs} epochs x {args.samples_per_epoch} samples "
            f"({secs:.0f} s on {args.threads} CPU threads). Targets: {args.targets}. View dropout "
            f"{args.view_dropout}, shift {args.shift}px, colour augmentation {args.colour}."
            + (f" Frames sampled so that {args.balance_progress} progress bins are equally likely."
               if args.balance_progress > 0 else "")
            + (f" Auxiliary training targets (labels only, head dropped at export): {', '.join(args.aux_targets)}"
               f" (weight {args.aux_weight})." if args.aux_targets and args.aux_weight > 0 else "")
            + (f" Initialised from {args.init_onnx}." if args.init_onnx else "")
            + (f" Loss weighted {args.phi_weight[2]}x on target progress {args.phi_weight[0]}-{args.phi_weight[1]}."
               if args.phi_weight else "")
            + (f" Step-change consistency loss, weight {args.step_consistency}"
               + (f", target changes above {args.step_consistency_max} left out." if args.step_consistency_max < 1
                  else ".") if args.step_consistency > 0 else "")
            + " State: "
            f"{', '.join(args.state_names)} (no object or target poses). A missing camera: feed a mean-colour frame."
        )
        write_manifest(
            os.path.join(args.out, stem + ".toml"), "stage_progress", stem + ".onnx", train_ds.views,
            args.frames, args.stride, args.state_names, H, W, [("stage_logits", "stage_logits"), ("tau", "tau")],
            (names, proportions), desc, parts,
        )
    else:
        model, secs = train_hop(args, train, val)
        example = (torch.zeros(1, V, 2, 3, H, W), torch.from_numpy(np.stack([train.state[:1]] * 2, 1)))
        export(model, example, onnx_path, ["images", "state"], ["hop"])
        check_onnx(onnx_path, example, model)
        desc = (
            f"Pairwise hop model H(s_p, s_q) in [-1, 1] (Robo-Dopamine-style) for the sim task {args.task}: "
            f"images [N, views, 2, 3, H, W] (frame 0 = s_p, frame 1 = s_q), state [N, 2, state_size], "
            f"output hop [N, 1]. Trained by `python -m stagewise.training train --kind hop` on {seeds}, {args.epochs} epochs "
            f"x {args.samples_per_epoch} pairs ({secs:.0f} s on {args.threads} CPU threads). State: "
            f"{', '.join(args.state_names)} (no object or target poses)."
        )
        write_manifest(
            os.path.join(args.out, stem + ".toml"), "hop", stem + ".onnx", train_ds.views, 2, args.hop_gap, args.state_names, H, W,
            [("hop", "hop")], None, desc,
        )
    size = os.path.getsize(onnx_path)
    info = {"task": args.task, "kind": args.kind, "train_seconds": round(secs, 1), "onnx_bytes": size,
            "args": vars(args)}
    if args.kind == "progress":
        info["validation"] = report
    with open(os.path.join(args.out, stem + ".train.json"), "w") as f:
        json.dump(info, f, indent=2)
    print(f"wrote {onnx_path} ({size / 1e6:.2f} MB), trained in {secs:.0f}s")


if __name__ == "__main__":
    main()
