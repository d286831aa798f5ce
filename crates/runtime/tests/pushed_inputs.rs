//! A learner's policy whose ONNX metadata declares its inputs (`stagewise.state_names`, `stagewise.pixels`,
//! `stagewise.embeddings`) passes the gate bound as a manifest policy is: state fields by name, frames checked
//! against the views the actor has, embeddings against its reward model's encoder. Malformed metadata is a
//! refusal with a reason, and the gate records nothing. Real ONNX Runtime; models/test/linear3x4 (action = its
//! three inputs, then 0) and pixel3v8 (action from the frames' channel means, then the gripper width) are
//! linear, so the tests compute the action they must give.

use crate::common::with_metadata;
use stagewise_core::{ErrorChain, Observation};
use stagewise_model::{
    OrtRuntime, PolicyEmbeddings, Provider, SessionOptions, EMBEDDINGS_KEY, PIXELS_KEY,
    STATE_NAMES_KEY,
};
use stagewise_runtime::{
    Actor, ActorConfig, Clock, FrameStream, GateConfig, Policy, PolicyError, PolicyGate,
    PolicySource, ProgressSource,
};
use stagewise_sim::{SimConfig, SimEnv, Task};
use stagewise_wire::PolicyMsg;
use std::path::Path;
use std::sync::atomic::AtomicBool;

fn rt() -> &'static OrtRuntime {
    OrtRuntime::init(None).expect("ONNX Runtime (run scripts/setup.sh)")
}

fn cpu() -> SessionOptions {
    SessionOptions {
        provider: Provider::Cpu,
        intra_threads: 1,
        tensorrt_cache: None,
    }
}

fn model_bytes(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../models/test")
            .join(name),
    )
    .expect("a test model (models/make_test_models.py)")
}

fn sim(size: u32) -> SimEnv {
    let mut cfg = SimConfig::new(Task::PickPlace).with_resolution(size, size);
    cfg.depth = false;
    cfg.max_steps = 6;
    SimEnv::new(cfg).expect("sim")
}

/// What a simulated actor rendering at `size` gives a policy (no reward model).
fn source(size: u32) -> PolicySource {
    use stagewise_core::Env;
    let spec = sim(size).spec().clone();
    PolicySource {
        views_origin: format!("the test simulator ({size}x{size})"),
        views: spec.views.clone(),
        ..PolicySource::state("the test simulator's state", spec.state.names.clone())
    }
}

fn gate(source: PolicySource) -> PolicyGate {
    PolicyGate::new(GateConfig {
        robot: "inputs-test".into(),
        key: None,
        max_bytes: 1 << 20,
        state_file: None,
        source,
        action_size: 4,
        opts: cpu(),
    })
    .expect("gate")
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-4)
}

/// The chain of a refusal, which must be a model refusal (the gate's last step).
fn refusal(r: Result<impl Sized, PolicyError>) -> String {
    let Err(e) = r else { panic!("accepted") };
    assert!(matches!(e, PolicyError::Model { .. }), "{e}");
    ErrorChain(&e).to_string()
}

const HAND: &str = r#"["ee_x", "ee_y", "ee_z", "gripper_width"]"#;
const PIXELS8: &str = r#"{"views": ["front", "side", "wrist"], "width": 8, "height": 8}"#;

