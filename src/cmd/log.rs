//! `stagewise log export`: a run's episode log (`stagewise run --stream-images`) as a LeRobot v3 dataset, so
//! that a learner's rollouts are data like any recording (`annotate`, `train`, `label` read it).
//!
//! One dataset episode per logged episode that ended (per robot, env and episode number), in the order they
//! ended in the log. Frame `k` of an episode is the observation the `k`-th action was taken in (frame 0: the
//! reset observation, which `run --stream-images` puts on each episode's first transition) with that action and
//! the step's outcome, LeRobot's convention: `observation.images.<view>`, `observation.state`, `action`,
//! `next.reward` (the shaped reward the learner was given), `next.task_reward` (the environment's own),
//! `next.done` / `next.terminated` / `next.success` (0/1), and the progress the run's reward read on the frame,
//! `stagewise.progress` / `stagewise.stage`: the reward MODEL's reading (or the simulator's oracle's for a run
//! with `--reward oracle`; the log does not say which, the export notes it when no message carries stage
//! probabilities), never an annotation: `record`'s ground truth columns are `progress_gt` / `stage_gt`, which an
//! export never writes. The observation after an episode's last action is not a frame (as in LeRobot's
//! recordings). Per episode: `success` (the run's episode summary) in the episode metadata, and in
//! `meta/stagewise_export.json` the log, robot, env, episode number, returns and flags of each.
//!
//! Bad input: a log without frames (a run without `--stream-images`) is refused naming the file; a torn last
//! record (the actor was killed mid-write) ends the log at its last complete record, which is said with the bytes
//! lost, and the export succeeds; episodes that never ended (no episode summary before the log ends) are skipped
//! and listed. A corrupt record is an error naming the file and byte offset. The dataset is written under a
//! temporary name beside `--out` and renamed into place only when it is complete: an error leaves nothing behind.

