//! The actor loop: step N environments with a policy through a [`ShapedEnv`] (progress from a reward model or
//! the simulator's oracle, potential-based shaping), publish transitions/progress/episodes and log them.

use crate::clock::{Clock, ClockStats, Ticker};
use crate::log::EpisodeLog;
use crate::policy::Policy;
use crate::shaped::{ProgressSource, ShapedEnv, StepOutcome};
use crate::sink::Sink;
use crate::updates::PolicyUpdates;
use crate::RuntimeError;
use stagewise_core::{Env, ErrorChain, Observation, Progress, ShapingConfig};
use stagewise_stream::{Counters, Keys, RobotPublisher};
use stagewise_wire::{
    kind, now_ns, EpisodeMsg, ObservationMsg, ProgressMsg, Schema, TransitionMsg,
};
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, Clone)]
pub struct ActorConfig {
    pub robot: String,
    /// Seed of the first episode of env 0; every reset takes the next seed, in env order.
    pub base_seed: u64,
    pub shaping: ShapingConfig,
    pub clock: Clock,
    /// Stop after this many finished episodes (all envs together).
    pub max_episodes: Option<u64>,
    /// Stop after this many env-steps (all envs together).
    pub max_steps: Option<u64>,
    /// Which transitions carry the next observation's frames.
    pub frames: FrameStream,
}

/// Which transitions carry the next observation (frames and state) on the stream and in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FrameStream {
    /// None: the transitions carry no observation (actions, rewards and flags only).
    #[default]
    Off,
    /// Every transition, RGB and depth (a learner that reads pixels), and each episode's reset observation on its
    /// first transition (`obs`) with the progress read on it (a step-0 progress message): a log then holds every
    /// frame of every episode (`stagewise log export`).
    Every,
    /// Every `every`-th step of each episode and its last step, RGB only: what a person watching can follow,
    /// at a fraction of the encoding (a viewer; depth, 4 bytes a pixel against RGB's 3, is most of a frame).
    Sampled { every: u64 },
}

impl FrameStream {
    /// The frames of `step` (0-based within its episode) as the config asks, or `None`.
    fn message(self, step: u64, done: bool, obs: &Observation) -> Option<ObservationMsg> {
        match self {
            FrameStream::Off => None,
            FrameStream::Every => Some(ObservationMsg::from_observation(obs)),
            FrameStream::Sampled { every } => ((step + 1).is_multiple_of(every.max(1)) || done)
                .then(|| ObservationMsg::from_observation_rgb(obs)),
        }
    }
}

/// The transition message of one env's step, as the actor publishes and logs it (and `stagewise serve --rerun`
/// publishes a served env's): the shaped step with the policy's `action`, the reward model's stage of the next
/// state, success (the env's or success detection's), the simulator's ground-truth progress of the next state
/// when the env has one (`oracle_phi`; a robot has none), the reward model that shaped the reward (`reward_model`,
/// [`ProgressSource::reward_model`]; `None` for the oracle's or the sparse reward), and the next observation's
/// frames as `frames` asks.
pub fn transition_message(
    robot: &str,
    action: Vec<f32>,
    out: &StepOutcome,
    frames: FrameStream,
    reward_model: Option<&str>,
) -> TransitionMsg {
    let (step, shaped) = (&out.result, &out.shaped);
    let stage = out.progress.as_ref().map(|p| p.stage as u32);
    let mut t = shaped.to_transition(action, stage);
    t.success = shaped.success || step.info.success;
    let mut msg = TransitionMsg::from_transition(robot, &t)
        .with_oracle_phi(step.info.progress_oracle)
        .with_reward_model(reward_model);
    if let Some(obs) = frames.message(shaped.step, shaped.done(), &step.obs) {
        msg = msg.with_next_obs(obs);
    }
    msg
}

/// One finished episode.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeSummary {
    pub env: usize,
    pub episode: u64,
    pub seed: u64,
    pub episode_return: f64,
    pub task_return: f64,
    pub length: u64,
    pub success: bool,
    pub terminated: bool,
    pub truncated: bool,
    pub final_phi: f64,
    pub policy: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunStats {
    pub env_steps: u64,
    pub episodes: u64,
    pub successes: u64,
    pub policy_swaps: u64,
    pub policy_rejections: u64,
    /// Policy messages dropped unread because the checking queue was full.
    pub policy_dropped: u64,
    pub clock: ClockStats,
    pub stream: Option<Counters>,
    pub log_records: u64,
}

