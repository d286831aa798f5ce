//! The wire decoder against a committed corpus (issue 19 item 4): the valid samples of `tests/samples/` (one
//! per message kind, as the encoder writes them) and the hostile inputs of `tests/corpus/` (nesting past the
//! decoder's depth limit, lengths that promise gigabytes, tensors whose shape overflows, wrong types, non-UTF-8
//! strings, duplicate keys, junk signatures). Every file, every prefix of every file and thousands of seeded
//! mutations of them (byte flips, insertions, deletions, duplicated runs, splices of two files) go through the
//! decoder of every message kind and through what a receiver does next (tensors to frames and floats, the
//! policy's hash and signing message). Nothing may panic; a borrowed and an owned transition decode agree; what
//! decodes re-encodes to bytes that decode to the same bytes again; a cut valid message is refused.
//!
//! A bounded, deterministic run (proptest's seeded RNG) inside `cargo test`:
//! `cargo test -p stagewise-wire --test integration corpus::`. The corpus files are written again by
//! `cargo test -p stagewise-wire --test integration corpus::write_corpus -- --ignored`.

use proptest::prelude::*;
use rmpv::Value;
use stagewise_wire::*;
use std::path::{Path, PathBuf};

fn dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(name)
}

fn files_in(d: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .map(|e| {
            let p = e.expect("entry").path();
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect();
    out.sort();
    out
}

/// The committed corpus: valid samples first, then the hostile files.
fn corpus() -> &'static [(String, Vec<u8>)] {
    static CORPUS: std::sync::OnceLock<Vec<(String, Vec<u8>)>> = std::sync::OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut all = files_in(&dir("samples"));
        all.extend(files_in(&dir("corpus")));
        all
    })
}

/// Encoding `m` gives bytes that decode, and re-encode to the same bytes (a decoded message is one the encoder
/// can send on: nothing half-valid gets through).
fn stable<M>(what: &str, m: &M, input: &[u8])
where
    M: WireMessage + for<'de> serde::Deserialize<'de>,
{
    let once = encode(m).unwrap_or_else(|e| panic!("{what}: decoded but does not encode: {e}"));
    let back: M = decode(&once).unwrap_or_else(|e| {
        panic!("{what}: decoded from {input:02x?}, re-encoded to {once:02x?}, refused: {e}")
    });
    assert_eq!(
        encode(&back).expect("encode"),
        once,
        "{what}: re-encoding is not stable"
    );
}

/// Everything a receiver does with bytes from the network: decode as every kind, then use what decoded.
/// Returns how many kinds accepted the bytes.
fn receive(bytes: &[u8]) -> usize {
    let mut accepted = 0;
    let _ = peek_header(bytes);
    let owned = decode::<TransitionMsg>(bytes);
    let borrowed = decode::<TransitionMsg<Borrowed>>(bytes);
    match (&owned, borrowed) {
        (Ok(o), Ok(b)) => {
            assert_eq!(&b.into_owned(), o, "borrowed and owned decodes differ");
            accepted += 1;
            stable("transition", o, bytes);
            let _ = o.to_transition();
            for obs in [&o.obs, &o.next_obs].into_iter().flatten() {
                let _ = obs.to_observation();
            }
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "errors differ"),
        (o, b) => panic!(
            "owned {:?} but borrowed {:?}",
            o.as_ref().map(|_| ()),
            b.map(|_| ())
        ),
    }
    if let Ok(m) = decode::<ProgressMsg>(bytes) {
        accepted += 1;
        stable("progress", &m, bytes);
        let _ = m.to_progress();
    }
    if let Ok(m) = decode::<EpisodeMsg>(bytes) {
        accepted += 1;
        stable("episode", &m, bytes);
    }
    if let Ok(m) = decode::<PolicyMsg>(bytes) {
        accepted += 1;
        stable("policy", &m, bytes);
        let _ = m.sha256_bytes();
        let _ = m.verify_sha256();
        let _ = m.signing_message("pick-place");
    }
    if let Ok(m) = decode::<ResetRequest>(bytes) {
        accepted += 1;
        stable("reset request", &m, bytes);
    }
    if let Ok(m) = decode::<ResetReply>(bytes) {
        accepted += 1;
        stable("reset reply", &m, bytes);
    }
    if let Ok(m) = decode::<StepRequest>(bytes) {
        accepted += 1;
        stable("step request", &m, bytes);
    }
    if let Ok(m) = decode::<StepReply>(bytes) {
        accepted += 1;
        stable("step reply", &m, bytes);
    }
    accepted
}

