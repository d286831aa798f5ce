//! stagewise-core: the types every other Stagewise crate speaks (observations, progress, transitions, the
//! `Env` trait) and the pure math (stage-aware progress, potential-based shaping, reward-model metrics and their
//! reports over a dataset with ablations, RA-BC, training targets from stage annotations).
//!
//! Must not depend on ort, zenoh, tokio, rapier or any other Stagewise crate: it stays cheap to build, cheap
//! to test and easy to reason about. No IO, no async.

pub mod env;
pub mod error_chain;
pub mod hop;
pub mod metrics;
pub mod progress;
pub mod rabc;
pub mod report;
pub mod reward_modes;
pub mod shaping;
pub mod targets;
pub mod types;

pub use env::{BoxSpec, Env, EnvError, EnvSpec, StepInfo, StepResult, ViewSpec};
pub use error_chain::{chain_messages, ErrorChain};
pub use hop::{HopConfig, HopError, HopEstimate, HopFusion};
pub use metrics::MetricsError;
pub use progress::{ProgressError, StageProportions};
pub use rabc::{RabcConfig, RabcError, RabcPrecision, RabcSummary, RabcWeights};
pub use shaping::{
    RewardMode, ShapedStep, ShapingConfig, ShapingError, SuccessDetection, VecShaper,
};
pub use types::{Frame, Observation, Progress, Transition, View};
