"""A state learner that does not see some state fields (issue 47's diagnosis): `stagewise learn --obs state` with
the named fields' columns of the policy's and critics' feature map zeroed (agent.feature_map), so the learner reads
the rest exactly as the state learner does. Tells what a field (say the block's orientation) is worth to the
learner, e.g. whether a camera encoder that locates the block but not its yaw can carry the learner.

    STAGEWISE_BIN=target/debug/stagewise .venv/bin/python benches/learn_hiding_state.py \\
        --hide block0_qw,block0_qx,block0_qy,block0_qz,grasped -- --task push-target --reward model \\
        --episode-ends model --demos 20 --steps 150000 --seeds 0 --out benches/results/robot_inputs/push_state_noquat_s0
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from stagewise.rl import __main__ as rl_main  # noqa: E402
from stagewise.rl import agent, envs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hide", default="", help="comma-separated state fields the learner does not see")
    ap.add_argument("--noise", default="", help="comma-separated state fields observed with Gaussian noise (what a "
                    "camera estimate of a position would give), every step anew; the replay check of the "
                    "demonstrations reads the clean state")
    ap.add_argument("--noise-sd", type=float, default=0.015, help="the noise's standard deviation (default 0.015 m)")
    ap.add_argument("learn", nargs=argparse.REMAINDER, help="-- then `stagewise learn` arguments")
    a = ap.parse_args()
    hidden = set(x for x in a.hide.split(",") if x)
    full = agent.feature_map

    def feature_map(names):
        unknown = hidden - set(names)
        if unknown:
            raise SystemExit(f"--hide: {sorted(unknown)} not among the state's fields {names}")
        w, b = full(names)
        w[:, [i for i, n in enumerate(names) if n in hidden]] = 0.0
        return w, b

    agent.feature_map = feature_map  # Agent reads it from its module when it is built
    noisy = [x for x in a.noise.split(",") if x]
    if noisy:
        rng = np.random.default_rng(12345)
        clean_obs = envs.LearnerEnv._obs

        def noisy_obs(self, msg, key):
            o = clean_obs(self, msg, key)
            names = self.feature_names
            unknown = set(noisy) - set(names)
            if unknown:
                raise SystemExit(f"--noise: {sorted(unknown)} not among the state's fields {names}")
            o = np.array(o, np.float32)  # a copy: last_state keeps the clean state
            cols = [names.index(n) for n in noisy]
            o[cols] += rng.normal(0.0, a.noise_sd, len(cols)).astype(np.float32)
            return o

        envs.LearnerEnv._obs = noisy_obs
    learn = [x for x in a.learn if x != "--"]
    try:
        return rl_main.main(learn)
    finally:  # the run's own record (run.json) does not know: say it beside it (after: learn wants an empty --out)
        out = Path(learn[learn.index("--out") + 1]) if "--out" in learn else None
        if out is not None and out.is_dir():
            record = {"hidden": sorted(hidden), "noise": noisy, "noise_sd": a.noise_sd if noisy else 0.0,
                      "by": "benches/learn_hiding_state.py"}
            (out / "hidden_state.json").write_text(json.dumps(record) + "\n")


if __name__ == "__main__":
    sys.exit(main())
