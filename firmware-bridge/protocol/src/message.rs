//! The messages. Field order is the wire order (postcard encodes structs as their fields in order, integers as
//! varints, `f32` as 4 little-endian bytes, enums as a varint discriminant). Changing any of it means a new
//! [`crate::PROTOCOL_VERSION`].

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

/// Opens a session. The host sends one; the firmware answers with its own (or with an [`Ack`] carrying
/// [`AckStatus::VersionMismatch`] and refuses everything else). A `Hello` with a new `session` id resets the
/// firmware's sequence window and disarms it; a repeated one (a duplicate on the link) is answered again and
/// changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u16,
    pub role: Role,
    /// Session id chosen by the host (the firmware echoes it).
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
    /// Link lost (no valid frame within the firmware's link timeout): holding position, brakes on. Needs [`Arm`].
    Hold,
    /// Latched emergency stop. Needs [`Arm`].
    EStopped,
}

/// Fault bits carried in [`Telemetry::faults`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Faults(pub u16);

impl Faults {
    /// The link watchdog fired (no valid frame in time).
    pub const LINK_LOST: u16 = 1 << 0;
    /// An emergency stop was received.
    pub const ESTOP: u16 = 1 << 1;
    /// A command was outside the firmware's own limits and was clamped.
    pub const LIMIT: u16 = 1 << 2;
    /// A malformed frame (COBS, CRC or decode error) was received since the last telemetry.
    pub const BAD_FRAME: u16 = 1 << 3;
    /// A stale or duplicate command was ignored since the last telemetry.
    pub const STALE_COMMAND: u16 = 1 << 4;
    /// A command arrived while not armed and was ignored.
    pub const NOT_ARMED: u16 = 1 << 5;

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
}

/// Keeps the link alive when no commands flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub seq: u32,
    pub time_us: u64,
}

/// Why a stop was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// An operator or program called e-stop.
    Operator,
    /// The host's telemetry watchdog fired.
    HostWatchdog,
    /// The host shut down.
    Shutdown,
}

/// Emergency stop: the firmware brakes and latches [`FirmwareState::EStopped`] until an [`Arm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EStop {
    pub seq: u32,
    pub reason: StopReason,
}

/// Allows motion: from `Disarmed`, `Hold` (after link loss) or `EStopped`. Commands are ignored until then.
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
    /// An `Arm` that predates the firmware's last stop (see [`Arm`]).
    StaleArm,
}

/// Answers a `Hello` (on refusal), `Arm`, `EStop`, or a refused `Command` (commands that are accepted are
/// acknowledged through [`Telemetry::last_command_seq`] instead, to keep the 1 kHz link light).
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
        }
    }
}

/// Builds a `JointVec` from a slice; `None` when it has more than [`MAX_JOINTS`] values.
pub fn joints(values: &[f32]) -> Option<JointVec> {
    Vec::from_slice(values).ok()
}
