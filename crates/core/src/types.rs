//! The data that flows through one control step: observations in, progress and transitions out.

use serde::{Deserialize, Serialize};

/// An RGB8 camera frame of any size.
pub type Frame = image::RgbImage;

/// One camera's picture at one step. `depth`, when the source has it, is metres along the ray, row-major,
/// `width * height` values (`f32::INFINITY` where nothing was hit).
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub name: String,
    pub rgb: Frame,
    pub depth: Option<Vec<f32>>,
}

impl View {
    pub fn new(name: impl Into<String>, rgb: Frame) -> Self {
        Self {
            name: name.into(),
            rgb,
            depth: None,
        }
    }
}

/// What an environment (simulator or robot) shows at one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// Step index within the episode (0 at reset).
    pub step: u64,
    /// Seconds since the episode started.
    pub time: f64,
    /// One frame per camera, in the environment's view order.
    pub views: Vec<View>,
    /// Proprioceptive state (joint positions, gripper, ...), in the environment's state order.
    pub state: Vec<f32>,
}

impl Observation {
    pub fn view(&self, name: &str) -> Option<&View> {
        self.views.iter().find(|v| v.name == name)
    }
}

/// A reward model's reading of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Most likely stage (argmax of the stage logits).
    pub stage: usize,
    /// Softmax of the stage logits, one per stage.
    pub stage_probs: Vec<f32>,
    /// Within-stage progress of `stage`, in [0, 1].
    pub tau: f32,
    /// Task progress in [0, 1] (the shaping potential).
    pub phi: f32,
}

/// One step of experience as a learner receives it. `gamma` and `shaping_scale` travel with every transition
/// so that a learner can check they match its own discount (potential-based shaping is only policy-invariant
/// when they do).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    /// Index of the environment in a vectorised batch.
    pub env: u32,
    pub episode: u64,
    pub step: u64,
    pub action: Vec<f32>,
    /// Shaped reward `r_task + c * (gamma * Phi(s') - Phi(s))` (or the configured reward mode).
    pub reward: f64,
    /// The environment's own (sparse) task reward.
    pub task_reward: f64,
    /// Potential of the state the action was taken in.
    pub phi: f64,
    /// Potential of the next state as used in the reward (0 when terminated).
    pub phi_next: f64,
    pub gamma: f64,
    pub shaping_scale: f64,
    pub terminated: bool,
    pub truncated: bool,
    pub success: bool,
    /// The reward model's stage for the next state, when it has stages.
    pub stage: Option<u32>,
}
