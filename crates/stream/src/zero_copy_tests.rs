//! The borrowed decode against the owned one, and the multi-part encode against `encode`.

use super::*;
use crate::wire::tests::{from_value, spoil, to_value};
use crate::wire::{encode, encode_serde_into};
use proptest::prelude::*;
use rmpv::Value;
use stagewise_core::{Frame, Observation, View};

fn frame(w: u32, h: u32, seed: u8) -> Frame {
    Frame::from_fn(w, h, |x, y| {
        image::Rgb([x as u8 ^ seed, y as u8, seed.wrapping_mul(7)])
    })
}

/// Views `(width, height, with depth)`; state of `state_len` values.
fn observation(step: u64, views: &[(u32, u32, bool)], state_len: usize) -> ObservationMsg {
    let views = views
        .iter()
        .enumerate()
        .map(|(i, &(w, h, depth))| {
            let mut v = View::new(format!("cam{i}"), frame(w, h, i as u8));
            if depth {
                v.depth = Some((0..w * h).map(|k| k as f32 * 0.5).collect());
            }
            v
        })
        .collect();
    ObservationMsg::from_observation(&Observation {
        step,
        time: step as f64 * 0.05,
        views,
        state: (0..state_len).map(|k| k as f32 - 1.5).collect(),
    })
}

fn transition(obs: Option<ObservationMsg>, next_obs: Option<ObservationMsg>) -> TransitionMsg {
    let t = Transition {
        env: 2,
        episode: 5,
        step: 9,
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
    let mut m = TransitionMsg::from_transition("arm-0", &t);
    m.obs = obs;
    m.next_obs = next_obs;
    m
}

/// The bench's transition: three 96x96 RGB views and a 7-value state as `next_obs` (83 KB).
fn bench_transition() -> TransitionMsg {
    let views = [(96, 96, false); 3];
    transition(None, Some(observation(3, &views, 7)))
}

fn arb_obs() -> impl Strategy<Value = Option<ObservationMsg>> {
    let views = proptest::collection::vec((1u32..=24, 1u32..=24, any::<bool>()), 0..4);
    proptest::option::of(
        (any::<u64>(), views, 0usize..9).prop_map(|(step, v, n)| observation(step, &v, n)),
    )
}

fn arb_transition() -> impl Strategy<Value = TransitionMsg> {
    (
        (
            "[a-z0-9._-]{1,40}",
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec(any::<f32>(), 0..12),
        ),
        (
            any::<f64>(),
            any::<f64>(),
            any::<f64>(),
            any::<[bool; 3]>(),
            any::<Option<u32>>(),
        ),
        arb_obs(),
        arb_obs(),
    )
        .prop_map(
            |((robot, env, episode, step, action), (reward, phi, gamma, flags, stage), o, n)| {
                let mut m = transition(o, n);
                m.robot = robot;
                m.env = env;
                m.episode = episode;
                m.step = step;
                m.stamp_ns = step ^ episode;
                m.action = action;
                m.reward = reward;
                m.phi = phi;
                m.phi_next = phi * 0.5;
                m.gamma = gamma;
                m.terminated = flags[0];
                m.truncated = flags[1];
                m.success = flags[2];
                m.stage = stage;
                m
            },
        )
}

fn serde_bytes_of(m: &TransitionMsg) -> Vec<u8> {
    let mut out = Vec::new();
    encode_serde_into(m, &mut out).expect("serde encode");
    out
}

/// Same result, bit for bit: equal errors, or messages with equal encodings (so NaNs with equal bits count as
/// equal).
fn same_result(a: &Result<TransitionMsg, WireError>, b: &Result<TransitionMsg, WireError>) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => serde_bytes_of(a) == serde_bytes_of(b),
        (Err(a), Err(b)) => a == b,
        _ => false,
    }
}

