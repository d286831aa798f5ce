#!/usr/bin/env python3
"""The behaviour-cloning result: does reward-aligned BC (RA-BC) beat plain BC on mostly degraded demonstrations?

1. `stagewise record`: pick-place demonstrations, most of them degraded (the scripted expert with the failure and
   imperfection presets: missed grasps, wrong placements, freezes, blocks carried off the table, noise, pauses,
   regressions) — fresh seeds, none of them seen by the reward model. Every frame is trained on, failed episodes
   included (that is what the weights are for).
2. `stagewise label` with the shipped pixel-and-proprioception model (models/pick-place/pick-place-progress.toml):
   per-frame progress and core's RA-BC weights (LeRobot's formula) for the chosen chunk size and kappa (the CSV the
   command writes). Oracle weights: the same formula in numpy on the ground-truth `progress_gt` column (checked
   against the command's weights on the model's progress: identical).
3. Three arms per training seed, all with the clean-BC recipe below and the same data, batches, steps and seed:
   `BC` (every frame weight 1), `RA-BC model` and `RA-BC oracle` (each sample's loss times its weight, normalised
   per batch as `w * B / (sum w + eps)`, LeRobot).
4. Each policy exported to ONNX (`kind = "policy"` manifest) and rolled out by `stagewise eval policy` in the
   simulator on fresh seeds (3000000..); success = the simulator's success (block on the target).

    nice .venv/bin/python benches/bc_rabc.py [--episodes 1000] [--degraded 0.75] [--chunk 25] [--kappa 0.01]
        [--steps 8000] [--jobs 2] [--save-best models/policies/pick-place-rabc]

`--clean` runs the other benchmark instead: plain BC on clean expert demonstrations (issue 18, part 1), the recipe
that makes a state policy succeed (relative-position features inside the ONNX graph, the gripper as a binary
classification that is snapped to +-1, 1000 demonstrations, MLP 3x256, 20000 steps); it writes
benches/results/bc_clean.{md,json,png} and the policies (best one: models/policies/pick-place-bc/):

    nice .venv/bin/python benches/bc_rabc.py --clean [--train-seeds 0,1,2] [--jobs 2]

Its switches reproduce the tries in benches/bc_rabc.md (`--features raw`, `--gripper mse`, `--episodes 200`, ...).

`--task push-target` (or `stack`) runs either mode on another sim task: its demonstrations and presets
(`stagewise record --task`), its shipped progress model for the labels (models/<task>/<task>-progress.toml), its
evaluation (`stagewise eval --task`), and features found by name from the dataset's state fields (meta/info.json;
push-target adds the push geometry, see `Features`). Default: pick-place, unchanged. E.g. (benches/bc_rabc.md):

    nice .venv/bin/python benches/bc_rabc.py --task push-target --clean \
        --clean-out benches/results/bc_rabc_push-target_clean
    nice .venv/bin/python benches/bc_rabc.py --task push-target --degraded 0.6 \
        --presets miss-grasp,wrong-place,freeze,off-table --work /tmp/bc-push --out benches/results/bc_rabc_push-target

python/tests/test_bc_rabc_smoke.py runs the RA-BC mode end to end on a handful of episodes (CI's seeded smoke).

Writes benches/bc_rabc.md, benches/bc_rabc.json and benches/bc_rabc.png (success rates per arm and training
seed) and benches/bc_rabc_progress.png (labelled and true progress and RA-BC weights of one failed degraded
episode); `--out` elsewhere for sweeps (benches/results/bc_rabc_chunk5, ...). Needs
torch (models/training/requirements.txt) and pillow. A benchmark: it takes minutes (CI runs the smoke above).
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
# The shipped progress model that labels each task's demonstrations (`stagewise label --model`).
TASK_MODELS = {
    "pick-place": MODEL,
    "push-target": "models/push-target/push-target-progress.toml",
    "stack": "models/stack/stack-progress.toml",
}


def state_names(ds: Path):
    """The dataset's state field names (meta/info.json), which the features are built from."""
    info = json.loads((ds / "meta/info.json").read_text())
    return list(info["features"]["observation.state"]["names"])
CLEAN_MARKER = "<!-- clean BC (benches/bc_rabc.py --clean); kept when the RA-BC part is rewritten -->"
NOTES_MARKER = "<!-- RA-BC notes (hand-written); kept, with everything below, when the RA-BC part is rewritten -->"


def sh(*cmd, quiet=True):
    t0 = time.perf_counter()
    out = subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True, capture_output=True, text=True)
    if not quiet:
        print(out.stdout, end="")
    return out.stdout, time.perf_counter() - t0


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


