//! Potential-based reward shaping (Ng, Harada & Russell 1999) with the terminal rule, per-episode potential
//! caching, success detection, and the other reward forms a result used as explicit modes.
//!
//! `r = r_task + c * (gamma * Phi(s') - Phi(s))`, `Phi = phi`:
//!
//! - `gamma` must equal the learner's discount (Devlin & Kudenko 2012); it travels with every step.
//! - **terminated**: `Phi(s') := 0` (Grzes 2017: otherwise the last `gamma^N Phi(s_N)` depends on the actions).
//! - **truncated** (a time limit for training only): `Phi(s')` is kept; the learner bootstraps from `s'`.
//! - Each potential is cached at the step it was computed: a reward model swapped mid-episode never rewrites
//!   the past (the shaper never asks for an old state's potential again).
//! - Success detection (optional): `phi >= 1 - delta` for `n` consecutive steps terminates the episode with
//!   `r_task = 1`.
//!
//! The modes ([`RewardMode`]; formulas in [`crate::reward_modes`] and `docs/shaping.md`):
//!
//! - `Potential { offset: X }` (default, `X = 0`), policy-invariant: the potential `phi - X`, terminal potential
//!   0: `r_task + c (gamma phi' - phi) + c X (1 - gamma)`, terminated `r_task - c phi + c X`.
//! - `ValuePotential { horizon: K }`, policy-invariant: the potential `gamma^(K (1 - phi))` (progress read as the
//!   discounted value of a success `K (1 - phi)` steps away), terminal potential 0.
//! - `Progress { potential_scale: S, success_progress_one }`, NOT policy-invariant:
//!   `r_task + S c (gamma phi' - phi) + c (1 - gamma) phi'`, terminated `r_task - S c phi + c phi*` with
//!   `phi* = 1` on a success when `success_progress_one`, else `phi'`. `S = 1` is the plain delta
//!   `r_task + c (phi' - phi)` (terminal potential kept). The level `c (1 - gamma) phi'` (`c phi*` at the end)
//!   moves the optimal policy; `S` scales only the potential part, so every `S` has the same optimal policy.
//! - `WindowedRank { window }`, NOT policy-invariant: `r_task + c * spearman(last W phi, 0..W)`.
//!
//! `tests/invariance.rs` shows by value iteration that the potential form (any offset) keeps the optimal policy,
//! that the progress form's optimal policy does not depend on `S`, and that the plain delta and a kept terminal
//! potential each can change the policy.

use serde::{Deserialize, Serialize};

use crate::reward_modes::{
    potential_reward, progress_reward, value_potential_reward, windowed_rank_reward,
};
use crate::types::Transition;

/// What was wrong with a shaping configuration or a step.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShapingError {
    #[error("gamma is {0}: the discount must be in (0, 1] and equal to the learner's")]
    BadGamma(f64),
    #[error("shaping scale c is {0}: it must be finite")]
    BadScale(f64),
    #[error("success delta is {0}: it must be finite and in [0, 1]")]
    BadSuccessDelta(f64),
    #[error("success detection needs at least 1 consecutive step, got 0")]
    BadSuccessSteps,
    #[error("rank window is {0}: it must be at least 2")]
    BadWindow(usize),
    #[error("potential scale S is {0}: it must be finite")]
    BadPotentialScale(f64),
    #[error("potential offset X is {0}: it must be finite")]
    BadOffset(f64),
    #[error("value-potential horizon K is {0}: it must be finite and > 0 (steps per whole task)")]
    BadHorizon(f64),
    #[error("the windowed rank reward (window {window}) depends on the episode's history, not on one transition: use a VecShaper")]
    NeedsHistory { window: usize },
    #[error("a vectorised shaper needs at least one env")]
    NoEnvs,
    #[error("env {env} is out of range: the shaper has {n_envs} envs")]
    EnvOutOfRange { env: usize, n_envs: usize },
    #[error("env {env}: {what} is {value}: it must be finite")]
    NotFinite {
        env: usize,
        what: &'static str,
        value: f64,
    },
    #[error("{what}[{index}] is {value}: it must be finite")]
    NotFiniteAt {
        what: &'static str,
        index: usize,
        value: f64,
    },
    #[error("env {env}: step before the first reset")]
    NotReset { env: usize },
    #[error(
        "env {env}: episode {episode} already ended (terminated or truncated); reset it first"
    )]
    EpisodeOver { env: usize, episode: u64 },
    #[error("{what} has {got} values, expected {expected}")]
    Length {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{0} is empty")]
    Empty(&'static str),
}

/// Success detection: progress at or above `1 - delta` for `consecutive` steps in a row ends the episode as a
/// success with `r_task = 1`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SuccessDetection {
    pub delta: f64,
    pub consecutive: usize,
}

