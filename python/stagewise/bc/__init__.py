"""Behaviour cloning (BC) and reward-aligned BC (RA-BC, LeRobot's weighting) of a state policy from a LeRobot v3
dataset and its per-frame progress (`sarm_progress.parquet`, as `stagewise label` writes it):

    python -m stagewise.bc --dataset DIR --mode rabc --out DIR      # or from Python: train(dataset, out, BCConfig())

The output is a policy directory (`<name>.onnx` + `<name>.toml`, `stagewise.export`'s manifest) that
`stagewise eval policy --policy DIR/<name>.toml` and `stagewise run --policy` take, and `training.json`."""

from .config import BCConfig, NetConfig, RabcConfig, TrainConfig
from .data import BCDataError, load_frames, load_progress
from .train import Result, train
from .weights import rabc_weights

__all__ = ["BCConfig", "BCDataError", "NetConfig", "RabcConfig", "Result", "TrainConfig", "load_frames",
           "load_progress", "rabc_weights", "train"]