def evaluate(exe, manifest, episodes, seed, out_json, task="pick-place"):
    sh(exe, "--log", "warn", "eval", "policy", "--policy", manifest, "--task", task, "--episodes", episodes,
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
    colors = {"BC": (120, 120, 120), "RA-BC model": (40, 110, 220), "RA-BC oracle": (40, 170, 90)}
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
    p, w = data["progress"][rows], data["w_model"][rows]
    pg, wg = data["progress_gt"][rows], data["w_oracle"][rows]
    W, H, pad = 640, 240, 30
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    n = max(len(rows) - 1, 1)

    def pts(v):
        return [(pad + i * (W - 2 * pad) / n, H - pad - float(x) * (H - 2 * pad)) for i, x in enumerate(v)]

    d.line(pts(wg), fill=(150, 210, 150), width=1)
    d.line(pts(pg), fill=(30, 150, 60), width=2)
    d.line(pts(w), fill=(245, 140, 30), width=1)
    d.line(pts(p), fill=(40, 90, 220), width=2)
    d.text((pad, 4), f"episode {episode}: model progress (blue) and RA-BC weight (orange); ground truth (green, "
           "weight light green)", fill="black")
    img.save(path)


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
    """State -> network input. The fields are found by name (`names`, the dataset's state names; default: the
    14-field layout ee_xyz, gripper_width, grasped, block0 xyz + quaternion, target_xy of pick-place and push-target).

    `raw`: the standardised state. `rel` adds what the expert's decisions hinge on, in units where its thresholds
    (millimetres) are not lost next to the workspace (decimetres): ee - block (3), block - target (2),
    ee - target (2), each x20 (5 cm -> 1) and the first two also through tanh(x200) (saturates at ~5 mm), plus the
    gripper width centred. Part of the ONNX graph, so the policy still maps state [N,S] -> action [N,4].

    `task = "push-target"` (with `rel`) adds the push expert's geometry: the unit push direction block -> target (2),
    the TCP's offset from the block along that direction and across it (2, x20 and through tanh(x200)) and the
    block-target distance (x20 and tanh(x200)): the expert picks its pre-push point and when to lower or stop from
    these. `stack` (block0 onto block1): the same relative features with block1's xy as the target.
    """

    def __init__(self, mean, std, kind, names=None, task="pick-place"):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean))
        self.register_buffer("std", torch.as_tensor(std))
        self.kind = kind
        self.task = task
        names = list(names) if names else ["ee_x", "ee_y", "ee_z", "gripper_width", "grasped", "block0_x",
                                           "block0_y", "block0_z", "block0_qw", "block0_qx", "block0_qy",
                                           "block0_qz", "target_x", "target_y"]

        def at(first, n):
            if first not in names:
                raise ValueError(f"the state has no field {first!r} (names: {names})")
            i = names.index(first)
            if names[i:i + n] != [first[:-1] + c for c in "xyz"[:n]]:
                raise ValueError(f"state fields {names[i:i + n]} are not {first[:-2]}_x.. (names: {names})")
            return i

        self.ee = at("ee_x", 3)
        self.blk = at("block0_x", 3)
        self.tgt = at("block1_x", 2) if task == "stack" else at("target_x", 2)
        if "gripper_width" not in names:
            raise ValueError(f"the state has no field 'gripper_width' (names: {names})")
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
        out = [x, d_eb, d_bt, d_et, w, torch.tanh(d_eb * 10.0), torch.tanh(d_bt * 10.0)]
        if self.task == "push-target":
            dist = torch.sqrt((d_bt ** 2).sum(1, keepdim=True) + 1e-8)  # block-target distance x20
            u = -d_bt / dist  # unit direction block -> target
            rel = d_eb[:, :2]
            along = (rel * u).sum(1, keepdim=True)
            across = rel[:, 0:1] * u[:, 1:2] - rel[:, 1:2] * u[:, 0:1]
            geo = torch.cat([along, across], 1)
            out += [u, geo, torch.tanh(geo * 10.0), dist, torch.tanh(dist * 10.0)]
        return torch.cat(out, 1)


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

    def loss(self, state, action, weight=None):
        """Mean over the batch of (xyz MSE + gripper loss) per sample; with `weight`, each sample's loss is
        weighted by LeRobot's batch-normalised RA-BC weight `w * B / (sum w + eps)` (so the mean weight is 1)."""
        o = self.raw(state)
        per = ((o[:, :3] - action[:, :3]) ** 2).mean(1)
        if self.gripper == "bce":
            g = torch.nn.functional.binary_cross_entropy_with_logits(
                o[:, 3], (action[:, 3] > 0).float(), reduction="none")
        else:
            g = (o[:, 3] - action[:, 3]) ** 2
        if weight is None:
            return per.mean() + g.mean()
        wb = weight * len(weight) / (weight.sum() + 1e-6)
        return ((per + g) * wb).mean()


