"""Does a frozen encoder say where things are? The features a pixel policy reads with `--encoder-train head`
(every view's frame through the encoder's frozen part, then the hand's position and gripper width) against the
block's and the target's xy, which the recorded simulator state gives (labels of this probe only: never an input,
never a training target of the encoder).

A linear map and a 2-layer MLP are fitted on one recorded dataset's frames and scored on another's (different
episodes, different seeds): R^2 and mean error in cm. The encoder is a keypoint file (.pt, `python -m
stagewise.training keypoints`) or a stage-progress model's manifest (its conv output, what `--encoder-train head`
caches).

    .venv/bin/python benches/probe_keypoints.py --encoder models/keypoints/push-target.pt \\
        --fit data/fit --held-out data/val --out benches/results/probe_keypoints.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "benches"))

from probe_embeddings import fit  # noqa: E402

from stagewise.rl.config import PROPRIOCEPTION  # noqa: E402

LABELS = {"block_xy": ["block0_x", "block0_y"], "target_xy": ["target_x", "target_y"]}


def features(encoder_path: str, root: str, every: int):
    """(features [N, F], state [N, S], state names) of every `every`-th frame of `root`: what the learner's replay
    caches with `--encoder-train head` (PixelFeatures.conv_features: every view's frame through the frozen part,
    then the proprioception)."""
    from stagewise.rl.agent import feature_map
    from stagewise.rl.pixels import PixelFeatures, PixelSpec, frames_vector, load_encoder
    from stagewise.training import data

    ds = data.load(root, stage_names=[], proportions=[])
    images = np.concatenate([e.images[::every] for e in ds.episodes])
    state = np.concatenate([e.state[::every] for e in ds.episodes])
    spec = PixelSpec(ds.views, images.shape[2], images.shape[3])
    w, b = feature_map(list(PROPRIOCEPTION))
    pf = PixelFeatures(spec, load_encoder(encoder_path, spec), w, b, 0, train_convs=False)
    proprio = state[:, [ds.state_names.index(p) for p in PROPRIOCEPTION]]
    feats = np.stack([pf.conv_features(np.concatenate([frames_vector(dict(zip(ds.views, f)), spec), p]))
                      for f, p in zip(images, proprio)])
    return feats, state, ds.state_names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--encoder", required=True, help="a keypoint encoder (.pt) or a stage-progress model manifest")
    ap.add_argument("--fit", required=True, help="recorded dataset the maps are fitted on")
    ap.add_argument("--held-out", required=True, help="recorded dataset they are scored on")
    ap.add_argument("--every", type=int, default=2, help="every n-th frame (default 2)")
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    xtr, str_, names = features(a.encoder, a.fit, a.every)
    xte, ste, names_te = features(a.encoder, a.held_out, a.every)
    result = {"encoder": a.encoder, "fit": a.fit, "held_out": a.held_out, "fit_frames": len(xtr),
              "held_out_frames": len(xte), "features": int(xtr.shape[1]),
              "inputs": f"frozen encoder features of every view + {list(PROPRIOCEPTION)}"}
    for key, cols in LABELS.items():
        ytr = str_[:, [names.index(c) for c in cols]]
        yte = ste[:, [names_te.index(c) for c in cols]]
        result[key] = {"mlp": fit(xtr, ytr, xte, yte, 256, a.epochs), "linear": fit(xtr, ytr, xte, yte, 0, a.epochs),
                       "spread_cm": float(100 * np.linalg.norm(yte - yte.mean(0), axis=1).mean())}
        r = result[key]
        print(f"{key}: MLP R^2 {np.round(r['mlp']['r2'], 3).tolist()} error {r['mlp']['mean_error_cm']:.1f} cm; "
              f"linear R^2 {np.round(r['linear']['r2'], 3).tolist()} error {r['linear']['mean_error_cm']:.1f} cm; "
              f"spread {r['spread_cm']:.1f} cm", flush=True)
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
