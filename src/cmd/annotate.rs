//! `stagewise annotate`: SARM stage annotations of a LeRobot v3 dataset from a JSON file (`--from`), to one
//! (`--export`), or removed (`--clear`). They go where LeRobot keeps them (`sparse_subtask_*` columns of
//! `meta/episodes/*.parquet`, `meta/temporal_proportions_sparse.json`: stagewise-dataset's `write_annotations`),
//! so `stagewise train`, LeRobot's SARM and RA-BC read them.
//!
//! The file (what `--export` writes, what `--from` reads):
//!
//! ```json
//! {"stages": ["reach", "grasp", "lift"],
//!  "episodes": [{"episode_index": 0, "start_frames": [0, 41, 60], "end_frames": [41, 60, 132]},
//!               {"episode_index": 3, "start_times": [0.0, 0.9, 1.3], "end_times": [0.9, 1.3, 2.5]}]}
//! ```
//!
//! Stage `k` spans frames `start..end` (end exclusive; LeRobot's convention). Times are seconds from the episode
//! start, turned into frames as LeRobot's `subtask_annotation.py` does (`int(t * fps)`). The ends may be left out
//! (what a person labelling stage starts gives: `{"episode_index": 5, "start_frames": [0, 38, 61]}`): each stage
//! then ends where the next starts and the last at the episode's end. `"success": true|false` is the person's
//! label of the episode's outcome (the dataset's `success` column; an entry may give only it). `--from` sets the
//! listed episodes and keeps the others' annotations.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use stagewise_dataset::{write_annotations, write_success, Dataset, StageAnnotation};
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct AnnotateArgs {
    /// The LeRobot v3 dataset directory.
    #[arg(long)]
    pub dataset: PathBuf,
    /// Set the annotations of the episodes listed in this JSON file (format: `stagewise annotate --help`'s
    /// module doc, or what --export writes).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["export", "clear"])]
    pub from: Option<PathBuf>,
    /// Write the dataset's annotations to this JSON file.
    #[arg(long, value_name = "FILE", conflicts_with = "clear")]
    pub export: Option<PathBuf>,
    /// Remove the annotations (of `--episodes`, or of every episode).
    #[arg(long)]
    pub clear: bool,
    /// With --clear: only these episodes (comma-separated indices).
    #[arg(long, value_delimiter = ',', requires = "clear")]
    pub episodes: Vec<usize>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct AnnotationFile {
    /// The stage names, in order (may be left out of a file that only labels outcomes).
    #[serde(default)]
    pub stages: Vec<String>,
    pub episodes: Vec<EpisodeStages>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct EpisodeStages {
    pub episode_index: usize,
    /// The episode's outcome as labelled (the dataset's `success` column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_frames: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_frames: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_times: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_times: Option<Vec<f64>>,
}

fn frames_of(
    frames: &Option<Vec<i64>>,
    times: &Option<Vec<f64>>,
    fps: f64,
    what: &str,
    ep: usize,
) -> anyhow::Result<Vec<i64>> {
    match (frames, times) {
        (Some(f), _) => Ok(f.clone()),
        (None, Some(t)) => t
            .iter()
            .map(|&s| {
                if s.is_finite() && s >= 0.0 {
                    Ok((s * fps) as i64)
                } else {
                    bail!("episode {ep}: {what}_times has {s}, not a time >= 0")
                }
            })
            .collect(),
        (None, None) => bail!("episode {ep}: give {what}_frames or {what}_times"),
    }
}

pub fn run(args: AnnotateArgs) -> anyhow::Result<()> {
    let ds = Dataset::open(&args.dataset)
        .with_context(|| format!("opening dataset {}", args.dataset.display()))?;
    let fps = f64::from(ds.fps());
    if let Some(path) = &args.export {
        let mut stages: Option<Vec<String>> = None;
        let mut episodes = Vec::new();
        for e in ds.episodes() {
            if let Some(a) = &e.stages {
                stages.get_or_insert_with(|| a.names.clone());
                episodes.push(EpisodeStages {
                    episode_index: e.episode_index,
                    success: e.success,
                    start_frames: Some(a.start_frames.clone()),
                    end_frames: Some(a.end_frames.clone()),
                    start_times: None,
                    end_times: None,
                });
            }
        }
        let file = AnnotationFile {
            stages: stages.unwrap_or_default(),
            episodes,
        };
        std::fs::write(path, serde_json::to_string_pretty(&file)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "wrote the annotations of {} of {} episodes to {}",
            file.episodes.len(),
            ds.num_episodes(),
            path.display()
        );
        return Ok(());
    }
    let mut labels: Vec<(usize, Option<bool>)> = Vec::new();
    let changes: Vec<(usize, Option<StageAnnotation>)> = if let Some(path) = &args.from {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let file: AnnotationFile = serde_json::from_str(&text)
            .with_context(|| format!("{}: not an annotation file", path.display()))?;
        let stages_given = file
            .episodes
            .iter()
            .any(|e| e.start_frames.is_some() || e.start_times.is_some());
        if file.stages.is_empty() && stages_given {
            bail!(
                "{}: `stages` is empty: name the stages in order",
                path.display()
            );
        }
        labels = file
            .episodes
            .iter()
            .filter_map(|e| e.success.map(|s| (e.episode_index, Some(s))))
            .collect();
        if let Some((ep, _)) = labels.iter().find(|(ep, _)| *ep >= ds.num_episodes()) {
            bail!(
                "{}: episode {ep}: out of range, the dataset has {} episodes",
                path.display(),
                ds.num_episodes()
            );
        }
        file.episodes
            .iter()
            .filter(|e| e.success.is_none() || e.start_frames.is_some() || e.start_times.is_some())
            .map(|e| {
                let ep = e.episode_index;
                let start_frames = frames_of(&e.start_frames, &e.start_times, fps, "start", ep)?;
                let end_frames = if e.end_frames.is_none() && e.end_times.is_none() {
                    // Stage starts only: each stage ends where the next starts, the last at the episode's end.
                    let Some(meta) = ds.episodes().iter().find(|m| m.episode_index == ep) else {
                        bail!(
                            "episode {ep}: the dataset has no such episode (it has {})",
                            ds.num_episodes()
                        );
                    };
                    let len = i64::try_from(meta.length).unwrap_or(i64::MAX);
                    start_frames.iter().skip(1).copied().chain([len]).collect()
                } else {
                    frames_of(&e.end_frames, &e.end_times, fps, "end", ep)?
                };
                let ann = StageAnnotation {
                    names: file.stages.clone(),
                    start_frames,
                    end_frames,
                };
                Ok((ep, Some(ann)))
            })
            .collect::<anyhow::Result<_>>()
            .with_context(|| format!("{}", path.display()))?
    } else if args.clear {
        if args.episodes.is_empty() {
            (0..ds.num_episodes()).map(|e| (e, None)).collect()
        } else {
            args.episodes.iter().map(|&e| (e, None)).collect()
        }
    } else {
        bail!("say what to do: --from FILE, --export FILE or --clear");
    };
    let s = write_annotations(&args.dataset, &changes)
        .with_context(|| format!("annotating {}", args.dataset.display()))?;
    if !labels.is_empty() {
        let (ok, failed, unknown) = write_success(&args.dataset, &labels)
            .with_context(|| format!("labelling the outcomes of {}", args.dataset.display()))?;
        println!(
            "{}: {} outcomes labelled ({ok} successful, {failed} failed, {unknown} unlabelled in all)",
            args.dataset.display(),
            labels.len()
        );
    }
    println!(
        "{}: {} of {} episodes annotated{}",
        args.dataset.display(),
        s.annotated,
        s.episodes,
        match &s.proportions {
            Some(p) => format!(
                "; stage proportions {}",
                p.iter()
                    .map(|(n, a)| format!("{n} {a:.3}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => " (no temporal_proportions_sparse.json)".into(),
        }
    );
    Ok(())
}
