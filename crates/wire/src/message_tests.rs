//! Unit tests of the wire format: round trips, foreign (hand-built) encodings, malformed bytes, schema checks.

use super::*;
use crate::tensor::{Borrowed, DType, Tensor, TensorMap};
use proptest::prelude::*;
use rmpv::Value;
use stagewise_core::{Frame, Observation, View};

fn frame(w: u32, h: u32, seed: u8) -> Frame {
    Frame::from_fn(w, h, |x, y| {
        image::Rgb([x as u8 ^ seed, y as u8, seed.wrapping_mul(3)])
    })
}

fn observation(step: u64) -> Observation {
    let mut wrist = View::new("wrist", frame(8, 6, 2));
    wrist.depth = Some((0..48).map(|i| i as f32 * 0.01).collect());
    Observation {
        step,
        time: step as f64 * 0.05,
        views: vec![
            View::new("front", frame(8, 6, 1)),
            wrist,
            View::new("top", frame(4, 4, 3)),
        ],
        state: vec![0.1, -0.2, 0.3, f32::INFINITY],
    }
}

fn transition() -> TransitionMsg {
    let t = Transition {
        env: 3,
        episode: 7,
        step: 11,
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
    TransitionMsg::from_transition("arm-0", &t)
        .with_obs(ObservationMsg::from_observation(&observation(11)))
        .with_next_obs(ObservationMsg::from_observation(&observation(12)))
}

fn progress() -> ProgressMsg {
    let p = Progress {
        stage: 1,
        stage_probs: vec![0.1, 0.7, 0.2],
        tau: 0.5,
        phi: 0.55,
    };
    ProgressMsg::new("arm-0", 1, 2, 3, &p)
}

fn episode() -> EpisodeMsg {
    EpisodeMsg {
        schema: Schema,
        kind: kind::Episode,
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
        stamp_ns: 42,
    }
}

fn spec() -> stagewise_core::EnvSpec {
    stagewise_core::EnvSpec {
        task: "pick-place".into(),
        action: BoxSpec {
            names: vec!["dx".into(), "dy".into()],
            low: vec![-1.0, -1.0],
            high: vec![1.0, 1.0],
        },
        state: BoxSpec {
            names: vec!["q0".into()],
            low: vec![-3.0],
            high: vec![3.0],
        },
        views: vec![ViewSpec {
            name: "front".into(),
            width: 8,
            height: 6,
        }],
        stage_names: vec!["reach".into(), "grasp".into()],
        control_hz: 20.0,
        max_steps: 200,
    }
}

fn steps() -> StepsMsg {
    let mut m = StepsMsg::new("arm-0", 1, 4, 10);
    for i in 0..3 {
        m.action.push(vec![0.1 * i as f32, -0.5]);
        m.reward.push(0.01 * f64::from(i));
        m.task_reward.push(0.0);
        m.phi.push(0.2 + 0.1 * f64::from(i));
        m.success.push(i == 2);
        m.oracle_phi.push(0.3 + 0.1 * i as f32);
    }
    m.stamp_ns = 1_700_000_000_000_000_000;
    m.next_obs = Some(ObservationMsg::from_observation_rgb(&observation(13)));
    m
}

fn round_trip<M: WireMessage + PartialEq + std::fmt::Debug>(m: &M) -> Vec<u8> {
    let bytes = encode(m).expect("encode");
    let back: M = decode(&bytes).expect("decode");
    assert_eq!(&back, m);
    bytes
}

#[test]
fn every_message_round_trips() {
    let t = transition();
    round_trip(&t);
    let obs = t
        .next_obs
        .as_ref()
        .expect("obs")
        .to_observation()
        .expect("obs");
    assert_eq!(obs, observation(12));
    assert_eq!(t.to_transition().stage, Some(2));
    round_trip(&progress());
    assert_eq!(progress().to_progress().stage_probs, vec![0.1, 0.7, 0.2]);
    round_trip(&episode());
    round_trip(&steps());
    round_trip(&PolicyMsg::new(4, vec![1, 2, 3, 4, 5]));
    round_trip(&PolicyMsg::new(5, vec![9; 100]).with_signature(vec![7; 64]));
    round_trip(&ResetRequest::new(Some(17)));
    round_trip(&ResetRequest::new(None));
    round_trip(&ResetReply::ok(
        &spec(),
        ObservationMsg::from_observation(&observation(0)),
    ));
    round_trip(&ResetReply::error("boom"));
    round_trip(&StepRequest::new(vec![0.5, -0.5]));
    let step = StepReply::ok(stagewise_core::StepResult {
        obs: observation(1),
        reward: 1.0,
        terminated: true,
        truncated: false,
        info: stagewise_core::StepInfo {
            stage: Some(1),
            progress_oracle: Some(0.5),
            success: true,
            action_clipped: true,
        },
    });
    round_trip(&step);
    round_trip(&StepReply::error("step before reset"));
    let spec_back: stagewise_core::EnvSpec = (&EnvSpecMsg::from(&spec())).into();
    assert_eq!(spec_back, spec());
}

fn to_value(bytes: &[u8]) -> Value {
    let mut r = bytes;
    rmpv::decode::read_value(&mut r).expect("msgpack value")
}

fn from_value(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v).expect("encode value");
    out
}