def train_clean(data, val, seed, cfg, names=None, task="pick-place"):
    """One clean-BC policy; returns it, the held-out action errors and the training time."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    feats = Features(data["state"].mean(0), data["state"].std(0) + 1e-3, cfg["features"], names, task)
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
    seed, data, val, cfg, exe, pol_dir, spec = job
    model, err, t_train = train_clean(data, val, seed, cfg, spec["names"], spec["task"])
    name = f"clean_bc_seed{seed}"
    manifest = export(model, pol_dir, name, data["state"].shape[1])
    desc = (f"plain BC on clean {spec['task']} demonstrations: {cfg['features']} features, MLP {cfg['depth']}x"
            f"{cfg['hidden']}, gripper {cfg['gripper']}, {cfg['steps']} steps (seed {seed}), benches/bc_rabc.py --clean")
    manifest.write_text(manifest.read_text().replace(
        f'description = "BC MLP on state ({name}), benches/bc_rabc.py"', f'description = "{desc}"'))
    t1 = time.perf_counter()
    r = evaluate(exe, manifest, cfg["eval_episodes"], cfg["eval_seed"], pol_dir / f"{name}.json", spec["task"])
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
    rec_out, t_rec = sh(exe, "--log", "warn", "record", "--task", args.task, "--episodes", args.episodes,
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
    spec = {"task": args.task, "names": state_names(ds)}
    jobs = [(s, train, val, cfg, exe, work / "policies", spec) for s in seeds]
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
        shutil.copy(onnx, dst / f"{args.task}-bc.onnx")
        (dst / f"{args.task}-bc.toml").write_text(
            src.read_text().replace(f'onnx = "{onnx.name}"', f'onnx = "{args.task}-bc.onnx"'))
        print(f"best policy (seed {best['seed']}) -> {dst}")
    report = {
        "dataset": {"task": args.task, "episodes": args.episodes, "degraded_fraction": 0.0, "seed": args.data_seed,
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
    geo = " (+ push geometry)" if args.task == "push-target" and args.features == "rel" else ""
    md = f"""# Plain BC on clean {args.task} demonstrations

Measured by `benches/bc_rabc.py --clean` ({report['wall_s'] / 60:.1f} min wall on this machine's shared cores).

- **Data:** `stagewise record --task {args.task} --episodes {args.episodes} --degraded 0 --seed {args.data_seed}`
  (8x8 images, unused): {report['dataset']['train_frames']} frames of {report['dataset']['train_episodes']}
  successful episodes for training, {report['dataset']['held_out_episodes']} episodes held out for the action error.
- **Policy:** features `{args.features}`{geo}, MLP {args.depth}x{args.hidden}, gripper `{args.gripper}`; Adam lr {args.lr}
  (cosine), {args.steps} steps of batch {args.batch}; one torch thread per training seed.
- **Evaluation:** `stagewise eval policy`, {args.eval_episodes} fresh seeds ({args.eval_seed}..).

| training seed | successes | mean final progress | held-out MSE dx dy dz | gripper sign acc | train s |
|---|---|---|---|---|---|
{rows}

Mean success **{report['mean_success']:.3f}**.
"""
    Path(str(out) + ".md").write_text(md)
    print(md)


# ---------------------------------------------------------------------------------------------------------------
# RA-BC on mostly degraded demonstrations (issue 18, part 2), with the clean-BC recipe for every arm.
# ---------------------------------------------------------------------------------------------------------------

ARMS = ["BC", "RA-BC model", "RA-BC oracle"]


def rabc_weights_np(progress, episode, frame, chunk, kappa, eps=1e-6):
    """core's RabcWeights (LeRobot's RABCWeights) in numpy: delta = phi[min(i + chunk, last)] - phi[i] within an
    episode; mu = max(mean, 0), sigma = max(std, eps) over all frames; w = 1 if delta > kappa,
    clip((delta - (mu - 2 sigma)) / (4 sigma + eps), 0, 1) if 0 <= delta <= kappa, 0 if delta < 0; float32
    deltas and arithmetic as LeRobot. Used for the oracle labels (progress_gt); checked against `stagewise label`'s
    own weights on the model's progress (same function, same frames)."""
    delta = np.zeros(len(progress), dtype=np.float64)
    for e in np.unique(episode):
        rows = np.flatnonzero(episode == e)
        rows = rows[np.argsort(frame[rows])]
        p = progress[rows].astype(np.float64)
        ahead = np.minimum(np.arange(len(rows)) + chunk, len(rows) - 1)
        delta[rows] = p[ahead] - p
    mu = max(delta.mean(), 0.0)
    sigma = max(delta.std(), eps)
    d = delta.astype(np.float32)
    lower, denom = np.float32(mu - 2.0 * sigma), np.float32(4.0 * sigma + eps)
    soft = np.clip((d - lower) / denom, np.float32(0), np.float32(1))
    w = np.where(d > np.float32(kappa), np.float32(1), np.where(d >= 0, soft, np.float32(0)))
    return w.astype(np.float32), delta


