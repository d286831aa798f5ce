//! The bridge against the firmware emulator over UDP loopback: RobotEnv on the simulator plant, watchdog,
//! e-stop latch and operator reset, handshake refusals, session ownership, a stalled actor, non-finite sensor
//! values, a firmware that stops or reboots on its own, and limits checked on the wire.

use stagewise_bridge::protocol::*;
use stagewise_bridge::*;
use stagewise_core::{Env, View, ViewSpec};
use stagewise_firmware::emulator::{sim_plant, Control, Emulator, EmulatorConfig};
use stagewise_firmware::{Drive, FirmwareConfig, KinematicPlant, Plant, PlantState};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn key() -> LinkKey {
    LinkKey::new(&[0x24; KEY_LEN])
}

/// The firmware's link timeout in these tests: generous, so that a loaded test machine never trips it (the
/// fault-injection tests exercise the real 50 ms).
fn relaxed_firmware() -> FirmwareConfig {
    FirmwareConfig {
        link_timeout_us: 250_000,
        stall_timeout_us: 1_000_000,
        ..FirmwareConfig::cartesian_1khz()
    }
}

fn emulator_with<P: Plant + Send + 'static>(firmware: FirmwareConfig, plant: P) -> Emulator {
    Emulator::spawn(
        EmulatorConfig {
            firmware,
            bind: "127.0.0.1:0".parse().expect("addr"),
            record_commands: true,
            key: key(),
        },
        plant,
    )
    .expect("emulator")
}

fn kinematic_emulator() -> Emulator {
    emulator_with(relaxed_firmware(), KinematicPlant::new([0.0, 0.0, 0.2]))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Waits until `cond` holds (checked every 2 ms), at most `limit`.
async fn until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    cond()
}

#[test]
fn robot_env_drives_the_simulator_through_the_emulator() {
    let plant = sim_plant(stagewise_sim::Task::PickPlace, 1000, 3).expect("sim plant");
    let emu = Emulator::spawn(
        EmulatorConfig {
            firmware: relaxed_firmware(),
            bind: "127.0.0.1:0".parse().expect("addr"),
            record_commands: false,
            key: key(),
        },
        plant,
    )
    .expect("emulator");
    let spec = ViewSpec {
        name: "front".into(),
        width: 16,
        height: 12,
    };
    let cam = FnCamera::new(spec, |step| {
        Ok(View::new(
            "front",
            image::RgbImage::from_pixel(16, 12, image::Rgb([step as u8, 0, 0])),
        ))
    });
    let stages = vec!["reach".to_string(), "grasp".to_string()];
    let mut cfg = RobotEnvConfig::sim_like(
        Endpoint::Udp(emu.local_addr()),
        "pick-place",
        stages.clone(),
        key(),
    );
    cfg.max_steps = 30;
    let mut env = RobotEnv::connect(cfg, vec![Box::new(cam)]).expect("connects");
    assert_eq!(env.spec().action.names, ["dx", "dy", "dz", "gripper"]);
    assert_eq!(
        env.spec().state.names,
        ["ee_x", "ee_y", "ee_z", "gripper_width"]
    );
    assert_eq!(env.spec().views.len(), 1);
    assert_eq!(env.spec().stage_names, stages);
    assert!(matches!(
        env.step(&[0.0; 4]),
        Err(stagewise_core::EnvError::NeedsReset)
    ));
    let obs = env.reset(0).expect("reset arms");
    assert_eq!(obs.state.len(), 4);
    assert_eq!(obs.views.len(), 1);
    let x0 = obs.state[0];
    let mut last = None;
    for i in 0..30 {
        // Move, then come to rest before the episode ends: the sim plant decelerates at 3 m/s^2, and the
        // firmware stops being armed at truncation, when the plant must already stand still.
        let dx = if i < 22 { 1.0 } else { 0.0 };
        let r = env.step(&[dx, 0.0, 0.0, 1.0]).expect("step");
        assert_eq!(r.obs.step, i + 1);
        assert_eq!(r.obs.views[0].rgb.get_pixel(0, 0)[0], (i + 1) as u8);
        last = Some(r);
    }
    let last = last.expect("stepped");
    assert!(last.truncated, "max_steps truncates");
    assert!(matches!(
        env.step(&[0.0; 4]),
        Err(stagewise_core::EnvError::NeedsReset)
    ));
    // 22 steps at 50 Hz, accelerating at 3 m/s^2 up to 0.3 m/s, then braking: well over 5 cm.
    assert!(
        last.obs.state[0] > x0 + 0.05,
        "sim end effector moved: {x0} -> {}",
        last.obs.state[0]
    );
    let obs = env.reset(1).expect("second episode");
    assert_eq!(obs.step, 0);
    assert!(matches!(
        env.step(&[1.0, 0.0]),
        Err(stagewise_core::EnvError::ActionSize {
            expected: 4,
            got: 2,
            ..
        })
    ));
    let e = env.step(&[f32::NAN, 0.0, 0.0, 0.0]).unwrap_err();
    assert!(e.to_string().contains("finite"), "{e}");
    drop(env);
    let log = emu.stop().expect("stops");
    assert!(log.counters.accepted_commands >= 30);
    assert_eq!(log.moved_while_not_armed, 0);
    assert_eq!(log.counters.rejected(), 0);
}

