//! `stagewise run`: the main job. Steps N simulated envs (or one robot through the firmware bridge:
//! `--bridge udp://HOST:PORT`) with a policy, reads progress from a reward model, shapes the reward, streams
//! transitions/progress/episodes over zenoh, writes a replayable episode log, and takes new policies from
//! learners between episodes.

use super::ort_args::OrtArgs;
use super::robot::LinkKeyArgs;
use super::sim_args::{ExpertPolicy, SharedSim, SimEnvArgs};
use super::view::{LiveViewer, RerunSink, VIEWER_FINISH, VIEWER_FRAMES, VIEWER_START};
use super::zenoh_args::{Role, ZenohArgs};
use crate::cli::{RewardSource, ShapingArgs};
use anyhow::{bail, Context};
use stagewise_bridge::{
    CameraSource, Endpoint, ImageDirCamera, RobotEnv, RobotEnvConfig, SceneClient, V4l2Camera,
};
use stagewise_core::{Env, EnvSpec, RewardMode, ShapingConfig};
use stagewise_model::{Manifest, ModelKind, PolicyEmbeddings, PolicyModel, StateMap};
use stagewise_runtime::{
    Actor, ActorConfig, Clock, EpisodeLog, FrameStream, GateConfig, OnnxPolicy, Policy, PolicyGate,
    PolicySource, PolicyState, PolicyUpdates, ProgressSource, RandomPolicy, RunStats,
    DEFAULT_POLICY_MAX_BYTES, POLICY_QUEUE,
};
use stagewise_sim::SimEnv;
use stagewise_stream::{Node, PublisherOptions, Subscription};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub sim: SimEnvArgs,
    /// Where the reward's progress comes from: `model` (a reward model: --model, by default the task's shipped
    /// one), `oracle` (the simulator's ground-truth progress: the upper bound), `sparse` (none: the task reward
    /// alone). The same values as `serve --reward`. Default: model.
    #[arg(long, value_enum)]
    pub reward: Option<RewardSource>,
    /// Reward model manifest for `--reward model` (default: the task's shipped model, models/<task>/<task>-progress.toml
    /// of the checkout the binary was built from or <venv>/share/stagewise/models of a pip install).
    #[arg(long, value_name = "MANIFEST")]
    pub model: Option<PathBuf>,
    #[command(flatten)]
    pub shaping: ShapingArgs,
    /// Policy: `expert` (scripted), `random`, or an ONNX policy file (state in, action out).
    #[arg(long, default_value = "expert")]
    pub policy: String,
    /// With --bridge: let the policy read the scene channel's object state (an emulator's simulator state; a real
    /// robot has no such tracker). Without it a policy whose manifest names a state field the robot does not
    /// measure itself, or a bare .onnx (it names none), is refused: an explicit, logged choice for emulator
    /// experiments with state policies.
    #[arg(long)]
    pub policy_reads_scene: bool,
    /// Environments stepped together (default 4; a robot is one env).
    #[arg(long)]
    pub envs: Option<usize>,
    /// Drive a robot through its firmware bridge instead of simulators: udp://HOST:PORT or
    /// serial:///dev/ttyACM0[@BAUD] (one env; streamed under --robot-name, default robot0).
    #[arg(long, value_name = "URL")]
    pub bridge: Option<String>,
    /// With --bridge: where the camera views (and the scene's object state) come from. `scene` = the
    /// emulator's scene channel at tcp://<robot host:port>; `tcp://HOST:PORT` = a scene server there;
    /// `dir:PATH` = PNG files in PATH/<view>/ (looped; no object state); `v4l2:/dev/videoN,...` = V4L2 devices
    /// in view order (not implemented yet: fails with a clear error).
    #[arg(long, default_value = "scene", value_name = "SOURCE")]
    pub cameras: String,
    /// With --bridge: seconds to wait for the firmware handshake and each camera/scene answer.
    #[arg(long, default_value_t = 2.0)]
    pub robot_timeout: f64,
    /// Stop after this many episodes (0 = run until Ctrl-C).
    #[arg(long, default_value_t = 20)]
    pub episodes: u64,
    /// Control rate in Hz; 0 = as fast as possible (simulation). A robot runs at a fixed rate; missed deadlines
    /// are counted. At a fixed rate a full stream queue drops transitions (counted); as fast as possible, the
    /// actor puts each transition itself, so a slower learner paces it (nothing is dropped).
    #[arg(long, default_value_t = 0.0)]
    pub hz: f64,
    /// Seed of the first episode; each reset takes the next one.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Episode log (every published message, replayable with `stagewise replay`).
    #[arg(long, default_value = "out/run.swlog")]
    pub log_file: PathBuf,
    /// Put each next observation's frames and state on the transitions, and each episode's reset observation on
    /// its first transition: a log `stagewise log export` turns into a dataset (default: no observations, only
    /// actions, rewards and flags).
    #[arg(long)]
    pub stream_images: bool,
    /// Do not open a zenoh session (score and log only).
    #[arg(long)]
    pub no_stream: bool,
    /// Show the run in Rerun (docs/view.md): `spawn` (a viewer on this machine), `connect [ADDR]` (a running
    /// viewer, default 127.0.0.1:9876) or `save FILE.rrd`. Puts RGB frames on every 10th step's transition (all
    /// of them, with depth, under --stream-images); a `stagewise view live`
    /// process subscribes to this run's stream at a lower CPU priority, drops what it cannot keep up with, and
    /// never holds the actor back (a viewer that fails is reported and the run goes on).
    #[arg(long, num_args = 1..=2, value_names = ["MODE", "ARG"])]
    pub rerun: Vec<String>,
    /// Seconds to wait for a transition subscriber before the first step (0 = start at once; messages put before
    /// a subscriber is matched are lost).
    #[arg(long, default_value_t = 0.0)]
    pub wait_subscribers: f64,
    /// Hex ed25519 public key: learner policies must be signed with its secret key (`stagewise policy keygen`;
    /// the signature covers robot name, version and sha256). Weak keys are refused. Required with --bridge
    /// (unless --allow-unsigned-policies); without it the simulator accepts unsigned policies and says so.
    #[arg(long, value_name = "HEX")]
    pub policy_key: Option<String>,
    /// Accept unsigned learner policies although this run drives a robot: only for a bench that nobody else
    /// can reach. Logged as a warning at start.
    #[arg(long)]
    pub allow_unsigned_policies: bool,
    /// Largest policy message accepted, in bytes; larger ones are refused before they are read or hashed
    /// (zenoh's maximum message size is set to this plus 64 KiB).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_POLICY_MAX_BYTES)]
    pub policy_max_bytes: usize,
    /// File that keeps the last accepted policy version, so that a restart refuses older (replayed) versions.
    /// Default: `<robot>.policy-state` beside --log-file. Delete it to accept older versions again.
    #[arg(long, value_name = "FILE")]
    pub policy_state: Option<PathBuf>,
    #[command(flatten)]
    pub link_key: LinkKeyArgs,
    #[command(flatten)]
    pub zenoh: ZenohArgs,
    #[command(flatten)]
    pub ort: OrtArgs,
}

