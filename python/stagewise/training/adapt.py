"""Adapts a trained stage-progress model (train.py's ProgressNet, as ONNX) to a task variant from a few annotated
demonstrations: `stagewise adapt` prepares the demonstrations like `stagewise train` does (frames, state and
annotation targets as numpy arrays, at the model's views, state fields, image size and stages) and runs this.

    .venv/bin/python -m stagewise.training adapt --model M.toml --data DIR --out OUT --name NAME

The network is rebuilt from the ONNX file's weights, then fine-tuned on the demonstrations with train.py's loss
and augmentation (shifts, view dropout, colour, brightness), a small learning rate and an L2-SP penalty
(`--l2sp`: lambda * sum (w - w0)^2 towards the weights it started from), which keeps what the model knew about
the original task (Li, Grandvalet & Davoine 2018, "Explicit inductive bias for transfer learning"). With
`--replay-data` (episodes of the original task, annotated), a share of every batch comes from them, first
repainted in the demonstrations' colours (`--replay-recolour`, colour_transfer): one demonstration shows one
layout of the scene, the repainted replay shows the variant's look in the original task's many layouts, with
their labels (docs/own-task.md step 7: 1 demonstration, variant VOC 0.91-0.97 without, 0.98 with). Exported
like train.py: single graph, two-part form (checked), manifest (the original's views, window, state, stages and
proportions) and <name>.train.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tomllib

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

from . import train as tr
from . import train_dataset as td


def load_progress_net(manifest_path):
    """(ProgressNet with the ONNX file's weights, manifest dict)."""
    with open(manifest_path, "rb") as f:
        man = tomllib.load(f)
    if man.get("kind") != "stage_progress":
        raise SystemExit(f"{manifest_path}: kind is {man.get('kind')!r}; adapt takes a stage_progress model")
    img = man.get("image", {})
    if list(img.get("mean", [])) != tr.MEAN or list(img.get("std", [])) != tr.STD:
        raise SystemExit(f"{manifest_path}: image normalisation {img.get('mean')}/{img.get('std')} is not "
                         f"train.py's {tr.MEAN}/{tr.STD}: not a train.py model")
    d = os.path.dirname(os.path.abspath(manifest_path))
    w = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy())
         for i in onnx.load(os.path.join(d, man["onnx"])).graph.initializer}
    if "enc.fc.weight" not in w or "trunk.0.weight" not in w:
        raise SystemExit(f"{manifest_path}: the graph's weights are not a train.py ProgressNet's")
    convs = sorted((int(k.split(".")[2]), v) for k, v in w.items() if k.startswith("enc.conv.") and k.endswith(".weight"))
    chans = tuple(v.shape[0] for _, v in convs)
    coord = convs[0][1].shape[1] == 5
    V, Fr = len(man["views"]), man["frames"]
    H, W = img["height"], img["width"]
    K = len(man["stages"]["names"])
    emb, hidden = w["enc.fc.weight"].shape[0], w["trunk.0.weight"].shape[0]
    # The encoder's stop size: the one that gives as many stride-2 convs as the graph has.
    for min_size in (4, 2, 8, 16, 1, 32):
        net = tr.ProgressNet(V, Fr, H, W, w["s_mean"].numpy(), w["s_std"].numpy(), K, emb=emb, hidden=hidden,
                             chans=chans, coord=coord, min_size=min_size)
        if sum(1 for m in net.enc.conv if isinstance(m, torch.nn.Conv2d)) == len(convs):
            break
    else:
        raise SystemExit(f"{manifest_path}: cannot rebuild the encoder ({len(convs)} convs)")
    state = {k: v for k, v in w.items() if k != "enc.coords"}
    missing, unexpected = net.load_state_dict(state, strict=False)
    missing = [m for m in missing if m != "enc.coords"]
    if missing or unexpected:
        raise SystemExit(f"{manifest_path}: not a train.py ProgressNet (missing {missing}, unexpected {unexpected})")
    return net, man, {"chans": list(chans), "coord": coord, "min_size": min_size, "emb": emb, "hidden": hidden}


