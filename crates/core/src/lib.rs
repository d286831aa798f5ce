//! stagewise-core: the types every other Stagewise crate speaks (observations, progress, transitions, the
//! `Env` trait) and the pure math (stage-aware progress, potential-based shaping, reward-model metrics, RA-BC).
//!
//! Must not depend on ort, zenoh, tokio, rapier or any other Stagewise crate: it stays cheap to build, cheap
//! to test and easy to reason about. No IO, no async.

pub mod env;
pub mod progress;
pub mod types;

pub use env::{BoxSpec, Env, EnvError, EnvSpec, StepInfo, StepResult, ViewSpec};
pub use progress::{ProgressError, StageProportions};
pub use types::{Frame, Observation, Progress, Transition, View};
