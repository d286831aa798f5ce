//! `stagewise serve`: simulated envs behind zenoh queryables (`stagewise/<robot>/env/reset` and
//! `.../env/step`), for remote learners such as the Python gymnasium adapter (`python/`).
//!
//! The reward a learner gets is chosen here (`--reward`): the env's sparse task reward, or progress from the
//! task's reward model or from the simulator's oracle, shaped as `--shaping` says (the same flags as `run`;
//! potential-based by default). The learner takes the served reward as it is. Each served env is a
//! one-env `stagewise_runtime::ShapedEnv`, the reward path of `stagewise run` too; this file parses arguments
//! and answers the queryables. `--envs N` serves N independent envs, each on its own thread (and, with a
//! reward model, its own ONNX Runtime session), under the robot names `<robot>-0 .. <robot>-(N-1)` (`<robot>` is
//! --robot-name, default sim0).
//!
//! `--rerun MODE [ARG]` shows what the served envs did in Rerun (docs/view.md): each served env publishes its steps
//! in batches (`steps`, a message every tenth of a second and at an episode's end, with RGB frames at
//! `--rerun-frames-per-s`) and its episodes' summaries on its own robot's keys, with zenoh's `CongestionControl::Drop` (the learner's
//! reply never waits on the viewer), and a `stagewise view live` child follows every served robot. Without
//! `--rerun` none of this exists: no publisher, no message built.

use super::ort_args::OrtArgs;
use super::sim_args::SimEnvArgs;
use super::view::{LiveViewer, RerunSink, VIEWER_BATCH_GAP, VIEWER_FINISH, VIEWER_START};
use super::zenoh_args::{Role, ZenohArgs};
use crate::cli::{RewardSource, ShapingArgs};
use anyhow::{bail, Context};
use stagewise_core::{Env, EnvSpec, Observation, ShapingConfig, SuccessDetection};
use stagewise_model::StateMap;
use stagewise_runtime::clock::{Clock, Ticker};
use stagewise_runtime::{ProgressSource, RuntimeError, ShapedEnv, StepOutcome};
use stagewise_sim::{SimConfig, SimEnv};
use stagewise_stream::wire::{
    kind, now_ns, EnvSpecMsg, EpisodeMsg, ResetReply, ResetRequest, RewardSpecMsg, Schema,
    StepReply, StepRequest, StepsMsg,
};
use stagewise_stream::{EnvHandler, Keys, ObservationMsg, Tensor, ViewPublisher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub sim: SimEnvArgs,
    /// Where the served reward's progress comes from: `sparse` (none: the task reward), `model` (shaped with the
    /// task's shipped reward model, or the manifest given by --model), `oracle` (shaped with the simulator's
    /// ground-truth progress: the upper bound). The same values as `run --reward`; --shaping says how progress
    /// becomes the reward.
    #[arg(long, value_enum, default_value_t = RewardSource::Sparse)]
    pub reward: RewardSource,
    /// Reward model manifest for `--reward model` (default: the task's shipped model, models/<task>/<task>-progress.toml
    /// of the checkout the binary was built from or <venv>/share/stagewise/models of a pip install).
    #[arg(long, value_name = "MANIFEST")]
    pub model: Option<PathBuf>,
    #[command(flatten)]
    pub shaping: ShapingArgs,
    /// Environments served, each on its own thread; with N > 1 env i answers as robot `<robot-name>-<i>`.
    #[arg(long, default_value_t = 1)]
    pub envs: usize,
    /// Put the camera frames on the observations (default: state only; the spec then lists no views).
    #[arg(long)]
    pub images: bool,
    /// Put the reward model's embeddings of each observation's frames on the replies (`embedding`, float32
    /// [views, E]; needs --reward model with a two-part model): the frames the reward model read, encoded once,
    /// as a policy's visual input.
    #[arg(long)]
    pub embeddings: bool,
    /// Seed of env i's first server-chosen reset is seed + i; later ones count up by --envs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Pace each env's steps at this rate like a real robot (0 = as fast as possible).
    #[arg(long, default_value_t = 0.0)]
    pub hz: f64,
    /// Show what the served envs do in Rerun (docs/view.md): `spawn` (a viewer on this machine), `connect [ADDR]`
    /// (a running viewer, default 127.0.0.1:9876) or `save FILE.rrd`. Each served env then publishes its steps
    /// in batches (`stagewise/<robot>/steps`, 10 a second per env and one at an episode's end; RGB frames when the
    /// env renders, at --rerun-frames-per-s) and episode summaries, dropped under congestion, so a reply never
    /// waits on the viewer; a `stagewise view live` process shows them. A viewer that cannot start is a warning; serving
    /// goes on.
    #[arg(long, num_args = 1..=2, value_names = ["MODE", "ARG"])]
    pub rerun: Vec<String>,
    /// What ends an episode and counts as success: `env` (the simulator: its success, failure and time limit) or
    /// `model` (what a robot has: success detection on the served progress, --success-delta, default 0.05 for 1
    /// step, ends an episode with r_task = 1; otherwise only the time limit; the simulator's success stays in
    /// the reply's `info`, for evaluation only).
    #[arg(long, value_enum, default_value_t = EpisodeEnds::Env)]
    pub episode_ends: EpisodeEnds,
    /// With --rerun: camera frames per second and served env the viewer gets (default: 20 a second across all
    /// served envs, at most 10 per env: 2.5 each at --envs 8). Frames are most of what the viewer costs a learner.
    #[arg(long, value_name = "F")]
    pub rerun_frames_per_s: Option<f64>,
    /// Stop after this many seconds (0 = until Ctrl-C).
    #[arg(long, default_value_t = 0.0)]
    pub seconds: f64,
    #[command(flatten)]
    pub zenoh: ZenohArgs,
    #[command(flatten)]
    pub ort: OrtArgs,
}