/// `bytes` with the bytes at the `flips` positions overwritten, then cut at `cut` (the proptests' mutations).
fn spoil(
    mut bytes: Vec<u8>,
    flips: Vec<(prop::sample::Index, u8)>,
    cut: prop::sample::Index,
) -> Vec<u8> {
    for (i, b) in flips {
        let i = i.index(bytes.len());
        bytes[i] = b;
    }
    bytes.truncate(cut.index(bytes.len() + 1));
    bytes
}

fn get<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.as_map()
        .and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some(key)))
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no key {key} in {v}"))
}

/// The string keys of a map value, in order.
fn map_keys(v: &Value) -> Vec<&str> {
    v.as_map()
        .expect("a map")
        .iter()
        .filter_map(|(k, _)| k.as_str())
        .collect()
}

fn set(v: &mut Value, key: &str, new: Value) {
    if let Value::Map(m) = v {
        if let Some(slot) = m.iter_mut().find(|(k, _)| k.as_str() == Some(key)) {
            slot.1 = new;
            return;
        }
        m.push((Value::from(key), new));
    }
}

fn remove(v: &mut Value, key: &str) {
    if let Value::Map(m) = v {
        m.retain(|(k, _)| k.as_str() != Some(key));
    }
}

#[test]
fn layout_is_what_docs_wire_md_says() {
    let v = to_value(&encode(&transition()).expect("encode"));
    let map = v.as_map().expect("a map");
    let keys: Vec<&str> = map.iter().filter_map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "schema",
            "kind",
            "robot",
            "env",
            "episode",
            "step",
            "action",
            "reward",
            "task_reward",
            "phi",
            "phi_next",
            "gamma",
            "shaping_scale",
            "terminated",
            "truncated",
            "success",
            "stage",
            "stamp_ns",
            "obs",
            "next_obs"
        ]
    );
    assert_eq!(get(&v, "schema").as_u64(), Some(1));
    assert_eq!(get(&v, "kind").as_str(), Some("transition"));
    assert!(matches!(get(&v, "action"), Value::Array(a) if matches!(a[0], Value::F32(_))));
    assert!(matches!(get(&v, "reward"), Value::F64(_)));
    let obs = get(&v, "obs");
    let images = get(obs, "images").as_map().expect("images map");
    let names: Vec<&str> = images.iter().filter_map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["front", "wrist", "top"], "view order is kept");
    let front = &images[0].1;
    assert_eq!(get(front, "dtype").as_str(), Some("uint8"));
    let shape: Vec<u64> = get(front, "shape")
        .as_array()
        .expect("shape")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(shape, [6, 8, 3]);
    assert!(
        matches!(get(front, "data"), Value::Binary(b) if b.len() == 144),
        "tensor data is msgpack bin"
    );
    let depth = get(obs, "depth").as_map().expect("depth map");
    assert_eq!(depth.len(), 1);
    assert_eq!(get(&depth[0].1, "dtype").as_str(), Some("float32"));
    let state = get(obs, "state");
    let Value::Binary(b) = get(state, "data") else {
        panic!("state data is bin")
    };
    assert_eq!(&b[..4], &0.1f32.to_le_bytes(), "little-endian");
    let ep = to_value(&encode(&episode()).expect("encode"));
    assert_eq!(get(&ep, "return").as_f64(), Some(3.5));
    let st = to_value(&encode(&steps()).expect("encode"));
    let keys = map_keys(&st);
    assert_eq!(
        keys,
        [
            "schema",
            "kind",
            "robot",
            "env",
            "episode",
            "step",
            "action",
            "reward",
            "task_reward",
            "phi",
            "success",
            "oracle_phi",
            "stage",
            "stage_probs",
            "stamp_ns",
            "next_obs"
        ]
    );
    assert!(matches!(get(&st, "phi"), Value::Array(a) if matches!(a[0], Value::F64(_))));
    assert!(matches!(get(&st, "oracle_phi"), Value::Array(a) if matches!(a[0], Value::F32(_))));
    let pol = to_value(&encode(&PolicyMsg::new(1, vec![1, 2])).expect("encode"));
    assert!(matches!(get(&pol, "onnx"), Value::Binary(_)));
    assert!(get(&pol, "signature").is_nil());
}

