//! The firmware control loop: authenticated sessions, message handling, supervision, limits, one
//! [`Firmware::tick`] per control period.

use stagewise_protocol::{
    Ack, AckStatus, Capabilities, Command, Direction, Faults, FirmwareState, Frame, FrameError,
    Hello, JointVec, LinkKey, Message, MessageKind, ReplayWindow, Role, Sender, Setpoint,
    StopReason, Telemetry, MAX_JOINTS, PROTOCOL_VERSION,
};

/// What the firmware asks of the plant for one control period.
#[derive(Debug, Clone, PartialEq)]
pub enum Drive {
    /// Brake: hold the current position, zero velocity.
    Hold,
    /// Move each joint toward this position (already rate- and acceleration-limited for this period).
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

impl PlantState {
    /// True when every reading is a finite number (a NaN or infinite sensor value is refused).
    pub fn is_finite(&self) -> bool {
        self.positions
            .iter()
            .chain(self.velocities.iter())
            .chain(self.efforts.iter())
            .chain(self.ee.iter())
            .all(|v| v.is_finite())
            && self.gripper.is_finite()
    }
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
    /// Joint speed limit (units per second).
    pub vel_max: [f32; MAX_JOINTS],
    /// Joint acceleration limit (units per second squared): joint targets are approached on a trapezoidal
    /// profile (accelerate, cruise at `vel_max`, brake to stop at the target).
    pub acc_max: [f32; MAX_JOINTS],
    /// End-effector (tool tip) speed limit in m/s, on the norm of the velocity vector.
    pub ee_speed_max: f32,
    /// End-effector acceleration limit in m/s^2: the commanded velocity changes by at most `ee_acc_max * dt`
    /// (vector norm) per control period. Braking to a stop (hold, e-stop, stale command) is not limited.
    pub ee_acc_max: f32,
    /// End-effector workspace box; velocity components that push out of it are zeroed.
    pub ws_min: [f32; 3],
    pub ws_max: [f32; 3],
    /// The first three joints are the end effector's x, y, z (a Cartesian robot): their joint-target motion is
    /// limited to `ee_speed_max` as a vector too.
    pub cartesian_joints: bool,
}

/// Firmware configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct FirmwareConfig {
    pub n_joints: u8,
    pub capabilities: Capabilities,
    pub control_hz: u16,
    /// No authentic frame of the session for this long -> `Hold`.
    pub link_timeout_us: u64,
    /// An armed command older than this stops motion.
    pub command_timeout_us: u64,
    /// Armed, and the actor's step counter (heartbeat `actor_step`, accepted commands) did not advance for this
    /// long -> `Hold` (`ACTOR_STALLED`): a stalled actor stops the robot even while its heartbeat task runs.
    pub stall_timeout_us: u64,
    /// Telemetry every this many ticks (1 = every control period).
    pub telemetry_every: u32,
    pub limits: FirmwareLimits,
}

impl FirmwareConfig {
    /// A 3-axis Cartesian robot (joints = end-effector x, y, z in metres) with a gripper, at 1 kHz:
    /// link timeout 50 ms, command timeout 100 ms, stall timeout 500 ms, the simulator's workspace and speed
    /// (0.3 m/s, as a vector), 10 m/s^2 (the host limits to 3 m/s^2; the firmware is the backstop).
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
            stall_timeout_us: 500_000,
            telemetry_every: 1,
            limits: FirmwareLimits {
                pos_min,
                pos_max,
                vel_max: [0.3; MAX_JOINTS],
                acc_max: [10.0; MAX_JOINTS],
                ee_speed_max: 0.3,
                ee_acc_max: 10.0,
                ws_min: lo,
                ws_max: hi,
                cartesian_joints: true,
            },
        }
    }

    /// Control period in microseconds.
    pub fn period_us(&self) -> u64 {
        1_000_000 / u64::from(self.control_hz.max(1))
    }
}

/// A message to send back, with the session its frame belongs to (0 = a handshake frame).
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub session: u32,
    pub message: Message,
}

