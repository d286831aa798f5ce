//! The Stagewise firmware-bridge wire protocol: what the host bridge and the robot firmware say to each other.
//!
//! `#![no_std]`, no allocation: every message has a fixed maximum size ([`MAX_JOINTS`] joints, fixed arrays and
//! `heapless::Vec`s, [`MAX_MESSAGE`] bytes), is encoded with postcard behind an authenticated header (session id,
//! frame counter), gets a truncated HMAC-SHA256 tag from a pre-shared [`LinkKey`] and a CRC-32 (ISO-HDLC,
//! little-endian), and is COBS-framed with a `0x00` delimiter. A frame on the wire is at most [`MAX_FRAME`]
//! bytes. [`FrameDecoder`] turns a byte stream (serial) or datagrams (UDP) back into authenticated frames and
//! resynchronises on the next delimiter after garbage; [`ReplayWindow`] refuses a counter seen before.
//! [`scene`] is the codec of the scene channel (camera frames and object state over TCP).
//!
//! Must not depend on `std`, an allocator, or any other Stagewise crate: the firmware links it.
#![no_std]
#![forbid(unsafe_code)]

mod auth;
mod frame;
mod message;
pub mod scene;

pub use auth::{Direction, KeyError, LinkKey, ReplayWindow, KEY_LEN, TAG_LEN, UNAUTHENTICATED_KEY};
pub use frame::{
    decode_frame, encode_frame, Frame, FrameDecoder, FrameError, Header, Sender, CRC,
    MAX_AUTH_OVERHEAD, MAX_BODY, MAX_FRAME, MAX_HEADER, MAX_PAYLOAD,
};
pub use message::*;

/// The protocol version this crate speaks. Peers with another version are refused at the handshake.
/// Version 2: authenticated frames (header + MAC), the nonce/session handshake, `ResetEStop`, the heartbeat's
/// actor step counter.
pub const PROTOCOL_VERSION: u16 = 2;

/// Most joints a command or telemetry message can carry.
pub const MAX_JOINTS: usize = 8;

/// Checks a peer's [`Hello`] against ours: the versions must be equal.
pub fn check_hello(peer: &Hello) -> Result<(), HandshakeError> {
    if peer.version != PROTOCOL_VERSION {
        return Err(HandshakeError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: peer.version,
        });
    }
    Ok(())
}

/// Why a handshake failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeError {
    /// The peer speaks another protocol version.
    VersionMismatch { ours: u16, theirs: u16 },
}

impl core::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            HandshakeError::VersionMismatch { ours, theirs } => {
                write!(
                    f,
                    "protocol version mismatch: we speak {ours}, the peer speaks {theirs}"
                )
            }
        }
    }
}

impl core::error::Error for HandshakeError {}
