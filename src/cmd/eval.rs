//! `stagewise eval model --model M --dataset D`: score every episode of a LeRobot-layout dataset (as written by
//! `stagewise record`, with `progress_gt`/`stage_gt` columns and per-episode `success`) with a reward model and
//! print the quality metrics of DESIGN.md: VOC and VROC (on successful clean episodes), VOC-F1, stage accuracy
//! and progress MAE (all frames), AUROC of the final progress (success vs failure), aggregated by
//! `stagewise_core::report` (which also holds the ablations and their table). Writes one PNG per episode:
//! predicted progress (blue) against the ground truth (black) over the ground-truth stage bands, with a strip of
//! frames (one column per sampled step, one row per view) below. Plots carry no text (no font is shipped).
//!
//! This file is argument parsing and IO. Stage-progress models are scored by stagewise-model's episode scorer
//! (`stagewise_model::scoring`: the windows the actor builds, in the two-part form when the manifest has one,
//! `--batch` windows per run; reversed playback for VROC is the same frames last-first); hop models through
//! `HopModel` and core's `HopFusion` (`s_init` = the episode's first frame, `s_goal` = the
//! last frame of the first successful clean episode of the dataset, the reference goal). The model's state fields
//! are taken from the dataset's `observation.state` by name (manifest `state_names`).
//!
//! Ablations (DESIGN.md: a quality bar comes with an ablation a cheating model would fail): `--blank-view V`
//! replaces every frame of view V by the manifest's normalisation mean (`image.mean`, which normalises to zeros:
//! what training's view dropout feeds), `--hold-state F` holds state field F at each episode's first-frame value,
//! and `--ablations` prints the metrics side by side for the data as is, every view blanked, each view blanked,
//! every state field the model reads held, and each `--hold-state` field held.
//!
//! `stagewise eval policy --policy P` is the other job: roll a policy out in the simulator on fresh seeds and
//! print its success rate (and the oracle's final progress): headless, or rendering what the policy reads (a
//! reward model's frames for embeddings, the policy's own views at its size for `[pixels]`).

use crate::cmd::ort_args::OrtArgs;
use crate::plot::{save_png, ProgressPlot, BLACK, BLUE};
use anyhow::{bail, Context};
use image::RgbImage;
use indicatif::ProgressBar;
use stagewise_core::report::{
    ablation_rows, ablation_table, format_metric as fmt, reversed, summarise, Ablation,
    EpisodeScores, EpisodeTruth, Summary,
};
use stagewise_core::{Observation, View};
use stagewise_dataset::{Dataset, Images};
use stagewise_model::scoring::{ObservationFrames, Reversed};
use stagewise_model::{EpisodeScorer, HopModel, Manifest, ModelForm, ModelKind, StateMap};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub command: EvalCommand,
}

/// `eval`'s two jobs.
#[derive(clap::Subcommand, Debug)]
pub enum EvalCommand {
    /// Score a recorded dataset with a reward model: VOC, VROC, VOC-F1, stage accuracy, progress MAE, AUROC,
    /// ablations and one PNG plot per episode.
    Model(Box<ModelEvalArgs>),
    /// Roll a policy out headless in the simulator on fresh seeds and print its success rate.
    Policy(PolicyEvalArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct ModelEvalArgs {
    /// Model manifest (.toml): a stage_progress or hop model.
    #[arg(long)]
    pub model: PathBuf,
    /// Dataset directory (LeRobot layout with progress_gt / stage_gt columns, e.g. from `stagewise record`).
    #[arg(long)]
    pub dataset: PathBuf,
    /// Directory for the per-episode PNGs and summary.json (default: <dataset>/eval-<model file stem>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Score at most this many episodes (the first ones).
    #[arg(long)]
    pub max_episodes: Option<usize>,
    /// Skip the PNGs.
    #[arg(long)]
    pub no_plots: bool,
    /// Windows per model run of a stage-progress model (the single graph's or the head's; a two-part model's
    /// encoder runs at most this many frames at once).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Blank this camera view: every frame replaced by the manifest's normalisation mean colour (`image.mean`,
    /// zeros after normalisation: what training's view dropout feeds; a missing camera). Repeatable or
    /// comma-separated; `--drop-view` is the same flag.
    #[arg(
        long,
        visible_alias = "drop-view",
        value_delimiter = ',',
        value_name = "VIEW"
    )]
    pub blank_view: Vec<String>,
    /// Hold this state field (a name in the dataset's `observation.state`) at each episode's first-frame value.
    /// Repeatable or comma-separated. With --ablations each gets its own row.
    #[arg(long, value_delimiter = ',', value_name = "FIELD")]
    pub hold_state: Vec<String>,
    /// Print the metrics side by side for: the data as is, every view blanked, each view blanked, every state
    /// field the model reads held, and each --hold-state field held (what does the model read?). Also writes
    /// ablations.json to the output directory; plots and summary.json are of the data as is.
    #[arg(long, conflicts_with = "blank_view")]
    pub ablations: bool,
    #[command(flatten)]
    pub ort: OrtArgs,
}

