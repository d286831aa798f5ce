//! `stagewise label --dataset D --model M [--stride N]`: per-frame progress for every frame of a LeRobot v3
//! dataset, written to `D/sarm_progress.parquet` in the format LeRobot's RA-BC reads (`index, episode_index,
//! frame_index, progress_sparse`, float32 progress, rows sorted by `index`, `reward_model_path` in the schema
//! metadata), then the dataset's RA-BC weight summary (core's `RabcWeights`, LeRobot's formula) and PNG progress
//! plots for a few episodes.
//!
//! This file is argument parsing and IO (reading and checking the dataset's columns, writing the parquet, CSV,
//! JSON and plots). The scoring is stagewise-model's (`stagewise_model::scoring`): work is split by episode across
//! worker threads, each with its own ONNX Runtime session (`Session::run` takes `&mut`); a worker decodes an
//! episode's frames once, and its `EpisodeScorer` normalises each needed frame once and runs the windows
//! `t - (F-1) s, ..., t` of the scored frames in `--batch`es (the windows `RewardModel::score` builds step by step,
//! from the same `WindowLayout`: early windows repeat the first frame). With `--stride N` only frames `0, N, 2N,
//! ...` and the last frame are scored and the frames in between are interpolated linearly. LeRobot's own
//! labelling runs one window per query.
//!
//! When the manifest has a two-part form (`[parts]`: per-frame encoder + head) each needed frame is also encoded
//! once and the head runs on windows of embeddings, instead of the single graph re-encoding every frame of every
//! window; `--single-graph` turns that off.
//!
//! The model's state fields are taken from the dataset's `observation.state` by name (manifest `state_names`
//! against `features.observation.state.names` in meta/info.json): a model asking for a field the dataset lacks is
//! refused before anything is read, naming the field.

use crate::cmd::ort_args::OrtArgs;
use crate::plot::{ProgressPlot, BLACK, BLUE, ORANGE};
use anyhow::{bail, Context};
use image::RgbImage;
use indicatif::ProgressBar;
use stagewise_core::{RabcConfig, RabcWeights};
use stagewise_dataset::{
    interpolate_linear, strided_frames, Dataset, Episode, Images, SarmProgress, STATE_KEY,
};
use stagewise_model::scoring::{self, ViewFrames};
use stagewise_model::{EpisodeScorer, Manifest, ModelForm, ModelKind, OrtRuntime, StateMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Debug, Clone)]
pub struct LabelArgs {
    /// LeRobot v3 dataset directory (image columns; video columns need the dataset crate's `video` feature).
    #[arg(long)]
    pub dataset: PathBuf,
    /// Reward model manifest (.toml) of kind stage_progress.
    #[arg(long)]
    pub model: PathBuf,
    /// Score every N-th frame of each episode (and its last frame); frames in between are interpolated
    /// linearly. 1 scores every frame.
    #[arg(long, default_value_t = 1)]
    pub stride: usize,
    /// Worker threads, one ONNX Runtime session each (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Windows per Session::run of the single graph or the head; a two-part model's encoder runs at most this
    /// many frames at once (fewer for large images, so that a run's input stays in cache).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Run the model's single graph even when its manifest has a two-part form ([parts]: per-frame encoder +
    /// head, which encodes each frame once instead of once per window it is in).
    #[arg(long)]
    pub single_graph: bool,
    /// RA-BC chunk size: frames ahead for the progress delta (the policy's action chunk; LeRobot's default 50).
    #[arg(long, default_value_t = 50)]
    pub chunk_size: usize,
    /// RA-BC kappa: deltas above it get weight 1.
    #[arg(long, default_value_t = 0.01)]
    pub kappa: f64,
    /// Output file (default: <dataset>/sarm_progress.parquet, where LeRobot looks for it).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Progress plots for this many episodes (the first ones); 0 = none.
    #[arg(long, default_value_t = 4)]
    pub plots: usize,
    /// Plot directory (default: <dataset>/sarm_progress_plots).
    #[arg(long, value_name = "DIR")]
    pub plots_dir: Option<PathBuf>,
    /// Per-frame RA-BC deltas and weights as CSV (index, episode_index, frame_index, progress, delta, weight).
    #[arg(long, value_name = "FILE")]
    pub weights_csv: Option<PathBuf>,
    /// The run's numbers (frames, windows, wall times, RA-BC summary) as JSON.
    #[arg(long, value_name = "FILE")]
    pub summary_json: Option<PathBuf>,
    #[command(flatten)]
    pub ort: OrtArgs,
}

