//! The firmware control loop: message handling, supervision, limits, one [`Firmware::tick`] per control period.

use stagewise_protocol::{
    Ack, AckStatus, Capabilities, Command, Faults, FirmwareState, Hello, JointVec, Message,
    MessageKind, Role, Setpoint, Telemetry, MAX_JOINTS, PROTOCOL_VERSION,
};

/// What the firmware asks of the plant for one control period.
#[derive(Debug, Clone, PartialEq)]
pub enum Drive {
    /// Brake: hold the current position, zero velocity.
    Hold,
    /// Move each joint toward this position (already rate-limited for this period).
    Joints(JointVec),
    /// End-effector linear velocity in m/s (already limited).
    EeVelocity([f32; 3]),
}

/// The plant's measured state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlantState {
    pub positions: JointVec,
    pub velocities: JointVec,
    pub efforts: JointVec,
    pub ee: [f32; 3],
    /// Gripper opening in [0, 1].
    pub gripper: f32,
}

/// The hardware (or a simulator) the firmware drives. One call to [`Plant::apply`] per control period.
pub trait Plant {
    /// Applies `drive` and the gripper target (in [0, 1]) for `dt` seconds.
    fn apply(&mut self, drive: &Drive, gripper: f32, dt: f32);
    /// Reads the current state into `out`.
    fn read(&mut self, out: &mut PlantState);
    /// The firmware accepted a new command (called by the emulator; a plant may ignore it).
    fn command_accepted(&mut self) {}
}

/// Limits the firmware enforces on every command, whatever the host already checked.
#[derive(Debug, Clone, PartialEq)]
pub struct FirmwareLimits {
    pub pos_min: [f32; MAX_JOINTS],
    pub pos_max: [f32; MAX_JOINTS],
    /// Joint speed limit (units per second): a joint target moves at most `vel_max * dt` per period.
    pub vel_max: [f32; MAX_JOINTS],
    /// End-effector speed limit per axis, m/s.
    pub ee_speed_max: f32,
    /// End-effector workspace box; velocity components that push out of it are zeroed.
    pub ws_min: [f32; 3],
    pub ws_max: [f32; 3],
}

/// Firmware configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct FirmwareConfig {
    pub n_joints: u8,
    pub capabilities: Capabilities,
    pub control_hz: u16,
    /// No valid frame for this long -> `Hold`.
    pub link_timeout_us: u64,
    /// An armed command older than this stops motion.
    pub command_timeout_us: u64,
    /// Telemetry every this many ticks (1 = every control period).
    pub telemetry_every: u32,
    pub limits: FirmwareLimits,
}

impl FirmwareConfig {
    /// A 3-axis Cartesian robot (joints = end-effector x, y, z in metres) with a gripper, at 1 kHz:
    /// link timeout 50 ms, command timeout 100 ms, the simulator's workspace and speed (0.3 m/s).
    pub fn cartesian_1khz() -> Self {
        let lo = [-0.52, -0.52, 0.022];
        let hi = [0.52, 0.52, 0.35];
        let mut pos_min = [0.0; MAX_JOINTS];
        let mut pos_max = [0.0; MAX_JOINTS];
        pos_min[..3].copy_from_slice(&lo);
        pos_max[..3].copy_from_slice(&hi);
        Self {
            n_joints: 3,
            capabilities: Capabilities(
                Capabilities::JOINT_POSITION | Capabilities::EE_VELOCITY | Capabilities::GRIPPER,
            ),
            control_hz: 1000,
            link_timeout_us: 50_000,
            command_timeout_us: 100_000,
            telemetry_every: 1,
            limits: FirmwareLimits {
                pos_min,
                pos_max,
                vel_max: [0.3; MAX_JOINTS],
                ee_speed_max: 0.3,
                ws_min: lo,
                ws_max: hi,
            },
        }
    }

    /// Control period in microseconds.
    pub fn period_us(&self) -> u64 {
        1_000_000 / u64::from(self.control_hz.max(1))
    }
}

/// What [`Firmware::handle`] did with a message.
#[derive(Debug, Clone, PartialEq)]
pub struct Handled {
    /// Reply to send back, if any.
    pub reply: Option<Message>,
    /// True when the message was a command that the firmware accepted (it will act on it).
    pub accepted: bool,
}

/// Running counters (for telemetry, tests and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    pub ticks: u64,
    pub accepted_commands: u64,
    pub stale_commands: u32,
    pub not_armed_commands: u32,
    pub bad_frames: u32,
    pub link_losses: u32,
    pub estops: u32,
    pub version_refusals: u32,
}

