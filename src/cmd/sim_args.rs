//! Simulator flags shared by run and serve, and the scripted expert as a runtime policy.

use stagewise_core::{Env, EnvError, EnvSpec, Observation, StepResult};
use stagewise_runtime::{Policy, PolicyError};
use stagewise_sim::{Degradation, Expert, OracleTrap, Randomization, SimConfig, SimEnv, Task};
use std::sync::{Arc, Mutex};

#[derive(clap::Args, Debug, Clone)]
pub struct SimEnvArgs {
    /// Simulated task.
    #[arg(long, default_value = "pick-place", value_parser = crate::cli::task_parser())]
    pub task: Task,
    /// Camera resolution (every view).
    #[arg(long, default_value_t = 96)]
    pub width: u32,
    #[arg(long, default_value_t = 96)]
    pub height: u32,
    /// Steps after which an episode is truncated (default: the task's).
    #[arg(long)]
    pub max_steps: Option<u64>,
    #[command(flatten)]
    pub scene: crate::cli::SceneArgs,
    /// Experiment (docs/shaping.md, "The semantic trap"): the oracle over-reads progress as at least PHI while
    /// the TCP is at or above height Z metres (the task's success is unchanged). Format `Z:PHI`, e.g. `0.25:0.9`.
    #[arg(long, value_name = "Z:PHI", value_parser = parse_oracle_trap)]
    pub oracle_trap: Option<OracleTrap>,
}

/// `Z:PHI` -> the trap (PHI in [0, 1], Z finite).
fn parse_oracle_trap(s: &str) -> Result<OracleTrap, String> {
    let (z, phi) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not Z:PHI (e.g. 0.25:0.9)"))?;
    let num = |v: &str, what: &str| {
        v.trim()
            .parse::<f32>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| format!("{what} {v:?} in {s:?} is not a finite number"))
    };
    let (min_tcp_z, phi) = (num(z, "height Z")?, num(phi, "progress PHI")?);
    if !(0.0..=1.0).contains(&phi) {
        return Err(format!("progress PHI {phi} in {s:?} is not in [0, 1]"));
    }
    Ok(OracleTrap { min_tcp_z, phi })
}

impl SimEnvArgs {
    pub fn config(&self) -> SimConfig {
        let mut cfg = SimConfig::new(self.task).with_resolution(self.width, self.height);
        if let Some(m) = self.max_steps {
            cfg.max_steps = m;
        }
        cfg.render_threads = 1;
        cfg.randomization = Randomization::default();
        self.scene.apply(&mut cfg.randomization);
        cfg.oracle_trap = self.oracle_trap;
        cfg
    }
}

/// A simulator env shared with the scripted expert, which reads the world (not just the observation).
#[derive(Clone)]
pub struct SharedSim(pub Arc<Mutex<SimEnv>>, EnvSpec);

impl SharedSim {
    pub fn new(env: SimEnv) -> Self {
        let spec = env.spec().clone();
        Self(Arc::new(Mutex::new(env)), spec)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, SimEnv>, EnvError> {
        self.0
            .lock()
            .map_err(|_| EnvError::backend("simulator", "lock poisoned"))
    }
}

impl Env for SharedSim {
    fn spec(&self) -> &EnvSpec {
        &self.1
    }
    fn reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
        self.lock()?.reset(seed)
    }
    fn step(&mut self, action: &[f32]) -> Result<StepResult, EnvError> {
        self.lock()?.step(action)
    }
}

/// The task's scripted expert driving each env.
pub struct ExpertPolicy {
    envs: Vec<SharedSim>,
    experts: Vec<Expert>,
}

impl ExpertPolicy {
    pub fn new(task: Task, envs: &[SharedSim]) -> Self {
        Self {
            envs: envs.to_vec(),
            experts: envs
                .iter()
                .map(|_| Expert::new(task, Degradation::none()))
                .collect(),
        }
    }
}

impl Policy for ExpertPolicy {
    fn name(&self) -> String {
        "expert".into()
    }

    fn act(&mut self, envs: &[usize], _obs: &[&Observation]) -> Result<Vec<Vec<f32>>, PolicyError> {
        envs.iter()
            .map(|&e| {
                let sim = self
                    .envs
                    .get(e)
                    .ok_or_else(|| PolicyError::act(format!("no simulator for env {e}")))?;
                let env = sim
                    .0
                    .lock()
                    .map_err(|_| PolicyError::act("simulator lock poisoned"))?;
                Ok(self.experts[e].act_env(&env).to_vec())
            })
            .collect()
    }

    fn reset(&mut self, env: usize, seed: u64) {
        if let Some(x) = self.experts.get_mut(env) {
            *x = Expert::with_seed(x.task(), Degradation::none(), seed);
        }
    }
}
