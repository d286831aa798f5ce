//! [`VecEnv`]: N independent worlds stepped in parallel on a rayon pool. Each world is stepped and rendered
//! on one thread at a time and nothing is shared between worlds, so observations are bit-identical whatever
//! the thread count.

use crate::config::{ConfigError, SimConfig};
use crate::env::SimEnv;
use rayon::prelude::*;
use stagewise_core::{Env, EnvError, EnvSpec, Observation, StepResult};

pub struct VecEnv {
    envs: Vec<SimEnv>,
    pool: rayon::ThreadPool,
}

impl VecEnv {
    /// `n` envs with the same configuration, stepped on `threads` threads (0 = one per core).
    pub fn new(cfg: SimConfig, n: usize, threads: usize) -> Result<Self, ConfigError> {
        let envs = (0..n)
            .map(|_| SimEnv::new(cfg.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(ConfigError::ThreadPool)?;
        Ok(Self { envs, pool })
    }

    pub fn len(&self) -> usize {
        self.envs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.envs.is_empty()
    }

    pub fn num_threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// The (shared) spec of every env.
    pub fn spec(&self) -> Option<&EnvSpec> {
        self.envs.first().map(|e| e.spec())
    }

    pub fn envs(&self) -> &[SimEnv] {
        &self.envs
    }

    pub fn envs_mut(&mut self) -> &mut [SimEnv] {
        &mut self.envs
    }

    /// Resets env `i` with `seeds[i]`; `seeds.len()` must equal `len()`.
    pub fn reset(&mut self, seeds: &[u64]) -> Result<Vec<Observation>, EnvError> {
        if seeds.len() != self.envs.len() {
            return Err(EnvError::SeedCount {
                got: seeds.len(),
                envs: self.envs.len(),
            });
        }
        let envs = &mut self.envs;
        self.pool.install(|| {
            envs.par_iter_mut()
                .zip(seeds)
                .map(|(e, &s)| e.reset(s))
                .collect()
        })
    }

    /// Steps env `i` with `actions[i * A..(i + 1) * A]` (A = action size): one flat slice for all envs.
    pub fn step(&mut self, actions: &[f32]) -> Result<Vec<StepResult>, EnvError> {
        let a = self
            .envs
            .first()
            .map(|e| e.spec().action.len())
            .unwrap_or(0);
        if actions.len() != a * self.envs.len() {
            return Err(EnvError::ActionSize {
                expected: a * self.envs.len(),
                got: actions.len(),
                names: format!("{} envs x {a} actions, flattened", self.envs.len()),
            });
        }
        let envs = &mut self.envs;
        self.pool.install(|| {
            envs.par_iter_mut()
                .zip(actions.par_chunks(a.max(1)))
                .map(|(e, act)| e.step(act))
                .collect()
        })
    }

    /// Steps every env with an action chosen per env by `policy(index, env)` (e.g. an expert), in parallel.
    pub fn step_with<F>(&mut self, policy: F) -> Result<Vec<StepResult>, EnvError>
    where
        F: Fn(usize, &SimEnv) -> Vec<f32> + Sync,
    {
        let envs = &mut self.envs;
        self.pool.install(|| {
            envs.par_iter_mut()
                .enumerate()
                .map(|(i, e)| {
                    let a = policy(i, e);
                    e.step(&a)
                })
                .collect()
        })
    }
}