/// The borrowed reading alone (no fallback) and the owned decode: both refuse, or both give the same message.
fn borrowed_agrees(bytes: &[u8]) -> Result<(), String> {
    let owned = decode::<TransitionMsg>(bytes);
    let borrowed = decode_borrowed(bytes).map(|t| t.to_msg());
    match (&borrowed, &owned) {
        (None, Err(_)) => {}
        (Some(b), Ok(o)) if serde_bytes_of(b) == serde_bytes_of(o) => {}
        _ => {
            return Err(format!(
                "borrowed {borrowed:?}\nowned {owned:?}\nbytes {bytes:?}"
            ))
        }
    }
    // And the public function (with the owned decoder behind it) gives the owned result, errors included.
    let public = decode_transition_ref(bytes).map(|t| t.to_msg());
    if !same_result(&public, &owned) {
        return Err(format!("public {public:?}\nowned {owned:?}"));
    }
    Ok(())
}

/// Every tensor of the view borrows `bytes`.
fn all_borrowed(t: &TransitionRef, bytes: &[u8]) -> bool {
    let inside = |d: &[u8]| {
        let (lo, hi) = (
            bytes.as_ptr() as usize,
            bytes.as_ptr() as usize + bytes.len(),
        );
        let p = d.as_ptr() as usize;
        d.is_empty() || (lo <= p && p + d.len() <= hi)
    };
    [&t.obs, &t.next_obs].into_iter().flatten().all(|o| {
        o.images
            .iter()
            .chain(o.depth.iter())
            .map(|(_, t)| t)
            .chain([&o.state])
            .all(|t| t.is_borrowed() && inside(t.data()))
    }) && matches!(t.robot, Cow::Borrowed(_))
}

fn big_buffers(m: &mut TransitionMsg) -> Vec<usize> {
    m.tensors_mut()
        .map(|t| t.data())
        .filter(|d| d.len() >= PART_MIN)
        .map(|d| d.as_ptr() as usize)
        .collect()
}

#[test]
fn bench_transition_decodes_in_place_and_encodes_in_parts() {
    let m = bench_transition();
    let bytes = encode(&m).expect("encode");
    assert!(bytes.len() > 3 * 96 * 96 * 3, "{}", bytes.len());
    let t = decode_transition_ref(&bytes).expect("decode");
    assert!(all_borrowed(&t, &bytes));
    assert_eq!(t.to_msg(), m);
    assert_eq!(t.to_transition(), m.to_transition());
    let o = t.next_obs.as_ref().expect("next_obs");
    assert_eq!(
        o.images.names().collect::<Vec<_>>(),
        ["cam0", "cam1", "cam2"]
    );
    let cam1 = o.images.get("cam1").expect("cam1");
    assert_eq!(
        (cam1.dtype(), cam1.shape()),
        (DType::Uint8, &[96, 96, 3][..])
    );
    assert_eq!(cam1.numel(), 96 * 96 * 3);
    assert_eq!(
        cam1.data(),
        m.next_obs
            .as_ref()
            .expect("obs")
            .images
            .get("cam1")
            .expect("cam1")
            .data()
    );

    let mut c = m.clone();
    let big = big_buffers(&mut c);
    assert_eq!(big.len(), 3, "the three images, not the 28-byte state");
    let parts = c.encode_parts().expect("parts");
    assert_eq!(parts.to_vec(), bytes);
    assert_eq!(parts.len(), bytes.len());
    // Header, image, header, image, header, image, the rest: the images' own buffers, not copies.
    assert_eq!(parts.parts().len(), 7);
    let ptrs: Vec<usize> = parts.parts().iter().map(|p| p.as_ptr() as usize).collect();
    assert_eq!([ptrs[1], ptrs[3], ptrs[5]], big[..]);
    assert_eq!(&*parts.into_zbytes().to_bytes(), &bytes[..]);
}

#[test]
fn transitions_without_big_tensors_are_one_part() {
    for m in [
        transition(None, None),
        transition(Some(observation(0, &[(4, 4, true)], 3)), None),
    ] {
        let parts = m.clone().encode_parts().expect("parts");
        assert_eq!(parts.parts().len(), 1);
        assert_eq!(parts.to_vec(), encode(&m).expect("encode"));
    }
}

/// The map at `path` (keys) inside `v`.
fn at<'v>(v: &'v mut Value, path: &[&str]) -> &'v mut Value {
    path.iter().fold(v, |v, key| match v {
        Value::Map(m) => m
            .iter_mut()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no key {key}")),
        _ => panic!("not a map at {key}"),
    })
}

