//! Criterion benches for the reward-model step: one robot with 3 views at 96x96 and a window of 4 (the
//! tiny3v test model), per-step latency for one env and batched scoring for 8 and 64 envs; and the shipped
//! pick-place model's two-part step (what the actor runs: one run of the fused step graph on the new frames and
//! the cached embeddings; and the encoder + head form it replaced) next to its single graph's bare
//! `Session::run` on the same window, for 1 and 64 envs. The
//! side-by-side against Python onnxruntime is benches/model_vs_python.py at the workspace root.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use stagewise_core::Observation;
use stagewise_model::preprocess::Normaliser;
use stagewise_model::window::FrameWindow;
use stagewise_model::{synthetic, ModelForm, OrtRuntime, Provider, RewardModel, SessionOptions};
use std::path::PathBuf;
use std::time::Instant;

fn load(manifest: &str, form: ModelForm) -> RewardModel {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(manifest);
    let rt = OrtRuntime::init(None).expect("ONNX Runtime (run scripts/setup.sh)");
    let opts = SessionOptions {
        provider: Provider::Cpu,
        intra_threads: 1,
        tensorrt_cache: None,
    };
    RewardModel::load_as(&path, rt, &opts, form).expect(manifest)
}

fn model() -> RewardModel {
    load("models/test/tiny3v.toml", ModelForm::Auto)
}

/// Synthetic observations, 8 steps per env, at the model's image size.
fn pool(m: &RewardModel, n: usize) -> Vec<Vec<Observation>> {
    let man = m.manifest();
    let img = man.image.clone().expect("image spec");
    (0..n as u64)
        .map(|e| {
            (0..8)
                .map(|s| {
                    synthetic::observation(
                        &man.views,
                        e,
                        s + 1,
                        img.width,
                        img.height,
                        man.state_size,
                    )
                })
                .collect()
        })
        .collect()
}

/// The shipped pick-place model: the actor's two-part step (one run of the fused step graph; and, as before it,
/// the encoder's and the head's runs) against the single graph's bare run.
fn two_part(c: &mut Criterion) {
    const MODEL: &str = "models/pick-place/pick-place-progress.toml";
    let mut group = c.benchmark_group("pick_place");
    for n in [1usize, 64] {
        let mut fused = load(MODEL, ModelForm::TwoPart);
        let mut parts = load(MODEL, ModelForm::TwoPart);
        parts.use_step_graph(false);
        let mut single = load(MODEL, ModelForm::SingleGraph);
        let obs = pool(&fused, n);
        group.throughput(Throughput::Elements(n as u64));
        for (name, model) in [
            ("two_part_step", &mut fused),
            ("two_part_step_unfused", &mut parts),
        ] {
            let mut t = 0usize;
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| {
                    let batch: Vec<&Observation> = obs.iter().map(|e| &e[t % 8]).collect();
                    t += 1;
                    model.score(&batch).expect("score")
                })
            });
        }
        let batch: Vec<&Observation> = obs.iter().map(|e| &e[0]).collect();
        single.score(&batch).expect("score");
        group.bench_with_input(BenchmarkId::new("single_graph_bare_run", n), &n, |b, _| {
            b.iter(|| single.time_bare_run(n).expect("run"))
        });
        if n == 1 {
            print_two_part_ratios(&mut fused, &mut parts, &mut single, &obs[0]);
        }
    }
    group.finish();
}

