"""A keypoint encoder of camera frames, trained on the frames alone (`python -m stagewise.training keypoints`):
a deep spatial autoencoder (Finn et al. 2016, "Deep Spatial Autoencoders for Visuomotor Learning"; the Gaussian
heatmap decoder of Jakab et al. 2018). Full-resolution 3x3 convs end in K feature maps; a spatial softmax turns
each into the expected (x, y) of its activation, a point in the picture. The decoder sees only those points (drawn as
Gaussian blobs, plus which view the frame is) and paints what differs from the view's background (its median
frame over the dataset): the hand, the block, the target. So the points must follow what moves. The encoder's
output is the points and (`--relations 1`) every pair's displacement, standardised by their spread over the frames.

What a robot has: recorded frames (demonstrations, play), no labels, no simulator state. The pixel learner reads
the points frozen (`stagewise learn --obs pixels --encoder-init FILE.pt --encoder-train head`), so an update is as
cheap as on the state, where the reward model's encoder (trained for progress) did not locate the block (issue 47).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import train as tr

#: What the saved file says it is (refused otherwise).
KIND = "stagewise-keypoint-encoder"


class SpatialSoftmax(nn.Module):
    """[N, K, H, W] -> [N, 2K]: each map's softmax over the picture (a learned temperature), the expected x and y
    in [-1, 1] under it, as x0, y0, x1, y1, ..."""

    def __init__(self, h: int, w: int):
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.reshape(-1), ys.reshape(-1)], 1))  # [H*W, 2]
        self.log_temp = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        n, k = x.shape[:2]
        p = torch.softmax(x.reshape(n, k, -1) / self.log_temp.exp(), -1)
        return (p @ self.grid).reshape(n, 2 * k)


class Standardise(nn.Module):
    """x -> (x - mean) / std with the points' spread over the training frames: a point that follows the block
    moves a few pixels (a tenth of the [-1, 1] range), and the layer the critics train reads O(1) inputs."""

    def __init__(self, size: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("std", torch.ones(size))

    def forward(self, x):
        return (x - self.mean) / self.std


class Relations(nn.Module):
    """[N, 2K] points -> [N, 2K + K(K-1)]: the points, then every pair's displacement p_i - p_j (i < j): where the
    block is relative to the hand, as the state learner's feature map gives it (agent.feature_map), read off the
    picture."""

    def __init__(self, points: int):
        super().__init__()
        i, j = torch.triu_indices(points, points, 1)
        self.register_buffer("i", i)
        self.register_buffer("j", j)

    def forward(self, x):
        p = x.reshape(x.shape[0], -1, 2)
        return torch.cat([x, (p[:, self.i] - p[:, self.j]).flatten(1)], 1)


class KeypointEncoder(nn.Module):
    """Per-frame encoder [B, 3, H, W] (normalised as the reward models read frames) -> [B, E], in the shape the
    pixel learner drives (rl/pixels.py): `conv` (convs + spatial softmax: the 2K point coordinates, kept frozen)
    then `fc` (trained by the critics)."""

    coord = False

    def __init__(self, h: int, w: int, points: int = 16, chans: int = 32, emb: int = 64, relations: bool = False):
        super().__init__()
        self.h, self.w, self.points, self.chans, self.relations = h, w, points, chans, relations
        size = 2 * points + (points * (points - 1) if relations else 0)
        self.conv = nn.Sequential(
            nn.Conv2d(3, chans, 3, 1, 1), nn.ReLU(), nn.Conv2d(chans, chans, 3, 1, 1), nn.ReLU(),
            nn.Conv2d(chans, points, 3, 1, 1), SpatialSoftmax(h, w), *([Relations(points)] if relations else []),
            Standardise(size))
        self.fc = nn.Linear(size, emb)

    def locate(self, x):
        """The points [B, 2K] (what the decoder reads while the encoder trains)."""
        return self.conv[:6](x)

    def forward(self, x):
        return F.relu(self.fc(self.conv(x)))


class HeatmapDecoder(nn.Module):
    """Points [N, 2K] + view index [N] -> the frame minus its view's background [N, 3, H, W]."""

    def __init__(self, h: int, w: int, points: int, views: int, chans: int = 32, sigma: float = 0.08):
        super().__init__()
        self.views, self.sigma = views, sigma
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        self.register_buffer("xs", xs)
        self.register_buffer("ys", ys)
        self.net = nn.Sequential(
            nn.Conv2d(points + views, chans, 3, 1, 1), nn.ReLU(), nn.Conv2d(chans, chans, 3, 1, 1), nn.ReLU(),
            nn.Conv2d(chans, 3, 3, 1, 1))

    def forward(self, pts, view):
        n = pts.shape[0]
        p = pts.reshape(n, -1, 2)
        d2 = (self.xs[None, None] - p[..., 0, None, None]) ** 2 + (self.ys[None, None] - p[..., 1, None, None]) ** 2
        blobs = torch.exp(-d2 / (2 * self.sigma ** 2))
        onehot = F.one_hot(view, self.views).float()[..., None, None].expand(-1, -1, *blobs.shape[2:])
        return self.net(torch.cat([blobs, onehot], 1))


