//! The scene-channel codec: the bytes on the wire (unchanged since the codec lived twice, in the emulator and the
//! host), round trips, `Incomplete` on every prefix, and arbitrary bytes into every decoder.

use proptest::prelude::*;
use stagewise_protocol::scene::*;

fn bytes(f: impl FnOnce(&mut dyn FnMut(&[u8]))) -> Vec<u8> {
    let mut out = Vec::new();
    f(&mut |b: &[u8]| out.extend_from_slice(b));
    out
}

fn header() -> Vec<u8> {
    let views = [
        ViewEntry {
            name: "front",
            width: 2,
            height: 1,
        },
        ViewEntry {
            name: "wrist",
            width: 1,
            height: 1,
        },
    ];
    let state = [StateEntry {
        name: "block0_x",
        low: -1.0,
        high: 0.5,
    }];
    bytes(|p| encode_header("pick-place", &views, &state, &mut |b| p(b)))
}

/// The header as the emulator wrote it before the codec moved here (hand-written from the documented format).
fn header_as_documented() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"SWSC");
    b.extend_from_slice(&1u16.to_le_bytes());
    for (s, rest) in [("pick-place", None), ("front", Some((2u32, 1u32)))] {
        b.extend_from_slice(&(s.len() as u16).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
        if s == "pick-place" {
            b.extend_from_slice(&2u16.to_le_bytes());
        }
        if let Some((w, h)) = rest {
            b.extend_from_slice(&w.to_le_bytes());
            b.extend_from_slice(&h.to_le_bytes());
        }
    }
    b.extend_from_slice(&5u16.to_le_bytes());
    b.extend_from_slice(b"wrist");
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&8u16.to_le_bytes());
    b.extend_from_slice(b"block0_x");
    b.extend_from_slice(&(-1.0f32).to_le_bytes());
    b.extend_from_slice(&0.5f32.to_le_bytes());
    b
}