/// `oracle_phi` (the simulator's ground-truth progress) is a float32 after `stage` when the sender has it, and
/// absent otherwise: a message without it keeps the bytes of the format before the field, and a message with it
/// (or with it nil, as a Python sender may write) decodes.
#[test]
fn oracle_phi_is_optional_both_ways() {
    let plain = encode(&transition()).expect("encode");
    assert!(
        to_value(&plain)
            .as_map()
            .expect("map")
            .iter()
            .all(|(k, _)| k.as_str() != Some("oracle_phi")),
        "no oracle: no key"
    );
    let with = transition().with_oracle_phi(Some(0.625));
    let v = to_value(&round_trip(&with));
    let keys = map_keys(&v);
    let at = keys
        .iter()
        .position(|k| *k == "oracle_phi")
        .expect("oracle_phi key");
    assert_eq!(keys[at - 1], "stage");
    assert!(matches!(get(&v, "oracle_phi"), Value::F32(x) if *x == 0.625));
    // An old message (no key) decodes to None; an explicit nil too; a float64 (Python) to its value.
    let old: TransitionMsg = decode(&plain).expect("old format");
    assert_eq!(old.oracle_phi, None);
    let mut nil = v.clone();
    set(&mut nil, "oracle_phi", Value::Nil);
    let got: TransitionMsg = decode(&from_value(&nil)).expect("nil oracle_phi");
    assert_eq!(got.oracle_phi, None);
    let mut f64v = v.clone();
    set(&mut f64v, "oracle_phi", Value::F64(0.25));
    let f64_bytes = from_value(&f64v);
    let got: TransitionMsg<Borrowed> = decode(&f64_bytes).expect("float64 oracle_phi");
    assert_eq!(got.into_owned().oracle_phi, Some(0.25));
    assert_malformed_transition(v, "oracle_phi", Value::from("high"));
}

/// A transition whose `key` holds a value of the wrong type does not decode: malformed, never a panic.
fn assert_malformed_transition(mut v: Value, key: &str, wrong: Value) {
    set(&mut v, key, wrong);
    let e = decode::<TransitionMsg>(&from_value(&v)).unwrap_err();
    assert!(
        matches!(
            e,
            WireError::Malformed {
                kind: "transition",
                ..
            }
        ),
        "{key}: {e}"
    );
}

/// The sha256 of the shipped push-target model (models/push-target/push-target-progress.toml), as a manifest
/// writes it.
const MODEL_SHA: &str = "6e500f4c5c7c6ecf7ad1c5682f8fd92ed43a724761b3f46f64d7539c688d310a";