#[derive(Debug, Clone, Default)]
struct EpisodeAcc {
    episode: u64,
    seed: u64,
    /// With [`FrameStream::Every`], until the episode's first transition is sent: the progress read on its reset
    /// observation (`Some(None)` without a progress source), sent with that transition.
    reset_progress: Option<Option<Progress>>,
    ret: f64,
    task_ret: f64,
    length: u64,
    success: bool,
}

/// Policies in use: each env runs the policy it started its episode with; a new policy takes over env by env
/// at episode boundaries.
struct Policies {
    slots: Vec<Option<Box<dyn Policy>>>,
    of_env: Vec<usize>,
    latest: usize,
}

impl Policies {
    fn new(policy: Box<dyn Policy>, n: usize) -> Self {
        Self {
            slots: vec![Some(policy)],
            of_env: vec![0; n],
            latest: 0,
        }
    }

    fn install(&mut self, policy: Box<dyn Policy>) {
        self.slots.push(Some(policy));
        self.latest = self.slots.len() - 1;
    }

    /// Env `env` starts an episode: it moves to the latest policy; policies nobody runs are dropped.
    fn start_episode(&mut self, env: usize, seed: u64) {
        self.of_env[env] = self.latest;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if i != self.latest && !self.of_env.contains(&i) {
                *slot = None;
            }
        }
        if let Some(p) = self.slots[self.latest].as_mut() {
            p.reset(env, seed);
        }
    }

    fn name_of(&self, env: usize) -> String {
        self.slots[self.of_env[env]]
            .as_ref()
            .map_or_else(|| "?".into(), |p| p.name())
    }

    /// Whether a policy in use reads the reward model's frame embeddings.
    fn read_embeddings(&self) -> bool {
        self.slots
            .iter()
            .flatten()
            .any(|p| p.embeddings().is_some())
    }

    /// Every env's action; `embeddings[env]` (empty when none are read) goes to a policy that reads them.
    fn act(
        &mut self,
        obs: &[Observation],
        embeddings: &[Vec<f32>],
    ) -> Result<Vec<Vec<f32>>, RuntimeError> {
        let mut actions = vec![Vec::new(); obs.len()];
        for (idx, slot) in self.slots.iter_mut().enumerate() {
            let Some(policy) = slot.as_mut() else {
                continue;
            };
            let envs: Vec<usize> = (0..obs.len()).filter(|&e| self.of_env[e] == idx).collect();
            if envs.is_empty() {
                continue;
            }
            let refs: Vec<&Observation> = envs.iter().map(|&e| &obs[e]).collect();
            let emb: Vec<&[f32]> = envs
                .iter()
                .map(|&e| embeddings.get(e).map_or(&[][..], Vec::as_slice))
                .collect();
            let out =
                policy
                    .act_embedded(&envs, &refs, &emb)
                    .map_err(|source| RuntimeError::Policy {
                        policy: policy.name(),
                        source: Box::new(source),
                    })?;
            if out.len() != envs.len() {
                return Err(RuntimeError::PolicyActions {
                    policy: policy.name(),
                    got: out.len(),
                    envs: envs.len(),
                });
            }
            for (e, a) in envs.into_iter().zip(out) {
                actions[e] = a;
            }
        }
        Ok(actions)
    }
}

pub struct Actor {
    shaped: ShapedEnv,
    policies: Policies,
    updates: Option<PolicyUpdates>,
    sink: Sink,
    config: ActorConfig,
    obs: Vec<Observation>,
    /// Per env, the reward model's embeddings of `obs`'s frames, kept only while a policy reads them.
    embeddings: Vec<Vec<f32>>,
    /// The reward model every transition names ([`ProgressSource::reward_model`]), `None` without one.
    reward_model: Option<String>,
    acc: Vec<EpisodeAcc>,
    next_seed: u64,
    stats: RunStats,
}

