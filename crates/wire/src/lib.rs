//! stagewise-wire: the wire format alone (docs/wire.md is its reference): the messages Stagewise sends and
//! receives, one codec for all of them, and the multi-part encoder of transitions.
//!
//! - [`message`]: every message as a plain struct (named fields, a `schema` version and a `kind` in every
//!   message), [`encode`] (rmp_serde's named encoding) and [`decode`] (the messages' serde derive, then their
//!   [`Message::validate`] checks). One decoder: it accepts foreign encodings any msgpack writer produces
//!   (Python's `msgpack`, integers of any width, floats of either size), skips keys it does not know, and
//!   refuses newer schemas and malformed or inconsistent messages with a [`WireError`] saying which; it never
//!   panics. Transitions decode with their tensors copied out (`decode::<TransitionMsg>`) or borrowed from the
//!   received bytes (`decode::<TransitionMsg<Borrowed>>`, then `into_owned()` if they must outlive them): the
//!   same decoder, the tensors' storage a type parameter.
//! - [`tensor`]: tensors as `{dtype, shape, data}` with raw little-endian bytes, observations.
//! - [`parts`]: [`TransitionMsg::encode_parts`], the bytes of [`encode`] in pieces whose image buffers are
//!   moved in rather than copied, for a transport to send as one payload; [`Encoded`], a message encoded once
//!   for every sink (the actor's log and its publisher take the same bytes).
//!
//! No transport: `stagewise-stream` puts these bytes on zenoh, the runtime's episode log writes them to disk,
//! Python reads them with `msgpack`. Depends on `stagewise-core` and serialisation crates only.

pub mod message;
pub mod parts;
pub mod tensor;

pub use message::{
    decode, encode, encode_into, kind, now_ns, peek_header, policy_signing_message, sha256_hex,
    BoxSpecMsg, EnvSpecMsg, EpisodeMsg, Message, PolicyMsg, ProgressMsg, ResetReply, ResetRequest,
    RewardSpecMsg, Schema, StepInfoMsg, StepReply, StepRequest, StepsMsg, TransitionMsg,
    ViewSpecMsg, WireError, WireMessage, POLICY_SIGNING_CONTEXT, SCHEMA_VERSION, SIGNATURE_LEN,
};
pub use parts::{Encoded, WireParts, PART_MIN};
pub use tensor::{
    Borrowed, DType, DecodeData, ObservationMsg, Tensor, TensorData, TensorError, TensorMap,
};