/// What [`Firmware::receive`] did with a frame.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Handled {
    /// Reply to send back (to the frame's sender), if any.
    pub reply: Option<Outgoing>,
    /// True when the frame was a command that the firmware accepted (it will act on it).
    pub accepted: bool,
    /// True when the frame opened a new session: its sender is the session's peer from now on.
    pub opened: bool,
}

/// Running counters (for telemetry, tests and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    pub ticks: u64,
    /// Authentic frames of the session taken in (each frame counter at most once), and frames sent.
    pub frames: u64,
    pub frames_sent: u64,
    pub accepted_commands: u64,
    pub stale_commands: u32,
    pub not_armed_commands: u32,
    /// Frames that failed COBS, CRC or decoding (noise).
    pub bad_frames: u32,
    /// Intact frames whose MAC did not verify (another key, a forgery).
    pub auth_failures: u32,
    /// Authentic frames of the session with a counter seen before or too old (replays, duplicates).
    pub replays: u32,
    /// Authentic frames of a session that is not ours (an old session replayed, a host whose session ended).
    pub foreign_sessions: u32,
    /// Hellos and offered sessions refused because another session was armed.
    pub takeovers_refused: u32,
    pub sessions: u32,
    pub link_losses: u32,
    pub actor_stalls: u32,
    pub sensor_faults: u32,
    pub estops: u32,
    pub estop_resets: u32,
    pub protective_stops: u32,
    pub local_disarms: u32,
    pub version_refusals: u32,
}

impl Counters {
    /// Intact frames refused by authentication of any kind (reported in telemetry as `rejected_frames`).
    pub fn rejected(&self) -> u32 {
        self.auth_failures
            .saturating_add(self.replays)
            .saturating_add(self.foreign_sessions)
            .saturating_add(self.takeovers_refused)
    }
}

/// The firmware state machine. Feed it every frame result of its [`stagewise_protocol::FrameDecoder`]
/// ([`Firmware::receive`]); call [`Firmware::tick`] once per control period with the firmware clock; encode
/// what it sends with [`Firmware::seal`] / [`Firmware::seal_telemetry`] (its key, its frame counter).
///
/// Sessions: a host `Hello` (handshake frame) is answered with a session id drawn from the boot entropy; the
/// session starts with the first authentic frame of it, and only while the firmware is not armed (an armed
/// session cannot be taken over). From then on only frames of that session with a fresh counter are acted on.
#[derive(Debug, Clone)]
pub struct Firmware {
    cfg: FirmwareConfig,
    tx: Sender,
    entropy: [u8; 16],
    draws: u64,
    state: FirmwareState,
    session: u32,
    session_nonce: u32,
    /// An offered session: (host nonce, session id).
    offered: Option<(u32, u32)>,
    window: ReplayWindow,
    /// Highest command seq seen this session (0 = none).
    last_seq: u32,
    last_accepted_seq: u32,
    last_rx_us: u64,
    /// When the actor's step counter last advanced.
    last_progress_us: u64,
    actor_step: u32,
    /// The command being followed and when it arrived.
    active: Option<(Command, u64)>,
    /// Joint targets after rate limiting (what the plant is driven toward) and their velocity.
    joint_goal: JointVec,
    joint_vel: [f32; MAX_JOINTS],
    /// The end-effector velocity commanded last period (for the acceleration limit).
    ee_vel: [f32; 3],
    driving: bool,
    gripper: f32,
    latched: u16,
    fresh_faults: u16,
    estop_latched: bool,
    sensor_fault: bool,
    telemetry_seq: u32,
    /// Telemetry seq when the firmware last stopped (hold, e-stop, new session, reset).
    stop_telemetry_seq: u32,
    now_us: u64,
    plant: PlantState,
    counters: Counters,
}

fn norm(v: &[f32]) -> f32 {
    libm::sqrtf(v.iter().map(|x| x * x).sum::<f32>())
}

