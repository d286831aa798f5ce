//! `stagewise eval --model M --dataset D`: score every episode of a LeRobot-layout dataset (as written by
//! `stagewise record`, with `progress_gt`/`stage_gt` columns and per-episode `success`) with a reward model and
//! print the quality metrics of DESIGN.md: VOC and VROC (on successful clean episodes), VOC-F1, stage accuracy
//! and progress MAE (all frames), AUROC of the final progress (success vs failure). Writes one PNG per episode:
//! predicted progress (blue) against the ground truth (black) over the ground-truth stage bands, with a strip of
//! frames (one column per sampled step, one row per view) below. Plots carry no text (no font is shipped).
//!
//! Stage-progress models are scored through `RewardModel` (per-episode frame windows, batched across episodes);
//! hop models through `HopModel` and core's `HopFusion` (`s_init` = the episode's first frame, `s_goal` = the
//! last frame of the first successful clean episode of the dataset, the reference goal).

use crate::cmd::ort_args::OrtArgs;
use anyhow::{bail, Context};
use image::RgbImage;
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;
use stagewise_core::metrics;
use stagewise_core::{Observation, View};
use stagewise_dataset::{Dataset, Images};
use stagewise_model::{HopModel, Manifest, ModelKind, RewardModel};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct EvalArgs {
    /// Model manifest (.toml): a stage_progress or hop model.
    #[arg(long, required_unless_present = "policy")]
    pub model: Option<PathBuf>,
    /// Dataset directory (LeRobot layout with progress_gt / stage_gt columns, e.g. from `stagewise record`).
    #[arg(long, required_unless_present = "policy")]
    pub dataset: Option<PathBuf>,
    /// Evaluate a policy instead: a `kind = "policy"` manifest (state in, action out) rolled out headless in the
    /// simulator on `--episodes` fresh seeds from `--seed`; prints the success rate.
    #[arg(long, value_name = "MANIFEST", conflicts_with_all = ["model", "dataset"])]
    pub policy: Option<PathBuf>,
    /// Task for `--policy`: pick-place, push-target or stack.
    #[arg(long, default_value = "pick-place")]
    pub task: String,
    /// Episodes (one seed each) for `--policy`.
    #[arg(long, default_value_t = 100)]
    pub episodes: usize,
    /// First seed for `--policy` (episode i uses seed + i; keep it away from the training seeds).
    #[arg(long, default_value_t = 3_000_000)]
    pub seed: u64,
    /// `--policy`: write the per-episode outcomes and the success rate as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Directory for the per-episode PNGs and summary.json (default: <dataset>/eval-<model file stem>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Score at most this many episodes (the first ones).
    #[arg(long)]
    pub max_episodes: Option<usize>,
    /// Skip the PNGs.
    #[arg(long)]
    pub no_plots: bool,
    /// Episodes scored side by side in one batch.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Replace this camera's frames with mean-colour frames (a missing camera).
    #[arg(long)]
    pub drop_view: Option<String>,
    #[command(flatten)]
    pub ort: OrtArgs,
}

/// One episode ready to score.
pub struct EvalEpisode {
    pub index: usize,
    pub obs: Vec<Observation>,
    pub progress_gt: Vec<f64>,
    pub stage_gt: Vec<usize>,
    pub success: bool,
    pub degraded: bool,
}

/// Model outputs for one episode (forward and reversed playback).
pub struct Scored {
    pub phi: Vec<f64>,
    pub stage: Option<Vec<usize>>,
    pub phi_reversed: Vec<f64>,
}

/// The metrics of DESIGN.md over a set of episodes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub episodes: usize,
    pub expert_successes: usize,
    pub failures: usize,
    pub voc: f64,
    pub voc_min: f64,
    pub vroc: f64,
    pub voc_f1: f64,
    pub stage_accuracy: Option<f64>,
    pub progress_mae: f64,
    pub auroc: Option<f64>,
}

