//! [`RobotEnv`]: a robot behind the bridge as a core [`Env`], so the runtime drives it exactly like the simulator.

use crate::bridge::{Bridge, BridgeConfig, BridgeError};
use crate::camera::{CameraError, CameraSource};
use crate::transport::Endpoint;
use stagewise_core::{BoxSpec, Env, EnvError, EnvSpec, Observation, StepInfo, StepResult};
use stagewise_protocol::{joints, FirmwareState, LinkKey, Setpoint, StopReason, Telemetry};
use std::time::{Duration, Instant};

/// How an action maps to a command.
#[derive(Debug, Clone, PartialEq)]
pub enum ActionMap {
    /// `[vx, vy, vz, gripper]` in [-1, 1]: end-effector velocity as a fraction of `max_speed` (m/s) and the
    /// gripper (-1 closed, +1 open). The simulator's action layout.
    EeVelocity { max_speed: f32 },
    /// `[q_0 .. q_{n-1}, gripper]`: absolute joint targets, and the gripper in [-1, 1].
    JointPositions { n: usize },
}

/// Everything [`RobotEnv::connect`] needs.
#[derive(Debug, Clone)]
pub struct RobotEnvConfig {
    pub endpoint: Endpoint,
    pub bridge: BridgeConfig,
    /// Task name reported in the spec (e.g. `pick-place`).
    pub task: String,
    pub stage_names: Vec<String>,
    /// Env steps per second (the bridge streams commands and heartbeats in between).
    pub control_hz: f64,
    pub max_steps: u64,
    pub action: ActionMap,
    /// Gripper opening in state is `telemetry.gripper * gripper_scale` (0.08 = metres of the sim's gripper).
    pub gripper_scale: f32,
    /// Joint targets to move to at reset (None: start where the robot is).
    pub home: Option<Vec<f32>>,
    /// Time allowed to reach `home`.
    pub home_timeout: Duration,
    /// Tolerance for `home`, per joint.
    pub home_tolerance: f32,
}

impl RobotEnvConfig {
    /// The emulated 3-axis robot with the simulator's action and state layout (`[dx, dy, dz, gripper]`;
    /// state `[ee_x, ee_y, ee_z, gripper_width]`), 50 Hz, 400 steps, link key `key`.
    pub fn sim_like(
        endpoint: Endpoint,
        task: &str,
        stage_names: Vec<String>,
        key: LinkKey,
    ) -> Self {
        Self {
            endpoint,
            bridge: BridgeConfig::new(key),
            task: task.to_string(),
            stage_names,
            control_hz: 50.0,
            max_steps: 400,
            action: ActionMap::EeVelocity { max_speed: 0.3 },
            gripper_scale: 0.08,
            home: None,
            home_timeout: Duration::from_secs(5),
            home_tolerance: 0.005,
        }
    }

    /// The robot's own state fields (its proprioception, from the firmware's telemetry): `ee_x, ee_y, ee_z,
    /// gripper_width` for [`ActionMap::EeVelocity`], `q0 .. q{n-1}, gripper_width` for joint positions. The
    /// observation's state starts with them; fields of a [`StateSource`] follow. Known before connecting.
    pub fn proprio_names(&self) -> Vec<String> {
        spaces(self).1.names
    }
}

/// State the firmware link does not carry (e.g. object poses from a tracker or motion capture), appended to the
/// robot's own state in every observation. Such fields travel for logging and evaluation; they are not the
/// robot's proprioception ([`RobotEnv::proprio_names`]) and a reward model must never read them (DESIGN.md
/// "Progress": a model sees camera frames plus proprioception).
pub trait StateSource: Send {
    /// Names and bounds of the values [`StateSource::read`] returns.
    fn spec(&self) -> &BoxSpec;
    /// The values for control step `step` of the current episode.
    fn read(&mut self, step: u64) -> Result<Vec<f32>, CameraError>;
}

/// Puts the scene back for a new episode (on a real robot an operator or a reset routine; the emulator resets
/// its simulator with the episode's seed).
pub trait SceneReset: Send {
    fn reset_scene(&mut self, seed: u64) -> Result<(), CameraError>;
}