#[derive(clap::Args, Debug, Clone)]
pub struct PolicyEvalArgs {
    /// A `kind = "policy"` manifest (state in, action out), rolled out in the simulator on `--episodes` fresh
    /// seeds from `--seed` (headless unless it reads frames: a `[pixels]` policy's views are rendered at its
    /// size).
    #[arg(long, value_name = "MANIFEST")]
    pub policy: PathBuf,
    /// Simulated task.
    #[arg(long, default_value = "pick-place", value_parser = crate::cli::task_parser())]
    pub task: stagewise_sim::Task,
    /// Episodes (one seed each).
    #[arg(long, default_value_t = 100)]
    pub episodes: usize,
    /// First seed (episode i uses seed + i; keep it away from the training seeds).
    #[arg(long, default_value_t = 3_000_000)]
    pub seed: u64,
    /// Write the per-episode outcomes and the success rate as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// For a policy that reads a reward model's frame embeddings (`embeddings` in its manifest): that model
    /// (default: the task's shipped one; its encoder must be the policy's).
    #[arg(long, value_name = "MANIFEST")]
    pub model: Option<PathBuf>,
    #[command(flatten)]
    pub ort: OrtArgs,
}

/// One episode ready to score.
pub struct EvalEpisode {
    pub index: usize,
    pub obs: Vec<Observation>,
    pub truth: EpisodeTruth,
}

fn load_episodes(ds: &Dataset, max: Option<usize>) -> anyhow::Result<Vec<EvalEpisode>> {
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
                .map(|(name, frames)| View::new(name.clone(), frames[t].clone()))
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
            truth: EpisodeTruth {
                progress_gt,
                stage_gt,
                success: ep.meta.success.unwrap_or(false),
                degraded,
            },
        });
    }
    Ok(out)
}

/// The blank frame colour: the manifest's normalisation mean (0 after normalisation), as RGB8.
fn blank_colour(m: &Manifest) -> image::Rgb<u8> {
    let mean = m.image.as_ref().map_or([0.5; 3], |i| i.mean);
    image::Rgb(mean.map(|x| (x * 255.0).round().clamp(0.0, 255.0) as u8))
}

/// Source indices of `--hold-state` fields, refusing names the dataset's `observation.state` lacks.
fn hold_indices(ds: &Dataset, fields: &[String]) -> anyhow::Result<Vec<(String, usize)>> {
    if fields.is_empty() {
        return Ok(Vec::new());
    }
    let names = ds.state_names().with_context(|| {
        format!(
            "--hold-state {}: {} names no state fields (features.observation.state.names)",
            fields.join(","),
            ds.root().join("meta/info.json").display()
        )
    })?;
    fields
        .iter()
        .map(|f| match names.iter().position(|n| n == f) {
            Some(i) => Ok((f.clone(), i)),
            None => bail!(
                "--hold-state {f}: the dataset's observation.state has no field {f:?} (it has: {})",
                names.join(", ")
            ),
        })
        .collect()
}

