//! The Stagewise host bridge: talks to robot firmware over UDP or serial with the `stagewise-protocol` wire
//! format (every frame authenticated with the pre-shared link key, [`link_key`]), enforces host-side limits
//! before anything is sent, streams heartbeats with the actor's step counter, watches telemetry (no telemetry
//! within the watchdog time -> a protective stop and a latched fault; a firmware that leaves `Armed` on its own
//! is reported), repeats stops until telemetry shows them, and offers [`RobotEnv`], a robot as a core `Env` with
//! cameras from [`CameraSource`]s.
//!
//! Depends on `stagewise-protocol` and `stagewise-core` only (plus tokio). Must not depend on the model, stream,
//! runtime or simulator crates (the simulator is a dev-dependency for tests against the emulator).
// One `unsafe` block: registering the serial descriptor with tokio (see transport.rs).
#![deny(unsafe_code)]

pub mod bridge;
pub mod camera;
pub mod limits;
pub mod link_key;
pub mod operator;
pub mod robot_env;
pub mod scene;
pub mod transport;

pub use bridge::{
    Bridge, BridgeConfig, BridgeError, BridgeStats, CommandReport, FirmwareStop, HostFault,
    TelemetrySample,
};
pub use camera::{CameraError, CameraSource, FnCamera, ImageDirCamera, V4l2Camera};
pub use limits::{LimitError, LimitHit, LimitKind, LimitMode, LimitState, Limits, WorkspaceBox};
pub use robot_env::{ActionMap, RobotEnv, RobotEnvConfig, SceneReset, StateSource};
pub use scene::SceneClient;
pub use stagewise_protocol as protocol;
pub use transport::{Endpoint, Transport, TransportError};
