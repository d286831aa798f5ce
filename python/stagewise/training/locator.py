"""A locator: camera frames (+ the hand's proprioception) -> where the objects are on the table, in metres
(`python -m stagewise.training locator`). Every view's frame goes through a keypoint encoder's frozen convs (the
points and their displacements, keypoints.py: trained on frames alone), and a small MLP trained on a person's
marks maps them to the named positions (`block0_x, block0_y, target_x, target_y` for push-target).

Why: the state learner's symmetry augmentation (every batch turned and mirrored about the block, agent.Symmetry)
is most of what let it learn (issue 47: without it the state learner is at 40% at 150k, the pixel learners at
<= 22%), and it needs positions in the table's frame. A locator gives a camera policy those positions, so the
pixel learner (`stagewise learn --obs pixels --locator FILE.pt`) learns as the state learner does, while the policy
still reads only frames and proprioception (the locator is part of its exported graph).

What a robot has: recorded frames (demonstrations), proprioception, and marks a person made of where the objects
were on some of the frames (table coordinates: a click on a calibrated view, or a ruler). The marks file is JSON:
`{"names": [...], "marks": [{"episode": E, "frame": T, "values": [...]}, ...]}`, frames of the `--dataset` by
episode index and frame index; how many marks a locator was trained on is recorded in its file."""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import keypoints

#: What the saved file says it is (refused otherwise).
KIND = "stagewise-locator"


