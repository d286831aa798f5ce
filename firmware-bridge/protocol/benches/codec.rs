//! Encode/decode cost per frame (criterion): a 1 kHz command and a full 8-joint telemetry message, each sealed
//! (HMAC-SHA256 tag) and decoded (COBS, CRC, MAC check, postcard); and the MAC alone (tag and verify of the
//! command's payload), the part of the cost authentication adds.

use criterion::{criterion_group, criterion_main, Criterion};
use stagewise_protocol::*;
use std::hint::black_box;

fn messages() -> [(&'static str, Message); 2] {
    let j = joints(&[0.25; MAX_JOINTS]).expect("fits");
    [
        (
            "command_ee_velocity",
            Message::Command(Command {
                seq: 123_456,
                time_us: 1_234_567_890,
                setpoint: Setpoint::EeVelocity([0.1, -0.05, 0.02]),
                gripper: 0.5,
            }),
        ),
        (
            "telemetry_8_joints",
            Message::Telemetry(Telemetry {
                seq: 123_456,
                time_us: 1_234_567_890,
                state: FirmwareState::Armed,
                last_command_seq: 123_455,
                positions: j.clone(),
                velocities: j.clone(),
                efforts: j,
                ee: [0.1, 0.2, 0.3],
                gripper: 0.5,
                faults: Faults(0),
                bad_frames: 0,
                stale_commands: 0,
                rejected_frames: 0,
            }),
        ),
    ]
}

fn bench(c: &mut Criterion) {
    let key = LinkKey::new(&[0x5a; KEY_LEN]);
    // A random session id and an hour of frames at ~2 kHz: a typical header.
    let header = Header {
        session: 0xdead_beef,
        counter: 7_000_000,
    };
    for (name, m) in messages() {
        let mut buf = [0u8; MAX_FRAME];
        let dir = Direction::HostToFirmware;
        c.bench_function(&format!("encode/{name}"), |b| {
            b.iter(|| encode_frame(&key, dir, header, black_box(&m), &mut buf).expect("encodes"))
        });
        let n = encode_frame(&key, dir, header, &m, &mut buf).expect("encodes");
        let frame = buf;
        let mut plain = [0u8; MAX_PAYLOAD];
        let message = postcard::to_slice(&m, &mut plain).expect("fits").len();
        println!(
            "{name}: {n} bytes on the wire ({message} bytes of message; {TAG_LEN}-byte tag + {} header bytes)",
            n - message - TAG_LEN - 4 - 2
        );
        let mut dec = FrameDecoder::new(key.clone(), dir);
        c.bench_function(&format!("decode/{name}"), |b| {
            b.iter(|| {
                let mut got = None;
                dec.feed(black_box(&frame[..n]), |r| got = Some(r));
                got
            })
        });
    }
    let mut payload = [0u8; MAX_PAYLOAD];
    let (_, m) = &messages()[0];
    let p = postcard::to_slice(&(header.session, header.counter, m), &mut payload)
        .expect("fits")
        .len();
    let tag = key.tag(Direction::HostToFirmware, &payload[..p]);
    c.bench_function("mac/tag_command_payload", |b| {
        b.iter(|| key.tag(Direction::HostToFirmware, black_box(&payload[..p])))
    });
    c.bench_function("mac/verify_command_payload", |b| {
        b.iter(|| key.verify(Direction::HostToFirmware, black_box(&payload[..p]), &tag))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