def load_flat(data_dir, man, proportions):
    """The episodes `stagewise adapt` prepared in `data_dir` as an AnnotatedFlat (checked against the model)."""
    with open(os.path.join(data_dir, "meta.json")) as f:
        meta = json.load(f)
    if list(meta["stage_names"]) != list(man["stages"]["names"]):
        raise SystemExit(f"{data_dir}: the episodes' stages {meta['stage_names']} are not the model's "
                         f"{man['stages']['names']}")
    frames = np.load(os.path.join(data_dir, "frames.npy"), mmap_mode="r")
    state = np.load(os.path.join(data_dir, "state.npy"))
    stage = np.load(os.path.join(data_dir, "stage.npy"))
    tau = np.load(os.path.join(data_dir, "tau.npy"))
    return td.AnnotatedFlat(frames, state, stage, tau, meta["episodes"], proportions)


def atypical_demos(demo, proportions, names, limit=3.0):
    """A line for each demonstration with a stage longer than `limit` times its share of the model's proportions:
    the simulator's expert retrying a misplaced block (a second reach, grasp and carry annotated as one long
    "release"), a long pause, or an annotation off. Adapted on such a demonstration the model learns that
    frames that look like another stage belong to this one (docs/own-task.md, step 7, measures it)."""
    out = []
    for i, e in enumerate(demo.episodes):
        share = np.bincount(demo.stage[demo.ep == i], minlength=len(proportions)) / max(e["length"], 1)
        k = int(np.argmax(share / np.asarray(proportions)))
        if share[k] > limit * proportions[k]:
            out.append(f"demonstration {e['dataset']}:{e['episode_index']}: stage {names[k]} lasts "
                       f"{share[k]:.0%} of the episode, {share[k] / proportions[k]:.1f}x its share in the model's "
                       f"proportions ({proportions[k]:.0%}); a retry or a pause annotated as one stage? A single "
                       f"clean attempt adapts better")
    return out


def make_batch(flat, g, frames, stride, shift, view_dropout, colour, rng):
    """train.augment(train.to_tensor(flat.window(g, frames, stride)), ...) in distribution (the same shifts per
    sample and view, colour transforms per sample, view dropout and brightness jitter), built in fewer passes:
    the shifts as slices of the uint8 frames, one conversion, one colour product (about 4 ms of CPU per batch of
    64 instead of 14)."""
    u8 = flat.window(g, frames, stride)  # [B, F, V, H, W, 3]
    b, _, v, h, w, _ = u8.shape
    if shift > 0:
        pad = np.pad(u8, ((0, 0), (0, 0), (0, 0), (shift, shift), (shift, shift), (0, 0)), mode="edge")
        dy = rng.integers(0, 2 * shift + 1, size=(b, v))
        dx = rng.integers(0, 2 * shift + 1, size=(b, v))
        out = np.empty_like(u8)
        for i in range(b):  # slices: faster than one fancy-indexed gather
            for j in range(v):
                out[i, :, j] = pad[i, :, j, dy[i, j]:dy[i, j] + h, dx[i, j]:dx[i, j] + w]
        u8 = out
    x = torch.from_numpy(np.ascontiguousarray(u8)).permute(0, 2, 1, 5, 3, 4).contiguous().float()
    x.mul_(1.0 / 255.0)  # [B, V, F, 3, H, W] in [0, 1]
    if colour > 0:
        m = tr.colour_matrices(b, colour, rng)
        x = (m[:, None, None] @ x.flatten(4)).reshape(x.shape).clamp_(0, 1)
    mean = torch.tensor(tr.MEAN).view(1, 1, 1, 3, 1, 1)
    std = torch.tensor(tr.STD).view(1, 1, 1, 3, 1, 1)
    x = (x - mean) / std
    if view_dropout > 0:
        drop = rng.random((b, v)) < view_dropout
        drop[drop.all(axis=1), 0] = False  # keep at least one view
        x = x * torch.from_numpy(~drop).float().view(b, v, 1, 1, 1, 1)
    return x + torch.from_numpy(rng.normal(0, 0.1, size=(b, v, 1, 1, 1, 1)).astype(np.float32))