/// What the reward is made of, from `--reward`, `--model` and `--shaping`.
#[derive(Debug)]
struct RewardChoice {
    source: RewardSource,
    /// The manifest for [`RewardSource::Model`].
    manifest: Option<PathBuf>,
    mode: RewardMode,
}

fn reward_choice(a: &RunArgs) -> anyhow::Result<RewardChoice> {
    let source = a.reward.unwrap_or(RewardSource::Model);
    let mode = a.shaping.mode()?;
    if a.model.is_some() && source != RewardSource::Model {
        bail!("--model needs --reward model (this run has --reward {source})");
    }
    // The sparse reward has no progress: shaping and progress-based success detection would do nothing (or,
    // with --success-delta 1, "succeed" at every first step).
    if source == RewardSource::Sparse
        && (a.shaping.names_a_form() || a.shaping.success_delta.is_some())
    {
        bail!("--reward sparse has no progress to shape or detect success from: drop --shaping (and its parameters) and --success-delta");
    }
    let manifest = match (source, a.model.clone()) {
        (RewardSource::Model, Some(m)) => Some(m),
        (RewardSource::Model, None) => Some(stagewise_model::runtime::find_shipped_model(
            a.sim.task.name(),
        )?),
        _ => None,
    };
    Ok(RewardChoice {
        source,
        manifest,
        mode,
    })
}

/// What a robot's reward model may read, for errors: its proprioception.
fn robot_state_source(url: &str) -> String {
    format!("the robot's proprioception ({url})")
}

