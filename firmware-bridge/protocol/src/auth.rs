//! Frame authentication: a keyed MAC from a pre-shared key, a per-sender frame counter inside it, and the
//! receiver's replay window.
//!
//! The MAC is HMAC-SHA256 (RustCrypto `hmac` + `sha2`, no_std, no allocation) over
//! `"stagewise-bridge-v2\0" ++ direction ++ payload`, truncated to its first [`TAG_LEN`] bytes; the payload
//! starts with the frame header (session id and frame counter), so both are authenticated with the message. The
//! direction byte keeps a host frame from being reflected back to the host as if the firmware had sent it. The
//! keyed HMAC state is computed once per [`LinkKey`] (a clone per frame, no re-keying).
//!
//! [`UNAUTHENTICATED_KEY`] is public (all zeros): a link that uses it authenticates nothing. It exists for a bench
//! that nobody else can reach, and both the host and the emulator refuse it unless the operator opts out
//! explicitly (and they log that loudly).

use hmac::{Hmac, Mac};
use sha2_nostd::Sha256;

/// Bytes of a pre-shared link key.
pub const KEY_LEN: usize = 32;
/// Bytes of the truncated MAC carried by every frame.
pub const TAG_LEN: usize = 16;
/// The public all-zero key of an unauthenticated bench link (see the module doc).
pub const UNAUTHENTICATED_KEY: [u8; KEY_LEN] = [0; KEY_LEN];

const DOMAIN: &[u8] = b"stagewise-bridge-v2\0";
const FINGERPRINT_LABEL: &[u8] = b"stagewise-bridge-v2 key fingerprint";

/// Which way a frame travels (part of the MAC input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    HostToFirmware,
    FirmwareToHost,
}

impl Direction {
    const fn byte(self) -> u8 {
        match self {
            Direction::HostToFirmware => b'H',
            Direction::FirmwareToHost => b'F',
        }
    }
}

/// Why a key was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// Not `2 * KEY_LEN` hex digits (after trimming whitespace).
    Length { digits: usize },
    /// A character that is not a hex digit, at this index of the trimmed text.
    NotHex { index: usize },
    /// The all-zero key: it is public ([`UNAUTHENTICATED_KEY`]), not a secret.
    Public,
}

impl core::fmt::Display for KeyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            KeyError::Length { digits } => write!(
                f,
                "a link key is {} hex digits ({KEY_LEN} bytes), this one has {digits}",
                2 * KEY_LEN
            ),
            KeyError::NotHex { index } => {
                write!(f, "character {index} of the key is not a hex digit")
            }
            KeyError::Public => write!(
                f,
                "the all-zero key is the public unauthenticated-link key, not a secret"
            ),
        }
    }
}

impl core::error::Error for KeyError {}

/// A pre-shared link key, ready to authenticate frames. `Debug` shows only its fingerprint.
#[derive(Clone)]
pub struct LinkKey {
    mac: Hmac<Sha256>,
    fingerprint: [u8; 4],
    public: bool,
}

impl core::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "LinkKey(fingerprint ")?;
        for b in self.fingerprint {
            write!(f, "{b:02x}")?;
        }
        if self.public {
            write!(f, ", public")?;
        }
        write!(f, ")")
    }
}