/// A subset of the state in another order, by name: the action is those fields. Without the metadata the same
/// graph is a whole-state policy, as before, and refused for its width.
#[test]
fn a_pushed_policy_reads_the_state_fields_its_metadata_names() {
    let src = source(8);
    let names = src.state_names.clone();
    let mut g = gate(src);
    let bytes = with_metadata(
        &model_bytes("linear3x4.onnx"),
        &[(STATE_NAMES_KEY, r#"["gripper_width", "ee_z", "ee_x"]"#)],
    );
    let mut p = g.admit(&PolicyMsg::new(1, bytes), rt()).expect("accepted");
    assert_eq!(p.name(), "learner policy v1");
    assert_eq!(g.current_version(), Some(1));
    let state: Vec<f32> = (0..names.len()).map(|i| 0.05 + 0.1 * i as f32).collect();
    let at = |n: &str| state[names.iter().position(|x| x == n).expect(n)];
    let obs = Observation {
        step: 0,
        time: 0.0,
        views: Vec::new(),
        state: state.clone(),
    };
    let a = p.act(&[0], &[&obs]).expect("act");
    let want = [at("gripper_width"), at("ee_z"), at("ee_x"), 0.0];
    assert!(close(&a[0], &want), "{:?} vs {want:?}", a[0]);

    // No metadata: the whole state vector, as a push always was (this graph takes 3 values, the state has more).
    let t = refusal(g.admit(&PolicyMsg::new(2, model_bytes("linear3x4.onnx")), rt()));
    assert!(t.contains("inputs.state"), "{t}");
    assert_eq!(g.current_version(), Some(1));
}

/// What pixel3v8 does with `obs`.
fn pixel3v8(obs: &Observation, gripper: usize) -> [f32; 4] {
    let mut a = [0.0f32; 4];
    for (k, name) in ["front", "side", "wrist"].into_iter().enumerate() {
        let v = obs.view(name).expect("the view");
        let sum: f32 = v.rgb.pixels().map(|p| f32::from(p.0[k])).sum();
        a[k] = sum / (v.rgb.width() * v.rgb.height()) as f32 / 255.0 * 2.0 - 1.0;
    }
    a[3] = obs.state[gripper];
    a
}

/// A pixel policy pushed as bare bytes (metadata pixels and state names) is accepted by an actor rendering at its
/// size and acts on the frames; an actor rendering at another size refuses it, naming both sizes.
#[test]
fn a_pushed_pixel_policy_needs_the_actors_frames_at_its_size() {
    use stagewise_core::Env;
    let bytes = with_metadata(
        &model_bytes("pixel3v8.onnx"),
        &[(PIXELS_KEY, PIXELS8), (STATE_NAMES_KEY, HAND)],
    );
    let t = refusal(gate(source(32)).admit(&PolicyMsg::new(1, bytes.clone()), rt()));
    assert!(
        t.contains("at 8x8") && t.contains("gives it at 32x32") && t.contains("policy v1"),
        "{t}"
    );

    let src = source(8);
    let gripper = src
        .state_names
        .iter()
        .position(|n| n == "gripper_width")
        .expect("gripper_width");
    let mut g = gate(src);
    let mut p = g
        .admit(&PolicyMsg::new(1, bytes.clone()), rt())
        .expect("8x8");
    assert_eq!(p.pixels().map(|p| p.len()), Some(576));
    let mut env = sim(8);
    let obs = env.reset(3).expect("reset");
    let a = p.act(&[0], &[&obs]).expect("act");
    assert!(close(&a[0], &pixel3v8(&obs, gripper)), "{:?}", a[0]);
    assert!(a[0][0] > -0.99, "a rendered scene: {:?}", a[0]);

    // It drives an actor: episodes end, envs reset, every step fed its frames.
    let policy = g.admit(&PolicyMsg::new(2, bytes), rt()).expect("v2");
    let config = ActorConfig {
        robot: "inputs-test".into(),
        base_seed: 7,
        shaping: stagewise_core::ShapingConfig::new(0.99, 1.0).expect("shaping"),
        clock: Clock::Free,
        max_episodes: Some(3),
        max_steps: None,
        frames: FrameStream::Off,
    };
    let envs: Vec<Box<dyn Env>> = vec![Box::new(sim(8)), Box::new(sim(8))];
    let mut actor =
        Actor::new(envs, ProgressSource::Oracle, Box::new(policy), config).expect("actor");
    let stats = actor.run(&AtomicBool::new(false), |_, _| {}).expect("run");
    assert!(stats.episodes >= 3, "{stats:?}");
}

/// A policy on a reward model's embeddings: the run's encoder must be the one it declares (sha256, views, size).
#[test]
fn a_pushed_embedding_policy_needs_the_runs_encoder() {
    let enc = |c: char| PolicyEmbeddings {
        encoder_sha256: c.to_string().repeat(64),
        views: 1,
        size: 1,
    };
    let declared = format!(
        r#"{{"encoder_sha256": "{}", "views": 1, "size": 1}}"#,
        "a".repeat(64)
    );
    let bytes = with_metadata(
        &model_bytes("linear3x4.onnx"),
        &[
            (EMBEDDINGS_KEY, declared.as_str()),
            (STATE_NAMES_KEY, r#"["ee_y", "ee_x"]"#),
        ],
    );
    let with = |e: Option<PolicyEmbeddings>| PolicySource {
        embeddings_origin: "the test reward model".into(),
        embeddings: e,
        ..source(8)
    };
    let t = refusal(gate(with(None)).admit(&PolicyMsg::new(1, bytes.clone()), rt()));
    assert!(
        t.contains("encoder aaaaaaaaaaaa (1 views x 1)") && t.contains("computes none"),
        "{t}"
    );
    let t = refusal(gate(with(Some(enc('b')))).admit(&PolicyMsg::new(1, bytes.clone()), rt()));
    assert!(t.contains("gives those of encoder bbbbbbbbbbbb"), "{t}");

    let src = with(Some(enc('a')));
    let names = src.state_names.clone();
    let mut p = gate(src)
        .admit(&PolicyMsg::new(1, bytes), rt())
        .expect("the same encoder");
    assert!(p.embeddings().is_some());
    let state: Vec<f32> = (0..names.len()).map(|i| 0.3 + 0.01 * i as f32).collect();
    let at = |n: &str| state[names.iter().position(|x| x == n).expect(n)];
    let obs = Observation {
        step: 0,
        time: 0.0,
        views: Vec::new(),
        state: state.clone(),
    };
    let a = p.act_embedded(&[0], &[&obs], &[&[0.25]]).expect("act");
    assert!(
        close(&a[0], &[0.25, at("ee_y"), at("ee_x"), 0.0]),
        "{:?}",
        a[0]
    );
}

/// Metadata entries, then what the refusal must name: the key (or field) and the reason.
type Case<'a> = (Vec<(&'a str, String)>, &'a str, &'a str);

/// Malformed metadata is a refusal with the key and the reason, never a panic; nothing is recorded, and a good
/// policy still passes afterwards.
#[test]
fn malformed_input_metadata_is_refused_with_a_reason() {
    let mut g = gate(source(8));
    let sha = "a".repeat(64);
    let emb = format!(r#"{{"encoder_sha256": "{sha}", "views": 1, "size": 1}}"#);
    let cases: Vec<Case> = vec![
        (
            vec![(STATE_NAMES_KEY, "ee_x, ee_y".into())],
            STATE_NAMES_KEY,
            "is not a JSON list",
        ),
        (
            vec![(STATE_NAMES_KEY, r#"["ee_x", "ee_x"]"#.into())],
            STATE_NAMES_KEY,
            "unique",
        ),
        (
            vec![(STATE_NAMES_KEY, r#"["ee_x", ""]"#.into())],
            STATE_NAMES_KEY,
            "non-empty",
        ),
        (
            vec![(STATE_NAMES_KEY, r#"["ee_x", "cube_x", "ee_y"]"#.into())],
            "cube_x",
            "does not have",
        ),
        (
            vec![(PIXELS_KEY, "{views: front}".into())],
            PIXELS_KEY,
            "is not a JSON object",
        ),
        (
            vec![(
                PIXELS_KEY,
                r#"{"views": ["front"], "width": 8, "height": 8, "depth": true}"#.into(),
            )],
            PIXELS_KEY,
            "unknown field `depth`",
        ),
        (
            vec![(
                PIXELS_KEY,
                r#"{"views": ["front"], "width": 0, "height": 8}"#.into(),
            )],
            PIXELS_KEY,
            "must be in 1..=",
        ),
        (
            vec![(
                PIXELS_KEY,
                r#"{"views": ["front"], "width": 5000, "height": 8}"#.into(),
            )],
            PIXELS_KEY,
            "must be in 1..=",
        ),
        (
            vec![(
                PIXELS_KEY,
                r#"{"views": ["front"], "width": -8, "height": 8}"#.into(),
            )],
            PIXELS_KEY,
            "is not a JSON object",
        ),
        (
            vec![(
                PIXELS_KEY,
                r#"{"views": [], "width": 8, "height": 8}"#.into(),
            )],
            PIXELS_KEY,
            "0 views",
        ),
        (
            vec![(
                PIXELS_KEY,
                r#"{"views": ["front", "front"], "width": 8, "height": 8}"#.into(),
            )],
            PIXELS_KEY,
            "unique",
        ),
        (
            vec![(PIXELS_KEY, PIXELS8.into()), (EMBEDDINGS_KEY, emb.clone())],
            PIXELS_KEY,
            "not both",
        ),
        (
            vec![(
                EMBEDDINGS_KEY,
                r#"{"encoder_sha256": "abc", "views": 1, "size": 1}"#.into(),
            )],
            EMBEDDINGS_KEY,
            "64 hexadecimal digits",
        ),
        (
            vec![(
                EMBEDDINGS_KEY,
                format!(r#"{{"encoder_sha256": "{sha}", "views": 0, "size": 1}}"#),
            )],
            EMBEDDINGS_KEY,
            "must be in 1..=",
        ),
        (
            vec![("stagewise.pixel", PIXELS8.into())],
            "stagewise.pixel",
            "unknown key",
        ),
        // Well-formed, but the graph (3 inputs) does not take frames of three 8x8 views and four fields.
        (
            vec![(PIXELS_KEY, PIXELS8.into()), (STATE_NAMES_KEY, HAND.into())],
            PIXELS_KEY,
            "= 580 values",
        ),
    ];
    for (version, (entries, key, reason)) in (1u64..).zip(&cases) {
        let entries: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let bytes = with_metadata(&model_bytes("linear3x4.onnx"), &entries);
        let t = refusal(g.admit(&PolicyMsg::new(version, bytes), rt()));
        assert!(
            t.contains(key) && t.contains(reason) && t.contains(&format!("policy v{version}")),
            "{entries:?}: {t}"
        );
    }
    assert_eq!(
        g.current_version(),
        None,
        "a refused policy is never recorded"
    );
    let good = with_metadata(
        &model_bytes("linear3x4.onnx"),
        &[(STATE_NAMES_KEY, r#"["ee_x", "ee_y", "ee_z"]"#)],
    );
    g.admit(&PolicyMsg::new(99, good), rt())
        .expect("a good one");
    assert_eq!(g.current_version(), Some(99));
}

/// The views a source offers decide, not the observation: a source with no cameras refuses a pixel policy.
#[test]
fn a_source_without_cameras_refuses_pixel_policies() {
    let src = PolicySource::state("a state-only source", source(8).state_names);
    let bytes = with_metadata(
        &model_bytes("pixel3v8.onnx"),
        &[(PIXELS_KEY, PIXELS8), (STATE_NAMES_KEY, HAND)],
    );
    let t = refusal(gate(src).admit(&PolicyMsg::new(1, bytes), rt()));
    assert!(t.contains("has no such view (it has: none)"), "{t}");
}
