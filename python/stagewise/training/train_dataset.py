"""Trains a stage-aware progress model from a training set that `stagewise train` prepared from any LeRobot v3
dataset (image or video cameras, any views and state fields, SARM stage annotations), and exports it like
train.py does: single graph, two-part form (encoder + head, checked against the single graph), manifest and
training record. Run it through `stagewise train`; it is not meant to be called by hand.

    .venv/bin/python -m stagewise.training train-dataset --data DIR --out models/my-task --name my-task-progress

DIR (written by `stagewise train`): frames.npy uint8 [G, V, H, W, 3] (every used frame of every used episode, in
episode order, resized to the model's size), state.npy f32 [G, S] (the chosen proprioception, in `state_names`
order), stage.npy int64 [G] and tau.npy f32 [G] (the targets: stage k of frame t and DESIGN.md's
tau = clip((t - s_k) / (e_k - s_k), 0, 1), from the episode's annotation), meta.json (views, state and stage names,
proportions, and per episode its offset, length, split and success).

The network, augmentation, loss and export are train.py's (`ProgressNet`, `augment`, `train_progress`, `export`,
`export_parts`, `write_manifest`): only the data source differs (targets from annotations, never from simulator
columns). Progress lines for `stagewise train`'s bar go to stdout as `@progress <step> <steps> <loss>`.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from . import train as tr


def failed_targets(stage, tau, episodes, mode: str):
    """(tau, known) with `--failed-tau` applied to the failed episodes (`success` false). "linear" leaves SARM's
    target (the unfinished last stage rises linearly to 1 at the episode's end, which on a failure that wanders
    reads as a clock); "zero" holds the last stage's tau at 0; "mask" leaves it unknown (known = False: no tau or
    progress loss there, only the stage head's), as the labels say that the episode entered the stage, not how far
    it got in it. Only the stage starts and the success flag decide it: labels a person gives."""
    tau = np.array(tau, dtype=np.float32)
    known = np.ones(len(tau), dtype=bool)
    if mode == "linear":
        return tau, known
    for e in episodes:
        if e.get("success") is not False or e["length"] == 0:
            continue
        idx = np.arange(e["offset"], e["offset"] + e["length"])
        unfinished = idx[stage[idx] == stage[idx[-1]]]
        tau[unfinished] = 0.0
        if mode == "mask":
            known[unfinished] = False
    return tau, known


def tau_only_from(known, episodes, datasets: list[str]):
    """`known` with every frame of the episodes outside `datasets` (`--tau-datasets`) unknown but a successful
    episode's last frame (progress 1 by its outcome): those episodes train the stage head, and their tau targets,
    SARM's linear rise in time, are not used (a learner's rollout, even a successful one, pauses and wobbles, and
    a rise in time would read as a clock). Empty `datasets`: `known` unchanged."""
    if not datasets:
        return known
    keep = {os.path.abspath(d) for d in datasets}
    known = known.copy()
    for e in episodes:
        if os.path.abspath(e.get("dataset", "")) in keep or e["length"] == 0:
            continue
        known[e["offset"]:e["offset"] + e["length"]] = False
        if e.get("success") is True:
            known[e["offset"] + e["length"] - 1] = True
    return known


class AnnotatedFlat(tr.Flat):
    """train.Flat's interface (window gathering, targets) over the frames of some episodes of the prepared set."""

    def __init__(self, frames, state, stage, tau, episodes, proportions, known=None):
        P = np.concatenate([[0.0], np.cumsum(proportions)[:-1]])
        a = np.asarray(proportions)
        idx = np.concatenate([np.arange(e["offset"], e["offset"] + e["length"]) for e in episodes])
        self.images = np.ascontiguousarray(frames[idx])
        self.state = np.ascontiguousarray(state[idx]).astype(np.float32)
        self.stage = np.asarray(stage[idx], dtype=np.int64)
        self.tau = np.asarray(tau[idx], dtype=np.float32)
        # frames whose tau the labels do not give (--failed-tau mask, --tau-datasets): train.py leaves them out of
        # the tau, progress and step-change losses
        self.tau_known = None if known is None or known.all() else np.asarray(known[idx], dtype=bool)
        self.phi = (P[self.stage] + a[self.stage] * self.tau).astype(np.float32)
        # The reference progress for metrics is the annotation's (no simulator oracle here).
        self.phi_gt = self.phi
        starts, ends, succ, ep_id = [], [], [], []
        off = 0
        for i, e in enumerate(episodes):
            T = e["length"]
            starts.append(np.full(T, off))
            ends.append(np.full(T, off + T))
            succ.append(np.full(T, e.get("success") is not False))
            ep_id.append(np.full(T, i))
            off += T
        self.start = np.concatenate(starts)
        self.end = np.concatenate(ends)
        self.success = np.concatenate(succ)
        self.ep = np.concatenate(ep_id)
        self.n = len(self.stage)
        self.episodes = episodes