/// A robot behind the firmware bridge, with cameras (and object state) from `--cameras`. The reward model
/// (`model`) is checked first: it may read only the robot's own state fields (its proprioception), never the
/// object state the scene channel appends for logging and evaluation.
fn connect_robot(a: &RunArgs, url: &str, reward: &RewardChoice) -> anyhow::Result<RobotEnv> {
    let endpoint: Endpoint = url.parse().with_context(|| format!("--bridge {url}"))?;
    let model = reward.manifest.as_deref();
    if reward.source == RewardSource::Oracle {
        bail!(
            "--reward oracle reads the simulator's ground-truth progress; a robot ({url}) has none: use a reward model (--reward model, the task's shipped one or --model MANIFEST)"
        );
    }
    if reward.source == RewardSource::Sparse {
        bail!(
            "--reward sparse is the simulator's task reward; a robot ({url}) reports none (every step would be 0): use a reward model (--reward model, the task's shipped one or --model MANIFEST)"
        );
    }
    if a.policy == "expert" {
        bail!(
            "--policy expert reads the simulator's world; over a robot ({url}) use an ONNX policy (--policy FILE) or --policy random"
        );
    }
    if a.envs.is_some_and(|n| n != 1) {
        bail!("--envs must be 1 with --bridge {url} (one robot is one env)");
    }
    if !(a.robot_timeout > 0.0 && a.robot_timeout.is_finite()) {
        bail!("--robot-timeout must be > 0 seconds");
    }
    let timeout = Duration::from_secs_f64(a.robot_timeout);
    let sim = a.sim.config();
    let task = a.sim.task.name();
    let stage_names: Vec<String> = a
        .sim
        .task
        .stage_names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    // Before the robot is contacted: no link key, no run (unless the explicit, logged opt-out).
    let key = a.link_key.key(url)?;
    let mut cfg = RobotEnvConfig::sim_like(endpoint.clone(), task, stage_names, key);
    if let Some(path) = model {
        // Before anything runs: a model asking for a field the robot does not measure is refused by name.
        let manifest =
            Manifest::load(path).with_context(|| format!("reading {}", path.display()))?;
        StateMap::bind_source(
            &manifest,
            &robot_state_source(url),
            &cfg.proprio_names(),
            None,
        )
        .context(
            "a reward model over a robot reads camera frames and the robot's own state only",
        )?;
    }
    cfg.max_steps = sim.max_steps;
    cfg.control_hz = sim.control_hz;
    // The handshake gives up after retries x reply_timeout: keep that within --robot-timeout.
    cfg.bridge.retries =
        ((a.robot_timeout / cfg.bridge.reply_timeout.as_secs_f64()).ceil() as u32).max(1);
    let mut scene = None;
    let cameras: Vec<Box<dyn CameraSource>> = match a.cameras.as_str() {
        "scene" | "emulator" => {
            let addr = match &endpoint {
                Endpoint::Udp(addr) => addr.to_string(),
                Endpoint::Serial { .. } => bail!(
                    "--cameras scene needs a udp:// robot (the scene channel is at the same host:port over TCP); with {url} pass --cameras tcp://HOST:PORT, dir:PATH or v4l2:DEVICES"
                ),
            };
            scene = Some(addr);
            Vec::new()
        }
        c if c.starts_with("tcp://") => {
            scene = Some(c["tcp://".len()..].to_string());
            Vec::new()
        }
        c if c.starts_with("dir:") => {
            let dir = std::path::Path::new(&c["dir:".len()..]);
            sim.cameras
                .iter()
                .map(|v| {
                    ImageDirCamera::open(&v.name, &dir.join(&v.name))
                        .map(|c| Box::new(c) as Box<dyn CameraSource>)
                })
                .collect::<Result<_, _>>()
                .with_context(|| format!("--cameras {c}"))?
        }
        c if c.starts_with("v4l2:") => {
            for d in c["v4l2:".len()..].split(',') {
                V4l2Camera::open(std::path::Path::new(d), a.sim.width, a.sim.height)
                    .with_context(|| format!("--cameras {c}"))?;
            }
            bail!("--cameras {c}: V4L2 capture is not implemented in this version of stagewise-bridge")
        }
        c => bail!("--cameras {c:?}: expected scene, tcp://HOST:PORT, dir:PATH or v4l2:DEVICES"),
    };
    tracing::info!(%endpoint, "connecting to the robot");
    // The firmware first: a robot that does not answer is reported as that, whatever the cameras.
    let mut env = RobotEnv::connect(cfg, cameras)
        .with_context(|| format!("connecting to the robot at {url}"))?;
    if let Some(addr) = &scene {
        let client = SceneClient::connect(addr, timeout).with_context(|| {
            format!(
                "opening the cameras of the robot at {url} (--cameras {})",
                a.cameras
            )
        })?;
        if client.task() != task {
            bail!(
                "the scene at tcp://{addr} shows task {}, this run is --task {task}",
                client.task()
            );
        }
        env = env
            .with_cameras(client.cameras())
            .with_state_source(client.state_source())
            .with_scene_reset(client.resetter());
    }
    Ok(env)
}

/// The environments of a run: simulators (shared with the scripted expert) or one robot.
enum Envs {
    Sim(Vec<SharedSim>),
    Robot(Box<RobotEnv>),
}

/// Slack between the policy size limit and zenoh's maximum message size (the message's other fields).
const ZENOH_MESSAGE_SLACK: usize = 64 << 10;