/// The firmware state machine. Feed it every decoded message ([`Firmware::handle`]) and every malformed frame
/// ([`Firmware::bad_frame`]); call [`Firmware::tick`] once per control period with the firmware clock.
#[derive(Debug, Clone)]
pub struct Firmware {
    cfg: FirmwareConfig,
    state: FirmwareState,
    session: u32,
    /// Highest command seq seen this session (0 = none).
    last_seq: u32,
    last_accepted_seq: u32,
    last_rx_us: u64,
    /// The command being followed and when it arrived.
    active: Option<(Command, u64)>,
    /// Joint targets after rate limiting (what the plant is driven toward).
    joint_goal: JointVec,
    gripper: f32,
    latched: u16,
    pending: u16,
    telemetry_seq: u32,
    /// Telemetry seq when the firmware last stopped (hold, e-stop, new session).
    stop_telemetry_seq: u32,
    now_us: u64,
    plant: PlantState,
    counters: Counters,
}

impl Firmware {
    pub fn new(cfg: FirmwareConfig) -> Self {
        Self {
            cfg,
            state: FirmwareState::Idle,
            session: 0,
            last_seq: 0,
            last_accepted_seq: 0,
            last_rx_us: 0,
            active: None,
            joint_goal: JointVec::new(),
            gripper: 0.0,
            latched: 0,
            pending: 0,
            telemetry_seq: 0,
            stop_telemetry_seq: 0,
            now_us: 0,
            plant: PlantState::default(),
            counters: Counters::default(),
        }
    }

    pub fn config(&self) -> &FirmwareConfig {
        &self.cfg
    }