/// The errors of the owned decoder, one kind each, and the borrowed decode gives the same.
#[test]
fn errors_are_the_owned_decoders() {
    let m = transition(
        None,
        Some(observation(1, &[(4, 3, true), (2, 2, false)], 2)),
    );
    let base = to_value(&encode(&m).expect("encode"));
    let spoil = |path: &[&str], new: Value| {
        let mut v = base.clone();
        *at(&mut v, path) = new;
        from_value(&v)
    };
    let cam0 = ["next_obs", "images", "cam0"];
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (spoil(&["kind"], "progress".into()), "WrongKind"),
        (spoil(&["schema"], 2.into()), "UnsupportedSchema"),
        (spoil(&["env"], (-1).into()), "Malformed"),
        (
            spoil(&[&cam0[..], &["dtype"]].concat(), "float32".into()),
            "Malformed", // 48 bytes are not a float32 [3, 4, 3] tensor
        ),
        (
            spoil(
                &[&cam0[..], &["shape"]].concat(),
                Value::Array(vec![3.into(), 12.into(), 1.into()]),
            ),
            "Invalid", // the bytes hold together, but an image is [h, w, 3]
        ),
        (
            spoil(&["next_obs", "depth", "cam0", "dtype"], "int32".into()),
            "Invalid",
        ),
        (
            spoil(
                &["next_obs", "state", "shape"],
                Value::Array(vec![1.into(), 2.into()]),
            ),
            "Invalid",
        ),
        (
            {
                let mut v = base.clone();
                if let Value::Map(images) = at(&mut v, &["next_obs", "images"]) {
                    let first = images[0].clone();
                    images.push(first);
                }
                from_value(&v)
            },
            "Malformed", // a view name twice
        ),
        (encode(&m).expect("encode")[..100].to_vec(), "NotAMessage"), // cut
        (
            {
                let mut v = base.clone();
                if let Value::Map(top) = &mut v {
                    top.retain(|(k, _)| k.as_str() != Some("reward"));
                }
                from_value(&v)
            },
            "Malformed", // a field missing
        ),
        (vec![0x93, 1, 2, 3], "NotAMessage"),
    ];
    for (bytes, want) in cases {
        let owned = decode::<TransitionMsg>(&bytes).expect_err(want);
        assert!(format!("{owned:?}").starts_with(want), "{want}: {owned}");
        let got = decode_transition_ref(&bytes).expect_err(want);
        assert_eq!(got, owned);
        assert!(decode_borrowed(&bytes).is_none(), "{want}");
    }
}

/// Tensor data written as an array of integers (a sender that does not use bin) decode as the owned decoder
/// reads them: accepted, equal, but necessarily copied.
#[test]
fn data_as_an_array_of_integers_is_read_like_the_owned_decoder() {
    let m = transition(Some(observation(1, &[(2, 1, false)], 1)), None);
    let mut v = to_value(&encode(&m).expect("encode"));
    let data = at(&mut v, &["obs", "images", "cam0", "data"]);
    let ints = data
        .as_slice()
        .expect("bin")
        .iter()
        .map(|&b| b.into())
        .collect();
    *data = Value::Array(ints);
    let bytes = from_value(&v);
    let t = decode_borrowed(&bytes).expect("borrowed reading");
    assert_eq!(t.to_msg(), m);
    let cam0 = t
        .obs
        .as_ref()
        .and_then(|o| o.images.get("cam0"))
        .expect("cam0");
    assert!(!cam0.is_borrowed());
    assert!(t.obs.as_ref().is_some_and(|o| o.state.is_borrowed()));
    borrowed_agrees(&bytes).expect("agrees");
}

fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Nil),
        any::<bool>().prop_map(Value::from),
        (-2i64..5).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f32>().prop_map(Value::F32),
        any::<f64>().prop_map(Value::F64),
        prop_oneof![
            Just("uint8"),
            Just("float32"),
            Just("int32"),
            Just("float64"),
            Just("cam0"),
            Just("transition")
        ]
        .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::Binary),
        (any::<i8>(), proptest::collection::vec(any::<u8>(), 0..8))
            .prop_map(|(t, d)| Value::Ext(t, d)),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((inner.clone(), inner), 0..4).prop_map(Value::Map),
        ]
    })
}