/// Who may put a policy on this actor, decided before anything else starts (a robot is not even contacted when
/// this refuses): the public key, or why unsigned policies are accepted (logged).
fn policy_trust(
    a: &RunArgs,
    robot_url: Option<&str>,
    robot: &str,
) -> anyhow::Result<Option<ed25519_dalek::VerifyingKey>> {
    let key = a
        .policy_key
        .as_deref()
        .map(PolicyGate::parse_key)
        .transpose()
        .context("--policy-key")?;
    if a.policy_max_bytes == 0 {
        bail!("--policy-max-bytes must be > 0");
    }
    if key.is_some() || a.no_stream {
        if a.allow_unsigned_policies && key.is_some() {
            bail!("--allow-unsigned-policies and --policy-key contradict each other: pass one");
        }
        return Ok(key);
    }
    match robot_url {
        Some(url) if !a.allow_unsigned_policies => bail!(
            "refusing to drive the robot at {url} with unsigned learner policies: anyone who can reach this actor's zenoh peer could make it run their ONNX policy. Pass --policy-key HEX (a public key from `stagewise policy keygen`; learners sign with the secret), or --allow-unsigned-policies on a bench nobody else can reach (or --no-stream: no policy updates at all)"
        ),
        Some(url) => tracing::warn!(
            "UNSIGNED POLICIES ACCEPTED (--allow-unsigned-policies): anyone who can reach this zenoh peer can make the robot at {url} run their ONNX policy from its next episode (stagewise/{robot}/policy)"
        ),
        None => tracing::warn!(
            "unsigned policies on stagewise/{robot}/policy are accepted (simulation); pass --policy-key HEX to require signed ones"
        ),
    }
    Ok(None)
}

impl Envs {
    /// The simulators, or a robot at `url`, as `--envs`, `--bridge` and the reward say.
    fn open(a: &RunArgs, robot_url: Option<&str>, reward: &RewardChoice) -> anyhow::Result<Self> {
        if let Some(url) = robot_url {
            return Ok(Self::Robot(Box::new(connect_robot(a, url, reward)?)));
        }
        let n = a.envs.unwrap_or(4);
        if n == 0 {
            bail!("--envs must be >= 1");
        }
        let cfg = a.sim.config();
        let sims = (0..n)
            .map(|_| SimEnv::new(cfg.clone()).map(SharedSim::new))
            .collect::<Result<_, _>>()
            .context("building the simulator")?;
        Ok(Self::Sim(sims))
    }

    fn spec(&self) -> EnvSpec {
        match self {
            Self::Sim(sims) => sims[0].spec().clone(),
            Self::Robot(r) => r.spec().clone(),
        }
    }

    fn into_envs(self) -> Vec<Box<dyn Env>> {
        match self {
            Self::Sim(sims) => sims
                .into_iter()
                .map(|s| Box::new(s) as Box<dyn Env>)
                .collect(),
            Self::Robot(r) => vec![r as Box<dyn Env>],
        }
    }
}

/// The file that keeps the last accepted policy version; when streaming, one that does not read (or is another
/// robot's) is refused here, before a robot is contacted.
fn policy_state_file(a: &RunArgs, robot: &str) -> anyhow::Result<PathBuf> {
    let path = a
        .policy_state
        .clone()
        .unwrap_or_else(|| a.log_file.with_file_name(format!("{robot}.policy-state")));
    if !a.no_stream {
        if let Some(s) = PolicyState::load(&path, robot)? {
            tracing::info!(
                "policy versions up to {} are refused ({} records the last accepted one)",
                s.version,
                path.display()
            );
        }
    }
    Ok(path)
}

/// Where progress comes from: a manifest exactly with `--reward model`, its state bound by name to the env's
/// (over a robot to its proprioception alone: the scene's object state stays on the observation for the log,
/// never in the model's input).
fn progress_source(
    a: &RunArgs,
    reward: &RewardChoice,
    envs: &Envs,
    spec: &EnvSpec,
) -> anyhow::Result<ProgressSource> {
    let path = match (&reward.manifest, reward.source) {
        (None, RewardSource::Sparse) => return Ok(ProgressSource::Sparse),
        (None, _) => return Ok(ProgressSource::Oracle),
        (Some(path), _) => path,
    };
    let mut model = a.ort.load_reward_model(path)?;
    let (source, readable) = match (envs, &a.bridge) {
        (Envs::Robot(r), Some(url)) => (robot_state_source(url), Some(r.proprio_names())),
        _ => (format!("the simulator's state (task {})", spec.task), None),
    };
    let map = StateMap::bind_source(model.manifest(), &source, &spec.state.names, readable)
        .with_context(|| format!("binding the state fields of {}", path.display()))?;
    model.set_state_map(map)?;
    Ok(ProgressSource::Model(Box::new(model)))
}

/// Over a robot a policy reads what the robot measures itself, unless `--policy-reads-scene` opens the scene
/// channel's object state to it (logged): refused are a manifest naming another field and a bare `.onnx`.
fn check_robot_policy(
    a: &RunArgs,
    path: &str,
    url: &str,
    proprio: &[String],
) -> anyhow::Result<()> {
    if a.policy_reads_scene {
        tracing::warn!(
            "--policy-reads-scene: the policy {path} reads the scene channel's object state over {url} (a real \
             robot has none; an emulator experiment)"
        );
        return Ok(());
    }
    let how = "a policy over a robot reads its proprioception (and camera frames or embeddings) only; pass \
               --policy-reads-scene to let it read the scene channel's object state (an emulator experiment)";
    if !path.ends_with(".toml") {
        bail!("--policy {path} is a bare ONNX file: it names no inputs, so over {url} it cannot be checked; {how}");
    }
    let m = Manifest::load_kind(std::path::Path::new(path), ModelKind::Policy)
        .with_context(|| format!("reading {path}"))?;
    let names = m.state_names().map(<[String]>::to_vec).unwrap_or_default();
    let foreign: Vec<&str> = names
        .iter()
        .filter(|n| !proprio.contains(n))
        .map(String::as_str)
        .collect();
    if names.is_empty() || !foreign.is_empty() {
        bail!(
            "--policy {path} reads {} which {} ({}) does not measure; {how}",
            if names.is_empty() {
                "a state without names".to_string()
            } else {
                foreign.join(", ")
            },
            robot_state_source(url),
            proprio.join(", ")
        );
    }
    Ok(())
}