impl Default for SuccessDetection {
    /// delta = 0.05, n = 1 (Robo-Dopamine).
    fn default() -> Self {
        Self {
            delta: 0.05,
            consecutive: 1,
        }
    }
}

/// How the per-step reward is made from progress (module docs, `docs/shaping.md`). Only `Potential` and
/// `ValuePotential` keep the optimal policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RewardMode {
    /// Potential `phi - offset`, terminal potential 0: `r_task + c (gamma phi' - phi) + c X (1 - gamma)`,
    /// terminated `r_task - c phi + c X`. Policy-invariant for every offset.
    Potential {
        #[serde(default)]
        offset: f64,
    },
    /// Potential `gamma^(horizon (1 - phi))`, terminal potential 0: `r_task + c (gamma Phi' - Phi)`, terminated
    /// `r_task - c Phi`. Policy-invariant; `horizon` is the steps a whole task takes (`K`).
    ValuePotential { horizon: f64 },
    /// `r_task + S c (gamma phi' - phi) + c (1 - gamma) phi'`, terminated `r_task - S c phi + c phi*` (`phi* = 1`
    /// on a success with `success_progress_one`, else `phi'`). NOT policy-invariant (the level moves it); the
    /// optimal policy is the same for every `S`. `S = 1`: `r_task + c (phi' - phi)`, the plain delta.
    Progress {
        #[serde(default = "one")]
        potential_scale: f64,
        #[serde(default)]
        success_progress_one: bool,
    },
    /// `r_task + c * spearman(last W phi, their time indices)` (Rank-Then-Act). NOT policy-invariant.
    WindowedRank { window: usize },
}

fn one() -> f64 {
    1.0
}

impl Default for RewardMode {
    /// The potential form without an offset.
    fn default() -> Self {
        Self::Potential { offset: 0.0 }
    }
}

impl RewardMode {
    /// The plain progress delta `r_task + c (phi' - phi)`, terminal potential kept (`Progress` with `S = 1`).
    pub const PLAIN_PROGRESS: Self = Self::Progress {
        potential_scale: 1.0,
        success_progress_one: false,
    };

    /// Whether the mode keeps the task's optimal policy.
    pub fn is_policy_invariant(&self) -> bool {
        matches!(self, Self::Potential { .. } | Self::ValuePotential { .. })
    }
}

/// Shaping configuration. `gamma` and `scale` (`c`) are copied into every [`ShapedStep`] / [`Transition`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ShapingConfig {
    pub gamma: f64,
    pub scale: f64,
    #[serde(default)]
    pub mode: RewardMode,
    #[serde(default)]
    pub success: Option<SuccessDetection>,
}

impl Default for ShapingConfig {
    /// gamma = 0.99, c = 1, potential-based, no success detection.
    fn default() -> Self {
        Self {
            gamma: 0.99,
            scale: 1.0,
            mode: RewardMode::default(),
            success: None,
        }
    }
}

impl ShapingConfig {
    /// Potential-based shaping with discount `gamma` (must be the learner's) and scale `c`; checked.
    pub fn new(gamma: f64, scale: f64) -> Result<Self, ShapingError> {
        let c = Self {
            gamma,
            scale,
            ..Self::default()
        };
        c.validate()?;
        Ok(c)
    }

    pub fn with_mode(mut self, mode: RewardMode) -> Self {
        self.mode = mode;
        self
    }

    pub fn with_success(mut self, success: SuccessDetection) -> Self {
        self.success = Some(success);
        self
    }

    /// Checks every field: gamma in (0, 1], finite scale, success delta in [0, 1] with n >= 1, window >= 2,
    /// finite potential scale and offset.
    pub fn validate(&self) -> Result<(), ShapingError> {
        if !(self.gamma.is_finite() && self.gamma > 0.0 && self.gamma <= 1.0) {
            return Err(ShapingError::BadGamma(self.gamma));
        }
        if !self.scale.is_finite() {
            return Err(ShapingError::BadScale(self.scale));
        }
        if let Some(s) = self.success {
            if !(s.delta.is_finite() && (0.0..=1.0).contains(&s.delta)) {
                return Err(ShapingError::BadSuccessDelta(s.delta));
            }
            if s.consecutive == 0 {
                return Err(ShapingError::BadSuccessSteps);
            }
        }
        match self.mode {
            RewardMode::WindowedRank { window } if window < 2 => {
                Err(ShapingError::BadWindow(window))
            }
            RewardMode::Progress {
                potential_scale, ..
            } if !potential_scale.is_finite() => {
                Err(ShapingError::BadPotentialScale(potential_scale))
            }
            RewardMode::Potential { offset } if !offset.is_finite() => {
                Err(ShapingError::BadOffset(offset))
            }
            RewardMode::ValuePotential { horizon } if !(horizon.is_finite() && horizon > 0.0) => {
                Err(ShapingError::BadHorizon(horizon))
            }
            _ => Ok(()),
        }
    }

