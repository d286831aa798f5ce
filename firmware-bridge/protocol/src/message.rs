//! The messages. Field order is the wire order (postcard encodes structs as their fields in order, integers as
//! varints, `f32` as 4 little-endian bytes, enums as a varint discriminant). Changing any of it means a new
//! [`crate::PROTOCOL_VERSION`], and an update of the `MAX_*` sizes below (the size budget in frame.rs is checked
//! against [`MAX_MESSAGE`] at compile time; `tests/frames.rs` checks that the largest message of every kind
//! encodes to exactly its computed maximum).

use crate::MAX_JOINTS;
use heapless::Vec;
use serde::{Deserialize, Serialize};

/// Up to [`MAX_JOINTS`] joint values.
pub type JointVec = Vec<f32, MAX_JOINTS>;

/// Feature bits a peer announces in its [`Hello`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Capabilities(pub u32);

impl Capabilities {
    /// Accepts joint position targets.
    pub const JOINT_POSITION: u32 = 1 << 0;
    /// Accepts end-effector (Cartesian) velocity commands.
    pub const EE_VELOCITY: u32 = 1 << 1;
    /// Has a gripper.
    pub const GRIPPER: u32 = 1 << 2;
    /// Reports joint efforts.
    pub const EFFORT: u32 = 1 << 3;

    pub const fn has(self, bit: u32) -> bool {
        self.0 & bit == bit
    }
}

/// Who sent a [`Hello`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Host,
    Firmware,
}

/// Opens a session (a handshake frame: header session 0). The host sends one with a fresh `nonce`; the
/// firmware answers with its own, echoing the nonce and naming the `session` it offers (or with an [`Ack`]
/// whose `seq` is the nonce: [`AckStatus::VersionMismatch`], or [`AckStatus::SessionBusy`] while another session
/// is armed). The offered session starts when the first authenticated frame of it arrives, and only if the
/// firmware is not armed; the host's retries (same nonce) are answered with the same session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u16,
    pub role: Role,
    /// Host: a fresh random value per connection; firmware: the nonce of the host `Hello` it answers.
    pub nonce: u32,
    /// Firmware: the session id it offers (frames of the session carry it in their header); host: 0.
    pub session: u32,
    pub capabilities: Capabilities,
    /// Number of joints (firmware) or expected joints (host, 0 = any).
    pub n_joints: u8,
    /// Firmware control rate in Hz (host: 0).
    pub control_hz: u16,
}

/// What a [`Command`] asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Setpoint {
    /// Joint position targets (radians or metres), one per joint.
    Joints(JointVec),
    /// End-effector linear velocity in m/s (x, y, z).
    EeVelocity([f32; 3]),
}

/// A motion command. `seq` must grow: the firmware ignores a command whose `seq` is not greater than the last
/// one it accepted (stale or duplicate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    pub seq: u32,
    /// Host time in microseconds when the command was made.
    pub time_us: u64,
    pub setpoint: Setpoint,
    /// Gripper opening target in [0, 1] (0 = closed).
    pub gripper: f32,
}

/// The firmware's supervisory state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FirmwareState {
    /// No session yet (no valid `Hello`).
    Idle,
    /// Session open, motion not allowed until an [`Arm`].
    Disarmed,
    /// Following commands.
    Armed,
    /// A protective stop: link lost (no authentic frame of the session within the link timeout), the actor's
    /// step counter stalled, a sensor value not finite, or the host asked for it (watchdog, shutdown). Holding
    /// position, brakes on. Needs a fresh [`Arm`].
    Hold,
    /// Latched emergency stop: only an operator's [`ResetEStop`] clears it (not an [`Arm`], not a new session).
    EStopped,
}

/// Fault bits carried in [`Telemetry::faults`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Faults(pub u16);

impl Faults {
    /// The link watchdog fired (no valid frame in time).
    pub const LINK_LOST: u16 = 1 << 0;
    /// An emergency stop was received; latched until [`ResetEStop`].
    pub const ESTOP: u16 = 1 << 1;
    /// A command was outside the firmware's own limits and was clamped.
    pub const LIMIT: u16 = 1 << 2;
    /// A malformed frame (COBS, CRC or decode error) was received since the last telemetry.
    pub const BAD_FRAME: u16 = 1 << 3;
    /// A stale or duplicate command was ignored since the last telemetry.
    pub const STALE_COMMAND: u16 = 1 << 4;
    /// A command arrived while not armed and was ignored.
    pub const NOT_ARMED: u16 = 1 << 5;
    /// The actor's step counter (heartbeats, commands) stopped advancing while armed: the firmware holds.
    pub const ACTOR_STALLED: u16 = 1 << 6;
    /// A sensor value (position, velocity, effort, end effector, gripper) was not finite: the firmware holds and
    /// refuses to arm until the readings are finite again.
    pub const SENSOR: u16 = 1 << 7;
    /// A frame failed authentication (MAC, replayed counter, another session) since the last telemetry.
    pub const AUTH: u16 = 1 << 8;
    /// The host asked for a protective stop (its telemetry watchdog, or shutdown).
    pub const HOST_STOP: u16 = 1 << 9;