/// A policy that reads a reward model's frame embeddings gets them from this run's reward model: it must be a
/// two-part model with the encoder the policy was trained with (sha256), the same views and embedding size.
fn check_embedding_source(
    path: &str,
    e: &PolicyEmbeddings,
    reward: &RewardChoice,
) -> anyhow::Result<()> {
    let Some(model) = reward.manifest.as_deref() else {
        bail!(
            "--policy {path} reads a reward model's frame embeddings (encoder {}), but this run has no reward \
             model (--reward {}): run it with --reward model and that model",
            &e.encoder_sha256[..12],
            reward.source
        );
    };
    check_embedding_model(path, e, model)
}

/// `model` (a reward model manifest) gives the embeddings `e` a policy (`path`) was trained on: a two-part model
/// with that encoder (sha256), as many views and the same embedding size.
pub(crate) fn check_embedding_model(
    path: &str,
    e: &PolicyEmbeddings,
    model: &std::path::Path,
) -> anyhow::Result<()> {
    let m = Manifest::load(model).with_context(|| format!("reading {}", model.display()))?;
    let have = m
        .parts
        .as_ref()
        .map(|p| (p.encoder_sha256.as_str(), m.views.len(), p.embedding));
    if have != Some((e.encoder_sha256.as_str(), e.views, e.size)) {
        bail!(
            "--policy {path} was trained on the embeddings of encoder {} ({} views x {}); the reward model {} \
             {}: give --model the policy's reward model",
            &e.encoder_sha256[..12],
            e.views,
            e.size,
            model.display(),
            match have {
                Some((sha, v, s)) => format!("has encoder {} ({v} views x {s})", &sha[..12.min(sha.len())]),
                None => "is a single graph (no frame embeddings)".to_string(),
            }
        );
    }
    Ok(())
}

/// A pixel policy (`[pixels]`) reads the frames this run already takes for its reward model: every view it
/// names, at exactly its size. A run renders (or a robot's cameras give) one size, so a policy of another size is
/// refused with both sizes, never fed resized frames nor rendered for twice (docs/runtime.md "Pixel policies").
fn check_pixel_source(
    a: &RunArgs,
    bound: &stagewise_model::BoundPolicy,
    envs: &Envs,
    spec: &EnvSpec,
) -> anyhow::Result<()> {
    let Some(p) = &bound.pixels else {
        return Ok(());
    };
    let (origin, fix) = match envs {
        Envs::Sim(_) => (
            format!("this run's simulator (task {}, --width/--height)", spec.task),
            format!(
                "pass --width {} --height {} to render at the policy's size (a reward model resizes frames to \
                 its own)",
                p.width, p.height
            ),
        ),
        Envs::Robot(_) => (
            format!("the robot's cameras (--cameras {})", a.cameras),
            format!(
                "give the policy cameras of these views at {} (an emulator: its --width/--height)",
                p.size()
            ),
        ),
    };
    let lacks_a_view = p
        .views
        .iter()
        .any(|v| !spec.views.iter().any(|s| &s.name == v));
    let what = format!("--policy {} reads camera frames", bound.manifest.display());
    bound.check_views(&origin, &spec.views).with_context(|| {
        if lacks_a_view {
            what
        } else {
            format!("{what}: {fix}")
        }
    })
}