/// A robot as an [`Env`]. It owns a small tokio runtime for the bridge; `reset` arms the firmware (and clears a
/// latched host fault; never a latched e-stop: that needs an operator's `stagewise robot reset-estop`), `step`
/// sends one command through the host limits, waits for the control period, and returns the newest telemetry
/// (plus one frame per camera) as the observation. A firmware that stopped on its own (link loss, a stalled
/// actor, a sensor fault, a local disarm) ends the episode with an error naming its state and faults. Rewards
/// come from the reward model, so `reward` is 0 and episodes end only by `max_steps` (truncation).
pub struct RobotEnv {
    rt: tokio::runtime::Runtime,
    bridge: Bridge,
    cfg: RobotEnvConfig,
    spec: EnvSpec,
    cameras: Vec<Box<dyn CameraSource>>,
    extra_state: Option<Box<dyn StateSource>>,
    /// The first `proprio_len` state fields are the robot's own (telemetry); a state source's follow.
    proprio_len: usize,
    scene_reset: Option<Box<dyn SceneReset>>,
    late_steps: u64,
    step: u64,
    started: Instant,
    next_tick: Instant,
    done: bool,
}

/// The robot behind the env failed: the bridge's error (kept as the source) or a message.
fn backend(e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> EnvError {
    EnvError::backend("robot", e)
}

impl RobotEnv {
    /// Connects to the firmware (handshake) and prepares the spec. The robot does not move until `reset`.
    pub fn connect(
        cfg: RobotEnvConfig,
        cameras: Vec<Box<dyn CameraSource>>,
    ) -> Result<Self, BridgeError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("stagewise-bridge")
            .enable_all()
            .build()?;
        let bridge = rt.block_on(Bridge::connect(&cfg.endpoint, cfg.bridge.clone()))?;
        if let ActionMap::JointPositions { n } = cfg.action {
            let fw = usize::from(bridge.firmware().n_joints);
            if n != fw {
                return Err(BridgeError::JointMismatch {
                    firmware: bridge.firmware().n_joints,
                    host: n,
                });
            }
        }
        let (action, state) = spaces(&cfg);
        let proprio_len = state.len();
        let spec = EnvSpec {
            task: cfg.task.clone(),
            action,
            state,
            views: cameras.iter().map(|c| c.spec().clone()).collect(),
            stage_names: cfg.stage_names.clone(),
            control_hz: cfg.control_hz,
            max_steps: cfg.max_steps,
        };
        let now = Instant::now();
        Ok(Self {
            rt,
            bridge,
            cfg,
            spec,
            cameras,
            extra_state: None,
            proprio_len,
            scene_reset: None,
            late_steps: 0,
            step: 0,
            started: now,
            next_tick: now,
            done: true,
        })
    }

    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }

    /// Replaces the cameras (e.g. opened after the handshake) and the views of the spec.
    pub fn with_cameras(mut self, cameras: Vec<Box<dyn CameraSource>>) -> Self {
        self.spec.views = cameras.iter().map(|c| c.spec().clone()).collect();
        self.cameras = cameras;
        self
    }

    /// The robot's own state fields (telemetry), the first ones of the spec's state: what a reward model may
    /// read. Fields appended by [`Self::with_state_source`] follow them and are not among these.
    pub fn proprio_names(&self) -> &[String] {
        &self.spec.state.names[..self.proprio_len]
    }

    /// Appends `source`'s values to every observation's state (and its names and bounds to the state space), for
    /// logging and evaluation: they are not [`Self::proprio_names`], and `stagewise run` binds reward models to
    /// those alone.
    pub fn with_state_source(mut self, source: Box<dyn StateSource>) -> Self {
        let s = source.spec();
        self.spec.state.names.extend(s.names.iter().cloned());
        self.spec.state.low.extend(s.low.iter().copied());
        self.spec.state.high.extend(s.high.iter().copied());
        self.extra_state = Some(source);
        self
    }

    /// Resets the scene with the episode's seed at every `reset`, before arming.
    pub fn with_scene_reset(mut self, reset: Box<dyn SceneReset>) -> Self {
        self.scene_reset = Some(reset);
        self
    }

    /// Steps whose control period had already passed when their command was sent (the caller was late).
    pub fn late_steps(&self) -> u64 {
        self.late_steps
    }

    /// Emergency stop now: latched in the firmware (and repeated until telemetry shows it); `reset` cannot
    /// re-arm until an operator clears it (`stagewise robot reset-estop`, [`Bridge::reset_estop`]).
    pub fn estop(&mut self) -> Result<(), BridgeError> {
        self.done = true;
        self.rt.block_on(self.bridge.estop())
    }

    fn period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.cfg.control_hz.max(1e-3))
    }

    fn observe(&mut self, t: &Telemetry) -> Result<Observation, EnvError> {
        let mut views = Vec::with_capacity(self.cameras.len());
        for c in &mut self.cameras {
            views.push(c.capture(self.step).map_err(backend)?);
        }
        let mut state: Vec<f32> = match self.cfg.action {
            ActionMap::EeVelocity { .. } => t.ee.to_vec(),
            ActionMap::JointPositions { .. } => t.positions.to_vec(),
        };
        state.push(t.gripper * self.cfg.gripper_scale);
        if let Some(src) = self.extra_state.as_mut() {
            let extra = src.read(self.step).map_err(backend)?;
            let want = src.spec().len();
            if extra.len() != want {
                return Err(backend(format!(
                    "state source gave {} values, its spec has {want}",
                    extra.len()
                )));
            }
            state.extend(extra);
        }
        Ok(Observation {
            step: self.step,
            time: self.started.elapsed().as_secs_f64(),
            views,
            state,
        })
    }

    fn fresh_telemetry(&self) -> Result<Telemetry, EnvError> {
        let after = self
            .bridge
            .telemetry()
            .map(|s| s.telemetry.seq)
            .unwrap_or(0);
        let wait = self.cfg.bridge.watchdog;
        self.rt
            .block_on(self.bridge.next_telemetry(after, wait))
            .map(|s| s.telemetry)
            .map_err(backend)
    }
}