impl Firmware {
    /// A firmware with its link key and 16 bytes of boot entropy (a hardware RNG; it must differ between boots,
    /// or session ids repeat and frames recorded in an earlier boot's session could be replayed).
    pub fn new(cfg: FirmwareConfig, key: LinkKey, entropy: [u8; 16]) -> Self {
        Self {
            cfg,
            tx: Sender::new(key, Direction::FirmwareToHost),
            entropy,
            draws: 0,
            state: FirmwareState::Idle,
            session: 0,
            session_nonce: 0,
            offered: None,
            window: ReplayWindow::new(),
            last_seq: 0,
            last_accepted_seq: 0,
            last_rx_us: 0,
            last_progress_us: 0,
            actor_step: 0,
            active: None,
            joint_goal: JointVec::new(),
            joint_vel: [0.0; MAX_JOINTS],
            ee_vel: [0.0; 3],
            driving: false,
            gripper: 0.0,
            latched: 0,
            fresh_faults: 0,
            estop_latched: false,
            sensor_fault: false,
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

    /// The current session id (0 = none).
    pub fn session(&self) -> u32 {
        if self.state == FirmwareState::Idle {
            0
        } else {
            self.session
        }
    }

    /// True while an operator e-stop is latched (until [`stagewise_protocol::ResetEStop`]).
    pub fn estop_latched(&self) -> bool {
        self.estop_latched
    }

    /// True when the last tick drove the plant (a motion drive, not a brake).
    pub fn driving(&self) -> bool {
        self.driving
    }

    /// Firmware time of the last authentic frame of this session.
    pub fn last_rx_us(&self) -> u64 {
        self.last_rx_us
    }

    /// Firmware time the actor's step counter last advanced (or the session opened, or it was armed).
    pub fn last_progress_us(&self) -> u64 {
        self.last_progress_us
    }

    /// The last plant reading.
    pub fn plant_state(&self) -> &PlantState {
        &self.plant
    }

    /// The `Hello` this firmware answers a host nonce with, offering `session`.
    pub fn hello(&self, nonce: u32, session: u32) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            role: Role::Firmware,
            nonce,
            session,
            capabilities: self.cfg.capabilities,
            n_joints: self.cfg.n_joints,
            control_hz: self.cfg.control_hz,
        }
    }

    /// Encodes `out` as an authenticated frame into `buf` (the firmware's key and frame counter).
    pub fn seal(&mut self, out: &Outgoing, buf: &mut [u8]) -> Result<usize, FrameError> {
        let n = self.tx.seal(out.session, &out.message, buf)?;
        self.counters.frames_sent += 1;
        Ok(n)
    }

    /// Encodes telemetry for the current session into `buf`.
    pub fn seal_telemetry(&mut self, t: Telemetry, buf: &mut [u8]) -> Result<usize, FrameError> {
        let session = self.session;
        let n = self.tx.seal(session, &Message::Telemetry(t), buf)?;
        self.counters.frames_sent += 1;
        Ok(n)
    }

    /// Counts a frame that failed COBS, CRC or decoding. It is never acted on and does not feed the watchdog.
    pub fn bad_frame(&mut self) {
        self.counters.bad_frames = self.counters.bad_frames.saturating_add(1);
        self.fresh_faults |= Faults::BAD_FRAME;
    }

    /// Counts an intact frame whose MAC did not verify. Never acted on; does not feed the watchdog.
    pub fn auth_failure(&mut self) {
        self.counters.auth_failures = self.counters.auth_failures.saturating_add(1);
        self.fresh_faults |= Faults::AUTH;
    }

    /// A local disarm (an enable switch, a drive fault): `Armed`/`Hold` -> `Disarmed`. The host notices it in
    /// telemetry. A latched e-stop stays.
    pub fn local_disarm(&mut self) {
        if matches!(self.state, FirmwareState::Armed | FirmwareState::Hold) {
            self.stopped();
            self.state = FirmwareState::Disarmed;
            self.active = None;
            self.counters.local_disarms += 1;
        }
    }

