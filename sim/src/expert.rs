//! Scripted experts (privileged: they read the world state), degraded variants, and annotated rollouts.
//!
//! The clean experts are reactive: every step they choose a sub-goal from the current state, so they also
//! recover from regressions (a dropped block is grasped again).

use crate::config::{SimConfig, Task};
use crate::env::SimEnv;
use crate::oracle::{self, carry_z, push_geometry, HOVER_Z, PLACE_TOL, PUSH_Z, RETREAT};
use crate::world::{World, GRASP_DZ, MAX_SPEED, MAX_WIDTH};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use rapier3d::glamx::{Vec2, Vec3};
use serde::{Deserialize, Serialize};
use stagewise_core::{Env, EnvError, View};

/// An outright failure the degraded expert commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureMode {
    /// Grasps (or pushes) beside the block, never holding (moving) it; the episode runs to the time limit.
    MissGrasp,
    /// Places (pushes) the block at a wrong spot, then stops as if done.
    WrongPlace,
    /// Stops moving at a random step.
    Freeze,
    /// Carries (pushes) the block off the table: terminated with failure.
    OffTable,
    /// Places (pushes) the block 0.5-5 cm from its place point (target), in a random direction drawn per episode,
    /// then stops as if done: both sides of the success tolerance ([`PLACE_TOL`], 2 cm; push-target's
    /// [`oracle::PUSH_TOL`], 2.5 cm), the near misses a reward model must tell from a placed block. Succeeds when
    /// the offset is inside the tolerance.
    NearPlace,
}

/// How an expert is degraded. `Degradation::default()` is the clean expert.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Degradation {
    /// Standard deviation of Gaussian noise added to the TCP commands (action units).
    pub action_noise: f32,
    /// Probability per step of starting a pause.
    pub pause_prob: f32,
    /// Longest pause (steps); pauses last 1..=pause_steps.
    pub pause_steps: u32,
    /// Once, mid-task: undo progress (open the gripper while carrying; back off while pushing), then recover.
    pub regress: bool,
    pub failure: Option<FailureMode>,
    /// No expert at all when > 0: every action uniformly random in [-1, 1]^4, each held this many steps
    /// (exploration-like play: the states an RL explorer visits and no expert does).
    #[serde(default)]
    pub random_hold: u32,
}

impl Degradation {
    pub fn none() -> Self {
        Self::default()
    }
    pub fn noisy(std: f32) -> Self {
        Self {
            action_noise: std,
            ..Self::default()
        }
    }
    pub fn pauses(prob: f32, max_steps: u32) -> Self {
        Self {
            pause_prob: prob,
            pause_steps: max_steps,
            ..Self::default()
        }
    }
    pub fn regress() -> Self {
        Self {
            regress: true,
            ..Self::default()
        }
    }
    pub fn failure(mode: FailureMode) -> Self {
        Self {
            failure: Some(mode),
            ..Self::default()
        }
    }
    pub fn random(hold: u32) -> Self {
        Self {
            random_hold: hold,
            ..Self::default()
        }
    }

    /// Named presets: `none`, `noisy`, `pauses`, `regress`, `miss-grasp`, `wrong-place`, `freeze`,
    /// `off-table`, `near-place`, `mixed` (noise + pauses + regress), `random` (uniformly random actions held 4
    /// steps).
    pub fn preset(name: &str) -> Option<Self> {
        Some(match name {
            "none" | "clean" => Self::none(),
            "noisy" => Self::noisy(0.3),
            "pauses" => Self::pauses(0.03, 15),
            "regress" => Self::regress(),
            "miss-grasp" => Self::failure(FailureMode::MissGrasp),
            "wrong-place" => Self::failure(FailureMode::WrongPlace),
            "freeze" => Self::failure(FailureMode::Freeze),
            "off-table" => Self::failure(FailureMode::OffTable),
            "near-place" => Self::failure(FailureMode::NearPlace),
            "mixed" => Self {
                action_noise: 0.2,
                pause_prob: 0.02,
                pause_steps: 10,
                regress: true,
                failure: None,
                random_hold: 0,
            },
            "random" => Self::random(4),
            _ => return None,
        })
    }

    pub const PRESETS: [&'static str; 11] = [
        "none",
        "noisy",
        "pauses",
        "regress",
        "miss-grasp",
        "wrong-place",
        "freeze",
        "off-table",
        "near-place",
        "mixed",
        "random",
    ];
}

