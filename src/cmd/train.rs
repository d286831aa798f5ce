//! `stagewise train`: from any LeRobot v3 dataset (image or video cameras, views and state fields chosen by name,
//! SARM stage annotations) to a model directory: single-graph ONNX, two-part form (encoder + head), manifest and
//! training record, with validation metrics and a progress bar.
//!
//! This side reads the dataset (stagewise-dataset: PNG or MP4 cameras, LeRobot's timestamp rule), picks the
//! views and the proprioception by name, computes the targets from the annotations (stagewise-core's
//! `targets`, DESIGN.md: stage `k` of frame `t` and `tau = clip((t - s_k) / (e_k - s_k), 0, 1)`) and writes them
//! as numpy arrays (stagewise-dataset's `arrays`); the PyTorch pipeline, `python -m stagewise.training
//! train-dataset` (train.py's network, augmentation, loss and export) run by the project venv's Python, trains and
//! exports the model. No simulator column is read. Datasets without any stage annotation are refused with an error
//! that says what to add.
//!
//! Targets per episode: its `sparse_subtask_*` annotation (LeRobot's SARM columns); an episode without one, in a
//! dataset with `meta/temporal_proportions_sparse.json`, gets stage boundaries at those proportions of its length
//! (time-linear progress: right for a clean demonstration, so episodes marked unsuccessful are skipped). Frames
//! between two annotated stages keep the earlier stage at tau 1, frames before the first stage stage 0 at tau 0,
//! and the last frame of a successful episode whose last stage ends with it has tau 1 (as train.py does).

use anyhow::{bail, Context};
use rayon::prelude::*;
use stagewise_core::{targets, StageProportions};
use stagewise_dataset::arrays::TrainingArrays;
use stagewise_dataset::{Dataset, Episode, EpisodeMeta, Images, StageAnnotation};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub use super::python::find_python;

