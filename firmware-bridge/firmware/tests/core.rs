//! The firmware state machine with the kinematic plant, in firmware time (no sockets, no threads). Frames are
//! sealed with the test key and go through the firmware's own decoder where authentication is under test;
//! elsewhere the rig hands authentic frames of the current session to `handle_frame`.

use stagewise_firmware::*;
use stagewise_protocol::*;

const P: u64 = 1000; // 1 kHz period in microseconds
const KEY: [u8; KEY_LEN] = [0x11; KEY_LEN];

fn hello(nonce: u32, version: u16) -> Message {
    Message::Hello(Hello {
        version,
        role: Role::Host,
        nonce,
        session: 0,
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

fn hb(seq: u32, actor_step: u32) -> Message {
    Message::Heartbeat(Heartbeat {
        seq,
        time_us: 0,
        actor_step,
    })
}

fn ack_status(h: &Handled) -> Option<AckStatus> {
    match &h.reply {
        Some(Outgoing {
            message: Message::Ack(a),
            ..
        }) => Some(a.status),
        _ => None,
    }
}

/// A plant whose readings can be made non-finite.
struct Faulty {
    inner: KinematicPlant,
    nan: bool,
}

impl Plant for Faulty {
    fn apply(&mut self, d: &Drive, g: f32, dt: f32) {
        self.inner.apply(d, g, dt)
    }
    fn read(&mut self, out: &mut PlantState) {
        self.inner.read(out);
        if self.nan {
            out.velocities[1] = f32::NAN;
        }
    }
}

struct Rig {
    fw: Firmware,
    plant: Faulty,
    now: u64,
    seen: u32,
    session: u32,
    counter: u64,
    tx: Sender,
}

impl Rig {
    fn new() -> Self {
        Self::with(FirmwareConfig::cartesian_1khz())
    }
    fn with(cfg: FirmwareConfig) -> Self {
        Self {
            fw: Firmware::new(cfg, LinkKey::new(&KEY), [3; 16]),
            plant: Faulty {
                inner: KinematicPlant::new([0.0, 0.0, 0.2]),
                nan: false,
            },
            now: 0,
            seen: 0,
            session: 0,
            counter: 0,
            tx: Sender::new(LinkKey::new(&KEY), Direction::HostToFirmware),
        }
    }
    fn pos(&self) -> [f32; 3] {
        self.plant.inner.pos
    }
    /// An authentic frame of session `session` with the next counter.
    fn frame(&mut self, session: u32, m: Message) -> Frame {
        self.counter += 1;
        Frame {
            header: Header {
                session,
                counter: self.counter,
            },
            message: m,
        }
    }
    /// Sends `m` in the rig's session.
    fn send(&mut self, m: Message) -> Handled {
        let f = self.frame(self.session, m);
        self.fw.handle_frame(&f, self.now)
    }
    /// Sends `m` as bytes through the firmware's own decoder (authentication under test).
    fn send_bytes(&mut self, bytes: &[u8]) -> Vec<Handled> {
        let mut dec = FrameDecoder::new(LinkKey::new(&KEY), Direction::HostToFirmware);
        let mut results = Vec::new();
        dec.feed(bytes, |r| results.push(r));
        results
            .into_iter()
            .map(|r| self.fw.receive(r, self.now))
            .collect()
    }
    fn sealed(&mut self, session: u32, m: &Message) -> Vec<u8> {
        let mut buf = [0u8; MAX_FRAME];
        let n = self.tx.seal(session, m, &mut buf).expect("seals");
        buf[..n].to_vec()
    }
    fn tick(&mut self) -> Option<Telemetry> {
        self.now += P;
        let t = self.fw.tick(self.now, &mut self.plant);
        if let Some(t) = &t {
            self.seen = t.seq;
        }
        t
    }
    /// Hello with `nonce`: returns the offered session (None when refused).
    fn hello(&mut self, nonce: u32) -> Option<u32> {
        let f = self.frame(0, hello(nonce, PROTOCOL_VERSION));
        match self.fw.handle_frame(&f, self.now).reply {
            Some(Outgoing {
                session: 0,
                message: Message::Hello(h),
            }) => {
                assert_eq!(h.nonce, nonce);
                Some(h.session)
            }
            _ => None,
        }
    }
    /// Handshake and open the session with a heartbeat.
    fn open(&mut self, nonce: u32) {
        let s = self.hello(nonce).expect("offered");
        assert_ne!(s, 0);
        self.session = s;
        let h = self.send(hb(0, 0));
        assert!(h.opened, "the first frame of the offered session opens it");
        assert_eq!(self.fw.session(), s);
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
        self.open(1);
        self.tick();
        let h = self.arm(1, 0);
        assert_eq!(ack_status(&h), Some(AckStatus::Ok));
        assert_eq!(self.fw.state(), FirmwareState::Armed);
    }
    /// Ticks for `n` periods, a heartbeat with an advancing actor step every 10.
    fn run(&mut self, n: u32) -> Option<Telemetry> {
        let mut t = None;
        for i in 0..n {
            if i % 10 == 0 {
                let step = self.counter as u32;
                self.send(hb(i, step));
            }
            t = self.tick();
        }
        t
    }
}

#[test]
fn nothing_moves_without_a_session_and_an_arm() {
    let mut r = Rig::new();
    r.session = 12345;
    let h = r.send(vel(1, [0.1, 0.0, 0.0]));
    assert!(!h.accepted);
    assert_eq!(ack_status(&h), Some(AckStatus::NoSession));
    assert!(r.tick().is_none(), "no telemetry before a session");
    r.open(1);
    let h = r.send(vel(2, [0.1, 0.0, 0.0]));
    assert_eq!(ack_status(&h), Some(AckStatus::NotArmed));
    for _ in 0..10 {
        r.tick();
    }
    assert_eq!(r.pos(), [0.0, 0.0, 0.2]);
}

#[test]
fn mismatched_version_is_refused() {
    let mut r = Rig::new();
    let f = r.frame(0, hello(9, PROTOCOL_VERSION + 1));
    let h = r.fw.handle_frame(&f, 0);
    assert_eq!(
        h.reply,
        Some(Outgoing {
            session: 0,
            message: Message::Ack(Ack {
                seq: 9,
                kind: MessageKind::Hello,
                status: AckStatus::VersionMismatch {
                    ours: PROTOCOL_VERSION
                }
            })
        })
    );
    assert_eq!(r.fw.state(), FirmwareState::Idle);
}

#[test]
fn frames_are_authenticated_and_replays_refused() {
    let mut r = Rig::new();
    // The handshake and the session through the firmware's own decoder.
    let b = r.sealed(0, &hello(5, PROTOCOL_VERSION));
    let h = r.send_bytes(&b).remove(0);
    let Some(Outgoing {
        message: Message::Hello(offer),
        ..
    }) = h.reply
    else {
        panic!("{h:?}")
    };
    let s = offer.session;
    let b = r.sealed(s, &hb(1, 0));
    assert!(r.send_bytes(&b)[0].opened);
    r.tick();
    let arm = Message::Arm(Arm {
        seq: 1,
        seen_telemetry: r.seen,
        command_floor: 0,
    });
    let b = r.sealed(s, &arm);
    r.send_bytes(&b);
    assert_eq!(r.fw.state(), FirmwareState::Armed);
    let cmd = r.sealed(s, &vel(2, [0.1, 0.0, 0.0]));
    assert!(r.send_bytes(&cmd)[0].accepted);
    // The same frame again: refused by its counter (before the command seq is even looked at).
    assert!(!r.send_bytes(&cmd)[0].accepted);
    assert_eq!(r.fw.counters().replays, 1);
    // Another key: refused and counted, never acted on, never feeds the watchdog.
    let mut stranger = Sender::new(LinkKey::new(&[0x22; KEY_LEN]), Direction::HostToFirmware);
    let mut buf = [0u8; MAX_FRAME];
    let n = stranger
        .seal(s, &vel(100, [-0.3, 0.0, 0.0]), &mut buf)
        .expect("seals");
    let handled = r.send_bytes(&buf[..n]);
    assert!(!handled[0].accepted && handled[0].reply.is_none());
    assert_eq!(r.fw.counters().auth_failures, 1);
    let t = r.tick().expect("telemetry");
    assert!(t.faults.has(Faults::AUTH));
    assert_eq!(t.rejected_frames, 2);
    for _ in 0..100 {
        let n = stranger.seal(s, &hb(1, 1), &mut buf).expect("seals");
        r.send_bytes(&buf[..n]);
        r.tick();
    }
    assert_eq!(
        r.fw.state(),
        FirmwareState::Hold,
        "forged heartbeats do not keep it alive"
    );
}

#[test]
fn an_armed_session_cannot_be_taken_over() {
    let mut r = Rig::new();
    r.armed_session();
    let mine = r.session;
    // A retry of our own Hello is answered with our session and changes nothing.
    assert_eq!(r.hello(1), Some(mine));
    assert_eq!(r.fw.state(), FirmwareState::Armed);
    // Another host (or a replayed Hello of an old session) while armed: refused.
    let f = r.frame(0, hello(2, PROTOCOL_VERSION));
    let h = r.fw.handle_frame(&f, r.now);
    assert_eq!(ack_status(&h), Some(AckStatus::SessionBusy));
    assert_eq!(r.fw.counters().takeovers_refused, 1);
    assert_eq!(r.fw.state(), FirmwareState::Armed);
    assert!(r.send(vel(2, [0.1, 0.0, 0.0])).accepted, "ours still");
    // A frame of a session that was never offered: NoSession, not acted on.
    let f = r.frame(mine ^ 1, vel(3, [-0.1, 0.0, 0.0]));
    let h = r.fw.handle_frame(&f, r.now);
    assert!(!h.accepted);
    assert_eq!(ack_status(&h), Some(AckStatus::NoSession));
    assert_eq!(r.fw.session(), mine);
}

#[test]
fn a_session_offered_before_the_arm_cannot_open_while_armed() {
    let mut r = Rig::new();
    r.open(1);
    // Another host is offered a session while the firmware is still disarmed...
    let other = r.hello(2).expect("offered while disarmed");
    r.tick();
    assert_eq!(ack_status(&r.arm(1, 0)), Some(AckStatus::Ok));
    // ...but once armed, its first frame is refused.
    let f = r.frame(other, hb(0, 0));
    let h = r.fw.handle_frame(&f, r.now);
    assert!(!h.opened);
    assert_eq!(ack_status(&h), Some(AckStatus::SessionBusy));
    assert_eq!(r.fw.state(), FirmwareState::Armed);
}

#[test]
fn a_new_session_when_not_armed_disarms_and_old_frames_are_refused() {
    let mut r = Rig::new();
    r.armed_session();
    let old = r.session;
    assert!(r.send(vel(10, [0.1, 0.0, 0.0])).accepted);
    // The host stops (protective), a new host connects.
    r.send(Message::EStop(EStop {
        seq: 2,
        reason: StopReason::Shutdown,
    }));
    assert_eq!(r.fw.state(), FirmwareState::Hold);
    r.open(7);
    assert_ne!(r.session, old);
    assert_eq!(r.fw.state(), FirmwareState::Disarmed);
    // A frame of the old session (e.g. replayed): refused.
    let f = r.frame(old, vel(11, [0.1, 0.0, 0.0]));
    let h = r.fw.handle_frame(&f, r.now);
    assert!(!h.accepted);
    assert_eq!(ack_status(&h), Some(AckStatus::NoSession));
}

#[test]
fn armed_velocity_command_moves_with_limited_acceleration() {
    let mut r = Rig::new();
    r.armed_session();
    assert!(r.send(vel(5, [0.1, 0.0, 0.0])).accepted);
    let t = r.run(100).expect("telemetry every tick");
    assert_eq!(t.last_command_seq, 5);
    assert_eq!(t.state, FirmwareState::Armed);
    // 10 m/s^2: 0.1 m/s is reached after 10 ticks (0.55 mm), then 90 ticks at 0.1 m/s (9 mm).
    assert!((r.pos()[0] - 0.00955).abs() < 1e-5, "{:?}", r.pos());
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
    assert!(r.pos()[0] > 0.0, "still following seq 10");
    let t = r.tick().expect("telemetry");
    assert!(
        !t.faults.has(Faults::STALE_COMMAND),
        "per-telemetry fault bits clear"
    );
    assert_eq!(t.stale_commands, 2);
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
    let pos = r.pos();
    // The link returns; commands alone do not move it.
    r.send(hb(1, 1));
    for s in 3..50 {
        let h = r.send(vel(s, [0.2, 0.0, 0.0]));
        assert!(!h.accepted);
        let t = r.tick().expect("telemetry");
        assert_eq!(t.state, FirmwareState::Hold);
        assert!(t.faults.has(Faults::LINK_LOST));
    }
    assert_eq!(r.pos(), pos);
    r.arm(2, 0);
    for _ in 0..5 {
        r.tick();
    }
    assert_eq!(r.pos(), pos, "arm alone does not replay the old command");
    assert!(r.send(vel(60, [0.2, 0.0, 0.0])).accepted);
    r.tick();
    assert!(r.pos()[0] > pos[0]);
}

#[test]
fn command_timeout_brakes_but_stays_armed() {
    let mut r = Rig::new();
    let to = r.fw.config().command_timeout_us / P;
    r.armed_session();
    r.send(vel(2, [0.1, 0.0, 0.0]));
    r.run(to as u32 + 10);
    let x = r.pos()[0];
    r.run(10);
    assert_eq!(r.pos()[0], x);
    assert_eq!(r.fw.state(), FirmwareState::Armed);
}

#[test]
fn a_stalled_actor_holds_the_robot_although_heartbeats_live() {
    let mut r = Rig::new();
    let stall = r.fw.config().stall_timeout_us;
    r.armed_session();
    r.send(vel(2, [0.1, 0.0, 0.0]));
    // Heartbeats keep coming (the link is fine), but the actor's step counter stays at 1.
    let start = r.now;
    let mut held = None;
    for i in 0..(stall / P + 50) as u32 {
        if i % 10 == 0 {
            r.send(hb(i, 1));
        }
        let t = r.tick().expect("telemetry");
        if t.state == FirmwareState::Hold {
            assert!(t.faults.has(Faults::ACTOR_STALLED));
            assert!(!t.faults.has(Faults::LINK_LOST));
            held = Some(r.now - start);
            break;
        }
    }
    let held = held.expect("a stalled actor holds the robot");
    assert!(held > stall && held <= stall + 2 * P, "{held}");
    assert_eq!(r.fw.counters().actor_stalls, 1);
    // An advancing counter keeps it armed: re-arm and run twice the stall time.
    r.tick();
    assert_eq!(ack_status(&r.arm(3, 0)), Some(AckStatus::Ok));
    for i in 0..(2 * stall / P) as u32 {
        if i % 10 == 0 {
            r.send(hb(i, 100 + i));
        }
        r.tick();
    }
    assert_eq!(r.fw.state(), FirmwareState::Armed);
}

#[test]
fn the_estop_latches_until_an_operator_reset() {
    let mut r = Rig::new();
    r.armed_session();
    r.send(vel(2, [0.1, 0.0, 0.0]));
    r.tick();
    let before = r.seen;
    let h = r.send(Message::EStop(EStop {
        seq: 3,
        reason: StopReason::Operator,
    }));
    assert_eq!(ack_status(&h), Some(AckStatus::Ok));
    let pos = r.pos();
    assert!(!r.send(vel(4, [0.1, 0.0, 0.0])).accepted);
    let t = r.tick().expect("telemetry");
    assert_eq!(t.state, FirmwareState::EStopped);
    assert!(t.faults.has(Faults::ESTOP));
    assert_eq!(r.pos(), pos);
    // An arm (what an env reset sends) does not clear it.
    assert_eq!(ack_status(&r.arm(5, 0)), Some(AckStatus::EStopLatched));
    assert_eq!(r.fw.state(), FirmwareState::EStopped);
    // Nor does a new session.
    r.open(2);
    assert_eq!(r.fw.state(), FirmwareState::EStopped);
    r.tick();
    assert_eq!(ack_status(&r.arm(1, 0)), Some(AckStatus::EStopLatched));
    // A reset from before the stop (it saw older telemetry) is refused.
    let h = r.send(Message::ResetEStop(ResetEStop {
        seq: 2,
        seen_telemetry: before,
    }));
    assert_eq!(ack_status(&h), Some(AckStatus::StaleArm));
    assert!(r.fw.estop_latched());
    // The operator's reset: Disarmed, still needs an arm.
    let h = r.send(Message::ResetEStop(ResetEStop {
        seq: 3,
        seen_telemetry: r.seen,
    }));
    assert_eq!(ack_status(&h), Some(AckStatus::Ok));
    let t = r.tick().expect("telemetry");
    assert_eq!(t.state, FirmwareState::Disarmed);
    assert!(!t.faults.has(Faults::ESTOP));
    assert!(!r.send(vel(10, [0.1, 0.0, 0.0])).accepted);
    assert_eq!(ack_status(&r.arm(4, 0)), Some(AckStatus::Ok));
    assert!(r.send(vel(11, [0.1, 0.0, 0.0])).accepted);
    assert_eq!(r.fw.counters().estop_resets, 1);
}

#[test]
fn a_protective_stop_holds_and_an_arm_clears_it() {
    let mut r = Rig::new();
    r.armed_session();
    r.send(Message::EStop(EStop {
        seq: 2,
        reason: StopReason::HostWatchdog,
    }));
    let t = r.tick().expect("telemetry");
    assert_eq!(t.state, FirmwareState::Hold);
    assert!(t.faults.has(Faults::HOST_STOP));
    assert!(!r.fw.estop_latched());
    assert_eq!(ack_status(&r.arm(3, 0)), Some(AckStatus::Ok));
}

#[test]
fn non_finite_sensor_values_hold_and_refuse_the_arm() {
    let mut r = Rig::new();
    r.armed_session();
    r.send(vel(2, [0.1, 0.0, 0.0]));
    r.run(5);
    r.plant.nan = true;
    let t = r.tick().expect("telemetry");
    assert_eq!(t.state, FirmwareState::Hold);
    assert!(t.faults.has(Faults::SENSOR));
    let pos = r.pos();
    r.run(5);
    assert_eq!(r.pos(), pos, "no motion on a bad reading");
    assert_eq!(ack_status(&r.arm(3, 0)), Some(AckStatus::SensorFault));
    r.plant.nan = false;
    r.tick();
    assert_eq!(ack_status(&r.arm(4, 0)), Some(AckStatus::Ok));
    assert_eq!(r.fw.counters().sensor_faults, 1);
}

#[test]
fn a_local_disarm_is_reported_in_telemetry() {
    let mut r = Rig::new();
    r.armed_session();
    r.fw.local_disarm();
    let t = r.tick().expect("telemetry");
    assert_eq!(t.state, FirmwareState::Disarmed);
    assert!(!r.send(vel(5, [0.1, 0.0, 0.0])).accepted);
}

#[test]
fn firmware_limits_clamp_and_rate_limit() {
    let mut r = Rig::new();
    r.armed_session();
    // Far outside the x range: clamped to pos_max, approached on the profile (10 m/s^2, 0.3 m/s).
    assert!(r.send(joints_cmd(2, &[5.0, 0.0, 0.2])).accepted);
    let t = r.tick().expect("telemetry");
    assert!(t.faults.has(Faults::LIMIT));
    assert!((r.pos()[0] - 1e-5).abs() < 1e-7, "{:?}", r.pos());
    let mut prev = r.pos()[0];
    let mut prev_v = r.pos()[0] / 1e-3;
    for i in 0..3000u32 {
        if i % 10 == 0 {
            // The host repeats its target (a command older than the command timeout would brake).
            assert!(r.send(joints_cmd(100 + i, &[5.0, 0.0, 0.2])).accepted);
        }
        r.tick();
        let v = (r.pos()[0] - prev) / 1e-3;
        assert!(v <= 0.3 + 1e-3, "joint speed {v}");
        // 10 m/s^2 over 1 ms, plus the f32 resolution of positions near 0.5 m divided by 1 ms.
        assert!(
            (v - prev_v).abs() <= 10.0 * 1e-3 + 2e-3,
            "joint accel {v} after {prev_v}"
        );
        prev = r.pos()[0];
        prev_v = v;
    }
    assert!(
        (r.pos()[0] - 0.52).abs() < 1e-5,
        "stops at pos_max: {:?}",
        r.pos()
    );
    // Wrong joint count, non-finite: refused.
    let h = r.send(joints_cmd(5003, &[0.0, 0.0]));
    assert_eq!(ack_status(&h), Some(AckStatus::BadSetpoint));
    let h = r.send(vel(5004, [f32::NAN, 0.0, 0.0]));
    assert_eq!(ack_status(&h), Some(AckStatus::BadSetpoint));
    // Over-speed velocity on all axes: the tool tip is limited as a vector (0.3 m/s), not per axis.
    r.plant.inner.pos = [0.0, 0.0, 0.2];
    assert!(r.send(vel(5005, [-9.0, -9.0, 9.0])).accepted);
    let mut p = r.pos();
    for i in 0..60 {
        if i % 10 == 0 {
            r.send(hb(i, 7000 + i));
        }
        r.tick();
        let q = r.pos();
        let d: f32 = (0..3).map(|i| (q[i] - p[i]).powi(2)).sum::<f32>().sqrt();
        assert!(d <= 0.3e-3 + 1e-7, "tool tip moved {d} in one period");
        p = q;
    }
    let d: f32 = {
        let before = r.pos();
        r.tick();
        (0..3)
            .map(|i| (r.pos()[i] - before[i]).powi(2))
            .sum::<f32>()
            .sqrt()
    };
    assert!((d - 0.3e-3).abs() < 1e-6, "cruise at 0.3 m/s: {d}");
    // Pushing out of the workspace: zeroed.
    r.plant.inner.pos[2] = 0.35;
    r.send(vel(5006, [0.0, 0.0, 0.2]));
    r.tick();
    r.tick();
    assert_eq!(r.pos()[2], 0.35);
}

#[test]
fn bad_frames_are_counted_and_never_feed_the_watchdog() {
    let mut r = Rig::new();
    r.armed_session();
    for _ in 0..200 {
        r.fw.receive(Err(FrameError::Cobs), r.now);
        r.fw.receive(Err(FrameError::BadMac), r.now);
        r.tick();
    }
    assert_eq!(r.fw.state(), FirmwareState::Hold);
    assert_eq!(r.fw.counters().bad_frames, 200);
    assert_eq!(r.fw.counters().auth_failures, 200);
}

#[test]
fn an_arm_from_before_the_stop_is_refused_and_the_floor_drops_old_commands() {
    let mut r = Rig::new();
    r.armed_session();
    let before = r.seen;
    assert!(r.send(vel(2, [0.1, 0.0, 0.0])).accepted);
    r.send(Message::EStop(EStop {
        seq: 3,
        reason: StopReason::HostWatchdog,
    }));
    // A delayed copy of an arm sent before the stop (it saw only older telemetry).
    let h = r.send(Message::Arm(Arm {
        seq: 4,
        seen_telemetry: before,
        command_floor: 0,
    }));
    assert_eq!(ack_status(&h), Some(AckStatus::StaleArm));
    assert_eq!(r.fw.state(), FirmwareState::Hold);
    r.tick();
    // A fresh arm with a command floor: commands up to seq 10 were issued before it and are not followed.
    assert_eq!(ack_status(&r.arm(5, 10)), Some(AckStatus::Ok));
    assert!(!r.send(vel(9, [0.1, 0.0, 0.0])).accepted);
    assert!(r.send(vel(11, [0.1, 0.0, 0.0])).accepted);
}

#[test]
fn session_ids_come_from_the_boot_entropy() {
    let offer = |entropy: [u8; 16]| {
        let mut fw = Firmware::new(
            FirmwareConfig::cartesian_1khz(),
            LinkKey::new(&KEY),
            entropy,
        );
        let f = Frame {
            header: Header::default(),
            message: hello(1, PROTOCOL_VERSION),
        };
        match fw.handle_frame(&f, 0).reply {
            Some(Outgoing {
                message: Message::Hello(h),
                ..
            }) => h.session,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(offer([1; 16]), offer([1; 16]));
    assert_ne!(offer([1; 16]), offer([2; 16]));
    assert_ne!(offer([1; 16]), 0);
}