    /// Names of the bits set, for logs and errors.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        const NAMES: [&str; 10] = [
            "LINK_LOST",
            "ESTOP",
            "LIMIT",
            "BAD_FRAME",
            "STALE_COMMAND",
            "NOT_ARMED",
            "ACTOR_STALLED",
            "SENSOR",
            "AUTH",
            "HOST_STOP",
        ];
        NAMES
            .into_iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, n)| n)
    }

    pub const fn has(self, bit: u16) -> bool {
        self.0 & bit == bit
    }
}

/// The firmware's report, sent every control period (or a divisor of it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Telemetry {
    pub seq: u32,
    /// Firmware time in microseconds since boot.
    pub time_us: u64,
    pub state: FirmwareState,
    /// `seq` of the last command the firmware accepted (0 = none this session).
    pub last_command_seq: u32,
    pub positions: JointVec,
    pub velocities: JointVec,
    pub efforts: JointVec,
    /// End-effector position in metres (base frame).
    pub ee: [f32; 3],
    /// Gripper opening in [0, 1].
    pub gripper: f32,
    pub faults: Faults,
    /// Running count of malformed frames the firmware dropped.
    pub bad_frames: u32,
    /// Running count of stale or duplicate commands the firmware ignored.
    pub stale_commands: u32,
    /// Running count of intact frames refused by authentication: bad MAC, replayed or too old counter, another
    /// session, a refused takeover.
    pub rejected_frames: u32,
}

/// Keeps the link alive when no commands flow, and carries the actor's step counter: the firmware holds when it
/// stops advancing while armed (a stalled actor stops the robot even though its heartbeat task lives on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub seq: u32,
    pub time_us: u64,
    /// Steps (commands) the actor has made so far this session.
    pub actor_step: u32,
}

/// Why a stop was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// An operator or program called e-stop: latched ([`FirmwareState::EStopped`]) until [`ResetEStop`].
    Operator,
    /// The host's telemetry watchdog fired: a protective stop ([`FirmwareState::Hold`]), cleared by an [`Arm`].
    HostWatchdog,
    /// The host shut down: a protective stop, like `HostWatchdog`.
    Shutdown,
}

/// A stop: with [`StopReason::Operator`] the firmware brakes and latches [`FirmwareState::EStopped`] until an
/// operator's [`ResetEStop`]; otherwise it holds ([`FirmwareState::Hold`]) until an [`Arm`]. The host repeats it
/// until telemetry shows the stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EStop {
    pub seq: u32,
    pub reason: StopReason,
}

/// Allows motion: from `Disarmed` or `Hold` (never from `EStopped`: that needs [`ResetEStop`] first). Commands
/// are ignored until then.
///
/// An arm must be fresh: `seen_telemetry` is the newest telemetry `seq` the host had when it armed, and the
/// firmware refuses ([`AckStatus::StaleArm`]) an arm whose `seen_telemetry` is not newer than the telemetry it
/// sent when it last stopped (so a delayed or duplicated arm from before a link loss cannot re-arm it). After an
/// arm, only commands with `seq > command_floor` are followed (commands issued before the arm are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arm {
    pub seq: u32,
    pub seen_telemetry: u32,
    pub command_floor: u32,
}

/// Clears a latched e-stop ([`FirmwareState::EStopped`] -> `Disarmed`): an explicit operator action (the
/// `stagewise robot reset-estop` verb), never sent by an env reset. Like an [`Arm`] it must be fresh:
/// `seen_telemetry` newer than the telemetry the firmware sent when it stopped, else [`AckStatus::StaleArm`].
/// Motion still needs an [`Arm`] after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetEStop {
    pub seq: u32,
    pub seen_telemetry: u32,
}

/// Which message an [`Ack`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MessageKind {
    Hello,
    Command,
    Telemetry,
    Heartbeat,
    EStop,
    Arm,
    Ack,
    ResetEStop,
}

