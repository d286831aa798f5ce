//! Framing: `COBS( payload ++ tag ++ crc32_le(payload ++ tag) ) ++ 0x00`, where
//! `payload = postcard(session: u32, counter: u64, message)` and `tag` is the truncated HMAC of the payload
//! ([`crate::auth`]).
//!
//! A receiver checks, in this order: COBS, length, CRC (noise: [`FrameError::Crc`]), the MAC (a forged frame or
//! another key: [`FrameError::BadMac`]), and only then decodes the payload. What is left to the receiver's
//! session logic is whether the (authenticated) session id is its own and the counter fresh
//! ([`crate::ReplayWindow`]).

use crate::auth::{Direction, LinkKey, TAG_LEN};
use crate::message::{Message, MAX_MESSAGE};

/// Largest payload (header + postcard message) this protocol allows.
pub const MAX_PAYLOAD: usize = 224;
/// Largest encoding of a [`Header`]: varint `u32` + varint `u64`.
pub const MAX_HEADER: usize = 5 + 10;
/// Payload, MAC tag and the 4-byte CRC.
pub const MAX_BODY: usize = MAX_PAYLOAD + TAG_LEN + 4;
/// Largest frame on the wire, COBS overhead and the `0x00` delimiter included.
pub const MAX_FRAME: usize = corncobs::max_encoded_len(MAX_BODY);
/// Bytes a frame adds to the message for its authentication: the tag plus the largest header.
pub const MAX_AUTH_OVERHEAD: usize = TAG_LEN + MAX_HEADER;

// The size budget, checked when the crate compiles: the largest message (computed from the field types in
// message.rs) with the largest header fits the payload, and the largest frame fits a 256-byte buffer.
const _: () = assert!(
    MAX_HEADER + MAX_MESSAGE <= MAX_PAYLOAD,
    "the largest message and header must fit MAX_PAYLOAD"
);
const _: () = assert!(MAX_FRAME <= 256, "a frame must fit a 256-byte buffer");

/// The frame checksum: CRC-32/ISO-HDLC (the zlib/Ethernet CRC) over payload and tag. It tells noise (counted as
/// a bad frame) from a frame that is intact but not authentic (a wrong key or a forgery).
pub const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// The authenticated frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Header {
    /// The session the frame belongs to (chosen by the firmware at the handshake); 0 = a handshake frame
    /// (`Hello`, or the answer to one) that belongs to no session yet.
    pub session: u32,
    /// The sender's frame counter: grows by one per frame sent, starting at 1.
    pub counter: u64,
}

/// A decoded, authenticated frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub header: Header,
    pub message: Message,
}

/// What was wrong with a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// More than [`MAX_FRAME`] bytes arrived before a delimiter; they were dropped up to the next delimiter.
    TooLong,
    /// The COBS encoding was broken.
    Cobs,
    /// The decoded body had `len` bytes, fewer than a MAC tag and a CRC.
    TooShort { len: usize },
    /// The CRC did not match: the frame was corrupted.
    Crc { received: u32, computed: u32 },
    /// The frame is intact (CRC matches) but its MAC is not ours: another key, or a forgery. Never acted on.
    BadMac,
    /// The payload is authentic but not a message of this protocol version.
    Decode(postcard::Error),
    /// The payload decoded to a message with `extra` bytes left over.
    TrailingBytes { extra: usize },
    /// The message needs more than [`MAX_PAYLOAD`] bytes.
    MessageTooLarge,
    /// The output buffer had `have` bytes; the frame needs up to `need`.
    BufferTooSmall { need: usize, have: usize },
}

impl FrameError {
    /// True for frames that arrived intact but did not authenticate (as opposed to noise).
    pub fn is_auth(&self) -> bool {
        matches!(self, FrameError::BadMac)
    }
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FrameError::TooLong => {
                write!(f, "frame longer than {MAX_FRAME} bytes before a delimiter")
            }
            FrameError::Cobs => write!(f, "broken COBS encoding"),
            FrameError::TooShort { len } => write!(
                f,
                "frame body of {len} bytes is shorter than its {TAG_LEN}-byte MAC and 4-byte CRC"
            ),
            FrameError::Crc { received, computed } => {
                write!(
                    f,
                    "CRC mismatch: frame says {received:#010x}, payload gives {computed:#010x}"
                )
            }
            FrameError::BadMac => write!(
                f,
                "frame MAC does not verify with our link key (another key, or a forged frame)"
            ),
            FrameError::Decode(e) => write!(f, "payload is not a valid message: {e}"),
            FrameError::TrailingBytes { extra } => {
                write!(f, "message followed by {extra} unexpected bytes")
            }
            FrameError::MessageTooLarge => {
                write!(f, "message encodes to more than {MAX_PAYLOAD} bytes")
            }
            FrameError::BufferTooSmall { need, have } => {
                write!(
                    f,
                    "output buffer of {have} bytes, the frame needs up to {need}"
                )
            }
        }
    }
}

impl core::error::Error for FrameError {}