    /// The reward of one transition in the configured mode (`success`: the step is a success, which only
    /// `Progress { success_progress_one: true }` reads). `terminated` applies the mode's terminal rule. Checks
    /// the configuration and that every input is finite; the windowed rank mode needs the episode's history and
    /// is refused ([`ShapingError::NeedsHistory`]).
    pub fn reward(
        &self,
        phi: f64,
        phi_next: f64,
        task_reward: f64,
        terminated: bool,
        success: bool,
    ) -> Result<f64, ShapingError> {
        self.validate()?;
        for (index, (what, value)) in [
            ("phi", phi),
            ("phi_next", phi_next),
            ("task_reward", task_reward),
        ]
        .into_iter()
        .enumerate()
        {
            if !value.is_finite() {
                return Err(ShapingError::NotFiniteAt { what, index, value });
            }
        }
        if let RewardMode::WindowedRank { window } = self.mode {
            return Err(ShapingError::NeedsHistory { window });
        }
        Ok(self
            .transition_unchecked(phi, phi_next, task_reward, terminated, success)
            .0)
    }

    /// The reward of one transition in a potential or progress mode, and the next potential it used (0 when
    /// the potential form terminates, `phi*` when the progress form does). The rank mode is the caller's.
    fn transition_unchecked(
        &self,
        phi: f64,
        phi_next: f64,
        task_reward: f64,
        terminated: bool,
        success: bool,
    ) -> (f64, f64) {
        let (gamma, c) = (self.gamma, self.scale);
        match self.mode {
            RewardMode::Potential { offset } => (
                potential_reward(gamma, c, offset, phi, phi_next, task_reward, terminated),
                if terminated { 0.0 } else { phi_next },
            ),
            RewardMode::ValuePotential { horizon } => (
                value_potential_reward(gamma, c, horizon, phi, phi_next, task_reward, terminated),
                if terminated { 0.0 } else { phi_next },
            ),
            RewardMode::Progress {
                potential_scale,
                success_progress_one,
            } => {
                // A success means the task is done: progress 1 by definition, not the model's reading.
                let end = if terminated && success && success_progress_one {
                    1.0
                } else {
                    phi_next
                };
                let r =
                    progress_reward(gamma, c, potential_scale, phi, end, task_reward, terminated);
                (r, end)
            }
            RewardMode::WindowedRank { .. } => (task_reward, phi_next),
        }
    }
}

/// One shaped step of one env, ready to become a [`Transition`].
#[derive(Debug, Clone, PartialEq)]
pub struct ShapedStep {
    pub env: usize,
    pub episode: u64,
    /// Index of the step within the episode (0 for the first action after reset).
    pub step: u64,
    /// The reward to learn from (the configured mode).
    pub reward: f64,
    /// Task reward as used: the environment's, or 1 when success detection ended the episode.
    pub task_reward: f64,
    /// Cached potential of the state the action was taken in.
    pub phi: f64,
    /// Potential of the next state as used in the reward: 0 when terminated in a potential mode, `phi*` (1 for a
    /// success read as done) when terminated in `Progress` mode, else the observed one.
    pub phi_next: f64,
    /// The model's progress for the next state, as observed (cached for the next step).
    pub phi_next_observed: f64,
    pub gamma: f64,
    pub shaping_scale: f64,
    /// The environment's termination, or success detection's.
    pub terminated: bool,
    pub truncated: bool,
    /// The step is a success: the env said so, or success detection fired.
    pub success: bool,
}

impl ShapedStep {
    /// The learner-facing transition. `stage` is the reward model's stage for the next state, if it has stages.
    pub fn to_transition(&self, action: Vec<f32>, stage: Option<u32>) -> Transition {
        Transition {
            env: u32::try_from(self.env).unwrap_or(u32::MAX),
            episode: self.episode,
            step: self.step,
            action,
            reward: self.reward,
            task_reward: self.task_reward,
            phi: self.phi,
            phi_next: self.phi_next,
            gamma: self.gamma,
            shaping_scale: self.shaping_scale,
            terminated: self.terminated,
            truncated: self.truncated,
            success: self.success,
            stage,
        }
    }

