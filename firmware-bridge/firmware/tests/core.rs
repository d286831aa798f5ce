//! The firmware state machine with the kinematic plant, in firmware time (no sockets, no threads).

use stagewise_firmware::*;
use stagewise_protocol::*;

const P: u64 = 1000; // 1 kHz period in microseconds

fn hello(session: u32, version: u16) -> Message {
    Message::Hello(Hello {
        version,
        role: Role::Host,
        session,
        capabilities: Capabilities(0),
        n_joints: 0,
        control_hz: 0,
    })
}

fn vel(seq: u32, v: [f32; 3]) -> Message {
    Message::Command(Command {
        seq,
        time_us: 0,
        setpoint: Setpoint::EeVelocity(v),
        gripper: 1.0,
    })
}

fn joints_cmd(seq: u32, q: &[f32]) -> Message {
    Message::Command(Command {
        seq,
        time_us: 0,
        setpoint: Setpoint::Joints(joints(q).expect("fits")),
        gripper: 1.0,
    })
}

struct Rig {
    fw: Firmware,
    plant: KinematicPlant,
    now: u64,
    seen: u32,
}

impl Rig {
    fn new() -> Self {
        Self {
            fw: Firmware::new(FirmwareConfig::cartesian_1khz()),
            plant: KinematicPlant::new([0.0, 0.0, 0.2]),
            now: 0,
            seen: 0,
        }
    }
    fn send(&mut self, m: Message) -> Handled {
        self.fw.handle(&m, self.now)
    }
    fn tick(&mut self) -> Option<Telemetry> {
        self.now += P;
        let t = self.fw.tick(self.now, &mut self.plant);
        if let Some(t) = &t {
            self.seen = t.seq;
        }
        t
    }
    fn arm(&mut self, seq: u32, command_floor: u32) -> Handled {
        let seen_telemetry = self.seen;
        self.send(Message::Arm(Arm {
            seq,
            seen_telemetry,
            command_floor,
        }))
    }
    fn armed_session(&mut self) {
        assert!(matches!(
            self.send(hello(1, PROTOCOL_VERSION)).reply,
            Some(Message::Hello(_))
        ));
        self.tick();
        let h = self.arm(1, 0);
        assert_eq!(
            h.reply,
            Some(Message::Ack(Ack {
                seq: 1,
                kind: MessageKind::Arm,
                status: AckStatus::Ok
            }))
        );
        assert_eq!(self.fw.state(), FirmwareState::Armed);
    }
}

#[test]
fn nothing_moves_without_hello_and_arm() {
    let mut r = Rig::new();
    let h = r.send(vel(1, [0.1, 0.0, 0.0]));
    assert!(!h.accepted);
    assert!(matches!(
        h.reply,
        Some(Message::Ack(Ack {
            status: AckStatus::NoSession,
            ..
        }))
    ));
    assert!(r.tick().is_none(), "no telemetry before a session");
    r.send(hello(1, PROTOCOL_VERSION));
    let h = r.send(vel(2, [0.1, 0.0, 0.0]));
    assert!(matches!(
        h.reply,
        Some(Message::Ack(Ack {
            status: AckStatus::NotArmed,
            ..
        }))
    ));
    for _ in 0..10 {
        r.tick();
    }
    assert_eq!(r.plant.pos, [0.0, 0.0, 0.2]);
}

#[test]
fn mismatched_version_is_refused() {
    let mut r = Rig::new();
    let h = r.send(hello(1, PROTOCOL_VERSION + 1));
    assert_eq!(
        h.reply,
        Some(Message::Ack(Ack {
            seq: 0,
            kind: MessageKind::Hello,
            status: AckStatus::VersionMismatch {
                ours: PROTOCOL_VERSION
            }
        }))
    );
    assert_eq!(r.fw.state(), FirmwareState::Idle);
    let h = r.arm(1, 0);
    assert!(matches!(
        h.reply,
        Some(Message::Ack(Ack {
            status: AckStatus::NoSession,
            ..
        }))
    ));
}

