//! Criterion benches for the reward-model step: one robot with 3 views at 96x96 and a window of 4 (the
//! tiny3v test model), per-step latency for one env and batched scoring for 8 and 64 envs. The side-by-side
//! against Python onnxruntime is benches/model_vs_python.py at the workspace root.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use stagewise_core::Observation;
use stagewise_model::{synthetic, OrtRuntime, Provider, RewardModel, SessionOptions};
use std::path::PathBuf;

fn model() -> RewardModel {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/test/tiny3v.toml");
    let rt = OrtRuntime::init(None).expect("ONNX Runtime (run scripts/setup.sh)");
    let opts = SessionOptions {
        provider: Provider::Cpu,
        intra_threads: 1,
        tensorrt_cache: None,
    };
    RewardModel::load(&path, rt, &opts).expect("tiny3v")
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("reward_step");
    for n in [1usize, 8, 64] {
        let mut m = model();
        let views = m.manifest().views.clone();
        let obs: Vec<Vec<Observation>> = (0..n as u64)
            .map(|e| {
                (0..8)
                    .map(|s| synthetic::observation(&views, e, s + 1, 96, 96, 8))
                    .collect()
            })
            .collect();
        group.throughput(Throughput::Elements(n as u64));
        let mut t = 0usize;
        group.bench_with_input(BenchmarkId::new("score", n), &n, |b, _| {
            b.iter(|| {
                let batch: Vec<&Observation> = obs.iter().map(|e| &e[t % 8]).collect();
                t += 1;
                m.score(&batch).expect("score")
            })
        });
        if n == 1 {
            group.bench_function("bare_session_run/1", |b| {
                b.iter(|| m.time_bare_run(1).expect("run"))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
