"""Do a policy's inputs suffice to act? Behaviour cloning as the probe (issue 47): the same MLP policy cloned from the
same demonstrations on (a) the simulator's state (the state learner's feature map) and (b) a frozen encoder's
output of the camera frames + the hand's position and gripper width (the pixel learner's `--encoder-train head`
input, its per-view linear layer trained with the policy), each exported as the learner exports its policy and run by
`stagewise eval policy` on fresh seeds. A gap between (a) and (b) is what the frozen input costs a policy; no
reward and no critic are involved.

    .venv/bin/python benches/bc_features.py --dataset data/demos --encoder models/keypoints/push-target.pt \\
        --episodes 50 --out benches/results/robot_inputs/bc_features.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))


def demos(root: str):
    """(frames [N, V, H, W, 3], state [N, S], state names, actions [N, A] clipped to [-1, 1], views) of the
    successful, non-degraded episodes of a `stagewise record` dataset, the last frame of each left out (its action
    is zero)."""
    from stagewise.bc.data import load_frames
    from stagewise.training import data

    ds = data.load(root, stage_names=[], proportions=[])
    rows = load_frames(Path(root))  # the actions, in file (= frame) order
    acts = {int(e): rows.action[rows.episode == e] for e in np.unique(rows.episode)}
    keep = [e for e in ds.episodes if e.success and not e.degraded]
    frames = np.concatenate([e.images[:-1] for e in keep])
    state = np.concatenate([e.state[:-1] for e in keep])
    action = np.clip(np.concatenate([acts[e.index][:-1] for e in keep]), -1, 1).astype(np.float32)
    return frames, state, ds.state_names, action, ds.views, len(keep)


def clone(agent, obs: np.ndarray, action: np.ndarray, epochs: int, seed: int) -> float:
    """Trains the actor (and a pixel policy's per-view linear layer) to put tanh(mean) on the demonstrated action."""
    import torch

    params = list(agent.actor.parameters()) + ([p for p in agent.pix.parameters() if p.requires_grad]
                                               if agent.pix is not None else [])
    opt = torch.optim.Adam(params, lr=1e-3)
    x, y = torch.as_tensor(obs), torch.as_tensor(action)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=gen)
        for k in range(0, len(x), 256):
            b = perm[k:k + 256]
            f = agent.features(x[b], augment=True)  # random shifts when the convs train (raw frames)
            loss = (agent.actor(f, deterministic=True)[0] - y[b]).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return loss.item()


def evaluate(binary: str, manifest: Path, episodes: int, seed: int) -> dict:
    report = manifest.with_suffix(".eval.json")
    r = subprocess.run([binary, "--log", "warn", "eval", "policy", "--task", "push-target", "--policy", str(manifest),
                        "--episodes", str(episodes), "--seed", str(seed), "--json", str(report)],
                       capture_output=True, text=True)  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"eval policy {manifest}: {r.stdout}{r.stderr}")
    return json.loads(report.read_text())


def main() -> None:
    import torch

    from stagewise import rl
    from stagewise.rl.agent import Agent, feature_map
    from stagewise.rl.config import PROPRIOCEPTION, AgentConfig
    from stagewise.rl.pixels import PixelFeatures, PixelSpec, frames_vector, load_encoder

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, help="a `stagewise record` push-target dataset (the demonstrations)")
    ap.add_argument("--encoder", required=True, help="keypoint encoder (.pt) or stage-progress model manifest")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--episodes", type=int, default=50, help="evaluation episodes (default 50)")
    ap.add_argument("--seed", type=int, default=7_400_000, help="first evaluation seed")
    ap.add_argument("--train-convs", action="store_true",
                    help="(b) trains the encoder's convs too, on raw frames with random shifts of 2 pixels (DrQ's "
                         "augmentation): a pixel policy cloned end to end")
    ap.add_argument("--skip-state", action="store_true", help="only (b)")
    ap.add_argument("--state-names", default="", help="(a) reads only these state fields (comma-separated; "
                    "default: all), e.g. without the block's orientation")
    ap.add_argument("--save", type=Path, help="keep the (b) policy's exported ONNX + manifest in this directory")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    binary = os.environ.get("STAGEWISE_BIN", str(ROOT / "target" / "debug" / "stagewise"))
    frames, state, names, action, views, n_eps = demos(a.dataset)
    spec = PixelSpec(views, frames.shape[2], frames.shape[3])
    proprio = state[:, [names.index(p) for p in PROPRIOCEPTION]]
    result = {"dataset": a.dataset, "encoder": a.encoder, "episodes_cloned": n_eps, "frames": len(state),
              "epochs": a.epochs, "eval_episodes": a.episodes, "eval_seed": a.seed}
    out = Path(tempfile.mkdtemp(prefix="bc_features_"))
    # (a) the simulator's state
    if not a.skip_state:
        keep = a.state_names.split(",") if a.state_names else names
        result["state_names"] = keep
        agent = Agent(keep, 4, AgentConfig(), 0)
        result["state_loss"] = clone(agent, state[:, [names.index(k) for k in keep]].astype(np.float32), action,
                                     a.epochs, 0)
        m = rl.export_policy(agent, out, "state", task="push-target", state_names=keep, description="BC on state")
        result["state"] = evaluate(binary, m, a.episodes, a.seed)
        print(f"state: BC loss {result['state_loss']:.4f}, success {result['state'].get('success_rate')}", flush=True)
    # (b) the encoder's output of the frames + proprioception: frozen (the replay's cached form) or trained
    w, b = feature_map(list(PROPRIOCEPTION))
    pf = PixelFeatures(spec, load_encoder(a.encoder, spec), w, b, 2 if a.train_convs else 0,
                       train_convs=a.train_convs)
    agent = Agent(list(PROPRIOCEPTION), 4, AgentConfig(), 0, pixels=pf)
    raw = [np.concatenate([frames_vector(dict(zip(views, f)), spec), p]) for f, p in zip(frames, proprio)]
    obs = np.stack(raw if a.train_convs else [pf.conv_features(o) for o in raw]).astype(np.float32)
    key = "trained" if a.train_convs else "frozen"
    result[f"{key}_loss"] = clone(agent, obs, action, a.epochs, 0)
    m = rl.export_policy(agent, a.save or out, key, task="push-target", state_names=list(PROPRIOCEPTION),
                         description=f"BC on a {key} encoder", pixels=spec.manifest())
    result[key] = evaluate(binary, m, a.episodes, a.seed)
    print(f"{key}: BC loss {result[f'{key}_loss']:.4f}, success {result[key].get('success_rate')}", flush=True)
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