/// A loaded model of either reward kind, bound to the dataset's state.
enum Scorer {
    /// stagewise-model's episode scorer (the windows the actor builds, single graph or two-part, batched).
    Progress(Box<EpisodeScorer>),
    /// The hop model and the reference goal observation (before any ablation).
    Hop(Box<HopModel>, Box<Observation>),
}

impl Scorer {
    /// Scores every episode (forward and reversed) with `ablation` applied; `dt` is the dataset's time step.
    fn score(
        &mut self,
        eps: &[EvalEpisode],
        ablation: &Ablation,
        blank: image::Rgb<u8>,
        dt: f64,
        bar: &ProgressBar,
    ) -> anyhow::Result<Vec<EpisodeScores>> {
        let prepare = |e: &EvalEpisode| {
            if ablation.is_none() {
                e.obs.clone()
            } else {
                ablation.apply(&e.obs, blank)
            }
        };
        let mut out = Vec::with_capacity(eps.len());
        match self {
            Self::Progress(model) => {
                for e in eps {
                    let obs = prepare(e);
                    let views = model.manifest().views.clone();
                    let src = ObservationFrames::new(&obs, &views)
                        .with_context(|| format!("episode {}", e.index))?;
                    let fwd = model
                        .score_all(&src)
                        .with_context(|| format!("episode {}", e.index))?;
                    let rev = model
                        .score_all(&Reversed(src))
                        .with_context(|| format!("episode {} reversed", e.index))?;
                    out.push(EpisodeScores {
                        phi: fwd.iter().map(|p| f64::from(p.phi)).collect(),
                        stage: Some(fwd.iter().map(|p| p.stage).collect()),
                        phi_reversed: rev.iter().map(|p| f64::from(p.phi)).collect(),
                    });
                    bar.inc(1);
                }
            }
            Self::Hop(model, goal) => {
                let goal = ablation
                    .apply(std::slice::from_ref(goal.as_ref()), blank)
                    .pop()
                    .context("no goal observation")?;
                for e in eps {
                    let obs = prepare(e);
                    let phi = model.fused_progress(&obs, &goal)?;
                    let phi_reversed = model.fused_progress(&reversed(&obs, dt), &goal)?;
                    out.push(EpisodeScores {
                        phi,
                        stage: None,
                        phi_reversed,
                    });
                    bar.inc(1);
                }
            }
        }
        Ok(out)
    }
}

/// Draws predicted progress (blue) and ground truth (black) over the ground-truth stage bands, with a strip
/// of frames below (one column per sampled step, one row per view).
pub fn plot_episode(ep: &EvalEpisode, s: &EpisodeScores, path: &Path) -> anyhow::Result<()> {
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
    let chart = ProgressPlot::new(width, plot_h, ep.truth.progress_gt.len())
        .stage_bands(&ep.truth.stage_gt)
        .line(ep.truth.progress_gt.iter().copied(), BLACK, 2)
        .line(s.phi.iter().copied(), BLUE, 2)
        .render()?;
    let mut img = RgbImage::from_pixel(width, height, image::Rgb([255, 255, 255]));
    image::imageops::replace(&mut img, &chart, 0, 0);
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
    save_png(&img, path)
}

pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    match args.command {
        EvalCommand::Model(a) => run_model(*a),
        EvalCommand::Policy(a) => run_policy(&a),
    }
}

