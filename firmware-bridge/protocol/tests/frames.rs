//! Round trips, corruption detection, resynchronisation, handshake, and a proptest fuzz of the decoder.

use proptest::prelude::*;
use stagewise_protocol::*;

fn full_telemetry() -> Message {
    let j = joints(&[f32::MAX; MAX_JOINTS]).expect("8 joints fit");
    Message::Telemetry(Telemetry {
        seq: u32::MAX,
        time_us: u64::MAX,
        state: FirmwareState::EStopped,
        last_command_seq: u32::MAX,
        positions: j.clone(),
        velocities: j.clone(),
        efforts: j,
        ee: [f32::MIN; 3],
        gripper: 1.0,
        faults: Faults(u16::MAX),
        bad_frames: u32::MAX,
        stale_commands: u32::MAX,
    })
}

fn samples() -> Vec<Message> {
    vec![
        Message::Hello(Hello {
            version: PROTOCOL_VERSION,
            role: Role::Host,
            session: 42,
            capabilities: Capabilities(Capabilities::EE_VELOCITY | Capabilities::GRIPPER),
            n_joints: 0,
            control_hz: 0,
        }),
        Message::Command(Command {
            seq: 7,
            time_us: 123_456,
            setpoint: Setpoint::Joints(joints(&[0.1, -0.2, 0.3]).expect("fits")),
            gripper: 0.5,
        }),
        Message::Command(Command {
            seq: u32::MAX,
            time_us: u64::MAX,
            setpoint: Setpoint::EeVelocity([0.01, 0.0, -0.3]),
            gripper: 0.0,
        }),
        full_telemetry(),
        Message::Heartbeat(Heartbeat { seq: 3, time_us: 9 }),
        Message::EStop(EStop {
            seq: 4,
            reason: StopReason::HostWatchdog,
        }),
        Message::Arm(Arm {
            seq: 5,
            seen_telemetry: 9,
            command_floor: 12,
        }),
        Message::Ack(Ack {
            seq: 5,
            kind: MessageKind::Hello,
            status: AckStatus::VersionMismatch { ours: 1 },
        }),
    ]
}

fn encode(msg: &Message) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME];
    let n = encode_frame(msg, &mut buf).expect("encodes");
    buf[..n].to_vec()
}

fn decode_all(bytes: &[u8]) -> Vec<Result<Message, FrameError>> {
    let mut d = FrameDecoder::new();
    let mut out = Vec::new();
    d.feed(bytes, |r| out.push(r));
    out
}

#[test]
fn every_message_round_trips_and_fits() {
    for m in samples() {
        let f = encode(&m);
        assert!(f.len() <= MAX_FRAME, "{m:?} made {} bytes", f.len());
        assert_eq!(f.last(), Some(&0), "frames end with the delimiter");
        assert_eq!(
            f.iter().filter(|&&b| b == 0).count(),
            1,
            "exactly one zero per frame"
        );
        let got = decode_all(&f);
        assert_eq!(got, vec![Ok(m.clone())]);
    }
}

#[test]
fn largest_message_is_well_under_the_limit() {
    let f = encode(&full_telemetry());
    assert!(
        f.len() < MAX_FRAME - 40,
        "largest frame is {} of {MAX_FRAME}",
        f.len()
    );
}

#[test]
fn small_output_buffer_is_an_error_not_a_panic() {
    let mut buf = [0u8; 8];
    let e = encode_frame(&full_telemetry(), &mut buf).unwrap_err();
    assert!(
        matches!(e, FrameError::BufferTooSmall { have: 8, .. }),
        "{e}"
    );
}