/// Scores stage-progress episodes in batches of `batch` episodes (one env index each).
pub fn score_progress(
    model: &mut RewardModel,
    eps: &[Vec<Observation>],
    batch: usize,
) -> anyhow::Result<Vec<(Vec<f64>, Vec<usize>)>> {
    let mut out = Vec::with_capacity(eps.len());
    for chunk in eps.chunks(batch.max(1)) {
        let mut res: Vec<(Vec<f64>, Vec<usize>)> = chunk
            .iter()
            .map(|e| (Vec::with_capacity(e.len()), Vec::with_capacity(e.len())))
            .collect();
        let max_len = chunk.iter().map(Vec::len).max().unwrap_or(0);
        for t in 0..max_len {
            let envs: Vec<usize> = (0..chunk.len()).filter(|&i| t < chunk[i].len()).collect();
            let obs: Vec<&Observation> = envs.iter().map(|&i| &chunk[i][t]).collect();
            let prog = model.score_envs(&envs, &obs)?;
            for (&i, p) in envs.iter().zip(prog) {
                res[i].0.push(f64::from(p.phi));
                res[i].1.push(p.stage);
            }
        }
        out.extend(res);
    }
    Ok(out)
}

/// The observations in reverse order, renumbered from step 0 (reversed playback for VROC).
pub fn reversed(ep: &[Observation]) -> Vec<Observation> {
    ep.iter()
        .rev()
        .enumerate()
        .map(|(t, o)| Observation {
            step: t as u64,
            time: t as f64 * 0.02,
            views: o.views.clone(),
            state: o.state.clone(),
        })
        .collect()
}

/// Computes the metrics. VOC/VROC over successful clean episodes; stage accuracy and MAE over all frames;
/// AUROC of the final progress over all episodes (needs successes and failures).
pub fn summarise(eps: &[EvalEpisode], scored: &[Scored]) -> anyhow::Result<Summary> {
    let mut vocs = Vec::new();
    let mut vrocs = Vec::new();
    let (mut pred_phi, mut gt_phi, mut pred_k, mut gt_k) = (vec![], vec![], vec![], vec![]);
    let mut finals = Vec::new();
    let mut labels = Vec::new();
    for (e, s) in eps.iter().zip(scored) {
        if e.success && !e.degraded && s.phi.len() >= 2 {
            vocs.push(metrics::voc(&s.phi)?);
            vrocs.push(metrics::vroc(&s.phi_reversed)?);
        }
        pred_phi.extend_from_slice(&s.phi);
        gt_phi.extend_from_slice(&e.progress_gt);
        if let Some(k) = &s.stage {
            pred_k.extend_from_slice(k);
            gt_k.extend_from_slice(&e.stage_gt);
        }
        finals.push(s.phi.clone());
        labels.push(e.success);
    }
    let mean = |v: &[f64]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let voc = mean(&vocs);
    let vroc = mean(&vrocs);
    let auroc = if labels.iter().any(|&l| l) && labels.iter().any(|&l| !l) {
        Some(metrics::final_progress_auroc(&finals, &labels)?)
    } else {
        None
    };
    Ok(Summary {
        episodes: eps.len(),
        expert_successes: vocs.len(),
        failures: labels.iter().filter(|&&l| !l).count(),
        voc,
        voc_min: vocs.iter().copied().fold(f64::INFINITY, f64::min),
        vroc,
        voc_f1: if voc.is_finite() && vroc.is_finite() {
            metrics::voc_f1(voc, vroc)?
        } else {
            f64::NAN
        },
        stage_accuracy: if pred_k.is_empty() {
            None
        } else {
            Some(metrics::stage_accuracy(&pred_k, &gt_k)?)
        },
        progress_mae: metrics::progress_mae(&pred_phi, &gt_phi)?,
        auroc,
    })
}