/// A scripted expert for one task.
#[derive(Debug, Clone)]
pub struct Expert {
    task: Task,
    deg: Degradation,
    rng: ChaCha8Rng,
    steps: u32,
    pause_left: u32,
    freeze_at: u32,
    regress_left: u32,
    regress_done: bool,
    reopen: bool,
    last_grip: f32,
    /// The action `random_hold` is holding.
    random_action: [f32; 4],
    /// Where `FailureMode::NearPlace` puts the block, relative to its place point (zero otherwise).
    near_offset: Vec2,
}

impl Expert {
    /// An expert with its random stream seeded by 0 (see [`Expert::with_seed`]).
    pub fn new(task: Task, degradation: Degradation) -> Self {
        Self::with_seed(task, degradation, 0)
    }

    /// An expert whose degradations draw from `seed`.
    pub fn with_seed(task: Task, degradation: Degradation, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x005e_ede4_be27_u64);
        let freeze_at = rng.random_range(15..70);
        // drawn after everything else and only for near-place, so the other presets' streams are unchanged
        let near_offset = if degradation.failure == Some(FailureMode::NearPlace) {
            let angle = rng.random_range(0.0..std::f32::consts::TAU);
            Vec2::new(angle.cos(), angle.sin()) * rng.random_range(0.005f32..0.05)
        } else {
            Vec2::ZERO
        };
        Self {
            task,
            deg: degradation,
            rng,
            steps: 0,
            pause_left: 0,
            freeze_at,
            regress_left: 0,
            regress_done: false,
            reopen: false,
            last_grip: 1.0,
            random_action: [0.0; 4],
            near_offset,
        }
    }

    pub fn task(&self) -> Task {
        self.task
    }

    pub fn degradation(&self) -> Degradation {
        self.deg
    }

    /// The expert's action in `env` (zeros before the first reset).
    pub fn act_env(&mut self, env: &SimEnv) -> [f32; 4] {
        match env.world() {
            Some(w) => self.act(w),
            None => [0.0; 4],
        }
    }

    /// The next action `[dx, dy, dz, gripper]` for the current world state. With noise it may leave
    /// [-1, 1]; the env clips it and says so in `info.action_clipped`.
    pub fn act(&mut self, world: &World) -> [f32; 4] {
        self.steps += 1;
        if self.deg.random_hold > 0 {
            if (self.steps - 1).is_multiple_of(self.deg.random_hold) {
                self.random_action = std::array::from_fn(|_| self.rng.random_range(-1.0f32..=1.0));
            }
            return self.random_action;
        }
        if self.deg.failure == Some(FailureMode::Freeze) && self.steps >= self.freeze_at {
            return [0.0, 0.0, 0.0, self.last_grip];
        }
        if self.pause_left > 0 {
            self.pause_left -= 1;
            return [0.0, 0.0, 0.0, self.last_grip];
        }
        if self.deg.pause_prob > 0.0
            && self.deg.pause_steps > 0
            && self.rng.random::<f32>() < self.deg.pause_prob
        {
            self.pause_left = self.rng.random_range(1..=self.deg.pause_steps);
            return [0.0, 0.0, 0.0, self.last_grip];
        }
        let (goal, grip, speed) = if self.regress_left > 0 {
            self.regress_left -= 1;
            self.regress_goal(world)
        } else {
            if self.deg.regress && !self.regress_done && self.should_regress(world) {
                self.regress_done = true;
                self.regress_left = 12;
                let g = self.regress_goal(world);
                return self.finish(world, g);
            }
            match self.task {
                Task::PickPlace | Task::Stack => self.pick_place(world),
                Task::PushTarget => self.push(world),
            }
        };
        self.finish(world, (goal, grip, speed))
    }

    fn finish(&mut self, world: &World, (goal, grip, speed): (Vec3, f32, f32)) -> [f32; 4] {
        let step = MAX_SPEED * world.control_dt();
        let d = (goal - world.tcp()) / step;
        let n = d.abs().max_element();
        let d = if n > speed { d * (speed / n) } else { d };
        let mut a = [d.x, d.y, d.z, grip];
        if self.deg.action_noise > 0.0 {
            if let Ok(n) = Normal::new(0.0f32, self.deg.action_noise) {
                for v in a.iter_mut().take(3) {
                    *v += n.sample(&mut self.rng);
                }
            }
        }
        self.last_grip = grip;
        a
    }

    fn should_regress(&self, world: &World) -> bool {
        let r = oracle::evaluate(world);
        match self.task {
            Task::PickPlace | Task::Stack => r.stage == 3 && r.tau > 0.4,
            Task::PushTarget => r.stage == 2 && r.tau > 0.35,
        }
    }

    fn regress_goal(&self, world: &World) -> (Vec3, f32, f32) {
        let tcp = world.tcp();
        match self.task {
            // open while carrying: the block drops; move up and away a little
            Task::PickPlace | Task::Stack => (tcp + Vec3::new(0.0, 0.0, 0.03), 1.0, 0.5),
            Task::PushTarget => {
                let g = push_geometry(world);
                let back = tcp.truncate() - g.dir * 0.04;
                (Vec3::new(back.x, back.y, tcp.z + 0.02), -1.0, 0.6)
            }
        }
    }

    /// Where this expert believes block 0 belongs (shifted by the wrong-place / off-table / near-place failures).
    fn place_belief(&self, world: &World) -> Vec3 {
        let p = world.place_point();
        let rest = world.block(0).half.z;
        match self.deg.failure {
            Some(FailureMode::WrongPlace) => {
                let dx = if p.x > 0.0 { -0.10 } else { 0.10 };
                Vec3::new(p.x + dx, p.y, rest)
            }
            Some(FailureMode::NearPlace) => p + self.near_offset.extend(0.0),
            Some(FailureMode::OffTable) => {
                let a = world.block_pos(0);
                let y = if a.y > 0.0 { 0.51 } else { -0.51 };
                Vec3::new(a.x, y, rest)
            }
            _ => p,
        }
    }

    fn pick_place(&mut self, world: &World) -> (Vec3, f32, f32) {
        const OPEN: f32 = 1.0;
        const CLOSE: f32 = -1.0;
        let tcp = world.tcp();
        let a = world.block_pos(0);
        let place = self.place_belief(world);
        let width = world.gripper_width();
        let cz = carry_z(world).max(place.z + oracle::LIFT);
        if self.reopen {
            if width > MAX_WIDTH - 0.003 {
                self.reopen = false;
            } else {
                return (tcp + Vec3::new(0.0, 0.0, 0.01), OPEN, 1.0);
            }
        }
        if world.attached() == Some(0) {
            let off = tcp - a;
            let d_xy = (a - place).truncate().length();
            if d_xy > 0.004 {
                let goal = if a.z < cz - 0.01 && d_xy > 0.03 {
                    Vec3::new(tcp.x, tcp.y, cz + off.z)
                } else {
                    Vec3::new(place.x + off.x, place.y + off.y, cz + off.z)
                };
                return (goal, CLOSE, 1.0);
            }
            let goal = Vec3::new(place.x + off.x, place.y + off.y, place.z + off.z + 0.001);
            let at_floor = tcp.z < crate::world::WS_LO[2] + 0.002;
            if a.z - place.z < 0.005 || at_floor || self.deg.failure == Some(FailureMode::OffTable)
            {
                return (goal, OPEN, 1.0);
            }
            return (goal, CLOSE, 0.6);
        }
        let placed = (a - place).truncate().length() < PLACE_TOL && (a.z - place.z).abs() < 0.008;
        let off_table = world.block_off_table();
        if placed || off_table {
            let z = if off_table {
                tcp.z + 0.02
            } else {
                a.z + GRASP_DZ + RETREAT + 0.02
            };
            return (Vec3::new(tcp.x, tcp.y, z), OPEN, 1.0);
        }
        let mut gp = world.grasp_point(0);
        if self.deg.failure == Some(FailureMode::MissGrasp) {
            gp.x += if gp.x > 0.0 { -0.05 } else { 0.05 };
        }
        let dxy = (tcp - gp).truncate().length();
        let dz = tcp.z - gp.z;
        if width < 0.003 {
            self.reopen = true;
            return (tcp + Vec3::new(0.0, 0.0, 0.01), OPEN, 1.0);
        }
        let closing = width < MAX_WIDTH - 0.002;
        if (dxy < 0.005 && dz.abs() < 0.003) || (closing && dxy < 0.02 && dz.abs() < 0.012) {
            return (Vec3::new(gp.x, gp.y, tcp.z), CLOSE, 1.0);
        }
        let hover_z = gp.z + 0.07;
        if dxy < 0.006 || (dz < 0.06 && dxy < 0.012) {
            return (gp, OPEN, if dz > 0.02 { 1.0 } else { 0.5 });
        }
        if dz < 0.05 {
            return (Vec3::new(tcp.x, tcp.y, hover_z), OPEN, 1.0);
        }
        (
            Vec3::new(gp.x, gp.y, hover_z.max(tcp.z.min(hover_z + 0.05))),
            OPEN,
            1.0,
        )
    }

    fn push(&mut self, world: &World) -> (Vec3, f32, f32) {
        const CLOSE: f32 = -1.0;
        let tcp = world.tcp();
        let b = world.block_pos(0).truncate();
        let mut g = push_geometry(world);
        match self.deg.failure {
            Some(mode @ (FailureMode::WrongPlace | FailureMode::NearPlace)) => {
                // push toward a point beside the target (9 cm; near-place: its drawn offset), then stop
                let beside = if mode == FailureMode::WrongPlace {
                    Vec2::new(-g.dir.y, g.dir.x) * 0.09
                } else {
                    self.near_offset
                };
                let t = world.target().truncate() + beside;
                let d = t - b;
                g.dist = d.length();
                g.dir = if g.dist > 1e-6 { d / g.dist } else { g.dir };
            }
            Some(FailureMode::OffTable) => {
                let t = Vec2::new(b.x, if b.y > 0.0 { 0.7 } else { -0.7 });
                let d = t - b;
                g.dist = d.length();
                g.dir = d / g.dist.max(1e-6);
            }
            _ => {}
        }
        if g.dist < 0.008 {
            return (tcp, CLOSE, 1.0);
        }
        let mut pre = b - g.dir * (g.standoff + 0.02);
        if self.deg.failure == Some(FailureMode::MissGrasp) {
            pre += Vec2::new(-g.dir.y, g.dir.x) * 0.06;
        }
        let rel = tcp.truncate() - b;
        let along = rel.dot(g.dir);
        let lat = (rel - g.dir * along).length();
        let miss = self.deg.failure == Some(FailureMode::MissGrasp);
        if tcp.z > PUSH_Z + 0.008 {
            let d_pre = (tcp.truncate() - pre).length();
            if d_pre > 0.006 {
                if tcp.z < HOVER_Z - 0.02 && d_pre > 0.03 {
                    return (Vec3::new(tcp.x, tcp.y, HOVER_Z), CLOSE, 1.0);
                }
                return (Vec3::new(pre.x, pre.y, HOVER_Z), CLOSE, 1.0);
            }
            return (Vec3::new(pre.x, pre.y, PUSH_Z), CLOSE, 1.0);
        }
        if !miss && (along > -g.standoff + 0.02 || lat > 0.02) {
            return (Vec3::new(tcp.x, tcp.y, HOVER_Z), CLOSE, 1.0);
        }
        let lateral_fix = if miss {
            Vec2::new(-g.dir.y, g.dir.x) * 0.06
        } else {
            Vec2::ZERO
        };
        // advance along the block-target line (lateral error is corrected toward the line)
        let goal = b + g.dir * (along + 0.012) + lateral_fix;
        (Vec3::new(goal.x, goal.y, PUSH_Z), CLOSE, 0.5)
    }
}

