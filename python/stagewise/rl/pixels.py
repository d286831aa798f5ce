"""A policy that reads camera frames (`stagewise learn --obs pixels`, issue 47 (b)): the frames of every view go
through a small conv encoder, trained by the critics with random-shift augmentation (DrQ, Kostrikov et al. 2020;
DrQ-v2, Yarats et al. 2021), started from a reward model's encoder (its weights: what the robot already runs), and
join the proprioception's features. The observation the learner stores and the exported policy reads is one flat
vector: every view's frame channel-major [3, H, W] as raw bytes 0..255, in the views' order, then the named
proprioception; the graph normalises the frames itself (the policy manifest's `pixels` table says which views at
which size, docs/runtime.md "Pixel policies")."""

from __future__ import annotations

import copy
import io
import warnings
from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..training import train as tr


@dataclass(frozen=True)
class PixelSpec:
    views: List[str]
    height: int
    width: int

    @property
    def size(self) -> int:
        """Values of the observation the frames take."""
        return len(self.views) * 3 * self.height * self.width

    def manifest(self) -> dict:
        return {"views": list(self.views), "width": self.width, "height": self.height}


def load_encoder(path: str, spec: PixelSpec) -> nn.Module:
    """The per-frame encoder of a train.py stage-progress model (`path`: its manifest) or a keypoint encoder file
    (`path`: .pt, `python -m stagewise.training keypoints`), its weights as trained; refused when it reads frames of
    another size."""
    if path.endswith(".pt"):
        from ..training import keypoints

        enc, _ = keypoints.load(path)
        size = (enc.h, enc.w)
    else:
        from ..training.adapt import load_progress_net

        net, man, _ = load_progress_net(path)
        img = man.get("image") or {}
        enc, size = copy.deepcopy(net.enc), (img.get("height"), img.get("width"))
    if size != (spec.height, spec.width):
        raise ValueError(f"{path}: its encoder reads {size[1]}x{size[0]} frames, the policy "
                         f"{spec.width}x{spec.height} (--width/--height)")
    return enc


def random_encoder(spec: PixelSpec, emb: int = 64) -> nn.Module:
    """A fresh encoder of the reward models' shape (stride-2 3x3 convs 16, 32, 32, a linear layer to `emb`)."""
    return tr.Encoder(spec.height, spec.width, emb)


def random_shift(x: torch.Tensor, pad: int, gen: Optional[torch.Generator] = None) -> torch.Tensor:
    """Each image of `x` [N, C, H, W] shifted by up to `pad` pixels each way, the border repeated (DrQ's
    augmentation): the edge-padded image cropped at a random offset."""
    if pad <= 0:
        return x
    n, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad), mode="replicate")
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    rows = (dy[:, None] + torch.arange(h)[None])[:, None, :, None].expand(n, c, h, w + 2 * pad)
    cropped = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w)[None])[:, None, None, :].expand(n, c, h, w)
    return cropped.gather(3, cols)