fn spaces(cfg: &RobotEnvConfig) -> (BoxSpec, BoxSpec) {
    let l = &cfg.bridge.limits;
    match &cfg.action {
        ActionMap::EeVelocity { .. } => {
            let (lo, hi) = match l.workspace {
                Some(w) => (w.min.to_vec(), w.max.to_vec()),
                None => (vec![f32::NEG_INFINITY; 3], vec![f32::INFINITY; 3]),
            };
            (
                BoxSpec {
                    names: ["dx", "dy", "dz", "gripper"].map(String::from).to_vec(),
                    low: vec![-1.0; 4],
                    high: vec![1.0; 4],
                },
                BoxSpec {
                    names: ["ee_x", "ee_y", "ee_z", "gripper_width"]
                        .map(String::from)
                        .to_vec(),
                    low: [lo, vec![0.0]].concat(),
                    high: [hi, vec![cfg.gripper_scale]].concat(),
                },
            )
        }
        ActionMap::JointPositions { n } => {
            let n = *n;
            let mut names: Vec<String> = (0..n).map(|i| format!("q{i}")).collect();
            names.push("gripper".into());
            let mut low = l.pos_min.clone();
            low.resize(n, f32::NEG_INFINITY);
            low.push(-1.0);
            let mut high = l.pos_max.clone();
            high.resize(n, f32::INFINITY);
            high.push(1.0);
            let mut snames: Vec<String> = (0..n).map(|i| format!("q{i}")).collect();
            snames.push("gripper_width".into());
            let mut slow = low.clone();
            slow[n] = 0.0;
            let mut shigh = high.clone();
            shigh[n] = cfg.gripper_scale;
            (
                BoxSpec { names, low, high },
                BoxSpec {
                    names: snames,
                    low: slow,
                    high: shigh,
                },
            )
        }
    }
}

