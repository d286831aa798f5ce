//! stagewise-stream: how Stagewise talks to learners and remote clients over zenoh.
//!
//! - [`keys`]: the key expressions under `stagewise/<robot>/` (transition, progress, episode, steps, policy,
//!   env/reset, env/step, liveliness token `alive`).
//! - The messages and their encoding are `stagewise-wire`'s (docs/wire.md), re-exported here as [`wire`] and at
//!   the crate root, because this crate's API takes and returns them.
//! - [`Node`] (zenoh session from a [`StreamConfig`]), [`RobotPublisher`] (the actor's publisher: progress
//!   dropped under congestion, transitions through a bounded queue with drops counted; it puts [`Encoded`]
//!   messages, so that the actor encodes each message once for its log and the stream), typed subscriptions,
//!   the policy subscription, and the remote env queryables ([`Node::serve_env`], [`EnvClient`]).
//! - [`ViewPublisher`]: batches of steps and episode summaries for a viewer (`serve --rerun`), put with
//!   `CongestionControl::Drop`.
//!
//! The API is synchronous (zenoh's `Wait`): the actor loop is a plain thread and needs no async runtime.
//!
//! Depends on `stagewise-core` and `stagewise-wire` among our crates: never on model, sim, runtime, ort or rapier.

pub mod env;
pub mod keys;
pub mod node;
pub mod publisher;
pub mod view;

/// The wire format (`stagewise-wire`): messages, [`encode`], [`decode`], tensors.
pub use stagewise_wire as wire;

pub use env::{EnvAdapter, EnvClient, EnvHandler, EnvServer};
pub use keys::{validate_robot, KeyError, Keys};
pub use node::{
    Mode, Node, PolicyPayload, Received, StreamConfig, StreamError, Subscription,
    LOOPBACK_EPHEMERAL,
};
pub use publisher::{Counters, Delivery, Published, PublisherOptions, RobotPublisher};
pub use stagewise_wire::{
    decode, encode, now_ns, peek_header, policy_signing_message, sha256_hex, BoxSpecMsg, DType,
    Encoded, EnvSpecMsg, EpisodeMsg, ObservationMsg, PolicyMsg, ProgressMsg, ResetReply,
    ResetRequest, Schema, StepInfoMsg, StepReply, StepRequest, StepsMsg, Tensor, TensorError,
    TensorMap, TransitionMsg, ViewSpecMsg, WireError, WireMessage, WireParts,
    POLICY_SIGNING_CONTEXT, SCHEMA_VERSION,
};
pub use view::{ViewCounters, ViewPublisher};

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
