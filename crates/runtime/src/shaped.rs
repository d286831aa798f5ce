//! [`ShapedEnv`]: environments, the progress source that reads them and the potential-based shaper, stepped
//! as one. It is the reward path of both the actor loop ([`crate::Actor`], `stagewise run`: all envs of a run in
//! one `ShapedEnv`, so a reward model scores them in one batch) and `stagewise serve` (one `ShapedEnv` of one
//! env per served env and thread).
//!
//! Per step: the envs step (in parallel when there are several), progress is read for every next observation
//! (a reward model, the env's oracle, or none), and core's [`VecShaper`] shapes the reward with the potential
//! cached at the step it was computed (terminated: `Phi(s') = 0`; truncated: `Phi(s')` kept; DESIGN.md,
//! "Shaping that keeps the optimal policy").

use crate::RuntimeError;
use rayon::prelude::*;
use stagewise_core::{
    Env, EnvSpec, Observation, Progress, ShapedStep, ShapingConfig, StepResult, VecShaper,
};
use stagewise_model::{RewardModel, StateMap};

/// Where the shaping potential comes from.
pub enum ProgressSource {
    /// A stage-aware ONNX reward model on the observations. [`ShapedEnv::new`] binds its state fields by name to
    /// the envs' state (`EnvSpec.state.names`) unless the caller bound it already (e.g. to a robot's
    /// proprioception alone, [`RewardModel::set_state_map`]).
    Model(Box<RewardModel>),
    /// The environment's ground-truth progress (`info.progress_oracle`): the simulator's upper bound. At a reset
    /// no step has happened, so the oracle's progress is 0 there by definition.
    Oracle,
    /// No progress: the shaper runs with `phi = 0` throughout (so its reward is the task reward), and no
    /// [`Progress`] is reported ([`StepOutcome::progress`] is `None`).
    Sparse,
}

impl ProgressSource {
    /// `sparse`, `model` or `oracle`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Model(_) => "model",
            Self::Oracle => "oracle",
            Self::Sparse => "sparse",
        }
    }

    /// The reward model's id as transitions carry it (`reward_model`): the sha256 of its ONNX as its manifest's
    /// `sha256` gives it; `None` when the progress is not a model's.
    pub fn reward_model(&self) -> Option<&str> {
        match self {
            Self::Model(m) => Some(m.manifest().sha256.as_str()),
            Self::Oracle | Self::Sparse => None,
        }
    }
}

/// One env's reset: its observation, the progress read on it and the shaper's episode index.
#[derive(Debug, Clone)]
pub struct ResetOutcome {
    pub env: usize,
    pub seed: u64,
    pub obs: Observation,
    /// `None` with [`ProgressSource::Sparse`].
    pub progress: Option<Progress>,
    pub episode: u64,
}

/// One env's step: what the env returned (next observation, task reward, flags, info), the progress read on the
/// next observation and the shaped step.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    pub result: StepResult,
    /// `None` with [`ProgressSource::Sparse`].
    pub progress: Option<Progress>,
    pub shaped: ShapedStep,
}

/// N environments, their progress source and one shaper over them (see the module doc).
pub struct ShapedEnv {
    envs: Vec<Box<dyn Env>>,
    progress: ProgressSource,
    shaper: VecShaper,
    /// The envs' own task reward, success and termination reach the shaper ([`ShapedEnv::judged_by_progress`]
    /// turns this off).
    task_from_env: bool,
}

/// Binds `model`'s state fields to the envs' state by name (all envs must name the same state fields), or checks
/// that a binding made by the caller is for a state of the envs' size.
fn bind_model_state(model: &mut RewardModel, envs: &[Box<dyn Env>]) -> Result<(), RuntimeError> {
    let spec = envs[0].spec();
    let names = &spec.state.names;
    if let Some(i) = envs.iter().position(|e| &e.spec().state.names != names) {
        return Err(RuntimeError::StateLayout {
            env: i,
            names: envs[i].spec().state.names.join(", "),
            first: names.join(", "),
        });
    }
    match model.state_map() {
        Some(map) if map.source_len() != names.len() => Err(RuntimeError::StateBinding {
            model: model.manifest().path.clone(),
            bound: map.source_len(),
            got: names.len(),
            names: names.join(", "),
        }),
        Some(_) => Ok(()),
        None => {
            let source = format!("the env's state ({})", spec.task);
            let map = StateMap::bind_source(model.manifest(), &source, names, None)?;
            model.set_state_map(map)?;
            Ok(())
        }
    }
}

impl ShapedEnv {
    /// A model asking for a state field the envs lack is refused here, before any step, naming the field; so
    /// is an invalid shaping configuration.
    pub fn new(
        envs: Vec<Box<dyn Env>>,
        mut progress: ProgressSource,
        shaping: ShapingConfig,
    ) -> Result<Self, RuntimeError> {
        if envs.is_empty() {
            return Err(RuntimeError::NoEnvs {
                what: "a shaped env",
            });
        }
        if let ProgressSource::Model(model) = &mut progress {
            bind_model_state(model, &envs)?;
        }
        Ok(Self {
            shaper: VecShaper::new(envs.len(), shaping)?,
            envs,
            progress,
            task_from_env: true,
        })
    }

    /// The reward model's embeddings of the newest frames of the envs of the last [`Self::reset`] or
    /// [`Self::step`] (`[n * views, E]`, envs in that call's order) and `E`; `None` without a two-part reward
    /// model.
    pub fn last_embeddings(&self) -> Option<(&[f32], usize)> {
        match &self.progress {
            ProgressSource::Model(m) => m.last_embeddings(),
            _ => None,
        }
    }

