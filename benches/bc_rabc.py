#!/usr/bin/env python3
"""The behaviour-cloning result: does reward-aligned BC (RA-BC) beat vanilla BC on a mixed dataset?

1. `stagewise record`: pick-place demonstrations, most of them degraded (the scripted expert with the failure and
   imperfection presets: missed grasps, wrong placements, freezes, blocks carried off the table, noise, pauses,
   regressions) — fresh seeds, none of them seen by the reward model.
2. `stagewise label` with the shipped reward model (models/pick-place/pick-place-progress.toml): per-frame progress
   in sarm_progress.parquet and core's RA-BC weights for the chosen chunk size (the CSV the command writes).
3. A small PyTorch MLP on the state (14 values -> 4 actions) trained twice per training seed on the same data,
   same steps and same seed: vanilla (every frame weight 1) and RA-BC (LeRobot's per-sample weighted loss,
   weights normalised per batch as `w * B / (sum w + eps)`).
4. Each policy exported to ONNX (`kind = "policy"` manifest) and rolled out by `stagewise eval --policy` in the
   simulator on fresh seeds (3000000..); success = the simulator's success (block on the target).

    .venv/bin/python benches/bc_rabc.py [--exe target/release/stagewise] [--episodes 200] [--degraded 0.75]

`--clean` runs the other benchmark instead: plain BC on clean expert demonstrations (issue 18, part 1), the recipe
that makes a state policy succeed (relative-position features inside the ONNX graph, the gripper as a binary
classification that is snapped to +-1, 1000 demonstrations, MLP 3x256, 20000 steps); it writes
benches/results/bc_clean.{md,json,png} and the policies (best one: models/policies/pick-place-bc/):

    nice .venv/bin/python benches/bc_rabc.py --clean [--train-seeds 0,1,2] [--jobs 2]

Its switches reproduce the tries in benches/bc_rabc.md (`--features raw`, `--gripper mse`, `--episodes 200`, ...).

Writes benches/bc_rabc.md, benches/bc_rabc.json and benches/bc_rabc.png (success rates per arm and training
seed) and benches/bc_rabc_progress.png (labelled progress and RA-BC weights of one degraded episode). Needs
torch (models/training/requirements.txt) and pillow. A benchmark, not a CI test: it takes minutes.
"""
import argparse
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[1]
MODEL = "models/pick-place/pick-place-progress.toml"
CLEAN_MARKER = "<!-- clean BC (benches/bc_rabc.py --clean); kept when the RA-BC part is rewritten -->"


def sh(*cmd, quiet=True):
    t0 = time.perf_counter()
    out = subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True, capture_output=True, text=True)
    if not quiet:
        print(out.stdout, end="")
    return out.stdout, time.perf_counter() - t0


def load(ds: Path, weights_csv: Path):
    cols = ["index", "episode_index", "frame_index", "observation.state", "action", "degraded"]
    t = pa.concat_tables([pq.read_table(p, columns=cols) for p in sorted((ds / "data").glob("*/*.parquet"))])
    idx = t.column("index").to_numpy()
    ep = t.column("episode_index").to_numpy()
    fr = t.column("frame_index").to_numpy()
    state = np.stack(t.column("observation.state").to_numpy(zero_copy_only=False)).astype(np.float32)
    action = np.stack(t.column("action").to_numpy(zero_copy_only=False)).astype(np.float32)
    degraded = t.column("degraded").to_numpy()
    with open(weights_csv) as f:
        w = {int(r["index"]): (float(r["weight"]), float(r["progress"])) for r in csv.DictReader(f)}
    weight = np.array([w[int(i)][0] for i in idx], dtype=np.float32)
    progress = np.array([w[int(i)][1] for i in idx], dtype=np.float32)
    # The last frame of an episode has no action (the recorder stores zeros there): leave it out.
    last = np.zeros(len(idx), dtype=bool)
    for e in np.unique(ep):
        rows = np.flatnonzero(ep == e)
        last[rows[np.argmax(fr[rows])]] = True
    keep = ~last
    return {
        "state": state[keep], "action": action[keep], "weight": weight[keep], "episode": ep[keep],
        "frame": fr[keep], "degraded": degraded[keep], "progress": progress[keep],
    }


