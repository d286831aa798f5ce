//! The committed fuzz corpora (`fuzz/corpus/decoder/`, `fuzz/corpus/scene/`) through the fuzz targets' own
//! bodies (`fuzz/fuzz_targets/bodies.rs`): a bounded, deterministic run of the fuzz checks in every test run.
//! Then 10000 seeded mutations each of the corpus files, and of the authentic frames' payloads sealed again with the
//! key (so that the message decoder behind the MAC sees arbitrary bytes), through the same bodies.
//! `cargo test -p stagewise-protocol --test corpus -- --ignored` writes the corpus files again.

#[path = "../fuzz/fuzz_targets/bodies.rs"]
mod bodies;

use proptest::prelude::*;
use stagewise_protocol::scene::{self, StateEntry, ViewEntry};
use stagewise_protocol::*;
use std::path::{Path, PathBuf};

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn files(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(corpus(target))
        .unwrap_or_else(|e| panic!("{}: {e}", corpus(target).display()))
        .map(|e| {
            let p = e.expect("entry").path();
            let b = std::fs::read(&p).expect("read");
            (p, b)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_frame_corpus_runs_clean() {
    let f = files("decoder");
    assert!(f.len() >= 5, "{} corpus files", f.len());
    let key = LinkKey::new(&bodies::FUZZ_KEY);
    let mut authentic = 0;
    for (path, bytes) in &f {
        bodies::frames(bytes);
        let mut d = FrameDecoder::new(key.clone(), Direction::HostToFirmware);
        d.feed(bytes, |r| authentic += usize::from(r.is_ok()));
        let _ = path;
    }
    assert!(
        authentic >= 3,
        "the corpus must reach behind the MAC: {authentic} authentic frames"
    );
}

#[test]
fn the_scene_corpus_runs_clean() {
    let f = files("scene");
    assert!(f.len() >= 5, "{} corpus files", f.len());
    for (_, bytes) in &f {
        bodies::scene(bytes);
    }
}

/// The payloads (`postcard(session, counter, message)`, tag and CRC off) of the authentic corpus frames.
fn authentic_payloads() -> &'static [Vec<u8>] {
    static PAYLOADS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    PAYLOADS.get_or_init(read_authentic_payloads)
}

fn read_authentic_payloads() -> Vec<Vec<u8>> {
    let key = LinkKey::new(&bodies::FUZZ_KEY);
    let mut out = Vec::new();
    for (_, bytes) in files("decoder") {
        for chunk in bytes.split(|&b| b == 0).filter(|c| !c.is_empty()) {
            let mut frame = chunk.to_vec();
            if decode_frame(&key, Direction::HostToFirmware, &mut frame.clone()).is_err() {
                continue;
            }
            let n = corncobs::decode_in_place(&mut frame).expect("COBS");
            out.push(frame[..n - TAG_LEN - 4].to_vec());
        }
    }
    out
}

/// `payload` sealed as a frame with the fuzz key: tag, CRC, COBS, delimiter (what `encode_frame` writes, for any
/// bytes).
fn seal_payload(dir: Direction, payload: &[u8]) -> Vec<u8> {
    let key = LinkKey::new(&bodies::FUZZ_KEY);
    let mut body = payload.to_vec();
    body.extend(key.tag(dir, payload));
    body.extend(CRC.checksum(&body).to_le_bytes());
    let mut out = vec![0u8; corncobs::max_encoded_len(body.len())];
    let n = corncobs::encode_buf(&body, &mut out);
    out.truncate(n);
    out
}

/// Mutates `bytes`: overwrites, inserts, deletes, cuts, appends.
fn mutate(mut bytes: Vec<u8>, edits: &[(u8, prop::sample::Index, u8)]) -> Vec<u8> {
    for &(op, at, b) in edits {
        let len = bytes.len();
        match op % 5 {
            0 if len > 0 => bytes[at.index(len)] = b,
            1 => bytes.insert(at.index(len + 1), b),
            2 if len > 0 => {
                bytes.remove(at.index(len));
            }
            3 => bytes.truncate(at.index(len + 1)),
            _ => bytes.extend(std::iter::repeat_n(b, usize::from(b % 16) + 1)),
        }
    }
    bytes
}

proptest! {
    // 10000 cases each (about a second each in a debug build), seeded.
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Behind the MAC: the authentic corpus payloads mutated and sealed again with the key, so that the message
    /// decoder itself sees arbitrary authentic bytes, through the fuzz target's body (no panic; an authentic
    /// frame re-encodes to itself; no other key accepts it). About 7 % of them decode to a message.
    #[test]
    fn mutated_authentic_payloads_through_the_frame_fuzz_body(
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<u8>(), any::<prop::sample::Index>(), any::<u8>()), 1..6),
        to_host in any::<bool>(),
    ) {
        let payloads = authentic_payloads();
        prop_assert!(payloads.len() >= 3);
        let p = mutate(payloads[which.index(payloads.len())].clone(), &edits);
        let dir = if to_host { Direction::FirmwareToHost } else { Direction::HostToFirmware };
        bodies::frames(&seal_payload(dir, &p));
    }

    /// The committed corpus files, mutated, through the fuzz targets' bodies.
    #[test]
    fn mutated_corpus_files_through_the_fuzz_bodies(
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<u8>(), any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        static ALL: std::sync::OnceLock<Vec<(PathBuf, Vec<u8>)>> = std::sync::OnceLock::new();
        let all = ALL.get_or_init(|| [files("decoder"), files("scene")].concat());
        let (path, bytes) = &all[which.index(all.len())];
        let m = mutate(bytes.clone(), &edits);
        if path.parent().is_some_and(|p| p.ends_with("scene")) {
            bodies::scene(&m);
        } else {
            bodies::frames(&m);
        }
    }
}