def load_rabc(ds: Path, weights_csv: Path, chunk, kappa):
    """Every frame of every demonstration (failed ones included) with its model and oracle RA-BC weights."""
    cols = ["index", "episode_index", "frame_index", "observation.state", "action", "degraded", "progress_gt"]
    t = pa.concat_tables([pq.read_table(p, columns=cols) for p in sorted((ds / "data").glob("*/*.parquet"))])
    idx = t.column("index").to_numpy()
    ep = t.column("episode_index").to_numpy()
    fr = t.column("frame_index").to_numpy()
    with open(weights_csv) as f:
        lab = {int(r["index"]): (float(r["weight"]), float(r["progress"])) for r in csv.DictReader(f)}
    w_model = np.array([lab[int(i)][0] for i in idx], dtype=np.float32)
    p_model = np.array([lab[int(i)][1] for i in idx], dtype=np.float32)
    gt = t.column("progress_gt").to_numpy().astype(np.float32)
    w_oracle, _ = rabc_weights_np(gt, ep, fr, chunk, kappa)
    w_check, _ = rabc_weights_np(p_model, ep, fr, chunk, kappa)
    check = float(np.abs(w_check - w_model).max())
    last = np.zeros(len(idx), dtype=bool)
    for e in np.unique(ep):
        rows = np.flatnonzero(ep == e)
        last[rows[np.argmax(fr[rows])]] = True
    keep = ~last  # the last frame of an episode has no action (zeros): left out
    state = np.stack(t.column("observation.state").to_numpy(zero_copy_only=False)).astype(np.float32)
    action = np.stack(t.column("action").to_numpy(zero_copy_only=False)).astype(np.float32)
    data = {"state": state, "action": action, "episode": ep, "frame": fr,
            "degraded": t.column("degraded").to_numpy(), "progress": p_model, "progress_gt": gt,
            "w_model": w_model, "w_oracle": w_oracle}
    return {k: v[keep] for k, v in data.items()}, check


