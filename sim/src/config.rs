//! Configuration: task choice, timing, cameras and domain randomisation.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The manipulation tasks the simulator offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    /// Pick a block up and place it on a target patch.
    PickPlace,
    /// Push a block onto a target patch with the closed gripper.
    PushTarget,
    /// Pick the small block and stack it on the large one.
    Stack,
}

impl Task {
    pub const ALL: [Task; 3] = [Task::PickPlace, Task::PushTarget, Task::Stack];

    /// Kebab-case name (`pick-place`, `push-target`, `stack`).
    pub fn name(self) -> &'static str {
        match self {
            Task::PickPlace => "pick-place",
            Task::PushTarget => "push-target",
            Task::Stack => "stack",
        }
    }

    /// Stage names in order.
    pub fn stage_names(self) -> &'static [&'static str] {
        match self {
            Task::PickPlace | Task::Stack => {
                &["reach", "grasp", "lift", "carry", "place", "release"]
            }
            Task::PushTarget => &["reach", "descend", "push"],
        }
    }

    /// Stage proportions `a_k` (sum 1) used by the progress oracle `phi = P_k + a_k * tau`. They are the mean
    /// stage shares of the clean scripted expert (see README), so reward models trained on expert
    /// annotations learn the same scale.
    pub fn stage_proportions(self) -> &'static [f32] {
        match self {
            Task::PickPlace => &[0.35, 0.08, 0.12, 0.19, 0.20, 0.06],
            Task::Stack => &[0.34, 0.07, 0.16, 0.19, 0.19, 0.05],
            Task::PushTarget => &[0.20, 0.15, 0.65],
        }
    }

    /// Number of movable blocks in the scene.
    pub fn num_objects(self) -> usize {
        match self {
            Task::Stack => 2,
            _ => 1,
        }
    }

    /// Whether the task shows a target patch on the table.
    pub fn has_target(self) -> bool {
        !matches!(self, Task::Stack)
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown task name.
#[derive(Debug, thiserror::Error)]
#[error("unknown task {0:?}: expected one of pick-place, push-target, stack")]
pub struct UnknownTask(pub String);

impl FromStr for Task {
    type Err = UnknownTask;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pick-place" | "pick_place" | "pickplace" => Ok(Task::PickPlace),
            "push-target" | "push" | "push_target" => Ok(Task::PushTarget),
            "stack" => Ok(Task::Stack),
            other => Err(UnknownTask(other.to_string())),
        }
    }
}

/// Where a camera sits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum CameraMount {
    /// Fixed in the world: `eye` and `target` are world coordinates.
    World,
    /// Rides on the end effector: `eye` and `target` are offsets from the tool centre point (the gripper
    /// does not rotate, so offsets are world-aligned).
    Wrist,
}

/// A pinhole camera: pose from `eye`/`target`/`up`, intrinsics from the vertical field of view
/// (`fy = fx = (height / 2) / tan(fov_y / 2)`, principal point at the image centre), any resolution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CameraConfig {
    pub name: String,
    pub mount: CameraMount,
    pub eye: [f32; 3],
    pub target: [f32; 3],
    pub up: [f32; 3],
    pub fov_y_deg: f32,
    pub width: u32,
    pub height: u32,
}

impl CameraConfig {
    pub fn fixed(name: &str, eye: [f32; 3], target: [f32; 3], width: u32, height: u32) -> Self {
        Self {
            name: name.to_string(),
            mount: CameraMount::World,
            eye,
            target,
            up: [0.0, 0.0, 1.0],
            fov_y_deg: 50.0,
            width,
            height,
        }
    }

    /// The default three views: `front`, `side` (fixed) and `wrist`.
    pub fn default_views(width: u32, height: u32) -> Vec<Self> {
        vec![
            Self::fixed("front", [0.50, 0.0, 0.36], [0.0, 0.0, 0.02], width, height),
            Self::fixed("side", [0.08, -0.50, 0.34], [0.0, 0.0, 0.02], width, height),
            Self {
                name: "wrist".to_string(),
                mount: CameraMount::Wrist,
                eye: [-0.12, 0.0, 0.10],
                target: [0.03, 0.0, -0.05],
                up: [0.0, 0.0, 1.0],
                fov_y_deg: 70.0,
                width,
                height,
            },
        ]
    }

    /// The views a task is recorded with: [`Self::default_views`], except that push-target's wrist camera sits
    /// higher and looks nearly straight down with a wider field: pushes go in every direction, and the default
    /// wrist view (looking forward along +x) loses the target under its lower edge on a push towards -x, where
    /// the block and the target are behind the gripper (models/README.md, the held-out `freeze`).
    pub fn task_views(task: Task, width: u32, height: u32) -> Vec<Self> {
        let mut views = Self::default_views(width, height);
        if task == Task::PushTarget {
            for wrist in views.iter_mut().filter(|v| v.mount == CameraMount::Wrist) {
                wrist.eye = [-0.06, 0.0, 0.18];
                wrist.target = [0.02, 0.0, -0.05];
                wrist.fov_y_deg = 80.0;
            }
        }
        views
    }

    /// Pinhole intrinsics `[fx, fy, cx, cy]` in pixels.
    pub fn intrinsics(&self) -> [f32; 4] {
        let f = (self.height as f32 * 0.5) / (self.fov_y_deg.to_radians() * 0.5).tan();
        [f, f, self.width as f32 * 0.5, self.height as f32 * 0.5]
    }
}

