//! Framing: `COBS( postcard(message) ++ crc32_le(postcard(message)) ) ++ 0x00`.

use crate::message::Message;

/// Largest postcard encoding of a message this protocol allows.
pub const MAX_PAYLOAD: usize = 240;
/// Payload plus the 4-byte CRC.
pub const MAX_BODY: usize = MAX_PAYLOAD + 4;
/// Largest frame on the wire, COBS overhead and the `0x00` delimiter included.
pub const MAX_FRAME: usize = corncobs::max_encoded_len(MAX_BODY);

const _: () = assert!(MAX_FRAME <= 256, "a frame must fit a 256-byte buffer");

/// The frame checksum: CRC-32/ISO-HDLC (the zlib/Ethernet CRC) over the postcard bytes.
pub const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// What was wrong with a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// More than [`MAX_FRAME`] bytes arrived before a delimiter; they were dropped up to the next delimiter.
    TooLong,
    /// The COBS encoding was broken.
    Cobs,
    /// The decoded body had `len` bytes, fewer than a CRC.
    TooShort { len: usize },
    /// The CRC did not match: the frame was corrupted.
    Crc { received: u32, computed: u32 },
    /// The CRC matched but the payload is not a message of this protocol version.
    Decode(postcard::Error),
    /// The payload decoded to a message with `extra` bytes left over.
    TrailingBytes { extra: usize },
    /// The message needs more than [`MAX_PAYLOAD`] bytes.
    MessageTooLarge,
    /// The output buffer had `have` bytes; the frame needs up to `need`.
    BufferTooSmall { need: usize, have: usize },
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
                "frame body of {len} bytes is shorter than its 4-byte CRC"
            ),
            FrameError::Crc { received, computed } => {
                write!(
                    f,
                    "CRC mismatch: frame says {received:#010x}, payload gives {computed:#010x}"
                )
            }
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

/// Encodes `msg` as one frame (delimiter included) into `out`; returns the frame length.
pub fn encode_frame(msg: &Message, out: &mut [u8]) -> Result<usize, FrameError> {
    let mut body = [0u8; MAX_BODY];
    let n = postcard::to_slice(msg, &mut body[..MAX_PAYLOAD])
        .map_err(|_| FrameError::MessageTooLarge)?
        .len();
    let crc = CRC.checksum(&body[..n]);
    body[n..n + 4].copy_from_slice(&crc.to_le_bytes());
    let need = corncobs::max_encoded_len(n + 4);
    if out.len() < need {
        return Err(FrameError::BufferTooSmall {
            need,
            have: out.len(),
        });
    }
    Ok(corncobs::encode_buf(&body[..n + 4], out))
}

/// Decodes one frame body (the bytes between two delimiters, delimiter excluded), in place.
pub fn decode_frame(frame: &mut [u8]) -> Result<Message, FrameError> {
    if frame.len() > MAX_FRAME {
        return Err(FrameError::TooLong);
    }
    if frame.contains(&0) {
        return Err(FrameError::Cobs);
    }
    let n = corncobs::decode_in_place(frame).map_err(|_| FrameError::Cobs)?;
    if n < 4 {
        return Err(FrameError::TooShort { len: n });
    }
    let (payload, crc) = frame[..n].split_at(n - 4);
    let received = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let computed = CRC.checksum(payload);
    if received != computed {
        return Err(FrameError::Crc { received, computed });
    }
    let (msg, rest) = postcard::take_from_bytes::<Message>(payload).map_err(FrameError::Decode)?;
    if !rest.is_empty() {
        return Err(FrameError::TrailingBytes { extra: rest.len() });
    }
    Ok(msg)
}

/// A streaming decoder: push bytes as they arrive (serial reads or whole datagrams), get a result per frame.
/// Garbage between frames yields at most one error and is dropped up to the next `0x00`; an over-long run is
/// dropped whole. Empty frames (two delimiters in a row) are skipped silently, so a sender may lead with a
/// delimiter to flush a receiver that joined mid-frame. Memory: one [`MAX_FRAME`] buffer.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    buf: [u8; MAX_FRAME],
    len: usize,
    overflow: bool,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    pub const fn new() -> Self {
        Self {
            buf: [0; MAX_FRAME],
            len: 0,
            overflow: false,
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
    pub fn push(&mut self, byte: u8) -> Option<Result<Message, FrameError>> {
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
            return Some(decode_frame(&mut self.buf[..n]));
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
    pub fn feed(&mut self, bytes: &[u8], mut on_frame: impl FnMut(Result<Message, FrameError>)) {
        for &b in bytes {
            if let Some(r) = self.push(b) {
                on_frame(r);
            }
        }
    }
}