#[test]
fn every_single_bit_flip_is_rejected() {
    for m in samples() {
        let f = encode(&m);
        for i in 0..f.len() - 1 {
            for bit in 0..8 {
                let mut g = f.clone();
                g[i] ^= 1 << bit;
                for r in decode_all(&g) {
                    assert!(
                        r.is_err(),
                        "flip byte {i} bit {bit} of {m:?} decoded to {r:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn truncated_frames_are_rejected() {
    for m in samples() {
        let f = encode(&m);
        for cut in 1..f.len() - 1 {
            let mut g = f[..cut].to_vec();
            g.push(0);
            for r in decode_all(&g) {
                assert!(r.is_err(), "cut at {cut} of {m:?} decoded");
            }
        }
    }
}

#[test]
fn decoder_resynchronises_after_garbage_and_overflow() {
    let m = samples();
    let mut bytes = vec![1u8, 2, 3, 0xff]; // garbage without delimiter
    bytes.extend(encode(&m[1])); // joined by the garbage: this frame is lost (one error)
    bytes.extend(encode(&m[2]));
    bytes.extend(std::iter::repeat_n(0x55u8, 3 * MAX_FRAME)); // an over-long run
    bytes.push(0);
    bytes.extend(encode(&m[3]));
    let got = decode_all(&bytes);
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got[0].is_err());
    assert_eq!(got[1], Ok(m[2].clone()));
    assert_eq!(got[2], Err(FrameError::TooLong));
    assert_eq!(got[3], Ok(m[3].clone()));
}

#[test]
fn leading_delimiter_flushes_a_partial_frame() {
    let m = samples();
    let mut bytes = encode(&m[0]);
    bytes.truncate(5); // the receiver joined mid-frame
    bytes.push(0);
    bytes.push(0);
    bytes.extend(encode(&m[4]));
    let got = decode_all(&bytes);
    assert_eq!(got.len(), 2);
    assert_eq!(got[1], Ok(m[4].clone()));
}

#[test]
fn corrupted_payload_with_crc_fixed_is_a_decode_error_not_a_panic() {
    // A well-framed, CRC-valid body that is not a message (bad enum tag).
    let body = [0x63u8, 1, 2, 3];
    let mut raw = body.to_vec();
    raw.extend(CRC.checksum(&body).to_le_bytes());
    let mut enc = vec![0u8; 64];
    let n = corncobs_encode(&raw, &mut enc);
    let got = decode_all(&enc[..n]);
    assert!(matches!(got[0], Err(FrameError::Decode(_))), "{got:?}");
}

fn corncobs_encode(raw: &[u8], out: &mut [u8]) -> usize {
    // Minimal COBS encoder for the test (independent of the crate under test).
    let mut o = 1;
    let mut code_pos = 0;
    let mut code = 1u8;
    for &b in raw {
        if b == 0 {
            out[code_pos] = code;
            code_pos = o;
            o += 1;
            code = 1;
        } else {
            out[o] = b;
            o += 1;
            code += 1;
            if code == 0xff {
                out[code_pos] = code;
                code_pos = o;
                o += 1;
                code = 1;
            }
        }
    }
    out[code_pos] = code;
    out[o] = 0;
    o + 1
}

#[test]
fn handshake_refuses_other_versions() {
    let mut h = Hello {
        version: PROTOCOL_VERSION,
        role: Role::Firmware,
        session: 1,
        capabilities: Capabilities(0),
        n_joints: 3,
        control_hz: 1000,
    };
    assert_eq!(check_hello(&h), Ok(()));
    h.version = PROTOCOL_VERSION + 1;
    let e = check_hello(&h).unwrap_err();
    assert_eq!(
        e,
        HandshakeError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: PROTOCOL_VERSION + 1
        }
    );
    assert!(e.to_string().contains("mismatch"));
}

#[test]
fn too_many_joints_are_refused() {
    assert!(joints(&[0.0; MAX_JOINTS + 1]).is_none());
}

fn arb_message() -> impl Strategy<Value = Message> {
    let f = any::<f32>();
    let jv = proptest::collection::vec(any::<f32>(), 0..=MAX_JOINTS)
        .prop_map(|v| joints(&v).expect("<= MAX_JOINTS"));
    prop_oneof![
        (any::<u32>(), any::<u64>(), jv.clone(), f).prop_map(|(seq, t, j, g)| Message::Command(
            Command {
                seq,
                time_us: t,
                setpoint: Setpoint::Joints(j),
                gripper: g
            }
        )),
        (any::<u32>(), any::<u64>(), any::<[f32; 3]>(), f).prop_map(|(seq, t, v, g)| {
            Message::Command(Command {
                seq,
                time_us: t,
                setpoint: Setpoint::EeVelocity(v),
                gripper: g,
            })
        }),
        (any::<u32>(), any::<u64>(), jv.clone(), jv, any::<u16>()).prop_map(
            |(seq, t, p, v, fl)| Message::Telemetry(Telemetry {
                seq,
                time_us: t,
                state: FirmwareState::Armed,
                last_command_seq: seq / 2,
                positions: p,
                velocities: v.clone(),
                efforts: v,
                ee: [0.1, 0.2, 0.3],
                gripper: 0.5,
                faults: Faults(fl),
                bad_frames: 1,
                stale_commands: 2,
            })
        ),
        (any::<u32>(), any::<u64>())
            .prop_map(|(seq, t)| Message::Heartbeat(Heartbeat { seq, time_us: t })),
    ]
}

/// Compares messages bitwise (NaN payloads must survive too).
fn same(a: &Message, b: &Message) -> bool {
    let (mut x, mut y) = ([0u8; MAX_FRAME], [0u8; MAX_FRAME]);
    let (n, m) = (encode_frame(a, &mut x), encode_frame(b, &mut y));
    matches!((n, m), (Ok(n), Ok(m)) if x[..n] == y[..m])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The decoder never panics or hangs on arbitrary bytes, and its memory stays bounded.
    #[test]
    fn decoder_survives_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut d = FrameDecoder::new();
        let mut frames = 0usize;
        d.feed(&bytes, |_| frames += 1);
        prop_assert!(frames <= bytes.len());
        prop_assert!(d.pending() < MAX_FRAME);
    }

    /// Arbitrary frame bodies fed straight to `decode_frame` never panic.
    #[test]
    fn decode_frame_survives_arbitrary_bodies(mut bytes in proptest::collection::vec(1u8..=255, 0..300)) {
        let _ = decode_frame(&mut bytes);
    }

    /// Any message survives a round trip, and is found again after arbitrary garbage plus one delimiter.
    #[test]
    fn round_trip_after_garbage(m in arb_message(), garbage in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut bytes = garbage;
        bytes.push(0);
        bytes.extend(encode(&m));
        let got = decode_all(&bytes);
        let last = got.last().cloned();
        prop_assert!(matches!(&last, Some(Ok(d)) if same(d, &m)), "{:?}", last);
    }

    /// A random corruption of one to four bytes of a frame is never accepted as a different message.
    #[test]
    fn random_corruption_never_yields_a_wrong_message(
        m in arb_message(),
        hits in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let mut f = encode(&m);
        let body = f.len() - 1;
        for (i, x) in hits {
            f[i.index(body)] ^= x;
        }
        for d in decode_all(&f).into_iter().flatten() {
            prop_assert!(same(&d, &m), "corruption produced {:?}", d);
        }
    }
}

#[test]
fn wire_sizes() {
    assert_eq!(MAX_FRAME, 246);
    let cmd = Message::Command(Command {
        seq: 1_000_000,
        time_us: 1_000_000_000,
        setpoint: Setpoint::EeVelocity([0.1, 0.2, 0.3]),
        gripper: 1.0,
    });
    let sizes = (encode(&cmd).len(), encode(&full_telemetry()).len());
    println!(
        "command {} bytes, largest telemetry {} bytes",
        sizes.0, sizes.1
    );
    assert!(sizes.0 <= 32 && sizes.1 <= 160, "{sizes:?}");
}
