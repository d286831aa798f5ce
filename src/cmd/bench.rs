//! `stagewise bench`: reward-model speed on synthetic frames: per-step latency against the bare
//! `Session::run` time, and batched throughput. benches/model_vs_python.py runs it beside Python onnxruntime.
//!
//! The model runs in the form the runtime gives it (the two-part form when the manifest has `[parts]`: each step
//! encodes only the new frames and runs the head on cached embeddings). A two-part model is also loaded as its
//! single graph and fed the same observations, so that the step is compared with the single graph's bare
//! `Session::run` on the same window.

use super::ort_args::OrtArgs;
use anyhow::Context;
use stagewise_core::Observation;
use stagewise_model::{synthetic, ModelForm, RewardModel};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The model's manifest.
    #[arg(long)]
    pub model: PathBuf,
    /// Batch sizes (environments scored together) for the throughput runs.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    pub envs: Vec<usize>,
    /// Measured steps per run.
    #[arg(long, default_value_t = 200)]
    pub steps: usize,
    /// Unmeasured steps before each run.
    #[arg(long, default_value_t = 20)]
    pub warmup: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub ort: OrtArgs,
}

/// Distinct synthetic steps per env; the benchmark cycles through them (generating frames is not measured).
const POOL: u64 = 8;

/// Consecutive steps of one form in the 1-env latency measurement before the other form's block.
const BLOCK: usize = 50;

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Batched throughput: env-steps per second for each `--envs` batch size, over `pool(n)`'s observations.
fn throughput(
    model: &mut RewardModel,
    a: &BenchArgs,
    pool: &dyn Fn(usize) -> Vec<Vec<Observation>>,
) -> anyhow::Result<Vec<(usize, f64)>> {
    let mut throughput = Vec::new();
    for &n in &a.envs {
        model.reset_env(0);
        let obs = pool(n);
        let mut measured = Duration::ZERO;
        for t in 0..a.warmup + a.steps {
            let idx = if t == 0 { 0 } else { 1 + (t as u64 - 1) % POOL } as usize;
            let batch: Vec<&Observation> = obs.iter().map(|e| &e[idx]).collect();
            let t0 = Instant::now();
            model.score(&batch)?;
            if t >= a.warmup {
                measured += t0.elapsed();
            }
        }
        throughput.push((n, (n * a.steps) as f64 / measured.as_secs_f64()));
        for e in 0..n {
            model.reset_env(e);
        }
    }
    Ok(throughput)
}

pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.steps >= 1, "--steps must be at least 1 (got 0)");
    anyhow::ensure!(
        a.envs.iter().all(|&n| n >= 1),
        "--envs: every batch size must be at least 1 (got {:?})",
        a.envs
    );
    let mut model = a.ort.load_reward_model(&a.model)?;
    let m = model.manifest().clone();
    // The single graph of a two-part model, for the bare-run reference on the same windows.
    let mut single = match model.form() {
        ModelForm::TwoPart => Some(
            RewardModel::from_manifest_as(
                m.clone(),
                a.ort.runtime()?,
                &a.ort.session_options(),
                ModelForm::SingleGraph,
            )
            .with_context(|| format!("loading the single graph of {}", a.model.display()))?,
        ),
        _ => None,
    };
    let (w, h) = m
        .image
        .as_ref()
        .map(|i| (i.width, i.height))
        .unwrap_or((64, 64));
    let pool = |envs: usize| -> Vec<Vec<Observation>> {
        (0..envs as u64)
            .map(|e| {
                (0..=POOL)
                    .map(|s| synthetic::observation(&m.views, e, s, w, h, m.state_size))
                    .collect()
            })
            .collect()
    };

    // Per-step latency, one env: the full step (preprocess + window + run + progress math) and, right after
    // it on the same buffers, the bare runs; for a two-part model also the single graph's bare Session::run on
    // the same windows (its own step, untimed, builds each window first). The two forms run in alternating
    // blocks of BLOCK consecutive steps, each as an actor running only that model would (interleaved step by
    // step, each graph's weights would evict the other's from the caches before every timed run), and the
    // alternation spreads the machine's load changes over both.
    let obs = pool(1);
    let at = |t: usize| &obs[0][if t == 0 { 0 } else { 1 + (t as u64 - 1) % POOL } as usize];
    let mut step_ms = Vec::new();
    let mut bare_ms = Vec::new();
    let mut single_bare_ms = Vec::new();
    let mut prepare_ms = Vec::new();
    let mut finish_ms = Vec::new();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let total = a.warmup + a.steps;
    for block in (0..total).step_by(BLOCK) {
        let steps = block..(block + BLOCK).min(total);
        for t in steps.clone() {
            let t0 = Instant::now();
            model.score(&[at(t)])?;
            let step = t0.elapsed();
            let timing = model.last_timing();
            let bare = model.time_bare_run(1)?;
            if t >= a.warmup {
                step_ms.push(ms(step));
                bare_ms.push(ms(bare));
                prepare_ms.push(ms(timing.prepare));
                finish_ms.push(ms(timing.finish));
            }
        }
        if let Some(s) = single.as_mut() {
            for t in steps {
                s.score(&[at(t)])?;
                let single_bare = s.time_bare_run(1)?;
                if t >= a.warmup {
                    single_bare_ms.push(ms(single_bare));
                }
            }
        }
    }
    if single.is_none() {
        single_bare_ms.clone_from(&bare_ms);
    }
    for v in [
        &mut step_ms,
        &mut bare_ms,
        &mut single_bare_ms,
        &mut prepare_ms,
        &mut finish_ms,
    ] {
        v.sort_by(f64::total_cmp);
    }

    let throughput = throughput(&mut model, &a, &pool)?;

    let (p50, p99) = (percentile(&step_ms, 0.5), percentile(&step_ms, 0.99));
    let (b50, b99) = (percentile(&bare_ms, 0.5), percentile(&bare_ms, 0.99));
    let (s50, s99) = (
        percentile(&single_bare_ms, 0.5),
        percentile(&single_bare_ms, 0.99),
    );
    let (prep50, fin50) = (percentile(&prepare_ms, 0.5), percentile(&finish_ms, 0.5));
    if a.json {
        let tp: Vec<String> = throughput
            .iter()
            .map(|(n, r)| format!("{{\"envs\":{n},\"env_steps_per_s\":{r:.3}}}"))
            .collect();
        println!(
            "{{\"model\":{:?},\"form\":\"{}\",\"provider\":\"{}\",\"threads\":{},\"steps\":{},\"step_ms\":{{\"p50\":{p50:.4},\"p99\":{p99:.4}}},\"bare_run_ms\":{{\"p50\":{b50:.4},\"p99\":{b99:.4}}},\"single_bare_run_ms\":{{\"p50\":{s50:.4},\"p99\":{s99:.4}}},\"prepare_ms_p50\":{prep50:.4},\"finish_ms_p50\":{fin50:.4},\"throughput\":[{}]}}",
            a.model.display().to_string(),
            model.form(),
            model.provider(),
            a.ort.threads,
            a.steps,
            tp.join(",")
        );
    } else {
        println!(
            "model {}  form {}  provider {}  intra-op threads {}  {} steps",
            a.model.display(),
            model.form(),
            model.provider(),
            a.ort.threads,
            a.steps
        );
        println!("per-step latency, 1 env:  p50 {p50:.3} ms  p99 {p99:.3} ms");
        println!("bare Session::run:        p50 {b50:.3} ms  p99 {b99:.3} ms");
        println!("step / bare (p50):        {:.3}x", p50 / b50);
        if single.is_some() {
            println!("single graph bare run:    p50 {s50:.3} ms  p99 {s99:.3} ms (same windows)");
            println!("step / single bare (p50): {:.3}x", p50 / s50);
        }
        println!("  of the step (p50):      prepare (frames, windows) {prep50:.3} ms  finish (progress math) {fin50:.3} ms");
        for (n, r) in &throughput {
            println!("throughput {n:>3} envs:      {r:>10.1} env-steps/s");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn bench_err(args: &[&str]) -> String {
        let cli =
            Cli::try_parse_from(["bench", "--model", "m.toml"].iter().chain(args)).expect("parses");
        run(cli.bench).expect_err("refused").to_string()
    }

    #[test]
    fn zero_steps_or_an_empty_batch_are_refused_before_anything_loads() {
        assert!(bench_err(&["--steps", "0"]).contains("--steps"));
        assert!(bench_err(&["--envs", "1,0"]).contains("--envs"));
    }
}