class Policy(torch.nn.Module):
    def __init__(self, mean, std, hidden):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean))
        self.register_buffer("std", torch.as_tensor(std))
        self.net = torch.nn.Sequential(
            torch.nn.Linear(len(mean), hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, 4),
        )

    def forward(self, state):
        return torch.clamp(self.net((state - self.mean) / self.std), -1.0, 1.0)


def train(data, weighted, seed, steps, batch, hidden, lr):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    mean = data["state"].mean(0)
    std = data["state"].std(0) + 1e-3
    model = Policy(mean, std, hidden)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    s = torch.as_tensor(data["state"])
    a = torch.as_tensor(data["action"])
    w = torch.as_tensor(data["weight"])
    n = len(s)
    for _ in range(steps):
        i = torch.as_tensor(rng.integers(0, n, batch))
        per = ((model.net((s[i] - model.mean) / model.std) - a[i]) ** 2).mean(1)
        if weighted:
            wb = w[i]
            wb = wb * batch / (wb.sum() + 1e-6)  # LeRobot's per-batch normalisation
            loss = (per * wb).mean()
        else:
            loss = per.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model


def export(model, out_dir: Path, name: str, state_size: int):
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = out_dir / f"{name}.onnx"
    model.eval()
    torch.onnx.export(
        model, torch.zeros(1, state_size), str(onnx_path), input_names=["state"], output_names=["action"],
        dynamic_axes={"state": {0: "n"}, "action": {0: "n"}}, opset_version=17, dynamo=False,
    )
    sha = hashlib.sha256(onnx_path.read_bytes()).hexdigest()
    manifest = out_dir / f"{name}.toml"
    manifest.write_text(
        f'kind = "policy"\nonnx = "{onnx_path.name}"\nsha256 = "{sha}"\nstate_size = {state_size}\n'
        f'description = "BC MLP on state ({name}), benches/bc_rabc.py"\n\n'
        '[inputs]\nstate = "state"\n\n[outputs]\naction = "action"\n'
    )
    return manifest


def evaluate(exe, manifest, episodes, seed, out_json):
    sh(exe, "--log", "warn", "eval", "--policy", manifest, "--task", "pick-place", "--episodes", episodes,
       "--seed", seed, "--json", out_json, "--provider", "cpu")
    return json.loads(Path(out_json).read_text())


def bar_chart(results, path: Path):
    """Success rate per arm: one bar per training seed, the mean as a black line. PIL only (no matplotlib)."""
    arms = list(results)
    W, H, pad = 640, 360, 50
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    d.line([(pad, H - pad), (W - 20, H - pad)], fill="black")
    d.line([(pad, 20), (pad, H - pad)], fill="black")
    for y in [0.0, 0.25, 0.5, 0.75, 1.0]:
        py = H - pad - y * (H - pad - 20)
        d.line([(pad - 4, py), (W - 20, py)], fill=(220, 220, 220))
        d.text((8, py - 6), f"{y:.2f}", fill="black")
    colors = {"vanilla BC": (120, 120, 120), "RA-BC": (40, 110, 220)}
    group_w = (W - pad - 40) / len(arms)
    for g, arm in enumerate(arms):
        rates = [r["success_rate"] for r in results[arm]]
        bw = group_w * 0.7 / len(rates)
        x0 = pad + 20 + g * group_w
        for k, rate in enumerate(rates):
            x = x0 + k * bw
            d.rectangle([x, H - pad - rate * (H - pad - 20), x + bw - 3, H - pad], fill=colors.get(arm, "gray"))
        mean = float(np.mean(rates))
        my = H - pad - mean * (H - pad - 20)
        d.line([(x0 - 4, my), (x0 + len(rates) * bw + 2, my)], fill="black", width=3)
        d.text((x0, H - pad + 8), f"{arm}: mean {mean:.3f}", fill="black")
    d.text((pad + 10, 4), "success rate in the simulator (bars: training seeds, line: mean)", fill="black")
    img.save(path)


def progress_plot(data, episode, path: Path):
    rows = np.flatnonzero(data["episode"] == episode)
    p, w = data["progress"][rows], data["weight"][rows]
    W, H, pad = 640, 240, 30
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    n = max(len(rows) - 1, 1)

    def pts(v):
        return [(pad + i * (W - 2 * pad) / n, H - pad - float(x) * (H - 2 * pad)) for i, x in enumerate(v)]

    d.line(pts(w), fill=(245, 140, 30), width=1)
    d.line(pts(p), fill=(40, 90, 220), width=2)
    d.text((pad, 4), f"episode {episode}: progress (blue), RA-BC weight (orange)", fill="black")
    img.save(path)


