"""A learning run over seeds: refuse bad inputs before anything starts or is written, then run (or resume) each
seed, keeping <out>/curves.json and curves.png current.

<out>/run.json holds the config, the seeds and the command line of the run in <out>; a new run needs a new or empty
directory, and `resume` must agree with run.json."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from .. import launch
from . import checkpoint as ckpt
from .config import LearnConfig, build
from .envs import Envs
from .progress import Progress
from .train import LearnError, SeedRun, eval_seed_clash


def _flat(d: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_diff(a: LearnConfig, b: LearnConfig) -> List[str]:
    fa, fb = _flat(a.to_dict()), _flat(b.to_dict())
    return [f"{k}: {fa.get(k)!r} vs {fb.get(k)!r}" for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def with_overrides(cfg: LearnConfig, overrides: Dict[str, Any]) -> LearnConfig:
    top, agent, reward = {}, {}, {}
    for k, v in overrides.items():
        group, _, name = k.rpartition(".")
        {"": top, "agent": agent, "reward_form": reward}[group][name] = v
    return dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, **agent),
                               reward_form=dataclasses.replace(cfg.reward_form, **reward), **top)


def resolve(args: Dict[str, Any]):
    """(config, seeds, out) of a parsed command line (cli.parse), checked against what <out> holds."""
    out = Path(args["out"])
    run_file = out / "run.json"
    given = dict(args["overrides"])
    for k in ("task", "reward"):
        if args[k] is not None:
            given[k] = args[k]
    if args["resume"]:
        if not run_file.is_file():
            raise LearnError(f"--resume: {out} holds no run of python -m stagewise.rl (no {run_file})")
        saved = json.loads(run_file.read_text())
        cfg = LearnConfig.from_dict(saved["config"])
        try:
            asked = with_overrides(cfg, given)
        except TypeError as e:
            raise LearnError(f"--resume {out}: {e}") from None
        diff = config_diff(cfg, asked)
        extend = asked.steps > cfg.steps
        if extend:
            # more steps extend the run (finished seeds too): a budget, not a change of recipe
            diff = [d for d in diff if not d.startswith("steps:")]
            saved.setdefault("extended", []).append({"steps": [cfg.steps, asked.steps], "argv": args["argv"]})
            saved["config"]["steps"] = asked.steps
            cfg = asked
        seeds = saved["seeds"]
        if args["seeds"] is not None and list(args["seeds"]) != seeds:
            diff.append(f"seeds: {seeds} vs {list(args['seeds'])}")
        if diff:
            raise LearnError(f"--resume {out}: the run there has another config ({run_file}; saved vs given): "
                             + "; ".join(diff))
        if extend:  # written only once the resume is accepted
            ckpt.write_json(run_file, saved)
        return cfg, seeds, out
    try:
        cfg = build(given.pop("task"), given)
    except (TypeError, ValueError) as e:
        raise LearnError(str(e)) from None
    seeds = list(args["seeds"] or (0,))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if run_file.is_file():
            other = LearnConfig.from_dict(json.loads(run_file.read_text())["config"])
            diff = config_diff(other, cfg)
            what = f"another config ({'; '.join(diff)})" if diff else "this config"
            raise LearnError(f"--out {out} holds a run of {what}: --resume to continue it, or choose another --out "
                             "(nothing was changed)")
        raise LearnError(f"--out {out} exists and is not an empty directory: choose a new or empty one")
    return cfg, seeds, out


def _toml(path: Path) -> Dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise LearnError(f"--model {path}: cannot read the manifest: {e}") from None


def check_model(cfg: LearnConfig, state_names: List[str]) -> None:
    """A reward model for this task whose state fields the env has (before any server loads it)."""
    if cfg.reward != "model" or cfg.model is None:
        return
    path = Path(cfg.model)
    if not path.is_file():
        raise LearnError(f"--model {path}: no such file")
    m = _toml(path)
    if m.get("kind") not in ("stage_progress", "hop"):
        raise LearnError(f"--model {path}: kind is {m.get('kind')!r}, a reward model is stage_progress or hop")
    if m.get("task") is not None and m["task"] != cfg.task:
        raise LearnError(f"--model {path}: a model for task {m['task']!r} (manifest field task), not {cfg.task!r}")
    missing = [n for n in m.get("state_names") or [] if n not in state_names]
    if missing:
        raise LearnError(f"--model {path}: state_names {missing} are not fields of {cfg.task}'s state "
                         f"({', '.join(state_names)})")


def env_state_names(task: str, out: Path) -> List[str]:
    """The task's state field names, from a short-lived sparse server's spec."""
    with launch.serve("--task", task, "--reward", "sparse", "--envs", "1", "--robot-name", "rl-preflight",
                      die_with_parent=True) as srv:
        envs = Envs(srv.endpoint, "rl-preflight", 1, None, srv, patience=120)
        try:
            return list(envs.envs[0].spec_msg["state"]["names"])
        finally:
            envs.close()


def preflight(cfg: LearnConfig, seeds: List[int], out: Path) -> None:
    launch.find_binary()  # a clear error when there is none
    if cfg.from_stream and len(seeds) != 1:
        raise LearnError(f"--from-stream: one learner learns from its actors as one seed, not {seeds}")
    if cfg.serve_endpoint and len(seeds) != 1:
        raise LearnError(f"--serve-endpoint {cfg.serve_endpoint}: one running server trains one seed, not {seeds}")
    clashes = [c for c in (eval_seed_clash(s, cfg) for s in seeds) if c]
    if clashes:
        raise LearnError("; ".join(clashes))
    if cfg.reward == "model" and cfg.model is not None:
        check_model(cfg, env_state_names(cfg.task, out))


def learn(args: Dict[str, Any]) -> List[dict]:
    """Runs (or resumes) every seed; returns the curves.json runs."""
    cfg, seeds, out = resolve(args)
    preflight(cfg, seeds, out)
    out.mkdir(parents=True, exist_ok=True)
    run_file = out / "run.json"
    if not run_file.exists():
        ckpt.write_json(run_file, {"config": cfg.to_dict(), "seeds": seeds, "argv": args["argv"]})
    demos = []
    if cfg.demos > 0:
        from .demos import read_demos, record_demos

        demos = read_demos(record_demos(cfg, str(out)))
    records: Dict[int, dict] = {}
    for seed in seeds:  # finished and started seeds' records from their checkpoints
        path = out / f"seed-{seed}" / "checkpoint.pt"
        if path.exists():
            records[seed] = ckpt.load(path)["record"]
    t0 = time.time()
    for seed in seeds:
        if records.get(seed, {}).get("done") and records[seed].get("env_steps", 0) >= cfg.steps:
            continue
        run = stream_run(cfg, seed, out) if cfg.from_stream else SeedRun(cfg, seed, out, demos)
        start = records.get(seed, {}).get("env_steps", 0)
        bar = Progress(cfg.steps, f"{cfg.task} {cfg.reward} seed {seed}", start=start)
        run.report = bar.update

        def saved(record, seed=seed):
            records[seed] = record
            write_curves(out, cfg, args["argv"], [records[s] for s in seeds if s in records])

        run.on_checkpoint = saved
        run.on_evaluate = lambda c, seed=seed, bar=bar: bar.write(
            f"  {cfg.task} {cfg.reward} seed {seed} step {c['steps']:>7} wall {c['wall_s']:>5.0f}s  eval "
            f"{c['success']:.0%} prog {c['final_progress']:.2f} len {c['ep_len']:.0f}  train "
            f"{c['train_success']:.0%} Q {c['q']:.2f}")
        try:
            records[seed] = run.run(resume=seed in records)
        finally:
            bar.close()
    runs = [records[s] for s in seeds]
    write_curves(out, cfg, args["argv"], runs, wall_s=time.time() - t0)
    print(f"{cfg.task} {cfg.reward}: evaluated success by env steps (k: success); policies under {out}/seed-*/policy/")
    for r in runs:
        print(f"  seed {r['seed']:>3}  " + " ".join(f"{c['steps'] // 1000}k:{c['success']:.0%}" for c in r["checkpoints"])
              + f"   ({r['s_per_10k']:.0f} s per 10k steps; first >= 80%: {r['first_80']})")
    return runs


def stream_run(cfg: LearnConfig, seed: int, out: Path):
    """The StreamRun of `--from-stream`: its robots, endpoint and signing key."""
    from .stream_learn import StreamRun

    robots = [r for r in cfg.robots.split(",") if r] or [f"actor-{i}" for i in range(cfg.actors)]
    if cfg.actors and len(robots) != cfg.actors:
        raise LearnError(f"--robots names {len(robots)} actors, --actors starts {cfg.actors}")
    secret = None
    if cfg.policy_secret_file:
        try:
            secret = Path(cfg.policy_secret_file).read_text().strip()
            bytes.fromhex(secret)
        except (OSError, ValueError) as e:
            raise LearnError(f"--policy-secret-file {cfg.policy_secret_file}: not a readable hex key ({e})") from None
    elif cfg.actors:
        import secrets

        secret = secrets.token_bytes(32).hex()  # this run's own: the actors it starts get its public key
    return StreamRun(cfg, seed, out, robots, cfg.stream_connect, secret, actors=cfg.actors,
                     actor_envs=cfg.actor_envs, hz=cfg.actor_hz, push_every=cfg.push_every)


def write_curves(out: Path, cfg: LearnConfig, argv: List[str], runs: List[dict], wall_s=None) -> None:
    doc = {"config": cfg.to_dict(), "argv": argv, "runs": runs}
    if wall_s is not None:
        doc["wall_s"] = wall_s
    ckpt.write_json(out / "curves.json", doc)
    try:
        from .plot import plot, title_of

        plot(runs, title_of(cfg.to_dict()), out / "curves.png", cfg.eval_episodes)
    except ImportError as e:
        print(f"no curves.png ({e}): install the [learn] extra (matplotlib)", file=sys.stderr)