/// The same three, 1 env, in blocks of 100 steps that take turns (so that a change in the machine's load hits
/// all three alike), 30 blocks each: medians, and the ratios of the medians. Criterion's means take every
/// scheduling stall of a loaded machine; these are the figures for the `<= 0.6x` bar.
fn print_two_part_ratios(
    fused: &mut RewardModel,
    parts: &mut RewardModel,
    single: &mut RewardModel,
    obs: &[Observation],
) {
    let mut times: [Vec<f64>; 5] = Default::default();
    let (mut prep, mut run) = (Vec::new(), Vec::new());
    let mut t = 0usize;
    for _ in 0..30 {
        for which in 0..3 {
            for _ in 0..100 {
                let o = &obs[1 + t % (obs.len() - 1)];
                t += 1;
                let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
                match which {
                    0 | 1 => {
                        let m = if which == 0 { &mut *fused } else { &mut *parts };
                        let t0 = Instant::now();
                        m.score(&[o]).expect("score");
                        times[which].push(us(t0.elapsed()));
                        if which == 0 {
                            prep.push(us(m.last_timing().prepare));
                            run.push(us(m.last_timing().run));
                        }
                        times[3 + which].push(us(m.time_bare_run(1).expect("run")));
                    }
                    _ => {
                        single.score(&[o]).expect("score");
                        times[2].push(us(single.time_bare_run(1).expect("run")));
                    }
                }
            }
        }
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [f, p, s, fb, pb] = times.map(med);
    let (prep, run) = (med(prep), med(run));
    eprintln!(
        "pick-place, 1 env, p50 us: step (fused step graph) {f:.1} [its bare run {fb:.1}], step (encoder + head) \
         {p:.1} [their bare runs {pb:.1}], single graph bare run {s:.1}; step / single bare: fused {:.3}x, \
         encoder + head {:.3}x; of the fused step: prepare (checks, frames, rings) {prep:.1}, run {run:.1}",
        f / s,
        p / s
    );
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
            print_breakdown(&mut m, &obs[0]);
        }
    }
    group.finish();
}

/// Where one env's step goes (medians of 500 steps): criterion times the whole step, this splits it.
fn print_breakdown(m: &mut RewardModel, obs: &[Observation]) {
    let mut parts: [Vec<f64>; 4] = Default::default();
    for t in 0..500 {
        m.score(&[&obs[t % obs.len()]]).expect("score");
        let timing = m.last_timing();
        let bare = m.time_bare_run(1).expect("run");
        for (v, d) in parts
            .iter_mut()
            .zip([timing.prepare, timing.run, timing.finish, bare])
        {
            v.push(d.as_secs_f64() * 1e6);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [p, r, f, b] = parts.each_mut().map(med);
    // The parts of `prepare`: normalising the new frames into the window (stored twice, mirrored ring), and
    // the copy of a window into a batch row (batches only; one env is read in place).
    let man = m.manifest().clone();
    let spec = man.image.clone().expect("image spec");
    let norm = Normaliser::new(&spec);
    let mut window = FrameWindow::new(man.views.len(), norm.frame_len(), man.frames, man.stride);
    let mut row = vec![0.0; window.window_len()];
    let (mut t_norm, mut t_row) = (Vec::new(), Vec::new());
    for t in 0..500 {
        let o = &obs[t % obs.len()];
        let t0 = Instant::now();
        window.begin_step(t == 0);
        for (v, view) in o.views.iter().enumerate() {
            window
                .write_view(v, |slot, mirror| {
                    norm.write_chw_twice(&view.rgb, slot, Some(mirror))
                })
                .expect("normalise");
        }
        if t == 0 {
            window.fill_from_newest();
        }
        let t1 = Instant::now();
        row.copy_from_slice(window.window());
        t_norm.push((t1 - t0).as_secs_f64() * 1e6);
        t_row.push(t1.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(&row);
    }
    eprintln!(
        "prepare parts (median us): normalise {} views into the window {:.1}; batch row copy {:.1}",
        man.views.len(),
        med(&mut t_norm),
        med(&mut t_row)
    );
    eprintln!(
        "step breakdown, 1 env (median us): prepare {p:.1}, run {r:.1}, finish {f:.1}; bare run {b:.1}; \
         (prepare + run + finish) / bare = {:.3}x",
        (p + r + f) / b
    );
}

criterion_group!(benches, bench, two_part);
criterion_main!(benches);
