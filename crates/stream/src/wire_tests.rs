//! Unit tests of the wire format: round trips, foreign (hand-built) encodings, malformed bytes, schema checks.

use super::*;
use crate::tensor::{DType, Tensor, TensorMap};
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

pub(crate) fn to_value(bytes: &[u8]) -> Value {
    let mut r = bytes;
    rmpv::decode::read_value(&mut r).expect("msgpack value")
}

pub(crate) fn from_value(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v).expect("encode value");
    out
}

/// `bytes` with the bytes at the `flips` positions overwritten, then cut at `cut` (the proptests' mutations).
pub(crate) fn spoil(
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
    let pol = to_value(&encode(&PolicyMsg::new(1, vec![1, 2])).expect("encode"));
    assert!(matches!(get(&pol, "onnx"), Value::Binary(_)));
    assert!(get(&pol, "signature").is_nil());
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
    assert!(err.to_string().contains("phi"), "{err}");
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
    assert!(err.to_string().contains("needs 20 bytes"), "{err}");
    set(&mut state, "shape", Value::Array(vec![Value::from(4)]));
    set(&mut state, "dtype", Value::from("float16"));
    set(&mut obs, "state", state.clone());
    set(&mut v, "obs", obs.clone());
    let err = decode::<TransitionMsg>(&from_value(&v)).expect_err("dtype");
    assert!(
        err.to_string().contains("unknown dtype \"float16\""),
        "{err}"
    );
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
    assert!(err.to_string().contains("appears twice"), "{err}");
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
        which in 0usize..4,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = match which {
            0 => encode(&transition()),
            1 => encode(&progress()),
            2 => encode(&PolicyMsg::new(1, vec![3; 40]).with_signature(vec![1; 64])),
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

// --- The hand-written ProgressMsg codec (wire_progress.rs) against the serde path. ---

/// Same result, bit for bit: equal errors, or messages whose serde encodings are equal (floats compared by
/// bits, so NaNs count as equal when their bits are).
fn same_result(a: &Result<ProgressMsg, WireError>, b: &Result<ProgressMsg, WireError>) -> bool {
    let bytes = |m: &ProgressMsg| {
        let mut out = Vec::new();
        encode_serde_into(m, &mut out).expect("serde encode");
        out
    };
    match (a, b) {
        (Ok(a), Ok(b)) => bytes(a) == bytes(b),
        (Err(a), Err(b)) => a == b,
        _ => false,
    }
}

fn arb_progress() -> impl Strategy<Value = ProgressMsg> {
    (
        (
            // Short (fixstr), str8 and str16 robot names, any UTF-8.
            prop_oneof![".{0,8}", ".{30,40}", "[a-z]{250,300}"],
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
        ),
        (
            // Up to 40 probabilities: fixarray and array16; any f32, NaN and infinities included.
            proptest::collection::vec(any::<f32>(), 0..40),
            any::<f32>(),
            any::<f32>(),
            any::<u64>(),
        ),
    )
        .prop_map(
            |((robot, env, episode, step, stage), (stage_probs, tau, phi, stamp_ns))| ProgressMsg {
                schema: Schema,
                kind: kind::Progress,
                robot,
                env,
                episode,
                step,
                stage,
                stage_probs,
                tau,
                phi,
                stamp_ns,
            },
        )
}

/// An integer written with any msgpack integer type that holds it (not only the smallest, as other senders
/// may do), or `None` when `pick` chose a type too small for `v`.
fn int_bytes(v: i128, pick: u8) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match pick % 9 {
        0 if (0..128).contains(&v) => out.push(v as u8),
        0 if (-32..0).contains(&v) => out.push(v as i8 as u8),
        1 if u8::try_from(v).is_ok() => out.extend([0xcc, v as u8]),
        2 if u16::try_from(v).is_ok() => {
            out.push(0xcd);
            out.extend((v as u16).to_be_bytes());
        }
        3 if u32::try_from(v).is_ok() => {
            out.push(0xce);
            out.extend((v as u32).to_be_bytes());
        }
        4 if u64::try_from(v).is_ok() => {
            out.push(0xcf);
            out.extend((v as u64).to_be_bytes());
        }
        5 if i8::try_from(v).is_ok() => out.extend([0xd0, v as i8 as u8]),
        6 if i16::try_from(v).is_ok() => {
            out.push(0xd1);
            out.extend((v as i16).to_be_bytes());
        }
        7 if i32::try_from(v).is_ok() => {
            out.push(0xd2);
            out.extend((v as i32).to_be_bytes());
        }
        8 if i64::try_from(v).is_ok() => {
            out.push(0xd3);
            out.extend((v as i64).to_be_bytes());
        }
        _ => return None,
    }
    Some(out)
}

/// A msgpack integer for `v`: the type `pick` chose when it fits, else the smallest.
fn uint_field(v: u64, pick: u8) -> Vec<u8> {
    int_bytes(i128::from(v), pick).unwrap_or_else(|| {
        let mut out = Vec::new();
        rmp::encode::write_uint(&mut out, v).expect("write");
        out
    })
}

/// A float field as Python or another client may write it: float32, float64, or an integer.
fn float_field(v: f32, alt: f64, pick: u8) -> Vec<u8> {
    let mut out = Vec::new();
    match pick % 4 {
        0 | 1 => rmp::encode::write_f32(&mut out, v).expect("write"),
        2 => rmp::encode::write_f64(&mut out, alt).expect("write"),
        _ => {
            out = int_bytes(alt.clamp(-1e12, 1e12) as i128, pick / 4)
                .unwrap_or_else(|| uint_field(alt.abs().min(1e12) as u64, 0))
        }
    }
    out
}

/// A msgpack str/array/map header with the type `pick` chose when it fits.
fn header(fix: u8, fix_max: usize, wide: [u8; 3], len: usize, pick: u8) -> Vec<u8> {
    match pick % 4 {
        0 if len <= fix_max => vec![fix | len as u8],
        1 if wide[0] != 0 && len <= 0xff => vec![wide[0], len as u8],
        2 if len <= 0xffff => {
            let mut h = vec![wide[1]];
            h.extend((len as u16).to_be_bytes());
            h
        }
        _ => {
            let mut h = vec![wide[2]];
            h.extend((len as u32).to_be_bytes());
            h
        }
    }
}

fn str_field(s: &str, pick: u8) -> Vec<u8> {
    let mut out = header(0xa0, 31, [0xd9, 0xda, 0xdb], s.len(), pick);
    out.extend(s.as_bytes());
    out
}

fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Nil),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f32>().prop_map(Value::F32),
        any::<f64>().prop_map(Value::F64),
        ".{0,40}".prop_map(Value::from),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::Binary),
        (any::<i8>(), proptest::collection::vec(any::<u8>(), 0..20))
            .prop_map(|(t, d)| Value::Ext(t, d)),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((inner.clone(), inner), 0..6).prop_map(Value::Map),
        ]
    })
}

