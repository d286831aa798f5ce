//! The environment interface shared by the simulator and the robot bridge (gymnasium's shape).

use crate::types::Observation;
use serde::{Deserialize, Serialize};

/// A box-shaped space: named dimensions with inclusive bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxSpec {
    pub names: Vec<String>,
    pub low: Vec<f32>,
    pub high: Vec<f32>,
}

impl BoxSpec {
    pub fn len(&self) -> usize {
        self.names.len()
    }
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// One camera the environment renders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewSpec {
    pub name: String,
    pub width: u32,
    pub height: u32,
}

/// What an environment takes and gives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvSpec {
    /// Task name, e.g. `pick-place`.
    pub task: String,
    pub action: BoxSpec,
    pub state: BoxSpec,
    pub views: Vec<ViewSpec>,
    /// Named stages of the task, in order (empty when the task has none).
    pub stage_names: Vec<String>,
    pub control_hz: f64,
    /// Steps after which an episode is truncated.
    pub max_steps: u64,
}

/// Extra facts about a step (gymnasium's `info`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepInfo {
    /// Ground-truth stage, when the environment knows it (the simulator's oracle).
    pub stage: Option<usize>,
    /// Ground-truth progress in [0, 1], when the environment knows it.
    pub progress_oracle: Option<f32>,
    pub success: bool,
    /// True when the action was outside its bounds and was clipped.
    pub action_clipped: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    pub obs: Observation,
    pub reward: f64,
    pub terminated: bool,
    pub truncated: bool,
    pub info: StepInfo,
}

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("action has {got} values, the action space has {expected} ({names})")]
    ActionSize {
        expected: usize,
        got: usize,
        names: String,
    },
    #[error("action[{index}] ({name}) is {value}: actions must be finite")]
    ActionNotFinite {
        index: usize,
        name: String,
        value: f32,
    },
    #[error("step called before reset (or after the episode ended): call reset first")]
    NeedsReset,
    /// The simulator, robot link or emulator plant behind the env failed; `source` says how.
    #[error("the {backend} failed")]
    Backend {
        /// What failed, e.g. `simulator`, `robot`.
        backend: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A vectorised env was reset with a seed count that is not its env count.
    #[error("reset got {got} seeds for {envs} envs")]
    SeedCount { got: usize, envs: usize },
}

impl EnvError {
    /// A [`EnvError::Backend`] error: `backend` names what failed, `source` (an error, or a message) says how.
    pub fn backend(
        backend: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Self::Backend {
            backend,
            source: source.into(),
        }
    }
}

/// An environment in gymnasium's shape. The simulator and the robot bridge both implement it; the runtime
/// drives any `Env` without knowing which.
pub trait Env: Send {
    fn spec(&self) -> &EnvSpec;
    fn reset(&mut self, seed: u64) -> Result<Observation, EnvError>;
    fn step(&mut self, action: &[f32]) -> Result<StepResult, EnvError>;
}
