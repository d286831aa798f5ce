"""Probe: does a policy trained with `--action-repeat K` (benches/learner_shaping.py) evaluate better when its
actions are also held K steps? learner_shaping.py evaluates every step (as `stagewise eval policy` does).

    STAGEWISE_BIN=target/release/stagewise .venv/bin/python benches/probe_eval_repeat.py \
        --policy DIR/policies/push-target-sparse-0-best.onnx --task push-target --repeats 1,4

Each repeat is evaluated deterministically on the same `--episodes` held-out seeds (`--eval-seed` + i; the
learner's default 7,000,000, never trained on) through a sparse `stagewise serve`, with the task's own episode
length. Prints one line per repeat: success, mean final oracle progress, mean episode length.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stagewise.rl import Envs, evaluate  # noqa: E402
from stagewise import launch  # noqa: E402


class OnnxActor:
    """An exported policy behind learner_shaping.evaluate's `agent.act`."""

    def __init__(self, path: str):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        self.session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    def act(self, obs, deterministic=True):
        return self.session.run(None, {"state": np.asarray(obs, np.float32)})[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", required=True, help="an ONNX policy exported by learner_shaping.py")
    ap.add_argument("--task", default="push-target")
    ap.add_argument("--repeats", default="1,4")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--eval-seed", type=int, default=7_000_000)
    ap.add_argument("--envs", type=int, default=10)
    a = ap.parse_args()
    policy = OnnxActor(a.policy)
    robot = f"probe-{os.getpid()}"
    with launch.serve("--task", a.task, "--reward", "sparse", "--envs", str(a.envs), "--robot-name", robot,
                      "--seed", "0") as srv:
        envs = Envs(srv.endpoint, robot, a.envs, None)
        for k in [int(r) for r in a.repeats.split(",")]:
            r = evaluate(policy, envs, range(a.eval_seed, a.eval_seed + a.episodes), k)
            print(f"{os.path.basename(a.policy)} repeat {k}: success {r['success']:.0%} of {r['episodes']}, "
                  f"final progress {r['final_progress']:.2f}, episode length {r['ep_len']:.0f}", flush=True)
        envs.close()


if __name__ == "__main__":
    main()
