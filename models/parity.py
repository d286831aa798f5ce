#!/usr/bin/env python3
"""Parity check: recomputes what the Rust runtime scored, independently, with Python onnxruntime.

Reads a dump written by the Rust parity test (crates/model/tests/parity.rs): raw RGB8 frames per step and env,
states, step indices and the Rust results. Rebuilds each frame window (first frame repeated at episode start,
stride from the manifest), normalises as the manifest says, runs the model with onnxruntime, and computes
stage probabilities, tau and phi (DESIGN.md "Progress"). Exits non-zero when anything differs by more than --tol.

    .venv/bin/python models/parity.py DUMP_DIR [--tol 1e-5]
"""
import argparse
import json
import os
import sys
import tomllib

import numpy as np
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    meta = json.load(open(os.path.join(args.dump, "meta.json")))
    man_path = meta["manifest"]
    man = tomllib.load(open(man_path, "rb"))
    onnx_path = os.path.join(os.path.dirname(man_path), man["onnx"])
    views, frames, stride, ssize = len(man["views"]), man["frames"], man["stride"], man["state_size"]
    h, w = man["image"]["height"], man["image"]["width"]
    mean = np.array(man["image"]["mean"], dtype=np.float32).reshape(3, 1, 1)
    std = np.array(man["image"]["std"], dtype=np.float32).reshape(3, 1, 1)
    steps, n_env = meta["steps"], meta["envs"]
    raw = np.fromfile(os.path.join(args.dump, "frames.bin"), dtype=np.uint8).reshape(steps, n_env, views, h, w, 3)
    state = np.fromfile(os.path.join(args.dump, "state.bin"), dtype=np.float32).reshape(steps, n_env, ssize)
    step_idx = np.array(meta["step_index"]).reshape(steps, n_env)
    results = meta["results"]

    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    props = np.array(man["stages"]["proportions"], dtype=np.float64)
    props = props / props.sum()
    starts = np.concatenate([[0.0], np.cumsum(props)[:-1]])
    mode = man["stages"].get("progress", "hard")

    def norm(frame):  # HWC uint8 -> CHW f32
        return ((frame.transpose(2, 0, 1).astype(np.float32) / np.float32(255.0)) - mean) / std

    history = [[] for _ in range(n_env)]
    worst = 0.0
    for t in range(steps):
        batch_img, batch_state = [], []
        for e in range(n_env):
            cur = np.stack([norm(raw[t, e, v]) for v in range(views)])  # [V,3,H,W]
            if step_idx[t, e] == 0:
                history[e] = [cur] * ((frames - 1) * stride + 1)
            else:
                history[e] = history[e][1:] + [cur]
            L = len(history[e])
            win = [history[e][L - 1 - (frames - 1 - f) * stride] for f in range(frames)]  # oldest first
            batch_img.append(np.stack(win, axis=1))  # [V,F,3,H,W]
            batch_state.append(state[t, e])
        feeds = {man["inputs"]["images"]: np.stack(batch_img).astype(np.float32)}
        if ssize:
            feeds[man["inputs"]["state"]] = np.stack(batch_state).astype(np.float32)
        logits, tau = sess.run([man["outputs"]["stage_logits"], man["outputs"]["tau"]], feeds)
        for e in range(n_env):
            l = logits[e].astype(np.float64)
            p = np.exp(l - l.max())
            p /= p.sum()
            k = int(np.argmax(l))
            taus = np.atleast_1d(tau[e]).astype(np.float64)
            tk = taus[k] if taus.size > 1 else taus[0]
            if mode == "hard":
                phi = starts[k] + props[k] * np.clip(tk, 0, 1)
            else:
                tt = taus if taus.size > 1 else np.repeat(taus[0], len(props))
                phi = float(np.sum(p * (starts + props * np.clip(tt, 0, 1))))
            phi = float(np.clip(phi, 0, 1))
            r = results[t][e]
            if r["stage"] != k:
                print(f"step {t} env {e}: stage {r['stage']} (rust) != {k} (python)", file=sys.stderr)
                sys.exit(1)
            diffs = [abs(r["tau"] - float(np.clip(tk, 0, 1))), abs(r["phi"] - phi)]
            diffs += list(np.abs(np.array(r["stage_probs"]) - p))
            worst = max(worst, max(diffs))
    print(f"parity: {steps} steps x {n_env} envs, max abs difference {worst:.3e} (tolerance {args.tol:g})")
    sys.exit(0 if worst <= args.tol else 1)


if __name__ == "__main__":
    main()
