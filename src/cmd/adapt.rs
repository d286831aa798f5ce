//! `stagewise adapt`: adapts a trained stage-progress model to a task variant from one (or a few) annotated
//! demonstrations. The demonstrations are read and prepared as `stagewise train` does (any LeRobot v3 dataset,
//! image or video cameras), at the model's own views, state fields, image size and stages; then
//! `python -m stagewise.training adapt` fine-tunes the model's encoder convolutions on them (train.py's loss and
//! augmentation, an L2-SP pull towards the weights it started from, so the original task is kept; optionally
//! `--replay` episodes of the original task in every batch), exports a moving average of the weights like
//! `train` does (single graph, two-part form, manifest, training record) and warns about a demonstration whose
//! stage durations are far from the model's proportions (a retry annotated as one stage adapts worse).

use anyhow::{bail, Context};
use stagewise_model::{Manifest, ModelKind};
use std::path::PathBuf;
use std::time::Instant;

use super::python::find_python;
use super::train::{parse_selection, prepare, report_model, run_python, PipelineArgs, PrepareSpec};

#[derive(clap::Args, Debug, Clone)]
pub struct AdaptArgs {
    /// The stage-progress model to adapt (its manifest).
    #[arg(long)]
    pub model: PathBuf,
    /// An annotated demonstration of the new task: `DATASET` (every annotated episode) or `DATASET:EPISODES`
    /// (`DIR:0`, `DIR:0,4`, `DIR:0-2`); repeat for more.
    #[arg(long = "demo", required = true, value_name = "DATASET[:EPISODES]")]
    pub demos: Vec<PathBuf>,
    /// Episodes of the original task (`DATASET[:EPISODES]`, repeatable; e.g. a few of the model's training
    /// episodes), mixed into every fine-tuning batch (a share `--replay-frac`) so that the original task is kept.
    #[arg(long = "replay", value_name = "DATASET[:EPISODES]")]
    pub replay: Vec<PathBuf>,
    /// Share of each batch drawn from `--replay` episodes.
    #[arg(long, default_value_t = 0.25)]
    pub replay_frac: f64,
    /// Output model directory.
    #[arg(long)]
    pub out: PathBuf,
    /// File stem of the adapted model (default: `<out directory name>-progress`).
    #[arg(long)]
    pub name: Option<String>,
    /// Fine-tuning steps (batches of 32 windows; the adapt job's `--batch`).
    #[arg(long, default_value_t = 1000)]
    pub steps: usize,
    #[arg(long, default_value_t = 2e-3)]
    pub lr: f64,
    /// Weight of the L2-SP penalty `sum (w - w0)^2` towards the original weights.
    #[arg(long, default_value_t = 0.01)]
    pub l2sp: f64,
    /// Parameter-name prefixes to fine-tune, comma-separated (`enc.conv`: the encoder's convolutions; empty:
    /// every parameter).
    #[arg(long, default_value = "enc.conv")]
    pub trainable: String,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Replace a model of the same name in `--out`.
    #[arg(long)]
    pub force: bool,
    /// Keep the prepared arrays (`<out>/<name>.adapt-data/`).
    #[arg(long)]
    pub keep_data: bool,
    /// More arguments for `python -m stagewise.training adapt`, after `--` (e.g. `-- --colour 0`).
    #[arg(last = true)]
    pub extra: Vec<String>,
}

pub fn run(args: AdaptArgs) -> anyhow::Result<()> {
    let t_start = Instant::now();
    let m = Manifest::load(&args.model)
        .with_context(|| format!("loading the model {}", args.model.display()))?;
    if m.kind != ModelKind::StageProgress {
        bail!(
            "{}: kind {:?}; adapt takes a stage_progress model",
            args.model.display(),
            m.kind
        );
    }
    let state = m.state_names().map(<[String]>::to_vec).with_context(|| {
        format!(
            "{}: the manifest names no state fields (state_names); adapt reads the demonstrations' state by name",
            args.model.display()
        )
    })?;
    let image = m
        .image
        .as_ref()
        .with_context(|| format!("{}: no [image] section", args.model.display()))?;
    let stages = m
        .stages
        .as_ref()
        .with_context(|| format!("{}: no [stages] section", args.model.display()))?;
    if args.steps == 0 {
        bail!("--steps must be at least 1");
    }
    if !(0.0..1.0).contains(&args.replay_frac) {
        bail!(
            "--replay-frac {}: a share of the batch in [0, 1)",
            args.replay_frac
        );
    }
    let name = match &args.name {
        Some(n) => n.clone(),
        None => format!(
            "{}-progress",
            args.out
                .file_name()
                .and_then(|n| n.to_str())
                .filter(|n| !n.is_empty())
                .unwrap_or("adapted")
        ),
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
    if args.out.canonicalize().ok() == args.model.parent().and_then(|p| p.canonicalize().ok())
        && manifest.file_name() == args.model.file_name()
    {
        bail!("--out/--name would overwrite the model being adapted");
    }
    let python = find_python(args.pipeline.python.as_deref())?;
    super::train::check_python(&python)?;

    let selections = |list: &[PathBuf]| -> anyhow::Result<Vec<_>> {
        list.iter()
            .map(|d| parse_selection(d).map(|(dir, sel)| (dir, sel, false)))
            .collect()
    };
    let datasets = selections(&args.demos)?;
    let replay = selections(&args.replay)?;
    let data_dir = args.out.join(format!("{name}.adapt-data"));
    let replay_dir = args.out.join(format!("{name}.replay-data"));
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let spec = |datasets, data_dir: &std::path::Path| PrepareSpec {
        datasets,
        views: &m.views,
        state: &state,
        image_size: Some((image.width, image.height)),
        val_every: 0,
        read_threads: 0,
        data_dir: data_dir.to_path_buf(),
        stages: Some((stages.names.clone(), stages.proportions.clone())),
        t_start,
    };
    prepare(&spec(datasets, &data_dir))?;
    if !replay.is_empty() {
        prepare(&spec(replay, &replay_dir))
            .context("preparing the --replay episodes of the original task")?;
    }

    let mut py_args: Vec<String> = vec![
        "--model".into(),
        args.model.display().to_string(),
        "--data".into(),
        data_dir.display().to_string(),
        "--out".into(),
        args.out.display().to_string(),
        "--name".into(),
        name.clone(),
        "--trainable".into(),
        args.trainable.clone(),
    ];
    for (flag, v) in [
        ("--steps", args.steps.to_string()),
        ("--lr", args.lr.to_string()),
        ("--l2sp", args.l2sp.to_string()),
        ("--threads", args.pipeline.torch_threads.to_string()),
        ("--seed", args.pipeline.seed.to_string()),
    ] {
        py_args.push(flag.into());
        py_args.push(v);
    }
    if !args.replay.is_empty() {
        py_args.push("--replay-data".into());
        py_args.push(replay_dir.display().to_string());
        py_args.push("--replay-frac".into());
        py_args.push(args.replay_frac.to_string());
    }
    py_args.extend(args.extra.iter().cloned());
    run_python(&python, "adapt", &py_args, &data_dir)?;
    if !args.keep_data {
        for d in [&data_dir, &replay_dir] {
            if d.exists() {
                std::fs::remove_dir_all(d).with_context(|| format!("removing {}", d.display()))?;
            }
        }
    }
    report_model(&args.out, &name, &manifest, t_start)
}