/// How the PyTorch pipeline (`python -m stagewise.training`) runs (shared by `train` and `adapt`).
#[derive(clap::Args, Debug, Clone)]
pub struct PipelineArgs {
    /// Torch threads (1 on shared cores: torch's thread pool spins badly under contention).
    #[arg(long, default_value_t = 1)]
    pub torch_threads: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Python with the stagewise package, torch, onnx and onnxruntime (default: the project's `.venv`, set up by
    /// scripts/setup.sh, found from the executable's path: see `stagewise_model::runtime::venv_candidates`).
    #[arg(long, env = "STAGEWISE_PYTHON", value_name = "PATH")]
    pub python: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct TrainArgs {
    /// LeRobot v3 dataset directory to train on (image or video cameras); repeat for more.
    #[arg(long = "dataset", required = true, value_name = "DIR")]
    pub datasets: Vec<PathBuf>,
    /// Held-out dataset for the validation metrics; repeat for more. Default: every `--val-every`-th usable
    /// episode of the training datasets is held out.
    #[arg(long = "val-dataset", value_name = "DIR")]
    pub val_datasets: Vec<PathBuf>,
    /// Without `--val-dataset`: hold out every N-th usable episode (0: no validation).
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub val_every: usize,
    /// Camera views the model reads, by name, comma-separated: `front` means `observation.images.front` (or the
    /// one camera key ending in `.front`); full feature keys work too.
    #[arg(long, value_delimiter = ',', required = true)]
    pub views: Vec<String>,
    /// State fields the model reads, by name from `observation.state`'s names, comma-separated: the robot's
    /// proprioception (never object or target poses).
    #[arg(long, value_delimiter = ',', required = true)]
    pub state: Vec<String>,
    /// Output model directory (created).
    #[arg(long)]
    pub out: PathBuf,
    /// File stem of the model (default: `<out directory name>-progress`).
    #[arg(long)]
    pub name: Option<String>,
    /// Model input size WIDTHxHEIGHT; frames are resized (triangle filter, as the runtime does). Default: the
    /// cameras' size.
    #[arg(long, value_name = "WxH")]
    pub image_size: Option<String>,
    /// Frames per window and control steps between them.
    #[arg(long, default_value_t = 2)]
    pub frames: usize,
    #[arg(long, default_value_t = 4)]
    pub stride: usize,
    #[arg(long, default_value_t = 20)]
    pub epochs: usize,
    /// Training samples (windows) per epoch.
    #[arg(long, default_value_t = 8192)]
    pub samples_per_epoch: usize,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Keep the prepared arrays (`<out>/<name>.train-data/`) after training.
    #[arg(long)]
    pub keep_data: bool,
    /// Only prepare the training arrays (`<out>/<name>.train-data/`: frames, state, targets, meta.json) and stop.
    #[arg(long)]
    pub prepare_only: bool,
    /// Replace a model of the same name in `--out`.
    #[arg(long)]
    pub force: bool,
    /// Decoder threads for reading the datasets (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub read_threads: usize,
    /// More arguments for `python -m stagewise.training train-dataset`, after `--` (e.g. `-- --colour 0 --lr 1e-3`).
    #[arg(last = true)]
    pub extra: Vec<String>,
}

/// Simulator-only state fields (sim/src/env.rs `state_spec`): object and target poses and the grasp flag. A reward
/// model never reads them (DESIGN.md: it sees what a real robot sees).
fn privileged(name: &str) -> bool {
    name == "grasped"
        || name.starts_with("target_")
        || name.strip_prefix("block").is_some_and(|r| {
            r.split('_')
                .next()
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// Stage boundaries at `proportions` of an episode of `len` frames (time-linear progress).
pub fn annotation_from_proportions(
    names: &[String],
    proportions: &[f64],
    len: usize,
) -> StageAnnotation {
    let (start_frames, end_frames) = targets::stages_from_proportions(proportions, len);
    StageAnnotation {
        names: names.to_vec(),
        start_frames,
        end_frames,
    }
}

/// One episode that goes into the training set.
struct Use {
    /// Index into the opened datasets.
    ds: usize,
    episode: usize,
    len: usize,
    ann: StageAnnotation,
    from_proportions: bool,
    success: Option<bool>,
    val: bool,
}

fn parse_size(s: &str) -> anyhow::Result<(u32, u32)> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .with_context(|| format!("--image-size {s:?}: expected WIDTHxHEIGHT, e.g. 32x32"))?;
    let w: u32 = w
        .trim()
        .parse()
        .with_context(|| format!("--image-size {s:?}"))?;
    let h: u32 = h
        .trim()
        .parse()
        .with_context(|| format!("--image-size {s:?}"))?;
    if w < 8 || h < 8 {
        bail!("--image-size {s:?}: at least 8x8");
    }
    Ok((w, h))
}

pub fn check_python(python: &Path) -> anyhow::Result<()> {
    let out = Command::new(python)
        .args([
            "-P",
            "-c",
            "import importlib.util as u, sys; m = [n for n in ('stagewise', 'numpy', 'torch', 'onnx', \
             'onnxruntime', 'PIL') if u.find_spec(n) is None]; sys.exit('missing: ' + ', '.join(m) if m else 0)",
        ])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    if !out.status.success() {
        bail!(
            "{} cannot import the training pipeline's packages (stagewise, numpy, torch, onnx, onnxruntime, \
             pillow; Python >= 3.11): {}\nrun scripts/setup.sh (it installs the package and \
             scripts/requirements.txt into .venv), or pip install stagewise into that venv (docs/install.md)",
            python.display(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    Ok(())
}

pub fn run(args: TrainArgs) -> anyhow::Result<()> {
    let t_start = Instant::now();
    if args.views.is_empty() || args.views.iter().any(|v| v.is_empty()) {
        bail!("--views: name at least one camera");
    }
    if args.state.is_empty() || args.state.iter().any(|s| s.is_empty()) {
        bail!(
            "--state: name at least one proprioceptive field (e.g. ee_x,ee_y,ee_z,gripper_width)"
        );
    }
    if let Some(bad) = args.state.iter().find(|s| privileged(s)) {
        bail!(
            "--state {bad}: an object/target pose or the simulator's grasp flag; a reward model reads camera views \
             and proprioception only (DESIGN.md), what a real robot has"
        );
    }
    if args.frames == 0 || args.stride == 0 || args.epochs == 0 || args.samples_per_epoch == 0 {
        bail!("--frames, --stride, --epochs and --samples-per-epoch must be at least 1");
    }
    let name = match &args.name {
        Some(n) => n.clone(),
        None => {
            let base = args
                .out
                .file_name()
                .and_then(|n| n.to_str())
                .filter(|n| !n.is_empty())
                .unwrap_or("model");
            format!("{base}-progress")
        }
    };
    if name.is_empty() || name.contains('/') {
        bail!("--name {name:?}: a file stem without '/'");
    }
    let manifest = args.out.join(format!("{name}.toml"));
    if manifest.exists() && !args.force {
        bail!(
            "{} exists: pass --force to replace it, or choose another --out / --name",
            manifest.display()
        );
    }
    let python = if args.prepare_only {
        PathBuf::new()
    } else {
        let python = find_python(args.pipeline.python.as_deref())?;
        check_python(&python)?;
        python
    };
    let mut datasets = Vec::new();
    for d in &args.datasets {
        let (dir, sel) = parse_selection(d)?;
        datasets.push((dir, sel, false));
    }
    for d in &args.val_datasets {
        let (dir, sel) = parse_selection(d)?;
        datasets.push((dir, sel, true));
    }
    let data_dir = args.out.join(format!("{name}.train-data"));
    prepare(&PrepareSpec {
        datasets,
        views: &args.views,
        state: &args.state,
        image_size: args.image_size.as_deref().map(parse_size).transpose()?,
        val_every: if args.val_datasets.is_empty() {
            args.val_every
        } else {
            0
        },
        read_threads: args.read_threads,
        data_dir: data_dir.clone(),
        stages: None,
        t_start,
    })?;
    if args.prepare_only {
        return Ok(());
    }

    // Train: `python -m stagewise.training train-dataset`, its progress lines drawn as a bar.
    let mut py_args: Vec<String> = vec![
        "--data".into(),
        data_dir.display().to_string(),
        "--out".into(),
        args.out.display().to_string(),
        "--name".into(),
        name.clone(),
    ];
    for (flag, v) in [
        ("--frames", args.frames.to_string()),
        ("--stride", args.stride.to_string()),
        ("--epochs", args.epochs.to_string()),
        ("--samples-per-epoch", args.samples_per_epoch.to_string()),
        ("--threads", args.pipeline.torch_threads.to_string()),
        ("--seed", args.pipeline.seed.to_string()),
    ] {
        py_args.push(flag.into());
        py_args.push(v);
    }
    py_args.extend(args.extra.iter().cloned());
    run_python(&python, "train-dataset", &py_args, &data_dir)?;
    if !args.keep_data {
        std::fs::remove_dir_all(&data_dir)
            .with_context(|| format!("removing {}", data_dir.display()))?;
    }
    report_model(&args.out, &name, &manifest, t_start)
}

/// What [`prepare`] reads and where it writes.
pub struct PrepareSpec<'a> {
    /// `(dataset, episodes (None: all), held out for validation)`.
    pub datasets: Vec<(PathBuf, Option<Vec<usize>>, bool)>,
    pub views: &'a [String],
    pub state: &'a [String],
    pub image_size: Option<(u32, u32)>,
    /// Hold out every N-th usable episode of the non-validation datasets (0: none).
    pub val_every: usize,
    pub read_threads: usize,
    pub data_dir: PathBuf,
    /// The stages and proportions to use (a model's, for `adapt`); `None`: the first dataset's.
    pub stages: Option<(Vec<String>, Vec<f64>)>,
    pub t_start: Instant,
}

/// `DIR` or `DIR:EPISODES` (`3`, `0,4,7`, `0-9`): a dataset and the episodes to use.
pub fn parse_selection(p: &Path) -> anyhow::Result<(PathBuf, Option<Vec<usize>>)> {
    let text = p.to_string_lossy();
    if let Some((dir, sel)) = text.rsplit_once(':') {
        if !sel.is_empty()
            && sel
                .chars()
                .all(|c| c.is_ascii_digit() || c == ',' || c == '-')
        {
            let mut eps = Vec::new();
            for part in sel.split(',').filter(|x| !x.is_empty()) {
                match part.split_once('-') {
                    Some((a, b)) => {
                        let (a, b): (usize, usize) = (a.parse()?, b.parse()?);
                        if b < a {
                            bail!("{text}: episode range {part} is empty");
                        }
                        eps.extend(a..=b);
                    }
                    None => eps.push(part.parse()?),
                }
            }
            return Ok((PathBuf::from(dir), Some(eps)));
        }
    }
    Ok((p.to_owned(), None))
}

/// Reads the datasets, picks views and state by name, computes the targets and writes the arrays of
/// `python -m stagewise.training train-dataset` to `spec.data_dir` (module doc).
pub fn prepare(spec: &PrepareSpec) -> anyhow::Result<()> {
    let sources = open_sources(spec)?;
    let (width, height) = sources.size;
    if width * height > 96 * 96 {
        tracing::warn!(
            "the model will read {width}x{height} frames: training on the CPU is slow at that size; \
             --image-size 64x64 (or smaller) resizes them"
        );
    }
    let file_props: Option<Vec<(String, f64)>> = sources.opened[0]
        .temporal_proportions_sparse()
        .map(<[_]>::to_vec);
    let stage_names = stage_names(spec, &sources.opened[0], file_props.as_deref())?;
    let (mut uses, skipped) = select_episodes(spec, &sources.opened, &stage_names)?;
    if spec.val_every > 0 {
        let n = uses.len();
        let mut i = 0;
        for u in uses.iter_mut() {
            i += 1;
            // Every N-th episode, but never the only training episode.
            if n >= 2 && i % spec.val_every == 0 {
                u.val = true;
            }
        }
    }
    let n_train = uses.iter().filter(|u| !u.val).count();
    if n_train == 0 {
        bail!(
            "no usable training episode (skipped: {})",
            skipped.join("; ")
        );
    }
    let proportions = stage_proportions(spec, file_props.as_deref(), &uses)?;
    print_training_set(&uses, &stage_names, &proportions, skipped.len());

    let (arrays, episodes_json) = read_into_arrays(spec, &sources, &uses)?;
    let command: Vec<String> = std::env::args().collect();
    let meta = serde_json::json!({
        "datasets": spec.datasets.iter().map(|(d, _, _)| d.display().to_string()).collect::<Vec<_>>(),
        "views": spec.views,
        "view_keys": sources.keys[0],
        "state_names": spec.state,
        "stage_names": stage_names,
        "proportions": proportions,
        "width": width,
        "height": height,
        "episodes": episodes_json,
        "skipped": skipped,
        "command": command,
    });
    arrays
        .finish(&meta)
        .with_context(|| format!("writing the training arrays to {}", spec.data_dir.display()))?;
    println!(
        "prepared {} frames of {} views at {width}x{height} in {:.1} s ({})",
        uses.iter().map(|u| u.len).sum::<usize>(),
        spec.views.len(),
        spec.t_start.elapsed().as_secs_f64(),
        spec.data_dir.display()
    );
    Ok(())
}

/// The opened datasets, each one's camera keys of `spec.views` and columns of `spec.state`, and the frame size
/// the model reads.
struct Sources {
    opened: Vec<Dataset>,
    keys: Vec<Vec<String>>,
    state_cols: Vec<Vec<usize>>,
    size: (u32, u32),
}

/// Opens every dataset and resolves views and state fields by name.
fn open_sources(spec: &PrepareSpec) -> anyhow::Result<Sources> {
    let mut opened = Vec::with_capacity(spec.datasets.len());
    for (dir, _, _) in &spec.datasets {
        opened.push(
            Dataset::open(dir).with_context(|| format!("opening dataset {}", dir.display()))?,
        );
    }
    let mut keys: Vec<Vec<String>> = Vec::new();
    let mut state_cols: Vec<Vec<usize>> = Vec::new();
    let mut size: Option<(u32, u32)> = None;
    for (ds, (dir, _, _)) in opened.iter().zip(&spec.datasets) {
        keys.push(view_keys(spec, ds, dir, &mut size)?);
        state_cols.push(state_columns(spec, ds, dir)?);
    }
    let size = match spec.image_size {
        Some(s) => s,
        None => size.context("no camera")?,
    };
    Ok(Sources {
        opened,
        keys,
        state_cols,
        size,
    })
}

/// The camera keys of `spec.views` in `ds`; without `--image-size`, every camera must have the size in `size`
/// (set by the first one seen).
fn view_keys(
    spec: &PrepareSpec,
    ds: &Dataset,
    dir: &Path,
    size: &mut Option<(u32, u32)>,
) -> anyhow::Result<Vec<String>> {
    let k: Vec<String> = spec
        .views
        .iter()
        .map(|v| {
            ds.camera_key(v)
                .with_context(|| format!("--views {v}: dataset {}", dir.display()))
        })
        .collect::<anyhow::Result<_>>()?;
    for key in &k {
        let ft = ds
            .info()
            .features
            .get(key)
            .with_context(|| format!("{}: no feature {key}", dir.display()))?;
        let (h, w, _) = ft
            .image_hwc()
            .with_context(|| format!("{}: feature {key} is not [h, w, 3]", dir.display()))?;
        if spec.image_size.is_none() {
            match *size {
                None => *size = Some((w, h)),
                Some(s) if s != (w, h) => bail!(
                    "camera {key} of {} is {w}x{h}, another camera is {}x{}: pass --image-size WxH",
                    dir.display(),
                    s.0,
                    s.1
                ),
                Some(_) => {}
            }
        }
    }
    Ok(k)
}

/// The columns of `spec.state` in `ds`'s `observation.state`, by name.
fn state_columns(spec: &PrepareSpec, ds: &Dataset, dir: &Path) -> anyhow::Result<Vec<usize>> {
    let names = ds.state_names().with_context(|| {
        format!(
            "{}/meta/info.json: `observation.state` has no names; --state picks fields by name",
            dir.display()
        )
    })?;
    spec.state
        .iter()
        .map(|s| {
            names.iter().position(|n| n == s).with_context(|| {
                format!(
                    "--state {s}: {}/meta/info.json `observation.state` has no such field (it has: {})",
                    dir.display(),
                    names.join(", ")
                )
            })
        })
        .collect()
}

/// Stage names: the model's (`spec.stages`), else the first dataset's temporal_proportions_sparse.json, else its
/// first annotation.
fn stage_names(
    spec: &PrepareSpec,
    first: &Dataset,
    file_props: Option<&[(String, f64)]>,
) -> anyhow::Result<Vec<String>> {
    Ok(match (
        &spec.stages,
        file_props,
        first.episodes().iter().find_map(|e| e.stages.as_ref()),
    ) {
        (Some((names, _)), _, _) => names.clone(),
        (None, Some(p), _) => p.iter().map(|(n, _)| n.clone()).collect(),
        (None, None, Some(a)) => a.names.clone(),
        (None, None, None) => bail!(
            "{} has no stage annotation: SARM progress targets need stages. Add per-episode SARM columns \
             `sparse_subtask_names`, `sparse_subtask_start_frames`, `sparse_subtask_end_frames` to \
             meta/episodes/*.parquet (`stagewise annotate --dataset DIR --from stages.json` writes them from a JSON \
             file; LeRobot's subtask_annotation.py does with a VLM), or meta/temporal_proportions_sparse.json \
             ({{\"stage name\": proportion, ...}}) for demonstrations whose stages take those shares of each \
             episode (docs/own-task.md)",
            spec.datasets[0].0.display()
        ),
    })
}

/// The episodes of every dataset that go into the training set, and why the others were skipped.
fn select_episodes(
    spec: &PrepareSpec,
    opened: &[Dataset],
    stage_names: &[String],
) -> anyhow::Result<(Vec<Use>, Vec<String>)> {
    let mut uses: Vec<Use> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    for (d, (ds, (dir, selection, is_val))) in opened.iter().zip(&spec.datasets).enumerate() {
        let props = ds.temporal_proportions_sparse();
        if let Some(p) = props {
            let names: Vec<&String> = p.iter().map(|(n, _)| n).collect();
            if names
                .iter()
                .map(|n| n.as_str())
                .ne(stage_names.iter().map(|n| n.as_str()))
            {
                bail!(
                    "{}/meta/temporal_proportions_sparse.json names stages {names:?}, the model's stages are {stage_names:?}",
                    dir.display()
                );
            }
        }
        let selection = selection.as_deref();
        if let Some(sel) = selection {
            if let Some(&bad) = sel.iter().find(|&&e| e >= ds.num_episodes()) {
                bail!(
                    "{}: episode {bad} asked for, the dataset has {} episodes",
                    dir.display(),
                    ds.num_episodes()
                );
            }
        }
        let skipped_before = skipped.len();
        for e in ds.episodes() {
            if selection.is_some_and(|sel| !sel.contains(&e.episode_index)) {
                continue;
            }
            match episode_use(dir, e, props, stage_names)? {
                Ok((ann, from_proportions)) => uses.push(Use {
                    ds: d,
                    episode: e.episode_index,
                    len: e.length,
                    ann,
                    from_proportions,
                    success: e.success,
                    val: *is_val,
                }),
                Err(why) => skipped.push(format!(
                    "{} episode {}: {why}",
                    dir.display(),
                    e.episode_index
                )),
            }
        }
        if selection.is_some() && skipped.len() > skipped_before {
            bail!(
                "episodes asked for by number cannot be used: {}",
                skipped[skipped_before..].join("; ")
            );
        }
    }
    Ok((uses, skipped))
}

/// An episode's stage annotation (its own, or one at the dataset's proportions: then `true`), or why it is
/// skipped; an error when its annotation disagrees with the model's stages or is malformed.
fn episode_use(
    dir: &Path,
    e: &EpisodeMeta,
    props: Option<&[(String, f64)]>,
    stage_names: &[String],
) -> anyhow::Result<Result<(StageAnnotation, bool), &'static str>> {
    let (ann, from_props) = match (&e.stages, props) {
        (Some(a), _) => (a.clone(), false),
        (None, Some(p)) if e.success != Some(false) => {
            let w: Vec<f64> = p.iter().map(|(_, a)| *a).collect();
            (annotation_from_proportions(stage_names, &w, e.length), true)
        }
        (None, Some(_)) => return Ok(Err("not annotated, marked unsuccessful")),
        (None, None) => return Ok(Err("not annotated")),
    };
    if ann.names != stage_names {
        bail!(
            "{} episode {}: stages {:?}, the model's stages are {stage_names:?} (every annotated episode \
             needs the same stages in the same order)",
            dir.display(),
            e.episode_index,
            ann.names
        );
    }
    targets::check_stages(&ann.names, &ann.start_frames, &ann.end_frames, e.length).map_err(
        |r| {
            anyhow::anyhow!(
                "{} episode {}: bad SARM annotation: {r}",
                dir.display(),
                e.episode_index
            )
        },
    )?;
    if e.length == 0 {
        return Ok(Err("no frames"));
    }
    Ok(Ok((ann, from_props)))
}

/// Stage proportions: the model's, else the first dataset's file's, else from the training episodes'
/// annotations.
fn stage_proportions(
    spec: &PrepareSpec,
    file_props: Option<&[(String, f64)]>,
    uses: &[Use],
) -> anyhow::Result<Vec<f64>> {
    Ok(match (&spec.stages, file_props) {
        (Some((_, p)), _) => p.clone(),
        (None, Some(p)) => p.iter().map(|(_, a)| *a).collect(),
        (None, None) => {
            let durations: Vec<Vec<f64>> = uses
                .iter()
                .filter(|u| !u.val)
                .map(|u| u.ann.durations())
                .collect();
            StageProportions::from_durations(&durations)
                .context("stage proportions from the annotations")?
                .proportions()
                .to_vec()
        }
    })
}

fn print_training_set(uses: &[Use], stage_names: &[String], proportions: &[f64], skipped: usize) {
    let n_train = uses.iter().filter(|u| !u.val).count();
    let from_props = uses.iter().filter(|u| u.from_proportions).count();
    println!(
        "training set: {} episodes ({} for validation), {} frames; stages {} (proportions {}){}{}",
        uses.len(),
        uses.len() - n_train,
        uses.iter().map(|u| u.len).sum::<usize>(),
        stage_names.join(", "),
        proportions
            .iter()
            .map(|p| format!("{p:.3}"))
            .collect::<Vec<_>>()
            .join(", "),
        if from_props > 0 {
            format!("; {from_props} episodes staged by temporal_proportions_sparse.json")
        } else {
            String::new()
        },
        if skipped == 0 {
            String::new()
        } else {
            format!("; {skipped} episodes skipped (not annotated)")
        }
    );
}

/// Reads, picks and resizes the episodes' frames and state into new training arrays with their targets
/// (episodes decoded in parallel, written in order); returns the arrays to finish and each episode's entry of
/// meta.json.
fn read_into_arrays(
    spec: &PrepareSpec,
    sources: &Sources,
    uses: &[Use],
) -> anyhow::Result<(TrainingArrays, Vec<serde_json::Value>)> {
    let total: usize = uses.iter().map(|u| u.len).sum();
    let mut arrays = TrainingArrays::create(
        &spec.data_dir,
        total,
        spec.views.len(),
        sources.size,
        spec.state.len(),
    )
    .with_context(|| {
        format!(
            "creating the training arrays in {}",
            spec.data_dir.display()
        )
    })?;
    let mut episodes_json = Vec::with_capacity(uses.len());
    let bar = crate::cli::progress_bar(Some(uses.len() as u64), "reading", "episodes");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(spec.read_threads)
        .build()
        .context("building the reader pool")?;
    // Chunks of consecutive episodes of one dataset: read together (one video decoder run per camera and
    // chunk), then picked and resized in parallel.
    let batch = (pool.current_num_threads().max(1) * 4).max(8);
    let mut chunks: Vec<&[Use]> = Vec::new();
    let mut start = 0;
    for i in 1..=uses.len() {
        if i == uses.len() || uses[i].ds != uses[start].ds || i - start >= batch {
            chunks.push(&uses[start..i]);
            start = i;
        }
    }
    let mut offset = 0usize;
    for chunk in chunks {
        let dir = &spec.datasets[chunk[0].ds].0;
        let read = read_chunk(&pool, sources, dir, chunk, &bar)?;
        for (u, r) in chunk.iter().zip(read) {
            let (px, st) = r?;
            let (stage, tau) =
                targets::frame_targets(&u.ann.start_frames, &u.ann.end_frames, u.len, u.success);
            arrays
                .push(&px, &st, &stage, &tau)
                .with_context(|| format!("{} episode {}", dir.display(), u.episode))?;
            episodes_json.push(serde_json::json!({
                "dataset": dir.display().to_string(),
                "episode_index": u.episode,
                "offset": offset,
                "length": u.len,
                "split": if u.val { "val" } else { "train" },
                "success": u.success,
                "targets": if u.from_proportions { "temporal_proportions_sparse" } else { "annotation" },
            }));
            offset += u.len;
        }
    }
    bar.finish_and_clear();
    Ok((arrays, episodes_json))
}

/// An episode's pixels and state ([`pick_episode`]), or why they cannot be used.
type Picked = anyhow::Result<(Vec<u8>, Vec<f32>)>;

/// Pixels and state of each episode of `chunk` (consecutive episodes of one dataset), read together and
/// picked in parallel.
fn read_chunk(
    pool: &rayon::ThreadPool,
    sources: &Sources,
    dir: &Path,
    chunk: &[Use],
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<Picked>> {
    let ds = &sources.opened[chunk[0].ds];
    let eps: Vec<usize> = chunk.iter().map(|u| u.episode).collect();
    let episodes = pool
        .install(|| ds.read_episodes(&eps, Images::Decode))
        .with_context(|| format!("{} episodes {eps:?}", dir.display()))?;
    Ok(pool.install(|| {
        chunk
            .par_iter()
            .zip(episodes.par_iter())
            .map(|(u, ep)| {
                let picked = pick_episode(sources, dir, u, ep)?;
                bar.inc(1);
                Ok(picked)
            })
            .collect()
    }))
}

/// An episode's frames of the model's views at its size (resized with a triangle filter, as the runtime
/// does), views interleaved per frame, and its state fields.
fn pick_episode(
    sources: &Sources,
    dir: &Path,
    u: &Use,
    ep: &Episode,
) -> anyhow::Result<(Vec<u8>, Vec<f32>)> {
    if ep.len() != u.len {
        bail!(
            "{} episode {}: {} rows, metadata says {}",
            dir.display(),
            u.episode,
            ep.len(),
            u.len
        );
    }
    let keys = &sources.keys[u.ds];
    let cams: Vec<&[image::RgbImage]> = keys
        .iter()
        .map(|k| {
            ep.images(k).with_context(|| {
                format!(
                    "{} episode {}: camera {k} not decoded",
                    dir.display(),
                    u.episode
                )
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let (width, height) = sources.size;
    let mut px = Vec::with_capacity(u.len * keys.len() * (width * height * 3) as usize);
    for t in 0..u.len {
        for cam in &cams {
            let im = &cam[t];
            if im.dimensions() == (width, height) {
                px.extend_from_slice(im.as_raw());
            } else {
                let r = image::imageops::resize(
                    im,
                    width,
                    height,
                    image::imageops::FilterType::Triangle,
                );
                px.extend_from_slice(r.as_raw());
            }
        }
    }
    if ep.state_dim == 0 || ep.state.len() != u.len * ep.state_dim {
        bail!(
            "{} episode {}: no observation.state values",
            dir.display(),
            u.episode
        );
    }
    let cols = &sources.state_cols[u.ds];
    let mut st = Vec::with_capacity(u.len * cols.len());
    for t in 0..u.len {
        let row = ep.state(t);
        st.extend(cols.iter().map(|&c| row[c]));
    }
    Ok((px, st))
}

/// Runs a training job, `python -m stagewise.training <job>`, drawing its `@progress <step> <steps> <loss>` lines
/// as a progress bar and printing the others. `-P`: the working directory is not on Python's path.
pub fn run_python(
    python: &Path,
    job: &str,
    args: &[String],
    data_dir: &Path,
) -> anyhow::Result<()> {
    let mut cmd = Command::new(python);
    cmd.args(["-P", "-u", "-m", "stagewise.training", job])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    tracing::info!(command = ?cmd, "training");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {} -m stagewise.training {job}", python.display()))?;
    let bar = crate::cli::progress_bar(Some(1), "training", "steps");
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.context("reading the trainer's output")?;
            if let Some(rest) = line.strip_prefix("@progress ") {
                let mut it = rest.split_whitespace();
                if let (Some(Ok(step)), Some(Ok(steps))) = (
                    it.next().map(str::parse::<u64>),
                    it.next().map(str::parse::<u64>),
                ) {
                    bar.set_length(steps);
                    bar.set_position(step);
                    if let Some(loss) = it.next() {
                        bar.set_message(format!("loss {loss}"));
                    }
                }
            } else if bar.is_hidden() {
                println!("{line}");
            } else {
                bar.println(&line);
            }
        }
    }
    let status = child.wait().context("waiting for the trainer")?;
    bar.finish_and_clear();
    if !status.success() {
        bail!(
            "{} -m stagewise.training {job} failed ({status}); the prepared arrays are kept in {}",
            python.display(),
            data_dir.display()
        );
    }
    Ok(())
}

/// Loads the written model the way the runtime does (manifest against graph) and prints its validation.
pub fn report_model(
    out: &Path,
    name: &str,
    manifest: &Path,
    t_start: Instant,
) -> anyhow::Result<()> {
    let rt = stagewise_model::OrtRuntime::init(None)?;
    let opts = stagewise_model::SessionOptions {
        provider: stagewise_model::Provider::Cpu,
        intra_threads: 1,
        tensorrt_cache: None,
    };
    stagewise_model::RewardModel::load(manifest, rt, &opts)
        .with_context(|| format!("loading the trained model {}", manifest.display()))?;
    let record_path = out.join(format!("{name}.train.json"));
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&record_path)
            .with_context(|| format!("reading {}", record_path.display()))?,
    )
    .with_context(|| format!("parsing {}", record_path.display()))?;
    println!(
        "model {} (single graph {name}.onnx, two-part {name}.encoder.onnx + {name}.head.onnx, record \
         {name}.train.json) in {:.0} s",
        manifest.display(),
        t_start.elapsed().as_secs_f64()
    );
    if let Some(v) = record.get("validation").and_then(|v| v.as_object()) {
        for (split, m) in v {
            println!(
                "{split:<5} {} episodes: VOC {}  progress MAE {}  stage accuracy {}  views blanked MAE {}",
                m["episodes"], m["voc"], m["mae"], m["stage_acc"], m["mae_views_blanked"]
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_only_state_is_privileged() {
        for n in ["grasped", "block0_x", "block12_qw", "target_y"] {
            assert!(privileged(n), "{n}");
        }
        for n in ["ee_x", "gripper_width", "blocky", "joint_0"] {
            assert!(!privileged(n), "{n}");
        }
    }
}