/// How the foreign-encoding proptest spoils a message (`Clean` must take the fast path).
#[derive(Debug, Clone, Copy)]
enum Spoil {
    Clean,
    Drop(usize),
    Duplicate(usize),
    /// Replace a field's value with an arbitrary msgpack value.
    Replace(usize),
    Schema(u64),
    Kind,
    /// Cut the bytes at a point.
    Cut(prop::sample::Index),
}

fn arb_spoil() -> impl Strategy<Value = Spoil> {
    prop_oneof![
        4 => Just(Spoil::Clean),
        1 => (0usize..11).prop_map(Spoil::Drop),
        1 => (0usize..11).prop_map(Spoil::Duplicate),
        2 => (0usize..11).prop_map(Spoil::Replace),
        1 => prop_oneof![Just(0u64), Just(2), any::<u64>()].prop_map(Spoil::Schema),
        1 => Just(Spoil::Kind),
        1 => any::<prop::sample::Index>().prop_map(Spoil::Cut),
    ]
}

#[test]
fn progress_codec_writes_the_documented_bytes() {
    let m = progress();
    let bytes = encode(&m).expect("encode");
    let mut serde = Vec::new();
    encode_serde_into(&m, &mut serde).expect("serde");
    assert_eq!(bytes, serde);
    let v = to_value(&bytes);
    let keys: Vec<&str> = v
        .as_map()
        .expect("a map")
        .iter()
        .filter_map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        keys,
        [
            "schema",
            "kind",
            "robot",
            "env",
            "episode",
            "step",
            "stage",
            "stage_probs",
            "tau",
            "phi",
            "stamp_ns"
        ]
    );
    assert!(matches!(get(&v, "tau"), Value::F32(_)));
    assert!(progress_codec::decode_fast(&bytes).is_some());
    // Errors are the serde path's, kind and text: a missing field names it.
    let mut v = to_value(&bytes);
    remove(&mut v, "stage_probs");
    let bad = from_value(&v);
    assert!(progress_codec::decode_fast(&bad).is_none());
    let err = decode::<ProgressMsg>(&bad).expect_err("missing field");
    assert_eq!(
        Err(err.clone()),
        decode_serde::<ProgressMsg>(&bad).map(|_| ())
    );
    assert!(err.to_string().contains("stage_probs"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// The hand-written encoder writes rmp_serde's bytes, and they decode back to the same message.
    #[test]
    fn progress_encoder_writes_rmp_serde_bytes(m in arb_progress()) {
        let fast = encode(&m).expect("encode");
        let mut serde = Vec::new();
        encode_serde_into(&m, &mut serde).expect("serde encode");
        prop_assert_eq!(&fast, &serde);
        prop_assert!(progress_codec::decode_fast(&fast).is_some());
        let back = decode::<ProgressMsg>(&fast);
        prop_assert!(same_result(&back, &Ok(m)));
    }

    /// Foreign encodings (keys in any order, unknown keys, other integer and float types, other str/array/map
    /// headers, trailing bytes) and spoiled ones (missing, duplicate or mistyped fields, other schemas and
    /// kinds, cuts): `decode` gives exactly what the serde path gives, and the clean ones take the fast path.
    #[test]
    fn progress_decoder_agrees_with_serde(
        m in arb_progress(),
        picks in proptest::collection::vec(any::<u8>(), 64),
        alts in proptest::collection::vec(any::<f64>(), 64),
        order in Just((0usize..11).collect::<Vec<_>>()).prop_shuffle(),
        extra in proptest::collection::vec(("[a-z_]{1,12}", arb_value()), 0..4),
        spoil in arb_spoil(),
        junk in arb_value(),
        trailing in proptest::collection::vec(any::<u8>(), 0..4),
    ) {
        let p = |i: usize| picks[i % picks.len()];
        let a = |i: usize| alts[i % alts.len()];
        let names = ["schema", "kind", "robot", "env", "episode", "step", "stage", "stage_probs", "tau",
                     "phi", "stamp_ns"];
        let value = |field: usize| -> Vec<u8> {
            match field {
                0 => uint_field(u64::from(SCHEMA_VERSION), p(0)),
                1 => str_field("progress", p(1)),
                2 => str_field(&m.robot, p(2)),
                3 => uint_field(u64::from(m.env), p(3)),
                4 => uint_field(m.episode, p(4)),
                5 => uint_field(m.step, p(5)),
                6 => uint_field(u64::from(m.stage), p(6)),
                7 => {
                    let mut out = header(0x90, 15, [0, 0xdc, 0xdd], m.stage_probs.len(), p(7));
                    for (i, &x) in m.stage_probs.iter().enumerate() {
                        out.extend(float_field(x, a(20 + i), p(20 + i)));
                    }
                    out
                }
                8 => float_field(m.tau, a(8), p(8)),
                9 => float_field(m.phi, a(9), p(9)),
                _ => uint_field(m.stamp_ns, p(10)),
            }
        };
        let mut entries: Vec<(Vec<u8>, Vec<u8>)> = order
            .iter()
            .map(|&f| (str_field(names[f], p(11 + f)), value(f)))
            .collect();
        for (k, v) in &extra {
            if !names.contains(&k.as_str()) {
                let at = p(entries.len()) as usize % (entries.len() + 1);
                entries.insert(at, (str_field(k, p(30)), from_value(v)));
            }
        }
        let field_at = |entries: &Vec<(Vec<u8>, Vec<u8>)>, f: usize| {
            let key = str_field(names[f], p(11 + f));
            entries.iter().position(|(k, _)| *k == key).expect("field present")
        };
        match spoil {
            Spoil::Clean | Spoil::Cut(_) => {}
            Spoil::Drop(f) => {
                let i = field_at(&entries, f);
                entries.remove(i);
            }
            Spoil::Duplicate(f) => {
                let i = field_at(&entries, f);
                let e = entries[i].clone();
                entries.push(e);
            }
            Spoil::Replace(f) => {
                let i = field_at(&entries, f);
                entries[i].1 = from_value(&junk);
            }
            Spoil::Schema(s) => {
                let i = field_at(&entries, 0);
                entries[i].1 = uint_field(s, p(40));
            }
            Spoil::Kind => {
                let i = field_at(&entries, 1);
                entries[i].1 = str_field("transition", p(41));
            }
        }
        let mut bytes = header(0x80, 15, [0, 0xde, 0xdf], entries.len(), p(42));
        for (k, v) in &entries {
            bytes.extend(k);
            bytes.extend(v);
        }
        bytes.extend(&trailing);
        if let Spoil::Cut(at) = spoil {
            bytes.truncate(at.index(bytes.len()));
        }
        let got = decode::<ProgressMsg>(&bytes);
        let want = decode_serde::<ProgressMsg>(&bytes);
        prop_assert!(same_result(&got, &want), "fast {:?}\nserde {:?}\nbytes {:?}", got, want, bytes);
        if matches!(spoil, Spoil::Clean) {
            prop_assert!(want.is_ok(), "{:?}", want);
            prop_assert!(progress_codec::decode_fast(&bytes).is_some(), "clean input left the fast path");
        }
        if let Ok(fast) = progress_codec::decode_fast(&bytes).ok_or(()) {
            prop_assert!(same_result(&Ok(fast), &want));
        }
    }

    /// Mutated and cut progress messages: an error or a message, never a panic, and always the serde path's.
    #[test]
    fn progress_decoder_agrees_with_serde_on_mutated_bytes(
        m in arb_progress(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = spoil(encode(&m).expect("encode"), flips, cut);
        let got = decode::<ProgressMsg>(&bytes);
        prop_assert!(same_result(&got, &decode_serde::<ProgressMsg>(&bytes)));
    }

    #[test]
    fn progress_decoder_agrees_with_serde_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let got = decode::<ProgressMsg>(&bytes);
        prop_assert!(same_result(&got, &decode_serde::<ProgressMsg>(&bytes)));
    }
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