fn run_model(args: ModelEvalArgs) -> anyhow::Result<()> {
    let (model_path, dataset) = (args.model.clone(), args.dataset.clone());
    let manifest =
        Manifest::load(&model_path).with_context(|| format!("reading {}", model_path.display()))?;
    if manifest.kind == ModelKind::Policy {
        bail!("{} is a policy, not a reward model", model_path.display());
    }
    let ds = Dataset::open(&dataset)
        .with_context(|| format!("opening dataset {}", dataset.display()))?;
    for v in &args.blank_view {
        if !manifest.views.contains(v) {
            bail!(
                "--blank-view {v:?}: the model's views are {:?}",
                manifest.views
            );
        }
    }
    // The model's state fields by name from the dataset's observation.state, before anything is scored.
    let (_, state_map) = super::label::bind_dataset_state(&ds, &manifest)?;
    let source_names = ds.state_names();
    let hold = hold_indices(&ds, &args.hold_state)?;
    for (name, i) in &hold {
        if !state_map.indices().contains(i) {
            eprintln!(
                "note: the model {} does not read state field {name:?}: holding it changes nothing",
                model_path.display()
            );
        }
    }
    let blank = blank_colour(&manifest);
    let mut eps = load_episodes(&ds, args.max_episodes)?;
    if eps.is_empty() {
        bail!("{} has no episodes", dataset.display());
    }
    let mut scorer = load_scorer(&args, &manifest, &state_map, &eps)?;
    let rows = if args.ablations {
        ablation_rows(
            &manifest.views,
            state_map.indices(),
            source_names.as_deref(),
            &hold,
        )
    } else {
        // One evaluation, with the flags' views blanked and fields held (the plots show the blanked frames).
        let ablation = Ablation {
            name: "as given".into(),
            blank_views: args.blank_view.clone(),
            hold_state: hold.iter().map(|(_, i)| *i).collect(),
        };
        for e in &mut eps {
            e.obs = ablation.apply(&e.obs, blank);
        }
        vec![Ablation::default()]
    };
    let bar =
        crate::cli::progress_bar(Some((eps.len() * rows.len()) as u64), "scoring", "episodes");
    let truth: Vec<EpisodeTruth> = eps.iter().map(|e| e.truth.clone()).collect();
    let dt = 1.0 / f64::from(ds.fps().max(1));
    let mut results = Vec::with_capacity(rows.len());
    for ab in &rows {
        let scored = scorer
            .score(&eps, ab, blank, dt, &bar)
            .with_context(|| format!("scoring ({})", ab.name))?;
        let summary = summarise(&truth, &scored)?;
        results.push((scored, summary));
    }
    let mut results = results.into_iter();
    let Some((scored, summary)) = results.next() else {
        bail!("nothing was scored");
    };
    let ablated: Vec<(&Ablation, Summary)> =
        rows.iter().skip(1).zip(results.map(|(_, s)| s)).collect();
    bar.finish_and_clear();
    println!(
        "model {} on {} ({} episodes: {} clean successes, {} failures)",
        model_path.display(),
        dataset.display(),
        summary.episodes,
        summary.expert_successes,
        summary.failures
    );
    if !args.ablations && (!args.blank_view.is_empty() || !hold.is_empty()) {
        let held: Vec<&str> = hold.iter().map(|(n, _)| n.as_str()).collect();
        println!(
            "with views blanked: [{}], state held at each episode's first frame: [{}]",
            args.blank_view.join(", "),
            held.join(", ")
        );
    }
    print_summary(&summary);
    if args.ablations {
        let table: Vec<(&Ablation, &Summary)> = std::iter::once((&rows[0], &summary))
            .chain(ablated.iter().map(|(a, s)| (*a, s)))
            .collect();
        println!();
        print!("{}", ablation_table(&table));
    }

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
    if args.ablations {
        write_ablations(&out, &rows, &summary, &ablated, source_names.as_deref())?;
    }
    if !args.no_plots {
        for (e, s) in eps.iter().zip(&scored) {
            plot_episode(e, s, &out.join(format!("episode_{:04}.png", e.index)))?;
        }
        println!("plots and summary.json in {}", out.display());
    }
    Ok(())
}