/// How the structural proptest spoils the `k`th map or array (in preorder) of a message.
#[derive(Debug, Clone)]
enum Spoil {
    /// Replace one element's value.
    Replace(prop::sample::Index, Value),
    /// Drop one element.
    Drop(prop::sample::Index),
    /// Repeat one element (a map key twice).
    Duplicate(prop::sample::Index),
    /// Append an element (an unknown key in a map).
    Add(Value, Value),
    /// A key written as bin instead of str.
    KeyAsBin(prop::sample::Index),
    /// Give a tensor (a map with `data`) another dtype and shape that its bytes fill: the tensor holds
    /// together, and the observation rules decide.
    Reshape(prop::sample::Index, prop::sample::Index),
}

fn arb_spoil() -> impl Strategy<Value = Spoil> {
    let i = any::<prop::sample::Index>;
    prop_oneof![
        4 => (i(), arb_value()).prop_map(|(i, v)| Spoil::Replace(i, v)),
        1 => i().prop_map(Spoil::Drop),
        1 => i().prop_map(Spoil::Duplicate),
        1 => (arb_value(), arb_value()).prop_map(|(k, v)| Spoil::Add(k, v)),
        1 => i().prop_map(Spoil::KeyAsBin),
        3 => (i(), i()).prop_map(|(d, s)| Spoil::Reshape(d, s)),
    ]
}

/// Number of maps and arrays in `v`, itself included.
fn count(v: &Value) -> usize {
    match v {
        Value::Map(m) => 1 + m.iter().map(|(_, x)| count(x)).sum::<usize>(),
        Value::Array(a) => 1 + a.iter().map(count).sum::<usize>(),
        _ => 0,
    }
}

/// The `n`th map or array of `v` in preorder (values only; keys are left alone).
fn nth(v: &mut Value, mut n: usize) -> Option<&mut Value> {
    if !matches!(v, Value::Map(_) | Value::Array(_)) {
        return None;
    }
    if n == 0 {
        return Some(v);
    }
    n -= 1;
    let children: Vec<&mut Value> = match v {
        Value::Map(m) => m.iter_mut().map(|(_, x)| x).collect(),
        Value::Array(a) => a.iter_mut().collect(),
        _ => Vec::new(),
    };
    for c in children {
        let k = count(c);
        if n < k {
            return nth(c, n);
        }
        n -= k;
    }
    None
}

