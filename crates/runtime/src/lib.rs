//! stagewise-runtime: the actor loop. N environments (anything implementing core's `Env`: the simulator, the
//! robot bridge), a progress source (an ONNX reward model, or the simulator's oracle) and the potential-based
//! shaper make one [`ShapedEnv`]; with a policy it produces transitions, which are published over zenoh and
//! written to an episode log that `replay` can put back on the stream bit-identically. `stagewise serve` serves
//! a [`ShapedEnv`] of one env per served env to remote learners. Learners hot-swap the policy between episodes:
//! a worker thread checks each one ([`PolicyGate`], [`updates`]) and the actor installs it at episode starts.
//!
//! Depends on `stagewise-core`, `stagewise-model` and `stagewise-stream`; never on a concrete environment (the
//! CLI wires the simulator or the robot in).

pub mod actor;
pub mod clock;
pub mod log;
pub mod policy;
pub mod shaped;
pub mod sink;
pub mod updates;

pub use actor::{Actor, ActorConfig, RunStats};
pub use clock::{Clock, ClockStats};
pub use log::{EpisodeLog, LogReader, LogRecord};
pub use policy::{
    GateConfig, OnnxPolicy, Policy, PolicyError, PolicyGate, PolicyState, RandomPolicy,
    DEFAULT_POLICY_MAX_BYTES, POLICY_QUEUE,
};
pub use shaped::{ProgressSource, ResetOutcome, ShapedEnv, StepOutcome};
pub use sink::Sink;
pub use updates::{PolicyIntake, PolicyUpdates};

/// Errors of the actor loop.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("environment {env}: {source}")]
    Env {
        env: usize,
        source: stagewise_core::EnvError,
    },
    #[error("reward model: {0}")]
    Model(#[from] stagewise_model::ModelError),
    #[error("shaping: {0}")]
    Shaping(#[from] stagewise_core::ShapingError),
    #[error("policy {policy}: {reason}")]
    Policy { policy: String, reason: String },
    #[error("stream: {0}")]
    Stream(#[from] stagewise_stream::StreamError),
    #[error("episode log {path}: {reason}")]
    Log {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error("{0}")]
    Config(String),
}