/// The re-sealing above is the encoder's framing: an authentic payload sealed again is the corpus frame.
#[test]
fn a_resealed_payload_is_the_frame_the_encoder_wrote() {
    let payloads = authentic_payloads();
    assert!(payloads.len() >= 3, "{} authentic payloads", payloads.len());
    let command = &files("decoder")
        .into_iter()
        .find(|(p, _)| p.ends_with("command"))
        .expect("the command frame")
        .1;
    assert!(payloads
        .iter()
        .any(|p| &seal_payload(Direction::HostToFirmware, p) == command));
}

fn seal(dir: Direction, session: u32, counter: u64, m: &Message) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME];
    let n = encode_frame(
        &LinkKey::new(&bodies::FUZZ_KEY),
        dir,
        Header { session, counter },
        m,
        &mut buf,
    )
    .expect("encodes");
    buf[..n].to_vec()
}

#[test]
#[ignore = "writes the corpus files; run by hand when the formats change"]
fn write_corpus() {
    let h2f = Direction::HostToFirmware;
    let cmd = Message::Command(Command {
        seq: 5,
        time_us: 1000,
        setpoint: Setpoint::EeVelocity([0.1, -0.2, 0.05]),
        gripper: 0.5,
    });
    let hello = Message::Hello(Hello {
        version: PROTOCOL_VERSION,
        role: Role::Host,
        nonce: 77,
        session: 0,
        capabilities: Capabilities(7),
        n_joints: 0,
        control_hz: 0,
    });
    let joints_cmd = Message::Command(Command {
        seq: 6,
        time_us: 2000,
        setpoint: Setpoint::Joints(joints(&[0.1, 0.2, 0.3]).expect("fits")),
        gripper: 1.0,
    });
    let mut two = seal(h2f, 9, 1, &cmd);
    two.extend([1, 2, 3, 0]);
    two.extend(seal(h2f, 9, 2, &joints_cmd));
    let mut crc_broken = seal(h2f, 9, 3, &cmd);
    crc_broken[4] ^= 0x10;
    let other_key = {
        let mut buf = [0u8; MAX_FRAME];
        let n = encode_frame(
            &LinkKey::new(&[0x43; KEY_LEN]),
            h2f,
            Header {
                session: 9,
                counter: 4,
            },
            &cmd,
            &mut buf,
        )
        .expect("encodes");
        buf[..n].to_vec()
    };
    let frames: [(&str, Vec<u8>); 7] = [
        ("command", seal(h2f, 9, 1, &cmd)),
        ("hello", seal(h2f, 0, 1, &hello)),
        (
            "reset-estop",
            seal(
                h2f,
                9,
                8,
                &Message::ResetEStop(ResetEStop {
                    seq: 2,
                    seen_telemetry: 40,
                }),
            ),
        ),
        ("two-frames-and-garbage", two),
        ("crc-broken", crc_broken),
        ("other-key", other_key),
        ("over-long", vec![0x55; 2 * MAX_FRAME]),
    ];
    let dir = corpus("decoder");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for (name, b) in frames {
        std::fs::write(dir.join(name), b).expect("write");
    }
    let mut header = Vec::new();
    scene::encode_header(
        "pick-place",
        &[ViewEntry {
            name: "front",
            width: 2,
            height: 2,
        }],
        &[StateEntry {
            name: "block0_x",
            low: -1.0,
            high: 1.0,
        }],
        &mut |b: &[u8]| header.extend_from_slice(b),
    );
    // A frame reply picks 1 state value (first byte % 8) and 1 view of 3 bytes (second byte % 4) in bodies::scene.
    let mut reply = vec![1u8, 1];
    scene::encode_frame_prefix(3, 1, &[0.5], &mut |b: &[u8]| reply.extend_from_slice(b));
    reply.extend([7, 8, 9]);
    let mut failure = vec![0u8, 0];
    scene::encode_failure(scene::STATUS_ERROR, "no frame yet", &mut |b: &[u8]| {
        failure.extend_from_slice(b)
    });
    let scenes: [(&str, Vec<u8>); 6] = [
        ("header", header.clone()),
        ("header-cut", header[..header.len() / 2].to_vec()),
        ("frame-reply", reply),
        ("failure-reply", failure),
        (
            "reset-request",
            [b"R".as_slice(), &42u64.to_le_bytes()].concat(),
        ),
        ("bad-magic", b"HTTP/1.1 200 OK\r\n".to_vec()),
    ];
    let dir = corpus("scene");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for (name, b) in scenes {
        std::fs::write(dir.join(name), b).expect("write");
    }
}