    fn ack(seq: u32, kind: MessageKind, status: AckStatus) -> Option<Outgoing> {
        Self::reply(0, Message::Ack(Ack { seq, kind, status }))
    }

    fn reply(session: u32, message: Message) -> Option<Outgoing> {
        Some(Outgoing { session, message })
    }

    /// Handles one result of the frame decoder at firmware time `now_us`: errors are counted (noise or failed
    /// authentication), authentic frames go to the session logic.
    pub fn receive(&mut self, frame: Result<Frame, FrameError>, now_us: u64) -> Handled {
        match frame {
            Ok(f) => self.handle_frame(&f, now_us),
            Err(e) if e.is_auth() => {
                self.auth_failure();
                Handled::default()
            }
            Err(_) => {
                self.bad_frame();
                Handled::default()
            }
        }
    }

    /// Handles one authentic frame received at firmware time `now_us`.
    pub fn handle_frame(&mut self, f: &Frame, now_us: u64) -> Handled {
        let s = f.header.session;
        if s == 0 {
            return self.handshake(&f.message);
        }
        if self.state != FirmwareState::Idle && s == self.session {
            if !self.window.accept(f.header.counter) {
                self.counters.replays = self.counters.replays.saturating_add(1);
                self.fresh_faults |= Faults::AUTH;
                return Handled::default();
            }
            self.counters.frames += 1;
            return self.handle(&f.message, now_us);
        }
        if let Some((nonce, offered)) = self.offered {
            if s == offered {
                if self.state == FirmwareState::Armed {
                    self.counters.takeovers_refused =
                        self.counters.takeovers_refused.saturating_add(1);
                    self.fresh_faults |= Faults::AUTH;
                    return Handled {
                        reply: Self::ack(s, f.message.kind(), AckStatus::SessionBusy),
                        ..Handled::default()
                    };
                }
                self.open_session(nonce, offered, now_us);
                self.window.accept(f.header.counter);
                self.counters.frames += 1;
                let mut h = self.handle(&f.message, now_us);
                h.opened = true;
                return h;
            }
        }
        // Not our session: an old session replayed, or a host whose session this firmware no longer has (a
        // reboot, another host's session after a stop). Tell it, as a handshake frame.
        self.counters.foreign_sessions = self.counters.foreign_sessions.saturating_add(1);
        self.fresh_faults |= Faults::AUTH;
        Handled {
            reply: Self::ack(s, f.message.kind(), AckStatus::NoSession),
            ..Handled::default()
        }
    }

    fn handshake(&mut self, msg: &Message) -> Handled {
        let Message::Hello(h) = msg else {
            // Only a Hello travels outside a session.
            self.counters.foreign_sessions = self.counters.foreign_sessions.saturating_add(1);
            self.fresh_faults |= Faults::AUTH;
            return Handled::default();
        };
        if h.role != Role::Host {
            return Handled::default();
        }
        let reply = if h.version != PROTOCOL_VERSION {
            self.counters.version_refusals += 1;
            Self::ack(
                h.nonce,
                MessageKind::Hello,
                AckStatus::VersionMismatch {
                    ours: PROTOCOL_VERSION,
                },
            )
        } else if self.state != FirmwareState::Idle && h.nonce == self.session_nonce {
            // A retry of the Hello that opened this session: answer again, change nothing.
            Self::reply(0, Message::Hello(self.hello(h.nonce, self.session)))
        } else if self.state == FirmwareState::Armed {
            // An armed session belongs to its host.
            self.counters.takeovers_refused = self.counters.takeovers_refused.saturating_add(1);
            self.fresh_faults |= Faults::AUTH;
            Self::ack(h.nonce, MessageKind::Hello, AckStatus::SessionBusy)
        } else {
            let session = match self.offered {
                Some((n, s)) if n == h.nonce => s,
                _ => self.draw_session(),
            };
            self.offered = Some((h.nonce, session));
            Self::reply(0, Message::Hello(self.hello(h.nonce, session)))
        };
        Handled {
            reply,
            ..Handled::default()
        }
    }

