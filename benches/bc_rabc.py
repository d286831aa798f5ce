#!/usr/bin/env python3
"""The behaviour-cloning comparison: does reward-aligned BC (RA-BC) beat plain BC on mostly degraded
demonstrations? The training is the package's (`stagewise.bc`, what `python -m stagewise.bc` runs); this script
records the data, labels it, trains every arm and seed through the package, evaluates and writes the report.

1. `stagewise record`: pick-place demonstrations, most of them degraded (the scripted expert with the failure and
   imperfection presets: missed grasps, wrong placements, freezes, blocks carried off the table, noise, pauses,
   regressions) — fresh seeds, none of them seen by the reward model. Every frame is trained on, failed episodes
   included (that is what the weights are for).
2. `stagewise label` with the shipped pixel-and-proprioception model (models/pick-place/pick-place-progress.toml):
   per-frame progress in <dataset>/sarm_progress.parquet, which `stagewise.bc` turns into RA-BC weights (LeRobot's
   formula). Checked against the command's own weights (`--weights-csv`, core's `RabcWeights`): max |diff| in the
   report. Oracle: the same, on a progress file of the ground-truth `progress_gt` column.
3. Three arms per training seed, all with the package's default recipe (stagewise.bc.config) and the same data,
   batches, steps and seed: `BC` (`--mode bc`), `RA-BC model` and `RA-BC oracle` (`--mode rabc` with the model's
   and the oracle's progress).
4. Each policy (ONNX + manifest, stagewise.export) rolled out by `stagewise eval policy` in the simulator on fresh
   seeds (3000000..); success = the simulator's success (block on the target).

    nice .venv/bin/python benches/bc_rabc.py [--episodes 1000] [--degraded 0.75] [--chunk 25] [--kappa 0.01]
        [--steps 8000] [--jobs 2] [--save-best models/policies/pick-place-rabc]

`--clean` runs the other benchmark instead: plain BC on clean expert demonstrations (issue 18, part 1), the recipe
that makes a state policy succeed (relative-position features inside the ONNX graph, the gripper as a binary
classification that is snapped to +-1, 1000 demonstrations, MLP 3x256, 20000 steps, successful episodes only, 10%
held out); it writes benches/results/bc_clean.{md,json,png} and the policies (best one: models/policies/pick-place-bc/):

    nice .venv/bin/python benches/bc_rabc.py --clean [--train-seeds 0,1,2] [--jobs 2]

Its switches reproduce the tries in docs/lab/bc_rabc.md (`--features raw`, `--gripper mse`, `--episodes 200`, ...).

`--task push-target` (or `stack`) runs either mode on another sim task: its demonstrations and presets
(`stagewise record --task`), its shipped progress model for the labels (models/<task>/<task>-progress.toml), its
evaluation (`stagewise eval policy --task`). push-target's `rel` features (the push geometry) do not export through
stagewise.export's layers: use `--features raw` there (the notebook's push-target rows used them).

python/tests/test_bc_rabc_smoke.py runs the same path (record, label, the three arms through stagewise.bc, eval) on a
handful of episodes (CI's seeded smoke); the notebook of the results is docs/lab/bc_rabc.md.

Writes benches/results/bc_rabc.md, .json and .png (success rates per arm and training
seed) and benches/results/bc_rabc_progress.png (labelled and true progress and RA-BC weights of one failed degraded
episode); `--out` elsewhere for sweeps (benches/results/bc_rabc_chunk5, ...). Needs torch and pillow
(scripts/setup.sh installs them). A benchmark: it takes minutes (CI runs the smoke above).
"""
import argparse
import csv
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
from PIL import Image, ImageDraw

from stagewise.bc import (BCConfig, NetConfig, RabcConfig, TrainConfig, load_frames, load_progress, rabc_weights,
                          train)

ROOT = Path(__file__).resolve().parents[1]
MODEL = "models/pick-place/pick-place-progress.toml"
# The shipped progress model that labels each task's demonstrations (`stagewise label --model`).
TASK_MODELS = {
    "pick-place": MODEL,
    "push-target": "models/push-target/push-target-progress.toml",
    "stack": "models/stack/stack-progress.toml",
}
CLEAN_MARKER = "<!-- clean BC (benches/bc_rabc.py --clean); kept when the RA-BC part is rewritten -->"
NOTES_MARKER = "<!-- RA-BC notes (hand-written); kept, with everything below, when the RA-BC part is rewritten -->"


def sh(*cmd, quiet=True):
    t0 = time.perf_counter()
    out = subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True, capture_output=True, text=True)
    if not quiet:
        print(out.stdout, end="")
    return out.stdout, time.perf_counter() - t0