    /// The episode ended on this step (either way).
    pub fn done(&self) -> bool {
        self.terminated || self.truncated
    }
}

#[derive(Debug, Clone, Default)]
struct EnvSlot {
    /// `None` until the first reset.
    episode: Option<u64>,
    done: bool,
    /// Potentials of `s_0 ..= s_t` as computed when each state was visited.
    potentials: Vec<f64>,
    success_run: usize,
}

/// Shapes rewards for `N` environments, each with its own episode. Use it once per control step:
///
/// ```
/// use stagewise_core::shaping::{ShapingConfig, VecShaper};
/// let mut shaper = VecShaper::new(2, ShapingConfig::new(0.99, 1.0)?)?;
/// shaper.reset(0, 0.0)?;                                  // phi of the reset observation
/// let s = shaper.step(0, 0.1, 0.0, false, false)?;        // phi of the next observation, env's reward, flags
/// assert!((s.reward - (0.99 * 0.1 - 0.0)).abs() < 1e-12);
/// # Ok::<(), stagewise_core::shaping::ShapingError>(())
/// ```
#[derive(Debug, Clone)]
pub struct VecShaper {
    config: ShapingConfig,
    slots: Vec<EnvSlot>,
}

impl VecShaper {
    pub fn new(n_envs: usize, config: ShapingConfig) -> Result<Self, ShapingError> {
        config.validate()?;
        if n_envs == 0 {
            return Err(ShapingError::NoEnvs);
        }
        Ok(Self {
            config,
            slots: vec![EnvSlot::default(); n_envs],
        })
    }

    pub fn config(&self) -> &ShapingConfig {
        &self.config
    }

    pub fn n_envs(&self) -> usize {
        self.slots.len()
    }

    fn slot(&self, env: usize) -> Result<&EnvSlot, ShapingError> {
        self.slots.get(env).ok_or(ShapingError::EnvOutOfRange {
            env,
            n_envs: self.slots.len(),
        })
    }

    /// Starts a new episode in `env` with the potential of its first observation. Allowed at any time (an
    /// unfinished episode is abandoned). Returns the new episode's number (0 for the first).
    pub fn reset(&mut self, env: usize, phi0: f64) -> Result<u64, ShapingError> {
        self.slot(env)?;
        if !phi0.is_finite() {
            return Err(ShapingError::NotFinite {
                env,
                what: "phi at reset",
                value: phi0,
            });
        }
        let slot = &mut self.slots[env];
        let episode = slot.episode.map_or(0, |e| e + 1);
        slot.episode = Some(episode);
        slot.done = false;
        slot.potentials.clear();
        slot.potentials.push(phi0);
        slot.success_run = 0;
        Ok(episode)
    }

    /// Checks a step without changing anything.
    fn check_step(&self, env: usize, phi_next: f64, task_reward: f64) -> Result<(), ShapingError> {
        let slot = self.slot(env)?;
        let episode = slot.episode.ok_or(ShapingError::NotReset { env })?;
        if slot.done {
            return Err(ShapingError::EpisodeOver { env, episode });
        }
        if !phi_next.is_finite() {
            return Err(ShapingError::NotFinite {
                env,
                what: "phi_next",
                value: phi_next,
            });
        }
        if !task_reward.is_finite() {
            return Err(ShapingError::NotFinite {
                env,
                what: "task_reward",
                value: task_reward,
            });
        }
        Ok(())
    }

    /// One step of `env`: `phi_next` is the model's progress for the observation the action led to,
    /// `task_reward`, `terminated` and `truncated` are the environment's, which reports no success of its own
    /// (success detection may still find one). Nothing changes on error.
    pub fn step(
        &mut self,
        env: usize,
        phi_next: f64,
        task_reward: f64,
        terminated: bool,
        truncated: bool,
    ) -> Result<ShapedStep, ShapingError> {
        self.step_with_success(env, phi_next, task_reward, terminated, truncated, false)
    }