class PixelFeatures(nn.Module):
    """Observation [B, views * 3 * H * W + P] -> features [B, views * E + F]: the frames normalised as the reward
    models read them ((x / 255 - mean) / std), encoded frame by frame (`encoder`, trained), beside the fixed affine
    map (`pw`, `pb`: agent.feature_map of the proprioception's names) of the rest."""

    def __init__(self, spec: PixelSpec, encoder: nn.Module, pw: np.ndarray, pb: np.ndarray, shift: int,
                 train_convs: bool = True):
        super().__init__()
        self.spec, self.encoder, self.shift = spec, encoder, shift
        # `train_convs` False (`--encoder-train head`): the convs keep their weights and the replay holds their
        # output (`conv_features`), so an update trains the per-view linear layer only, on cached features (no
        # shift augmentation: the frames are gone)
        self.cached = not train_convs
        for p in encoder.conv.parameters():
            p.requires_grad_(train_convs)
        self.register_buffer("pw", torch.as_tensor(pw, dtype=torch.float32))
        self.register_buffer("pb", torch.as_tensor(pb, dtype=torch.float32))
        self.register_buffer("mean", torch.tensor(tr.MEAN, dtype=torch.float32).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(tr.STD, dtype=torch.float32).view(1, 3, 1, 1))
        with torch.no_grad():
            self.emb = int(encoder(torch.zeros(1, 3, spec.height, spec.width)).shape[1])

    @property
    def out_size(self) -> int:
        return len(self.spec.views) * self.emb + self.pw.shape[0]

    @property
    def proprio_size(self) -> int:
        """Values of the observation after the frames."""
        return self.pw.shape[1]

    @property
    def in_size(self) -> int:
        """Values of an observation: frames, then proprioception."""
        return self.spec.size + self.proprio_size

    def _convs(self, obs: torch.Tensor, augment: bool) -> torch.Tensor:
        """[B * views, C * h * w]: every frame through the encoder's convs (the encoder minus its linear layer)."""
        s, b = self.spec, obs.shape[0]
        x = obs[:, :s.size].reshape(b * len(s.views), 3, s.height, s.width)
        x = (x / 255.0 - self.mean) / self.std
        if augment:
            x = random_shift(x, self.shift)
        if getattr(self.encoder, "coord", False):
            x = torch.cat([x, self.encoder.coords.expand(x.shape[0], -1, -1, -1)], 1)
        return self.encoder.conv(x).flatten(1)

    def _head(self, z: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        e = F.relu(self.encoder.fc(z)).reshape(proprio.shape[0], len(self.spec.views) * self.emb)
        return torch.cat([e, proprio @ self.pw.T + self.pb], 1)

    @torch.no_grad()
    def conv_features(self, obs: np.ndarray) -> np.ndarray:
        """What the replay keeps of an observation when the convs are not trained: their output for every view,
        flattened, then the proprioception (float32)."""
        o = torch.as_tensor(np.asarray(obs, np.float32)).reshape(1, -1)
        z = self._convs(o, False).reshape(1, -1)
        return torch.cat([z, o[:, self.spec.size:]], 1)[0].numpy()

    def forward(self, obs: torch.Tensor, augment: bool = False, cached: bool = False) -> torch.Tensor:
        """Features of raw observations, or (`cached`) of what `conv_features` made of them."""
        if cached:
            n = obs.shape[1] - self.pw.shape[1]
            return self._head(obs[:, :n].reshape(obs.shape[0] * len(self.spec.views), -1), obs[:, n:])
        return self._head(self._convs(obs, augment), obs[:, self.spec.size:])


class LocatedFeatures(nn.Module):
    """Observation [B, views * 3 * H * W + P] -> the state learner's features (`fw`, `fb`: agent.feature_map of
    `names`) of the proprioception and where a frozen locator (training/locator.py) puts the objects: `names` =
    the proprioception's names + the locator's (block0_x, ...). The replay keeps those values (`conv_features`),
    named so that the symmetry augmentation maps them as it maps the state's. `at_start`: these located names are
    read from the episode's first observation, which then follows the current one in the input (envs.LearnerEnv
    remember_first; the runtime's `pixels.remember_first`)."""

    cached = True

    def __init__(self, spec: PixelSpec, locator: nn.Module, proprio: List[str], fw: np.ndarray, fb: np.ndarray,
                 at_start: Optional[List[str]] = None):
        super().__init__()
        if list(locator.views) != list(spec.views) or (locator.h, locator.w) != (spec.height, spec.width):
            raise ValueError(f"the locator reads {', '.join(locator.views)} at {locator.w}x{locator.h}, the env "
                             f"sends {', '.join(spec.views)} at {spec.width}x{spec.height}")
        if list(locator.proprio) != list(proprio):
            raise ValueError(f"the locator reads the proprioception {locator.proprio}, the policy {list(proprio)}")
        self.spec, self.locator, self.n_proprio = spec, locator, len(proprio)
        self.names = list(proprio) + list(locator.names)
        self.at_start = list(at_start or [])
        # which of `names` come from the first observation (derived from the arguments: not saved)
        start = torch.zeros(len(self.names), dtype=torch.bool)
        start[[self.names.index(n) for n in self.at_start]] = True
        self.register_buffer("from_start", start, persistent=False)
        for p in locator.parameters():
            p.requires_grad_(False)
        self.register_buffer("fw", torch.as_tensor(fw, dtype=torch.float32))
        self.register_buffer("fb", torch.as_tensor(fb, dtype=torch.float32))
        self.register_buffer("mean", torch.tensor(tr.MEAN, dtype=torch.float32).view(1, 1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(tr.STD, dtype=torch.float32).view(1, 1, 3, 1, 1))

    @property
    def out_size(self) -> int:
        return self.fw.shape[0]

    @property
    def proprio_size(self) -> int:
        return self.n_proprio

    @property
    def in_size(self) -> int:
        """Values of an observation: frames and proprioception, twice with `at_start` (now, then the first)."""
        return (self.spec.size + self.n_proprio) * (2 if self.at_start else 1)

    def _locate(self, row: torch.Tensor) -> torch.Tensor:
        s, b = self.spec, row.shape[0]
        frames = row[:, :s.size].reshape(b, len(s.views), 3, s.height, s.width)
        proprio = row[:, s.size:]
        return torch.cat([proprio, self.locator((frames / 255.0 - self.mean) / self.std, proprio)], 1)

    def located_state(self, obs: torch.Tensor) -> torch.Tensor:
        """[B, len(names)]: the proprioception, then the located positions (`at_start` ones from the first
        observation)."""
        if not self.at_start:
            return self._locate(obs)
        half = self.spec.size + self.n_proprio
        return torch.where(self.from_start, self._locate(obs[:, half:]), self._locate(obs[:, :half]))

    @torch.no_grad()
    def conv_features(self, obs: np.ndarray) -> np.ndarray:
        """What the replay keeps of an observation: `located_state` (float32)."""
        return self.located_state(torch.as_tensor(np.asarray(obs, np.float32)).reshape(1, -1))[0].numpy()

    def forward(self, obs: torch.Tensor, augment: bool = False, cached: bool = False) -> torch.Tensor:
        """Features of raw observations, or (`cached`) of what `conv_features` made of them."""
        s = obs if cached else self.located_state(obs)
        return s @ self.fw.T + self.fb


class PixelActorGraph(nn.Module):
    """The deterministic actor on raw observations: what the exported policy computes."""

    def __init__(self, features: PixelFeatures, body: nn.Module, head: nn.Linear):
        super().__init__()
        self.features, self.body, self.head = features, body, head

    def forward(self, state):
        return torch.tanh(self.head(self.body(self.features(state)))).clamp(-1.0, 1.0)


def pixel_actor_onnx(features, actor) -> bytes:
    """ONNX bytes of `state` [N, features.in_size] -> `action` [N, A] (tanh of the actor's mean);
    `features` a PixelFeatures or LocatedFeatures."""
    act = actor.act
    head = nn.Linear(actor.head.in_features, act)
    with torch.no_grad():
        head.weight.copy_(actor.head.weight[:act])
        head.bias.copy_(actor.head.bias[:act])
    graph = copy.deepcopy(PixelActorGraph(features, actor.body, head)).eval()
    example = torch.zeros(1, features.in_size)
    buf = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice: the graph is plain convs + MLP
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(graph, (example,), buf, input_names=["state"], output_names=["action"],
                          dynamic_axes={"state": {0: "batch"}, "action": {0: "batch"}}, opset_version=17,
                          dynamo=False)
    return buf.getvalue()


def frames_vector(images: dict, spec: PixelSpec) -> np.ndarray:
    """The frames of an observation (`images`: view -> uint8 [H, W, 3]) as the policy's leading values (float32,
    channel-major, in the spec's view order); a missing view or a frame of another size is an error naming it."""
    out = []
    for v in spec.views:
        f = images.get(v)
        if f is None:
            raise ValueError(f"no frame for view {v!r} (the observation has {sorted(images)})")
        f = np.asarray(f)
        if f.shape != (spec.height, spec.width, 3):
            raise ValueError(f"view {v!r}: frame {f.shape}, the policy reads ({spec.height}, {spec.width}, 3)")
        out.append(f.transpose(2, 0, 1).reshape(-1))
    return np.concatenate(out).astype(np.float32)
