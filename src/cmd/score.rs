//! `stagewise score`: load a reward model and score a sequence of frames — recorded PNGs on disk, or a
//! generated sequence — printing per-step progress and writing it to CSV.

use super::ort_args::OrtArgs;
use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use stagewise_core::{Observation, View};
use stagewise_model::{preprocess, synthetic};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct ScoreArgs {
    /// The reward model's manifest.
    #[arg(long, default_value = "models/test/tiny3v.toml")]
    pub model: PathBuf,
    /// A recorded sequence: DIR/<view>/*.png for every view the model takes, frames in file-name order
    /// (one env). Without it a synthetic sequence is generated.
    #[arg(long, value_name = "DIR")]
    pub frames: Option<PathBuf>,
    /// Environments scored together (generated sequences only).
    #[arg(long, default_value_t = 4)]
    pub envs: usize,
    /// Steps per environment (generated sequences only).
    #[arg(long, default_value_t = 100)]
    pub steps: u64,
    /// Per-step results as CSV (env, step, stage, tau, phi, stage probabilities).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub ort: OrtArgs,
}

pub fn run(a: ScoreArgs) -> anyhow::Result<()> {
    let mut model = a.ort.load_reward_model(&a.model)?;
    let m = model.manifest().clone();
    let stage_names = m
        .stages
        .as_ref()
        .map(|s| s.names.clone())
        .unwrap_or_default();
    let (sequences, envs) = match &a.frames {
        Some(dir) => (vec![load_recorded(dir, &m.views, m.state_size)?], 1),
        None => {
            if a.envs == 0 || a.steps == 0 {
                bail!("--envs and --steps must be >= 1");
            }
            (Vec::new(), a.envs)
        }
    };
    let steps = sequences.first().map_or(a.steps, |s| s.len() as u64);
    let (w, h) = m
        .image
        .as_ref()
        .map(|i| (i.width, i.height))
        .unwrap_or((64, 64));
    let mut csv = match &a.out {
        Some(p) => {
            if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            Some(std::io::BufWriter::new(
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
            ))
        }
        None => None,
    };
    if let Some(f) = csv.as_mut() {
        let probs: Vec<String> = stage_names.iter().map(|n| format!("p_{n}")).collect();
        writeln!(f, "env,step,stage,tau,phi,{}", probs.join(","))?;
    }
    let bar = ProgressBar::new(steps * envs as u64).with_style(
        ProgressStyle::with_template(
            "{spinner} scoring [{bar:30}] {pos}/{len} env-steps {per_sec} {msg}",
        )?
        .progress_chars("=> "),
    );
    let mut last = Vec::new();
    let mut phi_sum = 0.0;
    for step in 0..steps {
        let obs: Vec<Observation> = match sequences.first() {
            Some(seq) => vec![seq[step as usize].clone()],
            None => (0..envs as u64)
                .map(|e| synthetic::observation(&m.views, e, step, w, h, m.state_size))
                .collect(),
        };
        let refs: Vec<&Observation> = obs.iter().collect();
        let out = model
            .score(&refs)
            .with_context(|| format!("scoring step {step}"))?;
        for (env, p) in out.iter().enumerate() {
            phi_sum += p.phi as f64;
            if let Some(f) = csv.as_mut() {
                let probs: Vec<String> = p.stage_probs.iter().map(|x| format!("{x:.6}")).collect();
                writeln!(
                    f,
                    "{env},{step},{},{:.6},{:.6},{}",
                    p.stage,
                    p.tau,
                    p.phi,
                    probs.join(",")
                )?;
            }
        }
        bar.set_message(format!("phi[0] {:.3}", out[0].phi));
        bar.inc(envs as u64);
        last = out;
    }
    bar.finish_and_clear();
    if let Some(mut f) = csv {
        f.flush()?;
    }
    println!(
        "scored {steps} steps x {envs} env(s) with {} on {} ({} views, window {} frames, stride {})",
        a.model.display(),
        model.provider(),
        m.views.len(),
        m.frames,
        m.stride
    );
    println!("mean phi {:.4}", phi_sum / (steps as f64 * envs as f64));
    for (env, p) in last.iter().enumerate() {
        let stage = stage_names.get(p.stage).map_or("?", String::as_str);
        println!(
            "env {env}: final stage {stage:<10} tau {:.3} phi {:.4}",
            p.tau, p.phi
        );
    }
    if let Some(p) = &a.out {
        println!("per-step progress written to {}", p.display());
    }
    Ok(())
}

/// Reads DIR/<view>/*.png for every view (same count per view), frames in file-name order. The state is zeros:
/// a PNG sequence carries none.
fn load_recorded(
    dir: &Path,
    views: &[String],
    state_size: usize,
) -> anyhow::Result<Vec<Observation>> {
    let mut per_view = Vec::new();
    for v in views {
        let vdir = dir.join(v);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&vdir)
            .with_context(|| {
                format!(
                    "reading view directory {} (the model takes views {views:?})",
                    vdir.display()
                )
            })?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")))
            .collect();
        files.sort();
        if files.is_empty() {
            bail!("{} holds no .png frames", vdir.display());
        }
        per_view.push(files);
    }
    let n = per_view[0].len();
    if let Some((v, f)) = views.iter().zip(&per_view).find(|(_, f)| f.len() != n) {
        bail!(
            "view {v} has {} frames, view {} has {n}: every view needs one frame per step",
            f.len(),
            views[0]
        );
    }
    (0..n)
        .map(|step| {
            let frames = views
                .iter()
                .zip(&per_view)
                .map(|(v, files)| Ok(View::new(v.clone(), preprocess::load_frame(&files[step])?)))
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok(Observation {
                step: step as u64,
                time: step as f64,
                views: frames,
                state: vec![0.0; state_size],
            })
        })
        .collect()
}
