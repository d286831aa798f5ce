//! Frame authentication: keys (parsing, the public key, fingerprints), the MAC (another key, another direction, a
//! changed header or message never verifies), and the replay window against a model.

use proptest::prelude::*;
use stagewise_protocol::*;
use std::collections::HashSet;

const KEY: [u8; KEY_LEN] = [0x42; KEY_LEN];

fn hb(seq: u32) -> Message {
    Message::Heartbeat(Heartbeat {
        seq,
        time_us: 5,
        actor_step: 6,
    })
}

fn seal(key: &LinkKey, dir: Direction, header: Header, m: &Message) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME];
    let n = encode_frame(key, dir, header, m, &mut buf).expect("encodes");
    buf[..n].to_vec()
}

fn open(key: &LinkKey, dir: Direction, bytes: &[u8]) -> Vec<Result<Frame, FrameError>> {
    let mut d = FrameDecoder::new(key.clone(), dir);
    let mut out = Vec::new();
    d.feed(bytes, |r| out.push(r));
    out
}

#[test]
fn keys_parse_from_hex_and_the_public_key_is_refused() {
    let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
    let k = LinkKey::parse_hex(&format!("  {hex}\n")).expect("parses");
    assert!(!k.is_public());
    assert_eq!(
        LinkKey::parse_hex(&hex[..62]).unwrap_err(),
        KeyError::Length { digits: 62 }
    );
    let mut bad = hex.to_string();
    bad.replace_range(10..11, "g");
    assert_eq!(
        LinkKey::parse_hex(&bad).unwrap_err(),
        KeyError::NotHex { index: 10 }
    );
    let zeros = "0".repeat(64);
    let e = LinkKey::parse_hex(&zeros).unwrap_err();
    assert_eq!(e, KeyError::Public);
    assert!(e.to_string().contains("public"), "{e}");
    assert!(LinkKey::unauthenticated().is_public());
}

#[test]
fn debug_shows_the_fingerprint_not_the_key() {
    let k = LinkKey::new(&KEY);
    let d = format!("{k:?}");
    assert!(
        d.contains(std::str::from_utf8(&k.fingerprint_hex()).unwrap()),
        "{d}"
    );
    assert!(!d.contains("4242"), "{d}");
    assert_ne!(
        LinkKey::new(&KEY).fingerprint(),
        LinkKey::new(&[0x43; KEY_LEN]).fingerprint()
    );
    assert_eq!(LinkKey::new(&KEY).fingerprint(), k.fingerprint());
}

#[test]
fn another_key_or_direction_never_verifies() {
    let k = LinkKey::new(&KEY);
    let h = Header {
        session: 9,
        counter: 1,
    };
    let f = seal(&k, Direction::HostToFirmware, h, &hb(1));
    assert!(matches!(&open(&k, Direction::HostToFirmware, &f)[..], [Ok(g)] if g.header == h));
    let other = LinkKey::new(&[0x43; KEY_LEN]);
    assert_eq!(
        open(&other, Direction::HostToFirmware, &f),
        vec![Err(FrameError::BadMac)]
    );
    // A host frame reflected back to the host as if the firmware had sent it.
    assert_eq!(
        open(&k, Direction::FirmwareToHost, &f),
        vec![Err(FrameError::BadMac)]
    );
    // The public key authenticates nothing but works as a key.
    let p = LinkKey::unauthenticated();
    let g = seal(&p, Direction::HostToFirmware, h, &hb(1));
    assert!(open(&p, Direction::HostToFirmware, &g)[0].is_ok());
    assert_eq!(
        open(&k, Direction::HostToFirmware, &g),
        vec![Err(FrameError::BadMac)]
    );
}

#[test]
fn the_frame_counter_is_inside_the_mac() {
    // Splice the tag of one frame onto another with a different counter: never verifies.
    let k = LinkKey::new(&KEY);
    let dir = Direction::HostToFirmware;
    let payload = |counter: u64| {
        let mut b = [0u8; MAX_PAYLOAD];
        let n = postcard::to_slice(&(9u32, counter, &hb(1)), &mut b)
            .expect("fits")
            .len();
        b[..n].to_vec()
    };
    let (p1, p2) = (payload(1), payload(2));
    assert!(k.verify(dir, &p1, &k.tag(dir, &p1)));
    assert!(!k.verify(dir, &p2, &k.tag(dir, &p1)));
    assert!(!k.verify(dir, &p1, &k.tag(dir, &p1)[..TAG_LEN - 1]));
}

#[test]
fn a_sender_counts_frames_and_the_window_refuses_replays() {
    let k = LinkKey::new(&KEY);
    let mut tx = Sender::new(k.clone(), Direction::HostToFirmware);
    let mut w = ReplayWindow::new();
    let mut buf = [0u8; MAX_FRAME];
    let mut frames = Vec::new();
    for i in 0..5 {
        let n = tx.seal(77, &hb(i), &mut buf).expect("seals");
        frames.push(buf[..n].to_vec());
    }
    assert_eq!(tx.next_counter(), 6);
    for f in &frames {
        let got = open(&k, Direction::HostToFirmware, f);
        let Ok(fr) = &got[0] else { panic!("{got:?}") };
        assert!(w.accept(fr.header.counter), "fresh");
    }
    for f in &frames {
        let fr = open(&k, Direction::HostToFirmware, f)
            .remove(0)
            .expect("authentic");
        assert!(!w.accept(fr.header.counter), "a replay is refused");
    }
    assert!(!w.accept(0));
    assert!(w.accept(5 + ReplayWindow::SIZE + 10));
    assert!(!w.accept(5), "too old");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The window accepts a counter at most once, every counter newer than the newest, and within SIZE behind it
    /// every one not yet seen (what UDP reordering needs) — checked against a set.
    #[test]
    fn replay_window_matches_its_model(counters in proptest::collection::vec(0u64..300, 0..400)) {
        let mut w = ReplayWindow::new();
        let mut seen = HashSet::new();
        let mut highest = 0u64;
        for c in counters {
            let expect = c != 0
                && !seen.contains(&c)
                && (c > highest || highest - c < ReplayWindow::SIZE);
            prop_assert_eq!(w.check(c), expect);
            prop_assert_eq!(w.accept(c), expect);
            if expect {
                seen.insert(c);
                highest = highest.max(c);
            }
            prop_assert!(!w.accept(c));
            prop_assert_eq!(w.highest(), highest);
        }
    }

    /// Flipping any byte of the payload or the tag (CRC recomputed, as an attacker would) never verifies.
    #[test]
    fn a_tampered_authentic_frame_never_verifies(seq in any::<u32>(), at in any::<prop::sample::Index>(), x in 1u8..=255) {
        let k = LinkKey::new(&KEY);
        let dir = Direction::HostToFirmware;
        let mut raw = seal(&k, dir, Header { session: 3, counter: 4 }, &hb(seq));
        raw.pop();
        let n = corncobs::decode_in_place(&mut raw).expect("cobs");
        raw.truncate(n - 4);
        let i = at.index(raw.len());
        raw[i] ^= x;
        let (payload, tag) = raw.split_at(raw.len() - TAG_LEN);
        prop_assert!(!k.verify(dir, payload, tag));
    }
}