use anyhow::{bail, Context};
use stagewise_dataset::{
    ColumnValues, DatasetInfo, DatasetWriter, EpisodeData, ExtraColumnSpec, ExtraDtype, FrameData,
    FrameImage, ViewSpec,
};
use stagewise_runtime::LogReader;
use stagewise_sim::{SimConfig, Task};
use stagewise_stream::wire::{
    decode, Borrowed, EpisodeMsg, ObservationMsg, ProgressMsg, TensorData, TransitionMsg,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct LogArgs {
    #[command(subcommand)]
    pub command: LogCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum LogCommand {
    /// Convert an episode log of `stagewise run --stream-images` into a LeRobot v3 dataset (one episode per
    /// logged episode; images, state, action, rewards, done/success and the reward model's progress per frame).
    Export(ExportArgs),
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// The episode log written by `stagewise run --stream-images` (`--log-file`).
    #[arg(value_name = "LOG_FILE")]
    pub file: PathBuf,
    /// Output dataset directory (must not exist yet, or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// The simulated task the run drove (`run --task`): it names the state and action dimensions and is the
    /// dataset's task. The log's state must have the task's size.
    #[arg(long, value_parser = crate::cli::task_parser())]
    pub task: Task,
    /// Frames per second of the dataset (default: the task's control rate).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub fps: Option<u32>,
    /// Export this robot's episodes (default: the log's only robot; a log of several needs it).
    #[arg(long, value_name = "NAME")]
    pub robot: Option<String>,
    /// Export only these envs (comma-separated; default: all).
    #[arg(long = "env", value_name = "N", value_delimiter = ',', num_args = 1..)]
    pub envs: Vec<u32>,
}

pub fn run(a: LogArgs) -> anyhow::Result<()> {
    match a.command {
        LogCommand::Export(a) => export(a),
    }
}

/// Names of the per-frame columns besides images, state and action.
const REWARD: &str = "next.reward";
const TASK_REWARD: &str = "next.task_reward";
const DONE: &str = "next.done";
const TERMINATED: &str = "next.terminated";
const SUCCESS: &str = "next.success";
const PROGRESS: &str = "stagewise.progress";
const STAGE: &str = "stagewise.stage";

/// What every frame of the log must look like: fixed by the first observation.
#[derive(Debug, Clone, PartialEq)]
struct Layout {
    views: Vec<ViewSpec>,
    state_len: usize,
}

/// One logged episode being assembled, frame by frame.
#[derive(Default)]
struct Open {
    frames: Vec<FrameData>,
    reward: Vec<f32>,
    task_reward: Vec<f32>,
    success: Vec<i64>,
    terminated: bool,
    done: bool,
    /// The last transition's next observation (its camera frames and state): the next frame's.
    next_obs: Option<(Vec<FrameImage>, Vec<f32>)>,
    /// The progress read on each step's observation (step -> (phi, stage)).
    progress: BTreeMap<u64, (f32, i64)>,
}

/// A finished episode as the export wrote it, for meta/stagewise_export.json.
#[derive(serde::Serialize)]
struct Written {
    episode_index: usize,
    env: u32,
    episode: u64,
    length: u64,
    success: bool,
    terminated: bool,
    truncated: bool,
    episode_return: f64,
    task_return: f64,
    final_phi: f64,
}

/// An episode the log ends inside.
#[derive(serde::Serialize)]
struct Unfinished {
    env: u32,
    episode: u64,
    transitions: usize,
}

/// The whole export's state while the log is read.
struct Export<'a> {
    args: &'a ExportArgs,
    tmp: PathBuf,
    robot: Option<String>,
    layout: Option<Layout>,
    writer: Option<DatasetWriter>,
    /// Whether the dataset has the progress columns (fixed by the first episode written).
    with_progress: Option<bool>,
    /// Any progress message carried stage probabilities (a reward model's; the oracle's carry none).
    stage_probs_seen: bool,
    open: BTreeMap<(u32, u64), Open>,
    written: Vec<Written>,
    /// Records on keys that are not a robot's transition, progress or episode (skipped).
    other_records: u64,
}

fn export(a: ExportArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    check_out(&a.out)?;
    let tmp = temp_dir(&a.out)?;
    let mut ex = Export {
        args: &a,
        tmp: tmp.clone(),
        robot: a.robot.clone(),
        layout: None,
        writer: None,
        with_progress: None,
        stage_probs_seen: false,
        open: BTreeMap::new(),
        written: Vec::new(),
        other_records: 0,
    };
    let result = ex.run(started);
    if result.is_err() && tmp.exists() {
        // Nothing half-written is left behind as if it were a dataset.
        if let Err(e) = std::fs::remove_dir_all(&tmp) {
            tracing::warn!("could not remove {}: {e}", tmp.display());
        }
    }
    result
}

/// Refuses an `--out` that holds anything, before the log is read.
fn check_out(out: &Path) -> anyhow::Result<()> {
    if out.exists() {
        let mut entries =
            std::fs::read_dir(out).with_context(|| format!("--out {}", out.display()))?;
        if entries.next().is_some() {
            bail!("--out {} exists and is not empty", out.display());
        }
    }
    Ok(())
}

/// `.<name>.export-<pid>` beside `out`: where the dataset is written until it is complete.
fn temp_dir(out: &Path) -> anyhow::Result<PathBuf> {
    let name = out
        .file_name()
        .with_context(|| format!("--out {}: needs a directory name", out.display()))?
        .to_string_lossy();
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty());
    let parent = parent.unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    Ok(parent.join(format!(".{name}.export-{}", std::process::id())))
}