/// One served env: a one-env [`ShapedEnv`] (simulator, progress source, shaper) and what its replies carry.
struct ServedEnv {
    shaped: ShapedEnv,
    spec: EnvSpecMsg,
    reward: RewardSpecMsg,
    images: bool,
    embeddings: bool,
    next_seed: u64,
    seed_step: u64,
    ticker: Ticker,
    /// What `--rerun` publishes (None without it: no message is built).
    view: Option<ServeView>,
}

/// `serve --episode-ends`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpisodeEnds {
    /// The simulator's success, failure and time limit.
    Env,
    /// Success detection on the served progress, and the time limit.
    Model,
}

/// `--rerun`'s stream of one served env: its steps in batches ([`StepsMsg`], one every `VIEWER_BATCH_GAP` and one
/// at an episode's end, with that step's RGB frames when its last ones are `frame_gap` old and at an episode's
/// end) and its episodes' summaries, put with zenoh's `CongestionControl::Drop` (the reply never waits on the
/// viewer). A learner stepping hundreds of steps a second per env then costs a message every tenth of a second,
/// not one a step (docs/view.md, "cost").
struct ServeView {
    publisher: ViewPublisher,
    /// The steps of the episode under way not yet sent (`None` when there are none).
    batch: Option<StepsMsg>,
    /// The episode under way.
    acc: EpisodeTally,
    /// When this env's last batch went out, and its last frames.
    last_sent: Option<Instant>,
    last_frames: Option<Instant>,
    frame_gap: Duration,
}

/// What an episode's summary says, summed over its steps so far.
#[derive(Debug, Default)]
struct EpisodeTally {
    ret: f64,
    task_ret: f64,
    length: u64,
    success: bool,
}

impl ServeView {
    fn new(publisher: ViewPublisher, frame_gap: Duration) -> Self {
        Self {
            publisher,
            batch: None,
            acc: EpisodeTally::default(),
            last_sent: None,
            last_frames: None,
            frame_gap,
        }
    }

    /// Adds one step (`out`, before its observation is turned into the reply) to the batch; sends the batch when
    /// the last went out `VIEWER_BATCH_GAP` ago (or none did) and when the episode ended, then the episode's
    /// summary; the batch carries this step's RGB frames when the last ones are `frame_gap` old (or there were
    /// none) and at the episode's end. Never blocks on the viewer.
    fn step(&mut self, action: &[f32], out: &StepOutcome) {
        let s = &out.shaped;
        let success = s.success || out.result.info.success;
        let publisher = &self.publisher;
        let b = self
            .batch
            .get_or_insert_with(|| StepsMsg::new(publisher.keys().robot(), 0, s.episode, s.step));
        b.action.push(action.to_vec());
        b.reward.push(s.reward);
        b.task_reward.push(s.task_reward);
        b.phi.push(s.phi);
        b.success.push(success);
        if let Some(o) = out.result.info.progress_oracle {
            b.oracle_phi.push(o);
        }
        if let Some(p) = &out.progress {
            b.stage.push(u32::try_from(p.stage).unwrap_or(u32::MAX));
            if !p.stage_probs.is_empty() {
                b.stage_probs.push(p.stage_probs.clone());
            }
        }
        self.acc.ret += s.reward;
        self.acc.task_ret += s.task_reward;
        self.acc.length += 1;
        self.acc.success |= success;
        let now = Instant::now();
        let since = |t: Option<Instant>, gap| t.is_none_or(|t| now.duration_since(t) >= gap);
        let due = since(self.last_sent, VIEWER_BATCH_GAP);
        if due || s.done() || b.rows() >= MAX_BATCH {
            if (due && since(self.last_frames, self.frame_gap)) || s.done() {
                b.next_obs = Some(ObservationMsg::from_observation_rgb(&out.result.obs));
                self.last_frames = Some(now);
            }
            self.send(now);
        }
        if s.done() {
            let acc = std::mem::take(&mut self.acc);
            self.publisher.episode(&EpisodeMsg {
                schema: Schema,
                kind: kind::Episode,
                robot: self.publisher.keys().robot().to_string(),
                env: 0,
                episode: s.episode,
                episode_return: acc.ret,
                task_return: acc.task_ret,
                length: acc.length,
                success: acc.success,
                terminated: s.terminated,
                truncated: s.truncated,
                final_phi: s.phi_next_observed,
                stamp_ns: now_ns(),
            });
        }
    }