/// Domain randomisation options (all off by default except the task's own layout randomisation).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Randomization {
    /// Standard deviation (metres) of the per-episode jitter of fixed camera eyes and targets.
    pub camera_jitter: f32,
    /// Randomise table and object colours beyond the default palette.
    pub colors: bool,
    /// Draw block and table colours from [`crate::world::HELD_OUT_PALETTE`] and
    /// [`crate::world::HELD_OUT_TABLE_COLORS`] instead of the training palette: colours no shipped reward model
    /// was trained on, for the colour-robustness bars (tests/shipped_models.rs). The layout is unchanged.
    #[serde(default)]
    pub held_out_colors: bool,
    /// Paint the table this colour (a task variant no shipped model was trained on: `stagewise record
    /// --table-color`, docs/own-task.md's adaptation). The layout is unchanged.
    #[serde(default)]
    pub table_color: Option<[u8; 3]>,
}

/// A deliberate over-read of the oracle's progress, for the semantic-trap experiment (docs/shaping.md, "The
/// semantic trap"): while the TCP is at or above `min_tcp_z` and the task is not done, the oracle reads at least
/// `phi`, as a learned model reads a state it has never seen (round 8 read the hand parked out of view as 0.55).
/// Success, failure and the task reward are unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OracleTrap {
    pub min_tcp_z: f32,
    pub phi: f32,
}

/// Everything a [`crate::SimEnv`] needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    pub task: Task,
    /// Control rate (actions per second). Default 50 Hz.
    pub control_hz: f64,
    /// Physics substeps per control step. Default 10 (a 2 ms physics step at 50 Hz).
    pub substeps: u32,
    /// Steps after which an episode is truncated.
    pub max_steps: u64,
    /// Render camera views into observations.
    pub render: bool,
    /// Also return depth with each view.
    pub depth: bool,
    pub cameras: Vec<CameraConfig>,
    /// Threads used to render one observation (interleaved rows); 1 = render on the calling thread.
    pub render_threads: usize,
    /// Let resting bodies sleep (legit: a sleeping body wakes when touched). Default on.
    pub sleeping: bool,
    /// Solver iterations per physics step (rapier default 4).
    pub solver_iterations: usize,
    pub randomization: Randomization,
    /// The semantic-trap variant of the oracle (None: the oracle as it is).
    #[serde(default)]
    pub oracle_trap: Option<OracleTrap>,
    /// End an episode when the task succeeds or fails (default). Off, only the time limit ends it and success
    /// stays in `info` (for evaluation): what a robot whose episodes end on its reward model's success detection
    /// sees (`serve --episode-ends model`).
    #[serde(default = "yes")]
    pub end_on_task: bool,
}

fn yes() -> bool {
    true
}

impl SimConfig {
    /// Defaults for a task: 50 Hz control, 10 substeps, 3 views at 96x96, rendering on.
    pub fn new(task: Task) -> Self {
        Self {
            task,
            control_hz: 50.0,
            substeps: 10,
            max_steps: match task {
                Task::PushTarget => 300,
                _ => 400,
            },
            render: true,
            depth: true,
            cameras: CameraConfig::task_views(task, 96, 96),
            render_threads: 1,
            sleeping: true,
            solver_iterations: 4,
            randomization: Randomization::default(),
            oracle_trap: None,
            end_on_task: true,
        }
    }

    /// The same without rendering (fast: for expert statistics and physics-only training).
    pub fn headless(task: Task) -> Self {
        Self {
            render: false,
            ..Self::new(task)
        }
    }

    /// Sets every camera's resolution.
    pub fn with_resolution(mut self, width: u32, height: u32) -> Self {
        for c in &mut self.cameras {
            c.width = width;
            c.height = height;
        }
        self
    }

    /// Physics step in seconds.
    pub fn physics_dt(&self) -> f32 {
        (1.0 / (self.control_hz * self.substeps.max(1) as f64)) as f32
    }
}

/// A configuration that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("control_hz must be finite and > 0, got {0}")]
    ControlHz(f64),
    #[error("substeps must be >= 1")]
    Substeps,
    #[error("camera {name:?}: {what}")]
    Camera { name: String, what: String },
    #[error("max_steps must be >= 1")]
    MaxSteps,
    #[error("could not start the thread pool")]
    ThreadPool(#[source] rayon::ThreadPoolBuildError),
}

impl SimConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.control_hz.is_finite() && self.control_hz > 0.0) {
            return Err(ConfigError::ControlHz(self.control_hz));
        }
        if self.substeps == 0 {
            return Err(ConfigError::Substeps);
        }
        if self.max_steps == 0 {
            return Err(ConfigError::MaxSteps);
        }
        for c in &self.cameras {
            let bad = |what: &str| ConfigError::Camera {
                name: c.name.clone(),
                what: what.to_string(),
            };
            if c.width == 0 || c.height == 0 {
                return Err(bad("width and height must be >= 1"));
            }
            if !(c.fov_y_deg > 1.0 && c.fov_y_deg < 179.0) {
                return Err(bad("fov_y_deg must be in (1, 179)"));
            }
            let d = [
                c.target[0] - c.eye[0],
                c.target[1] - c.eye[1],
                c.target[2] - c.eye[2],
            ];
            if d.iter().all(|v| v.abs() < 1e-6)
                || c.eye.iter().chain(&c.target).any(|v| !v.is_finite())
            {
                return Err(bad("eye and target must be finite and distinct"));
            }
        }
        let mut names: Vec<&str> = self.cameras.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        if names.len() != self.cameras.len() {
            return Err(ConfigError::Camera {
                name: String::new(),
                what: "camera names must be unique".to_string(),
            });
        }
        Ok(())
    }
}