class Locator(nn.Module):
    """(frames [B, V, 3, H, W] normalised as the reward models read them, proprioception [B, P]) -> positions
    [B, len(names)] in metres. `conv`: the keypoint encoder's frozen points (standardised); `mlp` on every view's
    points and the standardised proprioception, its output de-standardised by the marks' spread."""

    def __init__(self, enc: keypoints.KeypointEncoder, views: list, proprio: list, names: list, hidden: int = 256):
        super().__init__()
        self.views, self.proprio, self.names = list(views), list(proprio), list(names)
        self.h, self.w = enc.h, enc.w
        self.enc = enc
        for p in enc.parameters():
            p.requires_grad_(False)
        with torch.no_grad():
            size = enc.conv(torch.zeros(1, 3, enc.h, enc.w)).shape[1]
        self.mlp = nn.Sequential(nn.Linear(len(views) * size + len(proprio), hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, len(names)))
        for n, k in (("p_mean", len(proprio)), ("p_std", len(proprio)), ("y_mean", len(names)), ("y_std", len(names))):
            self.register_buffer(n, torch.zeros(k) if "mean" in n else torch.ones(k))

    def points(self, frames: torch.Tensor) -> torch.Tensor:
        """[B, V * points]: every view's frozen keypoint features, views in order."""
        b = frames.shape[0]
        return self.enc.conv(frames.reshape(b * len(self.views), 3, self.h, self.w)).reshape(b, -1)

    def head(self, pts: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        x = torch.cat([pts, (proprio - self.p_mean) / self.p_std], 1)
        return self.mlp(x) * self.y_std + self.y_mean

    def forward(self, frames: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        return self.head(self.points(frames), proprio)


def save(path: str, loc: Locator, encoder: dict, info: dict) -> None:
    """The locator and the keypoint encoder file's fields it was built on (`encoder`: keypoints.load's dict)."""
    enc = {k: encoder[k] for k in ("height", "width", "points", "chans", "emb", "relations")}
    torch.save({"kind": KIND, "views": loc.views, "proprio": loc.proprio, "names": loc.names,
                "hidden": loc.mlp[0].out_features, "encoder": enc, "state_dict": loc.state_dict(), "info": info}, path)


def load(path: str) -> tuple:
    """(locator, the saved dict) of a file `save` wrote; anything else is a ValueError naming the file."""
    d = keypoints.read_file(path, KIND, "locator")
    try:
        loc = Locator(keypoints.encoder_of(d["encoder"]), list(d["views"]), list(d["proprio"]), list(d["names"]),
                      int(d["hidden"]))
        loc.load_state_dict(d["state_dict"])
    except (KeyError, RuntimeError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: a locator file with bad fields: {err}") from None
    return loc.eval(), d


def read_marks(path: str) -> tuple:
    """(names, episode [M], frame [M], values [M, len(names)]) of a marks file; a bad one is an error naming it."""
    try:
        with open(path) as f:
            d = json.load(f)
        names = [str(n) for n in d["names"]]
        marks = d["marks"]
        ep = np.array([int(m["episode"]) for m in marks])
        fr = np.array([int(m["frame"]) for m in marks])
        vals = np.array([[float(v) for v in m["values"]] for m in marks], np.float32)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: not a marks file ({type(e).__name__}: {e}); see --help") from None
    if not marks or vals.shape != (len(marks), len(names)) or not np.isfinite(vals).all():
        raise SystemExit(f"{path}: every mark needs {len(names)} finite values ({', '.join(names)})")
    return names, ep, fr, vals


def marked_frames(root: str, ep: np.ndarray, fr: np.ndarray, proprio: list, marks_path: str) -> tuple:
    """(frames uint8 [M, V, H, W, 3], proprioception [M, P], views) of the marked frames of dataset `root`."""
    from .data import load as load_dataset

    if not os.path.isfile(os.path.join(root, "meta", "info.json")):
        raise SystemExit(f"{root}: missing meta/info.json (not a recorded dataset)")
    ds = load_dataset(root, stage_names=[], proportions=[], state_names=proprio, labels=False)
    by_index = {e.index: e for e in ds.episodes}
    frames, props = [], []
    for e, t in zip(ep, fr):
        epi = by_index.get(int(e))
        if epi is None or not 0 <= t < len(epi.images):
            raise SystemExit(f"{marks_path}: a mark of episode {e} frame {t}, which {root} does not have")
        frames.append(epi.images[t])
        props.append(epi.state[t])
    return np.stack(frames), np.stack(props).astype(np.float32), ds.views


def _normalised(frames: np.ndarray) -> torch.Tensor:
    """uint8 [M, V, H, W, 3] -> [M, V, 3, H, W] as the reward models read frames."""
    m, v = frames.shape[:2]
    return keypoints.normalise(frames.reshape(m * v, *frames.shape[2:])).reshape(m, v, *frames.shape[4:],
                                                                                 *frames.shape[2:4])


def features(loc: Locator, frames: np.ndarray) -> torch.Tensor:
    """The points of uint8 frames [M, V, H, W, 3], in chunks."""
    with torch.no_grad():
        return torch.cat([loc.points(_normalised(c)) for c in np.array_split(frames, max(1, len(frames) // 512))])


def main(argv=None, prog=None):
    from ..rl.config import PROPRIOCEPTION

    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, action="append",
                    help="the recorded dataset whose frames were marked (a recording or a logged run, `stagewise log "
                         "export`); repeat it with --marks for several, paired in order")
    ap.add_argument("--marks", required=True, action="append",
                    help="the person's marks of that dataset's frames (JSON, see above)")
    ap.add_argument("--encoder", required=True, help="a keypoint encoder file (python -m stagewise.training keypoints)")
    ap.add_argument("--out", required=True, help="the locator file to write (.pt)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--train-convs", type=int, choices=[0, 1], default=0,
                    help="1: the marks also fine-tune the keypoint convs (at a tenth of --lr; slower: the frames go "
                         "through the convs every step); 0 (default): frozen, their output computed once")
    ap.add_argument("--held-out", type=float, default=0.1, help="share of the marked episodes kept to score it")
    args, rng = keypoints.parse_seeded(ap, argv)

    t0 = time.time()
    if len(args.dataset) != len(args.marks):
        raise SystemExit(f"{len(args.dataset)} --dataset but {len(args.marks)} --marks: give one marks file per "
                         "dataset, in the same order")
    try:
        enc, enc_file = keypoints.load(args.encoder)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    names, ep, y, frames, prop, views = None, [], [], [], [], None
    for k, (root, marks_path) in enumerate(zip(args.dataset, args.marks)):
        n, e, f, v = read_marks(marks_path)
        if names is not None and n != names:
            raise SystemExit(f"{marks_path}: marks {n}, but {args.marks[0]} marks {names}")
        fk, pk, vk = marked_frames(root, e, f, list(PROPRIOCEPTION), marks_path)
        if views is not None and vk != views:
            raise SystemExit(f"{root}: views {vk}, but {args.dataset[0]} has {views}")
        if fk.shape[2:4] != (enc.h, enc.w):
            raise SystemExit(f"{args.encoder}: reads {enc.w}x{enc.h} frames, {root} has {fk.shape[3]}x{fk.shape[2]}")
        names, views = n, vk
        ep.append(e + k * 1_000_000_000)  # episodes of different sets stay apart (held out as a whole)
        y.append(v)
        frames.append(fk)
        prop.append(pk)
    ep, y, frames, prop = np.concatenate(ep), np.concatenate(y), np.concatenate(frames), np.concatenate(prop)
    loc = Locator(enc, views, list(PROPRIOCEPTION), names, args.hidden)
    x = None if args.train_convs else features(loc, frames)  # frozen convs: their output once
    p, yt = torch.as_tensor(prop), torch.as_tensor(y)
    episodes = np.unique(ep)
    held = set(rng.choice(episodes, int(round(len(episodes) * args.held_out)), replace=False).tolist()) \
        if len(episodes) > 1 else set()
    val = torch.as_tensor(np.isin(ep, list(held)))
    tr_rows = torch.nonzero(~val).flatten()
    with torch.no_grad():
        loc.p_mean.copy_(p[tr_rows].mean(0))
        loc.p_std.copy_(p[tr_rows].std(0).clamp_min(1e-3))
        loc.y_mean.copy_(yt[tr_rows].mean(0))
        loc.y_std.copy_(yt[tr_rows].std(0).clamp_min(1e-3))
    print(f"{len(y)} marks of {len(episodes)} episodes ({len(held)} held out), {len(views)} views "
          f"({', '.join(views)}) of {enc.w}x{enc.h}; read in {time.time() - t0:.0f} s", flush=True)
    groups = [{"params": loc.mlp.parameters()}]
    if args.train_convs:
        convs = [q for q in loc.enc.conv.parameters()]
        for q in convs:
            q.requires_grad_(True)
        groups.append({"params": convs, "lr": args.lr / 10})
    opt = torch.optim.AdamW(groups, lr=args.lr, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)
    for step in range(1, args.steps + 1):
        i = tr_rows[torch.randint(0, len(tr_rows), (args.batch,))]
        pts = loc.points(_normalised(frames[i.numpy()])) if args.train_convs else x[i]
        loss = F.mse_loss((loc.head(pts, p[i]) - loc.y_mean) / loc.y_std, (yt[i] - loc.y_mean) / loc.y_std)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 1000 == 0 or step == args.steps:
            print(f"step {step}/{args.steps} loss {loss.item():.4f} ({time.time() - t0:.0f} s)", flush=True)
    if args.train_convs:
        for q in loc.enc.parameters():
            q.requires_grad_(False)
        x = features(loc, frames)  # as trained
    with torch.no_grad():
        err = (loc.head(x, p) - yt).abs()
    scores = {}
    for part, rows in (("train", ~val), ("held_out", val)):
        if rows.any():
            scores[part] = {n: round(float(err[rows, k].mean()) * 100, 2) for k, n in enumerate(names)}
    info = {"datasets": [os.path.abspath(d) for d in args.dataset],
            "marks_files": [os.path.abspath(m) for m in args.marks],
            "marks": int(len(y)), "marked_episodes": int(len(episodes)), "encoder": os.path.abspath(args.encoder),
            "steps": args.steps, "train_convs": bool(args.train_convs), "seed": args.seed, "mean_abs_error_cm": scores,
            "seconds": round(time.time() - t0, 1)}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save(args.out, loc.eval(), enc_file, info)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