    /// [`Self::step`] for an env that reports whether the step was a success (`info.success`): the progress
    /// form with `success_progress_one` reads a terminated success as progress 1.
    pub fn step_with_success(
        &mut self,
        env: usize,
        phi_next: f64,
        task_reward: f64,
        terminated: bool,
        truncated: bool,
        env_success: bool,
    ) -> Result<ShapedStep, ShapingError> {
        self.check_step(env, phi_next, task_reward)?;
        let config = self.config;
        let slot = &mut self.slots[env];
        let episode = slot.episode.unwrap_or(0);
        let step = (slot.potentials.len() - 1) as u64;
        let phi = slot.potentials[slot.potentials.len() - 1];

        let mut terminated = terminated;
        let mut task_reward = task_reward;
        let mut success = env_success;
        if let Some(detect) = config.success {
            if phi_next >= 1.0 - detect.delta {
                slot.success_run += 1;
            } else {
                slot.success_run = 0;
            }
            if slot.success_run >= detect.consecutive {
                success = true;
                terminated = true;
                task_reward = 1.0;
            }
        }
        slot.potentials.push(phi_next);

        let (reward, phi_next_used) = match config.mode {
            RewardMode::WindowedRank { window } => {
                // window >= 2 was validated and every cached value is finite, so this cannot fail.
                let rho = windowed_rank_reward(&slot.potentials, window).unwrap_or(0.0);
                (task_reward + config.scale * rho, phi_next)
            }
            _ => config.transition_unchecked(phi, phi_next, task_reward, terminated, success),
        };
        slot.done = terminated || truncated;
        Ok(ShapedStep {
            env,
            episode,
            step,
            reward,
            task_reward,
            phi,
            phi_next: phi_next_used,
            phi_next_observed: phi_next,
            gamma: config.gamma,
            shaping_scale: config.scale,
            terminated,
            truncated,
            success,
        })
    }

    /// One step of every env at once (all must be mid-episode). All slices have one entry per env. Every input
    /// is checked before any env changes, so an error leaves the shaper as it was.
    pub fn step_all(
        &mut self,
        phi_next: &[f64],
        task_reward: &[f64],
        terminated: &[bool],
        truncated: &[bool],
    ) -> Result<Vec<ShapedStep>, ShapingError> {
        let n = self.slots.len();
        for (what, got) in [
            ("phi_next", phi_next.len()),
            ("task_reward", task_reward.len()),
            ("terminated", terminated.len()),
            ("truncated", truncated.len()),
        ] {
            if got != n {
                return Err(ShapingError::Length {
                    what,
                    expected: n,
                    got,
                });
            }
        }
        for env in 0..n {
            self.check_step(env, phi_next[env], task_reward[env])?;
        }
        (0..n)
            .map(|env| {
                self.step(
                    env,
                    phi_next[env],
                    task_reward[env],
                    terminated[env],
                    truncated[env],
                )
            })
            .collect()
    }

    /// The potentials cached for `env`'s current episode, `phi(s_0) ..= phi(s_t)`, as computed when visited.
    pub fn potentials(&self, env: usize) -> Result<&[f64], ShapingError> {
        Ok(&self.slot(env)?.potentials)
    }

    /// The current episode number of `env` (`None` before its first reset).
    pub fn episode(&self, env: usize) -> Result<Option<u64>, ShapingError> {
        Ok(self.slot(env)?.episode)
    }

    /// Whether `env`'s episode has ended and it waits for a reset.
    pub fn is_done(&self, env: usize) -> Result<bool, ShapingError> {
        Ok(self.slot(env)?.done)
    }
}

/// Shapes a recorded episode offline: `phis` holds `phi(s_0) ..= phi(s_T)` (one more than `task_rewards`), and
/// the last step ends the episode as terminated (`terminated = true`) or truncated. With success detection the
/// episode may end earlier; the steps up to there are returned.
pub fn shape_episode(
    config: ShapingConfig,
    phis: &[f64],
    task_rewards: &[f64],
    terminated: bool,
) -> Result<Vec<ShapedStep>, ShapingError> {
    if task_rewards.is_empty() {
        return Err(ShapingError::Empty("episode (task rewards)"));
    }
    if phis.len() != task_rewards.len() + 1 {
        return Err(ShapingError::Length {
            what: "episode potentials (one per state, T + 1)",
            expected: task_rewards.len() + 1,
            got: phis.len(),
        });
    }
    for (what, values) in [("phis", phis), ("task_rewards", task_rewards)] {
        if let Some(index) = values.iter().position(|v| !v.is_finite()) {
            return Err(ShapingError::NotFiniteAt {
                what,
                index,
                value: values[index],
            });
        }
    }
    let mut shaper = VecShaper::new(1, config)?;
    shaper.reset(0, phis[0])?;
    let last = task_rewards.len() - 1;
    let mut out = Vec::with_capacity(task_rewards.len());
    for (t, &r) in task_rewards.iter().enumerate() {
        let end = t == last;
        let s = shaper.step(0, phis[t + 1], r, end && terminated, end && !terminated)?;
        let done = s.done();
        out.push(s);
        if done {
            break;
        }
    }
    Ok(out)
}