fn apply(v: &mut Value, k: prop::sample::Index, spoil: Spoil) {
    let n = k.index(count(v));
    let Some(c) = nth(v, n) else { return };
    match (c, spoil) {
        (Value::Map(m), Spoil::Replace(i, new)) if !m.is_empty() => {
            let n = m.len();
            m[i.index(n)].1 = new;
        }
        (Value::Array(a), Spoil::Replace(i, new)) if !a.is_empty() => {
            let n = a.len();
            a[i.index(n)] = new;
        }
        (Value::Map(m), Spoil::Drop(i)) if !m.is_empty() => {
            let n = m.len();
            m.remove(i.index(n));
        }
        (Value::Array(a), Spoil::Drop(i)) if !a.is_empty() => {
            let n = a.len();
            a.remove(i.index(n));
        }
        (Value::Map(m), Spoil::Duplicate(i)) if !m.is_empty() => {
            let e = m[i.index(m.len())].clone();
            m.push(e);
        }
        (Value::Array(a), Spoil::Duplicate(i)) if !a.is_empty() => {
            let e = a[i.index(a.len())].clone();
            a.push(e);
        }
        (Value::Map(m), Spoil::Reshape(d, s)) => {
            let Some(len) = m
                .iter()
                .find(|(k, _)| k.as_str() == Some("data"))
                .and_then(|(_, v)| v.as_slice())
                .map(<[u8]>::len)
            else {
                return;
            };
            let dtypes: Vec<DType> = DType::ALL
                .into_iter()
                .filter(|t| len.is_multiple_of(t.size()))
                .collect();
            let dtype = dtypes[d.index(dtypes.len())];
            let n = (len / dtype.size()) as u64;
            let mut shapes = vec![vec![n], vec![1, n], vec![n, 1], vec![1, 1, n]];
            if n.is_multiple_of(3) {
                shapes.push(vec![1, n / 3, 3]);
                shapes.push(vec![n / 3, 1, 3]);
            }
            if n == 1 {
                shapes.push(vec![]);
            }
            let shape = Value::Array(
                shapes[s.index(shapes.len())]
                    .iter()
                    .map(|&x| x.into())
                    .collect(),
            );
            for (k, v) in m.iter_mut() {
                match k.as_str() {
                    Some("dtype") => *v = dtype.name().into(),
                    Some("shape") => *v = shape.clone(),
                    _ => {}
                }
            }
        }
        (Value::Map(m), Spoil::Add(k, v)) => m.push((k, v)),
        (Value::Array(a), Spoil::Add(_, v)) => a.push(v),
        (Value::Map(m), Spoil::KeyAsBin(i)) if !m.is_empty() => {
            let n = m.len();
            let key = &mut m[i.index(n)].0;
            if let Some(s) = key.as_str() {
                *key = Value::Binary(s.as_bytes().to_vec());
            }
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// Valid transitions: the borrowed reading succeeds, borrows every tensor from the input, and equals the
    /// owned decode (and the message).
    #[test]
    fn borrowed_decode_equals_owned_decode(m in arb_transition()) {
        let bytes = encode(&m).expect("encode");
        let t = decode_borrowed(&bytes).expect("borrowed reading");
        prop_assert!(all_borrowed(&t, &bytes));
        let owned = decode::<TransitionMsg>(&bytes).expect("owned decode");
        prop_assert_eq!(serde_bytes_of(&t.to_msg()), serde_bytes_of(&owned));
        prop_assert_eq!(serde_bytes_of(&owned), bytes.clone());
        let public = decode_transition_ref(&bytes).expect("decode");
        prop_assert!(all_borrowed(&public, &bytes));
    }

    /// The parts concatenate to `encode`'s bytes, and every tensor of at least `PART_MIN` bytes is a part of
    /// its own, its own buffer (moved, not copied).
    #[test]
    fn encode_parts_writes_the_bytes_of_encode(m in arb_transition()) {
        let want = encode(&m).expect("encode");
        let mut c = m.clone();
        let big = big_buffers(&mut c);
        let parts = c.encode_parts().expect("parts");
        prop_assert_eq!(parts.to_vec(), want.clone());
        prop_assert_eq!(parts.parts().len(), 2 * big.len() + 1);
        let ptrs: Vec<usize> = parts.parts().iter().skip(1).step_by(2).map(|p| p.as_ptr() as usize).collect();
        prop_assert_eq!(ptrs, big);
        prop_assert!(parts.parts().iter().all(|p| !p.is_empty()));
        let z = parts.into_zbytes();
        prop_assert_eq!(&*z.to_bytes(), &want[..]);
    }

    /// Spoiled messages (a value replaced, an entry dropped, repeated or added, a key as bin, anywhere in
    /// the tree): the borrowed reading and the owned decode accept the same, to the same values, and the
    /// public decode gives the owned decoder's errors.
    #[test]
    fn borrowed_decode_agrees_on_spoiled_messages(
        m in arb_transition(),
        spoils in proptest::collection::vec((any::<prop::sample::Index>(), arb_spoil()), 1..3),
    ) {
        let mut v = to_value(&encode(&m).expect("encode"));
        for (k, s) in spoils {
            apply(&mut v, k, s);
        }
        let bytes = from_value(&v);
        prop_assert!(borrowed_agrees(&bytes).is_ok(), "{}", borrowed_agrees(&bytes).unwrap_err());
    }

    /// Mutated and cut transitions: never a panic, and the same verdict as the owned decode.
    #[test]
    fn borrowed_decode_agrees_on_mutated_bytes(
        m in arb_transition(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = spoil(encode(&m).expect("encode"), flips, cut);
        prop_assert!(borrowed_agrees(&bytes).is_ok(), "{}", borrowed_agrees(&bytes).unwrap_err());
    }

    #[test]
    fn borrowed_decode_agrees_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        prop_assert!(borrowed_agrees(&bytes).is_ok(), "{}", borrowed_agrees(&bytes).unwrap_err());
    }
}