/// A contiguous run of one stage: steps `start..=end` (state indices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageSpan {
    pub stage: usize,
    pub start: usize,
    pub end: usize,
}

/// One recorded episode with ground-truth annotations. Index `t` of `states`, `stages`, `progress` (and
/// `frames`) is the state after `t` actions (t = 0 is the reset state); `actions[t]` was taken in state `t`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EpisodeRecord {
    pub task: Task,
    pub seed: u64,
    pub degradation: Degradation,
    pub stage_names: Vec<String>,
    pub state_names: Vec<String>,
    pub states: Vec<Vec<f32>>,
    pub actions: Vec<Vec<f32>>,
    pub rewards: Vec<f64>,
    /// Oracle stage of every state.
    pub stages: Vec<usize>,
    /// Oracle progress of every state.
    pub progress: Vec<f32>,
    /// Whether the env clipped each action.
    pub clipped: Vec<bool>,
    /// Rendered views per state (when recorded with rendering on).
    #[serde(skip)]
    pub frames: Option<Vec<Vec<View>>>,
    pub success: bool,
    pub terminated: bool,
    pub truncated: bool,
}

impl EpisodeRecord {
    /// Number of actions taken.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// Contiguous stage runs in time order (a stage appears more than once after a regression).
    pub fn stage_spans(&self) -> Vec<StageSpan> {
        let mut out: Vec<StageSpan> = Vec::new();
        for (t, &s) in self.stages.iter().enumerate() {
            match out.last_mut() {
                Some(span) if span.stage == s => span.end = t,
                _ => out.push(StageSpan {
                    stage: s,
                    start: t,
                    end: t,
                }),
            }
        }
        out
    }

