#!/usr/bin/env python3
"""Side by side, in one run: Stagewise's reward-model step (Rust) against Python onnxruntime on the same model,
the same input sizes and the same intra-op thread count.

Measured:
  * per-step latency, 1 env: the full Stagewise step (preprocess new frames + window + run + progress math) and the
    bare Session::run inside the same process; the Python loop a user would write (numpy normalise + window +
    InferenceSession.run), and Python's bare run. For a model with a two-part form (manifest [parts]) Stagewise's
    step is the one the actor runs (one run of the fused step graph on the new frames and the cached embeddings when
    [parts] names one, else the encoder on the new frames and the head on cached embeddings) and it is also compared with
    the bare single-graph Session::run on the same window (target <= 0.6x); Python's bare runs of the two parts
    (encoder on one step's new frames + head) are shown too;
  * batched throughput (env-steps/s) for 1, 8 and 64 environments: Stagewise's full step against the batched Python
    loop a user would write (numpy normalise of every env's new frames + window + one run), and against Python's
    bare run on ready tensors (the easier job: no frames to prepare).
  * achieved GFLOP/s (conv + gemm multiply-adds x2, counted from the graph) next to latency.

    .venv/bin/python benches/model_vs_python.py [--model models/test/tiny3v.toml] [--threads 1] [--steps 200]

The Rust side is `stagewise bench`, whose 1-env loop runs the step and the single graph in alternating blocks of 50
consecutive steps (each form as an actor running only it would; interleaved step by step, each graph ran right
after the other had evicted its weights). Builds target/release/stagewise if needed. Report ratios, not absolute numbers: machines here are shared. The Rust
and the Python measurements alternate (--rounds, default 3: Rust, Python, Rust, Python, ...) and every ratio is the
median of the per-round ratios, so that a change in the machine's load between the two sides does not show up as
a difference between them.
"""
import statistics
import argparse
import json
import os
import subprocess
import sys
import time
import tomllib

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def model_flops(onnx_path, man):
    """Multiply-adds x2 of Conv and Gemm nodes for one env (batch 1), from ONNX shape inference."""
    model = onnx.load(onnx_path)
    v, f = len(man["views"]), man["frames"]
    h, w = man["image"]["height"], man["image"]["width"]
    # fix the batch axis to 1 so every shape is known
    for inp in model.graph.input:
        inp.type.tensor_type.shape.dim[0].dim_value = 1
    model = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        shapes[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    inits = {i.name: list(i.dims) for i in model.graph.initializer}
    flops = 0
    for node in model.graph.node:
        if node.op_type == "Conv":
            wshape = inits[node.input[1]]
            out = shapes.get(node.output[0])
            if out:
                flops += 2 * int(np.prod(out)) * int(np.prod(wshape[1:]))
        elif node.op_type == "Gemm":
            wshape = inits[node.input[1]]
            flops += 2 * wshape[0] * wshape[1]
    return flops


def pct(xs, q):
    xs = sorted(xs)
    return xs[int(round((len(xs) - 1) * q))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models/test/tiny3v.toml"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--envs", default="1,8,64")
    ap.add_argument("--rounds", type=int, default=3, help="alternating Rust/Python rounds")
    ap.add_argument("--exe", help="an already built stagewise binary (default: cargo build --release)")
    args = ap.parse_args()
    envs = [int(x) for x in args.envs.split(",")]

    exe = args.exe or os.path.join(ROOT, "target/release/stagewise")
    if not args.exe:
        subprocess.run(["cargo", "build", "--release", "--bin", "stagewise"], cwd=ROOT, check=True)

    def rust_round():
        return json.loads(subprocess.run(
            [exe, "--log", "warn", "bench", "--model", args.model, "--provider", "cpu", "--threads",
             str(args.threads), "--steps", str(args.steps), "--warmup", str(args.warmup), "--envs", args.envs,
             "--json"],
            cwd=ROOT, check=True, capture_output=True, text=True).stdout)

    man = tomllib.load(open(args.model, "rb"))
    onnx_path = os.path.join(os.path.dirname(args.model), man["onnx"])
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    v, f, stride, s = len(man["views"]), man["frames"], man["stride"], man["state_size"]
    h, w = man["image"]["height"], man["image"]["width"]
    mean = np.array(man["image"]["mean"], dtype=np.float32).reshape(3, 1, 1)
    std = np.array(man["image"]["std"], dtype=np.float32).reshape(3, 1, 1)
    rng = np.random.default_rng(0)
    names = [man["outputs"]["stage_logits"], man["outputs"]["tau"]]

    def feeds(images, n):
        d = {man["inputs"]["images"]: images}
        if s:
            d[man["inputs"]["state"]] = rng.standard_normal((n, s), dtype=np.float32)
        return d

    parts = None
    if "parts" in man:
        d = os.path.dirname(args.model)
        enc = ort.InferenceSession(os.path.join(d, man["parts"]["encoder"]), so, providers=["CPUExecutionProvider"])
        head = ort.InferenceSession(os.path.join(d, man["parts"]["head"]), so, providers=["CPUExecutionProvider"])
        parts = (enc, head, man["parts"]["embedding"])

    def python_round():
        # The Python loop a user would write: normalise the new frames, slide the window, run.
        raw = rng.integers(0, 256, size=(9, v, h, w, 3), dtype=np.uint8)
        hist = [((raw[0].transpose(0, 3, 1, 2).astype(np.float32) / 255.0) - mean) / std] * ((f - 1) * stride + 1)
        loop_ms, bare_ms = [], []
        for t in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            cur = ((raw[t % 9].transpose(0, 3, 1, 2).astype(np.float32) / 255.0) - mean) / std
            hist = hist[1:] + [cur]
            win = np.stack([hist[len(hist) - 1 - (f - 1 - i) * stride] for i in range(f)], axis=1)[None]
            fd = feeds(np.ascontiguousarray(win, dtype=np.float32), 1)
            sess.run(names, fd)
            t1 = time.perf_counter()
            sess.run(names, fd)
            t2 = time.perf_counter()
            if t >= args.warmup:
                loop_ms.append((t1 - t0) * 1e3)
                bare_ms.append((t2 - t1) * 1e3)

        py_tp, py_loop_tp = {}, {}
        for n in envs:
            x = rng.standard_normal((n, v, f, 3, h, w), dtype=np.float32)
            fd = feeds(x, n)
            for _ in range(args.warmup):
                sess.run(names, fd)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                sess.run(names, fd)
            py_tp[n] = n * args.steps / (time.perf_counter() - t0)
            # The batched loop a user would write: normalise every env's new frames (vectorised over envs), slide
            # the windows, one run.
            raw_n = rng.integers(0, 256, size=(4, n, v, h, w, 3), dtype=np.uint8)
            first = ((raw_n[0].transpose(0, 1, 4, 2, 3).astype(np.float32) / 255.0) - mean) / std
            hist = [first] * ((f - 1) * stride + 1)
            elapsed = 0.0
            for t in range(args.warmup + args.steps):
                t0 = time.perf_counter()
                cur = ((raw_n[t % 4].transpose(0, 1, 4, 2, 3).astype(np.float32) / 255.0) - mean) / std
                hist = hist[1:] + [cur]
                win = np.stack([hist[len(hist) - 1 - (f - 1 - i) * stride] for i in range(f)], axis=2)
                sess.run(names, feeds(np.ascontiguousarray(win, dtype=np.float32), n))
                if t >= args.warmup:
                    elapsed += time.perf_counter() - t0
            py_loop_tp[n] = n * args.steps / elapsed

        parts_ms = []
        if parts:
            enc, head, e = parts
            frames = rng.standard_normal((v, 3, h, w), dtype=np.float32)
            emb = rng.standard_normal((1, v, f, e), dtype=np.float32)
            hfeed = {"embeddings": emb}
            if s:
                hfeed[man["inputs"]["state"]] = rng.standard_normal((1, s), dtype=np.float32)
            for t in range(args.warmup + args.steps):
                t0 = time.perf_counter()
                enc.run(None, {"frames": frames})
                head.run(names, hfeed)
                if t >= args.warmup:
                    parts_ms.append((time.perf_counter() - t0) * 1e3)
        return dict(loop_ms=loop_ms, bare_ms=bare_ms, tp=py_tp, loop_tp=py_loop_tp, parts_ms=parts_ms)

    rounds = []
    for _ in range(max(args.rounds, 1)):
        rounds.append((rust_round(), python_round()))

    flops = model_flops(onnx_path, man)
    med = statistics.median
    rust = rounds[-1][0]
    r_step = med(r["step_ms"]["p50"] for r, _ in rounds)
    r_bare = med(r["bare_run_ms"]["p50"] for r, _ in rounds)
    r_single = med(r.get("single_bare_run_ms", r["bare_run_ms"])["p50"] for r, _ in rounds)
    p99 = lambda key: med(r.get(key, r["bare_run_ms"])["p99"] for r, _ in rounds)
    py_loop = med(pct(p["loop_ms"], 0.5) for _, p in rounds)
    py_bare = med(pct(p["bare_ms"], 0.5) for _, p in rounds)
    print(f"model {args.model}: {v} views x {f} frames at {w}x{h}, {flops / 1e6:.1f} MFLOP per env-step (single "
          f"graph), {args.threads} intra-op thread(s), {args.steps} steps x {len(rounds)} alternating rounds, "
          f"provider {rust['provider']}, Stagewise form {rust.get('form', 'single graph')}")
    print(f"{'medians of the rounds':34}{'p50 ms':>10}{'p99 ms':>10}{'GFLOP/s':>10}")
    rows = [
        ("stagewise full step (Rust)", r_step, p99("step_ms")),
        ("stagewise bare run(s), same form", r_bare, p99("bare_run_ms")),
        ("stagewise bare single graph", r_single, p99("single_bare_run_ms")),
        ("python loop (numpy + ort)", py_loop, med(pct(p["loop_ms"], 0.99) for _, p in rounds)),
        ("python bare InferenceSession.run", py_bare, med(pct(p["bare_ms"], 0.99) for _, p in rounds)),
    ]
    if parts:
        rows.append(("python bare encoder + head", med(pct(p["parts_ms"], 0.5) for _, p in rounds),
                     med(pct(p["parts_ms"], 0.99) for _, p in rounds)))
    for name, p50, p99v in rows:
        print(f"{name:34}{p50:>10.3f}{p99v:>10.3f}{flops / (p50 * 1e-3) / 1e9:>10.2f}")

    def ratio(num, den):
        per = [num(r, p) / den(r, p) for r, p in rounds]
        return med(per), " ".join(f"{x:.2f}" for x in per)

    step = lambda r, p: r["step_ms"]["p50"]
    for label, (m, per) in [
        ("full step / bare run, same form (Rust)", ratio(step, lambda r, p: r["bare_run_ms"]["p50"])),
        ("full step / bare single graph (Rust, target <= 0.6 for two-part)",
         ratio(step, lambda r, p: r.get("single_bare_run_ms", r["bare_run_ms"])["p50"])),
        ("bare single graph Rust / Python", ratio(lambda r, p: r.get("single_bare_run_ms", r["bare_run_ms"])["p50"],
                                                  lambda r, p: pct(p["bare_ms"], 0.5))),
        ("python loop / stagewise step", ratio(lambda r, p: pct(p["loop_ms"], 0.5), step)),
    ]:
        print(f"ratio {label}: {m:.3f} (rounds: {per})")
    # Two Python references: the loop a user would write (same work as Stagewise's step), and the bare run of
    # the single graph on ready tensors (no new frames: an upper bound no pipeline reaches).
    print(f"{'throughput env-steps/s (medians)':34}{'stagewise':>12}{'python loop':>14}{'ratio':>8}"
          f"{'python bare':>14}{'ratio':>8}  per-round ratios vs bare")
    for i, entry in enumerate(rust["throughput"]):
        n = entry["envs"]
        ours = med(r["throughput"][i]["env_steps_per_s"] for r, _ in rounds)
        loop = med(p["loop_tp"][n] for _, p in rounds)
        bare = med(p["tp"][n] for _, p in rounds)
        per_loop, _ = ratio(lambda r, p: r["throughput"][i]["env_steps_per_s"], lambda r, p: p["loop_tp"][n])
        per_bare, rounds_bare = ratio(lambda r, p: r["throughput"][i]["env_steps_per_s"], lambda r, p: p["tp"][n])
        print(f"{n:>3} envs{'':27}{ours:>12.1f}{loop:>14.1f}{per_loop:>8.2f}{bare:>14.1f}{per_bare:>8.2f}  {rounds_bare}")


if __name__ == "__main__":
    sys.exit(main())