#[test]
fn the_corpus_is_there() {
    let samples = files_in(&dir("samples")).len();
    let hostile = files_in(&dir("corpus")).len();
    assert!(
        samples >= 13 && hostile >= 12,
        "{samples} samples, {hostile} hostile files"
    );
}

/// Each valid sample decodes as exactly its own kind; each hostile file as nothing.
#[test]
fn every_corpus_file_decodes_as_its_kind_or_not_at_all() {
    for (name, bytes) in corpus() {
        let n = receive(bytes);
        if name.ends_with(".msgpack") {
            assert_eq!(n, 1, "{name}: accepted by {n} kinds");
        } else {
            assert_eq!(n, 0, "{name}: a hostile input was accepted");
        }
    }
}

/// A valid message cut anywhere is refused (the decoder never reads a prefix as a whole message). Every prefix
/// of the first KiB of a file, every 16th after it (the long files are the nesting ones).
#[test]
fn every_prefix_of_every_corpus_file_is_refused() {
    let mut prefixes = 0;
    for (name, bytes) in corpus() {
        for end in (0..bytes.len()).filter(|&e| e < 1024 || e % 16 == 0) {
            assert_eq!(receive(&bytes[..end]), 0, "{name} cut at {end}");
            prefixes += 1;
        }
    }
    assert!(prefixes > 3000, "{prefixes} prefixes");
}

/// One mutation of a corpus file.
#[derive(Debug, Clone)]
enum Edit {
    Set(prop::sample::Index, u8),
    Insert(prop::sample::Index, Vec<u8>),
    Delete(prop::sample::Index, usize),
    Repeat(prop::sample::Index, usize),
    /// The head of this input up to the first index, then another corpus file from the second index on.
    Splice(
        prop::sample::Index,
        prop::sample::Index,
        prop::sample::Index,
    ),
}

fn edit() -> impl Strategy<Value = Edit> {
    let ix = any::<prop::sample::Index>;
    prop_oneof![
        4 => (ix(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        // msgpack markers that change a value's type or length more often than a random byte does.
        2 => (ix(), prop::sample::select(vec![0xc0u8, 0xc2, 0xc4, 0xc5, 0xc6, 0xca, 0xcb, 0xcf, 0xd9,
                                               0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0x90, 0x80, 0xa0, 0xff]))
            .prop_map(|(i, b)| Edit::Set(i, b)),
        2 => (ix(), proptest::collection::vec(any::<u8>(), 1..8)).prop_map(|(i, b)| Edit::Insert(i, b)),
        2 => (ix(), 1usize..16).prop_map(|(i, n)| Edit::Delete(i, n)),
        1 => (ix(), 1usize..32).prop_map(|(i, n)| Edit::Repeat(i, n)),
        1 => (ix(), ix(), ix()).prop_map(|(a, f, b)| Edit::Splice(a, f, b)),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let len = bytes.len();
        match e {
            Edit::Set(i, b) if len > 0 => bytes[i.index(len)] = *b,
            Edit::Insert(i, b) => {
                let at = i.index(len + 1);
                bytes.splice(at..at, b.iter().copied());
            }
            Edit::Delete(i, n) if len > 0 => {
                let at = i.index(len);
                bytes.drain(at..(at + n).min(len));
            }
            Edit::Repeat(i, n) if len > 0 => {
                let at = i.index(len);
                let run = bytes[at..(at + n).min(len)].to_vec();
                bytes.splice(at..at, run);
            }
            Edit::Splice(a, f, b) => {
                let other = &corpus()[f.index(corpus().len())].1;
                bytes.truncate(a.index(len + 1));
                bytes.extend_from_slice(&other[b.index(other.len() + 1)..]);
            }
            _ => {}
        }
    }
    bytes
}

proptest! {
    // 4000 mutated inputs (about 2 s in a debug build); proptest's RNG is seeded, so the run is the same each time.
    #![proptest_config(ProptestConfig { cases: 4000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_corpus_files_never_panic_the_receiver(
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec(edit(), 1..6),
    ) {
        let base = &corpus()[which.index(corpus().len())].1;
        receive(&apply(base.clone(), &edits));
    }
}

// ---- writing the hostile corpus ----

fn sample_value(name: &str) -> Value {
    let bytes = std::fs::read(dir("samples").join(format!("{name}.msgpack"))).expect("sample");
    rmpv::decode::read_value(&mut bytes.as_slice()).expect("a msgpack value")
}

fn to_bytes(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v).expect("encode value");
    out
}

fn field<'a>(v: &'a mut Value, key: &str) -> &'a mut Value {
    match v {
        Value::Map(m) => m
            .iter_mut()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no key {key}")),
        other => panic!("not a map: {other}"),
    }
}

