//! Round trips, corruption detection, resynchronisation, handshake, the size budget, and a proptest fuzz of the
//! decoder. Frames are sealed with a test key; tests/auth.rs covers the MAC and the replay window.

use proptest::prelude::*;
use stagewise_protocol::*;

const KEY: [u8; KEY_LEN] = [0x42; KEY_LEN];
const DIR: Direction = Direction::HostToFirmware;
const HEADER: Header = Header {
    session: 0x1234_5678,
    counter: 7,
};

fn key() -> LinkKey {
    LinkKey::new(&KEY)
}

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
        rejected_frames: u32::MAX,
    })
}

fn samples() -> Vec<Message> {
    vec![
        Message::Hello(Hello {
            version: PROTOCOL_VERSION,
            role: Role::Host,
            nonce: 99,
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
        Message::Heartbeat(Heartbeat {
            seq: 3,
            time_us: 9,
            actor_step: 11,
        }),
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
        Message::ResetEStop(ResetEStop {
            seq: 6,
            seen_telemetry: 10,
        }),
    ]
}

fn encode(msg: &Message) -> Vec<u8> {
    encode_with(HEADER, msg)
}

fn encode_with(header: Header, msg: &Message) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME];
    let n = encode_frame(&key(), DIR, header, msg, &mut buf).expect("encodes");
    buf[..n].to_vec()
}

fn decode_all(bytes: &[u8]) -> Vec<Result<Message, FrameError>> {
    let mut d = FrameDecoder::new(key(), DIR);
    let mut out = Vec::new();
    d.feed(bytes, |r| {
        out.push(r.map(|f| {
            assert_eq!(f.header, HEADER);
            f.message
        }))
    });
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
    let e = encode_frame(&key(), DIR, HEADER, &full_telemetry(), &mut buf).unwrap_err();
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

/// A frame body made by hand: `payload ++ tag(payload) ++ crc`, COBS-framed by the test's own encoder.
fn hand_made(payload: &[u8], tag: [u8; TAG_LEN]) -> Vec<u8> {
    let mut raw = payload.to_vec();
    raw.extend(tag);
    raw.extend(CRC.checksum(&raw).to_le_bytes());
    let mut enc = vec![0u8; raw.len() + raw.len() / 254 + 2];
    let n = corncobs_encode(&raw, &mut enc);
    enc.truncate(n);
    enc
}

#[test]
fn authentic_payload_that_is_not_a_message_is_a_decode_error_not_a_panic() {
    // Header (session 1, counter 1), then a bad enum tag: authentic (right tag), CRC-valid, not a message.
    let payload = [1u8, 1, 0x63, 1, 2, 3];
    let f = hand_made(&payload, key().tag(DIR, &payload));
    let mut d = FrameDecoder::new(key(), DIR);
    let mut got = Vec::new();
    d.feed(&f, |r| got.push(r));
    assert!(matches!(got[0], Err(FrameError::Decode(_))), "{got:?}");
}

#[test]
fn a_crc_is_not_authentication() {
    // What an attacker without the key can do: take a real frame, change the command, fix the CRC.
    let m = samples()[2].clone();
    let mut raw = encode(&m);
    raw.pop();
    let n = corncobs::decode_in_place(&mut raw).expect("cobs");
    raw.truncate(n - 4);
    let payload_len = raw.len() - TAG_LEN;
    raw[payload_len - 5] ^= 0x40; // inside the gripper/velocity floats
    let (payload, tag) = raw.split_at(payload_len);
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(tag);
    let forged = hand_made(payload, t);
    assert_eq!(decode_all(&forged), vec![Err(FrameError::BadMac)]);
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
        nonce: 3,
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
                rejected_frames: 3,
            })
        ),
        (any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(seq, t, a)| Message::Heartbeat(
            Heartbeat {
                seq,
                time_us: t,
                actor_step: a
            }
        )),
        (any::<u32>(), any::<u32>()).prop_map(|(seq, s)| Message::ResetEStop(ResetEStop {
            seq,
            seen_telemetry: s
        })),
    ]
}

