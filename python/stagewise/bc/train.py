"""One BC / RA-BC training run: check everything, load the dataset (and its progress for RA-BC), train the MLP,
export it through `stagewise.export` and write the policy directory: `<name>.onnx`, `<name>.toml` (the policy
manifest `stagewise eval policy` and `stagewise run --policy` take) and `training.json` (config, dataset files
and their sha256, weights, losses, held-out errors, wall times)."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional

import numpy as np
import torch

from .config import BCConfig
from .data import (PROGRESS_FILE, BCDataError, load_frames, load_progress, recorded_task, sha256_file,
                   successful_episodes)
from .model import Features, FeatureError, Policy
from .weights import rabc_weights, weight_summary

TRAINING_JSON = "training.json"
HOLDOUT_SEED = 123  # the held-out episodes of the shipped pick-place-bc


@dataclass
class Prepared:
    """What training reads, after every check: states, actions and weights (None for plain BC) of the training
    frames, the held-out frames, and the facts the training record keeps."""

    state: np.ndarray
    action: np.ndarray
    weight: Optional[np.ndarray]
    val_state: np.ndarray
    val_action: np.ndarray
    names: Optional[list]
    task: str
    record: Dict


@dataclass
class Result:
    manifest: Path
    onnx: Path
    training_json: Path
    record: Dict


def check_out(out: Path, name: str, overwrite: bool) -> None:
    """Refuses an output directory that holds anything (another run) unless `overwrite`."""
    if out.exists() and not out.is_dir():
        raise BCDataError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        held = sorted(p.name for p in out.iterdir())[:5]
        raise BCDataError(f"{out}: holds another run ({', '.join(held)}...); pass --overwrite to replace "
                          f"{name}.onnx, {name}.toml and {TRAINING_JSON} there, or choose another --out")


def prepare(dataset: Path, cfg: BCConfig, progress: Optional[Path] = None) -> Prepared:
    """Loads and checks the data; for RA-BC the weights from the progress file (default
    <dataset>/sarm_progress.parquet)."""
    cfg.check()
    dataset = Path(dataset)
    frames = load_frames(dataset)
    task = cfg.task or recorded_task(dataset)
    if task is None:
        raise BCDataError(f"{dataset}: names no task (no meta/stagewise_record.json): say which simulator task "
                          "the policy is for (--task)")
    try:
        Features(frames.state.mean(0), frames.state.std(0), cfg.net.features, frames.state_names, task)
    except FeatureError as e:
        raise BCDataError(f"{dataset / 'meta/info.json'}: {e}") from None
    record = {"dataset": str(dataset.resolve()),
              "files": {str(f.relative_to(dataset)): sha256_file(f) for f in frames.files},
              "frames": int(len(frames.index)), "episodes": int(len(np.unique(frames.episode)))}
    w = None
    if cfg.mode == "rabc":
        path = Path(progress) if progress else dataset / PROGRESS_FILE
        p = load_progress(path, frames, cfg.rabc.column)
        w, delta = rabc_weights(p, frames.episode, frames.frame, cfg.rabc.chunk, cfg.rabc.kappa)
        record["progress"] = {"path": str(path.resolve()), "sha256": sha256_file(path), "column": cfg.rabc.column}
        record["weights"] = weight_summary(w, delta)
    keep = ~frames.last_frames()  # `stagewise record` leaves the last frame's action zero
    if cfg.train.successful_only:
        ok = successful_episodes(dataset)
        keep &= np.isin(frames.episode, ok)
    eps = np.unique(frames.episode[keep])
    if len(eps) == 0:
        raise BCDataError(f"{dataset}: no episodes left to train on (successful_only={cfg.train.successful_only})")
    held = np.zeros(len(keep), dtype=bool)
    if cfg.train.holdout > 0:
        n = max(1, int(len(eps) * cfg.train.holdout + 1e-9))
        if n >= len(eps):
            raise BCDataError(f"{dataset}: holdout {cfg.train.holdout} leaves no training episode of {len(eps)}")
        held = np.isin(frames.episode, np.random.default_rng(HOLDOUT_SEED).choice(eps, n, replace=False)) & keep
    tr = keep & ~held
    record.update(train_frames=int(tr.sum()), train_episodes=int(len(np.unique(frames.episode[tr]))),
                  held_out_episodes=int(len(np.unique(frames.episode[held]))))
    if w is not None:
        record["mean_train_weight"] = float(w[tr].mean())
        if not w[tr].sum() > 0:
            raise BCDataError(f"{dataset}: every training frame has RA-BC weight 0 (nothing to learn from)")
    return Prepared(state=frames.state[tr], action=frames.action[tr], weight=None if w is None else w[tr],
                    val_state=frames.state[held], val_action=frames.action[held], names=frames.state_names,
                    task=task, record=record)


def fit(data: Prepared, cfg: BCConfig, log: Callable[[str], None] = print):
    """Trains the policy (seeded: same seed, same batches in every mode); returns it and the training facts."""
    torch.set_num_threads(cfg.train.threads)
    tc, nc = cfg.train, cfg.net
    torch.manual_seed(tc.seed)
    rng = np.random.default_rng(tc.seed)
    feats = Features(data.state.mean(0), data.state.std(0) + 1e-3, nc.features, data.names, data.task)
    n_in = feats(torch.as_tensor(data.state[:2])).shape[1]
    model = Policy(feats, n_in, nc.hidden, nc.depth, nc.gripper, data.action.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=tc.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, tc.steps)
    s, a = torch.as_tensor(data.state), torch.as_tensor(data.action)
    w = None if data.weight is None else torch.as_tensor(data.weight)
    losses, acc = [], 0.0
    t0 = time.perf_counter()
    for step in range(tc.steps):
        i = torch.as_tensor(rng.integers(0, len(s), tc.batch))
        loss = model.loss(s[i], a[i], None if w is None else w[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        acc += float(loss.detach())
        if (step + 1) % tc.log_every == 0 or step + 1 == tc.steps:
            n = (step % tc.log_every) + 1
            losses.append(acc / n)
            acc = 0.0
            log(f"step {step + 1}/{tc.steps}: loss {losses[-1]:.5f} ({time.perf_counter() - t0:.0f} s)")
    facts = {"train_s": time.perf_counter() - t0, "loss_every": tc.log_every, "losses": losses}
    model.eval()
    with torch.no_grad():
        p = model(s[:20000])
        facts["train_mse_move"] = float(((p[:, :-1] - a[:20000, :-1]) ** 2).mean())
        if len(data.val_state):
            sv, av = torch.as_tensor(data.val_state), torch.as_tensor(data.val_action)
            p = model(sv)
            facts["val_mse_move"] = [float(v) for v in ((p[:, :-1] - av[:, :-1]) ** 2).mean(0)]
            facts["val_gripper_sign_acc"] = float(((p[:, -1] > 0) == (av[:, -1] > 0)).float().mean())
    return model, facts


def export_check(model: Policy, onnx_bytes: bytes, state: np.ndarray) -> Dict[str, float]:
    """Runs the exported graph in ONNX Runtime on training states against the torch policy: the motion to float
    rounding, the gripper's sign wherever the logit is clear of 0. Raises if they disagree."""
    import onnxruntime as ort

    sess = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    x = state[:4096]
    (y,) = sess.run(None, {sess.get_inputs()[0].name: x})
    with torch.no_grad():
        ref = model(torch.as_tensor(x)).numpy()
        logit = model.raw(torch.as_tensor(x))[:, -1].numpy()
    diff = float(np.abs(y[:, :-1] - ref[:, :-1]).max())
    clear = np.abs(logit) > 1e-4 if model.gripper != "mse" else np.ones(len(x), dtype=bool)
    gdiff = float(np.abs(y[clear, -1] - ref[clear, -1]).max()) if clear.any() else 0.0
    if diff > 1e-4 or gdiff > 1e-4:
        raise RuntimeError(f"the exported graph disagrees with the trained policy: max |diff| motion {diff:.3g}, "
                           f"gripper {gdiff:.3g}")
    return {"states": int(len(x)), "max_abs_diff_motion": diff, "max_abs_diff_gripper": gdiff}


