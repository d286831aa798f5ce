//! Host limits: clamping and rejection before anything is sent.

use stagewise_bridge::*;
use stagewise_protocol::{joints, Faults, FirmwareState, Setpoint, Telemetry};

fn tel(ee: [f32; 3]) -> Telemetry {
    Telemetry {
        seq: 1,
        time_us: 0,
        state: FirmwareState::Armed,
        last_command_seq: 0,
        positions: joints(&ee).expect("fits"),
        velocities: joints(&[0.0; 3]).expect("fits"),
        efforts: joints(&[0.0; 3]).expect("fits"),
        ee,
        gripper: 0.5,
        faults: Faults(0),
        bad_frames: 0,
        stale_commands: 0,
        rejected_frames: 0,
    }
}

fn ee(sp: &Setpoint) -> [f32; 3] {
    match sp {
        Setpoint::EeVelocity(v) => *v,
        other => panic!("expected a velocity, got {other:?}"),
    }
}

fn q(sp: &Setpoint) -> Vec<f32> {
    match sp {
        Setpoint::Joints(q) => q.to_vec(),
        other => panic!("expected joints, got {other:?}"),
    }
}

#[test]
fn velocity_and_acceleration_are_clamped() {
    let l = Limits::cartesian_default();
    let mut st = LimitState::default();
    let t = tel([0.0, 0.0, 0.2]);
    // From rest, 20 ms: acceleration 3 m/s^2 allows 0.06 m/s.
    let (sp, _, hits) = l
        .apply(
            &mut st,
            &Setpoint::EeVelocity([1.0, 0.0, 0.0]),
            0.5,
            Some(&t),
            Some(0.02),
        )
        .expect("clamps");
    assert!((ee(&sp)[0] - 0.06).abs() < 1e-6, "{sp:?}");
    assert!(hits.iter().any(|h| h.kind == LimitKind::Velocity));
    assert!(hits.iter().any(|h| h.kind == LimitKind::Acceleration));
    // Ramp: never above 0.3 m/s.
    let mut v = ee(&sp)[0];
    for _ in 0..100 {
        let (sp, _, _) = l
            .apply(
                &mut st,
                &Setpoint::EeVelocity([1.0, 0.0, 0.0]),
                0.5,
                Some(&t),
                Some(0.02),
            )
            .expect("ok");
        let x = ee(&sp)[0];
        assert!(x - v <= 0.06 + 1e-6);
        v = x;
    }
    assert!((v - 0.3).abs() < 1e-6);
}

#[test]
fn workspace_box_stops_outward_motion() {
    let l = Limits::cartesian_default();
    let mut st = LimitState::default();
    let t = tel([0.0, 0.0, 0.023]); // 1 mm above the floor of the box
    let (sp, _, hits) = l
        .apply(
            &mut st,
            &Setpoint::EeVelocity([0.0, 0.0, -0.05]),
            0.5,
            Some(&t),
            Some(0.05),
        )
        .expect("clamps");
    // In 50 ms it may go down at most 1 mm: 0.02 m/s.
    assert!((ee(&sp)[2] + 0.02).abs() < 1e-4, "{sp:?}");
    assert!(hits.iter().any(|h| h.kind == LimitKind::Workspace));
}

#[test]
fn joint_targets_are_clamped_to_position_and_speed() {
    let l = Limits::cartesian_default();
    let mut st = LimitState::default();
    let t = tel([0.0, 0.0, 0.2]);
    let target = Setpoint::Joints(joints(&[9.0, 0.0, 0.2]).expect("fits"));
    let (sp, _, hits) = l
        .apply(&mut st, &target, 0.5, Some(&t), Some(0.01))
        .expect("clamps");
    // Acceleration from rest: 3 m/s^2 * 10 ms = 0.03 m/s -> 0.3 mm this period.
    assert!((q(&sp)[0] - 0.0003).abs() < 1e-6, "{sp:?}");
    assert!(hits.iter().any(|h| h.kind == LimitKind::Position));
    for _ in 0..1000 {
        l.apply(&mut st, &target, 0.5, Some(&t), Some(0.01))
            .expect("ok");
    }
    let (sp, _, _) = l
        .apply(&mut st, &target, 0.5, Some(&t), Some(0.01))
        .expect("ok");
    assert!(
        (q(&sp)[0] - 0.52).abs() < 1e-4,
        "ends at the position limit: {sp:?}"
    );
}