def _colour_hist(frames, bits, samples, rng):
    """(colour codes, shares) of a sample of the pixels of `frames` (uint8 [..., 3]), `bits` per channel."""
    px = frames.reshape(-1, 3)
    px = px[rng.integers(0, len(px), size=min(samples, len(px)))].astype(np.int64) >> (8 - bits)
    u, c = np.unique((px[:, 0] << (2 * bits)) | (px[:, 1] << bits) | px[:, 2], return_counts=True)
    w = c / c.sum()
    keep = w >= 2e-5  # a few sampled pixels: noise
    return u[keep], w[keep] / w[keep].sum()


def _colour_rgb(code, bits):
    m, q = (1 << bits) - 1, 8 - bits
    return np.stack([(code >> (2 * bits)) & m, (code >> bits) & m, code & m], -1) * (1 << q) + (1 << q) / 2 - 0.5


def _sinkhorn(a, b, C, eps, iters=1000):
    """The entropic optimal transport plan between histograms a and b for cost C (log domain)."""
    la, lb = np.log(a), np.log(b)
    f, g = np.zeros(len(a)), np.zeros(len(b))

    def lse(M, axis):
        mx = M.max(axis=axis, keepdims=True)
        return (mx + np.log(np.exp(M - mx).sum(axis=axis, keepdims=True))).squeeze(axis)

    for _ in range(iters):
        f = eps * (la - lse((g[None] - C) / eps, 1))
        g = eps * (lb - lse((f[:, None] - C) / eps, 0))
    return np.exp((f[:, None] + g[None] - C) / eps)


def colour_transfer(src, dst, bits=5, radius=16.0, share=0.02, reach=32.0, eps=0.003, samples=300000, seed=0):
    """A colour lookup table (uint8 [2**(3 bits), 3], indexed by the `bits`-bit colour code) that repaints frames
    of `src` (the original task) in the colours of `dst` (the demonstrations of the variant), and the list of
    (colour, share, new colour) it moves. Both frames' colour histograms are compared: each colour that both show
    (within `radius` of 0-255 on every channel) is matched to itself for as much of it as the other side has;
    what is left over and covers at least `share` of the pixels on each side (a table, floor or wall painted
    another colour) is matched by optimal transport (Sinkhorn, squared RGB distance), and every colour within
    `reach` of a moved one moves with it (its shading). Everything else (blocks, targets, the robot, the sky:
    the colours the demonstrations show too or that cover little) keeps its colour, so that a block colour
    that the demonstrations happen not to show is not painted over. When nothing large is left over (no colour
    shift between the two) the table is the identity."""
    rng = np.random.default_rng(seed)
    us, ws = _colour_hist(src, bits, samples, rng)
    ud, wd = _colour_hist(dst, bits, samples, rng)
    cs, cd = _colour_rgb(us, bits), _colour_rgb(ud, bits)
    D = np.abs(cs[:, None] - cd[None]).max(-1)
    rs, rd = ws.copy(), wd.copy()
    ii, jj = np.nonzero(D <= radius)
    for k in np.argsort(D[ii, jj], kind="stable"):  # the same colours first, then the nearest
        i, j = ii[k], jj[k]
        m = min(rs[i], rd[j])
        rs[i] -= m
        rd[j] -= m
    allc = _colour_rgb(np.arange(1 << (3 * bits)), bits)
    si, di = rs >= share, rd >= share
    moved = []
    out = allc.copy()
    if si.any() and di.any():
        C = (((cs[si][:, None] - cd[di][None]) / 255.0) ** 2).sum(-1)
        T = _sinkhorn(rs[si] / rs[si].sum(), rd[di] / rd[di].sum(), C, eps)
        big = cs[si]
        disp = (T @ cd[di]) / T.sum(1, keepdims=True) - big
        d = np.abs(allc[:, None] - big[None]).max(-1)
        near = d.argmin(1)
        move = d[np.arange(len(allc)), near] <= reach
        out[move] += disp[near[move]]
        moved = [(tuple(int(x) for x in big[k]), float(rs[si][k]), tuple(int(x) for x in big[k] + disp[k]))
                 for k in range(len(big))]
    return np.clip(np.round(out), 0, 255).astype(np.uint8), moved


def apply_colour_table(lut, frames, bits=5):
    """`frames` (uint8 [..., 3]) repainted with colour_transfer's table."""
    c = (frames >> (8 - bits)).astype(np.int32)
    return lut[(c[..., 0] << (2 * bits)) | (c[..., 1] << bits) | c[..., 2]]


