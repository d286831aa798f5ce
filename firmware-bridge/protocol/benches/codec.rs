//! Encode/decode cost per frame (criterion): a 1 kHz command and a full 8-joint telemetry message.

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
            }),
        ),
    ]
}

fn bench(c: &mut Criterion) {
    for (name, m) in messages() {
        let mut buf = [0u8; MAX_FRAME];
        c.bench_function(&format!("encode/{name}"), |b| {
            b.iter(|| encode_frame(black_box(&m), &mut buf).expect("encodes"))
        });
        let n = encode_frame(&m, &mut buf).expect("encodes");
        let frame = buf;
        println!("{name}: {n} bytes on the wire");
        let mut dec = FrameDecoder::new();
        c.bench_function(&format!("decode/{name}"), |b| {
            b.iter(|| {
                let mut got = None;
                dec.feed(black_box(&frame[..n]), |r| got = Some(r));
                got
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