/// The outcome an [`Ack`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AckStatus {
    Ok,
    /// The peer's protocol version differs; `ours` is the firmware's.
    VersionMismatch {
        ours: u16,
    },
    /// No valid `Hello` yet.
    NoSession,
    /// A command arrived while not armed.
    NotArmed,
    /// The command's `seq` was not greater than the last accepted one.
    Stale,
    /// The setpoint does not fit this firmware (wrong joint count, non-finite values, unsupported mode).
    BadSetpoint,
    /// An `Arm` or `ResetEStop` that predates the firmware's last stop (see [`Arm`]).
    StaleArm,
    /// A `Hello` (or a frame of an offered session) while another session is armed: an armed session cannot be
    /// taken over. `seq` is the `Hello`'s nonce or the refused session id.
    SessionBusy,
    /// An `Arm` while the e-stop is latched: an operator must send [`ResetEStop`] first.
    EStopLatched,
    /// An `Arm` while a sensor value is not finite.
    SensorFault,
}

/// Answers a `Hello` (on refusal; `seq` = its nonce), `Arm`, `EStop`, `ResetEStop`, or a refused `Command`
/// (commands that are accepted are acknowledged through [`Telemetry::last_command_seq`] instead, to keep the 1 kHz
/// link light). A frame of a session the firmware does not know is answered (as a handshake frame) with
/// [`AckStatus::NoSession`] and `seq` = that session id, so a host whose session is gone learns it at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub seq: u32,
    pub kind: MessageKind,
    pub status: AckStatus,
}

/// Everything that travels on the link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    Hello(Hello),
    Command(Command),
    Telemetry(Telemetry),
    Heartbeat(Heartbeat),
    EStop(EStop),
    Arm(Arm),
    Ack(Ack),
    ResetEStop(ResetEStop),
}

impl Message {
    pub fn kind(&self) -> MessageKind {
        match self {
            Message::Hello(_) => MessageKind::Hello,
            Message::Command(_) => MessageKind::Command,
            Message::Telemetry(_) => MessageKind::Telemetry,
            Message::Heartbeat(_) => MessageKind::Heartbeat,
            Message::EStop(_) => MessageKind::EStop,
            Message::Arm(_) => MessageKind::Arm,
            Message::Ack(_) => MessageKind::Ack,
            Message::ResetEStop(_) => MessageKind::ResetEStop,
        }
    }
}

/// Builds a `JointVec` from a slice; `None` when it has more than [`MAX_JOINTS`] values.
pub fn joints(values: &[f32]) -> Option<JointVec> {
    Vec::from_slice(values).ok()
}

// Largest postcard encodings, from the field types (varint u16 <= 3 bytes, u32 <= 5, u64 <= 10; f32 4; an enum's
// discriminant 1 byte while it has < 128 variants; a JointVec 1 length byte + MAX_JOINTS f32s).
const U8: usize = 1;
const U16: usize = 3;
const U32: usize = 5;
const U64: usize = 10;
const F32: usize = 4;
const TAG: usize = 1;
const JOINT_VEC: usize = 1 + MAX_JOINTS * F32;

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

/// Largest [`Hello`]: version, role, nonce, session, capabilities, n_joints, control_hz.
pub const MAX_HELLO: usize = U16 + TAG + U32 + U32 + U32 + U8 + U16;
/// Largest [`Command`]: seq, time_us, setpoint (tag + the larger of a JointVec and 3 f32), gripper.
pub const MAX_COMMAND: usize = U32 + U64 + TAG + max(JOINT_VEC, 3 * F32) + F32;
/// Largest [`Telemetry`]: seq, time_us, state, last_command_seq, positions, velocities, efforts, ee, gripper,
/// faults, bad_frames, stale_commands, rejected_frames.
pub const MAX_TELEMETRY: usize =
    U32 + U64 + TAG + U32 + 3 * JOINT_VEC + 3 * F32 + F32 + U16 + U32 + U32 + U32;
/// Largest [`Heartbeat`]: seq, time_us, actor_step.
pub const MAX_HEARTBEAT: usize = U32 + U64 + U32;
/// Largest [`EStop`]: seq, reason.
pub const MAX_ESTOP: usize = U32 + TAG;
/// Largest [`Arm`]: seq, seen_telemetry, command_floor.
pub const MAX_ARM: usize = 3 * U32;
/// Largest [`Ack`]: seq, kind, status (tag + `VersionMismatch`'s u16).
pub const MAX_ACK: usize = U32 + TAG + TAG + U16;
/// Largest [`ResetEStop`]: seq, seen_telemetry.
pub const MAX_RESET_ESTOP: usize = 2 * U32;
/// Largest [`Message`]: its tag + the largest variant.
pub const MAX_MESSAGE: usize = TAG
    + max(
        max(
            max(MAX_HELLO, MAX_COMMAND),
            max(MAX_TELEMETRY, MAX_HEARTBEAT),
        ),
        max(max(MAX_ESTOP, MAX_ARM), max(MAX_ACK, MAX_RESET_ESTOP)),
    );