/// `reward_model` (the sha256 of the reward model that shaped the reward) is a str after `oracle_phi` when the
/// reward is a model's and absent otherwise: a message without it keeps the earlier bytes, older bytes (no key)
/// and nil decode to `None`, and a value that is not 64 lowercase hex digits is an error naming the field.
#[test]
fn reward_model_is_optional_both_ways() {
    let plain = encode(&transition()).expect("encode");
    assert!(
        to_value(&plain)
            .as_map()
            .expect("map")
            .iter()
            .all(|(k, _)| k.as_str() != Some("reward_model")),
        "no model: no key"
    );
    let with = transition()
        .with_oracle_phi(Some(0.5))
        .with_reward_model(Some(&MODEL_SHA.to_ascii_uppercase()));
    assert_eq!(
        with.reward_model.as_deref(),
        Some(MODEL_SHA),
        "taken in lowercase"
    );
    let bytes = round_trip(&with);
    let borrowed: TransitionMsg<Borrowed> = decode(&bytes).expect("borrowed");
    assert_eq!(
        borrowed.into_owned().reward_model.as_deref(),
        Some(MODEL_SHA)
    );
    let v = to_value(&bytes);
    let keys = map_keys(&v);
    let at = keys
        .iter()
        .position(|k| *k == "reward_model")
        .expect("reward_model key");
    assert_eq!(keys[at - 1], "oracle_phi");
    assert!(matches!(get(&v, "reward_model"), Value::String(s) if s.as_str() == Some(MODEL_SHA)));
    // Without the key (an older actor) and with nil: None.
    let mut old = v.clone();
    remove(&mut old, "reward_model");
    let got: TransitionMsg = decode(&from_value(&old)).expect("no reward_model");
    assert_eq!(got.reward_model, None);
    assert_eq!(got, with.clone().with_reward_model(None));
    let mut nil = v.clone();
    set(&mut nil, "reward_model", Value::Nil);
    let got: TransitionMsg = decode(&from_value(&nil)).expect("nil reward_model");
    assert_eq!(got.reward_model, None);
    // Not a lowercase sha256: refused, naming the field (bytes from outside are an error, never a panic).
    let upper = MODEL_SHA.to_ascii_uppercase();
    let short = &MODEL_SHA[..63];
    let long = format!("{MODEL_SHA}0");
    let not_hex = format!("{}g", &MODEL_SHA[..63]);
    for bad_value in [upper.as_str(), short, long.as_str(), not_hex.as_str(), ""] {
        let mut bad = v.clone();
        set(&mut bad, "reward_model", Value::from(bad_value));
        let bytes = from_value(&bad);
        for e in [
            decode::<TransitionMsg>(&bytes).unwrap_err(),
            decode::<TransitionMsg<Borrowed>>(&bytes).unwrap_err(),
        ] {
            assert!(
                matches!(
                    &e,
                    WireError::Invalid {
                        kind: "transition",
                        field: "reward_model",
                        ..
                    }
                ),
                "{bad_value:?}: {e}"
            );
            assert!(e.to_string().contains("reward_model"), "{e}");
        }
    }
    assert_malformed_transition(v, "reward_model", Value::from(7));
}

/// What a Python client (msgpack.packb(..., use_bin_type=True)) sends: floats as float64, ints for floats,
/// maps in any order, no optional fields, extra unknown fields.
#[test]
fn foreign_encodings_decode() {
    let req = Value::Map(vec![
        (Value::from("kind"), Value::from("step_request")),
        (Value::from("extra"), Value::from("ignored")),
        (
            Value::from("action"),
            Value::Array(vec![Value::F64(0.5), Value::from(1), Value::from(-2)]),
        ),
        (Value::from("schema"), Value::from(1)),
    ]);
    let got: StepRequest = decode(&from_value(&req)).expect("python-style step request");
    assert_eq!(got.action, vec![0.5, 1.0, -2.0]);
    let reset = Value::Map(vec![
        (Value::from("schema"), Value::from(1)),
        (Value::from("kind"), Value::from("reset_request")),
    ]);
    let got: ResetRequest = decode(&from_value(&reset)).expect("reset without seed");
    assert_eq!(got.seed, None);
    let mut pol = to_value(&encode(&PolicyMsg::new(3, vec![5; 10])).expect("encode"));
    remove(&mut pol, "signature");
    let got: PolicyMsg = decode(&from_value(&pol)).expect("policy without signature key");
    assert_eq!(got.signature, None);
    got.verify_sha256().expect("hash");
}