    /// The env was reset: the steps of the episode it left go out (it is not summarised).
    fn reset(&mut self) {
        self.send(Instant::now());
        self.acc = EpisodeTally::default();
    }

    /// Sends the batch, if there is one.
    fn send(&mut self, now: Instant) {
        if let Some(mut b) = self.batch.take() {
            b.stamp_ns = now_ns();
            self.last_sent = Some(now);
            if !self.publisher.steps(&b) {
                tracing::warn!(robot = %self.publisher.keys().robot(), "--rerun: {} steps were not published", b.rows());
            }
        }
    }
}

/// `serve --rerun`'s default frame rate across all served envs (`--rerun-frames-per-s`).
const VIEWER_FRAMES_PER_S_IN_ALL: f64 = 20.0;

/// Rows at most in one batch: at a step every 0.1 ms a tenth of a second's steps would be 1000 (40 KB).
const MAX_BATCH: usize = 256;

impl Drop for ServeView {
    /// Serving ended: what is batched goes out, and the counts are reported.
    fn drop(&mut self) {
        self.send(Instant::now());
        let c = self.publisher.counters();
        println!(
            "--rerun {}: {} steps sent in {} messages ({} failed), {} episodes sent",
            self.publisher.keys().robot(),
            c.steps_sent,
            c.batches_sent,
            c.batches_failed,
            c.episodes_sent
        );
    }
}

/// A reply's error: the env's own message for an env error (no `environment 0:` prefix: a served env is one).
fn reply_error(e: RuntimeError) -> String {
    match e {
        RuntimeError::Env { source, .. } => stagewise_core::ErrorChain(&source).to_string(),
        e => stagewise_core::ErrorChain(&e).to_string(),
    }
}

impl ServedEnv {
    /// The reward model's embeddings of the last observation's frames (`--embeddings`), float32 [views, E].
    fn embedding(&self) -> Option<Tensor> {
        let (values, e) = self.shaped.last_embeddings().filter(|_| self.embeddings)?;
        let shape = vec![(values.len() / e.max(1)) as u64, e as u64];
        Tensor::from_f32_shaped(shape, values).ok()
    }

    fn obs_msg(&self, obs: Observation) -> ObservationMsg {
        let mut msg = ObservationMsg::from_observation_owned(obs);
        if !self.images {
            msg.images = Default::default();
        }
        msg.depth = Default::default();
        msg
    }
}

impl EnvHandler for ServedEnv {
    fn reset(&mut self, req: &ResetRequest) -> ResetReply {
        let seed = req.seed.unwrap_or_else(|| {
            let s = self.next_seed;
            self.next_seed = self.next_seed.wrapping_add(self.seed_step);
            s
        });
        let r = match self.shaped.reset_one(0, seed) {
            Ok(r) => r,
            Err(e) => return ResetReply::error(reply_error(e)),
        };
        if let Some(v) = self.view.as_mut() {
            v.reset();
        }
        ResetReply {
            spec: Some(self.spec.clone()),
            embedding: self.embedding(),
            obs: Some(self.obs_msg(r.obs)),
            reward: Some(self.reward.clone()),
            phi: r.progress.map(|p| f64::from(p.phi)),
            ..ResetReply::default()
        }
    }