def rabc_seed_job(job):
    """Train (the clean recipe, optionally weighted), export and evaluate one (arm, training seed)."""
    torch.set_num_threads(1)
    arm, seed, data, cfg, exe, pol_dir, spec = job
    name = {"BC": "bc", "RA-BC model": "rabc_model", "RA-BC oracle": "rabc_oracle"}[arm] + f"_seed{seed}"
    # Plain BC does not read the labels: one BC folder serves every label configuration of a sweep.
    label_keys = {"resume"} | ({"chunk", "kappa", "label_stride"} if arm == "BC" else set())
    key_cfg = {k: v for k, v in cfg.items() if k not in label_keys}
    if spec["task"] != "pick-place":  # pick-place keys stay as they were (finished runs are still reused)
        key_cfg["task"] = spec["task"]
    if arm == "BC":
        pol_dir = pol_dir.parent / "policies-bc"
    done = pol_dir / f"{name}.result.json"
    if cfg["resume"] and done.exists():
        prev = json.loads(done.read_text())
        if prev.get("cfg") == key_cfg:
            print(f"reusing {done}", flush=True)
            return prev["result"]
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    feats = Features(data["state"].mean(0), data["state"].std(0) + 1e-3, "rel", spec["names"], spec["task"])
    n_in = feats(torch.as_tensor(data["state"][:2])).shape[1]
    model = CleanPolicy(feats, n_in, cfg["hidden"], cfg["depth"], "bce")
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg["steps"])
    s = torch.as_tensor(data["state"])
    a = torch.as_tensor(data["action"])
    w = None if arm == "BC" else torch.as_tensor(data["w_model" if arm == "RA-BC model" else "w_oracle"])
    t0 = time.perf_counter()
    for _ in range(cfg["steps"]):
        i = torch.as_tensor(rng.integers(0, len(s), cfg["batch"]))  # same batches in every arm
        loss = model.loss(s[i], a[i], None if w is None else w[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    t_train = time.perf_counter() - t0
    manifest = export(model, pol_dir, name, data["state"].shape[1])
    labels = "" if arm == "BC" else f" (chunk {cfg['chunk']}, kappa {cfg['kappa']}, label stride {cfg['label_stride']})"
    desc = (f"{arm} on {cfg['degraded']:.0%}-degraded {spec['task']} demonstrations{labels}: rel features, MLP {cfg['depth']}x{cfg['hidden']}, gripper bce, {cfg['steps']} steps "
            f"(seed {seed}), benches/bc_rabc.py")
    manifest.write_text(manifest.read_text().replace(
        f'description = "BC MLP on state ({name}), benches/bc_rabc.py"', f'description = "{desc}"'))
    t1 = time.perf_counter()
    r = evaluate(exe, manifest, cfg["eval_episodes"], cfg["eval_seed"], pol_dir / f"{name}.json", spec["task"])
    out = {"arm": arm, "seed": seed, "success_rate": r["success_rate"], "successes": r["successes"],
           "episodes": r["episodes"], "mean_final_progress": r["mean_final_progress"], "train_s": t_train,
           "eval_s": time.perf_counter() - t1, "manifest": str(manifest)}
    print(json.dumps(out), flush=True)
    done.write_text(json.dumps({"cfg": key_cfg, "result": out}, indent=2))
    return out


def run_rabc(args):
    import concurrent.futures as cf

    exe = Path(args.exe)
    work = Path(args.work)
    ds = work / "ds"
    t_all = time.perf_counter()
    cfg = {"degraded": args.degraded, "chunk": args.chunk, "kappa": args.kappa, "label_stride": args.label_stride,
           "hidden": args.hidden, "depth": args.depth, "steps": args.steps, "batch": args.batch, "lr": args.lr,
           "eval_episodes": args.eval_episodes, "eval_seed": args.eval_seed, "resume": args.resume}
    presets = ["--presets", args.presets] if args.presets else []
    key = {"episodes": args.episodes, "degraded": args.degraded, "seed": args.data_seed, "presets": args.presets}
    if args.task != "pick-place":  # pick-place keys stay as they were (recorded datasets are still reused)
        key["task"] = args.task
    key = json.dumps(key)
    model_path = TASK_MODELS[args.task]
    if args.reuse_data and (work / "data.key").exists() and (work / "data.key").read_text() == key:
        t_rec = float((work / "record_s").read_text())
        print(f"reusing {ds}")
    else:
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        rec_out, t_rec = sh(exe, "--log", "warn", "record", "--task", args.task, "--episodes", args.episodes,
                            "--degraded", args.degraded, *presets, "--seed", args.data_seed, "--width", 32,
                            "--height", 32, "--out", ds)
        print(rec_out, end="")
        (work / "data.key").write_text(key)
        (work / "record_s").write_text(str(t_rec))
    lab_out, t_lab = sh(exe, "--log", "warn", "label", "--dataset", ds, "--model", model_path, "--chunk-size",
                        args.chunk,
                        "--kappa", args.kappa, "--stride", args.label_stride, "--weights-csv", work / "weights.csv",
                        "--summary-json",
                        work / "label.json", "--plots", 0, "--provider", "cpu", "--workers", 2)
    print(lab_out, end="")
    data, check = load_rabc(ds, work / "weights.csv", args.chunk, args.kappa)
    print(f"numpy RA-BC weights vs `stagewise label`'s on the same progress: max |diff| {check:.2e}")
    meta = json.loads((ds / "meta/stagewise_record.json").read_text())["episodes"]
    demo_success = float(np.mean([e["success"] for e in meta]))
    # Data composition and mean weight per preset (per frame), for both label sources.
    comp = {}
    ep_preset = {e["episode_index"]: e["degradation"] for e in meta}
    frame_preset = np.array([ep_preset[int(e)] for e in data["episode"]])
    for e in meta:
        c = comp.setdefault(e["degradation"], {"episodes": 0, "successes": 0})
        c["episodes"] += 1
        c["successes"] += int(e["success"])
    for k, c in comp.items():
        rows = frame_preset == k
        c["frames"] = int(rows.sum())
        c["frame_share"] = float(rows.mean())
        for src in ["model", "oracle"]:
            c[f"mean_w_{src}"] = float(data[f"w_{src}"][rows].mean())
            c[f"w_share_{src}"] = float(data[f"w_{src}"][rows].sum() / data[f"w_{src}"].sum())
    comp = dict(sorted(comp.items()))
    succ_ep = {e["episode_index"] for e in meta if e["success"]}
    from_success = np.isin(data["episode"], list(succ_ep))
    weight_stats = {
        "frames": int(len(data["state"])),
        "degraded_frames": int((data["degraded"] == 1).sum()),
        "frames_of_failed_episodes": int((~from_success).sum()),
        "weight_share_failed_episodes": {src: float(data[f"w_{src}"][~from_success].sum() / data[f"w_{src}"].sum())
                                         for src in ["model", "oracle"]},
        "mean_weight": {src: float(data[f"w_{src}"].mean()) for src in ["model", "oracle"]},
        "by_preset": comp,
    }
    print(json.dumps(weight_stats, indent=2))

    seeds = [int(s) for s in args.train_seeds.split(",")]
    arms = [a for a in ARMS if a in args.arms.split(",")]
    # BC and RA-BC (model labels) first, seed by seed, then the oracle bound.
    # One policy folder per label configuration, so a sweep in one work dir keeps every condition's policies.
    pol_dir = work / f"policies-chunk{args.chunk}-kappa{args.kappa}-stride{args.label_stride}"
    pol_dir.mkdir(parents=True, exist_ok=True)
    spec = {"task": args.task, "names": state_names(ds)}
    jobs = [(arm, s, data, cfg, exe, pol_dir, spec) for s in seeds for arm in arms if arm != "RA-BC oracle"]
    jobs += [(arm, s, data, cfg, exe, pol_dir, spec) for s in seeds for arm in arms if arm == "RA-BC oracle"]
    if args.jobs > 1:
        with cf.ProcessPoolExecutor(args.jobs) as pool:
            runs = list(pool.map(rabc_seed_job, jobs))
    else:
        runs = [rabc_seed_job(j) for j in jobs]
    results = {arm: sorted([r for r in runs if r["arm"] == arm], key=lambda r: r["seed"]) for arm in arms}
    mean = {arm: float(np.mean([r["success_rate"] for r in rs])) for arm, rs in results.items()}
    ratio = {arm: (mean[arm] / mean["BC"] if mean.get("BC", 0) > 0 else float("inf"))
             for arm in arms if arm != "BC" and "BC" in mean}
    if args.save_best and "RA-BC model" in results:
        best = max(results["RA-BC model"], key=lambda r: r["success_rate"])
        dst = ROOT / args.save_best
        dst.mkdir(parents=True, exist_ok=True)
        src = Path(best["manifest"])
        onnx = src.with_suffix(".onnx")
        shutil.copy(onnx, dst / f"{args.task}-rabc.onnx")
        (dst / f"{args.task}-rabc.toml").write_text(
            src.read_text().replace(f'onnx = "{onnx.name}"', f'onnx = "{args.task}-rabc.onnx"'))
        print(f"best RA-BC policy (seed {best['seed']}) -> {dst}")
    label_summary = json.loads((work / "label.json").read_text())
    report = {
        "dataset": {"task": args.task, "episodes": args.episodes, "degraded_fraction": args.degraded,
                    "seed": args.data_seed,
                    "presets": args.presets or "all", "demo_success_rate": demo_success, "record_s": t_rec},
        "label": {"model": model_path, "chunk_size": args.chunk, "kappa": args.kappa, "label_wall_s": t_lab,
                  "rabc_summary": label_summary["rabc"]["summary"], "numpy_vs_label_max_abs_diff": check,
                  **weight_stats},
        "training": {k: cfg[k] for k in ["hidden", "depth", "steps", "batch", "lr"]} | {
            "features": "rel", "gripper": "bce", "seeds": args.train_seeds, "jobs": args.jobs},
        "eval": {"episodes": args.eval_episodes, "first_seed": args.eval_seed},
        "results": results,
        "mean_success": mean,
        "ratio_over_bc": ratio,
        "wall_s": time.perf_counter() - t_all,
    }
    Path(args.out + ".json").write_text(json.dumps(report, indent=2))
    bar_chart(results, Path(args.out + ".png"))
    failed = [e["episode_index"] for e in meta if e["degradation"] != "none" and not e["success"]]
    if failed:
        progress_plot(data, failed[0], Path(args.out + "_progress.png"))
    seed_cols = " | ".join(f"seed {s}" for s in seeds)
    rows = "\n".join(
        f"| {arm} | " + " | ".join(f"{r['successes']}/{r['episodes']}" for r in rs)
        + f" | **{mean[arm]:.3f}** | {np.mean([r['mean_final_progress'] for r in rs]):.3f} | "
        + (f"{ratio[arm]:.2f}x" if arm in ratio else "") + " | "
        + " / ".join(f"{r['train_s']:.0f}" for r in rs) + " |"
        for arm, rs in results.items())
    prow = "\n".join(
        f"| {k} | {c['episodes']} | {c['successes']} | {c['frames']} ({c['frame_share']:.0%}) | "
        f"{c['mean_w_model']:.2f} ({c['w_share_model']:.0%}) | {c['mean_w_oracle']:.2f} ({c['w_share_oracle']:.0%}) |"
        for k, c in comp.items())
    ws = weight_stats
    geo = " (+ push geometry)" if args.task == "push-target" else ""
    md = f"""# Behaviour cloning with and without RA-BC weights

Measured by `benches/bc_rabc.py` (one run, {report['wall_s'] / 60:.1f} min on this machine's shared CPU cores).

- **Data:** `stagewise record --task {args.task} --episodes {args.episodes} --degraded {args.degraded}{' --presets ' + args.presets if args.presets else ''}`
  (seeds {args.data_seed}.., 32x32 images for the labeller): {ws['degraded_frames']} of {ws['frames']} training
  frames from degraded demonstrations, {ws['frames_of_failed_episodes']} from failed ones; {demo_success:.0%} of the
  demonstrations succeed. Every frame is trained on (failed episodes included).
- **Labels:** `stagewise label` with the shipped `{model_path}` (pixels + proprioception, not trained on these seeds),
  label stride {args.label_stride}, RA-BC chunk {args.chunk}, kappa {args.kappa} (core's `RabcWeights`, LeRobot's formula): mean weight
  {ws['mean_weight']['model']:.3f}. **Oracle:** the same formula on the ground-truth `progress_gt` column: mean
  weight {ws['mean_weight']['oracle']:.3f}. Share of the total weight on failed episodes: model
  {ws['weight_share_failed_episodes']['model']:.0%}, oracle {ws['weight_share_failed_episodes']['oracle']:.0%}
  (frames: {ws['frames_of_failed_episodes'] / ws['frames']:.0%}).
- **Policy:** the clean-BC recipe (below) for every arm: `rel` features{geo}, MLP {args.depth}x{args.hidden}, dx/dy/dz MSE,
  gripper BCE (exported as +-1), Adam lr {args.lr} (cosine), {args.steps} steps of batch {args.batch}, one torch
  thread; RA-BC = each sample's loss times its weight normalised per batch (`w * B / (sum w + eps)`, LeRobot).
  Same data, batches, seeds and steps in every arm; only the weights differ.
- **Evaluation:** `stagewise eval policy` in the simulator, {args.eval_episodes} fresh seeds
  ({args.eval_seed}..), the simulator's success.

| arm | {seed_cols} | mean success | mean final progress | vs BC | train s per seed |
|---|{'---|' * len(seeds)}---|---|---|---|
{rows}

Data composition and where the weight goes (per preset: episodes, successful demonstrations, training frames,
mean RA-BC weight per frame and the preset's share of the total weight):

| preset | episodes | successes | frames | model labels: mean w (share) | oracle: mean w (share) |
|---|---|---|---|---|---|
{prow}

![success rates]({Path(args.out).name}.png)

![labelled progress and RA-BC weights of a failed degraded episode]({Path(args.out).name}_progress.png)
"""
    md_path = Path(args.out + ".md")
    old = md_path.read_text() if md_path.exists() else ""
    for marker in [NOTES_MARKER, CLEAN_MARKER]:
        if marker in old:
            md += "\n" + old[old.index(marker):]
            break
    md_path.write_text(md)
    print(md)


def weight_sweep(args):
    """Where LeRobot's weights go for chunk x kappa, model and oracle progress, on --work's dataset (recorded and
    labelled by a run of the RA-BC mode). Cheap (no training): shows which frames each setting can suppress."""
    work = Path(args.work)
    ds = work / "ds"
    data, _ = load_rabc(ds, work / "weights.csv", args.chunk, args.kappa)
    meta = json.loads((ds / "meta/stagewise_record.json").read_text())["episodes"]
    ok = {e["episode_index"]: e["success"] for e in meta}
    preset = {e["episode_index"]: e["degradation"] for e in meta}
    good = np.array([ok[int(e)] for e in data["episode"]])
    fp = np.array([preset[int(e)] for e in data["episode"]])
    still = np.abs(data["action"][:, :3]).max(1) < 0.05
    rows = []
    for src, col in [("model", "progress"), ("oracle", "progress_gt")]:
        for chunk in [1, 5, 10, 25, 50]:
            for kappa in [0.001, 0.01, 0.05]:
                w, _ = rabc_weights_np(data[col], data["episode"], data["frame"], chunk, kappa)
                rows.append({
                    "labels": src, "chunk": chunk, "kappa": kappa, "mean_w": float(w.mean()),
                    "w_failed_share": float(w[~good].sum() / w.sum()),
                    "w_still_mean": float(w[still].mean()),
                    "w_clean_moving_mean": float(w[good & ~still & (fp == "none")].mean()),
                    "w_pause_frames_of_successes": float(w[good & still & (fp == "pauses")].mean()),
                    "w_freeze_mean": float(w[fp == "freeze"].mean()),
                    "w_off_table_mean": float(w[fp == "off-table"].mean()),
                })
    out = Path(args.out + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"frames": int(len(w)), "failed_frame_share": float((~good).mean()),
                               "still_frame_share": float(still.mean()), "rows": rows}, indent=2))
    print(f"frames {len(w)}: from failed episodes {(~good).mean():.0%}, still (|dxyz| < 0.05) {still.mean():.0%}")
    print("| labels | chunk | kappa | mean w | weight share of failed episodes | still frames | clean moving frames "
          "| pause frames (successful) | freeze | off-table |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['labels']} | {r['chunk']} | {r['kappa']} | {r['mean_w']:.2f} | {r['w_failed_share']:.0%} | "
              f"{r['w_still_mean']:.2f} | {r['w_clean_moving_mean']:.2f} | {r['w_pause_frames_of_successes']:.2f} "
              f"| {r['w_freeze_mean']:.2f} | {r['w_off_table_mean']:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=str(ROOT / "target/release/stagewise"))
    ap.add_argument("--task", choices=list(TASK_MODELS), default="pick-place",
                    help="sim task: recorded, labelled with its shipped progress model (models/<task>/) and evaluated")
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--degraded", type=float, default=0.75)
    ap.add_argument("--presets", default=None,
                    help="degradation presets of the degraded episodes (`stagewise record --presets`; default: all "
                         "eight), e.g. miss-grasp,wrong-place,freeze,off-table for data where most attempts fail")
    ap.add_argument("--data-seed", type=int, default=4_000_000)
    ap.add_argument("--chunk", type=int, default=25, help="RA-BC chunk size (frames ahead)")
    ap.add_argument("--kappa", type=float, default=0.01)
    ap.add_argument("--label-stride", type=int, default=1,
                    help="`stagewise label --stride`: score every N-th frame, interpolate the rest")
    ap.add_argument("--train-seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-episodes", type=int, default=200)
    ap.add_argument("--eval-seed", type=int, default=3_000_000)
    ap.add_argument("--work", default="/tmp/stagewise-bc-bench")
    ap.add_argument("--out", default="benches/bc_rabc")
    ap.add_argument("--arms", default=",".join(ARMS), help="RA-BC mode: arms to train (BC, RA-BC model, RA-BC oracle)")
    ap.add_argument("--resume", action="store_true",
                    help="reuse a finished (arm, seed) of the same configuration from the work dir's policies")
    ap.add_argument("--reuse-data", action="store_true",
                    help="RA-BC mode: keep --work's dataset if it was recorded with the same episodes/degraded/seed")
    ap.add_argument("--depth", type=int, default=3, help="hidden layers")
    ap.add_argument("--jobs", type=int, default=2, help="trainings side by side (processes)")
    ap.add_argument("--save-best", default=None,
                    help="copy the best policy here (--clean: the best seed, models/policies/pick-place-bc; "
                    "RA-BC mode: the best RA-BC (model labels) seed, models/policies/pick-place-rabc)")
    clean = ap.add_argument_group("--clean: plain BC on clean demonstrations (defaults above are overridden: "
                                  "--episodes 1000, --steps 20000, --eval-episodes 200, --work /tmp/stagewise-bc-clean)")
    ap.add_argument("--weight-sweep", action="store_true",
                    help="print (and write --out .json) where the weights go for chunk x kappa on --work's labelled "
                    "dataset, no training (e.g. --out benches/results/bc_rabc_weight_sweep)")
    clean.add_argument("--clean", action="store_true")
    clean.add_argument("--features", choices=["raw", "rel"], default="rel")
    clean.add_argument("--gripper", choices=["bce", "mse", "mse-sign"], default="bce")
    clean.add_argument("--clean-out", default="benches/results/bc_clean")
    args = ap.parse_args()
    if "ORT_DYLIB_PATH" not in os.environ:  # for an --exe outside this checkout (its own lookup finds no .venv)
        libs = sorted(ROOT.glob(".venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.*"))
        if libs:
            os.environ["ORT_DYLIB_PATH"] = str(libs[0])
    torch.set_num_threads(1)  # a tiny MLP: more threads only contend on the shared cores
    if args.clean:
        given = {a.split("=")[0] for a in sys.argv[1:]}
        for flag, val in [("--episodes", 1000), ("--steps", 20000), ("--eval-episodes", 200),
                          ("--work", "/tmp/stagewise-bc-clean")]:
            if flag not in given:
                setattr(args, flag[2:].replace("-", "_"), val)
        run_clean(args)
        return
    if args.weight_sweep:
        weight_sweep(args)
        return
    run_rabc(args)

if __name__ == "__main__":
    main()