#[test]
fn schema_and_kind_are_checked_first() {
    let mut v = to_value(&encode(&progress()).expect("encode"));
    set(&mut v, "schema", Value::from(2));
    // A newer schema may change fields: the error must be about the schema, not a field.
    remove(&mut v, "phi");
    let err = decode::<ProgressMsg>(&from_value(&v)).expect_err("schema 2");
    assert!(
        matches!(err, WireError::UnsupportedSchema { got: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("schema 2"), "{err}");
    set(&mut v, "schema", Value::from(0));
    assert!(matches!(
        decode::<ProgressMsg>(&from_value(&v)),
        Err(WireError::UnsupportedSchema { got: 0, .. })
    ));
    let bytes = encode(&progress()).expect("encode");
    let err = decode::<TransitionMsg>(&bytes).expect_err("wrong kind");
    assert_eq!(
        err,
        WireError::WrongKind {
            expected: "transition",
            got: "progress".into()
        }
    );
    let mut v = to_value(&bytes);
    remove(&mut v, "schema");
    assert!(matches!(
        decode::<ProgressMsg>(&from_value(&v)),
        Err(WireError::NotAMessage { .. })
    ));
    let mut v = to_value(&bytes);
    remove(&mut v, "phi");
    let err = decode::<ProgressMsg>(&from_value(&v)).expect_err("missing field");
    assert!(matches!(err, WireError::Malformed { .. }), "{err}");
    // The decoder's own message (the missing field) is the source, printed once by a chain walker.
    let chain = stagewise_core::ErrorChain(&err).to_string();
    assert!(chain.contains("phi"), "{chain}");
    assert!(!err.to_string().contains("phi"), "{err}");
    assert_eq!(peek_header(&bytes), Some((1, "progress".into())));
}

#[test]
fn malformed_bytes_are_errors() {
    for bad in [
        &b""[..],
        b"\xc1",
        b"hello",
        b"\x93\x01\x02\x03",
        b"\xde\xff\xff",
    ] {
        let err = decode::<TransitionMsg>(bad).expect_err("garbage");
        assert!(matches!(err, WireError::NotAMessage { .. }), "{err}");
    }
    let bytes = encode(&transition()).expect("encode");
    for cut in [1, 10, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            decode::<TransitionMsg>(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
}

#[test]
fn tensors_that_do_not_hold_together_are_rejected() {
    let mut v = to_value(&encode(&transition()).expect("encode"));
    let mut obs = get(&v, "obs").clone();
    let mut state = get(&obs, "state").clone();
    set(&mut state, "shape", Value::Array(vec![Value::from(5)]));
    set(&mut obs, "state", state.clone());
    set(&mut v, "obs", obs.clone());
    let err = decode::<TransitionMsg>(&from_value(&v)).expect_err("size mismatch");
    let chain = stagewise_core::ErrorChain(&err).to_string();
    assert!(chain.contains("needs 20 bytes"), "{chain}");
    set(&mut state, "shape", Value::Array(vec![Value::from(4)]));
    set(&mut state, "dtype", Value::from("float16"));
    set(&mut obs, "state", state.clone());
    set(&mut v, "obs", obs.clone());
    let err = decode::<TransitionMsg>(&from_value(&v)).expect_err("dtype");
    let chain = stagewise_core::ErrorChain(&err).to_string();
    assert!(chain.contains("unknown dtype \"float16\""), "{chain}");
    // An image that is not uint8 HWC with 3 channels.
    let mut images = TensorMap::new();
    images.insert(
        "front",
        Tensor::new(DType::Uint8, vec![2, 2], vec![0; 4]).expect("tensor"),
    );
    let mut t = transition();
    if let Some(o) = t.obs.as_mut() {
        o.images = images;
    }
    let err = decode::<TransitionMsg>(&encode(&t).expect("encode")).expect_err("not HWC");
    assert!(
        matches!(err, WireError::Invalid { field: "obs", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("front"), "{err}");
}

#[test]
fn duplicate_view_names_are_rejected() {
    let mut v = to_value(&encode(&transition()).expect("encode"));
    let mut obs = get(&v, "obs").clone();
    let mut images = get(&obs, "images").clone();
    if let Value::Map(m) = &mut images {
        let first = m[0].clone();
        m.push(first);
    }
    set(&mut obs, "images", images);
    set(&mut v, "obs", obs);
    let err = decode::<TransitionMsg>(&from_value(&v)).expect_err("duplicate");
    let chain = stagewise_core::ErrorChain(&err).to_string();
    assert!(chain.contains("appears twice"), "{chain}");
}

#[test]
fn policy_checks() {
    let mut p = PolicyMsg::new(1, vec![1, 2, 3]);
    p.verify_sha256().expect("fresh hash");
    p.onnx[0] = 9;
    let err = p.verify_sha256().expect_err("tampered");
    assert!(err.to_string().contains("hash to"), "{err}");
    let p = PolicyMsg::new(1, vec![1]).with_signature(vec![0; 10]);
    let err = decode::<PolicyMsg>(&encode(&p).expect("encode")).expect_err("short sig");
    assert!(
        matches!(
            err,
            WireError::Invalid {
                field: "signature",
                ..
            }
        ),
        "{err}"
    );
    let mut p = PolicyMsg::new(1, vec![1]);
    p.sha256 = "xyz".into();
    let err = decode::<PolicyMsg>(&encode(&p).expect("encode")).expect_err("bad hex");
    assert!(
        matches!(
            err,
            WireError::Invalid {
                field: "sha256",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        sha256_hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

fn decode_all(bytes: &[u8]) {
    let _ = decode::<TransitionMsg>(bytes);
    let _ = decode::<ProgressMsg>(bytes);
    let _ = decode::<EpisodeMsg>(bytes);
    let _ = decode::<StepsMsg>(bytes);
    let _ = decode::<PolicyMsg>(bytes);
    let _ = decode::<ResetRequest>(bytes);
    let _ = decode::<ResetReply>(bytes);
    let _ = decode::<StepRequest>(bytes);
    let _ = decode::<StepReply>(bytes);
    let _ = peek_header(bytes);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
    }

    #[test]
    fn decoders_never_panic_on_mutated_messages(
        which in 0usize..5,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = match which {
            0 => encode(&transition()),
            1 => encode(&progress()),
            2 => encode(&PolicyMsg::new(1, vec![3; 40]).with_signature(vec![1; 64])),
            3 => encode(&steps()),
            _ => encode(&StepReply::error("x")),
        }.expect("encode");
        decode_all(&spoil(bytes, flips, cut));
    }

    #[test]
    fn progress_round_trips(stage in 0u32..100, probs in proptest::collection::vec(0f32..1.0, 0..16),
                            tau in 0f32..=1.0, phi in 0f32..=1.0, env in any::<u32>(), step in any::<u64>()) {
        let mut m = progress();
        m.stage = stage;
        m.stage_probs = probs;
        m.tau = tau;
        m.phi = phi;
        m.env = env;
        m.step = step;
        let back: ProgressMsg = decode(&encode(&m).expect("encode")).expect("decode");
        prop_assert_eq!(back, m);
    }
}

/// A batch of steps whose columns do not hold together is refused naming the column; optional columns are empty
/// or one value per row.
#[test]
fn steps_columns_must_hold_together() {
    let mut m = steps();
    (m.oracle_phi, m.stage, m.stage_probs) = (vec![], vec![], vec![]);
    round_trip(&m);
    m.stage = vec![1, 2, 2];
    m.stage_probs = vec![vec![0.5, 0.5]; 3];
    round_trip(&m);
    type Spoil = fn(&mut StepsMsg);
    let spoilers: [(&str, Spoil); 4] = [
        ("phi", |m| m.phi.truncate(2)),
        ("action", |m| m.action.push(vec![0.0, 0.0])),
        ("oracle_phi", |m| m.oracle_phi.truncate(2)),
        ("stage", |m| m.stage.push(0)),
    ];
    for (field, spoil) in spoilers {
        let mut bad = steps();
        bad.stage = vec![0; 3];
        spoil(&mut bad);
        let err = decode::<StepsMsg>(&encode(&bad).unwrap()).unwrap_err();
        assert!(
            matches!(&err, WireError::Invalid { kind: "steps", field: f, .. } if *f == field),
            "{field}: {err}"
        );
    }
    let empty = StepsMsg::new("arm-0", 0, 0, 0);
    let err = decode::<StepsMsg>(&encode(&empty).unwrap()).unwrap_err();
    assert!(err.to_string().contains("no rows"), "{err}");
    let m = steps();
    assert!(encode(&m).unwrap().len() <= m.size_hint());
}

/// `encode` sizes its buffer from `size_hint`: for messages with images the hint covers the encoding, so the
/// buffer is allocated once (no growth copies of 80 KB transitions).
#[test]
fn size_hints_cover_the_encoding_of_messages_with_images() {
    let t = transition();
    let bytes = encode(&t).unwrap();
    assert!(
        bytes.len() <= t.size_hint(),
        "{} > {}",
        bytes.len(),
        t.size_hint()
    );
    assert!(
        t.size_hint() < 2 * bytes.len() + 1024,
        "hint {} for {} bytes",
        t.size_hint(),
        bytes.len()
    );
    let mut bare = transition();
    (bare.obs, bare.next_obs) = (None, None);
    assert!(encode(&bare).unwrap().len() <= bare.size_hint());
}

/// The signed bytes of a policy, pinned: the Python signer (python/stagewise/policy.py) must build the same.
#[test]
fn policy_signing_message_is_domain_separated_and_pinned() {
    let msg = PolicyMsg::new(7, b"onnx".to_vec());
    let m = msg.signing_message("arm0").expect("signing message");
    assert_eq!(
        hex::encode(&m),
        "7374616765776973652d706f6c6963792d76310400000061726d300700000000000000\
         87e93f89f2be0db364e8be052f79f389e6c2da239831922e24513288af522a43"
    );
    assert!(m.starts_with(POLICY_SIGNING_CONTEXT));
    // Robot and version are bound: another of either gives other bytes.
    assert_ne!(m, msg.signing_message("arm1").expect("arm1"));
    assert_ne!(
        m,
        PolicyMsg::new(8, b"onnx".to_vec())
            .signing_message("arm0")
            .expect("v8")
    );
    // The robot is length-prefixed: a robot name cannot borrow bytes of the version.
    assert_eq!(&m[19..23], &4u32.to_le_bytes());
    let mut bad = msg.clone();
    bad.sha256 = "zz".repeat(32);
    assert!(bad.signing_message("arm0").is_err());
}

// --- Transitions decoded with their tensors borrowed: the same decoder, another storage type. ---

/// Every tensor of `t` is a slice of `bytes`.
fn borrows_all(t: &TransitionMsg<Borrowed>, bytes: &[u8]) -> bool {
    let range = bytes.as_ptr_range();
    let inside = |d: &Borrowed| match d {
        std::borrow::Cow::Borrowed(s) => {
            s.is_empty() || (range.contains(&s.as_ptr()) && s.len() <= bytes.len())
        }
        std::borrow::Cow::Owned(_) => false,
    };
    [&t.obs, &t.next_obs].into_iter().flatten().all(|o| {
        o.images
            .iter()
            .chain(o.depth.iter())
            .map(|(_, t)| t)
            .chain([&o.state])
            .all(|t| inside(t.storage()))
    })
}

#[test]
fn borrowed_transitions_leave_their_tensors_in_the_bytes() {
    let m = transition();
    let bytes = encode(&m).expect("encode");
    let t: TransitionMsg<Borrowed> = decode(&bytes).expect("borrowed decode");
    assert!(borrows_all(&t, &bytes));
    let o = t.next_obs.as_ref().expect("next_obs");
    assert_eq!(
        o.images.names().collect::<Vec<_>>(),
        ["front", "wrist", "top"]
    );
    assert_eq!(o.images.get("front").expect("front").shape(), [6, 8, 3]);
    // What the borrowed message says is what the owned decode says.
    assert_eq!(t.to_transition(), m.to_transition());
    assert_eq!(encode(&t).expect("re-encode"), bytes);
    assert_eq!(t.into_owned(), m);
    // A foreign sender's tensor data as an array of integers: read (owned, there is nothing to borrow).
    let mut v = to_value(&bytes);
    let mut next = get(&v, "next_obs").clone();
    let mut state = get(&next, "state").clone();
    let data: Vec<Value> = 1.5f32
        .to_le_bytes()
        .iter()
        .map(|&b| Value::from(b))
        .collect();
    set(&mut state, "shape", Value::Array(vec![Value::from(1)]));
    set(&mut state, "data", Value::Array(data));
    set(&mut next, "state", state);
    set(&mut v, "next_obs", next);
    let foreign = from_value(&v);
    let t: TransitionMsg<Borrowed> = decode(&foreign).expect("array data");
    let state = &t.next_obs.as_ref().expect("next_obs").state;
    assert!(matches!(state.storage(), std::borrow::Cow::Owned(_)));
    assert_eq!(state.to_f32_vec().expect("f32"), [1.5]);
    assert_eq!(
        t.into_owned(),
        decode::<TransitionMsg>(&foreign).expect("owned decode")
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Borrowed or owned, the decoder accepts and refuses the same bytes, with the same errors.
    #[test]
    fn borrowed_and_owned_decodes_agree_on_mutated_transitions(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = spoil(encode(&transition()).expect("encode"), flips, cut);
        let owned = decode::<TransitionMsg>(&bytes);
        let borrowed = decode::<TransitionMsg<Borrowed>>(&bytes).map(TransitionMsg::into_owned);
        match (&owned, &borrowed) {
            (Ok(a), Ok(b)) => prop_assert_eq!(encode(a).expect("a"), encode(b).expect("b")),
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            _ => prop_assert!(false, "owned {:?} borrowed {:?}", owned, borrowed),
        }
    }
}