#[test]
fn armed_velocity_command_moves_and_is_acknowledged_in_telemetry() {
    let mut r = Rig::new();
    r.armed_session();
    assert!(r.send(vel(5, [0.1, 0.0, 0.0])).accepted);
    let mut t = None;
    for i in 0..100 {
        if i % 10 == 0 {
            r.send(Message::Heartbeat(Heartbeat { seq: i, time_us: 0 }));
        }
        t = r.tick();
    }
    let t = t.expect("telemetry every tick");
    assert_eq!(t.last_command_seq, 5);
    assert_eq!(t.state, FirmwareState::Armed);
    assert!((r.plant.pos[0] - 0.01).abs() < 1e-4, "{:?}", r.plant.pos);
}

#[test]
fn stale_and_duplicate_commands_are_ignored() {
    let mut r = Rig::new();
    r.armed_session();
    assert!(r.send(vel(10, [0.1, 0.0, 0.0])).accepted);
    assert!(!r.send(vel(10, [-0.3, 0.0, 0.0])).accepted, "duplicate");
    assert!(!r.send(vel(9, [-0.3, 0.0, 0.0])).accepted, "stale");
    assert_eq!(r.fw.counters().stale_commands, 2);
    let t = r.tick().expect("telemetry");
    assert!(t.faults.has(Faults::STALE_COMMAND));
    assert!(r.plant.pos[0] > 0.0, "still following seq 10");
    let t = r.tick().expect("telemetry");
    assert!(
        !t.faults.has(Faults::STALE_COMMAND),
        "per-telemetry fault bits clear"
    );
    assert_eq!(t.stale_commands, 2);
}

#[test]
fn duplicate_hello_does_not_reset_the_sequence_window() {
    let mut r = Rig::new();
    r.armed_session();
    assert!(r.send(vel(10, [0.1, 0.0, 0.0])).accepted);
    assert!(matches!(
        r.send(hello(1, PROTOCOL_VERSION)).reply,
        Some(Message::Hello(_))
    ));
    assert_eq!(r.fw.state(), FirmwareState::Armed);
    assert!(!r.send(vel(3, [0.1, 0.0, 0.0])).accepted);
    // A new session resets it (and disarms).
    r.send(hello(2, PROTOCOL_VERSION));
    assert_eq!(r.fw.state(), FirmwareState::Disarmed);
}

#[test]
fn link_loss_holds_within_one_period_and_needs_re_arm() {
    let mut r = Rig::new();
    r.armed_session();
    r.send(vel(2, [0.2, 0.0, 0.0]));
    let last_rx = r.now;
    let timeout = r.fw.config().link_timeout_us;
    let mut held_at = None;
    for _ in 0..200 {
        r.tick();
        if r.fw.state() == FirmwareState::Hold {
            held_at = Some(r.now);
            break;
        }
    }
    let held_at = held_at.expect("holds");
    assert!(
        held_at > last_rx + timeout && held_at <= last_rx + timeout + P,
        "{held_at}"
    );
    let pos = r.plant.pos;
    // The link returns; commands alone do not move it.
    r.send(Message::Heartbeat(Heartbeat { seq: 1, time_us: 0 }));
    for s in 3..50 {
        let h = r.send(vel(s, [0.2, 0.0, 0.0]));
        assert!(!h.accepted);
        let t = r.tick().expect("telemetry");
        assert_eq!(t.state, FirmwareState::Hold);
        assert!(t.faults.has(Faults::LINK_LOST));
    }
    assert_eq!(r.plant.pos, pos);
    r.arm(2, 0);
    for _ in 0..5 {
        r.tick();
    }
    assert_eq!(
        r.plant.pos, pos,
        "arm alone does not replay the old command"
    );
    assert!(r.send(vel(60, [0.2, 0.0, 0.0])).accepted);
    r.tick();
    assert!(r.plant.pos[0] > pos[0]);
}

#[test]
fn command_timeout_stops_velocity_but_stays_armed() {
    let mut r = Rig::new();
    let to = r.fw.config().command_timeout_us / P;
    r.armed_session();
    r.send(vel(2, [0.1, 0.0, 0.0]));
    for i in 0..to + 10 {
        if i % 10 == 0 {
            r.send(Message::Heartbeat(Heartbeat {
                seq: i as u32,
                time_us: 0,
            }));
        }
        r.tick();
    }
    let x = r.plant.pos[0];
    for i in 0..10 {
        r.send(Message::Heartbeat(Heartbeat {
            seq: 1000 + i,
            time_us: 0,
        }));
        r.tick();
    }
    assert_eq!(r.plant.pos[0], x);
    assert_eq!(r.fw.state(), FirmwareState::Armed);
}

