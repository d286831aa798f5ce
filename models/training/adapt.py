"""Adapts a trained stage-progress model (train.py's ProgressNet, as ONNX) to a task variant from a few annotated
demonstrations: `stagewise adapt` prepares the demonstrations like `stagewise train` does (frames, state and
annotation targets as numpy arrays, at the model's views, state fields, image size and stages) and runs this.

    .venv/bin/python models/training/adapt.py --model M.toml --data DIR --out OUT --name NAME

The network is rebuilt from the ONNX file's weights, then fine-tuned on the demonstrations with train.py's loss
and augmentation (shifts, view dropout, colour, brightness), a small learning rate and an L2-SP penalty
(`--l2sp`: lambda * sum (w - w0)^2 towards the weights it started from), which keeps what the model knew about
the original task (Li, Grandvalet & Davoine 2018, "Explicit inductive bias for transfer learning"). Exported
like train.py: single graph, two-part form (checked), manifest (the original's views, window, state, stages and
proportions) and <name>.train.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tomllib

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train as tr  # noqa: E402
import train_dataset as td  # noqa: E402


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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the stage_progress manifest to adapt")
    ap.add_argument("--data", required=True, help="the demonstrations `stagewise adapt` prepared")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--l2sp", type=float, default=1.0, help="weight of sum (w - w0)^2")
    ap.add_argument("--trainable", default="",
                    help="comma-separated parameter-name prefixes to fine-tune (e.g. enc.conv.0 = the first conv); "
                         "default: every parameter")
    ap.add_argument("--balance-stages", type=int, default=0, choices=[0, 1],
                    help="1: sample frames so that every stage is equally likely (the short grasp and release "
                         "stages are where a variant confuses a model most)")
    ap.add_argument("--ema", type=float, default=0.99,
                    help="export an exponential moving average of the fine-tuned weights with this decay "
                         "(0: the last weights); averaging lowers the run-to-run spread of one-demo adaptation")
    ap.add_argument("--view-dropout", type=float, default=0.15)
    ap.add_argument("--shift", type=int, default=2)
    ap.add_argument("--colour", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    t0 = time.time()
    model, man, arch = load_progress_net(args.model)
    with open(os.path.join(args.data, "meta.json")) as f:
        meta = json.load(f)
    if list(meta["stage_names"]) != list(man["stages"]["names"]):
        raise SystemExit(f"the demonstrations' stages {meta['stage_names']} are not the model's "
                         f"{man['stages']['names']}")
    frames = np.load(os.path.join(args.data, "frames.npy"), mmap_mode="r")
    state = np.load(os.path.join(args.data, "state.npy"))
    stage = np.load(os.path.join(args.data, "stage.npy"))
    tau = np.load(os.path.join(args.data, "tau.npy"))
    proportions = [float(p) for p in man["stages"]["proportions"]]
    s = sum(proportions)
    proportions = [p / s for p in proportions]
    eps = meta["episodes"]
    demo = td.AnnotatedFlat(frames, state, stage, tau, eps, proportions)
    V, H, W = demo.images.shape[1], demo.images.shape[2], demo.images.shape[3]
    Fr, stride = man["frames"], man["stride"]
    P = torch.tensor(np.concatenate([[0.0], np.cumsum(proportions)[:-1]]), dtype=torch.float32)
    a = torch.tensor(proportions, dtype=torch.float32)
    print(f"adapting {args.model} ({V} views of {W}x{H}, state {', '.join(man['state_names'])}) on {len(eps)} "
          f"demonstration(s), {demo.n} frames; loaded in {time.time() - t0:.1f}s", flush=True)

    margs = argparse.Namespace(frames=Fr, stride=stride)
    before = td.metrics(model, demo, margs, P, a)
    print(f"before: demonstrations VOC {before['voc']}, MAE {before['mae']:.4f}, stage accuracy "
          f"{before['stage_acc']:.3f}", flush=True)

    prefixes = [p for p in args.trainable.split(",") if p]
    params = []
    for n, p in model.named_parameters():
        p.requires_grad_(not prefixes or any(n.startswith(x) for x in prefixes))
        if p.requires_grad:
            params.append(p)
    if not params:
        raise SystemExit(f"--trainable {args.trainable!r} matches no parameter of the model")
    w0 = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=max(args.steps, 1))
    ss = torch.from_numpy(np.asarray(model.s_std.numpy(), dtype=np.float32))
    t1 = time.time()
    ema = [p.detach().clone() for p in params]
    counts = np.bincount(demo.stage, minlength=len(proportions)).astype(np.float64)
    sample_p = 1.0 / counts[demo.stage] if args.balance_stages else np.ones(demo.n)
    sample_p /= sample_p.sum()
    for step in range(args.steps):
        model.train()
        g = rng.choice(demo.n, size=args.batch, p=sample_p)
        x = tr.augment(tr.to_tensor(demo.window(g, Fr, stride)), args.shift, args.view_dropout, rng, args.colour)
        st = torch.from_numpy(demo.state[g])
        st = st + torch.randn_like(st) * 0.002 * ss
        k = torch.from_numpy(demo.stage[g])
        logits, tau_p = model(x, st)
        ce = F.cross_entropy(logits, k)
        l_tau = F.mse_loss(tau_p.gather(1, k[:, None])[:, 0], torch.from_numpy(demo.tau[g]))
        phi_soft = (logits.softmax(1) * (P[None] + a[None] * tau_p)).sum(1)
        l_phi = F.mse_loss(phi_soft, torch.from_numpy(demo.phi[g]))
        sp = sum(((p - q) ** 2).sum() for p, q in zip(params, w0))
        loss = ce + 5.0 * l_tau + 20.0 * l_phi + args.l2sp * sp
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if args.ema > 0:
            with torch.no_grad():
                for e, p in zip(ema, params):
                    e.mul_(args.ema).add_(p.detach(), alpha=1.0 - args.ema)
        print(f"@progress {step + 1} {args.steps} {float(loss.detach()):.5f}", flush=True)
    secs = time.time() - t1
    if args.ema > 0:
        with torch.no_grad():
            for e, p in zip(ema, params):
                p.copy_(e)
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
        f"{os.path.basename(args.model)} adapted by `stagewise adapt` (models/training/adapt.py) on {len(eps)} "
        f"annotated demonstration(s) of {', '.join(sorted(set(e['dataset'] for e in eps)))}: {args.steps} steps, "
        f"lr {args.lr}, L2-SP {args.l2sp} ({secs:.0f} s on {args.threads} CPU threads). Original: "
        + man.get("description", "")
    )
    tr.write_manifest(
        os.path.join(args.out, stem + ".toml"), "stage_progress", stem + ".onnx", man["views"], Fr, stride,
        man["state_names"], H, W, [("stage_logits", "stage_logits"), ("tau", "tau")],
        (list(man["stages"]["names"]), [float(p) for p in man["stages"]["proportions"]]), desc, parts,
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
