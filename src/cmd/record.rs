//! `stagewise record`: run the scripted experts (clean and degraded) in the simulator and write the episodes as
//! a LeRobot v3-layout dataset (stagewise-dataset) with SARM stage annotations and per-frame ground truth.
//!
//! Per frame, besides the images, state and action: `progress_gt` (the oracle's phi), `stage_gt` (the oracle's
//! stage) and `degraded` (1 when the episode was recorded with a degradation preset). Per episode: `success`,
//! and `sparse_subtask_*` annotations (monotone: stage `k` starts the first time the oracle reaches a stage
//! `>= k`) for every episode that reached the last stage. `meta/stagewise_record.json` lists each episode's seed,
//! degradation preset and outcome.
//!
//! `--video` stores the cameras as LeRobot video features (MP4 under `videos/`, AV1 by default, as LeRobot
//! writes them; `--video-codec h264`) instead of PNG image columns.
//!
//! `--policy MANIFEST [--policy-noise STD]` drives the episodes with an ONNX policy instead of the expert (each
//! action held for the policy's own action repeat, Gaussian noise drawn per decision): the states an RL learner's
//! checkpoints visit, labelled by the oracle, as reward-model training data (docs/lab/learner_shaping.md).
//!
//! Rollouts run in parallel (rayon, one episode per task); episodes are written in order, so the same seeds give
//! the same dataset for any thread count.

use anyhow::{bail, Context};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use rayon::prelude::*;
use stagewise_dataset::{
    ColumnValues, DatasetInfo, DatasetWriter, EpisodeData, ExtraColumnSpec, ExtraDtype, FrameData,
    FrameImage, StageAnnotation, VideoCodec, VideoSettings, ViewSpec,
};
use stagewise_model::{OrtRuntime, PolicyModel, Provider, SessionOptions, StateMap};
use stagewise_sim::{rollout_driven, rollout_with, Degradation, EpisodeRecord, SimConfig, Task};
use std::path::{Path, PathBuf};

/// Degradation presets cycled over the degraded episodes: the failure modes first (AUROC needs failures), then
/// the ones that still succeed.
pub const DEGRADED_PRESETS: [&str; 8] = [
    "miss-grasp",
    "wrong-place",
    "freeze",
    "off-table",
    "noisy",
    "pauses",
    "regress",
    "mixed",
];

#[derive(clap::Args, Debug, Clone)]
pub struct RecordArgs {
    /// Simulated task.
    #[arg(long, value_parser = crate::cli::task_parser())]
    pub task: Task,
    /// Number of episodes.
    #[arg(long)]
    pub episodes: usize,
    /// Share of episodes recorded with a degradation preset (failures and imperfect successes), in [0, 1].
    #[arg(long, default_value_t = 0.3)]
    pub degraded: f64,
    /// Degradation presets cycled over the degraded episodes, comma-separated (e.g. only the failure modes,
    /// `miss-grasp,wrong-place,freeze,off-table`, for data where most attempts fail. Not among the defaults:
    /// `random` (no expert, random actions held 4 steps, the states an RL explorer visits) and `near-place` (the
    /// block put down 0.5-5 cm from its place point, both sides of the success tolerance).
    #[arg(long, value_delimiter = ',', default_values_t = DEGRADED_PRESETS.map(String::from))]
    pub presets: Vec<String>,
    /// Seed of the first episode; episode i uses seed + i.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Image width of every view.
    #[arg(long, default_value_t = 64)]
    pub width: u32,
    /// Image height of every view.
    #[arg(long, default_value_t = 64)]
    pub height: u32,
    #[command(flatten)]
    pub scene: crate::cli::SceneArgs,
    /// Paint the table this colour, `R,G,B` (0-255): a task variant the shipped models never saw (the layout is
    /// the same as without it).
    #[arg(long, value_parser = parse_rgb, value_name = "R,G,B")]
    pub table_color: Option<[u8; 3]>,
    /// Store the cameras as LeRobot video features (MP4 under videos/<key>/, encoded by ffmpeg) instead of PNG
    /// image columns.
    #[arg(long)]
    pub video: bool,
    /// Codec of `--video`: av1 (LeRobot's default: libsvtav1, or libaom-av1 for frames under 64x64) or h264.
    #[arg(long, default_value = "av1", value_name = "CODEC")]
    pub video_codec: VideoCodec,
    /// Constant-quality factor of `--video` (LeRobot's default 30; lower is better and larger).
    #[arg(long, default_value_t = 30, value_name = "CRF")]
    pub video_crf: u32,
    /// Drive every episode with this `kind = "policy"` manifest (state in, action out; each action held for the
    /// policy's own action repeat) instead of the scripted expert: the states a policy, e.g. an RL learner's
    /// checkpoint, visits, labelled by the oracle like any recording (reward-model training data on a learner's
    /// states). Refused together with `--degraded` or `--presets` (they choose expert degradations).
    #[arg(long, value_name = "MANIFEST", conflicts_with_all = ["degraded", "presets"])]
    pub policy: Option<PathBuf>,
    /// Std of Gaussian noise added to each of `--policy`'s actions (held with it, clipped to [-1, 1]): an
    /// explorer's actions rather than the deterministic policy's. Drawn per episode from its seed.
    #[arg(long, default_value_t = 0.0, requires = "policy")]
    pub policy_noise: f32,
    /// ONNX Runtime library for `--policy` (default: $ORT_DYLIB_PATH, else the project's .venv wheel). The policy
    /// runs on the CPU provider, one intra-op thread per rollout worker.
    #[arg(long, value_name = "PATH", requires = "policy")]
    pub ort_lib: Option<PathBuf>,
    /// Worker threads for the rollouts (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Output dataset directory (must not exist yet, or be empty).
    #[arg(long)]
    pub out: PathBuf,
}

