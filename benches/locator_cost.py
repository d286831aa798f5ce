"""What a locator policy costs on this machine (issue 47 item 3): the actor's per-step locator (every view's frame
through the frozen keypoint convs + the MLP, one observation, what `--obs pixels --locator` computes per env step)
and one learner update at batch 256 on the cached (hand, located positions): torch, 1 thread, median of N.

    .venv/bin/python benches/locator_cost.py --locator loc32.pt --locator loc64.pt
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from stagewise.rl.agent import Agent, feature_map  # noqa: E402
from stagewise.rl.config import PROPRIOCEPTION, AgentConfig  # noqa: E402
from stagewise.rl.pixels import LocatedFeatures, PixelSpec  # noqa: E402
from stagewise.training import locator  # noqa: E402


def median_ms(fn, n: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--locator", action="append", required=True, help="a locator file (repeat to compare)")
    ap.add_argument("--repeats", type=int, default=50)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for path in a.locator:
        loc, _ = locator.load(path)
        names = list(PROPRIOCEPTION) + loc.names
        w, b = feature_map(names)
        spec = PixelSpec(loc.views, loc.h, loc.w)
        lf = LocatedFeatures(spec, loc, list(PROPRIOCEPTION), w, b)
        obs = np.random.default_rng(0).integers(0, 256, spec.size + len(PROPRIOCEPTION)).astype(np.float32)
        agent = Agent(list(PROPRIOCEPTION), 4, AgentConfig(), 0, pixels=lf)
        n = 256
        batch = (torch.randn(n, len(names)), torch.rand(n, 4) * 2 - 1, torch.randn(n), torch.randn(n, len(names)),
                 torch.full((n,), 0.97))
        step = median_ms(lambda: lf.conv_features(obs), a.repeats)
        update = median_ms(lambda: agent.update(batch, actor_step=True), a.repeats)
        print(f"{path}: {len(spec.views)} views of {spec.width}x{spec.height}: locator {step:.1f} ms per "
              f"observation; an update at batch 256 {update:.1f} ms ({1e3 / update:.0f} updates/s)")


if __name__ == "__main__":
    main()