    /// Per stage: first start and last end (state indices), None when the stage never occurred.
    pub fn stage_bounds(&self) -> Vec<Option<(usize, usize)>> {
        let mut b: Vec<Option<(usize, usize)>> = vec![None; self.stage_names.len()];
        for (t, &s) in self.stages.iter().enumerate() {
            if let Some(slot) = b.get_mut(s) {
                *slot = Some(match *slot {
                    Some((start, _)) => (start, t),
                    None => (t, t),
                });
            }
        }
        b
    }

    /// The record as pretty JSON (without frames).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// Share of the episode's states spent in each stage.
    pub fn stage_shares(&self) -> Vec<f32> {
        let mut c = vec![0f32; self.stage_names.len()];
        for &s in &self.stages {
            if let Some(x) = c.get_mut(s) {
                *x += 1.0;
            }
        }
        let n = self.stages.len().max(1) as f32;
        c.iter().map(|x| x / n).collect()
    }
}

/// Runs the expert for `task` on `seed` with the default configuration (3 views at 96x96 when `render`).
pub fn rollout(
    task: Task,
    seed: u64,
    degradation: Degradation,
    render: bool,
) -> Result<EpisodeRecord, EnvError> {
    let cfg = if render {
        SimConfig::new(task)
    } else {
        SimConfig::headless(task)
    };
    rollout_with(&cfg, seed, degradation)
}

