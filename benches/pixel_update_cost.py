"""What one learner update costs with each policy input of issue 47: the pixel learner (`--obs pixels`: the
reward model's encoder trained by the critics, random shifts) against frozen embeddings (`--obs embeddings`: 3 x 64
embeddings + 4 proprioception values), the same TD3 Agent (2 critics, 128 x 128 nets), on random data, torch with 2
threads. Repeats alternate the two so that a busy machine slows both alike; report ratios.

    .venv/bin/python benches/pixel_update_cost.py --repeats 2 --out benches/results/pixel_update_cost.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from stagewise.rl.agent import Agent, Replay, feature_map  # noqa: E402
from stagewise.rl.config import PROPRIOCEPTION, AgentConfig  # noqa: E402
from stagewise.rl.pixels import PixelFeatures, PixelSpec, load_encoder  # noqa: E402

MODEL = ROOT / "models/push-target/push-target-progress.toml"


def ms_per_update(agent: Agent, buf: Replay, batch: int, n: int) -> float:
    for _ in range(3):
        agent.update(buf.sample(batch), actor_step=True)
    t = time.perf_counter()
    for k in range(n):
        agent.update(buf.sample(batch), actor_step=k % 2 == 0)
    return (time.perf_counter() - t) / n * 1000


def filled(dim: int, pix: int, rng) -> Replay:
    buf = Replay(1200, dim, 4, pix)
    for _ in range(1000):
        s = np.concatenate([rng.integers(0, 256, pix), rng.random(dim - pix)]).astype(np.float32)
        buf.add(s, rng.uniform(-1, 1, 4), 0.1, s, 0.99)
    return buf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    spec = PixelSpec(["front", "side", "wrist"], 32, 32)
    w, b = feature_map(list(PROPRIOCEPTION))
    frozen_names = [f"emb{i}" for i in range(3 * 64)] + list(PROPRIOCEPTION)
    pix_buf, emb_buf = filled(spec.size + 4, spec.size, rng), filled(len(frozen_names), 0, rng)
    out = {}
    for _ in range(args.repeats):
        for batch in (256, 128):
            pix = Agent(list(PROPRIOCEPTION), 4, AgentConfig(), 0,
                        pixels=PixelFeatures(spec, load_encoder(str(MODEL), spec), w, b, 2))
            out.setdefault(f"pixels_b{batch}_ms", []).append(ms_per_update(pix, pix_buf, batch, args.updates))
            emb = Agent(frozen_names, 4, AgentConfig(), 0)
            out.setdefault(f"frozen_b{batch}_ms", []).append(ms_per_update(emb, emb_buf, batch, args.updates))
    for k, v in out.items():
        print(f"{k}: {', '.join(f'{x:.1f}' for x in v)}")
    if args.out:
        Path(args.out).write_text(json.dumps({"argv": sys.argv, **out}, indent=1))


if __name__ == "__main__":
    main()