#[test]
fn estop_latches_until_arm() {
    let mut r = Rig::new();
    r.armed_session();
    r.send(vel(2, [0.1, 0.0, 0.0]));
    r.tick();
    let h = r.send(Message::EStop(EStop {
        seq: 3,
        reason: StopReason::Operator,
    }));
    assert!(matches!(
        h.reply,
        Some(Message::Ack(Ack {
            status: AckStatus::Ok,
            ..
        }))
    ));
    let pos = r.plant.pos;
    assert!(!r.send(vel(4, [0.1, 0.0, 0.0])).accepted);
    let t = r.tick().expect("telemetry");
    assert_eq!(t.state, FirmwareState::EStopped);
    assert!(t.faults.has(Faults::ESTOP));
    assert_eq!(r.plant.pos, pos);
}

#[test]
fn firmware_limits_clamp_and_rate_limit() {
    let mut r = Rig::new();
    r.armed_session();
    // Far outside the x range and speed: clamped to pos_max, approached at vel_max.
    assert!(r.send(joints_cmd(2, &[5.0, 0.0, 0.2])).accepted);
    let t = r.tick().expect("telemetry");
    assert!(t.faults.has(Faults::LIMIT));
    assert!(
        (r.plant.pos[0] - 0.3 * 0.001).abs() < 1e-6,
        "{:?}",
        r.plant.pos
    );
    for _ in 0..5000 {
        r.send(Message::Heartbeat(Heartbeat { seq: 0, time_us: 0 }));
        r.tick();
    }
    assert!(r.plant.pos[0] <= 0.52 + 1e-6);
    // Wrong joint count, non-finite: refused.
    let h = r.send(joints_cmd(3, &[0.0, 0.0]));
    assert!(matches!(
        h.reply,
        Some(Message::Ack(Ack {
            status: AckStatus::BadSetpoint,
            ..
        }))
    ));
    let h = r.send(vel(4, [f32::NAN, 0.0, 0.0]));
    assert!(matches!(
        h.reply,
        Some(Message::Ack(Ack {
            status: AckStatus::BadSetpoint,
            ..
        }))
    ));
    // Over-speed velocity: clamped to 0.3 m/s; pushing out of the workspace: zeroed.
    assert!(r.send(vel(5, [0.0, -9.0, 0.0])).accepted);
    let y = r.plant.pos[1];
    r.tick();
    assert!((r.plant.pos[1] - (y - 0.3e-3)).abs() < 1e-6);
    r.plant.pos[2] = 0.35;
    r.send(vel(6, [0.0, 0.0, 0.2]));
    r.tick();
    r.tick();
    assert_eq!(r.plant.pos[2], 0.35);
}

#[test]
fn bad_frames_are_counted_and_never_feed_the_watchdog() {
    let mut r = Rig::new();
    r.armed_session();
    for _ in 0..200 {
        r.fw.bad_frame();
        r.tick();
    }
    assert_eq!(r.fw.state(), FirmwareState::Hold);
    assert_eq!(r.fw.counters().bad_frames, 200);
}

#[test]
fn an_arm_from_before_the_stop_is_refused_and_the_floor_drops_old_commands() {
    let mut r = Rig::new();
    r.armed_session();
    let before = r.seen;
    assert!(r.send(vel(2, [0.1, 0.0, 0.0])).accepted);
    r.send(Message::EStop(EStop {
        seq: 3,
        reason: StopReason::Operator,
    }));
    // A delayed copy of an arm sent before the stop (it saw only older telemetry).
    let h = r.send(Message::Arm(Arm {
        seq: 4,
        seen_telemetry: before,
        command_floor: 0,
    }));
    assert!(matches!(
        h.reply,
        Some(Message::Ack(Ack {
            status: AckStatus::StaleArm,
            ..
        }))
    ));
    assert_eq!(r.fw.state(), FirmwareState::EStopped);
    r.tick();
    // A fresh arm with a command floor: commands up to seq 10 were issued before it and are not followed.
    assert!(matches!(
        r.arm(5, 10).reply,
        Some(Message::Ack(Ack {
            status: AckStatus::Ok,
            ..
        }))
    ));
    assert!(!r.send(vel(9, [0.1, 0.0, 0.0])).accepted);
    assert!(r.send(vel(11, [0.1, 0.0, 0.0])).accepted);
}