/// `--policy`: the scripted expert, random actions, or an ONNX policy (a manifest or a bare file).
fn load_policy(
    a: &RunArgs,
    envs: &Envs,
    spec: &EnvSpec,
    reward: &RewardChoice,
) -> anyhow::Result<Box<dyn Policy>> {
    Ok(match (a.policy.as_str(), envs) {
        ("expert", Envs::Sim(sims)) => Box::new(ExpertPolicy::new(a.sim.task, sims)),
        ("expert", Envs::Robot(_)) => bail!("--policy expert needs the simulator"),
        ("random", _) => Box::new(RandomPolicy::new(&spec.action, a.seed)),
        (path, envs) => {
            if let (Envs::Robot(r), Some(url)) = (envs, &a.bridge) {
                check_robot_policy(a, path, url, r.proprio_names())?;
            }
            let (rt, opts) = (a.ort.runtime()?, a.ort.session_options());
            let n = spec.action.len();
            if path.ends_with(".toml") {
                // The policy's state fields by name (its manifest's state_names) from the env's state.
                let source = format!("the env's state (task {})", spec.task);
                let bound = PolicyModel::load_bound(
                    std::path::Path::new(path),
                    &source,
                    &spec.state.names,
                    None,
                    n,
                    rt,
                    &opts,
                )
                .with_context(|| format!("loading policy {path}"))?;
                if let Some(e) = &bound.embeddings {
                    check_embedding_source(path, e, reward)?;
                }
                check_pixel_source(a, &bound, envs, spec)?;
                Box::new(OnnxPolicy::bound(bound, path))
            } else {
                // A bare graph reads the whole state, or what its metadata declares (bound as a manifest's).
                let bytes =
                    std::fs::read(path).with_context(|| format!("reading policy {path}"))?;
                let source = format!("the env's state (task {})", spec.task);
                let bound = PolicyModel::bind_bytes(
                    &bytes,
                    path,
                    &source,
                    &spec.state.names,
                    None,
                    n,
                    rt,
                    &opts,
                )
                .with_context(|| format!("loading policy {path}"))?;
                if let Some(e) = &bound.embeddings {
                    check_embedding_source(path, e, reward)?;
                }
                check_pixel_source(a, &bound, envs, spec)?;
                Box::new(OnnxPolicy::bound(bound, path))
            }
        }
    })
}

/// The shaping flags' configuration with `--success-delta`'s detection, checked.
fn shaping_config(a: &RunArgs, reward: &RewardChoice) -> anyhow::Result<ShapingConfig> {
    a.shaping.config_with(reward.mode)
}

/// Who may put policies on the actor, where their last version is kept, and what they may read.
struct PolicyTrust {
    key: Option<ed25519_dalek::VerifyingKey>,
    state_file: PathBuf,
    source: PolicySource,
}

/// What a learner's policy may read, checked as `--policy` is at start: the env's state (by name when its graph
/// declares names; over a robot then only what the robot measures, unless --policy-reads-scene), the views this
/// run renders or the robot's cameras give, and the frame embeddings of this run's reward model.
fn policy_source(
    a: &RunArgs,
    envs: &Envs,
    spec: &EnvSpec,
    reward: &RewardChoice,
) -> anyhow::Result<PolicySource> {
    let (origin, readable, views_origin) = match (envs, &a.bridge) {
        (Envs::Robot(r), Some(url)) => (
            robot_state_source(url),
            (!a.policy_reads_scene).then(|| r.proprio_names().to_vec()),
            format!("the robot's cameras (--cameras {})", a.cameras),
        ),
        _ => (
            format!("the env's state (task {})", spec.task),
            None,
            format!(
                "this run's simulator (task {}, --width {} --height {})",
                spec.task, a.sim.width, a.sim.height
            ),
        ),
    };
    let (embeddings_origin, embeddings) = match reward.manifest.as_deref() {
        Some(path) => {
            let m = Manifest::load(path).with_context(|| format!("reading {}", path.display()))?;
            let e = m.parts.as_ref().map(|p| PolicyEmbeddings {
                encoder_sha256: p.encoder_sha256.clone(),
                views: m.views.len(),
                size: p.embedding,
            });
            (format!("this run's reward model {}", path.display()), e)
        }
        None => (format!("this run (--reward {})", reward.source), None),
    };
    Ok(PolicySource {
        origin,
        state_names: spec.state.names.clone(),
        readable,
        views_origin,
        views: spec.views.clone(),
        embeddings_origin,
        embeddings,
    })
}

/// Connects the actor to zenoh: its publisher (waiting for a subscriber if asked) and the policy intake, whose
/// checking, verifying and loading happen on a worker thread. The subscription must live as long as the run.
fn attach_stream(
    mut actor: Actor,
    node: &Node,
    a: &RunArgs,
    hz: f64,
    trust: PolicyTrust,
    spec: &EnvSpec,
    viewer: Option<&mut LiveViewer>,
) -> anyhow::Result<(Actor, Subscription)> {
    let keys = actor.keys().clone();
    // At a fixed rate the actor must never wait on a learner (a queue to a publisher thread; full, it drops);
    // running as fast as it can, it puts itself, so a slower learner paces it rather than losing data.
    let options = if hz > 0.0 {
        PublisherOptions::default()
    } else {
        PublisherOptions::backpressure()
    };
    let publisher = node.publisher(&keys, options)?;
    if let Some(viewer) = viewer {
        // Bounded: a viewer that fails or never comes delays the first step by VIEWER_START at most.
        viewer.wait_subscribed(VIEWER_START, |d| publisher.wait_for_subscribers(d));
    } else if a.wait_subscribers > 0.0
        && !publisher.wait_for_subscribers(Duration::from_secs_f64(a.wait_subscribers))
    {
        tracing::warn!(
            "no subscriber on {} after {} s; starting anyway",
            keys.transition(),
            a.wait_subscribers
        );
    }
    actor = actor.with_publisher(publisher);
    let gate = PolicyGate::new(GateConfig {
        robot: keys.robot().to_string(),
        key: trust.key,
        max_bytes: a.policy_max_bytes,
        state_file: Some(trust.state_file),
        source: trust.source,
        action_size: spec.action.len(),
        opts: a.ort.session_options(),
    })?;
    let (intake, updates) = PolicyUpdates::spawn(gate, a.ort.runtime()?, POLICY_QUEUE)
        .context("starting the policy checking thread")?;
    let subscription =
        node.subscribe_policy_bytes(&keys, a.policy_max_bytes, move |p| intake.offer(p))?;
    tracing::info!(robot = %keys.robot(), zid = %node.zid(), "streaming on stagewise/{}/*", keys.robot());
    Ok((actor.with_policy_updates(updates), subscription))
}

