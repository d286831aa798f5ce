//! `stagewise score`: load a reward model and score a sequence of frames — recorded PNGs on disk, or a
//! generated sequence per env — printing per-step progress and writing it to CSV. Each sequence is scored as one
//! episode by stagewise-model's episode scorer (`stagewise_model::scoring`: the windows the actor builds step by
//! step, in the two-part form when the manifest has one); a sequence is held in memory while it is scored.

use super::ort_args::OrtArgs;
use anyhow::{bail, Context};
use stagewise_core::{Observation, Progress, View};
use stagewise_model::scoring::ObservationFrames;
use stagewise_model::{preprocess, synthetic, EpisodeScorer, Manifest, ModelForm};
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
    let m = Manifest::load(&a.model).with_context(|| format!("reading {}", a.model.display()))?;
    let mut model = EpisodeScorer::from_manifest(
        m.clone(),
        a.ort.runtime()?,
        &a.ort.session_options(),
        ModelForm::Auto,
        BATCH,
    )
    .with_context(|| format!("loading reward model {}", a.model.display()))?;
    let stage_names = m
        .stages
        .as_ref()
        .map(|s| s.names.clone())
        .unwrap_or_default();
    let recorded = match &a.frames {
        Some(dir) => Some(load_recorded(dir, &m.views, m.state_size)?),
        None => {
            if a.envs == 0 || a.steps == 0 {
                bail!("--envs and --steps must be >= 1");
            }
            None
        }
    };
    let envs = if recorded.is_some() { 1 } else { a.envs };
    let steps = recorded.as_ref().map_or(a.steps, |s| s.len() as u64);
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
    let bar = crate::cli::progress_bar(Some(steps * envs as u64), "scoring", "env-steps");
    // Each env's sequence is one episode for stagewise-model's episode scorer (the windows the actor builds
    // step by step; the two-part form when the manifest has one).
    let mut per_env: Vec<Vec<Progress>> = Vec::with_capacity(envs);
    for env in 0..envs {
        let generated;
        let seq = match &recorded {
            Some(seq) => seq,
            None => {
                generated = (0..steps)
                    .map(|step| {
                        synthetic::observation(&m.views, env as u64, step, w, h, m.state_size)
                    })
                    .collect::<Vec<_>>();
                &generated
            }
        };
        let src = ObservationFrames::new(seq, &m.views)?;
        let out = model
            .score_all(&src)
            .with_context(|| format!("scoring env {env}"))?;
        bar.set_message(format!(
            "phi[{env}] {:.3}",
            out.last().map_or(0.0, |p| p.phi)
        ));
        bar.inc(steps);
        per_env.push(out);
    }
    bar.finish_and_clear();
    let mut phi_sum = 0.0;
    if let Some(f) = csv.as_mut() {
        let probs: Vec<String> = stage_names.iter().map(|n| format!("p_{n}")).collect();
        writeln!(f, "env,step,stage,tau,phi,{}", probs.join(","))?;
    }
    for step in 0..steps as usize {
        for (env, out) in per_env.iter().enumerate() {
            let p = &out[step];
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
    }
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
    for (env, out) in per_env.iter().enumerate() {
        let Some(p) = out.last() else { continue };
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

/// Windows per model run.
const BATCH: usize = 64;

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