/// Object poses from a state source travel on the observation, after the robot's own state, and are not
/// among its proprioception (what a reward model may read).
#[test]
fn appended_state_is_not_proprioception() {
    struct Poses(stagewise_core::BoxSpec);
    impl StateSource for Poses {
        fn spec(&self) -> &stagewise_core::BoxSpec {
            &self.0
        }
        fn read(&mut self, step: u64) -> Result<Vec<f32>, CameraError> {
            Ok(vec![step as f32, -1.0])
        }
    }
    let emu = kinematic_emulator();
    let cfg = RobotEnvConfig::sim_like(
        Endpoint::Udp(emu.local_addr()),
        "pick-place",
        Vec::new(),
        key(),
    );
    let own = ["ee_x", "ee_y", "ee_z", "gripper_width"];
    assert_eq!(cfg.proprio_names(), own);
    let env = RobotEnv::connect(cfg, Vec::new()).expect("connects");
    assert_eq!(env.proprio_names(), own);
    let poses = Poses(stagewise_core::BoxSpec {
        names: vec!["block0_x".into(), "block0_y".into()],
        low: vec![-1.0; 2],
        high: vec![1.0; 2],
    });
    let mut env = env.with_state_source(Box::new(poses));
    assert_eq!(env.proprio_names(), own);
    assert_eq!(
        env.spec().state.names,
        [
            "ee_x",
            "ee_y",
            "ee_z",
            "gripper_width",
            "block0_x",
            "block0_y"
        ]
    );
    let obs = env.reset(0).expect("reset arms");
    assert_eq!(obs.state.len(), 6);
    assert_eq!(obs.state[5], -1.0);
    drop(env);
    emu.stop().expect("stops");
}