/// The `--rerun` viewer, started beside the actor; a viewer that cannot start is reported, never fatal.
fn start_viewer(a: &RunArgs, sink: &RerunSink, robot: &str) -> Option<LiveViewer> {
    let started = super::view::viewer_endpoints(&a.zenoh.config(Role::Listen))
        .and_then(|endpoints| LiveViewer::spawn(sink, &[robot], endpoints));
    match started {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!("--rerun: no viewer ({e:#}); the run goes on without it");
            None
        }
    }
}

/// Runs the actor until `--episodes` or Ctrl-C, with the house progress bar; returns its statistics, every
/// episode's return and the seconds it stepped.
fn run_episodes(actor: &mut Actor, episodes: u64) -> anyhow::Result<(RunStats, Vec<f64>, f64)> {
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed))
            .context("installing the Ctrl-C handler")?;
    }
    let bar = crate::cli::progress_bar((episodes > 0).then_some(episodes), "running", "episodes");
    let mut returns = Vec::new();
    let started = Instant::now();
    let stats = actor.run(&stop, |ep, stats| {
        returns.push(ep.episode_return);
        let recent = &returns[returns.len().saturating_sub(20)..];
        let mean = recent.iter().sum::<f64>() / recent.len() as f64;
        bar.set_message(format!(
            "return {mean:+.3} (last 20)  success {:.0}%  steps {}  policy {}",
            100.0 * stats.successes as f64 / stats.episodes.max(1) as f64,
            stats.env_steps,
            ep.policy
        ));
        bar.set_position(stats.episodes);
    })?;
    let secs = started.elapsed().as_secs_f64();
    bar.finish();
    Ok((stats, returns, secs))
}

