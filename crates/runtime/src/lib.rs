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

pub use actor::{transition_message, Actor, ActorConfig, FrameStream, RunStats};
pub use clock::{Clock, ClockStats};
pub use log::{EpisodeLog, LogReader, LogRecord, TornTail};
pub use policy::{
    GateConfig, OnnxPolicy, Policy, PolicyError, PolicyGate, PolicyKeyError, PolicySource,
    PolicyState, RandomPolicy, DEFAULT_POLICY_MAX_BYTES, POLICY_QUEUE,
};
pub use shaped::{ProgressSource, ResetOutcome, ShapedEnv, StepOutcome};
pub use sink::Sink;
pub use updates::{PolicyIntake, PolicyUpdates};

/// Errors of the actor loop.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("environment {env}")]
    Env {
        env: usize,
        #[source]
        source: stagewise_core::EnvError,
    },
    #[error("reward model")]
    Model(#[from] stagewise_model::ModelError),
    #[error("shaping")]
    Shaping(#[from] stagewise_core::ShapingError),
    #[error("policy {policy}")]
    Policy {
        policy: String,
        #[source]
        source: Box<PolicyError>,
    },
    #[error("policy {policy} returned {got} actions for {envs} envs")]
    PolicyActions {
        policy: String,
        got: usize,
        envs: usize,
    },
    #[error("stream")]
    Stream(#[from] stagewise_stream::StreamError),
    /// The robot name does not make zenoh keys.
    #[error("robot name")]
    Robot(#[from] stagewise_stream::KeyError),
    /// A message could not be encoded for the stream and the log.
    #[error("encoding a message for {key}")]
    Encode {
        key: String,
        #[source]
        source: stagewise_stream::WireError,
    },
    /// An episode log that is not one (bad magic, implausible lengths, not UTF-8).
    #[error("episode log {path}: {reason}")]
    Log {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error("episode log {path}")]
    LogIo {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An actor or a shaped env without environments.
    #[error("{what} needs at least one environment")]
    NoEnvs { what: &'static str },
    #[error("reset of env {env}: there are {envs} envs")]
    EnvOutOfRange { env: usize, envs: usize },
    #[error("{got} actions for {envs} envs: one action per env")]
    ActionCount { got: usize, envs: usize },
    #[error("env {env} names its state fields [{names}], env 0 [{first}]: one reward model reads one layout")]
    StateLayout {
        env: usize,
        names: String,
        first: String,
    },
    #[error("the reward model {model} was bound to a state of {bound} values; the env's state has {got} ({names})")]
    StateBinding {
        model: std::path::PathBuf,
        bound: usize,
        got: usize,
        names: String,
    },
    #[error("env {env} reports no oracle progress: use a reward model")]
    NoOracle { env: usize },
}