impl Export<'_> {
    fn run(&mut self, started: Instant) -> anyhow::Result<()> {
        let path = &self.args.file;
        let mut reader = LogReader::open(path)?;
        let bar =
            crate::cli::progress_bar(None, format!("exporting {}", path.display()), "records");
        loop {
            let at = reader.offset();
            let Some(rec) = reader.next_record()? else {
                break;
            };
            self.record(&rec.key, &rec.payload).with_context(|| {
                format!("{}: record at byte {at} ({})", path.display(), rec.key)
            })?;
            bar.inc(1);
        }
        bar.finish_and_clear();
        let records = reader.records();
        let torn = reader.torn_tail().cloned();
        let unfinished = self.unfinished();
        let Some(writer) = self.writer.take() else {
            bail!(
                "{}: no episode ended in the log ({records} records, {} episode(s) unfinished{}): nothing to export",
                path.display(),
                unfinished.len(),
                torn.as_ref().map_or(String::new(), |t| format!("; {t}"))
            );
        };
        let summary = writer.finish().context("finishing the dataset")?;
        self.write_meta(&unfinished, torn.as_ref())?;
        std::fs::rename(&self.tmp, &self.args.out).with_context(|| {
            format!(
                "moving {} to {}",
                self.tmp.display(),
                self.args.out.display()
            )
        })?;
        if let Some(parent) = self.args.out.parent().filter(|p| !p.as_os_str().is_empty()) {
            stagewise_dataset::durable::sync_dir(parent)?;
        }
        self.report(&summary, records, &unfinished, torn.as_ref(), started);
        Ok(())
    }

    fn report(
        &self,
        summary: &stagewise_dataset::DatasetSummary,
        records: u64,
        unfinished: &[Unfinished],
        torn: Option<&stagewise_runtime::TornTail>,
        started: Instant,
    ) {
        let secs = started.elapsed().as_secs_f64();
        let successes = self.written.iter().filter(|w| w.success).count();
        println!(
            "{}: {} episodes ({successes} successful), {} frames from {} ({records} records) in {secs:.2} s ({:.0} frames/s)",
            self.args.out.display(),
            summary.episodes,
            summary.frames,
            self.args.file.display(),
            summary.frames as f64 / secs.max(1e-9)
        );
        if !unfinished.is_empty() {
            let list: Vec<String> = unfinished
                .iter()
                .map(|u| {
                    format!(
                        "env {} episode {} ({} steps)",
                        u.env, u.episode, u.transitions
                    )
                })
                .collect();
            println!(
                "skipped {} unfinished episode(s), the log ends before their summary (no outcome to export): {}",
                unfinished.len(),
                list.join(", ")
            );
        }
        if let Some(t) = torn {
            println!(
                "{}: the log is cut: {t}; {} bytes lost, every complete record exported",
                self.args.file.display(),
                t.bytes
            );
        }
        if self.with_progress == Some(true) && !self.stage_probs_seen {
            println!(
                "note: no progress message carries stage probabilities: `{PROGRESS}` is likely the simulator's oracle (a run with --reward oracle), not a reward model's"
            );
        }
        if self.other_records > 0 {
            println!(
                "{} record(s) of other robots, envs or kinds skipped",
                self.other_records
            );
        }
    }

    /// One record: its robot and kind from the key (`stagewise/<robot>/<kind>`).
    fn record(&mut self, key: &str, payload: &[u8]) -> anyhow::Result<()> {
        let Some((robot, kind)) = key
            .strip_prefix("stagewise/")
            .and_then(|k| k.rsplit_once('/'))
        else {
            self.other_records += 1;
            return Ok(());
        };
        if !matches!(kind, "transition" | "progress" | "episode") {
            self.other_records += 1;
            return Ok(());
        }
        match &self.robot {
            None => self.robot = Some(robot.to_string()),
            Some(r) if r == robot => {}
            // --robot names the one to export: the others' records are skipped.
            Some(_) if self.args.robot.is_some() => {
                self.other_records += 1;
                return Ok(());
            }
            Some(r) => {
                bail!("the log holds more than one robot ({r}, {robot}): choose one with --robot")
            }
        }
        match kind {
            "transition" => {
                // Borrowed: the tensors are read from the record's bytes (depth maps are never copied).
                let m: TransitionMsg<Borrowed> = decode(payload)?;
                if self.wanted(m.env) {
                    self.transition(m)?;
                }
            }
            "progress" => {
                let m: ProgressMsg = decode(payload)?;
                if self.wanted(m.env) {
                    check_stages(&m, self.args.task)?;
                    self.stage_probs_seen |= !m.stage_probs.is_empty();
                    self.open
                        .entry((m.env, m.episode))
                        .or_default()
                        .progress
                        .insert(m.step, (m.phi, i64::from(m.stage)));
                }
            }
            _ => {
                let m: EpisodeMsg = decode(payload)?;
                if self.wanted(m.env) {
                    self.episode(m)?;
                }
            }
        }
        Ok(())
    }

    fn wanted(&mut self, env: u32) -> bool {
        let yes = self.args.envs.is_empty() || self.args.envs.contains(&env);
        self.other_records += u64::from(!yes);
        yes
    }

    /// A transition: frame `step` (its observation, action and outcome).
    fn transition(&mut self, m: TransitionMsg<Borrowed>) -> anyhow::Result<()> {
        let file = self.args.file.display().to_string();
        let what = format!("env {} episode {} step {}", m.env, m.episode, m.step);
        let no_frames = || {
            anyhow::anyhow!(
                "{file}: the transition of {what} carries no observation: the run was made without \
                 --stream-images (`--rerun` alone puts frames on every 10th step only), and its log does not \
                 hold every frame and state to export; run `stagewise run --stream-images` to log them"
            )
        };
        let open = self.open.entry((m.env, m.episode)).or_default();
        if m.step != open.frames.len() as u64 || open.done {
            bail!(
                "{what}: expected step {} of the episode{}: the log misses transitions",
                open.frames.len(),
                if open.done { " (it was done)" } else { "" }
            );
        }
        let task = self.args.task;
        let (views, state) = if m.step == 0 {
            if m.obs.is_none() && m.next_obs.is_some() {
                bail!(
                    "{file}: the first transition of env {} episode {} carries no reset observation: the log was \
                     written by a stagewise older than `log export` (its runs put the reset observation on the \
                     first transition); rerun `stagewise run --stream-images`",
                    m.env,
                    m.episode
                );
            }
            let obs = m.obs.as_ref().ok_or_else(no_frames)?;
            frame_of(obs, &mut self.layout, task)
                .with_context(|| format!("{what}: its observation"))?
        } else {
            open.next_obs.take().ok_or_else(no_frames)?
        };
        let next = m.next_obs.as_ref().ok_or_else(no_frames)?;
        open.next_obs = Some(
            frame_of(next, &mut self.layout, task)
                .with_context(|| format!("{what}: its next observation"))?,
        );
        open.frames.push(FrameData {
            views,
            state,
            action: m.action.clone(),
            timestamp: 0.0,
        });
        open.reward.push(m.reward as f32);
        open.task_reward.push(m.task_reward as f32);
        open.success.push(i64::from(m.success));
        open.terminated = m.terminated;
        open.done = m.terminated || m.truncated;
        Ok(())
    }

    /// An episode summary: the episode is complete and written.
    fn episode(&mut self, m: EpisodeMsg) -> anyhow::Result<()> {
        let what = format!("env {} episode {}", m.env, m.episode);
        let open = self
            .open
            .remove(&(m.env, m.episode))
            .with_context(|| format!("{what}: an episode summary without transitions"))?;
        let len = open.frames.len();
        if m.length != len as u64 {
            bail!(
                "{what}: the summary says {} steps, the log holds {len} transitions",
                m.length
            );
        }
        let with_progress = *self.with_progress.get_or_insert(!open.progress.is_empty());
        let ep = episode_data(
            open,
            self.args.task.name(),
            m.success,
            with_progress,
            self.fps(),
        )
        .with_context(|| what.clone())?;
        if self.writer.is_none() {
            let info = self.info(with_progress)?;
            self.writer = Some(
                DatasetWriter::create(&self.tmp, info)
                    .with_context(|| format!("creating the dataset in {}", self.tmp.display()))?,
            );
        }
        let writer = self.writer.as_mut().context("internal: no writer")?;
        writer
            .add_episode(&ep)
            .with_context(|| format!("writing {what}"))?;
        self.written.push(Written {
            episode_index: self.written.len(),
            env: m.env,
            episode: m.episode,
            length: m.length,
            success: m.success,
            terminated: m.terminated,
            truncated: m.truncated,
            episode_return: m.episode_return,
            task_return: m.task_return,
            final_phi: m.final_phi,
        });
        Ok(())
    }

    fn fps(&self) -> u32 {
        self.args
            .fps
            .unwrap_or_else(|| SimConfig::new(self.args.task).control_hz.round().max(1.0) as u32)
    }

    /// The dataset's features: the log's cameras, the task's state and action names, the step columns.
    fn info(&self, with_progress: bool) -> anyhow::Result<DatasetInfo> {
        let layout = self.layout.as_ref().context("internal: no frame seen")?;
        let task = self.args.task;
        let mut extra = vec![
            (REWARD, ExtraDtype::Float32),
            (TASK_REWARD, ExtraDtype::Float32),
            (DONE, ExtraDtype::Int64),
            (TERMINATED, ExtraDtype::Int64),
            (SUCCESS, ExtraDtype::Int64),
        ];
        if with_progress {
            extra.extend([(PROGRESS, ExtraDtype::Float32), (STAGE, ExtraDtype::Int64)]);
        }
        Ok(DatasetInfo {
            fps: self.fps(),
            robot_type: Some("stagewise-sim-cartesian-gripper".into()),
            state_names: stagewise_sim::state_spec(task).names,
            action_names: stagewise_sim::ACTION_NAMES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            views: layout.views.clone(),
            tasks: vec![task.name().to_string()],
            extra_columns: extra
                .into_iter()
                .map(|(name, dtype)| ExtraColumnSpec {
                    name: name.into(),
                    dtype,
                })
                .collect(),
            ..Default::default()
        })
    }

    /// Episodes the log ends inside (transitions, no summary).
    fn unfinished(&self) -> Vec<Unfinished> {
        self.open
            .iter()
            .filter(|(_, o)| !o.frames.is_empty())
            .map(|(&(env, episode), o)| Unfinished {
                env,
                episode,
                transitions: o.frames.len(),
            })
            .collect()
    }

    /// `meta/stagewise_export.json`: where the dataset came from and each episode's origin and outcome.
    fn write_meta(
        &self,
        unfinished: &[Unfinished],
        torn: Option<&stagewise_runtime::TornTail>,
    ) -> anyhow::Result<()> {
        let envs: BTreeSet<u32> = self.written.iter().map(|w| w.env).collect();
        let meta = serde_json::json!({
            "log": self.args.file,
            "robot": self.robot,
            "task": self.args.task.name(),
            "envs": envs,
            "columns": {
                REWARD: "the shaped reward the run gave the learner",
                TASK_REWARD: "the environment's own task reward",
                DONE: "1 on an episode's last frame (terminated or truncated)",
                TERMINATED: "1 on the last frame of an episode that terminated (not a time limit)",
                SUCCESS: "the run's success flag of the step",
                PROGRESS: "the progress the run's reward read on the frame (its reward model's; not ground truth)",
                STAGE: "the stage the run's reward read on the frame (its reward model's; not ground truth)",
            },
            "progress_has_stage_probs": self.stage_probs_seen,
            "episodes": self.written,
            "unfinished_skipped": unfinished,
            "torn_tail": torn.map(|t| serde_json::json!({
                "offset": t.offset, "bytes": t.bytes, "records": t.records, "part": t.part,
            })),
            "other_records_skipped": self.other_records,
        });
        let path = self.tmp.join("meta").join("stagewise_export.json");
        stagewise_dataset::durable::write_bytes(
            &path,
            serde_json::to_string_pretty(&meta)?.as_bytes(),
        )
        .with_context(|| format!("writing {}", path.display()))
    }
}