#[test]
fn watchdog_stops_and_faults_when_telemetry_stops() {
    let rt = runtime();
    let emu = kinematic_emulator();
    rt.block_on(async {
        let cfg = BridgeConfig {
            watchdog: Duration::from_millis(100),
            ..BridgeConfig::new(key())
        };
        let bridge = Bridge::connect(&Endpoint::Udp(emu.local_addr()), cfg)
            .await
            .expect("connect");
        bridge.arm().await.expect("arm");
        bridge
            .command(&Setpoint::EeVelocity([0.01, 0.0, 0.0]), 1.0)
            .await
            .expect("command");
        // The command is in flight: wait (bounded) until the emulator took it before it goes silent.
        for _ in 0..200 {
            if emu.log().counters.accepted_commands >= 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let log = emu.stop().expect("stop");
        assert!(log.counters.accepted_commands >= 1);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(
            matches!(bridge.fault(), Some(HostFault::TelemetryTimeout { .. })),
            "{:?}",
            bridge.fault()
        );
        assert_eq!(bridge.stats().watchdog_trips, 1);
        // The protective stop is repeated (nobody answers) until telemetry shows it.
        assert_eq!(bridge.stop_pending(), Some(StopReason::HostWatchdog));
        assert!(bridge.stats().stop_frames > 5, "{:?}", bridge.stats());
        let e = bridge
            .command(&Setpoint::EeVelocity([0.01, 0.0, 0.0]), 1.0)
            .await
            .unwrap_err();
        assert!(
            matches!(e, BridgeError::Faulted(HostFault::TelemetryTimeout { .. })),
            "{e}"
        );
    });
}

#[test]
fn the_estop_latches_until_an_operator_reset_never_an_arm() {
    let rt = runtime();
    let emu = kinematic_emulator();
    rt.block_on(async {
        let bridge = Bridge::connect(&Endpoint::Udp(emu.local_addr()), BridgeConfig::new(key()))
            .await
            .expect("connect");
        bridge.arm().await.expect("arm");
        bridge
            .command(&Setpoint::EeVelocity([0.05, 0.0, 0.0]), 1.0)
            .await
            .expect("command");
        bridge.estop().await.expect("estop");
        let e = bridge
            .command(&Setpoint::EeVelocity([0.05, 0.0, 0.0]), 1.0)
            .await
            .unwrap_err();
        assert!(matches!(e, BridgeError::Faulted(HostFault::EStop)));
        assert!(
            bridge.wait_stop_acknowledged(Duration::from_secs(2)).await,
            "telemetry shows the e-stop"
        );
        let s = bridge.telemetry().expect("telemetry");
        assert_eq!(s.telemetry.state, FirmwareState::EStopped);
        assert!(s.telemetry.faults.has(Faults::ESTOP));
        // An arm (what every env reset sends) is refused, and says how to clear it.
        let e = bridge.arm().await.unwrap_err();
        assert!(matches!(e, BridgeError::EStopLatched { .. }), "{e}");
        assert!(e.to_string().contains("stagewise robot reset-estop"), "{e}");
        assert_eq!(bridge.fault(), Some(HostFault::EStop));
        // The operator's reset, then an arm: moves again.
        bridge.reset_estop().await.expect("reset");
        assert!(bridge.fault().is_none());
        bridge.arm().await.expect("re-arm after the reset");
        let r = bridge
            .command(&Setpoint::EeVelocity([0.05, 0.0, 0.0]), 1.0)
            .await
            .expect("moves again");
        assert!(
            until(Duration::from_secs(2), || bridge
                .telemetry()
                .is_some_and(|s| s.telemetry.last_command_seq >= r.seq
                    && s.telemetry.state == FirmwareState::Armed))
            .await
        );
        bridge.close().await;
    });
    let log = emu.stop().expect("stop");
    assert!(
        log.counters.estops >= 5,
        "the e-stop burst: {}",
        log.counters.estops
    );
    assert_eq!(log.counters.estop_resets, 1);
}

#[test]
fn robot_env_reset_never_clears_an_estop() {
    let emu = kinematic_emulator();
    let endpoint = Endpoint::Udp(emu.local_addr());
    let cfg = RobotEnvConfig::sim_like(endpoint.clone(), "pick-place", Vec::new(), key());
    let mut env = RobotEnv::connect(cfg.clone(), Vec::new()).expect("connects");
    env.reset(0).expect("arms");
    env.step(&[0.5, 0.0, 0.0, 1.0]).expect("steps");
    env.estop().expect("estop");
    // The bridge's error is the env error's source: read the chain.
    let e = stagewise_core::ErrorChain(&env.reset(1).unwrap_err()).to_string();
    assert!(e.contains("reset-estop"), "{e}");
    drop(env);
    // The operator's verb (its own session), then a new run arms again.
    let r = operator::reset_estop(&endpoint, BridgeConfig::new(key())).expect("reset");
    assert_eq!(r.before, FirmwareState::EStopped);
    assert_ne!(r.after, FirmwareState::EStopped);
    let mut env = RobotEnv::connect(cfg, Vec::new()).expect("connects again");
    env.reset(2).expect("arms after the operator reset");
    drop(env);
    emu.stop().expect("stops");
}

#[test]
fn an_armed_session_is_not_taken_over_by_another_host() {
    let rt = runtime();
    let emu = kinematic_emulator();
    rt.block_on(async {
        let ep = Endpoint::Udp(emu.local_addr());
        let first = Bridge::connect(&ep, BridgeConfig::new(key()))
            .await
            .expect("connect");
        first.arm().await.expect("arm");
        let cfg = BridgeConfig {
            retries: 3,
            ..BridgeConfig::new(key())
        };
        let e = Bridge::connect(&ep, cfg).await.err().expect("refused");
        assert!(matches!(e, BridgeError::SessionBusy { .. }), "{e}");
        // The first host still drives it.
        let r = first
            .command(&Setpoint::EeVelocity([0.02, 0.0, 0.0]), 1.0)
            .await
            .expect("command");
        assert!(
            until(Duration::from_secs(2), || first
                .telemetry()
                .is_some_and(|s| s.telemetry.last_command_seq >= r.seq))
            .await
        );
        assert!(first.fault().is_none());
        assert_eq!(first.firmware_stop(), None);
    });
    let log = emu.stop().expect("stop");
    assert!(log.counters.takeovers_refused >= 1, "{:?}", log.counters);
    assert_eq!(log.counters.sessions, 1);
}

#[test]
fn a_host_with_another_key_gets_no_session() {
    let rt = runtime();
    let emu = kinematic_emulator();
    rt.block_on(async {
        let cfg = BridgeConfig {
            retries: 3,
            reply_timeout: Duration::from_millis(30),
            ..BridgeConfig::new(LinkKey::new(&[0x77; KEY_LEN]))
        };
        let e = Bridge::connect(&Endpoint::Udp(emu.local_addr()), cfg)
            .await
            .err()
            .expect("refused");
        assert!(matches!(e, BridgeError::NoAnswer { .. }), "{e}");
        assert!(e.to_string().contains("link key"), "{e}");
    });
    let log = emu.stop().expect("stop");
    assert_eq!(log.counters.auth_failures, 3, "{:?}", log.counters);
    assert_eq!(log.counters.sessions, 0);
}

#[test]
fn a_stalled_actor_holds_the_robot_and_the_host_reports_it() {
    let rt = runtime();
    let fw = FirmwareConfig {
        stall_timeout_us: 150_000,
        ..relaxed_firmware()
    };
    let emu = emulator_with(fw, KinematicPlant::new([0.0, 0.0, 0.2]));
    rt.block_on(async {
        let bridge = Bridge::connect(&Endpoint::Udp(emu.local_addr()), BridgeConfig::new(key()))
            .await
            .expect("connect");
        bridge.arm().await.expect("arm");
        for _ in 0..20 {
            bridge
                .command(&Setpoint::EeVelocity([0.02, 0.0, 0.0]), 1.0)
                .await
                .expect("command");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The actor stops; the bridge's heartbeat task keeps running (the link is fine).
        let hb = bridge.stats().heartbeats_sent;
        assert!(
            until(Duration::from_secs(3), || bridge.firmware_stop().is_some()).await,
            "the host notices"
        );
        let stop = bridge.firmware_stop().expect("reported");
        assert_eq!(stop.state, FirmwareState::Hold);
        assert!(stop.faults.has(Faults::ACTOR_STALLED), "{stop}");
        assert!(stop.to_string().contains("ACTOR_STALLED"), "{stop}");
        assert!(
            bridge.stats().heartbeats_sent > hb + 5,
            "heartbeats went on"
        );
        assert_eq!(bridge.stats().firmware_stops, 1);
        bridge.arm().await.expect("re-arm");
        assert_eq!(bridge.firmware_stop(), None);
    });
    let log = emu.stop().expect("stop");
    assert_eq!(log.counters.actor_stalls, 1);
    assert_eq!(log.counters.link_losses, 0);
}

/// A kinematic plant whose velocity reading turns NaN while `nan` is set.
struct NanPlant {
    inner: KinematicPlant,
    nan: Arc<AtomicBool>,
}

impl Plant for NanPlant {
    fn apply(&mut self, d: &Drive, g: f32, dt: f32) {
        self.inner.apply(d, g, dt)
    }
    fn read(&mut self, out: &mut PlantState) {
        self.inner.read(out);
        if self.nan.load(Ordering::Relaxed) {
            out.velocities[1] = f32::NAN;
        }
    }
}

#[test]
fn non_finite_sensor_values_are_refused_on_both_sides() {
    let rt = runtime();
    let nan = Arc::new(AtomicBool::new(false));
    let emu = emulator_with(
        relaxed_firmware(),
        NanPlant {
            inner: KinematicPlant::new([0.0, 0.0, 0.2]),
            nan: nan.clone(),
        },
    );
    rt.block_on(async {
        let bridge = Bridge::connect(&Endpoint::Udp(emu.local_addr()), BridgeConfig::new(key()))
            .await
            .expect("connect");
        bridge.arm().await.expect("arm");
        nan.store(true, Ordering::Relaxed);
        assert!(
            until(Duration::from_secs(2), || bridge.fault().is_some()).await,
            "the host refuses the telemetry"
        );
        assert!(
            matches!(
                bridge.fault(),
                Some(HostFault::TelemetryNotFinite {
                    field: "velocities",
                    index: 1,
                    ..
                })
            ),
            "{:?}",
            bridge.fault()
        );
        assert!(bridge.stats().telemetry_not_finite > 0);
        let e = bridge
            .command(&Setpoint::EeVelocity([0.02, 0.0, 0.0]), 1.0)
            .await
            .unwrap_err();
        assert!(matches!(e, BridgeError::Faulted(_)), "{e}");
        // The firmware holds and refuses to arm while the reading is bad.
        let e = bridge.arm().await.unwrap_err();
        assert!(
            matches!(
                e,
                BridgeError::Refused {
                    status: AckStatus::SensorFault,
                    ..
                } | BridgeError::NoAnswer { .. }
            ),
            "{e}"
        );
        nan.store(false, Ordering::Relaxed);
        bridge
            .arm()
            .await
            .expect("arms once the sensors read finite values");
        assert!(bridge.fault().is_none());
    });
    let log = emu.stop().expect("stop");
    assert_eq!(log.counters.sensor_faults, 1);
    assert_eq!(log.moved_while_not_armed, 0);
}

#[test]
fn a_firmware_that_disarms_or_reboots_on_its_own_is_reported() {
    let emu = kinematic_emulator();
    let endpoint = Endpoint::Udp(emu.local_addr());
    let cfg = RobotEnvConfig::sim_like(endpoint.clone(), "pick-place", Vec::new(), key());
    let mut env = RobotEnv::connect(cfg.clone(), Vec::new()).expect("connects");
    env.reset(0).expect("arms");
    env.step(&[0.2, 0.0, 0.0, 1.0]).expect("steps");
    emu.control(Control::Disarm);
    let mut err = None;
    for _ in 0..50 {
        match env.step(&[0.2, 0.0, 0.0, 1.0]) {
            Ok(_) => {}
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let e = stagewise_core::ErrorChain(&err.expect("the step after the disarm fails")).to_string();
    assert!(
        e.contains("stopped on its own") && e.contains("Disarmed"),
        "{e}"
    );
    let stop = env.bridge().firmware_stop().expect("reported");
    assert_eq!(stop.state, FirmwareState::Disarmed);
    // An env reset arms again.
    env.reset(1).expect("re-arms");
    env.step(&[0.2, 0.0, 0.0, 1.0]).expect("steps again");
    // A reboot loses the session: the host learns it from the firmware's answer, not from silence.
    emu.control(Control::Reboot);
    let rt = runtime();
    let lost = rt.block_on(until(Duration::from_secs(2), || {
        env.bridge().fault() == Some(HostFault::SessionLost)
    }));
    assert!(lost, "{:?}", env.bridge().fault());
    let e = stagewise_core::ErrorChain(&env.step(&[0.2, 0.0, 0.0, 1.0]).unwrap_err()).to_string();
    assert!(e.contains("SessionLost"), "{e}");
    drop(env);
    let log = emu.stop().expect("stops");
    assert_eq!(log.counters.local_disarms, 1);
}

/// A fake firmware on a raw socket (with the link key): answers a Hello with `reply` (a firmware Hello gets
/// session 0x5e55), acks arms, records every command frame it gets, and sends telemetry (NaN positions if `nan`).
fn fake_firmware(
    reply: Option<Message>,
    nan: bool,
) -> (std::net::SocketAddr, std::thread::JoinHandle<Vec<Command>>) {
    const SESSION: u32 = 0x5e55;
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let addr = sock.local_addr().expect("addr");
    let h = std::thread::spawn(move || {
        let mut cmds = Vec::new();
        let mut buf = [0u8; 2048];
        let mut out = [0u8; MAX_FRAME];
        let mut tx = Sender::new(key(), Direction::FirmwareToHost);
        let mut tel_seq = 0;
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let mut dec = FrameDecoder::new(key(), Direction::HostToFirmware);
            let mut frames = Vec::new();
            dec.feed(&buf[..n], |r| frames.push(r));
            for f in frames.into_iter().flatten() {
                let send = |tx: &mut Sender, out: &mut [u8], session: u32, m: &Message| {
                    let k = tx.seal(session, m, out).expect("seal");
                    let _ = sock.send_to(&out[..k], from);
                };
                match f.message {
                    Message::Hello(h) => {
                        let r = match &reply {
                            Some(Message::Hello(x)) => Message::Hello(Hello {
                                nonce: h.nonce,
                                session: SESSION,
                                ..*x
                            }),
                            Some(Message::Ack(a)) => Message::Ack(Ack { seq: h.nonce, ..*a }),
                            Some(other) => other.clone(),
                            None => continue,
                        };
                        send(&mut tx, &mut out, 0, &r);
                    }
                    Message::Arm(a) => send(
                        &mut tx,
                        &mut out,
                        SESSION,
                        &Message::Ack(Ack {
                            seq: a.seq,
                            kind: MessageKind::Arm,
                            status: AckStatus::Ok,
                        }),
                    ),
                    Message::Command(c) => cmds.push(c),
                    _ => {}
                }
            }
            // Telemetry on every datagram so the host has a position and a fresh seq to arm with.
            tel_seq += 1;
            let p = if nan { f32::NAN } else { 0.0 };
            let t = Telemetry {
                seq: tel_seq,
                time_us: 0,
                state: FirmwareState::Armed,
                last_command_seq: 0,
                positions: joints(&[p, 0.0, 0.2]).expect("fits"),
                velocities: joints(&[0.0; 3]).expect("fits"),
                efforts: joints(&[0.0; 3]).expect("fits"),
                ee: [0.0, 0.0, 0.2],
                gripper: 1.0,
                faults: Faults(0),
                bad_frames: 0,
                stale_commands: 0,
                rejected_frames: 0,
            };
            let k = tx
                .seal(SESSION, &Message::Telemetry(t), &mut out)
                .expect("seal");
            let _ = sock.send_to(&out[..k], from);
        }
        cmds
    });
    (addr, h)
}

fn firmware_hello(version: u16) -> Message {
    Message::Hello(Hello {
        version,
        role: Role::Firmware,
        nonce: 0,
        session: 0,
        capabilities: Capabilities(Capabilities::EE_VELOCITY | Capabilities::JOINT_POSITION),
        n_joints: 3,
        control_hz: 1000,
    })
}

#[test]
fn handshake_refusals_are_clear() {
    let rt = runtime();
    rt.block_on(async {
        let (addr, _h) = fake_firmware(
            Some(Message::Ack(Ack {
                seq: 0,
                kind: MessageKind::Hello,
                status: AckStatus::VersionMismatch { ours: 7 },
            })),
            false,
        );
        let e = Bridge::connect(&Endpoint::Udp(addr), BridgeConfig::new(key()))
            .await
            .err()
            .expect("refused");
        assert!(
            matches!(e, BridgeError::FirmwareRefusedVersion { theirs: 7, .. }),
            "{e}"
        );
        let (addr, _h) = fake_firmware(Some(firmware_hello(PROTOCOL_VERSION + 1)), false);
        let e = Bridge::connect(&Endpoint::Udp(addr), BridgeConfig::new(key()))
            .await
            .err()
            .expect("refused");
        assert!(e.to_string().contains("version mismatch"), "{e}");
        let (addr, _h) = fake_firmware(None, false);
        let cfg = BridgeConfig {
            retries: 2,
            reply_timeout: Duration::from_millis(30),
            ..BridgeConfig::new(key())
        };
        let e = Bridge::connect(&Endpoint::Udp(addr), cfg)
            .await
            .err()
            .expect("no answer");
        assert!(matches!(e, BridgeError::NoAnswer { tries: 2, .. }), "{e}");
        // A firmware whose frames do not verify (another key) is named as that: this fake sends telemetry to
        // every sender, authentic or not.
        let (addr, _h) = fake_firmware(Some(firmware_hello(PROTOCOL_VERSION)), false);
        let cfg = BridgeConfig {
            retries: 2,
            reply_timeout: Duration::from_millis(30),
            ..BridgeConfig::new(LinkKey::new(&[0x99; KEY_LEN]))
        };
        let e = Bridge::connect(&Endpoint::Udp(addr), cfg)
            .await
            .err()
            .expect("refused");
        // Its telemetry arrives but does not verify: named as a key mismatch, with our key's fingerprint.
        assert!(matches!(e, BridgeError::WrongKey { .. }), "{e}");
        assert!(e.to_string().contains("different keys"), "{e}");
    });
}

#[test]
fn telemetry_with_non_finite_values_is_refused() {
    let rt = runtime();
    let (addr, _h) = fake_firmware(Some(firmware_hello(PROTOCOL_VERSION)), true);
    rt.block_on(async {
        let cfg = BridgeConfig {
            retries: 3,
            reply_timeout: Duration::from_millis(50),
            ..BridgeConfig::new(key())
        };
        let e = Bridge::connect(&Endpoint::Udp(addr), cfg)
            .await
            .err()
            .expect("no usable telemetry");
        assert!(
            matches!(e, BridgeError::NoAnswer { what, .. } if what.contains("telemetry")),
            "{e}"
        );
    });
}

#[test]
fn limits_hold_on_the_wire() {
    let rt = runtime();
    let (addr, h) = fake_firmware(Some(firmware_hello(PROTOCOL_VERSION)), false);
    let mut intervals = std::collections::HashMap::new();
    rt.block_on(async {
        let bridge = Bridge::connect(&Endpoint::Udp(addr), BridgeConfig::new(key()))
            .await
            .expect("connect");
        bridge.arm().await.expect("arm");
        let mut iv = tokio::time::interval(Duration::from_millis(1));
        for i in 0..200 {
            iv.tick().await;
            let wild = if i % 2 == 0 { 50.0 } else { -50.0 };
            let r = bridge
                .command(&Setpoint::EeVelocity([wild, -wild, wild]), 3.0)
                .await
                .expect("clamped, sent");
            assert!(!r.hits.is_empty());
            intervals.insert(r.seq, r.interval);
        }
        for _ in 0..100 {
            iv.tick().await;
            bridge
                .command(
                    &Setpoint::Joints(joints(&[9.0, -9.0, 9.0]).expect("fits")),
                    0.5,
                )
                .await
                .expect("clamped, sent");
        }
        let e = bridge
            .command(&Setpoint::EeVelocity([f32::NAN, 0.0, 0.0]), 0.5)
            .await
            .unwrap_err();
        assert!(matches!(
            e,
            BridgeError::Limit(LimitError::NotFinite { .. })
        ));
        bridge.close().await;
    });
    let cmds = h.join().expect("fake firmware");
    assert!(cmds.len() >= 290, "{} commands arrived", cmds.len());
    let l = Limits::cartesian_default();
    let norm = |v: [f32; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let mut prev_v = [0.0f32; 3];
    let mut prev_seq = None;
    for c in &cmds {
        assert!((0.0..=1.0).contains(&c.gripper));
        match &c.setpoint {
            Setpoint::EeVelocity(v) => {
                assert!(norm(*v) <= l.ee_vel_max + 1e-6, "tool-tip speed {v:?}");
                // Commands may be lost on the way; check consecutive ones with the limiter's own interval.
                if prev_seq.is_some_and(|p| p + 1 == c.seq) {
                    let (dt, from_rest) = l.interval(intervals[&c.seq]);
                    let p = if from_rest { [0.0; 3] } else { prev_v };
                    let dv = [v[0] - p[0], v[1] - p[1], v[2] - p[2]];
                    assert!(
                        norm(dv) <= l.ee_acc_max * dt + 1e-5,
                        "accel {v:?} after {prev_v:?} in {dt} s"
                    );
                }
                prev_v = *v;
                prev_seq = Some(c.seq);
            }
            Setpoint::Joints(q) => {
                for i in 0..3 {
                    assert!(
                        q[i] >= l.pos_min[i] - 1e-6 && q[i] <= l.pos_max[i] + 1e-6,
                        "{q:?}"
                    );
                }
            }
        }
    }
}