def ranks(x):
    """Average ranks (ties share their mean rank), as Spearman's correlation uses them."""
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    xs = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2.0
        i = j + 1
    return r


def spearman(x):
    """Spearman correlation of x with time (VOC, DESIGN.md); 0 for a constant sequence."""
    if len(x) < 2:
        return 0.0
    rx, rt = ranks(np.asarray(x, dtype=np.float64)), np.arange(len(x), dtype=np.float64)
    if rx.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, rt)[0, 1])


def metrics(model, flat, args, P, a):
    phi, k = tr.predict(model, flat, args.frames, args.stride, P, a, readout=args.progress)
    phi_b, _ = tr.predict(model, flat, args.frames, args.stride, P, a, blank=True, readout=args.progress)
    vocs = [spearman(phi[flat.ep == i]) for i, e in enumerate(flat.episodes) if e.get("success") is not False]
    # progress is compared where the labels give it (not in a failure's unfinished stage under --failed-tau mask)
    m = np.ones(flat.n, dtype=bool) if flat.tau_known is None or not flat.tau_known.any() else flat.tau_known
    mae = float(np.abs(phi - flat.phi_gt)[m].mean())
    mae_b = float(np.abs(phi_b - flat.phi_gt)[m].mean())
    return {
        "episodes": len(flat.episodes),
        "frames": int(flat.n),
        "voc": round(float(np.mean(vocs)), 4) if vocs else None,
        "voc_min": round(float(np.min(vocs)), 4) if vocs else None,
        "mae": round(mae, 4),
        "stage_acc": round(float((k == flat.stage).mean()), 4),
        "mae_views_blanked": round(mae_b, 4),
    }


