//! The messages behind the committed sample files in `tests/samples/` (one `<name>.msgpack` per entry). The
//! samples were written from this code by the wire encoder as it stood before `stagewise-wire` existed (that of
//! `stagewise-stream`, commit 80592d8); `samples.rs` checks that today's encoder writes exactly those bytes and
//! that the decoder reads them back.

use stagewise_wire as w;

fn sample_frame(width: u32, height: u32, seed: u8) -> stagewise_core::Frame {
    stagewise_core::Frame::from_fn(width, height, |x, y| {
        image::Rgb([
            (x as u8).wrapping_mul(17) ^ seed,
            (y as u8).wrapping_mul(29),
            seed.wrapping_mul(3),
        ])
    })
}

fn sample_observation(step: u64) -> stagewise_core::Observation {
    let mut wrist = stagewise_core::View::new("wrist", sample_frame(4, 3, 2));
    wrist.depth = Some((0..12).map(|i| i as f32 * 0.25).collect());
    stagewise_core::Observation {
        step,
        time: step as f64 * 0.05,
        views: vec![
            stagewise_core::View::new("front", sample_frame(4, 3, 1)),
            wrist,
        ],
        state: vec![0.1, -0.2, 0.3, f32::INFINITY],
    }
}

fn sample_spec() -> stagewise_core::EnvSpec {
    stagewise_core::EnvSpec {
        task: "pick-place".into(),
        action: stagewise_core::BoxSpec {
            names: vec!["dx".into(), "dy".into()],
            low: vec![-1.0, -1.0],
            high: vec![1.0, 1.0],
        },
        state: stagewise_core::BoxSpec {
            names: vec!["ee_x".into()],
            low: vec![-3.0],
            high: vec![3.0],
        },
        views: vec![stagewise_core::ViewSpec {
            name: "front".into(),
            width: 4,
            height: 3,
        }],
        stage_names: vec!["reach".into(), "grasp".into()],
        control_hz: 20.0,
        max_steps: 200,
    }
}

fn sample_transition(with_obs: bool) -> w::TransitionMsg {
    let t = stagewise_core::Transition {
        env: 3,
        episode: 7,
        step: 300,
        action: vec![0.5, -1.0, 0.25],
        reward: 0.125,
        task_reward: 0.0,
        phi: 0.4,
        phi_next: 0.45,
        gamma: 0.99,
        shaping_scale: 1.0,
        terminated: false,
        truncated: true,
        success: false,
        stage: Some(2),
    };
    let mut m = w::TransitionMsg::from_transition("arm-0", &t);
    m.stamp_ns = 1_764_500_000_123_456_789;
    if with_obs {
        m = m
            .with_obs(w::ObservationMsg::from_observation(&sample_observation(
                300,
            )))
            .with_next_obs(w::ObservationMsg::from_observation(&sample_observation(
                301,
            )));
    } else {
        m.stage = None;
    }
    m
}

/// `(file stem, encoded message)` for every sample.
pub fn sample_messages() -> Vec<(&'static str, Vec<u8>)> {
    let enc = |r: Result<Vec<u8>, w::WireError>| r.expect("encode");
    let mut progress = w::ProgressMsg::new(
        "arm-0",
        1,
        70_000,
        65_536,
        &stagewise_core::Progress {
            stage: 1,
            stage_probs: vec![0.1, 0.7, 0.2],
            tau: 0.5,
            phi: 0.55,
        },
    );
    progress.stamp_ns = 42;
    let episode = w::EpisodeMsg {
        schema: w::Schema,
        kind: Default::default(),
        robot: "arm-0".into(),
        env: 0,
        episode: 9,
        episode_return: 3.5,
        task_return: 1.0,
        length: 120,
        success: true,
        terminated: true,
        truncated: false,
        final_phi: 0.97,
        stamp_ns: 4_294_967_296,
    };
    let policy = w::PolicyMsg::new(5, b"not really onnx".to_vec());
    let signed = w::PolicyMsg::new(6, vec![0u8; 300]).with_signature((0..64).collect());
    let mut reset_reply = w::ResetReply::ok(
        &sample_spec(),
        w::ObservationMsg::from_observation(&sample_observation(0)),
    );
    reset_reply.reward = Some(w::RewardSpecMsg {
        source: "model".into(),
        model: Some("models/pick-place/pick-place-progress.toml".into()),
        gamma: 0.98,
        shaping_scale: 10.0,
        ..Default::default()
    });
    reset_reply.phi = Some(0.0625);
    let step_reply = {
        let mut r = w::StepReply::ok(stagewise_core::StepResult {
            obs: sample_observation(1),
            reward: 0.5,
            terminated: false,
            truncated: false,
            info: stagewise_core::StepInfo {
                stage: Some(1),
                progress_oracle: Some(0.25),
                success: false,
                action_clipped: true,
            },
        });
        r.task_reward = Some(0.0);
        r.phi = Some(0.25);
        r
    };
    vec![
        ("transition", enc(w::encode(&sample_transition(false)))),
        ("transition_obs", enc(w::encode(&sample_transition(true)))),
        ("progress", enc(w::encode(&progress))),
        ("episode", enc(w::encode(&episode))),
        ("policy", enc(w::encode(&policy))),
        ("policy_signed", enc(w::encode(&signed))),
        (
            "reset_request",
            enc(w::encode(&w::ResetRequest::new(Some(7)))),
        ),
        (
            "reset_request_nil",
            enc(w::encode(&w::ResetRequest::new(None))),
        ),
        ("reset_reply", enc(w::encode(&reset_reply))),
        (
            "reset_reply_error",
            enc(w::encode(&w::ResetReply::error("no such task"))),
        ),
        (
            "step_request",
            enc(w::encode(&w::StepRequest::new(vec![0.5, 1.0, -2.0]))),
        ),
        ("step_reply", enc(w::encode(&step_reply))),
        (
            "step_reply_error",
            enc(w::encode(&w::StepReply::error("env closed"))),
        ),
    ]
}