    /// A fresh session id: a keyed PRF of the boot entropy and a draw counter (never 0, never the current one).
    fn draw_session(&mut self) -> u32 {
        loop {
            self.draws += 1;
            let mut input = [0u8; 24];
            input[..16].copy_from_slice(&self.entropy);
            input[16..].copy_from_slice(&self.draws.to_le_bytes());
            let r = self.tx.key().prf(b"stagewise-bridge-v2 session", &input);
            let s = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
            if s != 0 && s != self.session {
                return s;
            }
        }
    }

    fn open_session(&mut self, nonce: u32, session: u32, now_us: u64) {
        self.session = session;
        self.session_nonce = nonce;
        self.offered = None;
        self.window = ReplayWindow::new();
        self.stopped();
        // A new session never clears a latched e-stop.
        self.state = if self.estop_latched {
            FirmwareState::EStopped
        } else {
            FirmwareState::Disarmed
        };
        self.last_seq = 0;
        self.last_accepted_seq = 0;
        self.active = None;
        self.latched = if self.estop_latched { Faults::ESTOP } else { 0 }
            | if self.sensor_fault { Faults::SENSOR } else { 0 };
        self.last_rx_us = now_us;
        self.last_progress_us = now_us;
        self.actor_step = 0;
        self.counters.sessions += 1;
    }

    /// Handles one message of the current session (already authenticated and fresh).
    fn handle(&mut self, msg: &Message, now_us: u64) -> Handled {
        let mut accepted = false;
        let reply = match msg {
            Message::Heartbeat(h) => {
                self.last_rx_us = now_us;
                if h.actor_step != self.actor_step {
                    self.actor_step = h.actor_step;
                    self.last_progress_us = now_us;
                }
                None
            }
            Message::EStop(e) => {
                self.last_rx_us = now_us;
                match e.reason {
                    StopReason::Operator => self.estop(),
                    StopReason::HostWatchdog | StopReason::Shutdown => {
                        if matches!(self.state, FirmwareState::Armed | FirmwareState::Disarmed) {
                            self.hold(Faults::HOST_STOP);
                            self.counters.protective_stops += 1;
                        }
                    }
                }
                Self::reply(
                    self.session,
                    Message::Ack(Ack {
                        seq: e.seq,
                        kind: MessageKind::EStop,
                        status: AckStatus::Ok,
                    }),
                )
            }
            Message::ResetEStop(r) => {
                self.last_rx_us = now_us;
                let status = if !self.estop_latched {
                    AckStatus::Ok
                } else if r.seen_telemetry <= self.stop_telemetry_seq {
                    AckStatus::StaleArm
                } else {
                    self.estop_latched = false;
                    self.latched &= !Faults::ESTOP;
                    self.stopped();
                    self.state = FirmwareState::Disarmed;
                    self.active = None;
                    self.last_progress_us = now_us;
                    self.counters.estop_resets += 1;
                    AckStatus::Ok
                };
                self.session_ack(r.seq, MessageKind::ResetEStop, status)
            }
            Message::Arm(a) => {
                self.last_rx_us = now_us;
                let status = if self.estop_latched {
                    AckStatus::EStopLatched
                } else if !self.plant.is_finite() {
                    AckStatus::SensorFault
                } else if a.seen_telemetry <= self.stop_telemetry_seq {
                    AckStatus::StaleArm
                } else {
                    if self.state != FirmwareState::Armed {
                        self.state = FirmwareState::Armed;
                        self.latched = 0;
                        self.sensor_fault = false;
                        // Motion resumes only with a command issued after the arm, from rest.
                        self.active = None;
                        self.joint_goal = self.plant.positions.clone();
                        self.joint_vel = [0.0; MAX_JOINTS];
                        self.ee_vel = [0.0; 3];
                    }
                    self.last_progress_us = now_us;
                    self.last_seq = self.last_seq.max(a.command_floor);
                    AckStatus::Ok
                };
                self.session_ack(a.seq, MessageKind::Arm, status)
            }
            Message::Command(c) => {
                self.last_rx_us = now_us;
                if c.seq <= self.last_seq {
                    self.counters.stale_commands = self.counters.stale_commands.saturating_add(1);
                    self.fresh_faults |= Faults::STALE_COMMAND;
                    // Duplicates are common on a lossy link; a stale command is dropped silently.
                    None
                } else {
                    self.last_seq = c.seq;
                    if self.state != FirmwareState::Armed {
                        self.counters.not_armed_commands =
                            self.counters.not_armed_commands.saturating_add(1);
                        self.fresh_faults |= Faults::NOT_ARMED;
                        self.session_ack(c.seq, MessageKind::Command, AckStatus::NotArmed)
                    } else if let Some(cmd) = self.validate(c) {
                        self.last_accepted_seq = c.seq;
                        self.last_progress_us = now_us;
                        self.counters.accepted_commands += 1;
                        self.active = Some((cmd, now_us));
                        accepted = true;
                        None
                    } else {
                        self.session_ack(c.seq, MessageKind::Command, AckStatus::BadSetpoint)
                    }
                }
            }
            // A Hello inside a session, or what only the firmware sends: nothing to do.
            Message::Hello(_) | Message::Telemetry(_) | Message::Ack(_) => None,
        };
        Handled {
            reply,
            accepted,
            opened: false,
        }
    }

