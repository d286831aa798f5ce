"""Screening harness of docs/own-task.md step 7: adapt.py's `finetune` in process on the same data as
benches/adapt_table.sh, every held-out episode scored (VOC per episode, MAE against the annotations),
no export. One JSON line per seed on stdout (results.jsonl here holds the runs the docs cite, by tag).

Prepare the arrays once (the adapt CLI writes them with --keep-data; one step of training is thrown away):
  for d in demos-40 heldout-variant-24 heldout-original-24 replay-original; do
    stagewise adapt --model models/pick-place/pick-place-progress.toml --demo data/adapt/$d \
      --out $PREP/$d --name adx-progress --steps 1 --keep-data --force
  done
(data/adapt/* from adapt_table.sh; replay-original: `stagewise record --task pick-place --episodes 10
--degraded 0 --seed 720000 --width 32 --height 32`). Then, e.g.:
  nice -n 10 .venv/bin/python benches/results/adapt_screening/sweep.py --prep $PREP --n 1 --batch 32 --tag x

results.jsonl: tags base, c0, rep5, bal2 ran before the retry rule, on demonstrations 0, 10, 20 (seed x 10) with
torch.optim's AdamW and batch 64 (the defaults of that time); new-*, fc-* on the eligible demonstrations 10s..
(as adapt_table.sh), batch 64 unless --batch is in the tag; rc-*, norc-* (--batch 32 --freeze-coords 1 --replay 9:
the 9 annotated of the 10 replay-original episodes; rc: --recolour 1, norc: 0; f: --replay-frac) ran with a copy of
adapt.colour_transfer made before it went into adapt.py (the same steps; its pixel sample drawn with seed 0). A run's "secs" is its fine-tuning wall time on the
shared machine (some overlapped with other short jobs of this study).
"""
import argparse, copy, json, os, sys, time
import numpy as np, torch
from stagewise.training import adapt, train_dataset as td

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=1)
ap.add_argument("--seeds", default="0,1,2")
ap.add_argument("--steps", type=int, default=1000)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--lr", type=float, default=2e-3)
ap.add_argument("--l2sp", type=float, default=0.01)
ap.add_argument("--trainable", default="enc.conv")
ap.add_argument("--balance-stages", type=int, default=0)
ap.add_argument("--ema", type=float, default=0.99)
ap.add_argument("--view-dropout", type=float, default=0.15)
ap.add_argument("--freeze-coords", type=int, default=0)
ap.add_argument("--shift", type=int, default=2)
ap.add_argument("--colour", type=float, default=0.8)
ap.add_argument("--replay", type=int, default=0, help="replay episodes (0: none)")
ap.add_argument("--replay-frac", type=float, default=0.25)
ap.add_argument("--replay-colour", type=float, default=0.8)
ap.add_argument("--demo-stride", type=int, default=10)
ap.add_argument("--tag", default="")
ap.add_argument("--recolour", type=int, default=0, help="1: replayed frames repainted in the demonstration's colours")
ap.add_argument("--replay-name", default="replay-original")
ap.add_argument("--demos", default="demos-40")
ap.add_argument("--heldout-variant", default="heldout-variant-24")
ap.add_argument("--heldout-original", default="heldout-original-24")
ap.add_argument("--prep", default="/tmp/adx", help="the prepared arrays (see above)")
args = ap.parse_args()
torch.set_num_threads(1)
M = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../models/pick-place/pick-place-progress.toml")
base, man, _ = adapt.load_progress_net(M)
prop = [float(p) for p in man["stages"]["proportions"]]; prop = [p / sum(prop) for p in prop]
P = torch.tensor(np.concatenate([[0.0], np.cumsum(prop)[:-1]]), dtype=torch.float32)
a = torch.tensor(prop, dtype=torch.float32)
def flat(name, sel=None):
    d = [x for x in os.listdir(f"{args.prep}/{name}") if x.endswith(".adapt-data")][0]
    d = f"{args.prep}/{name}/{d}"
    meta = json.load(open(d + "/meta.json"))
    eps = meta["episodes"] if sel is None else [meta["episodes"][i] for i in sel]
    return td.AnnotatedFlat(np.load(d + "/frames.npy", mmap_mode="r"), np.load(d + "/state.npy"),
                            np.load(d + "/stage.npy"), np.load(d + "/tau.npy"), eps, prop)
hv, ho = flat(args.heldout_variant), flat(args.heldout_original)
_all = flat(args.demos)
clean = [i for i, e in enumerate(_all.episodes) if e.get("success") is not False and
         (np.bincount(_all.stage[_all.ep == i], minlength=len(prop)) / e["length"] / np.asarray(prop)).max() <= 3]
rep0 = flat(args.replay_name, list(range(args.replay))) if args.replay else None
def score(model, f):
    phi, _ = td.predict(model, f, man["frames"], man["stride"], P, a)
    vocs = [td.spearman(phi[f.ep == i]) for i in range(len(f.episodes))]
    return {"voc": float(np.mean(vocs)), "mae": float(np.abs(phi - f.phi).mean()), "vocs": [round(v, 3) for v in vocs]}
for seed in [int(s) for s in args.seeds.split(",")]:
    sel = clean[seed * args.demo_stride: seed * args.demo_stride + args.n]
    demo = flat(args.demos, sel)
    rep = rep0
    if rep0 is not None and args.recolour:  # as adapt.py --replay-recolour 1
        rep = copy.copy(rep0)
        lut, moved = adapt.colour_transfer(rep0.images, demo.images, seed=seed)
        rep.images = adapt.apply_colour_table(lut, rep0.images)
        print("recolour", moved, file=sys.stderr, flush=True)
    model = copy.deepcopy(base)
    rng = np.random.default_rng(seed); torch.manual_seed(seed)
    secs = adapt.finetune(model, demo, P, a, args, rng, man["stride"], replay=rep)
    v, o = score(model, hv), score(model, ho)
    ok = v["voc"] >= 0.95 and v["mae"] <= 0.06 and o["voc"] >= 0.95
    print(json.dumps({"tag": args.tag, "n": args.n, "seed": seed, "secs": round(secs), "v_voc": round(v["voc"], 4),
                      "v_mae": round(v["mae"], 4), "o_voc": round(o["voc"], 4), "o_mae": round(o["mae"], 4),
                      "ok": ok, "demos": [_all.episodes[i]["episode_index"] for i in sel], "v_vocs": v["vocs"], "o_min": min(o["vocs"])}), flush=True)
