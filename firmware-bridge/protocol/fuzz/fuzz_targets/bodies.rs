//! The bodies of the fuzz targets, shared with `protocol/tests/corpus.rs`, which runs every committed corpus
//! file (`fuzz/corpus/<target>/`) through them in the normal test suite. Frames are authenticated with
//! [`FUZZ_KEY`], so corpus frames sealed with it reach the message decoder behind the MAC.
#![allow(dead_code)]

use stagewise_protocol::scene::{self, Request};
use stagewise_protocol::*;

/// The key the corpus frames are sealed with.
pub const FUZZ_KEY: [u8; KEY_LEN] = [0x42; KEY_LEN];

fn sealed(key: &LinkKey, dir: Direction, f: &Frame) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME];
    let n =
        encode_frame(key, dir, f.header, &f.message, &mut buf).expect("a decoded frame re-encodes");
    buf[..n].to_vec()
}

/// Arbitrary bytes into the streaming decoder (both directions) and `decode_frame`: no panic, bounded memory;
/// an authentic frame re-encodes to a frame that decodes to the same bytes, and no other key or direction
/// accepts it; the replay window accepts a counter at most once.
pub fn frames(data: &[u8]) {
    let key = LinkKey::new(&FUZZ_KEY);
    let other = LinkKey::new(&[0x43; KEY_LEN]);
    for dir in [Direction::HostToFirmware, Direction::FirmwareToHost] {
        let mut dec = FrameDecoder::new(key.clone(), dir);
        let mut found = Vec::new();
        dec.feed(data, |r| {
            if let Ok(f) = r {
                found.push(f);
            }
        });
        assert!(dec.pending() < MAX_FRAME);
        for f in found {
            let bytes = sealed(&key, dir, &f);
            let mut again = FrameDecoder::new(key.clone(), dir);
            let mut same = false;
            again.feed(&bytes, |r| {
                same = matches!(&r, Ok(g) if sealed(&key, dir, g) == bytes);
            });
            assert!(
                same,
                "an authentic frame did not survive a re-encode: {f:?}"
            );
            let mut stranger = FrameDecoder::new(other.clone(), dir);
            stranger.feed(&bytes, |r| assert_eq!(r, Err(FrameError::BadMac)));
        }
    }
    let mut body: Vec<u8> = data.iter().copied().filter(|&b| b != 0).collect();
    let _ = decode_frame(&key, Direction::HostToFirmware, &mut body);
    let mut w = ReplayWindow::new();
    for chunk in data.chunks(2) {
        let c = u64::from(u16::from_le_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]));
        let fresh = w.check(c);
        assert_eq!(w.accept(c), fresh);
        assert!(!w.accept(c));
    }
}

/// Arbitrary bytes into every scene-channel decoder: no panic, used bytes within the input, a decoded request
/// re-encodes to its bytes. The first two bytes pick the state count and the view sizes of the frame reply.
pub fn scene(data: &[u8]) {
    if let Ok((_, used)) = scene::decode_header(data, |v| assert!(v.frame_bytes() > 0), |_| {}) {
        assert!(used <= data.len());
    }
    if let Ok((req, used)) = scene::decode_request(data) {
        let mut again = Vec::new();
        scene::encode_request(req, &mut |b: &[u8]| again.extend_from_slice(b));
        assert_eq!(&again[..], &data[..used]);
        assert!(matches!(req, Request::Frame | Request::Reset { .. }));
    }
    let n_state = data.first().map_or(0, |b| usize::from(b % 8));
    let views: Vec<usize> = (0..data.get(1).map_or(0, |b| b % 4))
        .map(|i| 3 * (usize::from(i) + 1))
        .collect();
    let mut state = vec![0.0f32; n_state];
    if let Ok((_, used)) =
        scene::decode_frame_reply(data.get(2..).unwrap_or(&[]), &mut state, &views)
    {
        assert!(used + 2 <= data.len());
    }
}