def normalise(frames: np.ndarray) -> torch.Tensor:
    """uint8 [N, H, W, 3] -> float [N, 3, H, W] as the reward models (and the pixel learner) read frames."""
    x = torch.as_tensor(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float() / 255.0
    return (x - torch.tensor(tr.MEAN).view(1, 3, 1, 1)) / torch.tensor(tr.STD).view(1, 3, 1, 1)


def save(path: str, enc: KeypointEncoder, views: list, info: dict) -> None:
    torch.save({"kind": KIND, "height": enc.h, "width": enc.w, "points": enc.points, "chans": enc.chans,
                "emb": enc.fc.out_features, "relations": enc.relations, "views": list(views),
                "state_dict": enc.state_dict(), "info": info}, path)


def read_file(path: str, kind: str, what: str) -> dict:
    """The dict a `save` of ours wrote with `kind`; anything else is a ValueError naming the file (`what` it should
    be)."""
    try:
        d = torch.load(path, map_location="cpu", weights_only=True)  # tensors and plain values: no pickled code
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same clear error
        raise ValueError(f"{path}: not a {what} file ({type(e).__name__}: {e})") from None
    if not isinstance(d, dict) or d.get("kind") != kind:
        raise ValueError(f"{path}: not a {what} file (no kind = {kind!r})")
    return d


def encoder_of(fields: dict) -> KeypointEncoder:
    """An untrained encoder of the shape a saved file's fields give (KeyError, TypeError, ValueError if bad)."""
    return KeypointEncoder(int(fields["height"]), int(fields["width"]), int(fields["points"]), int(fields["chans"]),
                           int(fields["emb"]), bool(fields.get("relations", False)))


def load(path: str) -> tuple:
    """(encoder, the saved dict) of a file `save` wrote; anything else is a ValueError naming the file."""
    d = read_file(path, KIND, "keypoint encoder")
    try:
        enc = encoder_of(d)
        enc.load_state_dict(d["state_dict"])
    except (KeyError, RuntimeError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: a keypoint encoder file with bad fields: {e}") from None
    return enc, d


def fit_standardise(enc: KeypointEncoder, frames: np.ndarray, rng, samples: int = 4096) -> None:
    """Sets the encoder's `Standardise` to its points' mean and spread over `samples` random frames of `frames`
    [N, V, H, W, 3] (a floor of a third of a pixel: a point that never moves is not blown up)."""
    n, v, h, w = frames.shape[:4]
    rows, views = rng.integers(0, n, samples), rng.integers(0, v, samples)
    with torch.no_grad():
        pts = torch.cat([enc.conv[:-1](normalise(frames[i, j]))
                         for i, j in zip(np.array_split(rows, 16), np.array_split(views, 16))])
        enc.conv[-1].mean.copy_(pts.mean(0))
        enc.conv[-1].std.copy_(pts.std(0).clamp_min(2.0 / (3 * max(h, w))))


def load_frames(datasets: list) -> tuple:
    """uint8 [N, V, H, W, 3] of every frame of `datasets` (`stagewise record` / LeRobot v3 image datasets with the
    same views), and the views' names. Reads only the images."""
    from .data import load as load_dataset

    frames, views = [], None
    for root in datasets:
        if not os.path.isfile(os.path.join(root, "meta", "info.json")):
            raise SystemExit(f"{root}: missing meta/info.json (not a recorded dataset)")
        ds = load_dataset(root, stage_names=[], proportions=[], state_names=[])
        if views is not None and ds.views != views:
            raise SystemExit(f"{root}: views {ds.views}, the first dataset has {views}")
        views = ds.views
        sizes = {e.images.shape[2:] for e in ds.episodes} | ({frames[0].shape[2:]} if frames else set())
        if len(sizes) > 1:
            raise SystemExit(f"{root}: frames of {sorted(sizes)} (H, W, C): every dataset's frames must be one size")
        frames += [e.images for e in ds.episodes]
    if not frames or not views:
        raise SystemExit(f"{', '.join(datasets)}: no camera frames")
    return np.concatenate(frames), views


def parse_seeded(ap: argparse.ArgumentParser, argv) -> tuple:
    """(args, numpy generator) of a training job's parser with `--seed` and `--threads` added, torch seeded."""
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    return args, np.random.default_rng(args.seed)


def main(argv=None, prog=None):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", action="append", required=True,
                    help="a dataset of camera frames (repeat for more); only the images are read")
    ap.add_argument("--out", required=True, help="the encoder file to write (.pt)")
    ap.add_argument("--points", type=int, default=16, help="keypoints per frame (default 16)")
    ap.add_argument("--chans", type=int, default=32, help="channels of the convs (default 32)")
    ap.add_argument("--relations", type=int, choices=[0, 1], default=1,
                    help="1 (default): the encoder's output also holds every pair of points' displacement")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64, help="frames per step (default 64)")
    ap.add_argument("--lr", type=float, default=1e-3)
    args, rng = parse_seeded(ap, argv)

    t0 = time.time()
    frames, views = load_frames(args.dataset)
    n, v, h, w = frames.shape[:4]
    # the background of each view: its median frame (what never moves), as the decoder's target is the rest
    sample = frames[rng.choice(n, min(n, 2000), replace=False)]
    background = normalise(np.median(sample, axis=0).astype(np.uint8))  # [V, 3, H, W]
    enc = KeypointEncoder(h, w, args.points, args.chans, relations=bool(args.relations))
    dec = HeatmapDecoder(h, w, args.points, v)
    opt = torch.optim.Adam(list(enc.conv.parameters()) + list(dec.parameters()), lr=args.lr)
    print(f"{n} frames x {v} views ({', '.join(views)}) of {h}x{w}, read in {time.time() - t0:.0f} s", flush=True)
    losses = []
    for step in range(1, args.steps + 1):
        i, j = rng.integers(0, n, args.batch), rng.integers(0, v, args.batch)
        x = normalise(frames[i, j])
        jt = torch.as_tensor(j)
        target = x - background[jt]
        loss = F.mse_loss(dec(enc.locate(x), jt), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 200 == 0 or step == args.steps:
            print(f"step {step}/{args.steps} loss {np.mean(losses[-200:]):.4f} "
                  f"({time.time() - t0:.0f} s)", flush=True)
    fit_standardise(enc, frames, rng)
    info = {"datasets": [os.path.abspath(d) for d in args.dataset], "frames": int(n), "steps": args.steps,
            "batch": args.batch, "lr": args.lr, "seed": args.seed, "final_loss": float(np.mean(losses[-200:])),
            "seconds": round(time.time() - t0, 1)}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save(args.out, enc, views, info)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