#[test]
fn reject_mode_refuses_and_keeps_history() {
    let mut l = Limits::cartesian_default();
    l.mode = LimitMode::Reject;
    let mut st = LimitState::default();
    let t = tel([0.0, 0.0, 0.2]);
    let e = l
        .apply(
            &mut st,
            &Setpoint::EeVelocity([0.5, 0.0, 0.0]),
            0.5,
            Some(&t),
            Some(0.02),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            LimitError::Violation(LimitHit {
                kind: LimitKind::Velocity,
                ..
            })
        ),
        "{e}"
    );
    let (sp, _, hits) = l
        .apply(
            &mut st,
            &Setpoint::EeVelocity([0.05, 0.0, 0.0]),
            0.5,
            Some(&t),
            Some(0.02),
        )
        .expect("ok");
    assert!(hits.is_empty());
    assert_eq!(ee(&sp), [0.05, 0.0, 0.0]);
}

#[test]
fn non_finite_and_wrong_sizes_are_errors() {
    let l = Limits::cartesian_default();
    let mut st = LimitState::default();
    let e = l
        .apply(
            &mut st,
            &Setpoint::EeVelocity([f32::NAN, 0.0, 0.0]),
            0.5,
            None,
            Some(0.02),
        )
        .unwrap_err();
    assert!(e.to_string().contains("finite"), "{e}");
    let e = l
        .apply(
            &mut st,
            &Setpoint::Joints(joints(&[0.0; 2]).expect("fits")),
            0.5,
            None,
            Some(0.02),
        )
        .unwrap_err();
    assert_eq!(
        e,
        LimitError::JointCount {
            expected: 3,
            got: 2
        }
    );
    assert!(l
        .apply(
            &mut st,
            &Setpoint::EeVelocity([0.0; 3]),
            f32::INFINITY,
            None,
            Some(0.02)
        )
        .is_err());
}