impl Actor {
    /// A model asking for a state field the envs lack is refused here, before any step, naming the field
    /// ([`ShapedEnv::new`]).
    pub fn new(
        envs: Vec<Box<dyn Env>>,
        progress: ProgressSource,
        policy: Box<dyn Policy>,
        config: ActorConfig,
    ) -> Result<Self, RuntimeError> {
        if envs.is_empty() {
            return Err(RuntimeError::NoEnvs { what: "the actor" });
        }
        let n = envs.len();
        let shaped = ShapedEnv::new(envs, progress, config.shaping)?;
        let reward_model = shaped
            .progress_source()
            .reward_model()
            .map(str::to_ascii_lowercase);
        let keys = Keys::new(config.robot.clone())?;
        Ok(Self {
            shaped,
            policies: Policies::new(policy, n),
            updates: None,
            sink: Sink::new(keys),
            next_seed: config.base_seed,
            config,
            obs: Vec::new(),
            embeddings: vec![Vec::new(); n],
            reward_model,
            acc: vec![EpisodeAcc::default(); n],
            stats: RunStats::default(),
        })
    }

    /// Publishes what the actor emits ([`Sink`]: the same bytes as the log).
    pub fn with_publisher(mut self, publisher: RobotPublisher) -> Self {
        self.sink = self.sink.with_publisher(publisher);
        self
    }

    /// Logs what the actor emits ([`Sink`]).
    pub fn with_log(mut self, log: EpisodeLog) -> Self {
        self.sink = self.sink.with_log(log);
        self
    }

    pub fn with_policy_updates(mut self, updates: PolicyUpdates) -> Self {
        self.updates = Some(updates);
        self
    }

    pub fn stats(&self) -> &RunStats {
        &self.stats
    }

    pub fn keys(&self) -> &Keys {
        self.sink.keys()
    }