/// One observation's camera frames (in the layout's view order) and state, checked against the layout (fixed by
/// the first observation: its views, their sizes, the task's state size).
fn frame_of<D: TensorData>(
    obs: &ObservationMsg<D>,
    layout: &mut Option<Layout>,
    task: Task,
) -> anyhow::Result<(Vec<FrameImage>, Vec<f32>)> {
    let state = obs.state.to_f32_vec().context("state")?;
    let mut views = Vec::with_capacity(obs.images.len());
    let mut specs = Vec::with_capacity(obs.images.len());
    for (name, t) in obs.images.iter() {
        let rgb = t.to_rgb().with_context(|| format!("view {name:?}"))?;
        specs.push(ViewSpec {
            name: name.to_string(),
            height: rgb.height(),
            width: rgb.width(),
        });
        views.push(FrameImage::Rgb(rgb));
    }
    let this = Layout {
        views: specs,
        state_len: state.len(),
    };
    match layout {
        Some(l) if *l == this => {}
        Some(l) => bail!(
            "views {} and {} state values, where the log's first frame had views {} and {} state values",
            describe(&this.views),
            this.state_len,
            describe(&l.views),
            l.state_len
        ),
        None => {
            let want = stagewise_sim::state_spec(task).names.len();
            if this.state_len != want {
                bail!(
                    "{} state values, task {} has {want}: was the run's --task another? (pass it as --task)",
                    this.state_len,
                    task.name()
                );
            }
            if this.views.is_empty() {
                bail!("no camera frames");
            }
            *layout = Some(this);
        }
    }
    Ok((views, state))
}

