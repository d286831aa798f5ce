#!/usr/bin/env bash
# GPU figures (issue 20 item 10): the CUDA and TensorRT execution providers of `onnxruntime-gpu` against the CPU
# provider, with the shipped models: parity of the scores, step p50/p99 for 1 and 64 envs (`stagewise bench`), and
# the TensorRT engine cache (first start builds the engines, the second loads them).
#
#   ./scripts/gpu-check.sh                 # results in out/gpu-check/gpu_check.{json,md}
#   OUT=/some/dir ./scripts/gpu-check.sh
#
# Needs an NVIDIA GPU and its driver (nvidia-smi). Everything else comes from PyPI, pinned, into .venv-gpu (its own
# venv: onnxruntime-gpu and the CPU wheel in .venv share the module name `onnxruntime`): onnxruntime-gpu 1.31.1
# (built for CUDA 13, cuDNN 9, TensorRT 10; ../shared/DEPENDENCY-FACTS.md) and those runtime libraries. For a try
# without a GPU, GPU_CHECK_PROVIDERS=cpu runs the measuring part on the CPU wheel of .venv.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/out/gpu-check}"
providers="${GPU_CHECK_PROVIDERS:-cpu,cuda,tensorrt}"
mkdir -p "$out"

if [ "$providers" != "cpu" ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi not found): nothing to measure" >&2
  exit 2
fi
./scripts/setup.sh
# STAGEWISE_BIN: a stagewise binary already built (else the release build of this checkout).
bin="${STAGEWISE_BIN:-}"
if [ -z "$bin" ]; then
  cargo build --release --bin stagewise
  target="${CARGO_TARGET_DIR:-$root/target}"
  case "$target" in /*) ;; *) target="$root/$target" ;; esac
  bin="$target/release/stagewise"
fi

if [ "$providers" = "cpu" ]; then
  ort_lib="$(ls "$root"/.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* | head -n 1)"
else
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt"
  venv="$root/.venv-gpu"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  [ -x "$venv/bin/uv" ] || "$venv/bin/pip" install --quiet --disable-pip-version-check uv==0.13.9
  "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" \
    onnxruntime-gpu==1.31.1 numpy==2.3.5 \
    nvidia-cuda-runtime==13.2.86 nvidia-cublas==13.4.1.3 nvidia-cufft==12.2.0.57 nvidia-curand==10.4.5.25 \
    nvidia-cuda-nvrtc==13.2.86 nvidia-nvjitlink==13.5.37 nvidia-cudnn-cu13==9.26.0.51 \
    tensorrt-cu13-libs==10.16.1.11
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # The provider libraries dlopen CUDA, cuDNN and TensorRT by soname: put the wheels' lib folders on the path.
  libdirs="$({ find "$site/nvidia" "$site/tensorrt_libs" -name 'lib*.so*' -printf '%h\n' 2>/dev/null || true; } | sort -u | paste -sd:)"
  export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  ort_lib="$(ls "$site"/onnxruntime/capi/libonnxruntime.so.* | head -n 1)"
fi
export ORT_DYLIB_PATH="$ort_lib"

models=(models/pick-place/pick-place-progress.toml models/stack/stack-progress.toml)
for m in "${models[@]}"; do
  name="$(basename "$m" .toml)"
  for p in ${providers//,/ }; do
    cache="$out/trt-cache-$name"
    [ "$p" = tensorrt ] && rm -rf "$cache"
    # Speed; for TensorRT the first start (engines built into an empty cache) and the second (cache loaded).
    for start in first second; do
      t0=$(date +%s.%N)
      "$bin" --log warn bench --model "$m" --provider "$p" --envs 1,64 --steps 500 --json --trt-cache "$cache" \
        > "$out/bench-$name-$p-$start.json"
      t1=$(date +%s.%N)
      echo "{\"t0\": $t0, \"t1\": $t1}" > "$out/bench-$name-$p-$start.wall.json"
      [ "$p" = tensorrt ] || break
    done
    # Parity: the same generated sequence (fixed seed inside `score`) scored by each provider (after the
    # benches, so that the TensorRT cache is empty at their first start).
    "$bin" --log warn score --model "$m" --envs 4 --steps 100 --provider "$p" --trt-cache "$cache" \
      --out "$out/score-$name-$p.csv"
  done
done

"$root/.venv/bin/python" - "$out" "$providers" "${models[@]}" <<'PY'
import csv, json, sys
from pathlib import Path

out, providers, models = Path(sys.argv[1]), sys.argv[2].split(","), sys.argv[3:]
gpu = (out / "gpu.txt").read_text().strip() if (out / "gpu.txt").exists() else "none (CPU only)"
report = {"gpu": gpu, "models": {}}
rows = []
for m in models:
    name = Path(m).stem
    cpu = list(csv.DictReader(open(out / f"score-{name}-cpu.csv")))
    r = report["models"][name] = {}
    for p in providers:
        other = list(csv.DictReader(open(out / f"score-{name}-{p}.csv")))
        assert len(other) == len(cpu), f"{name} {p}: {len(other)} rows vs {len(cpu)} on cpu"
        diff = max(abs(float(a["phi"]) - float(b["phi"])) for a, b in zip(cpu, other))
        stage = sum(a["stage"] != b["stage"] for a, b in zip(cpu, other))
        e = r[p] = {"max_abs_phi_diff_vs_cpu": diff, "stage_disagreements": stage, "rows": len(cpu)}
        for start in ["first", "second"]:
            f = out / f"bench-{name}-{p}-{start}.json"
            if not f.exists():
                continue
            b = json.loads(f.read_text())
            t = json.loads((out / f"bench-{name}-{p}-{start}.wall.json").read_text())
            w = t["t1"] - t["t0"]
            e[start] = {"wall_s": w, "step_ms": b["step_ms"], "throughput": b["throughput"]}
        fst = e["first"]
        tput = {t["envs"]: t["env_steps_per_s"] for t in fst["throughput"]}
        rows.append(f"| {name} | {p} | {diff:.2e} | {stage} | {fst['step_ms']['p50']:.3f} / {fst['step_ms']['p99']:.3f} | "
                    f"{tput.get(1, float('nan')):.0f} | {tput.get(64, float('nan')):.0f} | {fst['wall_s']:.1f}"
                    + (f" / {e['second']['wall_s']:.1f}" if "second" in e else "") + " |")
(out / "gpu_check.json").write_text(json.dumps(report, indent=2))
md = f"""# GPU check (scripts/gpu-check.sh)

GPU: {gpu}

| model | provider | max abs phi diff vs CPU | stage disagreements | 1-env step p50 / p99 ms | env-steps/s at 1 env | at 64 envs | bench wall s (TensorRT: first / second start) |
|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + "\n"
(out / "gpu_check.md").write_text(md)
print(md)
PY
