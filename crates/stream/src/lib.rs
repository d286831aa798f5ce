//! stagewise-stream: how Stagewise talks to learners and remote clients over zenoh.
//!
//! - [`keys`]: the key expressions under `stagewise/<robot>/` (transition, progress, episode, policy,
//!   env/reset, env/step, liveliness token `alive`).
//! - [`wire`], [`tensor`]: the MessagePack wire format (named fields, a `schema` version in every message,
//!   tensors as `{dtype, shape, data}` with raw little-endian bytes). docs/wire.md is its reference.
//! - [`zero_copy`]: transitions without copying their images. [`decode_transition_ref`] reads a
//!   [`TransitionRef`] whose tensor data borrow the received bytes (same validation and errors as [`decode`]);
//!   [`Node::subscribe_transitions_ref`] hands those to a callback. [`TransitionMsg::encode_parts`] encodes
//!   into [`WireParts`] that move the tensors' buffers in instead of copying them (same bytes as [`encode`]);
//!   the publisher thread sends transitions that way.
//! - [`Node`] (zenoh session from a [`StreamConfig`]), [`RobotPublisher`] (the actor's publisher: progress
//!   dropped under congestion, transitions through a bounded queue with drops counted), typed subscriptions,
//!   the policy subscription, and the remote env queryables ([`Node::serve_env`], [`EnvClient`]).
//!
//! The API is synchronous (zenoh's `Wait`): the actor loop is a plain thread and needs no async runtime.
//!
//! Must depend only on `stagewise-core` among our crates: never on model, sim, runtime, ort or rapier.

pub mod env;
pub mod keys;
pub mod node;
pub mod publisher;
pub mod tensor;
pub mod wire;
pub mod zero_copy;

pub use env::{EnvAdapter, EnvClient, EnvHandler, EnvServer};
pub use keys::{validate_robot, KeyError, Keys};
pub use node::{
    Mode, Node, PolicyPayload, Received, ReceivedRef, StreamConfig, StreamError, Subscription,
    LOOPBACK_EPHEMERAL,
};
pub use publisher::{Counters, Delivery, Published, PublisherOptions, RobotPublisher};
pub use tensor::{DType, ObservationMsg, Tensor, TensorError, TensorMap};
pub use wire::{
    decode, decode_serde, encode, encode_serde_into, now_ns, peek_header, policy_signing_message,
    sha256_hex, BoxSpecMsg, EnvSpecMsg, EpisodeMsg, PolicyMsg, ProgressMsg, ResetReply,
    ResetRequest, Schema, StepInfoMsg, StepReply, StepRequest, TransitionMsg, ViewSpecMsg,
    WireError, WireMessage, POLICY_SIGNING_CONTEXT, SCHEMA_VERSION,
};
pub use zero_copy::{
    decode_transition_ref, ObservationRef, TensorMapRef, TensorRef, TransitionRef, WireParts,
    PART_MIN,
};

#[cfg(test)]
mod tests {
    fn send_sync<T: Send + Sync>() {}

    /// The runtime shares these across its env threads.
    #[test]
    fn handles_are_send_and_sync() {
        send_sync::<super::Node>();
        send_sync::<super::RobotPublisher>();
        send_sync::<super::Subscription>();
        send_sync::<super::EnvServer>();
        send_sync::<super::EnvClient>();
        send_sync::<super::Counters>();
    }
}