/// The scoring engine for the manifest's kind; a hop model takes its goal frame from the last frame of the
/// first clean successful episode.
fn load_scorer(
    args: &ModelEvalArgs,
    manifest: &Manifest,
    state_map: &StateMap,
    eps: &[EvalEpisode],
) -> anyhow::Result<Scorer> {
    Ok(match manifest.kind {
        ModelKind::StageProgress => {
            let rt = args.ort.runtime()?;
            let mut model = EpisodeScorer::from_manifest(
                manifest.clone(),
                rt,
                &args.ort.session_options(),
                ModelForm::Auto,
                args.batch,
            )
            .with_context(|| format!("loading reward model {}", args.model.display()))?;
            model.set_state_map(state_map.clone())?;
            Scorer::Progress(Box::new(model))
        }
        ModelKind::Hop => {
            let rt = args.ort.runtime()?;
            let mut model = HopModel::load(&args.model, rt, &args.ort.session_options())
                .with_context(|| format!("loading hop model {}", args.model.display()))?;
            model.set_state_map(state_map.clone())?;
            let goal = eps
                .iter()
                .find(|e| e.truth.success && !e.truth.degraded)
                .and_then(|e| e.obs.last())
                .context("the dataset has no successful clean episode to take the goal frame from")?
                .clone();
            Scorer::Hop(Box::new(model), Box::new(goal))
        }
        ModelKind::Policy => bail!("{} is a policy, not a reward model", args.model.display()),
    })
}

fn print_summary(summary: &Summary) {
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
}