fn load_episodes(
    ds: &Dataset,
    max: Option<usize>,
    drop_view: Option<&str>,
    mean: [f32; 3],
) -> anyhow::Result<Vec<EvalEpisode>> {
    let n = max.unwrap_or(usize::MAX).min(ds.num_episodes());
    let fps = f64::from(ds.fps().max(1));
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let ep = ds
            .read_episode(i, Images::Decode)
            .with_context(|| format!("reading episode {i}"))?;
        let progress_gt = ep
            .extra("progress_gt")
            .with_context(|| {
                format!("episode {i} has no progress_gt column (record with `stagewise record`)")
            })?
            .to_vec();
        let stage_gt: Vec<usize> = ep
            .extra("stage_gt")
            .with_context(|| format!("episode {i} has no stage_gt column"))?
            .iter()
            .map(|&x| x.max(0.0) as usize)
            .collect();
        let degraded = ep
            .extra("degraded")
            .and_then(|d| d.first().copied())
            .unwrap_or(0.0)
            > 0.5;
        let views: Vec<(String, &[RgbImage])> = ep
            .images
            .iter()
            .map(|(k, v)| {
                let name = k.strip_prefix("observation.images.").unwrap_or(k);
                (name.to_string(), v.as_slice())
            })
            .collect();
        let len = ep.len();
        let mut obs = Vec::with_capacity(len);
        for t in 0..len {
            let views = views
                .iter()
                .map(|(name, frames)| {
                    let mut rgb = frames[t].clone();
                    if drop_view == Some(name.as_str()) {
                        let px = image::Rgb(mean.map(|m| (m * 255.0).round() as u8));
                        rgb.pixels_mut().for_each(|p| *p = px);
                    }
                    View::new(name.clone(), rgb)
                })
                .collect();
            obs.push(Observation {
                step: t as u64,
                time: t as f64 / fps,
                views,
                state: ep.state(t).to_vec(),
            });
        }
        out.push(EvalEpisode {
            index: i,
            obs,
            progress_gt,
            stage_gt,
            success: ep.meta.success.unwrap_or(false),
            degraded,
        });
    }
    Ok(out)
}

const STAGE_COLORS: [RGBColor; 6] = [
    RGBColor(255, 224, 178),
    RGBColor(200, 230, 201),
    RGBColor(187, 222, 251),
    RGBColor(225, 190, 231),
    RGBColor(255, 205, 210),
    RGBColor(220, 220, 220),
];

/// Draws predicted progress (blue) and ground truth (black) over the ground-truth stage bands, with a strip
/// of frames below (one column per sampled step, one row per view).
pub fn plot_episode(ep: &EvalEpisode, s: &Scored, path: &Path) -> anyhow::Result<()> {
    let cols = 8usize;
    let (fw, fh) = ep
        .obs
        .first()
        .and_then(|o| o.views.first())
        .map(|v| (v.rgb.width(), v.rgb.height()))
        .unwrap_or((64, 64));
    let rows = ep.obs.first().map_or(0, |o| o.views.len());
    let strip_w = cols as u32 * (fw + 4);
    let width = strip_w.max(800);
    let plot_h = 300u32;
    let height = plot_h + rows as u32 * (fh + 4) + 8;
    let mut buf = vec![255u8; (width * height * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (width, plot_h)).into_drawing_area();
        root.fill(&WHITE)?;
        let n = ep.progress_gt.len().max(2);
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .build_cartesian_2d(0f64..(n - 1) as f64, -0.02f64..1.05f64)?;
        // stage bands: contiguous runs of the ground-truth stage
        let mut start = 0usize;
        for t in 1..=ep.stage_gt.len() {
            if t == ep.stage_gt.len() || ep.stage_gt[t] != ep.stage_gt[start] {
                let c = STAGE_COLORS[ep.stage_gt[start] % STAGE_COLORS.len()];
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(start as f64, -0.02), (t as f64, 1.05)],
                    c.filled(),
                )))?;
                start = t;
            }
        }
        for y in [0.0, 0.25, 0.5, 0.75, 1.0] {
            chart.draw_series(LineSeries::new(
                [(0.0, y), ((n - 1) as f64, y)],
                RGBColor(170, 170, 170).stroke_width(1),
            ))?;
        }
        chart.draw_series(LineSeries::new(
            ep.progress_gt
                .iter()
                .enumerate()
                .map(|(t, &p)| (t as f64, p)),
            BLACK.stroke_width(2),
        ))?;
        chart.draw_series(LineSeries::new(
            s.phi.iter().enumerate().map(|(t, &p)| (t as f64, p)),
            BLUE.stroke_width(2),
        ))?;
        root.present()?;
    }
    let mut img =
        RgbImage::from_raw(width, height, buf).context("plot buffer has the wrong size")?;
    let len = ep.obs.len();
    for c in 0..cols {
        let t = if cols > 1 {
            c * (len.saturating_sub(1)) / (cols - 1)
        } else {
            0
        };
        let Some(o) = ep.obs.get(t) else { continue };
        for (r, v) in o.views.iter().enumerate() {
            let x = (width - strip_w) / 2 + c as u32 * (fw + 4) + 2;
            let y = plot_h + 4 + r as u32 * (fh + 4);
            image::imageops::replace(&mut img, &v.rgb, i64::from(x), i64::from(y));
        }
    }
    img.save_with_format(path, image::ImageFormat::Png)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn fmt(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        "n/a".into()
    }
}

pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    if let Some(policy) = &args.policy {
        return run_policy(&args, policy);
    }
    let (Some(model_path), Some(dataset)) = (args.model.clone(), args.dataset.clone()) else {
        bail!("--model and --dataset are both required (or --policy)");
    };
    let manifest =
        Manifest::load(&model_path).with_context(|| format!("reading {}", model_path.display()))?;
    let ds = Dataset::open(&dataset)
        .with_context(|| format!("opening dataset {}", dataset.display()))?;
    let mean = manifest.image.as_ref().map_or([0.5; 3], |i| i.mean);
    if let Some(v) = &args.drop_view {
        if !manifest.views.contains(v) {
            bail!(
                "--drop-view {v:?}: the model's views are {:?}",
                manifest.views
            );
        }
    }
    let eps = load_episodes(&ds, args.max_episodes, args.drop_view.as_deref(), mean)?;
    if eps.is_empty() {
        bail!("{} has no episodes", dataset.display());
    }
    let bar = ProgressBar::new(eps.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("scoring [{elapsed_precise}] {wide_bar} {pos}/{len} episodes")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let scored: Vec<Scored> = match manifest.kind {
        ModelKind::StageProgress => {
            let mut model = args.ort.load_reward_model(&model_path)?;
            let mut out = Vec::with_capacity(eps.len());
            for chunk in eps.chunks(args.batch.max(1)) {
                let fwd: Vec<Vec<Observation>> = chunk.iter().map(|e| e.obs.clone()).collect();
                let rev: Vec<Vec<Observation>> = chunk.iter().map(|e| reversed(&e.obs)).collect();
                let f = score_progress(&mut model, &fwd, args.batch)?;
                let r = score_progress(&mut model, &rev, args.batch)?;
                for ((phi, stage), (phi_reversed, _)) in f.into_iter().zip(r) {
                    out.push(Scored {
                        phi,
                        stage: Some(stage),
                        phi_reversed,
                    });
                }
                bar.inc(chunk.len() as u64);
            }
            out
        }
        ModelKind::Hop => {
            let rt = args.ort.runtime()?;
            let mut model = HopModel::load(&model_path, rt, &args.ort.session_options())
                .with_context(|| format!("loading hop model {}", model_path.display()))?;
            let goal = eps
                .iter()
                .find(|e| e.success && !e.degraded)
                .and_then(|e| e.obs.last())
                .context("the dataset has no successful clean episode to take the goal frame from")?
                .clone();
            let mut out = Vec::with_capacity(eps.len());
            for e in &eps {
                let phi = model.fused_progress(&e.obs, &goal)?;
                let phi_reversed = model.fused_progress(&reversed(&e.obs), &goal)?;
                out.push(Scored {
                    phi,
                    stage: None,
                    phi_reversed,
                });
                bar.inc(1);
            }
            out
        }
        ModelKind::Policy => bail!("{} is a policy, not a reward model", model_path.display()),
    };
    bar.finish_and_clear();
    let summary = summarise(&eps, &scored)?;
    println!(
        "model {} on {} ({} episodes: {} clean successes, {} failures)",
        model_path.display(),
        dataset.display(),
        summary.episodes,
        summary.expert_successes,
        summary.failures
    );
    println!(
        "VOC            {} (min {})",
        fmt(summary.voc),
        fmt(summary.voc_min)
    );
    println!("VROC           {}", fmt(summary.vroc));
    println!("VOC-F1         {}", fmt(summary.voc_f1));
    println!(
        "stage accuracy {}",
        summary.stage_accuracy.map_or("n/a".into(), fmt)
    );
    println!("progress MAE   {}", fmt(summary.progress_mae));
    println!("AUROC          {}", summary.auroc.map_or("n/a".into(), fmt));

    let stem = model_path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "model".into());
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| dataset.join(format!("eval-{stem}")));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let json = out.join("summary.json");
    std::fs::write(&json, serde_json::to_string_pretty(&summary)?)
        .with_context(|| format!("writing {}", json.display()))?;
    if !args.no_plots {
        for (e, s) in eps.iter().zip(&scored) {
            plot_episode(e, s, &out.join(format!("episode_{:04}.png", e.index)))?;
        }
        println!("plots and summary.json in {}", out.display());
    }
    Ok(())
}