    /// The envs' own task reward, success and termination are no longer read: success (`r_task = 1`, the
    /// episode terminated) comes from the shaping's success detection on progress alone, as on a robot whose
    /// reward model is its only judge (`serve --episode-ends model`); the env's time limit still truncates. The
    /// envs' `info` (the simulator's success) is passed on untouched, for evaluation. Without success detection
    /// in the shaping an episode then only ends at the time limit.
    pub fn judged_by_progress(mut self) -> Self {
        self.task_from_env = false;
        self
    }

    pub fn len(&self) -> usize {
        self.envs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.envs.is_empty()
    }

    /// The spec of env `env` (panics when out of range, like slice indexing).
    pub fn spec(&self, env: usize) -> &EnvSpec {
        self.envs[env].spec()
    }

    pub fn progress_source(&self) -> &ProgressSource {
        &self.progress
    }

    pub fn shaping(&self) -> &ShapingConfig {
        self.shaper.config()
    }

    /// Resets each `(env, seed)`, reads progress on the reset observations (a reward model scores them in one
    /// batch) and starts their episodes in the shaper. Outcomes come in the order given.
    pub fn reset(&mut self, resets: &[(usize, u64)]) -> Result<Vec<ResetOutcome>, RuntimeError> {
        let n = self.envs.len();
        let mut obs = Vec::with_capacity(resets.len());
        for &(env, seed) in resets {
            let e = self
                .envs
                .get_mut(env)
                .ok_or(RuntimeError::EnvOutOfRange { env, envs: n })?;
            obs.push(
                e.reset(seed)
                    .map_err(|source| RuntimeError::Env { env, source })?,
            );
        }
        let envs: Vec<usize> = resets.iter().map(|&(env, _)| env).collect();
        let refs: Vec<&Observation> = obs.iter().collect();
        let progress = self.read_progress(&envs, &refs, None)?;
        let mut out = Vec::with_capacity(resets.len());
        for ((&(env, seed), obs), progress) in resets.iter().zip(obs).zip(progress) {
            let episode = self.shaper.reset(env, phi_of(&progress))?;
            out.push(ResetOutcome {
                env,
                seed,
                obs,
                progress,
                episode,
            });
        }
        Ok(out)
    }

    /// Resets one env (see [`Self::reset`]).
    pub fn reset_one(&mut self, env: usize, seed: u64) -> Result<ResetOutcome, RuntimeError> {
        let mut out = self.reset(&[(env, seed)])?;
        Ok(out.remove(0))
    }

    /// Steps every env with its action (`actions[i]` for env `i`; several envs step in parallel), reads progress
    /// on the next observations (one batch) and shapes each env's reward. An env that fails is reported as
    /// [`RuntimeError::Env`] (the first in env order).
    pub fn step<A: AsRef<[f32]> + Sync>(
        &mut self,
        actions: &[A],
    ) -> Result<Vec<StepOutcome>, RuntimeError> {
        let n = self.envs.len();
        if actions.len() != n {
            return Err(RuntimeError::ActionCount {
                got: actions.len(),
                envs: n,
            });
        }
        let results: Vec<Result<StepResult, _>> = if n == 1 {
            // One env (a served env on its own thread): step it here, not on the thread pool.
            vec![self.envs[0].step(actions[0].as_ref())]
        } else {
            self.envs
                .par_iter_mut()
                .zip(actions.par_iter())
                .map(|(env, a)| env.step(a.as_ref()))
                .collect()
        };
        let mut steps = Vec::with_capacity(n);
        for (env, r) in results.into_iter().enumerate() {
            steps.push(r.map_err(|source| RuntimeError::Env { env, source })?);
        }
        let all: Vec<usize> = (0..n).collect();
        let refs: Vec<&Observation> = steps.iter().map(|s| &s.obs).collect();
        let progress = self.read_progress(&all, &refs, Some(&steps))?;
        let mut out = Vec::with_capacity(n);
        for (env, (result, progress)) in steps.into_iter().zip(progress).enumerate() {
            let (task_reward, terminated, success) = if self.task_from_env {
                (result.reward, result.terminated, result.info.success)
            } else {
                (0.0, false, false)
            };
            let shaped = self.shaper.step_with_success(
                env,
                phi_of(&progress),
                task_reward,
                terminated,
                result.truncated,
                success,
            )?;
            out.push(StepOutcome {
                result,
                progress,
                shaped,
            });
        }
        Ok(out)
    }

    /// Progress for `obs[i]` of env `envs[i]`; `steps` carries the oracle when the observations came from a step.
    fn read_progress(
        &mut self,
        envs: &[usize],
        obs: &[&Observation],
        steps: Option<&[StepResult]>,
    ) -> Result<Vec<Option<Progress>>, RuntimeError> {
        match &mut self.progress {
            ProgressSource::Model(m) => {
                Ok(m.score_envs(envs, obs)?.into_iter().map(Some).collect())
            }
            ProgressSource::Sparse => Ok(vec![None; envs.len()]),
            ProgressSource::Oracle => envs
                .iter()
                .enumerate()
                .map(|(i, &env)| {
                    // At reset no step has happened: progress is 0 by definition of the oracle.
                    let (phi, stage) = match steps {
                        None => (Some(0.0), Some(0)),
                        Some(s) => (s[i].info.progress_oracle, s[i].info.stage),
                    };
                    let phi = phi.ok_or(RuntimeError::NoOracle { env })?;
                    Ok(Some(Progress {
                        stage: stage.unwrap_or(0),
                        stage_probs: Vec::new(),
                        tau: 0.0,
                        phi,
                    }))
                })
                .collect(),
        }
    }
}

/// The potential the shaper takes: the progress read, or 0 without one (sparse).
fn phi_of(progress: &Option<Progress>) -> f64 {
    progress.as_ref().map_or(0.0, |p| f64::from(p.phi))
}