def reading(results, episodes):
    """Counts behind the rates, final progress per arm, and what the run does and does not show."""
    k = {arm: sum(round(r["success_rate"] * episodes) for r in rs) for arm, rs in results.items()}
    n = {arm: episodes * len(rs) for arm, rs in results.items()}
    prog = {arm: float(np.mean([r["mean_final_progress"] for r in rs])) for arm, rs in results.items()}
    further = sum(r["mean_final_progress"] > v["mean_final_progress"]
                  for r, v in zip(results["RA-BC"], results["vanilla BC"]))
    return (
        f"Successes: RA-BC {k['RA-BC']}/{n['RA-BC']}, vanilla {k['vanilla BC']}/{n['vanilla BC']} episodes; mean "
        f"final oracle progress RA-BC {prog['RA-BC']:.3f}, vanilla {prog['vanilla BC']:.3f} (RA-BC further on "
        f"{further} of {len(results['RA-BC'])} training seeds). Both arms stay far below the demonstrators (the "
        "clean expert succeeds almost always): a state MLP cloned from mostly degraded demonstrations is a weak "
        "policy either way, so the result is the relative one (same data, steps and seeds; only the weights differ)."
    )

# ---------------------------------------------------------------------------------------------------------------
# --clean: plain BC on clean expert demonstrations (issue 18, part 1).
# ---------------------------------------------------------------------------------------------------------------


def load_clean(ds: Path):
    """States and actions of the successful clean demonstrations (last frame of each episode left out)."""
    cols = ["episode_index", "frame_index", "observation.state", "action"]
    t = pa.concat_tables([pq.read_table(p, columns=cols) for p in sorted((ds / "data").glob("*/*.parquet"))])
    ep = t.column("episode_index").to_numpy()
    fr = t.column("frame_index").to_numpy()
    state = np.stack(t.column("observation.state").to_numpy(zero_copy_only=False)).astype(np.float32)
    action = np.stack(t.column("action").to_numpy(zero_copy_only=False)).astype(np.float32)
    meta = json.loads((ds / "meta/stagewise_record.json").read_text())["episodes"]
    ok = [e["episode_index"] for e in meta if e["success"]]
    last = np.zeros(len(ep), dtype=bool)
    for e in np.unique(ep):
        rows = np.flatnonzero(ep == e)
        last[rows[np.argmax(fr[rows])]] = True
    keep = ~last & np.isin(ep, ok)
    return {"state": state[keep], "action": action[keep], "episode": ep[keep]}


class Features(torch.nn.Module):
    """State (14: ee_xyz, gripper_width, grasped, block0 xyz + quaternion, target_xy) -> network input.

    `raw`: the standardised state. `rel` adds what the expert's decisions hinge on, in units where its thresholds
    (millimetres) are not lost next to the workspace (decimetres): ee - block (3), block - target (2),
    ee - target (2), each x20 (5 cm -> 1) and the first two also through tanh(x200) (saturates at ~5 mm), plus the
    gripper width centred. Part of the ONNX graph, so the policy still maps state [N,14] -> action [N,4].
    """

    def __init__(self, mean, std, kind):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean))
        self.register_buffer("std", torch.as_tensor(std))
        self.kind = kind

    def forward(self, s):
        x = (s - self.mean) / self.std
        if self.kind == "raw":
            return x
        ee, blk, tgt = s[:, 0:3], s[:, 5:8], s[:, 12:14]
        d_eb = (ee - blk) * 20.0
        d_bt = (blk[:, :2] - tgt) * 20.0
        d_et = (ee[:, :2] - tgt) * 20.0
        w = (s[:, 3:4] - 0.04) * 25.0
        return torch.cat([x, d_eb, d_bt, d_et, w, torch.tanh(d_eb * 10.0), torch.tanh(d_bt * 10.0)], 1)