/// `sample` with `edit` applied to its value.
fn edited(sample: &str, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v = sample_value(sample);
    edit(&mut v);
    to_bytes(&v)
}

/// The first image tensor of the sample `transition_obs`'s `next_obs`: `{dtype, shape, data}`.
fn first_view(v: &mut Value) -> &mut Value {
    match field(field(v, "next_obs"), "images") {
        Value::Map(m) => &mut m[0].1,
        other => panic!("images: {other}"),
    }
}

#[test]
#[ignore = "writes tests/corpus/; run by hand when the wire format changes"]
fn write_corpus() {
    let mut deep = vec![0x91u8; 5000];
    deep.push(0xc0);
    let mut deep_map = [0x81u8, 0xa1, b'k'].repeat(2000);
    deep_map.push(0xc0);
    let files: Vec<(&str, Vec<u8>)> = vec![
        // 5000 nested one-element arrays, then a nested value inside a message's ignored field.
        ("nested-arrays", deep),
        (
            "nested-in-a-message",
            edited("progress", |v| {
                if let Value::Map(m) = v {
                    let mut inner = Value::Nil;
                    for _ in 0..3000 {
                        inner = Value::Array(vec![inner]);
                    }
                    m.push((Value::from("extra"), inner));
                }
            }),
        ),
        ("nested-maps", deep_map),
        // bin32 promising 4 GiB of tensor data, with 3 bytes behind it.
        (
            "tensor-data-4gib",
            promise_length(
                edited("transition_obs", |v| {
                    *field(first_view(v), "data") = Value::Binary(vec![1, 2, 3]);
                }),
                &[0xc4, 0x03, 1, 2, 3],
                &[0xc6, 0xff, 0xff, 0xff, 0xff, 1, 2, 3],
            ),
        ),
        // An array32 header promising 2^32-1 elements where the observation's views are.
        (
            "array-4g-elements",
            [
                edited("episode", |_| {})[..20].to_vec(),
                vec![0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0],
            ]
            .concat(),
        ),
        // A tensor whose shape's product overflows u64, and one whose data is a byte short.
        (
            "tensor-shape-overflow",
            edited("transition_obs", |v| {
                *field(first_view(v), "shape") = Value::Array(vec![
                    Value::from(u64::MAX / 2),
                    Value::from(u64::MAX / 2),
                    Value::from(3u64),
                ]);
            }),
        ),
        (
            "tensor-data-short",
            edited("transition_obs", |v| {
                if let Value::Binary(b) = field(first_view(v), "data") {
                    b.pop();
                }
            }),
        ),
        (
            "tensor-unknown-dtype",
            edited("transition_obs", |v| {
                *field(first_view(v), "dtype") = Value::from("complex128");
            }),
        ),
        // Types: the step as a string, the reward as a map, the robot as bytes that are not UTF-8.
        (
            "step-as-string",
            edited("transition", |v| *field(v, "step") = Value::from("300")),
        ),
        (
            "robot-not-utf8",
            promise_length(
                edited("progress", |v| {
                    *field(v, "robot") = Value::from("\u{1}\u{2}\u{3}")
                }),
                &[0xa3, 1, 2, 3],
                &[0xa3, 0xff, 0xfe, 0x00],
            ),
        ),
        // `schema` twice: once valid, once not.
        (
            "duplicate-schema",
            edited("episode", |v| {
                if let Value::Map(m) = v {
                    m.push((Value::from("schema"), Value::from(999u64)));
                }
            }),
        ),
        // A policy whose signature is one byte short, and one whose sha256 is not hex.
        (
            "policy-signature-63",
            edited("policy_signed", |v| {
                if let Value::Binary(b) = field(v, "signature") {
                    b.pop();
                }
            }),
        ),
        (
            "policy-sha256-not-hex",
            edited("policy", |v| {
                *field(v, "sha256") = Value::from("zz".repeat(32))
            }),
        ),
        // A newer schema and an unknown kind.
        (
            "schema-99",
            edited("step_request", |v| *field(v, "schema") = Value::from(99u64)),
        ),
        (
            "kind-unknown",
            edited("step_request", |v| {
                *field(v, "kind") = Value::from("launch")
            }),
        ),
        // Not msgpack at all.
        (
            "http",
            b"GET /stagewise/robot/policy HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
    ];
    let out = dir("corpus");
    std::fs::create_dir_all(&out).expect("mkdir");
    for (name, bytes) in files {
        std::fs::write(out.join(name), bytes).expect("write");
    }
}

/// Replaces the first occurrence of `from` in `bytes` by `to`.
fn promise_length(mut bytes: Vec<u8>, from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("the pattern");
    bytes.splice(at..at + from.len(), to.iter().copied());
    bytes
}