/// `R,G,B` with each in 0..=255.
fn parse_rgb(s: &str) -> Result<[u8; 3], String> {
    let v: Vec<u8> = s
        .split(',')
        .map(|c| c.trim().parse::<u8>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{s:?}: expected R,G,B with each 0-255 ({e})"))?;
    <[u8; 3]>::try_from(v).map_err(|v| format!("{s:?}: expected 3 values R,G,B, got {}", v.len()))
}

/// The degradation preset of episode `i` when a share `fraction` is degraded (spread evenly, cycling through
/// `presets`).
pub fn preset_for(i: usize, fraction: f64, presets: &[String]) -> &str {
    let before = (i as f64 * fraction).floor() as usize;
    let after = ((i + 1) as f64 * fraction).floor() as usize;
    if after > before && !presets.is_empty() {
        &presets[before % presets.len()]
    } else {
        "none"
    }
}

/// Monotone SARM annotation from the oracle's per-state stages: stage `k` starts at the first frame whose running
/// maximum stage is `>= k`. `None` when the episode never reached the last stage.
pub fn monotone_annotation(stages: &[usize], names: &[String]) -> Option<StageAnnotation> {
    let k = names.len();
    if k == 0 || stages.is_empty() {
        return None;
    }
    let mut starts = vec![None; k];
    let mut max = 0usize;
    for (t, &s) in stages.iter().enumerate() {
        max = max.max(s.min(k - 1));
        for slot in starts.iter_mut().take(max + 1) {
            if slot.is_none() {
                *slot = Some(t as i64);
            }
        }
    }
    let starts: Vec<i64> = starts.into_iter().collect::<Option<Vec<_>>>()?;
    let len = stages.len() as i64;
    let ends: Vec<i64> = (0..k)
        .map(|i| if i + 1 < k { starts[i + 1] } else { len })
        .collect();
    Some(StageAnnotation {
        names: names.to_vec(),
        start_frames: starts,
        end_frames: ends,
    })
}

fn to_episode(
    rec: &EpisodeRecord,
    views: usize,
    degraded: bool,
    fps: u32,
) -> anyhow::Result<EpisodeData> {
    let frames = rec
        .frames
        .as_ref()
        .context("the rollout recorded no frames")?;
    let n = frames.len();
    if rec.states.len() != n || rec.progress.len() != n || rec.stages.len() != n {
        bail!(
            "episode seed {}: {} frames, {} states, {} progress values, {} stages",
            rec.seed,
            n,
            rec.states.len(),
            rec.progress.len(),
            rec.stages.len()
        );
    }
    let action_len = rec.actions.first().map_or(4, |a| a.len());
    let mut out = Vec::with_capacity(n);
    for (t, f) in frames.iter().enumerate() {
        if f.len() != views {
            bail!(
                "episode seed {} frame {t}: {} views, expected {views}",
                rec.seed,
                f.len()
            );
        }
        out.push(FrameData {
            views: f.iter().map(|v| FrameImage::Rgb(v.rgb.clone())).collect(),
            state: rec.states[t].clone(),
            // The last state has no action: the episode ended there.
            action: rec
                .actions
                .get(t)
                .cloned()
                .unwrap_or_else(|| vec![0.0; action_len]),
            timestamp: (t as f64 / f64::from(fps)) as f32,
        });
    }
    Ok(EpisodeData {
        task: rec.task.name().to_string(),
        frames: out,
        stages: monotone_annotation(&rec.stages, &rec.stage_names),
        success: rec.success,
        extras: vec![
            (
                "progress_gt".into(),
                ColumnValues::F32(rec.progress.clone()),
            ),
            (
                "stage_gt".into(),
                ColumnValues::I64(rec.stages.iter().map(|&s| s as i64).collect()),
            ),
            (
                "degraded".into(),
                ColumnValues::I64(vec![i64::from(degraded); n]),
            ),
        ],
    })
}

pub fn run(args: RecordArgs) -> anyhow::Result<()> {
    let task = args.task;
    check_args(&args)?;
    // Before the dataset is created: a bad policy leaves no output behind.
    let policy = args
        .policy
        .as_deref()
        .map(|p| PolicyDriver::new(p, task, args.policy_noise, args.ort_lib.as_deref()))
        .transpose()?;
    let mut cfg = SimConfig::new(task).with_resolution(args.width, args.height);
    cfg.depth = false;
    cfg.render_threads = 1;
    args.scene.apply(&mut cfg.randomization);
    cfg.randomization.table_color = args.table_color;
    cfg.validate()?;

    let info = dataset_info(&args, &cfg);
    let views = info.views.len();
    let fps = info.fps;
    let mut writer = DatasetWriter::create(&args.out, info)
        .with_context(|| format!("creating dataset {}", args.out.display()))?;
    let video_note = video_notes(&writer);
    let recorded = record_episodes(&args, &cfg, policy.as_ref(), &mut writer, views, fps)?;
    let summary = writer.finish().context("finishing the dataset")?;
    write_record_meta(&args, policy.as_ref(), recorded.log)?;
    println!(
        "{}: {} episodes ({} degraded, {} successful), {} frames, {} data file(s)",
        summary.root.display(),
        summary.episodes,
        recorded.degraded,
        recorded.successes,
        summary.frames,
        summary.data_files
    );
    for (what, views) in &video_note {
        println!("videos ({}): {what}", views.join(", "));
    }
    if let Some(p) = summary.stage_proportions {
        let s: Vec<String> = p.iter().map(|(n, a)| format!("{n} {a:.3}")).collect();
        println!("stage proportions: {}", s.join(", "));
    }
    Ok(())
}

/// Refuses bad arguments before anything is created.
fn check_args(args: &RecordArgs) -> anyhow::Result<()> {
    if args.episodes == 0 {
        bail!("--episodes must be at least 1");
    }
    if !(0.0..=1.0).contains(&args.degraded) {
        bail!("--degraded is {}: it must be in [0, 1]", args.degraded);
    }
    // Every preset but the clean expert's can degrade an episode (`random` among them, not a default).
    let known = || {
        Degradation::PRESETS
            .into_iter()
            .filter(|&n| n != "none")
            .collect::<Vec<_>>()
            .join(", ")
    };
    if args.presets.is_empty() {
        bail!("--presets is empty: name at least one of {}", known());
    }
    for p in &args.presets {
        if p == "none" || Degradation::preset(p).is_none() {
            bail!(
                "--presets: unknown degradation preset '{p}' (one of {})",
                known()
            );
        }
    }
    if !(args.policy_noise.is_finite() && args.policy_noise >= 0.0) {
        bail!(
            "--policy-noise is {}: it must be a finite std >= 0",
            args.policy_noise
        );
    }
    if args.width == 0 || args.height == 0 {
        bail!("--width and --height must be positive");
    }
    if args.out.exists()
        && std::fs::read_dir(&args.out)
            .with_context(|| format!("reading {}", args.out.display()))?
            .next()
            .is_some()
    {
        bail!("{} exists and is not empty", args.out.display());
    }
    Ok(())
}

/// The dataset's features: the task's state and actions, the rig's cameras, the oracle's per-frame columns.
fn dataset_info(args: &RecordArgs, cfg: &SimConfig) -> DatasetInfo {
    let task = args.task;
    DatasetInfo {
        fps: cfg.control_hz.round() as u32,
        robot_type: Some("stagewise-sim-cartesian-gripper".into()),
        state_names: stagewise_sim::state_spec(task).names,
        action_names: stagewise_sim::ACTION_NAMES
            .iter()
            .map(|s| s.to_string())
            .collect(),
        views: cfg
            .cameras
            .iter()
            .map(|c| ViewSpec {
                name: c.name.clone(),
                height: c.height,
                width: c.width,
            })
            .collect(),
        tasks: vec![task.name().to_string()],
        extra_columns: vec![
            ExtraColumnSpec {
                name: "progress_gt".into(),
                dtype: ExtraDtype::Float32,
            },
            ExtraColumnSpec {
                name: "stage_gt".into(),
                dtype: ExtraDtype::Int64,
            },
            ExtraColumnSpec {
                name: "degraded".into(),
                dtype: ExtraDtype::Int64,
            },
        ],
        stage_names: Some(task.stage_names().iter().map(|s| s.to_string()).collect()),
        video: args.video.then_some(VideoSettings {
            codec: args.video_codec,
            crf: args.video_crf,
            ..VideoSettings::default()
        }),
        ..Default::default()
    }
}

/// What encoded the cameras, once per encoder (and why, when it is not what was asked for), with its views.
fn video_notes(writer: &DatasetWriter) -> Vec<(String, Vec<String>)> {
    let mut video_note: Vec<(String, Vec<String>)> = Vec::new();
    for (key, enc) in writer.video_encodings() {
        let what = match &enc.note {
            Some(note) => format!("{} via {} ({note})", enc.codec, enc.encoder),
            None => format!("{} via {}", enc.codec, enc.encoder),
        };
        let view = key
            .strip_prefix("observation.images.")
            .unwrap_or(key)
            .to_string();
        match video_note.iter_mut().find(|(w, _)| *w == what) {
            Some((_, views)) => views.push(view),
            None => video_note.push((what, vec![view])),
        }
    }
    video_note
}

/// What [`record_episodes`] wrote: one log entry per episode, and the counts the summary line prints.
struct Recorded {
    log: Vec<serde_json::Value>,
    successes: usize,
    degraded: usize,
}

/// Rolls the episodes out in parallel batches and writes them in order.
fn record_episodes(
    args: &RecordArgs,
    cfg: &SimConfig,
    policy: Option<&PolicyDriver>,
    writer: &mut DatasetWriter,
    views: usize,
    fps: u32,
) -> anyhow::Result<Recorded> {
    let task = args.task;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build()
        .context("building the rollout thread pool")?;
    let bar = crate::cli::progress_bar(
        Some(args.episodes as u64),
        format!("recording {task}"),
        "episodes",
    );

    let batch = pool.current_num_threads().max(1) * 2;
    let mut out = Recorded {
        log: Vec::with_capacity(args.episodes),
        successes: 0,
        degraded: 0,
    };
    for chunk_start in (0..args.episodes).step_by(batch) {
        let ids: Vec<usize> = (chunk_start..(chunk_start + batch).min(args.episodes)).collect();
        let recs: Vec<anyhow::Result<(usize, &str, EpisodeRecord)>> = pool.install(|| {
            ids.par_iter()
                .map(|&i| {
                    let seed = args.seed + i as u64;
                    if let Some(policy) = policy {
                        let rec = policy
                            .rollout(cfg, seed)
                            .with_context(|| format!("{task} episode {i} (seed {seed}, policy)"))?;
                        bar.inc(1);
                        return Ok((i, POLICY_DRIVER, rec));
                    }
                    let preset = preset_for(i, args.degraded, &args.presets);
                    let deg = Degradation::preset(preset)
                        .with_context(|| format!("unknown preset {preset}"))?;
                    let rec = rollout_with(cfg, seed, deg)
                        .with_context(|| format!("{task} episode {i} (seed {seed}, {preset})"))?;
                    bar.inc(1);
                    Ok((i, preset, rec))
                })
                .collect()
        });
        for r in recs {
            let (i, preset, rec) = r?;
            let degraded = preset != "none";
            let ep = to_episode(&rec, views, degraded, fps)?;
            writer
                .add_episode(&ep)
                .with_context(|| format!("writing episode {i}"))?;
            out.successes += usize::from(rec.success);
            out.degraded += usize::from(degraded);
            out.log.push(serde_json::json!({
                "episode_index": i,
                "seed": rec.seed,
                "degradation": preset,
                "success": rec.success,
                "terminated": rec.terminated,
                "truncated": rec.truncated,
                "frames": rec.states.len(),
            }));
        }
    }
    bar.finish();
    Ok(out)
}

/// `meta/stagewise_record.json`: how the dataset was recorded, and each episode's seed, driver and outcome.
fn write_record_meta(
    args: &RecordArgs,
    policy: Option<&PolicyDriver>,
    log: Vec<serde_json::Value>,
) -> anyhow::Result<()> {
    let meta = serde_json::json!({
        "task": args.task.name(),
        "seed": args.seed,
        "degraded_fraction": if policy.is_some() { 1.0 } else { args.degraded },
        "degradation_presets": if policy.is_some() { vec![POLICY_DRIVER.to_string()] } else { args.presets.clone() },
        "policy": policy.map(|p| serde_json::json!({
            "manifest": p.manifest,
            "noise": p.noise,
            "action_repeat": p.action_repeat,
        })),
        "camera_jitter": args.scene.camera_jitter,
        "random_colors": args.scene.random_colors,
        "held_out_colors": args.scene.held_out_colors,
        "table_color": args.table_color,
        "video": args.video.then(|| serde_json::json!({
            "codec": args.video_codec.to_string(),
            "crf": args.video_crf,
        })),
        "width": args.width,
        "height": args.height,
        "episodes": log,
    });
    let meta_path = args.out.join("meta").join("stagewise_record.json");
    std::fs::write(&meta_path, serde_json::to_string_pretty(&meta)?)
        .with_context(|| format!("writing {}", meta_path.display()))
}

/// Mixed into an episode's seed for its `--policy-noise` stream, so that the noise is not the same random stream
/// as anything else seeded with the episode's seed (the scene, an expert's degradations).
const POLICY_NOISE_STREAM: u64 = 0x5eed_0f90_11c7;

/// The `degradation` a policy-driven episode is logged with (its frames' `degraded` column is 1: not the expert).
const POLICY_DRIVER: &str = "policy";

/// `--policy`: rolls episodes out with an ONNX policy (and Gaussian action noise) instead of the expert.
struct PolicyDriver {
    manifest: PathBuf,
    noise: f32,
    action_repeat: u32,
    runtime: &'static OrtRuntime,
}

impl PolicyDriver {
    /// Loads the policy once, so that a bad manifest or graph is refused before any episode runs.
    fn new(
        manifest: &Path,
        task: Task,
        noise: f32,
        ort_lib: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let runtime = OrtRuntime::init(ort_lib)?;
        let (probe, _) = Self::load(manifest, runtime, task)?;
        Ok(Self {
            manifest: manifest.to_path_buf(),
            noise,
            action_repeat: probe.action_repeat(),
            runtime,
        })
    }

    /// The policy and the map of its state fields (by name) from the simulator's state.
    fn load(
        manifest: &Path,
        runtime: &OrtRuntime,
        task: Task,
    ) -> anyhow::Result<(PolicyModel, StateMap)> {
        let opts = SessionOptions {
            provider: Provider::Cpu,
            intra_threads: 1,
            tensorrt_cache: None,
        };
        let bound = PolicyModel::load_bound(
            manifest,
            &format!("the simulator's state (task {task})"),
            &stagewise_sim::state_spec(task).names,
            None,
            stagewise_sim::ACTION_NAMES.len(),
            runtime,
            &opts,
        )
        .with_context(|| format!("loading --policy {}", manifest.display()))?;
        if bound.embeddings.is_some() {
            bail!(
                "--policy {} reads a reward model's frame embeddings, which record does not compute",
                manifest.display()
            );
        }
        // record's driver acts on the world's state between renders; a pixel policy needs each step's frames
        // before it acts (`stagewise run --policy` feeds them).
        if let Some(p) = &bound.pixels {
            bail!(
                "--policy {} reads camera frames ([pixels]: {} at {}), which record's policy driver does not \
                 feed: it acts on the simulator's state; run a pixel policy with `stagewise run --policy` or \
                 `stagewise eval policy`",
                manifest.display(),
                p.views.join(", "),
                p.size()
            );
        }
        Ok((bound.model, bound.state_map))
    }

    /// One episode: a session of its own (sessions run with `&mut self`; a policy graph loads in milliseconds),
    /// each decision's action plus noise held for the policy's action repeat.
    fn rollout(&self, cfg: &SimConfig, seed: u64) -> anyhow::Result<EpisodeRecord> {
        let (mut policy, map) = Self::load(&self.manifest, self.runtime, cfg.task)?;
        let mut input = vec![0.0f32; map.model_len()];
        let normal =
            Normal::new(0.0f32, self.noise.max(f32::MIN_POSITIVE)).context("--policy-noise")?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ POLICY_NOISE_STREAM);
        let repeat = u64::from(policy.action_repeat());
        let mut noise = [0.0f32; 4];
        let mut step = 0u64;
        rollout_driven(cfg, seed, Degradation::none(), |env| {
            let world = env.world().context("the env has no world after reset")?;
            let state = stagewise_sim::state_vector(world);
            map.select(&state, &mut input).map_err(anyhow::Error::msg)?;
            let held = policy.act_held(&[0], &[input.as_slice()])?;
            let action = held.first().context("the policy returned no action")?;
            if step.is_multiple_of(repeat) && self.noise > 0.0 {
                noise = std::array::from_fn(|_| normal.sample(&mut rng));
            }
            step += 1;
            let mut out = [0.0f32; 4];
            for (k, o) in out.iter_mut().enumerate() {
                let a = action
                    .get(k)
                    .copied()
                    .context("the policy's action is too short")?;
                *o = (a + noise[k]).clamp(-1.0, 1.0);
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_spread() {
        let all = DEGRADED_PRESETS.map(String::from);
        let n = (0..100)
            .filter(|&i| preset_for(i, 0.3, &all) != "none")
            .count();
        assert_eq!(n, 30);
        assert_eq!(
            (0..10)
                .filter(|&i| preset_for(i, 0.0, &all) != "none")
                .count(),
            0
        );
        assert_eq!(
            (0..10)
                .filter(|&i| preset_for(i, 1.0, &all) != "none")
                .count(),
            10
        );
        let failures = ["miss-grasp", "freeze"].map(String::from);
        let picked: Vec<&str> = (0..8).map(|i| preset_for(i, 0.5, &failures)).collect();
        assert_eq!(
            picked,
            [
                "none",
                "miss-grasp",
                "none",
                "freeze",
                "none",
                "miss-grasp",
                "none",
                "freeze"
            ]
        );
    }

    #[test]
    fn annotation_is_monotone() {
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let a = monotone_annotation(&[0, 0, 1, 0, 1, 2, 2], &names).expect("reached");
        assert_eq!(a.start_frames, vec![0, 2, 5]);
        assert_eq!(a.end_frames, vec![2, 5, 7]);
        assert!(monotone_annotation(&[0, 1, 1], &names).is_none());
        let skip = monotone_annotation(&[0, 2, 2], &names).expect("reached");
        assert_eq!(skip.start_frames, vec![0, 1, 1]);
    }
}