class CleanPolicy(torch.nn.Module):
    """MLP on the features -> [dx, dy, dz] (regressed, clamped) and the gripper.

    gripper `bce`: a logit trained with binary cross-entropy on (action > 0), exported as +-1 (its sign).
    `mse`: regressed like the rest and clamped (what the RA-BC mode does). `mse-sign`: regressed, exported as its sign.
    """

    def __init__(self, features, n_in, hidden, depth, gripper):
        super().__init__()
        self.features = features
        self.gripper = gripper
        layers, n = [], n_in
        for _ in range(depth):
            layers += [torch.nn.Linear(n, hidden), torch.nn.ReLU()]
            n = hidden
        self.net = torch.nn.Sequential(*layers, torch.nn.Linear(n, 4))

    def raw(self, state):
        return self.net(self.features(state))

    def forward(self, state):
        o = self.raw(state)
        xyz = torch.clamp(o[:, :3], -1.0, 1.0)
        g = o[:, 3:]
        if self.gripper == "mse":
            g = torch.clamp(g, -1.0, 1.0)
        else:
            g = torch.where(g > 0, torch.ones_like(g), -torch.ones_like(g))
        return torch.cat([xyz, g], 1)

    def loss(self, state, action):
        o = self.raw(state)
        per = ((o[:, :3] - action[:, :3]) ** 2).mean(1)
        if self.gripper == "bce":
            g = torch.nn.functional.binary_cross_entropy_with_logits(o[:, 3], (action[:, 3] > 0).float())
        else:
            g = ((o[:, 3] - action[:, 3]) ** 2).mean()
        return per.mean() + g


def train_clean(data, val, seed, cfg):
    """One clean-BC policy; returns it, the held-out action errors and the training time."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    feats = Features(data["state"].mean(0), data["state"].std(0) + 1e-3, cfg["features"])
    n_in = feats(torch.as_tensor(data["state"][:2])).shape[1]
    model = CleanPolicy(feats, n_in, cfg["hidden"], cfg["depth"], cfg["gripper"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg["steps"])
    s = torch.as_tensor(data["state"])
    a = torch.as_tensor(data["action"])
    t0 = time.perf_counter()
    for _ in range(cfg["steps"]):
        i = torch.as_tensor(rng.integers(0, len(s), cfg["batch"]))
        loss = model.loss(s[i], a[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    t_train = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        sv, av = torch.as_tensor(val["state"]), torch.as_tensor(val["action"])
        p = model(sv)
        err = {
            "val_mse_xyz": [float(v) for v in ((p[:, :3] - av[:, :3]) ** 2).mean(0)],
            "val_gripper_sign_acc": float(((p[:, 3] > 0) == (av[:, 3] > 0)).float().mean()),
            "train_mse_xyz": float(((model(s[:20000])[:, :3] - a[:20000, :3]) ** 2).mean()),
        }
    return model, err, t_train


def clean_seed_job(job):
    """Train, export and evaluate one training seed (a process of its own with --jobs > 1)."""
    torch.set_num_threads(1)
    seed, data, val, cfg, exe, pol_dir = job
    model, err, t_train = train_clean(data, val, seed, cfg)
    name = f"clean_bc_seed{seed}"
    manifest = export(model, pol_dir, name, data["state"].shape[1])
    desc = (f"plain BC on clean pick-place demonstrations: {cfg['features']} features, MLP {cfg['depth']}x"
            f"{cfg['hidden']}, gripper {cfg['gripper']}, {cfg['steps']} steps (seed {seed}), benches/bc_rabc.py --clean")
    manifest.write_text(manifest.read_text().replace(
        f'description = "BC MLP on state ({name}), benches/bc_rabc.py"', f'description = "{desc}"'))
    t1 = time.perf_counter()
    r = evaluate(exe, manifest, cfg["eval_episodes"], cfg["eval_seed"], pol_dir / f"{name}.json")
    fails = [{"seed": e["seed"], "steps": e["steps"], "final_progress": e["final_progress"]}
             for e in r["per_episode"] if not e["success"]]
    return {"seed": seed, "success_rate": r["success_rate"], "successes": r["successes"],
            "episodes": r["episodes"], "mean_final_progress": r["mean_final_progress"], "train_s": t_train,
            "eval_s": time.perf_counter() - t1, **err, "failures": fails, "manifest": str(manifest)}


def run_clean(args):
    import concurrent.futures as cf

    exe = Path(args.exe)
    work = Path(args.work)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ds = work / "ds"
    t_all = time.perf_counter()
    rec_out, t_rec = sh(exe, "--log", "warn", "record", "--task", "pick-place", "--episodes", args.episodes,
                        "--degraded", 0, "--seed", args.data_seed, "--width", 8, "--height", 8, "--out", ds)
    print(rec_out, end="")
    data = load_clean(ds)
    eps = np.unique(data["episode"])
    held = np.random.default_rng(123).choice(eps, max(1, len(eps) // 10), replace=False)
    m = np.isin(data["episode"], held)
    train = {k: v[~m] for k, v in data.items()}
    val = {k: v[m] for k, v in data.items()}
    cfg = {"features": args.features, "gripper": args.gripper, "hidden": args.hidden, "depth": args.depth,
           "steps": args.steps, "batch": args.batch, "lr": args.lr, "eval_episodes": args.eval_episodes,
           "eval_seed": args.eval_seed}
    print(f"{len(train['state'])} training frames from {len(eps) - len(held)} episodes, {len(val['state'])} "
          f"held-out frames ({len(held)} episodes); {json.dumps(cfg)}")
    seeds = [int(s) for s in args.train_seeds.split(",")]
    jobs = [(s, train, val, cfg, exe, work / "policies") for s in seeds]
    if args.jobs > 1:
        with cf.ProcessPoolExecutor(args.jobs) as pool:
            runs = list(pool.map(clean_seed_job, jobs))
    else:
        runs = [clean_seed_job(j) for j in jobs]
    for r in runs:
        print(f"seed {r['seed']}: success {r['successes']}/{r['episodes']} ({r['success_rate']:.3f}), final progress "
              f"{r['mean_final_progress']:.3f}, held-out MSE xyz {np.round(r['val_mse_xyz'], 4).tolist()}, gripper "
              f"sign {r['val_gripper_sign_acc']:.4f} ({r['train_s']:.0f} s train, {r['eval_s']:.0f} s eval)")
    rates = [r["success_rate"] for r in runs]
    best = max(runs, key=lambda r: r["success_rate"])
    if args.save_best:
        dst = ROOT / args.save_best
        dst.mkdir(parents=True, exist_ok=True)
        src = Path(best["manifest"])
        onnx = src.with_suffix(".onnx")
        shutil.copy(onnx, dst / "pick-place-bc.onnx")
        (dst / "pick-place-bc.toml").write_text(
            src.read_text().replace(f'onnx = "{onnx.name}"', 'onnx = "pick-place-bc.onnx"'))
        print(f"best policy (seed {best['seed']}) -> {dst}")
    report = {
        "dataset": {"episodes": args.episodes, "degraded_fraction": 0.0, "seed": args.data_seed,
                    "train_episodes": int(len(eps) - len(held)), "held_out_episodes": int(len(held)),
                    "train_frames": int(len(train["state"])), "record_s": t_rec},
        "config": cfg,
        "results": runs,
        "mean_success": float(np.mean(rates)),
        "wall_s": time.perf_counter() - t_all,
    }
    out = Path(args.clean_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(str(out) + ".json").write_text(json.dumps(report, indent=2))
    bar_chart({"clean BC": runs}, Path(str(out) + ".png"))
    rows = "\n".join(
        f"| {r['seed']} | {r['successes']}/{r['episodes']} ({r['success_rate']:.3f}) | {r['mean_final_progress']:.3f} "
        f"| {' '.join(f'{v:.4f}' for v in r['val_mse_xyz'])} | {r['val_gripper_sign_acc']:.4f} | {r['train_s']:.0f} |"
        for r in runs)
    md = f"""# Plain BC on clean pick-place demonstrations