/// Outcome of one policy episode.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PolicyEpisode {
    pub seed: u64,
    pub success: bool,
    pub steps: u64,
    /// The oracle's progress at the last state.
    pub final_progress: f64,
}

/// Rolls a policy out headless on `--episodes` seeds, all envs in lockstep (one batched policy run per step).
fn run_policy(args: &EvalArgs, path: &Path) -> anyhow::Result<()> {
    use stagewise_core::Env;
    let task: stagewise_sim::Task = args.task.parse()?;
    if args.episodes == 0 {
        bail!("--episodes must be at least 1");
    }
    let cfg = stagewise_sim::SimConfig::headless(task);
    let state_size = stagewise_sim::state_spec(task).names.len();
    let rt = args.ort.runtime()?;
    let mut policy = stagewise_model::PolicyModel::load(
        path,
        state_size,
        stagewise_sim::ACTION_NAMES.len(),
        rt,
        &args.ort.session_options(),
    )
    .with_context(|| format!("loading policy {}", path.display()))?;
    let n = args.episodes;
    let mut envs = Vec::with_capacity(n);
    let mut states = Vec::with_capacity(n);
    for i in 0..n {
        let mut env = stagewise_sim::SimEnv::new(cfg.clone())?;
        let seed = args.seed + i as u64;
        let obs = env
            .reset(seed)
            .with_context(|| format!("resetting seed {seed}"))?;
        states.push(obs.state);
        envs.push(env);
    }
    let mut done: Vec<Option<PolicyEpisode>> = vec![None; n];
    let mut steps = vec![0u64; n];
    let bar = ProgressBar::new(n as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "rolling out [{elapsed_precise}] {wide_bar} {pos}/{len} episodes",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = std::time::Instant::now();
    loop {
        let active: Vec<usize> = (0..n).filter(|&i| done[i].is_none()).collect();
        if active.is_empty() {
            break;
        }
        let batch: Vec<&[f32]> = active.iter().map(|&i| states[i].as_slice()).collect();
        let actions = policy.act(&batch).context("running the policy")?;
        for (&i, a) in active.iter().zip(actions) {
            let r = envs[i]
                .step(&a)
                .with_context(|| format!("stepping seed {}", args.seed + i as u64))?;
            steps[i] += 1;
            if r.terminated || r.truncated {
                done[i] = Some(PolicyEpisode {
                    seed: args.seed + i as u64,
                    success: r.info.success,
                    steps: steps[i],
                    final_progress: r.info.progress_oracle.map_or(f64::NAN, f64::from),
                });
                bar.inc(1);
            }
            states[i] = r.obs.state;
        }
    }
    bar.finish_and_clear();
    let eps: Vec<PolicyEpisode> = done.into_iter().flatten().collect();
    let successes = eps.iter().filter(|e| e.success).count();
    let rate = successes as f64 / n as f64;
    let mean_progress = eps.iter().map(|e| e.final_progress).sum::<f64>() / n as f64;
    println!(
        "policy {} on {task}: {successes}/{n} successes ({:.1}%), mean final oracle progress {:.3}, seeds {}..{} \
         ({:.1} s)",
        path.display(),
        100.0 * rate,
        mean_progress,
        args.seed,
        args.seed + n as u64,
        t0.elapsed().as_secs_f64()
    );
    if let Some(p) = &args.json {
        let json = serde_json::json!({
            "policy": path,
            "task": task.name(),
            "episodes": n,
            "first_seed": args.seed,
            "successes": successes,
            "success_rate": rate,
            "mean_final_progress": mean_progress,
            "per_episode": eps,
        });
        std::fs::write(p, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