class Adam:
    """Adam with PyTorch's one-cycle schedule (OneCycleLR's defaults: 30% warm-up from lr/25, cosine down to
    lr/25e4, beta1 cycled 0.95 -> 0.85 -> 0.95), written out: constructing torch.optim's optimizers imports
    torch._dynamo, 10-25 s of a two-minute budget on a loaded machine."""

    def __init__(self, params, lr, steps, eps=1e-8, beta2=0.999):
        self.params, self.lr, self.steps, self.eps, self.beta2 = params, lr, max(steps, 1), eps, beta2
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    def schedule(self, i):
        """(lr, beta1) of step i (0-based), as OneCycleLR gives them."""
        def cos(a, b, pct):
            return b + (a - b) / 2.0 * (np.cos(np.pi * pct) + 1)
        lo, end = self.lr / 25.0, self.lr / 25.0 / 1e4
        up = float(0.3 * self.steps) - 1
        if i <= up:
            pct = i / up if up > 0 else 1.0
            return cos(lo, self.lr, pct), cos(0.95, 0.85, pct)
        pct = (i - up) / (self.steps - 1 - up) if self.steps - 1 > up else 1.0
        return cos(self.lr, end, pct), cos(0.85, 0.95, pct)

    @torch.no_grad()
    def step(self):
        lr, b1 = self.schedule(self.t)
        self.t += 1
        c1, c2 = 1 - b1 ** self.t, 1 - self.beta2 ** self.t
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(self.beta2).addcmul_(p.grad, p.grad, value=1 - self.beta2)
            p.addcdiv_(m, (v / c2).sqrt_().add_(self.eps), value=-lr / c1)

    def zero_grad(self):
        for p in self.params:
            p.grad = None


def finetune(model, demo, P, a, args, rng, stride, replay=None, progress=False):
    """Fine-tunes `model` in place on `demo` (an AnnotatedFlat); returns the seconds it took. With `replay` (the
    original task's episodes), a share `args.replay_frac` of every batch is drawn from them."""
    Fr = model.f
    prefixes = [p for p in args.trainable.split(",") if p]
    params = []
    for n, p in model.named_parameters():
        p.requires_grad_(not prefixes or any(n.startswith(x) for x in prefixes))
        if p.requires_grad:
            params.append(p)
    if not params:
        raise SystemExit(f"--trainable {args.trainable!r} matches no parameter of the model")
    w0 = [p.detach().clone() for p in params]
    first = model.enc.conv[0].weight
    coord_w = first if getattr(args, "freeze_coords", 0) and first.requires_grad and first.shape[1] == 5 else None
    opt = Adam(params, args.lr, args.steps)
    ss = torch.from_numpy(np.asarray(model.s_std.numpy(), dtype=np.float32))
    t1 = time.time()
    ema = [p.detach().clone() for p in params]
    n_replay = int(round(args.batch * args.replay_frac)) if replay is not None else 0
    sources = [(demo, args.batch - n_replay, args.colour)]
    if n_replay > 0:
        sources.append((replay, n_replay, args.replay_colour))
    for step in range(args.steps):
        model.train()
        xs, sts, ks, taus, phis = [], [], [], [], []
        for flat, nb, colour in sources:
            if args.balance_stages:
                counts = np.bincount(flat.stage, minlength=len(P)).astype(np.float64)
                share = np.ones(len(P)) if args.balance_stages == 1 else a.numpy().astype(np.float64)
                pr = share[flat.stage] / counts[flat.stage]
                g = rng.choice(flat.n, size=nb, p=pr / pr.sum())
            else:
                g = rng.integers(0, flat.n, size=nb)
            xs.append(make_batch(flat, g, Fr, stride, args.shift, args.view_dropout, colour, rng))
            sts.append(torch.from_numpy(flat.state[g]))
            ks.append(torch.from_numpy(flat.stage[g]))
            taus.append(torch.from_numpy(flat.tau[g]))
            phis.append(torch.from_numpy(flat.phi[g]))
        x, st, k = torch.cat(xs), torch.cat(sts), torch.cat(ks)
        st = st + torch.randn_like(st) * 0.002 * ss
        logits, tau_p = model(x, st)
        ce = F.cross_entropy(logits, k)
        l_tau = F.mse_loss(tau_p.gather(1, k[:, None])[:, 0], torch.cat(taus))
        phi_soft = tr.soft_progress_phi(logits, tau_p, P, a)
        l_phi = F.mse_loss(phi_soft, torch.cat(phis))
        sp = sum(((p - q) ** 2).sum() for p, q in zip(params, w0))
        loss = ce + 5.0 * l_tau + 20.0 * l_phi + args.l2sp * sp
        opt.zero_grad()
        loss.backward()
        if coord_w is not None and coord_w.grad is not None:
            coord_w.grad[:, 3:] = 0  # the CoordConv position channels stay as they were
        opt.step()
        if args.ema > 0:
            with torch.no_grad():
                for e, p in zip(ema, params):
                    e.mul_(args.ema).add_(p.detach(), alpha=1.0 - args.ema)
        if progress:
            print(f"@progress {step + 1} {args.steps} {float(loss.detach()):.5f}", flush=True)
    secs = time.time() - t1
    if args.ema > 0:
        with torch.no_grad():
            for e, p in zip(ema, params):
                p.copy_(e)
    for p in model.parameters():
        p.requires_grad_(True)
    return secs