/// Runs the expert in an env built from `cfg` (frames are recorded when `cfg.render`).
pub fn rollout_with(
    cfg: &SimConfig,
    seed: u64,
    degradation: Degradation,
) -> Result<EpisodeRecord, EnvError> {
    let mut expert = Expert::with_seed(cfg.task, degradation, seed);
    rollout_driven(cfg, seed, degradation, |env| Ok(expert.act_env(env)))
}

/// Runs one episode in an env built from `cfg` with the actions `act` chooses from the env's state each step
/// (a scripted expert, or a policy: `stagewise record --policy`), recorded and labelled by the oracle like an
/// expert's. `degradation` is only what the record says drove it (`Degradation::none()` for a non-expert driver).
/// An error of `act` ends the rollout with that error.
pub fn rollout_driven<E: From<EnvError>>(
    cfg: &SimConfig,
    seed: u64,
    degradation: Degradation,
    mut act: impl FnMut(&SimEnv) -> Result<[f32; 4], E>,
) -> Result<EpisodeRecord, E> {
    let mut env = SimEnv::new(cfg.clone()).map_err(|e| EnvError::backend("simulator", e))?;
    let obs = env.reset(seed)?;
    let first = env.oracle().ok_or(EnvError::NeedsReset)?;
    let spec = env.spec().clone();
    let mut rec = EpisodeRecord {
        task: cfg.task,
        seed,
        degradation,
        stage_names: spec.stage_names.clone(),
        state_names: spec.state.names.clone(),
        states: vec![obs.state],
        actions: Vec::new(),
        rewards: Vec::new(),
        stages: vec![first.stage],
        progress: vec![first.progress],
        clipped: Vec::new(),
        frames: if cfg.render {
            Some(vec![obs.views])
        } else {
            None
        },
        success: false,
        terminated: false,
        truncated: false,
    };
    loop {
        let a = act(&env)?;
        let r = env.step(&a)?;
        rec.actions.push(a.to_vec());
        rec.rewards.push(r.reward);
        rec.states.push(r.obs.state);
        rec.stages.push(r.info.stage.unwrap_or(0));
        rec.progress.push(r.info.progress_oracle.unwrap_or(0.0));
        rec.clipped.push(r.info.action_clipped);
        if let Some(f) = rec.frames.as_mut() {
            f.push(r.obs.views);
        }
        if r.terminated || r.truncated {
            rec.success = r.info.success;
            rec.terminated = r.terminated;
            rec.truncated = r.truncated;
            break;
        }
    }
    Ok(rec)
}