/// The run's closing report on stdout.
fn print_summary(a: &RunArgs, stats: &RunStats, returns: &[f64], hz: f64, secs: f64) {
    let mean = returns.iter().sum::<f64>() / returns.len().max(1) as f64;
    println!(
        "{} episodes, {} env-steps, success rate {:.1}%, mean return {mean:+.4}; {:.1} env-steps/s ({secs:.2} s stepping)",
        stats.episodes,
        stats.env_steps,
        100.0 * stats.successes as f64 / stats.episodes.max(1) as f64,
        stats.env_steps as f64 / secs.max(1e-9)
    );
    if let Clock::Fixed { hz } = Clock::from_hz(hz) {
        println!(
            "clock {hz} Hz: {} deadline misses, worst step {:?}",
            stats.clock.deadline_misses, stats.clock.worst_step
        );
    }
    if let Some(c) = &stats.stream {
        println!(
            "stream: {} transitions sent, {} dropped, {} progress sent, {} episodes sent; policies: {} accepted, {} rejected, {} dropped (queue full)",
            c.transitions_sent, c.transitions_dropped, c.progress_sent, c.episodes_sent, stats.policy_swaps, stats.policy_rejections, stats.policy_dropped
        );
    }
    println!(
        "episode log: {} ({} records; replay with `stagewise replay {}`)",
        a.log_file.display(),
        stats.log_records,
        a.log_file.display()
    );
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let robot_url = a.bridge.as_deref();
    let stream_robot = a.zenoh.robot_target(robot_url);
    // Trust and the policy state first: a robot is not even contacted when they refuse.
    let (key, state_file) = (
        policy_trust(&a, robot_url, &stream_robot)?,
        policy_state_file(&a, &stream_robot)?,
    );
    let reward = reward_choice(&a)?;
    let rerun = (!a.rerun.is_empty())
        .then(|| RerunSink::parse(&a.rerun))
        .transpose()?;
    if rerun.is_some() && a.no_stream {
        bail!("--rerun shows this run's stream: it cannot go with --no-stream (view the log afterwards: `stagewise view log {}`)", a.log_file.display());
    }
    let envs = Envs::open(&a, robot_url, &reward)?;
    let spec = envs.spec();
    let progress = progress_source(&a, &reward, &envs, &spec)?;
    let policy = load_policy(&a, &envs, &spec, &reward)?;
    let trust = PolicyTrust {
        key,
        state_file,
        source: policy_source(&a, &envs, &spec, &reward)?,
    };
    // A robot runs at its control rate: the actor's clock then counts the steps that overran their period.
    let hz = match (&envs, a.hz) {
        (Envs::Robot(r), hz) if hz <= 0.0 => r.spec().control_hz,
        (_, hz) => hz,
    };
    let config = ActorConfig {
        robot: stream_robot,
        base_seed: a.seed,
        shaping: shaping_config(&a, &reward)?,
        clock: Clock::from_hz(hz),
        max_episodes: (a.episodes > 0).then_some(a.episodes),
        max_steps: None,
        frames: match (a.stream_images, rerun.is_some()) {
            (true, _) => FrameStream::Every,
            (false, true) => VIEWER_FRAMES,
            (false, false) => FrameStream::Off,
        },
    };
    let mut actor = Actor::new(envs.into_envs(), progress, policy, config)?
        .with_log(EpisodeLog::create(&a.log_file)?);
    // The actor receives only policies: nothing larger than one needs reassembling.
    let node = if a.no_stream {
        None
    } else {
        Some(a.zenoh.open(
            Role::Listen,
            Some(a.policy_max_bytes.saturating_add(ZENOH_MESSAGE_SLACK)),
        )?)
    };
    // Keep the subscription alive for the whole run.
    let mut _subscription = None;
    let mut viewer = None;
    if let Some(node) = &node {
        viewer = rerun
            .as_ref()
            .and_then(|sink| start_viewer(&a, sink, actor.keys().robot()));
        let (attached, sub) = attach_stream(actor, node, &a, hz, trust, &spec, viewer.as_mut())?;
        (actor, _subscription) = (attached, Some(sub));
    }
    let (stats, returns, secs) = run_episodes(&mut actor, a.episodes)?;
    print_summary(&a, &stats, &returns, hz, secs);
    if let Some(node) = node {
        drop(actor);
        std::thread::sleep(Duration::from_millis(100));
        if let Some(v) = viewer {
            v.finish(VIEWER_FINISH);
        }
        node.close().ok();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn choice(args: &[&str]) -> anyhow::Result<RewardChoice> {
        let mut argv = vec!["stagewise", "run"];
        argv.extend(args);
        match crate::Cli::try_parse_from(&argv).map(|c| c.command) {
            Ok(crate::Command::Run(a)) => reward_choice(&a),
            Ok(_) => unreachable!(),
            Err(e) => panic!("{argv:?}: {e}"),
        }
    }

    /// `--reward` (source), `--model` (manifest) and `--shaping` (mode).
    #[test]
    fn reward_source_manifest_and_shaping_resolve() {
        // The checkout this test was built from (never the working directory).
        let checkout = stagewise_model::runtime::build_checkout().expect("checkout");
        let shipped = Some(checkout.join("models/pick-place/pick-place-progress.toml"));
        let c = choice(&[]).unwrap();
        assert_eq!(
            (c.source, &c.manifest, c.mode),
            (RewardSource::Model, &shipped, RewardMode::default())
        );
        let c = choice(&["--reward", "model"]).unwrap();
        assert_eq!((c.source, &c.manifest), (RewardSource::Model, &shipped));
        let c = choice(&["--model", "m.toml"]).unwrap();
        assert_eq!(c.manifest, Some(PathBuf::from("m.toml")));
        let c = choice(&[
            "--reward",
            "oracle",
            "--shaping",
            "progress",
            "--potential-scale",
            "0.1",
            "--success-progress-one",
        ])
        .unwrap();
        assert_eq!(
            (c.source, &c.manifest, c.mode),
            (
                RewardSource::Oracle,
                &None,
                RewardMode::Progress {
                    potential_scale: 0.1,
                    success_progress_one: true
                },
            )
        );
        let c = choice(&["--reward", "oracle", "--shaping", "rank:12"]).unwrap();
        assert_eq!(
            (c.source, c.mode),
            (
                RewardSource::Oracle,
                RewardMode::WindowedRank { window: 12 }
            )
        );
        let c = choice(&["--reward", "sparse"]).unwrap();
        assert_eq!((c.source, &c.manifest), (RewardSource::Sparse, &None));
        // `--model` is a manifest: `oracle` names a file, not a source.
        let c = choice(&["--model", "oracle"]).unwrap();
        assert_eq!(
            (c.source, c.manifest),
            (RewardSource::Model, Some(PathBuf::from("oracle")))
        );
        let e = choice(&["--reward", "oracle", "--model", "m.toml"]).unwrap_err();
        assert!(
            e.to_string().contains("--model needs --reward model"),
            "{e}"
        );
        let e = choice(&["--shaping", "potential", "--potential-scale", "2"]).unwrap_err();
        assert!(e.to_string().contains("needs --shaping progress"), "{e}");
        for extra in [
            &["--shaping", "progress"][..],
            &["--phi-offset", "0.5"],
            &["--success-delta", "1"],
        ] {
            let mut args = vec!["--reward", "sparse"];
            args.extend(extra);
            let e = choice(&args).unwrap_err();
            assert!(
                e.to_string().contains("no progress to shape"),
                "{args:?}: {e}"
            );
        }
    }
}