/// The log does not name the run's task: `--task` is checked against what it does hold, the state's size
/// ([`frame_of`]) and here the stages of the progress (a model's stage probabilities, every stage index).
fn check_stages(m: &ProgressMsg, task: Task) -> anyhow::Result<()> {
    let k = task.stage_names().len();
    if (!m.stage_probs.is_empty() && m.stage_probs.len() != k) || m.stage as usize >= k {
        bail!(
            "env {} episode {} step {}: progress with {} stage probabilities at stage {}, task {} has {k} stages: \
             was the run's --task another? (pass it as --task)",
            m.env,
            m.episode,
            m.step,
            m.stage_probs.len(),
            m.stage,
            task.name()
        );
    }
    Ok(())
}

fn describe(views: &[ViewSpec]) -> String {
    let v: Vec<String> = views
        .iter()
        .map(|v| format!("{} {}x{}", v.name, v.width, v.height))
        .collect();
    format!("[{}]", v.join(", "))
}

/// The dataset episode of an assembled log episode: frames with timestamps `k / fps`, the step columns and,
/// with `with_progress`, the progress read on each frame (every step must have one).
fn episode_data(
    mut open: Open,
    task: &str,
    success: bool,
    with_progress: bool,
    fps: u32,
) -> anyhow::Result<EpisodeData> {
    let n = open.frames.len();
    for (k, f) in open.frames.iter_mut().enumerate() {
        f.timestamp = (k as f64 / f64::from(fps)) as f32;
    }
    let last = |v: bool| -> Vec<i64> { (0..n).map(|k| i64::from(v && k + 1 == n)).collect() };
    let mut extras = vec![
        (REWARD.to_string(), ColumnValues::F32(open.reward)),
        (TASK_REWARD.to_string(), ColumnValues::F32(open.task_reward)),
        (DONE.to_string(), ColumnValues::I64(last(open.done))),
        (
            TERMINATED.to_string(),
            ColumnValues::I64(last(open.terminated)),
        ),
        (SUCCESS.to_string(), ColumnValues::I64(open.success)),
    ];
    if with_progress == open.progress.is_empty() {
        bail!(
            "{} progress messages, where the dataset's first episode had{}: a log mixes runs with and without a progress source",
            if with_progress { "has no" } else { "has" },
            if with_progress { "" } else { " none" }
        );
    }
    if with_progress {
        let mut phi = Vec::with_capacity(n);
        let mut stage = Vec::with_capacity(n);
        for k in 0..n as u64 {
            let (p, s) = open.progress.get(&k).copied().with_context(|| {
                format!("no progress message for step {k} (the log misses records)")
            })?;
            phi.push(p);
            stage.push(s);
        }
        extras.push((PROGRESS.to_string(), ColumnValues::F32(phi)));
        extras.push((STAGE.to_string(), ColumnValues::I64(stage)));
    }
    Ok(EpisodeData {
        task: task.to_string(),
        frames: open.frames,
        stages: None,
        success,
        extras,
    })
}