    fn step(&mut self, req: &StepRequest) -> StepReply {
        self.ticker.tick();
        let out = match self.shaped.step(&[req.action.as_slice()]) {
            Ok(mut out) => out.remove(0),
            Err(e) => return StepReply::error(reply_error(e)),
        };
        if let Some(v) = self.view.as_mut() {
            v.step(&req.action, &out);
        }
        let (step, shaped) = (out.result, out.shaped);
        // The episode's end and task reward as the shaper saw them: the env's, or success detection's.
        let mut reply = StepReply {
            reward: shaped.task_reward,
            terminated: shaped.terminated,
            truncated: shaped.truncated,
            info: (&step.info).into(),
            ..StepReply::default()
        };
        // Sparse: the task reward as it is, and no progress.
        if let Some(p) = out.progress {
            reply.reward = shaped.reward;
            reply.task_reward = Some(shaped.task_reward);
            reply.phi = Some(f64::from(p.phi));
        }
        reply.embedding = self.embedding();
        reply.obs = Some(self.obs_msg(step.obs));
        reply
    }
}

fn spec_msg(spec: &EnvSpec, images: bool) -> EnvSpecMsg {
    let mut m = EnvSpecMsg::from(spec);
    if !images {
        m.views.clear();
    }
    m
}

/// The shaping and the simulator's configuration the flags ask for, checked: sparse has nothing to shape or
/// detect, embeddings are a reward model's, and `--episode-ends model` detects success on the served progress
/// (default detection when none is given) instead of the simulator's.
fn served_config(a: &ServeArgs) -> anyhow::Result<(ShapingConfig, SimConfig)> {
    // The shaper checks gamma, the scale and the form (sparse serves the task reward but keeps the same checks).
    let mut shaping = a.shaping.config()?;
    if a.reward == RewardSource::Sparse
        && (a.shaping.names_a_form() || a.shaping.success_delta.is_some())
    {
        bail!("--reward sparse has no progress to shape or detect success from: drop --shaping (and its parameters) and --success-delta (or pass --reward model|oracle)");
    }
    if a.embeddings && a.reward != RewardSource::Model {
        bail!("--embeddings are the reward model's: they need --reward model");
    }
    let mut cfg = a.sim.config();
    if a.episode_ends == EpisodeEnds::Model {
        if a.reward == RewardSource::Sparse {
            bail!("--episode-ends model detects success on the served progress: --reward sparse has none (pass --reward model)");
        }
        if shaping.success.is_none() {
            shaping = shaping.with_success(SuccessDetection::default());
        }
        cfg.end_on_task = false;
        let d = shaping.success.unwrap_or_default();
        println!(
            "episodes end on success detection (phi >= {} for {} step(s)) or the time limit ({} steps), not on the simulator's success",
            1.0 - d.delta,
            d.consecutive,
            cfg.max_steps
        );
    }
    // Render only when someone reads the frames; depth is never served.
    cfg.render = a.images || a.reward == RewardSource::Model;
    cfg.depth = false;
    Ok((shaping, cfg))
}

