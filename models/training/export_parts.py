"""Adds the two-part export (per-frame encoder + head, DESIGN.md "Two-part models are the fast path") to a progress
model that train.py exported as one graph, without retraining: the weights are read back from the ONNX file.

    .venv/bin/python models/training/export_parts.py models/pick-place/pick-place-progress.toml

Writes <stem>.encoder.onnx and <stem>.head.onnx next to the model, checks that encoder + head reproduce the full
graph, and adds (or replaces) the manifest's [parts] section. train.py does the same for every model it trains.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", help="a stage_progress manifest written by train.py")
    args = ap.parse_args()
    with open(args.manifest, "rb") as f:
        man = tomllib.load(f)
    if man.get("kind") != "stage_progress":
        raise SystemExit(f"{args.manifest}: kind is {man.get('kind')!r}, expected \"stage_progress\"")
    d = os.path.dirname(os.path.abspath(args.manifest))
    onnx_path = os.path.join(d, man["onnx"])
    weights = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy())
               for i in onnx.load(onnx_path).graph.initializer}
    V, F = len(man["views"]), man["frames"]
    H, W = man["image"]["height"], man["image"]["width"]
    K = len(man["stages"]["names"])
    # The encoder's conv widths, from its weights (`enc.conv.<i>.weight` is [out, in, 3, 3]).
    convs = sorted((int(k.split(".")[2]), v.shape[0]) for k, v in weights.items()
                   if k.startswith("enc.conv.") and k.endswith(".weight"))
    model = train.ProgressNet(V, F, H, W, weights["s_mean"].numpy(), weights["s_std"].numpy(), K,
                              chans=tuple(c for _, c in convs) or train.ENC_CHANNELS)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise SystemExit(f"{onnx_path}: not a train.py ProgressNet (missing {missing}, unexpected {unexpected})")
    model.eval()
    rng = np.random.default_rng(0)
    example = (torch.from_numpy(rng.normal(0, 1, (8, V, F, 3, H, W)).astype(np.float32)),
               weights["s_mean"][None].repeat(8, 1) + torch.from_numpy(rng.normal(0, 1, (8, man["state_size"]))
                                                                       .astype(np.float32)) * weights["s_std"])
    train.check_onnx(onnx_path, example, model)  # the rebuilt torch model is the graph
    stem = os.path.splitext(man["onnx"])[0]
    enc, head, emb = train.export_parts(model, onnx_path, example, os.path.join(d, stem))
    with open(args.manifest) as f:
        text = f.read()
    text = text.split("\n[parts]\n")[0].rstrip("\n") + "\n"
    text += (
        f'\n[parts]\nencoder = "{enc}"\nencoder_sha256 = "{train.sha256(os.path.join(d, enc))}"\n'
        f'head = "{head}"\nhead_sha256 = "{train.sha256(os.path.join(d, head))}"\nembedding = {emb}\n'
    )
    with open(args.manifest, "w") as f:
        f.write(text)
    print(f"wrote {enc}, {head} and the [parts] section of {args.manifest}")


if __name__ == "__main__":
    main()