def main(argv=None, prog=None):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the stage_progress manifest to adapt")
    ap.add_argument("--data", required=True, help="the demonstrations `stagewise adapt` prepared")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32,
                    help="windows per step (32: as good as 64 on one demonstration, at half the time)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--l2sp", type=float, default=0.01, help="weight of sum (w - w0)^2")
    ap.add_argument("--trainable", default="enc.conv",
                    help="comma-separated parameter-name prefixes to fine-tune (enc.conv: the encoder's "
                         "convolutions; enc.conv.0: the first; empty: every parameter)")
    ap.add_argument("--balance-stages", type=int, default=0, choices=[0, 1, 2],
                    help="0: every frame equally likely; 1: every stage equally likely; 2: each stage as likely as "
                         "its share in the model's stage proportions (a demonstration whose release stage lasts "
                         "half the episode counts as one that lasts the usual share)")
    ap.add_argument("--ema", type=float, default=0.99,
                    help="export an exponential moving average of the fine-tuned weights with this decay "
                         "(0: the last weights); averaging lowers the run-to-run spread of one-demo adaptation")
    ap.add_argument("--freeze-coords", type=int, default=1, choices=[0, 1],
                    help="1: keep the first convolution's weights on the CoordConv position channels (a colour "
                         "change is the same everywhere; one demonstration's layout should not be learnt)")
    ap.add_argument("--view-dropout", type=float, default=0.15)
    ap.add_argument("--shift", type=int, default=2)
    ap.add_argument("--colour", type=float, default=0.8, help="colour augmentation strength on the demonstrations")
    ap.add_argument("--replay-data", default="",
                    help="episodes of the original task (prepared like the demonstrations) mixed into every batch")
    ap.add_argument("--replay-frac", type=float, default=0.25, help="share of each batch drawn from --replay-data")
    ap.add_argument("--replay-colour", type=float, default=0.8, help="colour augmentation on the replayed frames")
    ap.add_argument("--replay-recolour", type=int, default=1, choices=[0, 1],
                    help="1: repaint the replayed frames in the demonstrations' colours first (colour_transfer: a "
                         "large colour that the original task shows and the demonstrations do not, such as the "
                         "table, becomes the demonstrations' large new colour; the identity when there is none), so "
                         "that the replay shows the variant's look in the original task's many layouts, labelled")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    t0 = time.time()
    model, man, arch = load_progress_net(args.model)
    with open(os.path.join(args.data, "meta.json")) as f:
        meta = json.load(f)
    proportions = [float(p) for p in man["stages"]["proportions"]]
    s = sum(proportions)
    proportions = [p / s for p in proportions]
    demo = load_flat(args.data, man, proportions)
    eps = demo.episodes
    V, H, W = demo.images.shape[1], demo.images.shape[2], demo.images.shape[3]
    Fr, stride = man["frames"], man["stride"]
    P = torch.tensor(np.concatenate([[0.0], np.cumsum(proportions)[:-1]]), dtype=torch.float32)
    a = torch.tensor(proportions, dtype=torch.float32)
    print(f"adapting {args.model} ({V} views of {W}x{H}, state {', '.join(man['state_names'])}) on {len(eps)} "
          f"demonstration(s), {demo.n} frames; loaded in {time.time() - t0:.1f}s", flush=True)

    for line in atypical_demos(demo, proportions, man["stages"]["names"]):
        print(f"warning: {line}", flush=True)
    readout = man["stages"].get("progress", "hard")  # the adapted model is read as the original was
    margs = argparse.Namespace(frames=Fr, stride=stride, progress=readout)
    before = td.metrics(model, demo, margs, P, a)
    print(f"before: demonstrations VOC {before['voc']}, MAE {before['mae']:.4f}, stage accuracy "
          f"{before['stage_acc']:.3f}", flush=True)

    replay = None
    if args.replay_data:
        replay = load_flat(args.replay_data, man, proportions)
        print(f"replaying {len(replay.episodes)} episode(s) of the original task ({replay.n} frames), "
              f"{args.replay_frac:.0%} of each batch", flush=True)
        if args.replay_recolour:
            t2 = time.time()
            lut, moved = colour_transfer(replay.images, demo.images, seed=args.seed)
            replay.images = apply_colour_table(lut, replay.images)
            said = "; ".join(f"rgb{c} ({w:.0%} of the pixels left over) -> rgb{t}" for c, w, t in moved)
            print(f"replayed frames repainted in the demonstrations' colours ({time.time() - t2:.1f}s): "
                  f"{said or 'no large colour differs, left as they are'}", flush=True)
    secs = finetune(model, demo, P, a, args, rng, man["stride"], replay=replay, progress=True)
    after = td.metrics(model, demo, margs, P, a)
    print(f"after {args.steps} steps ({secs:.0f}s): demonstrations VOC {after['voc']}, MAE {after['mae']:.4f}, "
          f"stage accuracy {after['stage_acc']:.3f}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    stem = args.name
    onnx_path = os.path.join(args.out, stem + ".onnx")
    example = (torch.zeros(1, V, Fr, 3, H, W), torch.from_numpy(demo.state[:1]))
    tr.export(model, example, onnx_path, ["images", "state"], ["stage_logits", "tau"])
    tr.check_onnx(onnx_path, example, model)
    g = np.linspace(0, demo.n - 1, 8).astype(np.int64)
    batch = (tr.to_tensor(demo.window(g, Fr, stride)), torch.from_numpy(demo.state[g]))
    parts = tr.export_parts(model, onnx_path, batch, os.path.join(args.out, stem))
    desc = (
        f"{os.path.basename(args.model)} adapted by `stagewise adapt` (stagewise.training.adapt) on {len(eps)} "
        f"annotated demonstration(s) of {', '.join(sorted(set(e['dataset'] for e in eps)))}: {args.steps} steps, "
        f"lr {args.lr}, L2-SP {args.l2sp} ({secs:.0f} s on {args.threads} CPU threads). Original: "
        + man.get("description", "")
    )
    tr.write_manifest(
        os.path.join(args.out, stem + ".toml"), "stage_progress", stem + ".onnx", man["views"], Fr, stride,
        man["state_names"], H, W, [("stage_logits", "stage_logits"), ("tau", "tau")],
        (list(man["stages"]["names"]), [float(p) for p in man["stages"]["proportions"]]), desc, parts,
        readout=readout,
    )
    record = {
        "kind": "progress",
        "trained_by": "stagewise adapt",
        "adapted_from": os.path.abspath(args.model),
        "demonstrations": [{"dataset": e["dataset"], "episode_index": e["episode_index"]} for e in eps],
        "architecture": arch,
        "train_seconds": round(secs, 1),
        "onnx_bytes": os.path.getsize(onnx_path),
        "args": vars(args),
        "command": meta.get("command"),
        "validation": {"demonstrations_before": before, "demonstrations_after": after},
    }
    with open(os.path.join(args.out, stem + ".train.json"), "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {onnx_path}, {stem}.encoder.onnx + {stem}.head.onnx, {stem}.toml, {stem}.train.json; adapted in "
          f"{secs:.0f}s", flush=True)


if __name__ == "__main__":
    main()
