//! stagewise-sim: the simulator where reward models and policies are trained first. A rapier3d tabletop
//! (kinematic Cartesian gripper, free blocks, target patch), three multi-stage tasks with a ground-truth
//! stage/progress oracle, ray-cast RGB-D cameras, scripted experts with degradations that record annotated
//! episodes, and a deterministic vectorised env.
//!
//! Depends on stagewise-core only (for the `Env` trait and observation types); it must never depend on
//! stagewise-model, -stream or -runtime.

pub mod camera;
pub mod config;
pub mod env;
pub mod expert;
pub mod oracle;
pub mod vec_env;
pub mod world;

pub use camera::Camera;
pub use config::{
    CameraConfig, CameraMount, ConfigError, OracleTrap, Randomization, SimConfig, Task, UnknownTask,
};
pub use env::{action_spec, check_action, state_spec, state_vector, SimEnv, ACTION_NAMES};
pub use expert::{
    rollout, rollout_driven, rollout_with, Degradation, EpisodeRecord, Expert, FailureMode,
    StageSpan,
};
pub use oracle::OracleReading;
pub use vec_env::VecEnv;
pub use world::World;

/// Writes a view's RGB frame as a PNG file.
pub fn save_png(
    view: &stagewise_core::View,
    path: &std::path::Path,
) -> Result<(), image::ImageError> {
    view.rgb.save_with_format(path, image::ImageFormat::Png)
}