def evaluate(exe, manifest, episodes, seed, out_json, task="pick-place"):
    sh(exe, "--log", "warn", "eval", "policy", "--policy", manifest, "--task", task, "--episodes", episodes,
       "--seed", seed, "--json", out_json, "--provider", "cpu")
    return json.loads(Path(out_json).read_text())


def bc_config(cfg, mode, seed, task, **train_extra):
    """The package's config for one arm: the bench's network and optimiser settings, the package's defaults else."""
    return BCConfig(mode=mode, task=task,
                    net=NetConfig(features=cfg.get("features", "rel"), hidden=cfg["hidden"], depth=cfg["depth"],
                                  gripper=cfg.get("gripper", "bce")),
                    train=TrainConfig(steps=cfg["steps"], batch=cfg["batch"], lr=cfg["lr"], seed=seed, **train_extra),
                    rabc=RabcConfig(chunk=cfg.get("chunk", RabcConfig.chunk), kappa=cfg.get("kappa", RabcConfig.kappa)))


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


def quiet(_msg):
    pass


def clean_seed_job(job):
    """Train (stagewise.bc), export and evaluate one training seed (a process of its own with --jobs > 1)."""
    seed, ds, cfg, exe, pol_dir, task = job
    name = f"clean_bc_seed{seed}"
    desc = (f"plain BC on clean {task} demonstrations: {cfg['features']} features, MLP {cfg['depth']}x"
            f"{cfg['hidden']}, gripper {cfg['gripper']}, {cfg['steps']} steps (seed {seed}), "
            "benches/bc_rabc.py --clean")
    bc = bc_config(cfg, "bc", seed, task, holdout=0.1, successful_only=True)
    res = train(ds, pol_dir / name, bc, name=name, overwrite=True, description=desc, log=quiet)
    t1 = time.perf_counter()
    r = evaluate(exe, res.manifest, cfg["eval_episodes"], cfg["eval_seed"], pol_dir / f"{name}.json", task)
    fails = [{"seed": e["seed"], "steps": e["steps"], "final_progress": e["final_progress"]}
             for e in r["per_episode"] if not e["success"]]
    rec = res.record
    return {"seed": seed, "success_rate": r["success_rate"], "successes": r["successes"],
            "episodes": r["episodes"], "mean_final_progress": r["mean_final_progress"], "train_s": rec["train_s"],
            "eval_s": time.perf_counter() - t1, "val_mse_xyz": rec["val_mse_move"],
            "val_gripper_sign_acc": rec["val_gripper_sign_acc"], "train_mse_xyz": rec["train_mse_move"],
            "train_frames": rec["train_frames"], "train_episodes": rec["train_episodes"],
            "held_out_episodes": rec["held_out_episodes"], "failures": fails, "manifest": str(res.manifest)}