impl LinkKey {
    /// A key from its bytes. The all-zero key is accepted here (it is [`LinkKey::unauthenticated`]); the
    /// parsers refuse it.
    pub fn new(key: &[u8; KEY_LEN]) -> Self {
        // HMAC takes keys of any length: this cannot fail.
        let mac = match <Hmac<Sha256> as Mac>::new_from_slice(key) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC accepts any key length"),
        };
        let mut fp = mac.clone();
        fp.update(FINGERPRINT_LABEL);
        let full = fp.finalize().into_bytes();
        Self {
            mac,
            fingerprint: [full[0], full[1], full[2], full[3]],
            public: *key == UNAUTHENTICATED_KEY,
        }
    }

    /// The public key of an unauthenticated bench link (see the module doc).
    pub fn unauthenticated() -> Self {
        Self::new(&UNAUTHENTICATED_KEY)
    }

    /// Parses `2 * KEY_LEN` hex digits (surrounding whitespace ignored), e.g. a key file's contents. The all-zero
    /// key is refused ([`KeyError::Public`]).
    pub fn parse_hex(text: &str) -> Result<Self, KeyError> {
        let t = text.trim().as_bytes();
        if t.len() != 2 * KEY_LEN {
            return Err(KeyError::Length { digits: t.len() });
        }
        let mut key = [0u8; KEY_LEN];
        for (i, k) in key.iter_mut().enumerate() {
            let hi = hex_digit(t[2 * i]).ok_or(KeyError::NotHex { index: 2 * i })?;
            let lo = hex_digit(t[2 * i + 1]).ok_or(KeyError::NotHex { index: 2 * i + 1 })?;
            *k = (hi << 4) | lo;
        }
        if key == UNAUTHENTICATED_KEY {
            return Err(KeyError::Public);
        }
        Ok(Self::new(&key))
    }

    /// True for the public all-zero key.
    pub fn is_public(&self) -> bool {
        self.public
    }

    /// First 4 bytes of HMAC(key, a fixed label): names a key in logs and errors without revealing it (both
    /// ends of a link print the same fingerprint when they share the key).
    pub fn fingerprint(&self) -> [u8; 4] {
        self.fingerprint
    }

    /// The fingerprint as 8 lowercase hex digits.
    pub fn fingerprint_hex(&self) -> [u8; 8] {
        let mut out = [0u8; 8];
        for (i, b) in self.fingerprint.iter().enumerate() {
            out[2 * i] = HEX[usize::from(b >> 4)];
            out[2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
        out
    }

    /// The truncated MAC of `payload` sent in direction `dir`.
    pub fn tag(&self, dir: Direction, payload: &[u8]) -> [u8; TAG_LEN] {
        let full = self.keyed(dir, payload).finalize().into_bytes();
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        tag
    }

    /// Checks `tag` against `payload` in constant time.
    pub fn verify(&self, dir: Direction, payload: &[u8], tag: &[u8]) -> bool {
        tag.len() == TAG_LEN && self.keyed(dir, payload).verify_truncated_left(tag).is_ok()
    }

    /// A keyed pseudo-random function (HMAC-SHA256 of `label ++ 0 ++ input`), e.g. for session ids from boot
    /// entropy. Independent of frame tags (another domain).
    pub fn prf(&self, label: &[u8], input: &[u8]) -> [u8; 32] {
        let mut m = self.mac.clone();
        m.update(label);
        m.update(&[0]);
        m.update(input);
        let mut out = [0u8; 32];
        out.copy_from_slice(&m.finalize().into_bytes());
        out
    }

    fn keyed(&self, dir: Direction, payload: &[u8]) -> Hmac<Sha256> {
        let mut m = self.mac.clone();
        m.update(DOMAIN);
        m.update(&[dir.byte()]);
        m.update(payload);
        m
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

const fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The receiver's anti-replay window over a sender's frame counters (one per session): a counter is accepted
/// once, if it is newer than the newest seen or one of the [`ReplayWindow::SIZE`] before it not yet seen
/// (UDP may reorder). Counters start at 1; 0 is never accepted. Only counters of authenticated frames may be
/// offered (a forged counter would otherwise move the window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplayWindow {
    highest: u64,
    /// Bit `i` set: counter `highest - i` was seen.
    seen: u64,
}

impl ReplayWindow {
    /// How far behind the newest counter a reordered frame may arrive.
    pub const SIZE: u64 = 64;

    pub const fn new() -> Self {
        Self {
            highest: 0,
            seen: 0,
        }
    }

    /// The newest counter accepted (0 = none yet).
    pub fn highest(&self) -> u64 {
        self.highest
    }

    /// Whether `counter` would be accepted (no change).
    pub fn check(&self, counter: u64) -> bool {
        if counter == 0 {
            return false;
        }
        if counter > self.highest {
            return true;
        }
        let back = self.highest - counter;
        back < Self::SIZE && self.seen & (1 << back) == 0
    }

    /// Accepts `counter` once: true if it was fresh (and records it), false for a replay, a duplicate or a
    /// counter too far behind.
    pub fn accept(&mut self, counter: u64) -> bool {
        if !self.check(counter) {
            return false;
        }
        if counter > self.highest {
            let shift = counter - self.highest;
            self.seen = if shift >= Self::SIZE {
                0
            } else {
                self.seen << shift
            };
            self.seen |= 1;
            self.highest = counter;
        } else {
            self.seen |= 1 << (self.highest - counter);
        }
        true
    }
}