#[test]
fn the_bytes_on_the_wire_are_the_documented_ones() {
    assert_eq!(header(), header_as_documented());
    let reply = bytes(|p| {
        encode_frame_prefix(7, 2, &[0.25], &mut |b| p(b));
        p(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    });
    let mut want = vec![0u8];
    want.extend_from_slice(&7u64.to_le_bytes());
    want.extend_from_slice(&2u64.to_le_bytes());
    want.extend_from_slice(&0.25f32.to_le_bytes());
    want.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(reply, want);
    let reset = bytes(|p| encode_request(Request::Reset { seed: 5 }, &mut |b| p(b)));
    assert_eq!(reset, [b"R".as_slice(), &5u64.to_le_bytes()].concat());
    assert_eq!(
        bytes(|p| encode_request(Request::Frame, &mut |b| p(b))),
        b"F"
    );
    let err = bytes(|p| encode_failure(STATUS_ERROR, "nope", &mut |b| p(b)));
    assert_eq!(err, [2, 4, 0, b'n', b'o', b'p', b'e']);
}

#[test]
fn header_request_and_reply_round_trip() {
    let h = header();
    let mut views = Vec::new();
    let mut state = Vec::new();
    let (task, used) = decode_header(&h, |v| views.push(v), |s| state.push(s)).expect("decodes");
    assert_eq!((task, used), ("pick-place", h.len()));
    assert_eq!(views.len(), 2);
    assert_eq!((views[0].name, views[0].frame_bytes()), ("front", 6));
    assert_eq!(state[0].name, "block0_x");
    assert_eq!(
        decode_request(b"R\x05\0\0\0\0\0\0\0"),
        Ok((Request::Reset { seed: 5 }, 9))
    );
    assert_eq!(decode_request(b"Fxyz"), Ok((Request::Frame, 1)));
    assert_eq!(decode_request(b"Q"), Err(SceneError::UnknownRequest(b'Q')));
    let reply = bytes(|p| {
        encode_frame_prefix(7, 2, &[0.25], &mut |b| p(b));
        p(&[9; 9]);
    });
    let mut st = [0.0f32; 1];
    let (r, used) = decode_frame_reply(&reply, &mut st, &[6, 3]).expect("decodes");
    assert_eq!(used, reply.len());
    assert_eq!(st, [0.25]);
    assert_eq!(
        r,
        FrameReply::Frame {
            plant_step: 7,
            resets: 2,
            pixels: &[9; 9]
        }
    );
    let e = bytes(|p| encode_failure(STATUS_ERROR, "the plant stopped", &mut |b| p(b)));
    assert_eq!(
        decode_frame_reply(&e, &mut st, &[6, 3]).expect("decodes").0,
        FrameReply::Error("the plant stopped")
    );
    assert_eq!(
        reply_status(Request::Reset { seed: 0 }, STATUS_RESET_FAILED),
        Ok(false)
    );
    assert_eq!(reply_status(Request::Frame, 7), Err(SceneError::Status(7)));
}

#[test]
fn every_prefix_is_incomplete_and_bad_headers_are_named() {
    let h = header();
    for cut in 0..h.len() {
        let r = decode_header(&h[..cut], |_| {}, |_| {});
        assert!(
            matches!(r, Err(SceneError::Incomplete { .. })),
            "cut {cut}: {r:?}"
        );
    }
    let mut bad = h.clone();
    bad[0] = b'X';
    assert!(matches!(
        decode_header(&bad, |_| {}, |_| {}),
        Err(SceneError::BadMagic(_))
    ));
    let mut v2 = h.clone();
    v2[4] = 2;
    assert_eq!(
        decode_header(&v2, |_| {}, |_| {}),
        Err(SceneError::Version(2))
    );
    let empty = bytes(|p| {
        encode_header(
            "t",
            &[ViewEntry {
                name: "v",
                width: 0,
                height: 9,
            }],
            &[],
            &mut |b| p(b),
        )
    });
    assert!(matches!(
        decode_header(&empty, |_| {}, |_| {}),
        Err(SceneError::ViewSize { index: 0, .. })
    ));
    let big = bytes(|p| {
        encode_header(
            "t",
            &[ViewEntry {
                name: "v",
                width: u32::MAX,
                height: u32::MAX,
            }],
            &[],
            &mut |b| p(b),
        )
    });
    assert!(decode_header(&big, |_| {}, |_| {}).is_err());
}

#[test]
fn long_strings_are_cut_at_a_character_boundary() {
    let s = "é".repeat(40_000); // 80,000 bytes
    let b = bytes(|p| put_str(&s, &mut |x| p(x)));
    let n = usize::from(u16::from_le_bytes([b[0], b[1]]));
    assert!(n <= usize::from(u16::MAX) && n % 2 == 0, "{n}");
    assert!(std::str::from_utf8(&b[2..]).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Arbitrary bytes into every decoder: no panic, used bytes within the input, and a decoded request
    /// re-encodes to the bytes it came from.
    #[test]
    fn decoders_survive_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..512), n_state in 0usize..6, views in proptest::collection::vec(0usize..64, 0..4)) {
        if let Ok((_, used)) = decode_header(&data, |v| assert!(v.frame_bytes() > 0), |_| {}) {
            prop_assert!(used <= data.len());
        }
        if let Ok((req, used)) = decode_request(&data) {
            let again = bytes(|p| encode_request(req, &mut |b| p(b)));
            prop_assert_eq!(&again[..], &data[..used]);
        }
        let mut st = vec![0.0f32; n_state];
        if let Ok((_, used)) = decode_frame_reply(&data, &mut st, &views) {
            prop_assert!(used <= data.len());
        }
    }

    /// Arbitrary bytes after a valid magic and version (deeper into the header): no panic.
    #[test]
    fn headers_with_a_valid_start_survive_arbitrary_tails(tail in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut data = b"SWSC\x01\x00".to_vec();
        data.extend(tail);
        let _ = decode_header(&data, |v| assert!(v.frame_bytes() > 0), |_| {});
    }
}