    pub fn state(&self) -> FirmwareState {
        self.state
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Firmware time of the last valid frame of this session.
    pub fn last_rx_us(&self) -> u64 {
        self.last_rx_us
    }

    /// The last plant reading.
    pub fn plant_state(&self) -> &PlantState {
        &self.plant
    }

    /// The `Hello` this firmware answers with.
    pub fn hello(&self) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            role: Role::Firmware,
            session: self.session,
            capabilities: self.cfg.capabilities,
            n_joints: self.cfg.n_joints,
            control_hz: self.cfg.control_hz,
        }
    }

    /// Counts a frame that failed COBS, CRC or decoding. It is never acted on and does not feed the watchdog.
    pub fn bad_frame(&mut self) {
        self.counters.bad_frames = self.counters.bad_frames.saturating_add(1);
        self.pending |= Faults::BAD_FRAME;
    }

    fn ack(seq: u32, kind: MessageKind, status: AckStatus) -> Option<Message> {
        Some(Message::Ack(Ack { seq, kind, status }))
    }

    /// Handles one decoded message received at firmware time `now_us`.
    pub fn handle(&mut self, msg: &Message, now_us: u64) -> Handled {
        let mut accepted = false;
        let reply = match msg {
            Message::Hello(h) => {
                if h.version != PROTOCOL_VERSION {
                    // Refused; an open session (if any) is left as it was.
                    self.counters.version_refusals += 1;
                    Self::ack(
                        0,
                        MessageKind::Hello,
                        AckStatus::VersionMismatch {
                            ours: PROTOCOL_VERSION,
                        },
                    )
                } else if self.state != FirmwareState::Idle && h.session == self.session {
                    // A duplicate of the Hello that opened this session: answer again, change nothing.
                    self.last_rx_us = now_us;
                    Some(Message::Hello(self.hello()))
                } else {
                    // A new session: fresh sequence window, disarmed, faults cleared.
                    self.session = h.session;
                    self.stopped();
                    self.state = FirmwareState::Disarmed;
                    self.last_seq = 0;
                    self.last_accepted_seq = 0;
                    self.active = None;
                    self.latched = 0;
                    self.last_rx_us = now_us;
                    Some(Message::Hello(self.hello()))
                }
            }
            _ if self.state == FirmwareState::Idle => match msg {
                Message::Command(c) => Self::ack(c.seq, MessageKind::Command, AckStatus::NoSession),
                Message::Arm(a) => Self::ack(a.seq, MessageKind::Arm, AckStatus::NoSession),
                _ => None,
            },
            Message::Heartbeat(_) => {
                self.last_rx_us = now_us;
                None
            }
            Message::EStop(e) => {
                self.last_rx_us = now_us;
                self.estop();
                Self::ack(e.seq, MessageKind::EStop, AckStatus::Ok)
            }
            Message::Arm(a) => {
                self.last_rx_us = now_us;
                if a.seen_telemetry <= self.stop_telemetry_seq {
                    Self::ack(a.seq, MessageKind::Arm, AckStatus::StaleArm)
                } else {
                    if self.state != FirmwareState::Armed {
                        self.state = FirmwareState::Armed;
                        self.latched = 0;
                        // Motion resumes only with a command issued after the arm.
                        self.active = None;
                        self.joint_goal = self.plant.positions.clone();
                    }
                    self.last_seq = self.last_seq.max(a.command_floor);
                    Self::ack(a.seq, MessageKind::Arm, AckStatus::Ok)
                }
            }
            Message::Command(c) => {
                self.last_rx_us = now_us;
                if c.seq <= self.last_seq {
                    self.counters.stale_commands = self.counters.stale_commands.saturating_add(1);
                    self.pending |= Faults::STALE_COMMAND;
                    // Duplicates are common on a lossy link; a stale command is dropped silently.
                    None
                } else {
                    self.last_seq = c.seq;
                    if self.state != FirmwareState::Armed {
                        self.counters.not_armed_commands =
                            self.counters.not_armed_commands.saturating_add(1);
                        self.pending |= Faults::NOT_ARMED;
                        Self::ack(c.seq, MessageKind::Command, AckStatus::NotArmed)
                    } else if let Some(cmd) = self.validate(c) {
                        self.last_accepted_seq = c.seq;
                        self.counters.accepted_commands += 1;
                        self.active = Some((cmd, now_us));
                        accepted = true;
                        None
                    } else {
                        Self::ack(c.seq, MessageKind::Command, AckStatus::BadSetpoint)
                    }
                }
            }
            Message::Telemetry(_) | Message::Ack(_) => None,
        };
        Handled { reply, accepted }
    }

    /// Remembers the telemetry seq at a stop: only an arm from a host that saw later telemetry counts.
    fn stopped(&mut self) {
        self.stop_telemetry_seq = self.telemetry_seq;
    }

    fn estop(&mut self) {
        self.stopped();
        self.counters.estops += 1;
        self.state = FirmwareState::EStopped;
        self.latched |= Faults::ESTOP;
        self.active = None;
    }

    /// Checks a command against this firmware and clamps it to the limits; `None` when it cannot be followed.
    fn validate(&mut self, c: &Command) -> Option<Command> {
        let l = &self.cfg.limits;
        if !c.gripper.is_finite() {
            return None;
        }
        let mut out = c.clone();
        out.gripper = c.gripper.clamp(0.0, 1.0);
        let mut clamped = out.gripper != c.gripper;
        match &mut out.setpoint {
            Setpoint::Joints(q) => {
                if !self.cfg.capabilities.has(Capabilities::JOINT_POSITION)
                    || q.len() != usize::from(self.cfg.n_joints)
                    || q.iter().any(|v| !v.is_finite())
                {
                    return None;
                }
                for (i, v) in q.iter_mut().enumerate() {
                    let c = v.clamp(l.pos_min[i], l.pos_max[i]);
                    clamped |= c != *v;
                    *v = c;
                }
            }
            Setpoint::EeVelocity(v) => {
                if !self.cfg.capabilities.has(Capabilities::EE_VELOCITY)
                    || v.iter().any(|x| !x.is_finite())
                {
                    return None;
                }
                for x in v.iter_mut() {
                    let c = x.clamp(-l.ee_speed_max, l.ee_speed_max);
                    clamped |= c != *x;
                    *x = c;
                }
            }
        }
        if clamped {
            self.pending |= Faults::LIMIT;
        }
        Some(out)
    }

    /// Runs one control period at firmware time `now_us`: supervision, the drive for the plant, a plant read,
    /// and (every `telemetry_every` ticks) the telemetry to send.
    pub fn tick<P: Plant + ?Sized>(&mut self, now_us: u64, plant: &mut P) -> Option<Telemetry> {
        self.now_us = now_us;
        self.counters.ticks += 1;
        let dt = 1.0 / f32::from(self.cfg.control_hz.max(1));
        if matches!(self.state, FirmwareState::Armed | FirmwareState::Disarmed)
            && now_us.saturating_sub(self.last_rx_us) > self.cfg.link_timeout_us
        {
            self.state = FirmwareState::Hold;
            self.stopped();
            self.latched |= Faults::LINK_LOST;
            self.active = None;
            self.counters.link_losses += 1;
        }
        // Sense, decide, act, then sense again for the report.
        plant.read(&mut self.plant);
        let drive = self.drive(now_us, dt);
        plant.apply(&drive, self.gripper, dt);
        plant.read(&mut self.plant);
        if self.state == FirmwareState::Idle {
            return None;
        }
        let every = u64::from(self.cfg.telemetry_every.max(1));
        if !self.counters.ticks.is_multiple_of(every) {
            return None;
        }
        self.telemetry_seq = self.telemetry_seq.wrapping_add(1);
        let faults = Faults(self.latched | self.pending);
        self.pending = 0;
        Some(Telemetry {
            seq: self.telemetry_seq,
            time_us: now_us,
            state: self.state,
            last_command_seq: self.last_accepted_seq,
            positions: self.plant.positions.clone(),
            velocities: self.plant.velocities.clone(),
            efforts: self.plant.efforts.clone(),
            ee: self.plant.ee,
            gripper: self.plant.gripper,
            faults,
            bad_frames: self.counters.bad_frames,
            stale_commands: self.counters.stale_commands,
        })
    }

    fn drive(&mut self, now_us: u64, dt: f32) -> Drive {
        if self.state != FirmwareState::Armed {
            return Drive::Hold;
        }
        let Some((cmd, at)) = &self.active else {
            return Drive::Hold;
        };
        let fresh = now_us.saturating_sub(*at) <= self.cfg.command_timeout_us;
        self.gripper = cmd.gripper;
        let l = &self.cfg.limits;
        match &cmd.setpoint {
            Setpoint::Joints(target) => {
                // Rate-limit the goal toward the target; an old command keeps its goal (position hold).
                if fresh {
                    if self.joint_goal.len() != target.len() {
                        self.joint_goal = self.plant.positions.clone();
                    }
                    if self.joint_goal.len() != target.len() {
                        return Drive::Hold;
                    }
                    for (i, (g, t)) in self.joint_goal.iter_mut().zip(target.iter()).enumerate() {
                        let step = l.vel_max[i] * dt;
                        *g += (t - *g).clamp(-step, step);
                    }
                }
                Drive::Joints(self.joint_goal.clone())
            }
            Setpoint::EeVelocity(v) => {
                if !fresh {
                    return Drive::EeVelocity([0.0; 3]);
                }
                let mut v = *v;
                for (i, x) in v.iter_mut().enumerate() {
                    let p = self.plant.ee[i];
                    if (p <= l.ws_min[i] && *x < 0.0) || (p >= l.ws_max[i] && *x > 0.0) {
                        *x = 0.0;
                    }
                }
                Drive::EeVelocity(v)
            }
        }
    }
}