def save_best(src_manifest, dst, stem):
    """Copies a policy (ONNX + manifest) under a new name, e.g. into models/policies/."""
    dst.mkdir(parents=True, exist_ok=True)
    src = Path(src_manifest)
    onnx = src.with_suffix(".onnx")
    shutil.copy(onnx, dst / f"{stem}.onnx")
    (dst / f"{stem}.toml").write_text(src.read_text().replace(f'"{onnx.name}"', f'"{stem}.onnx"'))


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
    cfg = {"features": args.features, "gripper": args.gripper, "hidden": args.hidden, "depth": args.depth,
           "steps": args.steps, "batch": args.batch, "lr": args.lr, "eval_episodes": args.eval_episodes,
           "eval_seed": args.eval_seed}
    print(json.dumps(cfg))
    seeds = [int(s) for s in args.train_seeds.split(",")]
    jobs = [(s, ds, cfg, exe, work / "policies", args.task) for s in seeds]
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
        save_best(best["manifest"], ROOT / args.save_best, f"{args.task}-bc")
        print(f"best policy (seed {best['seed']}) -> {args.save_best}")
    first = runs[0]
    report = {
        "dataset": {"task": args.task, "episodes": args.episodes, "degraded_fraction": 0.0, "seed": args.data_seed,
                    "train_episodes": first["train_episodes"], "held_out_episodes": first["held_out_episodes"],
                    "train_frames": first["train_frames"], "record_s": t_rec},
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
    md = f"""# Plain BC on clean {args.task} demonstrations

Measured by `benches/bc_rabc.py --clean` ({report['wall_s'] / 60:.1f} min wall on this machine's shared cores).

- **Data:** `stagewise record --task {args.task} --episodes {args.episodes} --degraded 0 --seed {args.data_seed}`
  (8x8 images, unused): {report['dataset']['train_frames']} frames of {report['dataset']['train_episodes']}
  successful episodes for training, {report['dataset']['held_out_episodes']} episodes held out for the action error.
- **Policy:** `python -m stagewise.bc --mode bc --successful-only --holdout 0.1`: features `{args.features}`, MLP
  {args.depth}x{args.hidden}, gripper `{args.gripper}`; Adam lr {args.lr} (cosine), {args.steps} steps of batch
  {args.batch}; one torch thread per training seed.
- **Evaluation:** `stagewise eval policy`, {args.eval_episodes} fresh seeds ({args.eval_seed}..).

| training seed | successes | mean final progress | held-out MSE dx dy dz | gripper sign acc | train s |
|---|---|---|---|---|---|
{rows}

Mean success **{report['mean_success']:.3f}**.
"""
    Path(str(out) + ".md").write_text(md)
    print(md)


# ---------------------------------------------------------------------------------------------------------------
# RA-BC on mostly degraded demonstrations (issue 18, part 2), the package's recipe for every arm.
# ---------------------------------------------------------------------------------------------------------------

ARMS = ["BC", "RA-BC model", "RA-BC oracle"]
ORACLE_PROGRESS = "oracle_progress.parquet"


def write_oracle_progress(ds: Path, path: Path):
    """A sarm_progress-format file of the ground-truth `progress_gt` column (the oracle arm's progress)."""
    f = load_frames(ds, ["progress_gt"])
    pq.write_table(pa.table({"index": f.index, "episode_index": f.episode, "frame_index": f.frame,
                             "progress_sparse": f.extra["progress_gt"].astype(np.float32)}), path)


def load_rabc(ds: Path, work: Path, chunk, kappa):
    """Every frame (failed episodes included, last frames left out as the package does) with the model's and the
    oracle's RA-BC weights as stagewise.bc computes them; and the max |diff| of the model's weights against
    `stagewise label --weights-csv` (core's RabcWeights on the same progress)."""
    f = load_frames(ds, ["degraded", "progress_gt"])
    p_model = load_progress(ds / "sarm_progress.parquet", f, "progress_sparse")
    p_oracle = load_progress(work / ORACLE_PROGRESS, f, "progress_sparse")
    w_model, _ = rabc_weights(p_model, f.episode, f.frame, chunk, kappa)
    w_oracle, _ = rabc_weights(p_oracle, f.episode, f.frame, chunk, kappa)
    with open(work / "weights.csv") as fh:
        lab = {int(r["index"]): float(r["weight"]) for r in csv.DictReader(fh)}
    w_label = np.array([lab[int(i)] for i in f.index], dtype=np.float32)
    check = float(np.abs(w_label - w_model).max())
    keep = ~f.last_frames()
    data = {"state": f.state, "action": f.action, "episode": f.episode, "frame": f.frame,
            "degraded": f.extra["degraded"], "progress": p_model, "progress_gt": p_oracle,
            "w_model": w_model, "w_oracle": w_oracle}
    return {k: v[keep] for k, v in data.items()}, check


def weight_stats(data, meta):
    """Data composition and mean weight per preset (per frame), for both label sources."""
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
    succ_ep = {e["episode_index"] for e in meta if e["success"]}
    from_success = np.isin(data["episode"], list(succ_ep))
    return {
        "frames": int(len(data["state"])),
        "degraded_frames": int((data["degraded"] == 1).sum()),
        "frames_of_failed_episodes": int((~from_success).sum()),
        "weight_share_failed_episodes": {src: float(data[f"w_{src}"][~from_success].sum() / data[f"w_{src}"].sum())
                                         for src in ["model", "oracle"]},
        "mean_weight": {src: float(data[f"w_{src}"].mean()) for src in ["model", "oracle"]},
        "by_preset": dict(sorted(comp.items())),
    }


def rabc_seed_job(job):
    """Train (stagewise.bc, plain or weighted), export and evaluate one (arm, training seed)."""
    arm, seed, ds, work, cfg, exe, pol_dir, task = job
    name = {"BC": "bc", "RA-BC model": "rabc_model", "RA-BC oracle": "rabc_oracle"}[arm] + f"_seed{seed}"
    # Plain BC does not read the labels: one BC folder serves every label configuration of a sweep.
    label_keys = {"resume"} | ({"chunk", "kappa", "label_stride"} if arm == "BC" else set())
    key_cfg = {k: v for k, v in cfg.items() if k not in label_keys}
    if task != "pick-place":  # pick-place keys stay as they were (finished runs are still reused)
        key_cfg["task"] = task
    if arm == "BC":
        pol_dir = pol_dir.parent / "policies-bc"
    done = pol_dir / f"{name}.result.json"
    if cfg["resume"] and done.exists():
        prev = json.loads(done.read_text())
        if prev.get("cfg") == key_cfg:
            print(f"reusing {done}", flush=True)
            return prev["result"]
    labels = "" if arm == "BC" else f" (chunk {cfg['chunk']}, kappa {cfg['kappa']}, label stride {cfg['label_stride']})"
    desc = (f"{arm} on {cfg['degraded']:.0%}-degraded {task} demonstrations{labels}: {cfg['features']} features, "
            f"MLP {cfg['depth']}x{cfg['hidden']}, gripper bce, {cfg['steps']} steps (seed {seed}), benches/bc_rabc.py")
    bc = bc_config(cfg, "bc" if arm == "BC" else "rabc", seed, task)
    progress = work / ORACLE_PROGRESS if arm == "RA-BC oracle" else ds / "sarm_progress.parquet"
    res = train(ds, pol_dir / name, bc, progress=progress, name=name, overwrite=True, description=desc, log=quiet)
    t1 = time.perf_counter()
    r = evaluate(exe, res.manifest, cfg["eval_episodes"], cfg["eval_seed"], pol_dir / f"{name}.json", task)
    out = {"arm": arm, "seed": seed, "success_rate": r["success_rate"], "successes": r["successes"],
           "episodes": r["episodes"], "mean_final_progress": r["mean_final_progress"],
           "train_s": res.record["train_s"], "eval_s": time.perf_counter() - t1, "manifest": str(res.manifest)}
    print(json.dumps(out), flush=True)
    done.write_text(json.dumps({"cfg": key_cfg, "result": out}, indent=2))
    return out


def record_and_label(args, work: Path, ds: Path):
    """Records the demonstrations (or reuses --work's with --reuse-data) and labels them; returns the wall times."""
    presets = ["--presets", args.presets] if args.presets else []
    key = {"episodes": args.episodes, "degraded": args.degraded, "seed": args.data_seed, "presets": args.presets}
    if args.task != "pick-place":  # pick-place keys stay as they were (recorded datasets are still reused)
        key["task"] = args.task
    key = json.dumps(key)
    if args.reuse_data and (work / "data.key").exists() and (work / "data.key").read_text() == key:
        t_rec = float((work / "record_s").read_text())
        print(f"reusing {ds}")
    else:
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        rec_out, t_rec = sh(exe_of(args), "--log", "warn", "record", "--task", args.task, "--episodes",
                            args.episodes, "--degraded", args.degraded, *presets, "--seed", args.data_seed,
                            "--width", 32, "--height", 32, "--out", ds)
        print(rec_out, end="")
        (work / "data.key").write_text(key)
        (work / "record_s").write_text(str(t_rec))
    lab_out, t_lab = sh(exe_of(args), "--log", "warn", "label", "--dataset", ds, "--model", TASK_MODELS[args.task],
                        "--chunk-size", args.chunk, "--kappa", args.kappa, "--stride", args.label_stride,
                        "--weights-csv", work / "weights.csv", "--summary-json", work / "label.json", "--plots", 0,
                        "--provider", "cpu", "--workers", 2)
    print(lab_out, end="")
    write_oracle_progress(ds, work / ORACLE_PROGRESS)
    return t_rec, t_lab


def exe_of(args):
    return Path(args.exe)


def run_rabc(args):
    import concurrent.futures as cf

    work = Path(args.work)
    ds = work / "ds"
    t_all = time.perf_counter()
    cfg = {"degraded": args.degraded, "chunk": args.chunk, "kappa": args.kappa, "label_stride": args.label_stride,
           "hidden": args.hidden, "depth": args.depth, "steps": args.steps, "batch": args.batch, "lr": args.lr,
           "eval_episodes": args.eval_episodes, "eval_seed": args.eval_seed, "resume": args.resume}
    cfg["features"] = args.features
    t_rec, t_lab = record_and_label(args, work, ds)
    data, check = load_rabc(ds, work, args.chunk, args.kappa)
    print(f"stagewise.bc's RA-BC weights vs `stagewise label`'s on the same progress: max |diff| {check:.2e}")
    meta = json.loads((ds / "meta/stagewise_record.json").read_text())["episodes"]
    demo_success = float(np.mean([e["success"] for e in meta]))
    stats = weight_stats(data, meta)
    print(json.dumps(stats, indent=2))

    seeds = [int(s) for s in args.train_seeds.split(",")]
    arms = [a for a in ARMS if a in args.arms.split(",")]
    # BC and RA-BC (model labels) first, seed by seed, then the oracle bound.
    # One policy folder per label configuration, so a sweep in one work dir keeps every condition's policies.
    pol_dir = work / f"policies-chunk{args.chunk}-kappa{args.kappa}-stride{args.label_stride}"
    pol_dir.mkdir(parents=True, exist_ok=True)
    job_cfg = cfg
    jobs = [(arm, s, ds, work, job_cfg, Path(args.exe), pol_dir, args.task)
            for s in seeds for arm in arms if arm != "RA-BC oracle"]
    jobs += [(arm, s, ds, work, job_cfg, Path(args.exe), pol_dir, args.task)
             for s in seeds for arm in arms if arm == "RA-BC oracle"]
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
        save_best(best["manifest"], ROOT / args.save_best, f"{args.task}-rabc")
        print(f"best RA-BC policy (seed {best['seed']}) -> {args.save_best}")
    label_summary = json.loads((work / "label.json").read_text())
    report = {
        "dataset": {"task": args.task, "episodes": args.episodes, "degraded_fraction": args.degraded,
                    "seed": args.data_seed,
                    "presets": args.presets or "all", "demo_success_rate": demo_success, "record_s": t_rec},
        "label": {"model": TASK_MODELS[args.task], "chunk_size": args.chunk, "kappa": args.kappa,
                  "label_wall_s": t_lab, "rabc_summary": label_summary["rabc"]["summary"],
                  "numpy_vs_label_max_abs_diff": check, **stats},
        "training": {k: cfg[k] for k in ["hidden", "depth", "steps", "batch", "lr"]} | {
            "features": job_cfg["features"], "gripper": "bce", "seeds": args.train_seeds, "jobs": args.jobs},
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
    write_rabc_md(args, report, seeds)


def write_rabc_md(args, report, seeds):
    results, mean, ratio = report["results"], report["mean_success"], report["ratio_over_bc"]
    ws, demo_success, tr = report["label"], report["dataset"]["demo_success_rate"], report["training"]
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
        for k, c in ws["by_preset"].items())
    md = f"""# Behaviour cloning with and without RA-BC weights

Measured by `benches/bc_rabc.py` (one run, {report['wall_s'] / 60:.1f} min on this machine's shared CPU cores).

- **Data:** `stagewise record --task {args.task} --episodes {args.episodes} --degraded {args.degraded}{' --presets ' + args.presets if args.presets else ''}`
  (seeds {args.data_seed}.., 32x32 images for the labeller): {ws['degraded_frames']} of {ws['frames']} training
  frames from degraded demonstrations, {ws['frames_of_failed_episodes']} from failed ones; {demo_success:.0%} of the
  demonstrations succeed. Every frame is trained on (failed episodes included).
- **Labels:** `stagewise label` with the shipped `{ws['model']}` (pixels + proprioception, not trained on these seeds),
  label stride {args.label_stride}, RA-BC chunk {args.chunk}, kappa {args.kappa} (LeRobot's formula, stagewise.bc;
  max |diff| against `stagewise label`'s own weights {ws['numpy_vs_label_max_abs_diff']:.1e}): mean weight
  {ws['mean_weight']['model']:.3f}. **Oracle:** the same formula on the ground-truth `progress_gt` column: mean
  weight {ws['mean_weight']['oracle']:.3f}. Share of the total weight on failed episodes: model
  {ws['weight_share_failed_episodes']['model']:.0%}, oracle {ws['weight_share_failed_episodes']['oracle']:.0%}
  (frames: {ws['frames_of_failed_episodes'] / ws['frames']:.0%}).
- **Policy:** `python -m stagewise.bc` for every arm: `{tr['features']}` features, MLP {args.depth}x{args.hidden},
  dx/dy/dz MSE, gripper BCE (exported as +-1), Adam lr {args.lr} (cosine), {args.steps} steps of batch {args.batch},
  one torch thread; RA-BC = each sample's loss times its weight normalised per batch (`w * B / (sum w + eps)`,
  LeRobot). Same data, batches, seeds and steps in every arm; only the weights differ.
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
    data, _ = load_rabc(ds, work, args.chunk, args.kappa)
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
                w, _ = rabc_weights(data[col], data["episode"], data["frame"], chunk, kappa)
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
    ap.add_argument("--out", default="benches/results/bc_rabc")
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
