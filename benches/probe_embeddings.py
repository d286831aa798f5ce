"""Does a reward model's frozen encoder say where things are? (issue 47: the policy's visual input.)

Steps `stagewise serve --task T --reward model --embeddings` (32x32 frames, the task's shipped two-part model) with
random actions, each held 4 env steps (random play), and fits a 2-layer MLP and a linear map from what a policy
would read with `stagewise learn --obs embeddings` (every view's embedding, the hand's position and gripper width)
to the block's and the target's xy, which the simulator's state gives (labels only: never an input). Episodes are
split, not frames: the fit never sees a held-out episode. Prints R^2 and the mean error in cm per target and writes
them as JSON.

    .venv/bin/python benches/probe_embeddings.py --task push-target --episodes 60 --out benches/results/probe_embeddings_push.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from stagewise import launch  # noqa: E402
from stagewise.rl.config import PROPRIOCEPTION  # noqa: E402
from stagewise.rl.envs import Envs, reset, step_all  # noqa: E402


def collect(task: str, episodes: int, steps: int, seed: int):
    """[(features [T, F], block xy [T, 2], target xy [T, 2])] per episode."""
    out = []
    with launch.serve("--task", task, "--reward", "model", "--embeddings", "--envs", "4", "--robot-name", "probe",
                      "--width", "32", "--height", "32", "--max-steps", str(steps), die_with_parent=True) as srv:
        envs = Envs(srv.endpoint, "probe", 4, None, srv, obs="embeddings")
        rng = np.random.default_rng(seed)
        try:
            names = list(envs.envs[0].spec_msg["state"]["names"])
            bx, by = names.index("block0_x"), names.index("block0_y")
            tx, ty = names.index("target_x"), names.index("target_y")
            done_eps = 0
            while done_eps < episodes:
                feats, labels = [[] for _ in envs.envs], [[] for _ in envs.envs]
                for i, e in enumerate(envs.envs):
                    o, _ = reset(e, seed + done_eps + i, srv=srv)
                    feats[i].append(o)
                    labels[i].append(e.last_state)
                live = list(range(len(envs.envs)))
                t = 0
                while live:
                    if t % 4 == 0:
                        acts = rng.uniform(-1, 1, (len(envs.envs), 4)).astype(np.float32)
                    for i, (o, _r, term, trunc, _info) in step_all(envs, live, acts).items():
                        feats[i].append(o)
                        labels[i].append(envs.envs[i].last_state)
                        if term or trunc:
                            live.remove(i)
                    t += 1
                for f, lab in zip(feats, labels):
                    s = np.stack(lab)
                    out.append((np.stack(f), s[:, [bx, by]], s[:, [tx, ty]]))
                done_eps += len(envs.envs)
        finally:
            envs.close()
    return out[:episodes]


def fit(xtr, ytr, xte, yte, hidden: int, epochs: int = 300):
    """R^2 and mean error (m) on the held-out set of a 2-layer MLP (hidden > 0) or a linear map."""
    import torch

    torch.manual_seed(0)
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-6
    ym, ys = ytr.mean(0), ytr.std(0) + 1e-6
    xt, yt = torch.tensor((xtr - mu) / sd, dtype=torch.float32), torch.tensor((ytr - ym) / ys, dtype=torch.float32)
    d = xt.shape[1]
    net = torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                              torch.nn.ReLU(), torch.nn.Linear(hidden, 2)) if hidden else torch.nn.Linear(d, 2)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-4)
    for _ in range(epochs):
        perm = torch.randperm(len(xt))
        for k in range(0, len(xt), 512):
            b = perm[k:k + 512]
            loss = ((net(xt[b]) - yt[b]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        pred = net(torch.tensor((xte - mu) / sd, dtype=torch.float32)).numpy() * ys + ym
    r2 = 1 - ((pred - yte) ** 2).sum(0) / ((yte - yte.mean(0)) ** 2).sum(0)
    return {"r2": [float(v) for v in r2], "mean_error_cm": float(100 * np.linalg.norm(pred - yte, axis=1).mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="push-target")
    ap.add_argument("--episodes", type=int, default=60)
    ap.add_argument("--steps", type=int, default=200, help="episode length (default 200)")
    ap.add_argument("--seed", type=int, default=9_000_000)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    os.environ.setdefault("STAGEWISE_BIN", str(ROOT / "target" / "debug" / "stagewise"))
    eps = collect(a.task, a.episodes, a.steps, a.seed)
    split = int(0.7 * len(eps))
    tr, te = eps[:split], eps[split:]
    x = lambda part: np.concatenate([e[0] for e in part])  # noqa: E731
    result = {"task": a.task, "episodes": len(eps), "frames": int(sum(len(e[0]) for e in eps)),
              "fit_episodes": len(tr), "held_out_episodes": len(te), "inputs": f"embeddings + {list(PROPRIOCEPTION)}"}
    for name, k in (("block_xy", 1), ("target_xy", 2)):
        y = lambda part: np.concatenate([e[k] for e in part])  # noqa: E731
        result[name] = {"mlp": fit(x(tr), y(tr), x(te), y(te), 256, a.epochs),
                        "linear": fit(x(tr), y(tr), x(te), y(te), 0, a.epochs),
                        "spread_cm": float(100 * np.linalg.norm(y(te) - y(te).mean(0), axis=1).mean())}
        print(f"{name}: MLP R^2 {result[name]['mlp']['r2']} error {result[name]['mlp']['mean_error_cm']:.1f} cm; "
              f"linear R^2 {result[name]['linear']['r2']}; spread {result[name]['spread_cm']:.1f} cm", flush=True)
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