/// Encodes `msg` with `header` as one authenticated frame (delimiter included) into `out`; returns its length.
pub fn encode_frame(
    key: &LinkKey,
    dir: Direction,
    header: Header,
    msg: &Message,
    out: &mut [u8],
) -> Result<usize, FrameError> {
    let mut body = [0u8; MAX_BODY];
    let n = postcard::to_slice(
        &(header.session, header.counter, msg),
        &mut body[..MAX_PAYLOAD],
    )
    .map_err(|_| FrameError::MessageTooLarge)?
    .len();
    let tag = key.tag(dir, &body[..n]);
    body[n..n + TAG_LEN].copy_from_slice(&tag);
    let m = n + TAG_LEN;
    let crc = CRC.checksum(&body[..m]);
    body[m..m + 4].copy_from_slice(&crc.to_le_bytes());
    let need = corncobs::max_encoded_len(m + 4);
    if out.len() < need {
        return Err(FrameError::BufferTooSmall {
            need,
            have: out.len(),
        });
    }
    Ok(corncobs::encode_buf(&body[..m + 4], out))
}

/// Decodes and authenticates one frame body (the bytes between two delimiters, delimiter excluded), in place.
pub fn decode_frame(key: &LinkKey, dir: Direction, frame: &mut [u8]) -> Result<Frame, FrameError> {
    if frame.len() > MAX_FRAME {
        return Err(FrameError::TooLong);
    }
    if frame.contains(&0) {
        return Err(FrameError::Cobs);
    }
    let n = corncobs::decode_in_place(frame).map_err(|_| FrameError::Cobs)?;
    if n < TAG_LEN + 4 {
        return Err(FrameError::TooShort { len: n });
    }
    let (signed, crc) = frame[..n].split_at(n - 4);
    let received = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let computed = CRC.checksum(signed);
    if received != computed {
        return Err(FrameError::Crc { received, computed });
    }
    let (payload, tag) = signed.split_at(signed.len() - TAG_LEN);
    if !key.verify(dir, payload, tag) {
        return Err(FrameError::BadMac);
    }
    let ((session, counter, message), rest) =
        postcard::take_from_bytes::<(u32, u64, Message)>(payload).map_err(FrameError::Decode)?;
    if !rest.is_empty() {
        return Err(FrameError::TrailingBytes { extra: rest.len() });
    }
    Ok(Frame {
        header: Header { session, counter },
        message,
    })
}

/// The sending half of a link: the key, the direction and the frame counter (which never repeats for the
/// lifetime of the sender, across sessions).
#[derive(Debug, Clone)]
pub struct Sender {
    key: LinkKey,
    dir: Direction,
    next: u64,
}

impl Sender {
    pub fn new(key: LinkKey, dir: Direction) -> Self {
        Self { key, dir, next: 1 }
    }

    pub fn key(&self) -> &LinkKey {
        &self.key
    }

    /// The counter the next frame will carry.
    pub fn next_counter(&self) -> u64 {
        self.next
    }

    /// Encodes `msg` for `session` with the next counter into `out`; returns the frame length.
    pub fn seal(
        &mut self,
        session: u32,
        msg: &Message,
        out: &mut [u8],
    ) -> Result<usize, FrameError> {
        let header = Header {
            session,
            counter: self.next,
        };
        let n = encode_frame(&self.key, self.dir, header, msg, out)?;
        self.next += 1;
        Ok(n)
    }
}

/// A streaming decoder: push bytes as they arrive (serial reads or whole datagrams), get a result per frame.
/// Garbage between frames yields at most one error and is dropped up to the next `0x00`; an over-long run is
/// dropped whole. Empty frames (two delimiters in a row) are skipped silently, so a sender may lead with a
/// delimiter to flush a receiver that joined mid-frame. Every frame is authenticated with `key` for the
/// direction it receives. Memory: one [`MAX_FRAME`] buffer and the keyed MAC state.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    buf: [u8; MAX_FRAME],
    len: usize,
    overflow: bool,
    key: LinkKey,
    dir: Direction,
}

impl FrameDecoder {
    /// A decoder for frames travelling in `receives` (the host decodes `FirmwareToHost`).
    pub fn new(key: LinkKey, receives: Direction) -> Self {
        Self {
            buf: [0; MAX_FRAME],
            len: 0,
            overflow: false,
            key,
            dir: receives,
        }
    }

    /// Drops a partial frame (e.g. after a reconnect).
    pub fn reset(&mut self) {
        self.len = 0;
        self.overflow = false;
    }

    /// Bytes of the frame in progress.
    pub fn pending(&self) -> usize {
        self.len
    }

    /// Takes one byte; returns a result when it completed a frame.
    pub fn push(&mut self, byte: u8) -> Option<Result<Frame, FrameError>> {
        if byte == 0 {
            if self.overflow {
                self.reset();
                return Some(Err(FrameError::TooLong));
            }
            if self.len == 0 {
                return None;
            }
            let n = self.len;
            self.len = 0;
            return Some(decode_frame(&self.key, self.dir, &mut self.buf[..n]));
        }
        if self.overflow {
            return None;
        }
        // One byte of MAX_FRAME is the delimiter, which is never stored.
        if self.len >= MAX_FRAME - 1 {
            self.overflow = true;
            self.len = 0;
            return None;
        }
        self.buf[self.len] = byte;
        self.len += 1;
        None
    }

    /// Takes many bytes; calls `on_frame` once per completed frame, in order.
    pub fn feed(&mut self, bytes: &[u8], mut on_frame: impl FnMut(Result<Frame, FrameError>)) {
        for &b in bytes {
            if let Some(r) = self.push(b) {
                on_frame(r);
            }
        }
    }
}