    /// Runs until `stop` is set or a configured limit is reached, calling `on_episode` for every finished
    /// episode. On stop, the log is flushed and the publisher drained, so no record is cut in half.
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        mut on_episode: impl FnMut(&EpisodeSummary, &RunStats),
    ) -> Result<RunStats, RuntimeError> {
        let n = self.shaped.len();
        let mut ticker = Ticker::new(self.config.clock);
        let all: Vec<usize> = (0..n).collect();
        self.obs = self.reset_envs(&all)?;
        loop {
            if stop.load(Ordering::Relaxed) || self.limit_reached() {
                break;
            }
            ticker.tick();
            self.poll_policy_updates();
            let actions = self.policies.act(&self.obs, &self.embeddings)?;
            let steps = self.shaped.step(&actions)?;
            self.keep_embeddings(&all);
            let mut done = Vec::new();
            for (env, out) in steps.iter().enumerate() {
                let shaped = &out.shaped;
                let robot = self.sink.keys().robot();
                let mut msg = transition_message(
                    robot,
                    actions[env].clone(),
                    out,
                    self.config.frames,
                    self.reward_model.as_deref(),
                );
                // With every frame streamed, the episode's first transition also carries its reset observation
                // (`self.obs` is still the observation the action was taken in) and the progress read on it.
                let reset_progress = self.acc[env].reset_progress.take();
                if reset_progress.is_some() {
                    msg = msg.with_obs(ObservationMsg::from_observation(&self.obs[env]));
                }
                let reset_pmsg = reset_progress
                    .flatten()
                    .map(|p| ProgressMsg::new(robot, env as u32, shaped.episode, shaped.step, &p));
                let pmsg = out.progress.as_ref().map(|p| {
                    ProgressMsg::new(robot, env as u32, shaped.episode, shaped.step + 1, p)
                });
                let acc = &mut self.acc[env];
                acc.ret += msg.reward;
                acc.task_ret += msg.task_reward;
                acc.length += 1;
                acc.success |= msg.success;
                self.sink.transition(msg)?;
                if let Some(pmsg) = reset_pmsg {
                    self.sink.progress(pmsg)?;
                }
                if let Some(pmsg) = pmsg {
                    self.sink.progress(pmsg)?;
                }
                self.stats.env_steps += 1;
                if shaped.done() {
                    let summary = EpisodeSummary {
                        env,
                        episode: acc.episode,
                        seed: acc.seed,
                        episode_return: acc.ret,
                        task_return: acc.task_ret,
                        length: acc.length,
                        success: acc.success,
                        terminated: shaped.terminated,
                        truncated: shaped.truncated,
                        final_phi: shaped.phi_next_observed,
                        policy: self.policies.name_of(env),
                    };
                    let emsg = EpisodeMsg {
                        schema: Schema,
                        kind: kind::Episode,
                        robot: self.sink.keys().robot().to_string(),
                        env: env as u32,
                        episode: summary.episode,
                        episode_return: summary.episode_return,
                        task_return: summary.task_return,
                        length: summary.length,
                        success: summary.success,
                        terminated: summary.terminated,
                        truncated: summary.truncated,
                        final_phi: summary.final_phi,
                        stamp_ns: now_ns(),
                    };
                    self.sink.episode(emsg)?;
                    self.stats.episodes += 1;
                    self.stats.successes += summary.success as u64;
                    self.sink.end_episode()?;
                    self.refresh_stats(&ticker);
                    on_episode(&summary, &self.stats);
                    done.push(env);
                }
            }
            for (env, out) in steps.into_iter().enumerate() {
                self.obs[env] = out.result.obs;
            }
            if !done.is_empty() {
                let fresh = self.reset_envs(&done)?;
                for (env, o) in done.into_iter().zip(fresh) {
                    self.obs[env] = o;
                }
            }
        }
        self.sink.finish(std::time::Duration::from_secs(5))?;
        self.refresh_stats(&ticker);
        Ok(self.stats.clone())
    }

    fn limit_reached(&self) -> bool {
        self.config
            .max_episodes
            .is_some_and(|m| self.stats.episodes >= m)
            || self
                .config
                .max_steps
                .is_some_and(|m| self.stats.env_steps >= m)
    }

    fn refresh_stats(&mut self, ticker: &Ticker) {
        self.stats.clock = ticker.stats();
        self.stats.stream = self.sink.counters();
        self.stats.log_records = self.sink.log_records();
    }

    /// Resets `envs` (each with the next seed, in env order), starts their episodes in the shaper and the
    /// policies.
    fn reset_envs(&mut self, envs: &[usize]) -> Result<Vec<Observation>, RuntimeError> {
        let resets: Vec<(usize, u64)> = envs
            .iter()
            .map(|&env| {
                let seed = self.next_seed;
                self.next_seed += 1;
                (env, seed)
            })
            .collect();
        let started = self.shaped.reset(&resets)?;
        self.keep_embeddings(envs);
        let mut obs = Vec::with_capacity(started.len());
        for r in started {
            self.policies.start_episode(r.env, r.seed);
            self.acc[r.env] = EpisodeAcc {
                episode: r.episode,
                seed: r.seed,
                reset_progress: (self.config.frames == FrameStream::Every).then_some(r.progress),
                ..Default::default()
            };
            obs.push(r.obs);
        }
        Ok(obs)
    }

    /// Keeps the reward model's embeddings of the frames of `envs` (the envs of the last reset or step, in its
    /// order) while a policy reads them.
    fn keep_embeddings(&mut self, envs: &[usize]) {
        if !self.policies.read_embeddings() {
            return;
        }
        let Some((values, _)) = self.shaped.last_embeddings() else {
            return;
        };
        let per = values.len() / envs.len().max(1);
        for (row, &env) in envs.iter().enumerate() {
            let e = &mut self.embeddings[env];
            e.clear();
            e.extend_from_slice(&values[row * per..(row + 1) * per]);
        }
    }

    /// Installs the policies the checking worker accepted since the last step (each env switches at its next
    /// episode start) and counts and logs refusals and drops. Never blocks: checking and loading happen on the
    /// worker thread ([`PolicyUpdates`]).
    fn poll_policy_updates(&mut self) {
        let Some(up) = self.updates.as_mut() else {
            return;
        };
        let polled = up.poll();
        let (queue, max_bytes) = (up.queue(), up.max_bytes());
        for result in polled.results {
            match result {
                Ok(policy) => {
                    tracing::info!(policy = %policy.name(), "policy accepted; envs switch at their next episode");
                    self.policies.install(Box::new(policy));
                    self.stats.policy_swaps += 1;
                }
                Err(e) => {
                    tracing::warn!(reason = %ErrorChain(&e), "policy rejected; the running policy keeps going");
                    self.stats.policy_rejections += 1;
                }
            }
        }
        if polled.oversized > 0 {
            tracing::warn!(
                count = polled.oversized,
                "policy rejected; the running policy keeps going: {} message(s) larger than the limit of {max_bytes} bytes (--policy-max-bytes; last one {} bytes), refused unread",
                polled.oversized,
                polled.last_oversized_len
            );
            self.stats.policy_rejections += polled.oversized;
        }
        if polled.dropped > 0 {
            tracing::warn!(
                count = polled.dropped,
                "{} policy message(s) dropped unread: the checking queue ({queue} messages) was full",
                polled.dropped
            );
            self.stats.policy_dropped += polled.dropped;
        }
    }
}