def train(dataset: Path, out: Path, cfg: BCConfig = BCConfig(), *, progress: Optional[Path] = None,
          name: Optional[str] = None, overwrite: bool = False, description: Optional[str] = None,
          log: Callable[[str], None] = print) -> Result:
    """Trains one policy from `dataset` into `out` (see the module doc). Every check (config, dataset columns,
    progress file against the dataset, output directory) runs before training; nothing is written on error."""
    from .. import export

    t_all = time.perf_counter()
    out = Path(out)
    name = name or out.resolve().name
    cfg.check()
    check_out(out, name, overwrite)
    data = prepare(dataset, cfg, progress)
    log(f"{cfg.mode}: {data.record['train_frames']} frames of {data.record['train_episodes']} episodes"
        + (f", mean RA-BC weight {data.record['mean_train_weight']:.3f}" if cfg.mode == "rabc" else ""))
    model, facts = fit(data, cfg, log)
    onnx_bytes = export.mlp_to_onnx(model.export_layers(), data.state.shape[1], data.action.shape[1],
                                    output="clip", low=[-1.0] * data.action.shape[1],
                                    high=[1.0] * data.action.shape[1])
    facts["export_check"] = export_check(model, onnx_bytes, data.state)
    nc, tc = cfg.net, cfg.train
    desc = description or (
        f"{'RA-BC' if cfg.mode == 'rabc' else 'BC'} on {Path(dataset).resolve().name}"
        + (f" (chunk {cfg.rabc.chunk}, kappa {cfg.rabc.kappa})" if cfg.mode == "rabc" else "")
        + f": {nc.features} features, MLP {nc.depth}x{nc.hidden}, gripper {nc.gripper}, {tc.steps} steps "
        f"(seed {tc.seed}), python -m stagewise.bc")
    check_out(out, name, overwrite)  # again: another process may have written there meanwhile
    out.mkdir(parents=True, exist_ok=True)
    manifest = export.write_policy(out, name, onnx_bytes, task=data.task, state_size=data.state.shape[1],
                                   action_size=data.action.shape[1], description=desc,
                                   extra={"state_names": data.names} if data.names else None)
    record = {"mode": cfg.mode, "task": data.task, "config": dataclasses.asdict(cfg), **data.record, **facts,
              "policy": {"manifest": Path(manifest).name, "onnx": f"{name}.onnx"},
              "wall_s": time.perf_counter() - t_all}
    tj = out / TRAINING_JSON
    tj.write_text(json.dumps(record, indent=2) + "\n")
    log(f"wrote {manifest} and {tj}")
    return Result(manifest=Path(manifest), onnx=out / f"{name}.onnx", training_json=tj, record=record)