/// How old a served env's last frames are before `--rerun` sends new ones (`--rerun-frames-per-s`, default
/// `VIEWER_FRAMES_PER_S_IN_ALL` shared by the served envs, at most 10 a second per env).
fn viewer_frame_gap(a: &ServeArgs) -> anyhow::Result<Duration> {
    let fps = a
        .rerun_frames_per_s
        .unwrap_or(VIEWER_FRAMES_PER_S_IN_ALL / a.envs as f64)
        .min(10.0);
    if fps.is_nan() || fps <= 0.0 {
        bail!("--rerun-frames-per-s must be > 0 (got {fps})");
    }
    if a.rerun.is_empty() && a.rerun_frames_per_s.is_some() {
        bail!("--rerun-frames-per-s needs --rerun (it sets the viewer's frame rate)");
    }
    Ok(Duration::from_secs_f64(1.0 / fps))
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    if a.envs == 0 {
        bail!("--envs must be >= 1");
    }
    let (shaping, cfg) = served_config(&a)?;
    let manifest = match (a.reward, &a.model) {
        (RewardSource::Model, Some(m)) => Some(m.clone()),
        (RewardSource::Model, None) => Some(stagewise_model::runtime::find_shipped_model(
            a.sim.task.name(),
        )?),
        (_, Some(_)) => bail!("--model needs --reward model"),
        _ => None,
    };
    let mut reward = RewardSpecMsg {
        source: a.reward.name().to_string(),
        model: manifest.as_ref().map(|m| m.display().to_string()),
        gamma: shaping.gamma,
        shaping_scale: 0.0,
        ..RewardSpecMsg::default()
    };
    if a.reward != RewardSource::Sparse {
        reward.shaping_scale = shaping.scale;
        reward = reward.with_mode(&shaping.mode);
    }
    let rerun = (!a.rerun.is_empty())
        .then(|| RerunSink::parse(&a.rerun))
        .transpose()?;
    let frame_gap = viewer_frame_gap(&a)?;
    let base = Keys::new(a.zenoh.robot_name())?;
    let node = a.zenoh.open(Role::Listen, None)?;
    let mut handlers = Vec::with_capacity(a.envs);
    for i in 0..a.envs {
        let env = SimEnv::new(cfg.clone()).context("building the simulator")?;
        let progress = match (a.reward, &manifest) {
            (RewardSource::Oracle, _) => ProgressSource::Oracle,
            (_, Some(m)) => {
                let mut model = a.ort.load_reward_model(m)?;
                // The model's state by name from the simulator's (refused here, naming the field it lacks).
                let source = format!("the simulator's state (task {})", env.spec().task);
                let map =
                    StateMap::bind_source(model.manifest(), &source, &env.spec().state.names, None)
                        .with_context(|| format!("binding the state fields of {}", m.display()))?;
                model.set_state_map(map)?;
                if a.embeddings && model.last_embeddings().is_none() {
                    bail!(
                        "--embeddings: {} runs as a single graph, which has no frame embeddings (a two-part model, \
                         with [parts] in its manifest, has them)",
                        m.display()
                    );
                }
                ProgressSource::Model(Box::new(model))
            }
            _ => ProgressSource::Sparse,
        };
        let keys = if a.envs == 1 {
            base.clone()
        } else {
            Keys::new(format!("{}-{i}", base.robot()))?
        };
        let view = match &rerun {
            Some(_) => Some(ServeView::new(node.view_publisher(&keys)?, frame_gap)),
            None => None,
        };
        let handler = ServedEnv {
            spec: spec_msg(env.spec(), a.images),
            shaped: {
                let shaped =
                    ShapedEnv::new(vec![Box::new(env) as Box<dyn Env>], progress, shaping)?;
                match a.episode_ends {
                    EpisodeEnds::Env => shaped,
                    EpisodeEnds::Model => shaped.judged_by_progress(),
                }
            },
            reward: reward.clone(),
            images: a.images,
            embeddings: a.embeddings,
            next_seed: a.seed.wrapping_add(i as u64),
            seed_step: a.envs as u64,
            ticker: Ticker::new(Clock::from_hz(a.hz)),
            view,
        };
        handlers.push((keys, handler));
    }
    let viewer = rerun
        .as_ref()
        .and_then(|sink| start_viewer(&a, sink, &handlers));
    let mut servers = Vec::with_capacity(a.envs);
    for (keys, handler) in handlers {
        servers.push(node.serve_env(&keys, handler)?);
        println!(
            "serving {} ({} reward{}) on {} and {}",
            a.sim.task,
            a.reward,
            reward
                .shaping
                .as_deref()
                .map(|s| format!(", {s} shaping"))
                .unwrap_or_default(),
            keys.env_reset(),
            keys.env_step()
        );
    }
    println!("zenoh id {}", node.zid());
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed))
            .context("installing the Ctrl-C handler")?;
    }
    let start = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed)
        && (a.seconds <= 0.0 || start.elapsed().as_secs_f64() < a.seconds)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(servers);
    if let Some(v) = viewer {
        std::thread::sleep(Duration::from_millis(100));
        v.finish(VIEWER_FINISH);
    }
    node.close().ok();
    Ok(())
}

/// The `--rerun` viewer, following every served robot; before the first reply it waits (bounded) until it has
/// subscribed to each one's steps, so that it sees every step. One that cannot start is a warning.
fn start_viewer(
    a: &ServeArgs,
    sink: &RerunSink,
    handlers: &[(Keys, ServedEnv)],
) -> Option<LiveViewer> {
    let robots: Vec<&str> = handlers.iter().map(|(k, _)| k.robot()).collect();
    let started = super::view::viewer_endpoints(&a.zenoh.config(Role::Listen))
        .and_then(|endpoints| LiveViewer::spawn(sink, &robots, endpoints));
    let mut viewer = match started {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!("--rerun: no viewer ({e:#}); serving goes on without it");
            return None;
        }
    };
    let publishers: Vec<&ViewPublisher> = handlers
        .iter()
        .filter_map(|(_, h)| h.view.as_ref().map(|v| &v.publisher))
        .collect();
    viewer.wait_subscribed(VIEWER_START, |d| {
        publishers.iter().all(|s| s.wait_for_subscribers(d))
    });
    Some(viewer)
}
