//! The bridge against the firmware emulator over UDP loopback: RobotEnv on the simulator plant, watchdog,
//! e-stop, handshake refusals, and limits checked on the wire.

use stagewise_bridge::protocol::*;
use stagewise_bridge::*;
use stagewise_core::{Env, View, ViewSpec};
use stagewise_firmware::emulator::{sim_plant, Emulator, EmulatorConfig};
use stagewise_firmware::{FirmwareConfig, KinematicPlant};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

/// The firmware's link timeout in these tests: generous, so that a loaded test machine never trips it (the
/// fault-injection tests exercise the real 50 ms).
fn relaxed_firmware() -> FirmwareConfig {
    FirmwareConfig {
        link_timeout_us: 250_000,
        ..FirmwareConfig::cartesian_1khz()
    }
}

fn kinematic_emulator() -> Emulator {
    Emulator::spawn(
        EmulatorConfig {
            firmware: relaxed_firmware(),
            bind: "127.0.0.1:0".parse().expect("addr"),
            record_commands: true,
        },
        KinematicPlant::new([0.0, 0.0, 0.2]),
    )
    .expect("emulator")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn robot_env_drives_the_simulator_through_the_emulator() {
    let plant = sim_plant(stagewise_sim::Task::PickPlace, 1000, 3).expect("sim plant");
    let emu = Emulator::spawn(
        EmulatorConfig {
            firmware: relaxed_firmware(),
            bind: "127.0.0.1:0".parse().expect("addr"),
            record_commands: false,
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
    let cfg = RobotEnvConfig::sim_like(Endpoint::Udp(emu.local_addr()), "pick-place", Vec::new());
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
            ..BridgeConfig::default()
        };
        let bridge = Bridge::connect(&Endpoint::Udp(emu.local_addr()), cfg)
            .await
            .expect("connect");
        bridge.arm().await.expect("arm");
        bridge
            .command(&Setpoint::EeVelocity([0.01, 0.0, 0.0]), 1.0)
            .await
            .expect("command");
        let log = emu.stop().expect("stop");
        assert!(log.counters.accepted_commands >= 1);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(
            matches!(bridge.fault(), Some(HostFault::TelemetryTimeout { .. })),
            "{:?}",
            bridge.fault()
        );
        assert_eq!(bridge.stats().watchdog_trips, 1);
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
fn estop_latches_until_re_armed() {
    let rt = runtime();
    let emu = kinematic_emulator();
    rt.block_on(async {
        let bridge = Bridge::connect(&Endpoint::Udp(emu.local_addr()), BridgeConfig::default())
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
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let s = bridge
                .next_telemetry(0, Duration::from_secs(1))
                .await
                .expect("telemetry");
            if s.telemetry.state == FirmwareState::EStopped {
                assert!(s.telemetry.faults.has(Faults::ESTOP));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "firmware never reported EStopped"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        bridge.arm().await.expect("re-arm");
        assert!(bridge.fault().is_none());
        let r = bridge
            .command(&Setpoint::EeVelocity([0.05, 0.0, 0.0]), 1.0)
            .await
            .expect("moves again");
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let s = bridge
                .next_telemetry(0, Duration::from_secs(1))
                .await
                .expect("telemetry");
            if s.telemetry.last_command_seq >= r.seq {
                assert_eq!(s.telemetry.state, FirmwareState::Armed);
                break;
            }
            assert!(Instant::now() < deadline);
        }
    });
    let log = emu.stop().expect("stop");
    assert_eq!(log.counters.estops, 5, "the e-stop is repeated 5 times");
}

/// A fake firmware on a raw socket: answers a Hello with `reply`, then records every command frame it gets.
fn fake_firmware(
    reply: Option<Message>,
) -> (std::net::SocketAddr, std::thread::JoinHandle<Vec<Command>>) {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let addr = sock.local_addr().expect("addr");
    let h = std::thread::spawn(move || {
        let mut cmds = Vec::new();
        let mut buf = [0u8; 2048];
        let mut out = [0u8; MAX_FRAME];
        let mut tel_seq = 0;
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let mut dec = FrameDecoder::new();
            let mut msgs = Vec::new();
            dec.feed(&buf[..n], |r| msgs.push(r));
            for m in msgs.into_iter().flatten() {
                match m {
                    Message::Hello(h) => {
                        let r = match &reply {
                            Some(Message::Hello(x)) => Message::Hello(Hello {
                                session: h.session,
                                ..*x
                            }),
                            Some(other) => other.clone(),
                            None => continue,
                        };
                        let k = encode_frame(&r, &mut out).expect("encode");
                        sock.send_to(&out[..k], from).expect("send");
                    }
                    Message::Arm(a) => {
                        let k = encode_frame(
                            &Message::Ack(Ack {
                                seq: a.seq,
                                kind: MessageKind::Arm,
                                status: AckStatus::Ok,
                            }),
                            &mut out,
                        )
                        .expect("encode");
                        sock.send_to(&out[..k], from).expect("send");
                    }
                    Message::Command(c) => cmds.push(c),
                    _ => {}
                }
            }
            // Telemetry on every datagram so the host has a position and a fresh seq to arm with.
            tel_seq += 1;
            let t = Telemetry {
                seq: tel_seq,
                time_us: 0,
                state: FirmwareState::Armed,
                last_command_seq: 0,
                positions: joints(&[0.0, 0.0, 0.2]).expect("fits"),
                velocities: joints(&[0.0; 3]).expect("fits"),
                efforts: joints(&[0.0; 3]).expect("fits"),
                ee: [0.0, 0.0, 0.2],
                gripper: 1.0,
                faults: Faults(0),
                bad_frames: 0,
                stale_commands: 0,
            };
            let k = encode_frame(&Message::Telemetry(t), &mut out).expect("encode");
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
        let (addr, _h) = fake_firmware(Some(Message::Ack(Ack {
            seq: 0,
            kind: MessageKind::Hello,
            status: AckStatus::VersionMismatch { ours: 7 },
        })));
        let e = Bridge::connect(&Endpoint::Udp(addr), BridgeConfig::default())
            .await
            .err()
            .expect("refused");
        assert!(
            matches!(e, BridgeError::FirmwareRefusedVersion { theirs: 7, .. }),
            "{e}"
        );
        let (addr, _h) = fake_firmware(Some(firmware_hello(PROTOCOL_VERSION + 1)));
        let e = Bridge::connect(&Endpoint::Udp(addr), BridgeConfig::default())
            .await
            .err()
            .expect("refused");
        assert!(e.to_string().contains("version mismatch"), "{e}");
        let (addr, _h) = fake_firmware(None);
        let cfg = BridgeConfig {
            retries: 2,
            reply_timeout: Duration::from_millis(30),
            ..BridgeConfig::default()
        };
        let e = Bridge::connect(&Endpoint::Udp(addr), cfg)
            .await
            .err()
            .expect("no answer");
        assert!(matches!(e, BridgeError::NoAnswer { tries: 2, .. }), "{e}");
    });
}

#[test]
fn limits_hold_on_the_wire() {
    let rt = runtime();
    let (addr, h) = fake_firmware(Some(firmware_hello(PROTOCOL_VERSION)));
    rt.block_on(async {
        let bridge = Bridge::connect(&Endpoint::Udp(addr), BridgeConfig::default())
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
    let mut prev_v = [0.0f32; 3];
    let mut prev_t: Option<u64> = None;
    for c in &cmds {
        assert!((0.0..=1.0).contains(&c.gripper));
        match &c.setpoint {
            Setpoint::EeVelocity(v) => {
                for i in 0..3 {
                    assert!(v[i].abs() <= l.ee_vel_max + 1e-6, "{v:?}");
                    if let Some(t) = prev_t {
                        let dt = ((c.time_us - t) as f32 * 1e-6).max(1e-3);
                        // The limiter times commands with its own clock; allow 0.5 ms of difference.
                        assert!(
                            (v[i] - prev_v[i]).abs() <= l.ee_acc_max * (dt + 5e-4) + 1e-5,
                            "accel {v:?} after {prev_v:?}"
                        );
                    }
                }
                prev_v = *v;
                prev_t = Some(c.time_us);
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
