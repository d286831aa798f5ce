//! [`SimEnv`]: the simulator behind the `stagewise_core::Env` trait (gymnasium's shape).

use crate::camera::Camera;
use crate::config::{ConfigError, OracleTrap, SimConfig, Task};
use crate::oracle::{self, OracleReading};
use crate::world::{World, MAX_SPEED, MAX_WIDTH, WS_HI, WS_LO};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rapier3d::glamx::Vec3;
use stagewise_core::{
    BoxSpec, Env, EnvError, EnvSpec, Observation, StepInfo, StepResult, ViewSpec,
};

/// Action layout: `[dx, dy, dz, gripper]`, each in [-1, 1].
pub const ACTION_NAMES: [&str; 4] = ["dx", "dy", "dz", "gripper"];

/// The action space: TCP velocity commands (fraction of [`MAX_SPEED`]) and a gripper opening command
/// (-1 = closed, +1 = open; the finger gap moves toward `(g + 1) / 2 * MAX_WIDTH`).
pub fn action_spec() -> BoxSpec {
    BoxSpec {
        names: ACTION_NAMES.iter().map(|s| s.to_string()).collect(),
        low: vec![-1.0; 4],
        high: vec![1.0; 4],
    }
}

/// The state vector layout for a task (see the README for meanings).
pub fn state_spec(task: Task) -> BoxSpec {
    let mut names: Vec<String> = ["ee_x", "ee_y", "ee_z", "gripper_width", "grasped"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut low = vec![WS_LO[0], WS_LO[1], WS_LO[2], 0.0, 0.0];
    let mut high = vec![WS_HI[0], WS_HI[1], WS_HI[2], MAX_WIDTH, 1.0];
    for i in 0..task.num_objects() {
        for f in ["x", "y", "z", "qw", "qx", "qy", "qz"] {
            names.push(format!("block{i}_{f}"));
        }
        low.extend([-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0]);
        high.extend([1.0; 7]);
    }
    if task.has_target() {
        names.push("target_x".into());
        names.push("target_y".into());
        low.extend([-0.3, -0.3]);
        high.extend([0.3, 0.3]);
    }
    BoxSpec { names, low, high }
}

/// One simulated environment.
pub struct SimEnv {
    cfg: SimConfig,
    spec: EnvSpec,
    world: Option<World>,
    cameras: Vec<Camera>,
    step: u64,
    done: bool,
    last: Option<OracleReading>,
}

/// `r` with the trap's over-read: at least `trap.phi` while the TCP is at or above `trap.min_tcp_z` and the
/// task is not done (success, failure and stage stay the oracle's).
fn trapped(trap: Option<OracleTrap>, world: &World, mut r: OracleReading) -> OracleReading {
    if let Some(t) = trap {
        if !r.success && !r.failure && world.tcp().z >= t.min_tcp_z {
            r.progress = r.progress.max(t.phi);
        }
    }
    r
}

impl SimEnv {
    pub fn new(cfg: SimConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let spec = EnvSpec {
            task: cfg.task.name().to_string(),
            action: action_spec(),
            state: state_spec(cfg.task),
            views: if cfg.render {
                cfg.cameras
                    .iter()
                    .map(|c| ViewSpec {
                        name: c.name.clone(),
                        width: c.width,
                        height: c.height,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            stage_names: cfg
                .task
                .stage_names()
                .iter()
                .map(|s| s.to_string())
                .collect(),
            control_hz: cfg.control_hz,
            max_steps: cfg.max_steps,
        };
        Ok(Self {
            cfg,
            spec,
            world: None,
            cameras: Vec::new(),
            step: 0,
            done: true,
            last: None,
        })
    }

    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// The scene (None before the first reset). Experts read privileged state from it.
    pub fn world(&self) -> Option<&World> {
        self.world.as_ref()
    }

    /// The oracle reading of the current state (None before the first reset).
    pub fn oracle(&self) -> Option<OracleReading> {
        self.last
    }

    /// The prepared cameras of this episode.
    pub fn cameras(&self) -> &[Camera] {
        &self.cameras
    }

    /// Renders every configured camera now (whether or not observations carry views).
    pub fn render_views(&self) -> Vec<stagewise_core::View> {
        match &self.world {
            Some(w) => self.render_world(w),
            None => Vec::new(),
        }
    }

    fn render_world(&self, w: &World) -> Vec<stagewise_core::View> {
        self.cameras
            .iter()
            .map(|c| c.render(w, self.cfg.depth, self.cfg.render_threads))
            .collect()
    }

    /// The oracle's reading, with the configured trap applied.
    fn read_oracle(&self, world: &World) -> OracleReading {
        trapped(self.cfg.oracle_trap, world, oracle::evaluate(world))
    }

    fn observe(&self, world: &World) -> Observation {
        Observation {
            step: self.step,
            time: self.step as f64 / self.cfg.control_hz,
            views: if self.cfg.render {
                self.render_world(world)
            } else {
                Vec::new()
            },
            state: state_vector(world),
        }
    }
}

/// The state vector of a world, in [`state_spec`] order.
pub fn state_vector(w: &World) -> Vec<f32> {
    let t = w.tcp();
    let mut s = Vec::with_capacity(5 + 7 * w.num_blocks() + 2);
    s.extend([
        t.x,
        t.y,
        t.z,
        w.gripper_width(),
        if w.attached().is_some() { 1.0 } else { 0.0 },
    ]);
    for i in 0..w.num_blocks() {
        let p = w.block_pos(i);
        let q = w.block_rot(i);
        s.extend([p.x, p.y, p.z, q.w, q.x, q.y, q.z]);
    }
    if w.task().has_target() {
        s.extend([w.target().x, w.target().y]);
    }
    s
}

/// Checks an action against the action space; returns the clipped action and whether clipping happened.
pub fn check_action(spec: &BoxSpec, action: &[f32]) -> Result<([f32; 4], bool), EnvError> {
    if action.len() != spec.len() {
        return Err(EnvError::ActionSize {
            expected: spec.len(),
            got: action.len(),
            names: spec.names.join(", "),
        });
    }
    let mut out = [0f32; 4];
    let mut clipped = false;
    for (i, &a) in action.iter().enumerate() {
        if !a.is_finite() {
            return Err(EnvError::ActionNotFinite {
                index: i,
                name: spec.names[i].clone(),
                value: a,
            });
        }
        let c = a.clamp(spec.low[i], spec.high[i]);
        clipped |= c != a;
        out[i] = c;
    }
    Ok((out, clipped))
}

impl Env for SimEnv {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let world = World::new(&self.cfg, &mut rng);
        // Cameras draw from their own stream so that enabling rendering never changes the layout.
        let mut cam_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
        self.cameras = self
            .cfg
            .cameras
            .iter()
            .map(|c| Camera::new(c, self.cfg.randomization.camera_jitter, &mut cam_rng))
            .collect();
        if self.cfg.render {
            for c in &mut self.cameras {
                c.prepare_static(&world);
            }
        }
        self.step = 0;
        self.done = false;
        self.last = Some(self.read_oracle(&world));
        let obs = self.observe(&world);
        self.world = Some(world);
        Ok(obs)
    }

    fn step(&mut self, action: &[f32]) -> Result<StepResult, EnvError> {
        if self.done {
            return Err(EnvError::NeedsReset);
        }
        let (a, clipped) = check_action(&self.spec.action, action)?;
        let world = self.world.as_mut().ok_or(EnvError::NeedsReset)?;
        let scale = MAX_SPEED / self.cfg.control_hz as f32;
        let delta = Vec3::new(a[0], a[1], a[2]) * scale;
        world.control(delta, (a[3] + 1.0) * 0.5 * MAX_WIDTH);
        self.step += 1;
        let r = trapped(self.cfg.oracle_trap, &*world, oracle::evaluate(world));
        self.last = Some(r);
        let terminated = self.cfg.end_on_task && (r.success || r.failure);
        let truncated = !terminated && self.step >= self.cfg.max_steps;
        self.done = terminated || truncated;
        let world = self.world.as_ref().ok_or(EnvError::NeedsReset)?;
        let obs = self.observe(world);
        Ok(StepResult {
            obs,
            reward: if r.success { 1.0 } else { 0.0 },
            terminated,
            truncated,
            info: StepInfo {
                stage: Some(r.stage),
                progress_oracle: Some(r.progress),
                success: r.success,
                action_clipped: clipped,
            },
        })
    }
}