impl Env for RobotEnv {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    /// Resets the scene with `seed` (only with [`RobotEnv::with_scene_reset`]; otherwise a robot's initial state
    /// is what it is), arms the firmware (clearing a latched host fault), moves to `home` if configured, and
    /// returns the first observation.
    fn reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
        if let Some(r) = self.scene_reset.as_mut() {
            r.reset_scene(seed).map_err(backend)?;
        }
        self.rt.block_on(self.bridge.arm()).map_err(backend)?;
        if let Some(home) = self.cfg.home.clone() {
            let sp = Setpoint::Joints(
                joints(&home)
                    .ok_or_else(|| backend(format!("home has {} joints, too many", home.len())))?,
            );
            let deadline = Instant::now() + self.cfg.home_timeout;
            loop {
                self.rt
                    .block_on(self.bridge.command(&sp, 1.0))
                    .map_err(backend)?;
                let t = self.fresh_telemetry()?;
                let err = t
                    .positions
                    .iter()
                    .zip(&home)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                if err <= self.cfg.home_tolerance {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(backend(format!(
                        "did not reach home within {:?} (error {err})",
                        self.cfg.home_timeout
                    )));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let t = self.fresh_telemetry()?;
        if t.state != FirmwareState::Armed {
            return Err(backend(format!("firmware is {:?} after arming", t.state)));
        }
        self.step = 0;
        self.started = Instant::now();
        self.next_tick = self.started + self.period();
        self.done = false;
        self.observe(&t)
    }

    fn step(&mut self, action: &[f32]) -> Result<StepResult, EnvError> {
        if self.done {
            return Err(EnvError::NeedsReset);
        }
        let spec = &self.spec.action;
        if action.len() != spec.len() {
            return Err(EnvError::ActionSize {
                expected: spec.len(),
                got: action.len(),
                names: spec.names.join(", "),
            });
        }
        let mut a = action.to_vec();
        let mut clipped = false;
        for (i, v) in a.iter_mut().enumerate() {
            if !v.is_finite() {
                return Err(EnvError::ActionNotFinite {
                    index: i,
                    name: spec.names[i].clone(),
                    value: *v,
                });
            }
            let c = v.clamp(spec.low[i], spec.high[i]);
            clipped |= c != *v;
            *v = c;
        }
        let g = (a[a.len() - 1] + 1.0) * 0.5;
        let setpoint = match self.cfg.action {
            ActionMap::EeVelocity { max_speed } => {
                Setpoint::EeVelocity([a[0] * max_speed, a[1] * max_speed, a[2] * max_speed])
            }
            ActionMap::JointPositions { .. } => Setpoint::Joints(
                joints(&a[..a.len() - 1])
                    .ok_or_else(|| backend("too many joints for the protocol"))?,
            ),
        };
        let report = match self.rt.block_on(self.bridge.command(&setpoint, g)) {
            Ok(r) => r,
            Err(BridgeError::Faulted(f)) => {
                self.done = true;
                return Err(backend(format!("robot stopped: {f:?}; reset to re-arm")));
            }
            Err(e) => return Err(backend(e)),
        };
        // Hold the control rate.
        let now = Instant::now();
        if now > self.next_tick {
            self.late_steps += 1;
        }
        if self.next_tick > now {
            std::thread::sleep(self.next_tick - now);
        }
        self.next_tick = self.next_tick.max(now) + self.period();
        let t = self
            .bridge
            .telemetry()
            .map(|s| s.telemetry)
            .ok_or_else(|| backend(BridgeError::NoTelemetry))?;
        if let Some(f) = self.bridge.fault() {
            self.done = true;
            return Err(backend(format!("robot stopped: {f:?}; reset to re-arm")));
        }
        if let Some(stop) = self.bridge.firmware_stop() {
            self.done = true;
            return Err(backend(format!(
                "the robot at {} stopped on its own: {stop}; reset to re-arm",
                self.cfg.endpoint
            )));
        }
        if matches!(t.state, FirmwareState::Hold | FirmwareState::EStopped) {
            self.done = true;
            return Err(backend(format!(
                "firmware is {:?} (faults {:#06x}); reset to re-arm",
                t.state, t.faults.0
            )));
        }
        self.step += 1;
        let obs = self.observe(&t)?;
        let truncated = self.step >= self.cfg.max_steps;
        self.done = truncated;
        Ok(StepResult {
            obs,
            reward: 0.0,
            terminated: false,
            truncated,
            info: StepInfo {
                stage: None,
                progress_oracle: None,
                success: false,
                action_clipped: clipped || !report.hits.is_empty(),
            },
        })
    }
}

impl Drop for RobotEnv {
    fn drop(&mut self) {
        // The run's safety record, for the operator and for benches that count it (benches/robot_finetune.sh).
        let s = self.bridge.stats();
        tracing::info!(
            "bridge {}: {} commands, {} limit hits (clamped), {} watchdog trips, {} firmware stops, {} stop frames, \
             {} auth failures, {} replays, {} bad frames, {} late steps",
            self.bridge.endpoint(),
            s.commands_sent,
            s.limit_hits,
            s.watchdog_trips,
            s.firmware_stops,
            s.stop_frames,
            s.auth_failures,
            s.replays,
            s.bad_frames,
            self.late_steps
        );
        // Best effort: tell the firmware we are gone so it brakes at once rather than at its link timeout. A
        // protective stop (the next run arms again), not a latched e-stop.
        let bridge = &self.bridge;
        self.rt.block_on(async {
            let _ = tokio::time::timeout(Duration::from_millis(100), async {
                if bridge.stop(StopReason::Shutdown).await.is_ok() {
                    bridge
                        .wait_stop_acknowledged(Duration::from_millis(100))
                        .await;
                }
            })
            .await;
        });
    }
}