/// `ablations.json`: each ablation's views blanked, state fields held (by name) and summary, the first row
/// without any.
fn write_ablations(
    out: &Path,
    rows: &[Ablation],
    summary: &Summary,
    ablated: &[(&Ablation, Summary)],
    source_names: Option<&[String]>,
) -> anyhow::Result<()> {
    let table: Vec<serde_json::Value> = std::iter::once((&rows[0], summary))
        .chain(ablated.iter().map(|(a, s)| (*a, s)))
        .map(|(a, s)| {
            let held: Vec<Option<&String>> = a
                .hold_state
                .iter()
                .map(|&i| source_names.and_then(|n| n.get(i)))
                .collect();
            serde_json::json!({
                "ablation": a.name,
                "blank_views": a.blank_views,
                "hold_state": held,
                "summary": s,
            })
        })
        .collect();
    let path = out.join("ablations.json");
    std::fs::write(&path, serde_json::to_string_pretty(&table)?)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("ablations in {}", path.display());
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

/// The simulator a policy is rolled out in, and the reward model that gives it frame embeddings (if it reads
/// them): such a policy gets frames rendered at that model's size; a pixel policy (`[pixels]`) gets its own views,
/// and only those, rendered at its own size (a view the task's camera rig lacks is refused, naming the rig's);
/// any other runs headless.
fn policy_sim(
    args: &PolicyEvalArgs,
    bound: &stagewise_model::BoundPolicy,
    source: &str,
    names: &[String],
) -> anyhow::Result<(
    stagewise_sim::SimConfig,
    Option<stagewise_model::RewardModel>,
)> {
    let (path, task) = (args.policy.as_path(), args.task);
    if let Some(p) = &bound.pixels {
        let mut cfg = stagewise_sim::SimConfig::new(task).with_resolution(p.width, p.height);
        cfg.depth = false;
        let rig: Vec<stagewise_core::ViewSpec> = cfg
            .cameras
            .iter()
            .map(|c| stagewise_core::ViewSpec {
                name: c.name.clone(),
                width: c.width,
                height: c.height,
            })
            .collect();
        bound.check_views(&format!("the simulator's camera rig (task {task})"), &rig)?;
        cfg.cameras.retain(|c| p.views.contains(&c.name));
        return Ok((cfg, None));
    }
    let Some(e) = &bound.embeddings else {
        return Ok((stagewise_sim::SimConfig::headless(task), None));
    };
    let model_path = match &args.model {
        Some(m) => m.clone(),
        None => stagewise_model::runtime::find_shipped_model(task.name())?,
    };
    super::run::check_embedding_model(&path.display().to_string(), e, &model_path)?;
    let mut model = args.ort.load_reward_model(&model_path)?;
    let map = StateMap::bind_source(model.manifest(), source, names, None)
        .with_context(|| format!("binding the state fields of {}", model_path.display()))?;
    model.set_state_map(map)?;
    let img = model
        .manifest()
        .image
        .clone()
        .context("the reward model has no [image]")?;
    let mut cfg = stagewise_sim::SimConfig::new(task).with_resolution(img.width, img.height);
    cfg.depth = false;
    Ok((cfg, Some(model)))
}

/// Rolls a policy out headless on `--episodes` seeds, all envs in lockstep (one batched policy run per step).
fn run_policy(args: &PolicyEvalArgs) -> anyhow::Result<()> {
    use stagewise_core::Env;
    use stagewise_runtime::Policy as _;
    let path = args.policy.as_path();
    let task = args.task;
    if args.episodes == 0 {
        bail!("--episodes must be at least 1");
    }
    let names = stagewise_sim::state_spec(task).names;
    let rt = args.ort.runtime()?;
    // The policy's state fields by name (its manifest's state_names) from the simulator's state.
    let source = format!("the simulator's state (task {task})");
    let bound = stagewise_model::PolicyModel::load_bound(
        path,
        &source,
        &names,
        None,
        stagewise_sim::ACTION_NAMES.len(),
        rt,
        &args.ort.session_options(),
    )
    .with_context(|| format!("loading policy {}", path.display()))?;
    let repeat = bound.model.action_repeat();
    let (cfg, mut encoder) = policy_sim(args, &bound, &source, &names)?;
    let mut policy = stagewise_runtime::OnnxPolicy::bound(bound, path.display().to_string());
    let n = args.episodes;
    let mut envs = Vec::with_capacity(n);
    let mut obs: Vec<Observation> = Vec::with_capacity(n);
    for i in 0..n {
        let mut env = stagewise_sim::SimEnv::new(cfg.clone())?;
        let seed = args.seed + i as u64;
        obs.push(
            env.reset(seed)
                .with_context(|| format!("resetting seed {seed}"))?,
        );
        envs.push(env);
    }
    let mut done: Vec<Option<PolicyEpisode>> = vec![None; n];
    let mut steps = vec![0u64; n];
    let bar = crate::cli::progress_bar(Some(n as u64), "rolling out", "episodes");
    let t0 = std::time::Instant::now();
    loop {
        let active: Vec<usize> = (0..n).filter(|&i| done[i].is_none()).collect();
        if active.is_empty() {
            break;
        }
        let refs: Vec<&Observation> = active.iter().map(|&i| &obs[i]).collect();
        // The reward model reads every observation once (its windows follow each env's episode).
        let embedded: Vec<f32> = match encoder.as_mut() {
            Some(m) => {
                m.score_envs(&active, &refs)
                    .context("running the reward model")?;
                m.last_embeddings()
                    .map(|(v, _)| v.to_vec())
                    .unwrap_or_default()
            }
            None => Vec::new(),
        };
        let per = embedded.len() / active.len();
        let rows: Vec<&[f32]> = (0..active.len())
            .map(|r| &embedded[r * per..(r + 1) * per])
            .collect();
        // each action held for the policy's own action repeat, as it was trained
        let actions = policy
            .act_embedded(&active, &refs, &rows)
            .context("running the policy")?;
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
            obs[i] = r.obs;
        }
    }
    bar.finish_and_clear();
    let eps: Vec<PolicyEpisode> = done.into_iter().flatten().collect();
    let successes = eps.iter().filter(|e| e.success).count();
    let rate = successes as f64 / n as f64;
    let mean_progress = eps.iter().map(|e| e.final_progress).sum::<f64>() / n as f64;
    println!(
        "policy {} on {task}: {successes}/{n} successes ({:.1}%), mean final oracle progress {:.3}, seeds {}..{} \
         ({:.1} s; each action held {} step(s))",
        path.display(),
        100.0 * rate,
        mean_progress,
        args.seed,
        args.seed + n as u64,
        t0.elapsed().as_secs_f64(),
        repeat
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
            "action_repeat": repeat,
            "per_episode": eps,
        });
        std::fs::write(p, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