    fn session_ack(&self, seq: u32, kind: MessageKind, status: AckStatus) -> Option<Outgoing> {
        Self::reply(self.session, Message::Ack(Ack { seq, kind, status }))
    }

    /// Remembers the telemetry seq at a stop: only an arm from a host that saw later telemetry counts.
    fn stopped(&mut self) {
        self.stop_telemetry_seq = self.telemetry_seq;
    }

    /// A protective stop with `fault` latched (a latched e-stop stays `EStopped`).
    fn hold(&mut self, fault: u16) {
        self.stopped();
        if self.state != FirmwareState::EStopped {
            self.state = FirmwareState::Hold;
        }
        self.latched |= fault;
        self.active = None;
    }

    fn estop(&mut self) {
        self.stopped();
        self.counters.estops += 1;
        self.state = FirmwareState::EStopped;
        self.estop_latched = true;
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
                // The tool tip's speed, not each axis: scale the vector, keep its direction.
                let n = norm(v);
                if n > l.ee_speed_max {
                    let k = l.ee_speed_max / n;
                    for x in v.iter_mut() {
                        *x *= k;
                    }
                    clamped = true;
                }
            }
        }
        if clamped {
            self.fresh_faults |= Faults::LIMIT;
        }
        Some(out)
    }

    fn check_sensors(&mut self) {
        if self.plant.is_finite() {
            return;
        }
        if !self.sensor_fault {
            self.counters.sensor_faults += 1;
        }
        self.sensor_fault = true;
        if matches!(self.state, FirmwareState::Armed | FirmwareState::Disarmed) {
            self.hold(Faults::SENSOR);
        } else {
            self.latched |= Faults::SENSOR;
        }
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
            self.hold(Faults::LINK_LOST);
            self.counters.link_losses += 1;
        }
        if self.state == FirmwareState::Armed
            && now_us.saturating_sub(self.last_progress_us) > self.cfg.stall_timeout_us
        {
            self.hold(Faults::ACTOR_STALLED);
            self.counters.actor_stalls += 1;
        }
        // Sense, decide, act, then sense again for the report.
        plant.read(&mut self.plant);
        self.check_sensors();
        let drive = self.drive(now_us, dt);
        plant.apply(&drive, self.gripper, dt);
        plant.read(&mut self.plant);
        self.check_sensors();
        if self.state == FirmwareState::Idle {
            return None;
        }
        let every = u64::from(self.cfg.telemetry_every.max(1));
        if !self.counters.ticks.is_multiple_of(every) {
            return None;
        }
        self.telemetry_seq = self.telemetry_seq.wrapping_add(1);
        let faults = Faults(self.latched | self.fresh_faults);
        self.fresh_faults = 0;
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
            rejected_frames: self.counters.rejected(),
        })
    }

    fn drive(&mut self, now_us: u64, dt: f32) -> Drive {
        let d = self.motion(now_us, dt);
        self.driving = !matches!(d, Drive::Hold);
        if !self.driving {
            // A brake stops at once; motion afterwards starts from rest.
            self.ee_vel = [0.0; 3];
            self.joint_vel = [0.0; MAX_JOINTS];
        }
        d
    }

    fn motion(&mut self, now_us: u64, dt: f32) -> Drive {
        if self.state != FirmwareState::Armed {
            return Drive::Hold;
        }
        let Some((cmd, at)) = &self.active else {
            return Drive::Hold;
        };
        if now_us.saturating_sub(*at) > self.cfg.command_timeout_us {
            // An old command: stop (and keep the gripper where it is).
            return Drive::Hold;
        }
        self.gripper = cmd.gripper;
        let l = &self.cfg.limits;
        match &cmd.setpoint {
            Setpoint::Joints(target) => {
                if self.joint_goal.len() != target.len() {
                    self.joint_goal = self.plant.positions.clone();
                    self.joint_vel = [0.0; MAX_JOINTS];
                }
                if self.joint_goal.len() != target.len() {
                    return Drive::Hold;
                }
                // A trapezoidal profile per joint: at most vel_max, at most acc_max, and slow enough to stop at
                // the target.
                let mut step = [0.0f32; MAX_JOINTS];
                for (i, (g, t)) in self.joint_goal.iter().zip(target.iter()).enumerate() {
                    let d = t - g;
                    // The fastest speed from which braking at acc_max, one period at a time, still stops
                    // within |d|: v (v + a dt) / (2 a) = |d|.
                    let adt = l.acc_max[i] * dt;
                    let reach = 0.5 * (libm::sqrtf(adt * adt + 8.0 * l.acc_max[i] * d.abs()) - adt);
                    let v_des = d.signum() * l.vel_max[i].min(reach).min(d.abs() / dt);
                    let prev = self.joint_vel[i];
                    let dv = l.acc_max[i] * dt;
                    step[i] = v_des.clamp(prev - dv, prev + dv) * dt;
                }
                let n = target.len();
                if l.cartesian_joints && n >= 3 {
                    let s = norm(&step[..3]);
                    let max = l.ee_speed_max * dt;
                    if s > max {
                        for x in &mut step[..3] {
                            *x *= max / s;
                        }
                    }
                }
                for (i, (g, t)) in self.joint_goal.iter_mut().zip(target.iter()).enumerate() {
                    let before = t - *g;
                    *g += step[i];
                    if (t - *g) * before < 0.0 {
                        // Would overshoot: stop at the target.
                        *g = *t;
                        step[i] = before;
                    }
                    self.joint_vel[i] = step[i] / dt;
                }
                Drive::Joints(self.joint_goal.clone())
            }
            Setpoint::EeVelocity(v) => {
                let mut v = *v;
                // The change of the commanded velocity per period, as a vector, at most ee_acc_max * dt.
                let dv = [
                    v[0] - self.ee_vel[0],
                    v[1] - self.ee_vel[1],
                    v[2] - self.ee_vel[2],
                ];
                let n = norm(&dv);
                let max = l.ee_acc_max * dt;
                if n > max {
                    for i in 0..3 {
                        v[i] = self.ee_vel[i] + dv[i] * (max / n);
                    }
                    self.fresh_faults |= Faults::LIMIT;
                }
                for (i, x) in v.iter_mut().enumerate() {
                    let p = self.plant.ee[i];
                    if (p <= l.ws_min[i] && *x < 0.0) || (p >= l.ws_max[i] && *x > 0.0) {
                        *x = 0.0;
                    }
                }
                self.ee_vel = v;
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
