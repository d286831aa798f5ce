"""`python -m stagewise.bc --dataset DIR [--progress FILE] --mode bc|rabc --out DIR [...]`: see stagewise.bc.
Flags left out keep the config's defaults (the measured set-up, stagewise.bc.config)."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from .config import FEATURES, GRIPPERS, MODES, BCConfig, NetConfig, RabcConfig, TrainConfig
from .data import BCDataError
from .train import train


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python -m stagewise.bc", description=__doc__, allow_abbrev=False)
    ap.add_argument("--dataset", required=True, help="LeRobot v3 dataset directory")
    ap.add_argument("--mode", required=True, choices=MODES)
    ap.add_argument("--out", required=True, help="policy directory to write (refused if it holds anything)")
    ap.add_argument("--progress", help="progress parquet (default: <dataset>/sarm_progress.parquet)")
    ap.add_argument("--name", help="policy file name stem (default: the --out directory's name)")
    ap.add_argument("--overwrite", action="store_true", help="replace a run in --out")
    ap.add_argument("--task", help="simulator task the policy is for (default: the dataset's record meta)")
    groups = {"net": (NetConfig, {"features": FEATURES, "gripper": GRIPPERS}),
              "train": (TrainConfig, {}), "rabc": (RabcConfig, {})}
    for group, (cls, choices) in groups.items():
        g = ap.add_argument_group(group)
        for f in dataclasses.fields(cls):
            flag = "--" + ("progress-column" if f.name == "column" else f.name.replace("_", "-"))
            if f.type in ("bool", bool):
                g.add_argument(flag, dest=f"{group}.{f.name}", action="store_true", default=None)
            else:
                kind = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]
                g.add_argument(flag, dest=f"{group}.{f.name}", type=kind, choices=choices.get(f.name),
                               metavar=None if f.name in choices else f.name.upper(),
                               help=f"default {f.default}")
    args = vars(ap.parse_args(argv))
    parts = {}
    for group, (cls, _) in groups.items():
        given = {k.split(".", 1)[1]: v for k, v in args.items() if k.startswith(group + ".") and v is not None}
        parts[group] = cls(**given)
    cfg = BCConfig(mode=args["mode"], task=args["task"], **parts)
    return args, cfg


def main(argv=None) -> int:
    args, cfg = parse(argv)
    try:
        cfg.check()
        res = train(args["dataset"], args["out"], cfg, progress=args["progress"], name=args["name"],
                    overwrite=args["overwrite"])
    except (BCDataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"policy: {res.manifest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
