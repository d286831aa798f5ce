//! The committed fuzz corpora (`fuzz/corpus/decoder/`, `fuzz/corpus/scene/`) through the fuzz targets' own
//! bodies (`fuzz/fuzz_targets/bodies.rs`): a bounded, deterministic run of the fuzz checks in every test run.
//! `cargo test -p stagewise-protocol --test corpus -- --ignored` writes the corpus files again.

#[path = "../fuzz/fuzz_targets/bodies.rs"]
mod bodies;

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