Measured by `benches/bc_rabc.py --clean` ({report['wall_s'] / 60:.1f} min wall on this machine's shared cores).

- **Data:** `stagewise record --task pick-place --episodes {args.episodes} --degraded 0 --seed {args.data_seed}`
  (8x8 images, unused): {report['dataset']['train_frames']} frames of {report['dataset']['train_episodes']}
  successful episodes for training, {report['dataset']['held_out_episodes']} episodes held out for the action error.
- **Policy:** features `{args.features}`, MLP {args.depth}x{args.hidden}, gripper `{args.gripper}`; Adam lr {args.lr}
  (cosine), {args.steps} steps of batch {args.batch}; one torch thread per training seed.
- **Evaluation:** `stagewise eval --policy`, {args.eval_episodes} fresh seeds ({args.eval_seed}..).

| training seed | successes | mean final progress | held-out MSE dx dy dz | gripper sign acc | train s |
|---|---|---|---|---|---|
{rows}

Mean success **{report['mean_success']:.3f}**.
"""
    Path(str(out) + ".md").write_text(md)
    print(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=str(ROOT / "target/release/stagewise"))
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--degraded", type=float, default=0.75)
    ap.add_argument("--data-seed", type=int, default=4_000_000)
    ap.add_argument("--chunk", type=int, default=25, help="RA-BC chunk size (frames ahead)")
    ap.add_argument("--kappa", type=float, default=0.01)
    ap.add_argument("--train-seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-episodes", type=int, default=200)
    ap.add_argument("--eval-seed", type=int, default=3_000_000)
    ap.add_argument("--work", default="/tmp/stagewise-bc-bench")
    ap.add_argument("--out", default="benches/bc_rabc")
    clean = ap.add_argument_group("--clean: plain BC on clean demonstrations (defaults above are overridden: "
                                  "--episodes 1000, --steps 20000, --eval-episodes 200, --work /tmp/stagewise-bc-clean)")
    clean.add_argument("--clean", action="store_true")
    clean.add_argument("--features", choices=["raw", "rel"], default="rel")
    clean.add_argument("--gripper", choices=["bce", "mse", "mse-sign"], default="bce")
    clean.add_argument("--depth", type=int, default=3)
    clean.add_argument("--jobs", type=int, default=1, help="training seeds trained side by side (processes)")
    clean.add_argument("--save-best", default=None, help="copy the best seed's policy here (models/policies/pick-place-bc)")
    clean.add_argument("--clean-out", default="benches/results/bc_clean")
    args = ap.parse_args()
    torch.set_num_threads(1)  # a tiny MLP: more threads only contend on the shared cores
    if args.clean:
        given = {a.split("=")[0] for a in sys.argv[1:]}
        for flag, val in [("--episodes", 1000), ("--steps", 20000), ("--eval-episodes", 200),
                          ("--work", "/tmp/stagewise-bc-clean")]:
            if flag not in given:
                setattr(args, flag[2:].replace("-", "_"), val)
        run_clean(args)
        return
    exe = Path(args.exe)
    work = Path(args.work)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ds = work / "ds"
    t_all = time.perf_counter()
    rec_out, t_rec = sh(exe, "--log", "warn", "record", "--task", "pick-place", "--episodes", args.episodes,
                        "--degraded", args.degraded, "--seed", args.data_seed, "--width", 32, "--height", 32,
                        "--out", ds)
    lab_out, t_lab = sh(exe, "--log", "warn", "label", "--dataset", ds, "--model", MODEL, "--chunk-size", args.chunk,
                        "--kappa", args.kappa, "--weights-csv", work / "weights.csv", "--summary-json",
                        work / "label.json", "--plots", 4, "--provider", "cpu")
    print(rec_out + lab_out, end="")
    data = load(ds, work / "weights.csv")
    meta = json.loads((ds / "meta/stagewise_record.json").read_text())["episodes"]
    demo_success = float(np.mean([e["success"] for e in meta]))
    deg = data["degraded"] == 1
    weight_stats = {
        "clean_mean_weight": float(data["weight"][~deg].mean()),
        "degraded_mean_weight": float(data["weight"][deg].mean()),
        "frames": int(len(data["weight"])),
        "degraded_frames": int(deg.sum()),
    }
    by_preset = {}
    for e in meta:
        rows = data["episode"] == e["episode_index"]
        by_preset.setdefault(e["degradation"], []).append(float(data["weight"][rows].mean()))
    weight_stats["mean_weight_by_preset"] = {k: float(np.mean(v)) for k, v in sorted(by_preset.items())}
    print(json.dumps(weight_stats, indent=2))

    results = {"vanilla BC": [], "RA-BC": []}
    t_train = t_eval = 0.0
    for seed in [int(s) for s in args.train_seeds.split(",")]:
        for arm, weighted in [("vanilla BC", False), ("RA-BC", True)]:
            t0 = time.perf_counter()
            model = train(data, weighted, seed, args.steps, args.batch, args.hidden, args.lr)
            name = f"{'rabc' if weighted else 'vanilla'}_seed{seed}"
            manifest = export(model, work / "policies", name, data["state"].shape[1])
            t1 = time.perf_counter()
            r = evaluate(exe, manifest, args.eval_episodes, args.eval_seed, work / f"{name}.json")
            t2 = time.perf_counter()
            t_train += t1 - t0
            t_eval += t2 - t1
            results[arm].append({"seed": seed, "success_rate": r["success_rate"],
                                 "mean_final_progress": r["mean_final_progress"]})
            print(f"{arm:10s} seed {seed}: success {r['success_rate']:.3f}, "
                  f"final progress {r['mean_final_progress']:.3f} ({t1 - t0:.0f} s train, {t2 - t1:.0f} s eval)")

    mean = {arm: float(np.mean([r["success_rate"] for r in rs])) for arm, rs in results.items()}
    ratio = mean["RA-BC"] / mean["vanilla BC"] if mean["vanilla BC"] > 0 else float("inf")
    label_summary = json.loads((work / "label.json").read_text())
    report = {
        "dataset": {"episodes": args.episodes, "degraded_fraction": args.degraded, "seed": args.data_seed,
                    "demo_success_rate": demo_success, "record_s": t_rec},
        "label": {"model": MODEL, "chunk_size": args.chunk, "kappa": args.kappa, "label_wall_s": t_lab,
                  "rabc_summary": label_summary["rabc"]["summary"], **weight_stats},
        "training": {"steps": args.steps, "batch": args.batch, "hidden": args.hidden, "lr": args.lr,
                     "seeds": args.train_seeds, "train_s_total": t_train},
        "eval": {"episodes": args.eval_episodes, "first_seed": args.eval_seed, "eval_s_total": t_eval},
        "results": results,
        "mean_success": mean,
        "ratio_rabc_over_vanilla": ratio,
        "wall_s": time.perf_counter() - t_all,
    }
    Path(args.out + ".json").write_text(json.dumps(report, indent=2))
    bar_chart(results, Path(args.out + ".png"))
    # One degraded, failed episode's labels and weights, for the report.
    failed = [e["episode_index"] for e in meta if e["degradation"] != "none" and not e["success"]]
    if failed:
        progress_plot(data, failed[0], Path(args.out + "_progress.png"))
    rows = "\n".join(
        f"| {arm} | " + " | ".join(f"{r['success_rate']:.3f}" for r in rs) + f" | **{mean[arm]:.3f}** |"
        for arm, rs in results.items()
    )
    seeds = args.train_seeds.split(",")
    md = f"""# Behaviour cloning with and without RA-BC weights

Measured by `benches/bc_rabc.py` (one run, {report['wall_s'] / 60:.1f} min on this machine's shared CPU cores).

- **Data:** `stagewise record --task pick-place --episodes {args.episodes} --degraded {args.degraded}`
  (seeds {args.data_seed}..): {weight_stats['degraded_frames']} of {weight_stats['frames']} training frames from
  degraded demonstrations; {demo_success:.0%} of the demonstrations succeed.
- **Labels:** `stagewise label` with the shipped `{MODEL}` (not trained on these seeds), RA-BC chunk
  {args.chunk}, kappa {args.kappa}: mean weight {label_summary['rabc']['summary']['mean_weight']:.3f}; clean frames
  {weight_stats['clean_mean_weight']:.3f}, degraded frames {weight_stats['degraded_mean_weight']:.3f}.
- **Policy:** MLP 14 -> {args.hidden} -> {args.hidden} -> 4 on the state, MSE to the demonstrated action, Adam
  lr {args.lr} (cosine), {args.steps} steps of batch {args.batch}; RA-BC = the same loss weighted per sample with
  LeRobot's batch normalisation. Same data, seed and steps for both arms.
- **Evaluation:** `stagewise eval --policy` in the simulator, {args.eval_episodes} fresh seeds
  ({args.eval_seed}..), the simulator's success.

| arm | {' | '.join(f'seed {s}' for s in seeds)} | mean success |
|---|{'---|' * len(seeds)}---|
{rows}

**RA-BC / vanilla = {ratio:.2f}x** (target >= 2x).

{reading(results, args.eval_episodes)}

Mean RA-BC weight per degradation preset (episode means averaged): {', '.join(f'{k} {v:.2f}' for k, v in weight_stats['mean_weight_by_preset'].items())}.

![success rates](bc_rabc.png)

![labelled progress and RA-BC weights of a failed degraded episode](bc_rabc_progress.png)
"""
    # Keep the clean-data section (hand-written tries table, results of --clean) below the marker.
    md_path = Path(args.out + ".md")
    if md_path.exists() and CLEAN_MARKER in md_path.read_text():
        md += "\n" + md_path.read_text()[md_path.read_text().index(CLEAN_MARKER):]
    md_path.write_text(md)
    print(md)


if __name__ == "__main__":
    main()