def main(argv=None, prog=None):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the directory `stagewise train` prepared")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True, help="file stem of the model")
    ap.add_argument("--frames", type=int, default=2)
    ap.add_argument("--stride", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--samples-per-epoch", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--view-dropout", type=float, default=0.15)
    ap.add_argument("--shift", type=int, default=2)
    ap.add_argument("--balance-progress", type=int, default=0)
    ap.add_argument("--state-dropout", type=float, default=0.0)
    ap.add_argument("--step-consistency", type=float, default=0.0,
                    help="weight of the per-step change loss (train.py --step-consistency; 0: off)")
    ap.add_argument("--step-consistency-max", type=float, default=1.0,
                    help="target changes above this are left out of that loss (train.py; default 1: none)")
    ap.add_argument("--failed-tau", choices=["linear", "zero", "mask"], default="linear",
                    help="the target within a failed episode's last (unfinished) stage: SARM's linear rise "
                         "(default), 0, or none (the stage head only; failed_targets)")
    ap.add_argument("--tau-datasets", default="", help="comma-separated datasets (as given to `stagewise train "
                    "--dataset`) whose episodes give tau targets; the others' train the stage head only, and a "
                    "success's last frame (tau_only_from). Default: all")
    ap.add_argument("--progress", choices=["hard", "soft"], default="soft",
                    help="the readout the manifest serves (DESIGN.md): soft (every stage's progress weighted by its "
                         "probability: what the losses train; default) or hard (the argmax stage's)")
    ap.add_argument("--enc-min-size", type=int, default=4)
    ap.add_argument("--coord", type=int, default=1, choices=[0, 1])
    ap.add_argument("--colour", type=float, default=0.8)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--enc-channels", type=lambda t: tuple(int(c) for c in t.split(",")), default=tr.ENC_CHANNELS)
    ap.add_argument("--description", default="", help="added to the manifest's description")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    t0 = time.time()
    with open(os.path.join(args.data, "meta.json")) as f:
        meta = json.load(f)
    frames = np.load(os.path.join(args.data, "frames.npy"), mmap_mode="r")
    state = np.load(os.path.join(args.data, "state.npy"))
    stage = np.load(os.path.join(args.data, "stage.npy"))
    tau, known = failed_targets(stage, np.load(os.path.join(args.data, "tau.npy")), meta["episodes"],
                                args.failed_tau)
    tau_sets = [d for d in args.tau_datasets.split(",") if d]
    unknown = [d for d in tau_sets if os.path.abspath(d) not in {os.path.abspath(x) for x in meta["datasets"]}]
    if unknown:
        raise SystemExit(f"--tau-datasets: {', '.join(unknown)} not among the training datasets "
                         f"({', '.join(meta['datasets'])})")
    known = tau_only_from(known, meta["episodes"], tau_sets)
    proportions = [float(p) for p in meta["proportions"]]
    names = list(meta["stage_names"])
    train_eps = [e for e in meta["episodes"] if e["split"] == "train"]
    val_eps = [e for e in meta["episodes"] if e["split"] == "val"]
    if not train_eps:
        raise SystemExit(f"{args.data}/meta.json: no training episodes")
    train = AnnotatedFlat(frames, state, stage, tau, train_eps, proportions, known)
    val = AnnotatedFlat(frames, state, stage, tau, val_eps, proportions, known) if val_eps else None
    V, H, W = train.images.shape[1], train.images.shape[2], train.images.shape[3]
    print(f"loaded {len(train_eps)} training episodes ({train.n} frames), {len(val_eps)} validation episodes "
          f"({val.n if val else 0} frames), {V} views of {W}x{H}, state {', '.join(meta['state_names'])} "
          f"in {time.time() - t0:.1f}s", flush=True)

    def on_step(step, steps, loss):
        print(f"@progress {step} {steps} {loss:.5f}", flush=True)

    model, secs = tr.train_progress(args, train, val, proportions, names, on_step=on_step)

    P = torch.tensor(np.concatenate([[0.0], np.cumsum(proportions)[:-1]]), dtype=torch.float32)
    a = torch.tensor(proportions, dtype=torch.float32)
    report = {"train": metrics(model, train, args, P, a)}
    if val is not None:
        report["val"] = metrics(model, val, args, P, a)
    for split, m in report.items():
        blank = m["mae_views_blanked"] / max(m["mae"], 1e-9)
        print(f"{split}: {m['episodes']} episodes, VOC {m['voc']}, progress MAE {m['mae']:.4f}, stage accuracy "
              f"{m['stage_acc']:.3f}; every view blanked: MAE {m['mae_views_blanked']:.4f} ({blank:.1f}x)",
              flush=True)

    os.makedirs(args.out, exist_ok=True)
    stem = args.name
    onnx_path = os.path.join(args.out, stem + ".onnx")
    example = (torch.zeros(1, V, args.frames, 3, H, W), torch.from_numpy(train.state[:1]))
    tr.export(model, example, onnx_path, ["images", "state"], ["stage_logits", "tau"])
    tr.check_onnx(onnx_path, example, model)
    src = val if val is not None else train
    g = np.linspace(0, src.n - 1, 8).astype(np.int64)
    batch = (tr.to_tensor(src.window(g, args.frames, args.stride)), torch.from_numpy(src.state[g]))
    parts = tr.export_parts(model, onnx_path, batch, os.path.join(args.out, stem))
    datasets = ", ".join(meta["datasets"])
    desc = (
        f"Stage-aware multi-view progress model trained by `stagewise train` (stagewise.training.train_dataset) on "
        f"{len(train_eps)} episodes of {datasets} for {args.epochs} epochs x {args.samples_per_epoch} samples "
        f"({secs:.0f} s on {args.threads} CPU threads). Targets from the SARM stage annotations (DESIGN.md: "
        f"tau = clip((t - s_k) / (e_k - s_k), 0, 1)). Views {', '.join(meta['views'])} (dataset keys "
        f"{', '.join(meta['view_keys'])}); state {', '.join(meta['state_names'])}. A missing camera: feed a "
        f"mean-colour frame." + (f" {args.description}" if args.description else "")
    )
    tr.write_manifest(
        os.path.join(args.out, stem + ".toml"), "stage_progress", stem + ".onnx", meta["views"], args.frames,
        args.stride, meta["state_names"], H, W, [("stage_logits", "stage_logits"), ("tau", "tau")],
        (names, proportions), desc, parts, readout=args.progress,
    )
    size = os.path.getsize(onnx_path)
    record = {
        "kind": "progress",
        "trained_by": "stagewise train",
        "datasets": meta["datasets"],
        "views": meta["views"],
        "view_keys": meta["view_keys"],
        "state_names": meta["state_names"],
        "stage_names": names,
        "proportions": proportions,
        "episodes": {"train": len(train_eps), "val": len(val_eps), "skipped": meta.get("skipped", [])},
        "train_seconds": round(secs, 1),
        "onnx_bytes": size,
        "args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()},
        "command": meta.get("command"),
        "validation": report,
    }
    with open(os.path.join(args.out, stem + ".train.json"), "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {onnx_path} ({size / 1e6:.2f} MB), {stem}.encoder.onnx + {stem}.head.onnx, {stem}.toml, "
          f"{stem}.train.json; trained in {secs:.0f}s", flush=True)


if __name__ == "__main__":
    main()