#[test]
fn tool_tip_speed_and_acceleration_are_vector_norms() {
    let l = Limits::cartesian_default();
    let mut st = LimitState::default();
    let t = tel([0.0, 0.0, 0.2]);
    let norm = |v: [f32; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let mut prev = [0.0f32; 3];
    let mut last = prev;
    for _ in 0..50 {
        let (sp, _, _) = l
            .apply(
                &mut st,
                &Setpoint::EeVelocity([1.0, 1.0, -1.0]),
                0.5,
                Some(&t),
                Some(0.02),
            )
            .expect("clamps");
        let v = ee(&sp);
        let dv = [v[0] - prev[0], v[1] - prev[1], v[2] - prev[2]];
        assert!(norm(dv) <= 3.0 * 0.02 + 1e-5, "acceleration {dv:?}");
        assert!(norm(v) <= 0.3 + 1e-5, "speed {v:?}");
        prev = v;
        last = v;
    }
    // Full speed along the diagonal: 0.3 m/s in total, not 0.3 per axis (0.52).
    assert!((norm(last) - 0.3).abs() < 1e-5, "{last:?}");
    assert!((last[0] - last[1]).abs() < 1e-6 && (last[0] + last[2]).abs() < 1e-6);
    // Cartesian joints: the same speed limit on the first three joints' velocity.
    let mut st = LimitState::default();
    let target = Setpoint::Joints(joints(&[0.5, 0.5, 0.35]).expect("fits"));
    let mut p = [0.0, 0.0, 0.2];
    for _ in 0..50 {
        let (sp, _, _) = l
            .apply(&mut st, &target, 0.5, Some(&t), Some(0.02))
            .expect("clamps");
        let q = q(&sp);
        let d = [q[0] - p[0], q[1] - p[1], q[2] - p[2]];
        assert!(norm(d) <= 0.3 * 0.02 + 1e-5, "joint step {d:?}");
        p = [q[0], q[1], q[2]];
    }
}

#[test]
fn a_pause_never_allows_a_jump_to_full_speed() {
    let l = Limits::cartesian_default();
    let mut st = LimitState::default();
    let t = tel([0.0, 0.0, 0.2]);
    for _ in 0..20 {
        l.apply(
            &mut st,
            &Setpoint::EeVelocity([0.3, 0.0, 0.0]),
            0.5,
            Some(&t),
            Some(0.02),
        )
        .expect("ok");
    }
    // Ten seconds of nothing, then full speed the other way: the robot stopped meanwhile (command timeout),
    // and the interval counts at most max_dt.
    let (sp, _, hits) = l
        .apply(
            &mut st,
            &Setpoint::EeVelocity([-0.3, 0.0, 0.0]),
            0.5,
            Some(&t),
            Some(10.0),
        )
        .expect("clamps");
    assert!(
        (ee(&sp)[0] + l.ee_acc_max * l.max_dt).abs() < 1e-5,
        "from rest, at most acc * max_dt: {sp:?}"
    );
    assert!(hits.iter().any(|h| h.kind == LimitKind::Acceleration));
    // The first command after a reset (no interval) starts from rest over 1 ms.
    let mut st = LimitState::default();
    let (sp, _, _) = l
        .apply(
            &mut st,
            &Setpoint::EeVelocity([0.3, 0.0, 0.0]),
            0.5,
            Some(&t),
            None,
        )
        .expect("clamps");
    assert!((ee(&sp)[0] - 3.0e-3).abs() < 1e-6, "{sp:?}");
    // Joint targets after a pause move at most vel * max_dt.
    let mut st = LimitState::default();
    let target = Setpoint::Joints(joints(&[0.5, 0.0, 0.2]).expect("fits"));
    l.apply(&mut st, &target, 0.5, Some(&t), Some(0.02))
        .expect("ok");
    let (sp, _, _) = l
        .apply(&mut st, &target, 0.5, Some(&t), Some(30.0))
        .expect("ok");
    assert!(q(&sp)[0] <= 0.3 * l.max_dt + 1e-4, "{sp:?}");
}

#[test]
fn endpoints_parse() {
    assert_eq!(
        "udp://127.0.0.1:9100".parse::<Endpoint>().expect("udp"),
        Endpoint::Udp(([127, 0, 0, 1], 9100).into())
    );
    assert_eq!(
        "serial:///dev/ttyACM0@115200"
            .parse::<Endpoint>()
            .expect("serial"),
        Endpoint::Serial {
            path: "/dev/ttyACM0".into(),
            baud: 115_200
        }
    );
    assert!("tcp://x".parse::<Endpoint>().is_err());
    assert!("udp://nope".parse::<Endpoint>().is_err());
}

#[test]
fn v4l2_reports_clearly_that_it_is_missing() {
    let e = V4l2Camera::open(std::path::Path::new("/dev/video0"), 64, 64)
        .err()
        .expect("stub");
    assert!(e.to_string().contains("v4l2"), "{e}");
}

#[test]
fn image_dir_camera_cycles_and_checks_sizes() {
    let dir = tempfile::tempdir().expect("tempdir");
    for i in 0..3u8 {
        image::RgbImage::from_pixel(8, 6, image::Rgb([i, 0, 0]))
            .save(dir.path().join(format!("f{i}.png")))
            .expect("save");
    }
    let mut cam = ImageDirCamera::open("front", dir.path()).expect("opens");
    assert_eq!((cam.spec().width, cam.spec().height), (8, 6));
    assert_eq!(cam.capture(4).expect("frame").rgb.get_pixel(0, 0)[0], 1);
    image::RgbImage::new(4, 4)
        .save(dir.path().join("f3.png"))
        .expect("save");
    let mut cam = ImageDirCamera::open("front", dir.path()).expect("opens");
    assert!(matches!(cam.capture(3), Err(CameraError::Size { .. })));
    let empty = tempfile::tempdir().expect("tempdir");
    assert!(matches!(
        ImageDirCamera::open("x", empty.path()),
        Err(CameraError::Empty { .. })
    ));
}