/// A frictionless kinematic plant (an ideal 3-axis Cartesian stage with a gripper): joints are the end-effector
/// x, y, z. Exact and cheap, for tests, fault injection and benchmarks; the emulator's default plant is the
/// simulator.
#[derive(Debug, Clone, PartialEq)]
pub struct KinematicPlant {
    pub pos: [f32; 3],
    pub vel: [f32; 3],
    pub gripper: f32,
    /// Gripper speed, fraction of full opening per second.
    pub gripper_rate: f32,
}

impl KinematicPlant {
    pub fn new(pos: [f32; 3]) -> Self {
        Self {
            pos,
            vel: [0.0; 3],
            gripper: 1.0,
            gripper_rate: 2.0,
        }
    }
}

impl Plant for KinematicPlant {
    fn apply(&mut self, drive: &Drive, gripper: f32, dt: f32) {
        let before = self.pos;
        match drive {
            Drive::Hold => {}
            Drive::Joints(q) => {
                for (p, t) in self.pos.iter_mut().zip(q.iter()) {
                    *p = *t;
                }
            }
            Drive::EeVelocity(v) => {
                for (p, v) in self.pos.iter_mut().zip(v.iter()) {
                    *p += v * dt;
                }
            }
        }
        for ((v, p), b) in self.vel.iter_mut().zip(self.pos).zip(before) {
            *v = (p - b) / dt;
        }
        if !matches!(drive, Drive::Hold) {
            let step = self.gripper_rate * dt;
            self.gripper += (gripper - self.gripper).clamp(-step, step);
        }
    }

    fn read(&mut self, out: &mut PlantState) {
        out.positions.clear();
        out.velocities.clear();
        out.efforts.clear();
        for i in 0..3 {
            // Capacity is MAX_JOINTS >= 3: pushes cannot fail.
            let _ = out.positions.push(self.pos[i]);
            let _ = out.velocities.push(self.vel[i]);
            let _ = out.efforts.push(0.0);
        }
        out.ee = self.pos;
        out.gripper = self.gripper;
    }
}