/// Compares messages bitwise (NaN payloads must survive too).
fn same(a: &Message, b: &Message) -> bool {
    encode(a) == encode(b)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The decoder never panics or hangs on arbitrary bytes, and its memory stays bounded.
    #[test]
    fn decoder_survives_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut d = FrameDecoder::new(key(), DIR);
        let mut frames = 0usize;
        d.feed(&bytes, |_| frames += 1);
        prop_assert!(frames <= bytes.len());
        prop_assert!(d.pending() < MAX_FRAME);
    }

    /// Arbitrary frame bodies fed straight to `decode_frame` never panic, and (without the key) never
    /// authenticate.
    #[test]
    fn decode_frame_survives_arbitrary_bodies(mut bytes in proptest::collection::vec(1u8..=255, 0..300)) {
        prop_assert!(decode_frame(&key(), DIR, &mut bytes).is_err());
    }

    /// Every message's encoding stays within its kind's computed maximum and the frame within MAX_FRAME.
    #[test]
    fn encodings_stay_within_the_size_budget(m in arb_message(), session in any::<u32>(), counter in any::<u64>()) {
        let f = encode_with(Header { session, counter }, &m);
        prop_assert!(f.len() <= MAX_FRAME);
        let mut buf = [0u8; MAX_PAYLOAD];
        let n = postcard::to_slice(&m, &mut buf).expect("fits").len();
        prop_assert!(n <= MAX_MESSAGE, "{n} > {MAX_MESSAGE}");
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
    // A typical header: a random session id (5 varint bytes) and an hour of frames at ~2 kHz (3 bytes).
    let header = Header {
        session: 0xdead_beef,
        counter: 7_000_000,
    };
    let with = |m: &Message| encode_with(header, m).len();
    let mut plain = [0u8; MAX_PAYLOAD];
    let cmd_plain = postcard::to_slice(&cmd, &mut plain).expect("fits").len();
    let sizes = (with(&cmd), with(&full_telemetry()));
    println!(
        "command {} bytes on the wire ({cmd_plain} bytes of message, {} bytes of header + MAC tag), largest telemetry {} bytes",
        sizes.0,
        sizes.0 - cmd_plain - 4 - 2,
        sizes.1
    );
    assert!(sizes.0 <= 57 && sizes.1 <= 190, "{sizes:?}");
}

/// The size budget is honest: the largest message of every kind encodes to exactly the maximum computed from
/// its field types (MAX_* in message.rs), which the compile-time assertion in frame.rs checks against
/// MAX_PAYLOAD; with the largest header the frame fits MAX_FRAME.
#[test]
fn computed_maximum_sizes_are_exact() {
    let j = joints(&[f32::MAX; MAX_JOINTS]).expect("fits");
    let biggest = [
        (
            Message::Hello(Hello {
                version: u16::MAX,
                role: Role::Firmware,
                nonce: u32::MAX,
                session: u32::MAX,
                capabilities: Capabilities(u32::MAX),
                n_joints: u8::MAX,
                control_hz: u16::MAX,
            }),
            MAX_HELLO,
        ),
        (
            Message::Command(Command {
                seq: u32::MAX,
                time_us: u64::MAX,
                setpoint: Setpoint::Joints(j.clone()),
                gripper: 1.0,
            }),
            MAX_COMMAND,
        ),
        (full_telemetry(), MAX_TELEMETRY),
        (
            Message::Heartbeat(Heartbeat {
                seq: u32::MAX,
                time_us: u64::MAX,
                actor_step: u32::MAX,
            }),
            MAX_HEARTBEAT,
        ),
        (
            Message::EStop(EStop {
                seq: u32::MAX,
                reason: StopReason::Shutdown,
            }),
            MAX_ESTOP,
        ),
        (
            Message::Arm(Arm {
                seq: u32::MAX,
                seen_telemetry: u32::MAX,
                command_floor: u32::MAX,
            }),
            MAX_ARM,
        ),
        (
            Message::Ack(Ack {
                seq: u32::MAX,
                kind: MessageKind::ResetEStop,
                status: AckStatus::VersionMismatch { ours: u16::MAX },
            }),
            MAX_ACK,
        ),
        (
            Message::ResetEStop(ResetEStop {
                seq: u32::MAX,
                seen_telemetry: u32::MAX,
            }),
            MAX_RESET_ESTOP,
        ),
    ];
    let mut buf = [0u8; MAX_PAYLOAD];
    let mut largest = 0;
    for (m, max) in &biggest {
        let n = postcard::to_slice(m, &mut buf).expect("fits").len();
        assert_eq!(n, 1 + max, "{m:?}: {n} bytes, computed 1 + {max}");
        largest = largest.max(n);
        let f = encode_with(
            Header {
                session: u32::MAX,
                counter: u64::MAX,
            },
            m,
        );
        assert!(f.len() <= MAX_FRAME);
    }
    assert_eq!(largest, MAX_MESSAGE);
}