/// One labelled episode.
struct Labelled {
    episode: usize,
    index: Vec<i64>,
    frame_index: Vec<i64>,
    progress: Vec<f32>,
    /// Frames run through the model.
    scored: Vec<usize>,
    /// `progress_gt` column, when the dataset has one (plots only).
    progress_gt: Option<Vec<f64>>,
    /// Where the worker's time went on this episode.
    time: StageTimes,
}

/// Seconds a worker spent per part of the job (summed over workers: CPU-side time, not wall time).
#[derive(Debug, Default, Clone, Copy)]
struct StageTimes {
    /// Reading the parquet rows and decoding the PNG frames.
    read_decode: f64,
    /// Normalising frames and gathering windows into batches.
    prepare: f64,
    /// ONNX Runtime runs.
    model: f64,
}

impl std::ops::AddAssign for StageTimes {
    fn add_assign(&mut self, o: Self) {
        self.read_decode += o.read_decode;
        self.prepare += o.prepare;
        self.model += o.model;
    }
}

/// What every worker needs to know about the model and the dataset.
struct Plan {
    /// Dataset camera key per model view, in the model's view order.
    keys: Vec<String>,
    /// Values of the dataset's `observation.state` per frame (0 when the model takes no state).
    state_size: usize,
    /// The model's state fields in the dataset's `observation.state`, bound by name (when it takes a state).
    state_map: Option<StateMap>,
    stride: usize,
    batch: usize,
    /// Use the manifest's [parts] (encoder + head).
    two_part: bool,
    /// The model's manifest, read (and its files hashed) once for all workers.
    manifest: Manifest,
}

fn check_plan(ds: &Dataset, m: &Manifest, args: &LabelArgs) -> anyhow::Result<Plan> {
    if m.kind != ModelKind::StageProgress {
        bail!(
            "{} is a {} model: labelling needs a stage_progress model",
            m.path.display(),
            m.kind
        );
    }
    if args.stride == 0 {
        bail!("--stride must be at least 1");
    }
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    if m.image.is_none() {
        bail!("{}: field `image` is missing", m.path.display());
    }
    let keys = m
        .views
        .iter()
        .map(|v| {
            ds.camera_key(v)
                .with_context(|| format!("the model {} takes view `{v}`", m.path.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (state_size, state_map) = if m.inputs.state.is_some() {
        let (dim, map) = bind_dataset_state(ds, m)?;
        (dim, Some(map))
    } else {
        (0, None)
    };
    Ok(Plan {
        keys,
        state_size,
        state_map,
        stride: args.stride,
        batch: args.batch,
        two_part: m.parts.is_some() && !args.single_graph,
        manifest: m.clone(),
    })
}

/// Binds the model's state fields by name to the dataset's `observation.state` (its names in meta/info.json):
/// returns the dataset's values per frame and the map. A field the dataset lacks is refused naming it; a dataset
/// without state names takes only a model without `state_names` of its size (or one without a state input).
/// Used by `label` and `eval`.
pub fn bind_dataset_state(ds: &Dataset, m: &Manifest) -> anyhow::Result<(usize, StateMap)> {
    let info_path = ds.root().join("meta/info.json");
    let feature = ds.info().features.get(STATE_KEY);
    if feature.is_none() && m.state_size == 0 {
        return Ok((0, StateMap::empty(0)));
    }
    let ft = feature.with_context(|| {
        format!(
            "{}: field `features.{STATE_KEY}` is missing, the model {} takes a state of {} values",
            info_path.display(),
            m.path.display(),
            m.state_size
        )
    })?;
    let dim: usize = ft.shape.iter().product();
    let source = format!("the dataset's `{STATE_KEY}` ({})", info_path.display());
    match ds.state_names() {
        Some(names) => {
            if names.len() != dim {
                bail!(
                    "{}: field `features.{STATE_KEY}` has {} names for its shape {:?} ({dim} values)",
                    info_path.display(),
                    names.len(),
                    ft.shape
                );
            }
            let map = StateMap::bind_source(m, &source, &names, None)?;
            Ok((dim, map))
        }
        None => {
            if let Some(wanted) = m.state_names() {
                bail!(
                    "{}: field `features.{STATE_KEY}.names` is missing, and the model {} reads state fields by name \
                     ({})",
                    info_path.display(),
                    m.path.display(),
                    wanted.join(", ")
                );
            }
            if m.state_size == 0 {
                return Ok((dim, StateMap::empty(dim)));
            }
            if dim != m.state_size {
                bail!(
                    "{}: field `features.{STATE_KEY}.shape` is {:?} ({dim} values), the model {} takes {}",
                    info_path.display(),
                    ft.shape,
                    m.path.display(),
                    m.state_size
                );
            }
            Ok((dim, StateMap::identity(dim)))
        }
    }
}

/// One episode read from the dataset, its frames decoded.
struct ReadEpisode {
    ep: usize,
    data: Episode,
    seconds: f64,
}

fn read_episode(ds: &Dataset, ep: usize) -> anyhow::Result<ReadEpisode> {
    let t0 = Instant::now();
    let data = ds
        .read_episode(ep, Images::DecodeOnThisThread)
        .with_context(|| format!("reading episode {ep}"))?;
    Ok(ReadEpisode {
        ep,
        data,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Checks one read episode's columns against the plan and labels it with stagewise-model's episode scorer.
fn label_episode(
    plan: &Plan,
    model: &mut EpisodeScorer,
    read: ReadEpisode,
) -> anyhow::Result<Labelled> {
    let ReadEpisode { ep, data, seconds } = read;
    let len = data.len();
    if len == 0 {
        bail!("episode {ep} has no frames");
    }
    let cams: Vec<&[RgbImage]> = plan
        .keys
        .iter()
        .map(|k| {
            let frames = data
                .images(k)
                .with_context(|| format!("episode {ep}: column `{k}` was not decoded"))?;
            if frames.len() != len {
                bail!(
                    "episode {ep}: column `{k}` has {} frames, the episode {len}",
                    frames.len()
                );
            }
            Ok(frames)
        })
        .collect::<anyhow::Result<_>>()?;
    if plan.state_size > 0 {
        if data.state.len() != len * plan.state_size {
            bail!(
                "episode {ep}: column `{STATE_KEY}` has {} values, expected {len} x {}",
                data.state.len(),
                plan.state_size
            );
        }
        // Only the fields the model reads must be finite.
        if let Some(map) = &plan.state_map {
            for t in 0..len {
                if let Some((i, x)) = map.first_non_finite(data.state(t)) {
                    bail!(
                        "episode {ep}, frame {t}: column `{STATE_KEY}`[{i}] is {x}: the state the model reads must \
                         be finite"
                    );
                }
            }
        }
    }
    let state: &[f32] = if plan.state_size > 0 {
        &data.state
    } else {
        &[]
    };
    let source = ViewFrames::new(&cams, &plan.keys, state, plan.state_size)
        .with_context(|| format!("episode {ep}"))?;
    let scored = strided_frames(len, plan.stride);
    let out = model
        .score(&source, &scored)
        .with_context(|| format!("episode {ep}"))?;
    let timing = model.last_timing();
    let values: Vec<f32> = out.iter().map(|p| p.phi).collect();
    let progress = interpolate_linear(len, &scored, &values)
        .map_err(|e| anyhow::anyhow!("episode {ep}: interpolating progress: {e}"))?;
    Ok(Labelled {
        episode: ep,
        index: data.index.clone(),
        frame_index: data.frame_index.clone(),
        progress,
        scored,
        progress_gt: data.extra("progress_gt").map(<[f64]>::to_vec),
        time: StageTimes {
            read_decode: seconds,
            prepare: timing.prepare.as_secs_f64(),
            model: timing.model.as_secs_f64(),
        },
    })
}

/// Decoded episodes a worker keeps while its model loads (bounded: a TensorRT build can take minutes).
const READ_AHEAD: usize = 4;

/// Labels every episode on `workers` threads (stagewise-model's worker pool, one ONNX Runtime session per
/// worker); results in episode order.
fn label_all(
    ds: &Dataset,
    plan: &Plan,
    args: &LabelArgs,
    workers: usize,
    bar: &ProgressBar,
) -> anyhow::Result<Vec<Labelled>> {
    let load = |w: usize| -> anyhow::Result<EpisodeScorer> {
        let load = || -> anyhow::Result<EpisodeScorer> {
            let (rt, opts) = (args.ort.runtime()?, args.ort.session_options());
            let (form, what) = if plan.two_part {
                (ModelForm::TwoPart, "the two-part model")
            } else {
                (ModelForm::SingleGraph, "reward model")
            };
            let mut model =
                EpisodeScorer::from_manifest(plan.manifest.clone(), rt, &opts, form, plan.batch)
                    .with_context(|| format!("loading {what} {}", args.model.display()))?;
            if let Some(map) = plan.state_map.clone() {
                model.set_state_map(map)?;
            }
            Ok(model)
        };
        load().with_context(|| format!("worker {w}"))
    };
    scoring::score_in_workers(
        ds.num_episodes(),
        workers,
        READ_AHEAD,
        load,
        |ep| read_episode(ds, ep),
        |model, _, read| label_episode(plan, model, read),
        |_, l: &Labelled| bar.inc(l.progress.len() as u64),
    )
}

pub fn run(args: LabelArgs) -> anyhow::Result<()> {
    // Load ONNX Runtime (tens of milliseconds) while the dataset and the manifest are read; the workers then
    // find it loaded, or its error. Joined before returning, also on errors: a process that exits while
    // another thread is still loading the library can crash in its exit handlers.
    let ort_lib = args.ort.ort_lib.clone();
    let loading = std::thread::spawn(move || OrtRuntime::init(ort_lib.as_deref()).is_ok());
    let result = label(args);
    let _ = loading.join();
    result
}

fn label(args: LabelArgs) -> anyhow::Result<()> {
    let t_start = Instant::now();
    let ds = Dataset::open(&args.dataset)
        .with_context(|| format!("opening dataset {}", args.dataset.display()))?;
    let manifest =
        Manifest::load(&args.model).with_context(|| format!("reading {}", args.model.display()))?;
    let plan = check_plan(&ds, &manifest, &args)?;
    let rabc_config = RabcConfig {
        chunk_size: args.chunk_size,
        kappa: args.kappa,
        ..RabcConfig::default()
    };
    rabc_config.validate().context("RA-BC settings")?;
    if ds.num_episodes() == 0 {
        bail!("{} has no episodes", args.dataset.display());
    }
    let workers = match args.workers {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        w => w,
    }
    .min(ds.num_episodes());
    let bar = crate::cli::progress_bar(Some(ds.num_frames()), "labelling", "frames");
    let t_label = Instant::now();
    let labelled = label_all(&ds, &plan, &args, workers, &bar)?;
    let label_s = t_label.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let out = write_progress(&args, &ds, &labelled)?;

    let episodes: Vec<Vec<f64>> = labelled
        .iter()
        .map(|l| l.progress.iter().map(|&p| f64::from(p)).collect())
        .collect();
    let weights = RabcWeights::compute(&episodes, &rabc_config).context("RA-BC weights")?;
    let frames: usize = labelled.iter().map(|l| l.progress.len()).sum();
    let windows: usize = labelled.iter().map(|l| l.scored.len()).sum();
    println!(
        "labelled {} episodes, {frames} frames ({windows} windows scored, stride {}) with {} ({}) on {} worker(s) \
         x {} ORT thread(s), batch {}: {label_s:.2} s, {:.0} frames/s",
        labelled.len(),
        args.stride,
        args.model.display(),
        if plan.two_part {
            "two-part: encoder + head"
        } else {
            "single graph"
        },
        workers,
        args.ort.threads,
        args.batch,
        frames as f64 / label_s.max(1e-9)
    );
    let mut time = StageTimes::default();
    for l in &labelled {
        time += l.time;
    }
    let us = |s: f64| 1e6 * s / frames.max(1) as f64;
    println!(
        "worker time per frame (summed over workers): read + PNG decode {:.1} us, normalise + batch {:.1} us, \
         model {:.1} us",
        us(time.read_decode),
        us(time.prepare),
        us(time.model)
    );
    println!(
        "wrote {} (columns index, episode_index, frame_index, progress_sparse; reward_model_path = {})",
        out.display(),
        args.model.display()
    );
    let s = &weights.summary;
    let pct = |k: usize| 100.0 * k as f64 / s.frames.max(1) as f64;
    println!(
        "RA-BC (chunk {}, kappa {}): mean weight {:.4}, weight 0: {} frames ({:.1}%), weight 1: {} frames ({:.1}%), \
         delta mean {:.5}, delta std {:.5}",
        args.chunk_size,
        args.kappa,
        s.mean_weight,
        s.num_zero_weight,
        pct(s.num_zero_weight),
        s.num_full_weight,
        pct(s.num_full_weight),
        s.delta_mean,
        s.delta_std
    );
    if let Some(p) = &args.weights_csv {
        write_weights_csv(p, &labelled, &weights)?;
        println!("per-frame RA-BC weights in {}", p.display());
    }
    if args.plots > 0 {
        write_plots(&args, &labelled, &weights)?;
    }
    if let Some(p) = &args.summary_json {
        let json = serde_json::json!({
            "dataset": args.dataset,
            "model": args.model,
            "output": out,
            "episodes": labelled.len(),
            "frames": frames,
            "windows_scored": windows,
            "stride": args.stride,
            "workers": workers,
            "ort_threads": args.ort.threads,
            "batch": args.batch,
            "two_part": plan.two_part,
            "label_s": label_s,
            "total_s": t_start.elapsed().as_secs_f64(),
            "frames_per_s": frames as f64 / label_s.max(1e-9),
            "worker_seconds": {
                "read_decode": time.read_decode,
                "prepare": time.prepare,
                "model": time.model,
            },
            "rabc": {
                "chunk_size": args.chunk_size,
                "kappa": args.kappa,
                "summary": weights.summary,
            },
        });
        std::fs::write(p, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// `sarm_progress.parquet` (or `--out`) of the labelled episodes; returns where it went.
fn write_progress(
    args: &LabelArgs,
    ds: &Dataset,
    labelled: &[Labelled],
) -> anyhow::Result<PathBuf> {
    let mut sp = SarmProgress {
        reward_model_path: Some(args.model.display().to_string()),
        ..Default::default()
    };
    for l in labelled {
        let ep = l.episode as i64;
        sp.index.extend_from_slice(&l.index);
        sp.episode_index
            .extend(std::iter::repeat_n(ep, l.index.len()));
        sp.frame_index.extend_from_slice(&l.frame_index);
        sp.progress_sparse.extend_from_slice(&l.progress);
    }
    let out = args.out.clone().unwrap_or_else(|| ds.sarm_progress_path());
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // Durable: written under <name>.tmp beside the target, fsynced, renamed, directory fsynced (stagewise-dataset's
    // `durable`), so a reader never sees half a file and a crash keeps the previous one.
    sp.write(&out)
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(out)
}

/// Progress plots of the first `--plots` episodes.
fn write_plots(
    args: &LabelArgs,
    labelled: &[Labelled],
    weights: &RabcWeights,
) -> anyhow::Result<()> {
    let dir = args
        .plots_dir
        .clone()
        .unwrap_or_else(|| args.dataset.join("sarm_progress_plots"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (l, w) in labelled.iter().zip(&weights.weights).take(args.plots) {
        plot_episode(l, w, &dir.join(format!("episode_{:04}.png", l.episode)))?;
    }
    println!(
        "progress plots of {} episode(s) in {} (blue: progress, dots: scored frames, black: progress_gt, \
         orange: RA-BC weight)",
        args.plots.min(labelled.len()),
        dir.display()
    );
    Ok(())
}

fn write_weights_csv(path: &Path, labelled: &[Labelled], w: &RabcWeights) -> anyhow::Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut f = std::io::BufWriter::new(f);
    writeln!(f, "index,episode_index,frame_index,progress,delta,weight")?;
    for ((l, deltas), weights) in labelled.iter().zip(&w.deltas).zip(&w.weights) {
        for t in 0..l.progress.len() {
            writeln!(
                f,
                "{},{},{},{:e},{:e},{:e}",
                l.index[t], l.episode, l.frame_index[t], l.progress[t], deltas[t], weights[t]
            )?;
        }
    }
    f.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Progress (blue, dots at the scored frames), `progress_gt` (black) when present and the RA-BC weight
/// (orange) over the episode. No text: no font is shipped.
fn plot_episode(l: &Labelled, weights: &[f64], path: &Path) -> anyhow::Result<()> {
    let mut plot =
        ProgressPlot::new(800, 300, l.progress.len()).line(weights.iter().copied(), ORANGE, 1);
    if let Some(gt) = &l.progress_gt {
        plot = plot.line(gt.iter().copied(), BLACK, 2);
    }
    plot = plot.line(l.progress.iter().map(|&p| f64::from(p)), BLUE, 2);
    if l.scored.len() < l.progress.len() {
        plot = plot.dots(
            l.scored.iter().map(|&t| (t, f64::from(l.progress[t]))),
            BLUE,
        );
    }
    plot.save(path)
}
