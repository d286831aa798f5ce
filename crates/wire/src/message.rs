//! The messages and their one codec: [`encode`] (rmp_serde's named encoding of the message's serde derive) and
//! [`decode`] (its serde derive, then [`Message::validate`]). docs/wire.md is the reference; keep the two in
//! step (`tests/samples.rs` holds the encoder to committed bytes).
//!
//! Every message is a msgpack map with named fields. Its first two entries are `schema` (uint, this
//! build writes [`SCHEMA_VERSION`]) and `kind` (str, e.g. `"transition"`). The decoder ignores keys it does not
//! know and rejects schema versions newer than its own.

use crate::tensor::{Borrowed, DecodeData, TensorData};
use crate::tensor::{DType, ObservationMsg, Tensor};
use serde::de::{self, DeserializeOwned, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use stagewise_core::{BoxSpec, EnvSpec, Progress, StepInfo, StepResult, Transition, ViewSpec};
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The schema version this build writes, and the newest it reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Length of an Ed25519 signature in bytes.
pub const SIGNATURE_LEN: usize = 64;

/// Why bytes could not be decoded into (or a message encoded as) a wire message. The msgpack decoder's or
/// encoder's own error is the [`std::error::Error::source`] (shared, so that the error stays `Clone`; equality
/// compares it by message).
#[derive(Debug, Clone, thiserror::Error)]
pub enum WireError {
    #[error(
        "{len} bytes are not a Stagewise message (a msgpack map with `schema` and `kind`; \
         expected kind `{expected}`)"
    )]
    NotAMessage {
        expected: &'static str,
        len: usize,
        #[source]
        source: Arc<rmp_serde::decode::Error>,
    },
    #[error("expected a `{expected}` message, got kind `{got}`")]
    WrongKind { expected: &'static str, got: String },
    #[error(
        "`{kind}` message has schema {got}; this build reads schema 1..={supported} \
         (a newer sender needs a newer stagewise-stream)"
    )]
    UnsupportedSchema {
        kind: String,
        got: u64,
        supported: u32,
    },
    #[error("malformed `{kind}` message")]
    Malformed {
        kind: &'static str,
        #[source]
        source: Arc<rmp_serde::decode::Error>,
    },
    #[error("invalid `{kind}` message: field `{field}`: {reason}")]
    Invalid {
        kind: &'static str,
        field: &'static str,
        reason: String,
    },
    /// A hex field that is not hex.
    #[error("invalid `{kind}` message: field `{field}` is {value:?}, not hex")]
    Hex {
        kind: &'static str,
        field: &'static str,
        value: String,
        #[source]
        source: hex::FromHexError,
    },
    #[error("could not encode a `{kind}` message")]
    Encode {
        kind: &'static str,
        #[source]
        source: Arc<rmp_serde::encode::Error>,
    },
}

/// A message type of the wire format: what [`encode`] and [`decode`] need besides serde. Implemented by every
/// message, with its tensors owned or [`Borrowed`] from the bytes being decoded.
pub trait Message: Serialize {
    /// The value of the `kind` field.
    const KIND: &'static str;
    /// Checks that go beyond the msgpack shape (sizes, hashes); run by [`decode`].
    fn validate(&self) -> Result<(), WireError> {
        Ok(())
    }
    /// Roughly how many bytes the encoding takes, so [`encode`] allocates once instead of growing the buffer
    /// through a dozen reallocations (and copies) for a message with images.
    fn size_hint(&self) -> usize {
        256
    }
    /// Encodes the message it consumes as [`WireParts`](crate::WireParts): the bytes of [`encode`], in one part,
    /// or (transitions, [`TransitionMsg::encode_parts`]) with the tensors' buffers moved in instead of copied.
    fn into_parts(self) -> Result<crate::WireParts, WireError>
    where
        Self: Sized,
    {
        encode(&self).map(crate::WireParts::from)
    }
}

/// A message that owns everything it holds, so that it can be decoded from bytes that do not outlive it (every
/// message type with its default, owned, tensors).
pub trait WireMessage: Message + DeserializeOwned {}

impl<M: Message + DeserializeOwned> WireMessage for M {}

/// Encodes a message as a msgpack map with named fields.
pub fn encode<M: Message>(msg: &M) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(msg.size_hint());
    encode_into(msg, &mut out)?;
    Ok(out)
}

/// Like [`encode`], appending the bytes to `out`.
pub fn encode_into<M: Message>(msg: &M, out: &mut Vec<u8>) -> Result<(), WireError> {
    rmp_serde::encode::write_named(out, msg).map_err(|e| WireError::Encode {
        kind: M::KIND,
        source: Arc::new(e),
    })
}

/// Deepest nesting the decoder accepts. A message nests 5 levels at most (a transition's observation's images'
/// tensor's shape); rmp_serde's own limit (1024) lets a few kilobytes of nested maps in an unknown field overflow a
/// 2 MiB thread stack first, which aborts the process instead of returning an error (tests/corpus.rs).
pub const MAX_DEPTH: usize = 32;

/// `rmp_serde::from_slice` with [`MAX_DEPTH`].
fn from_slice<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, rmp_serde::decode::Error> {
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    de.set_max_depth(MAX_DEPTH);
    T::deserialize(&mut de)
}

#[derive(Deserialize)]
struct Header<'a> {
    schema: u64,
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
}

/// Decodes and validates a message: the one decoder of the wire format. Never panics. Errors say, in this order
/// of precedence: not a message (no `schema`/`kind`), wrong `kind`, unsupported `schema` (so that a newer sender
/// gets a schema error, not a missing-field error), malformed fields, then [`Message::validate`] failures.
///
/// The tensors of a message with observations are copied out of `bytes` (`decode::<TransitionMsg>`), or left
/// there (`decode::<TransitionMsg<Borrowed>>`: the same decoding, with the data slices of `bytes`; `into_owned()`
/// copies them when the message must outlive the bytes).
pub fn decode<'de, M: Message + Deserialize<'de>>(bytes: &'de [u8]) -> Result<M, WireError> {
    // Happy path: one pass (the `schema` and `kind` markers check their values as they are read).
    let msg: M = match from_slice(bytes) {
        Ok(m) => m,
        Err(e) => return Err(classify::<M>(bytes, e)),
    };
    msg.validate()?;
    Ok(msg)
}

/// Explains a failed decode: looks at `schema` and `kind` alone.
fn classify<M: Message>(bytes: &[u8], err: rmp_serde::decode::Error) -> WireError {
    let header: Header = match from_slice(bytes) {
        Ok(h) => h,
        Err(e) => {
            return WireError::NotAMessage {
                expected: M::KIND,
                len: bytes.len(),
                source: Arc::new(e),
            }
        }
    };
    if header.kind != M::KIND {
        return WireError::WrongKind {
            expected: M::KIND,
            got: header.kind.into_owned(),
        };
    }
    if header.schema == 0 || header.schema > u64::from(SCHEMA_VERSION) {
        return WireError::UnsupportedSchema {
            kind: header.kind.into_owned(),
            got: header.schema,
            supported: SCHEMA_VERSION,
        };
    }
    WireError::Malformed {
        kind: M::KIND,
        source: Arc::new(err),
    }
}

/// Same variant and fields; the decoder's or encoder's error (the source, which has no `PartialEq`) compares by
/// its message.
impl PartialEq for WireError {
    fn eq(&self, other: &Self) -> bool {
        use WireError as W;
        let same =
            |a: &dyn std::error::Error, b: &dyn std::error::Error| a.to_string() == b.to_string();
        match (self, other) {
            (
                W::NotAMessage {
                    expected: e1,
                    len: l1,
                    source: s1,
                },
                W::NotAMessage {
                    expected: e2,
                    len: l2,
                    source: s2,
                },
            ) => e1 == e2 && l1 == l2 && same(&**s1, &**s2),
            (
                W::WrongKind {
                    expected: e1,
                    got: g1,
                },
                W::WrongKind {
                    expected: e2,
                    got: g2,
                },
            ) => e1 == e2 && g1 == g2,
            (
                W::UnsupportedSchema {
                    kind: k1,
                    got: g1,
                    supported: s1,
                },
                W::UnsupportedSchema {
                    kind: k2,
                    got: g2,
                    supported: s2,
                },
            ) => k1 == k2 && g1 == g2 && s1 == s2,
            (
                W::Malformed {
                    kind: k1,
                    source: s1,
                },
                W::Malformed {
                    kind: k2,
                    source: s2,
                },
            ) => k1 == k2 && same(&**s1, &**s2),
            (
                W::Invalid {
                    kind: k1,
                    field: f1,
                    reason: r1,
                },
                W::Invalid {
                    kind: k2,
                    field: f2,
                    reason: r2,
                },
            ) => k1 == k2 && f1 == f2 && r1 == r2,
            (
                W::Hex {
                    kind: k1,
                    field: f1,
                    value: v1,
                    source: s1,
                },
                W::Hex {
                    kind: k2,
                    field: f2,
                    value: v2,
                    source: s2,
                },
            ) => k1 == k2 && f1 == f2 && v1 == v2 && s1 == s2,
            (
                W::Encode {
                    kind: k1,
                    source: s1,
                },
                W::Encode {
                    kind: k2,
                    source: s2,
                },
            ) => k1 == k2 && same(&**s1, &**s2),
            _ => false,
        }
    }
}

/// Nanoseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The `schema` field: always written as [`SCHEMA_VERSION`]; [`decode`] checks the value read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Schema;

impl Serialize for Schema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(SCHEMA_VERSION)
    }
}

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = u64::deserialize(d)?;
        if v == 0 || v > u64::from(SCHEMA_VERSION) {
            return Err(de::Error::custom(format!(
                "schema {v} is not supported (this build reads 1..={SCHEMA_VERSION})"
            )));
        }
        Ok(Schema)
    }
}

struct KindVisitor(&'static str);

impl<'de> Visitor<'de> for KindVisitor {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "the string {:?}", self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        if v == self.0 {
            Ok(())
        } else {
            Err(E::custom(format!("kind is {v:?}, expected {:?}", self.0)))
        }
    }
}

macro_rules! kind_marker {
    ($(#[$doc:meta])* $name:ident = $s:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name;
        impl $name {
            pub const NAME: &'static str = $s;
        }
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str($s)
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(KindVisitor($s)).map(|()| $name)
            }
        }
    };
}

/// Zero-sized markers for the `kind` field of each message: they always write (and only read) their name.
pub mod kind {
    use super::*;
    kind_marker!(
        /// `"transition"`
        Transition = "transition"
    );
    kind_marker!(
        /// `"progress"`
        Progress = "progress"
    );
    kind_marker!(
        /// `"episode"`
        Episode = "episode"
    );
    kind_marker!(
        /// `"steps"`
        Steps = "steps"
    );
    kind_marker!(
        /// `"policy"`
        Policy = "policy"
    );
    kind_marker!(
        /// `"reset_request"`
        ResetRequest = "reset_request"
    );
    kind_marker!(
        /// `"reset_reply"`
        ResetReply = "reset_reply"
    );
    kind_marker!(
        /// `"step_request"`
        StepRequest = "step_request"
    );
    kind_marker!(
        /// `"step_reply"`
        StepReply = "step_reply"
    );
}

/// The checks of an observation beyond what decoding a tensor checks: images `uint8 [h, w, 3]` with sides
/// below 2^32, depth `float32`, state `float32 [n]`.
fn check_obs<D: TensorData>(
    kind: &'static str,
    field: &'static str,
    obs: &Option<ObservationMsg<D>>,
) -> Result<(), WireError> {
    let Some(obs) = obs else { return Ok(()) };
    let invalid = |reason: String| WireError::Invalid {
        kind,
        field,
        reason,
    };
    for (name, t) in obs.images.iter() {
        let (dtype, shape) = (t.dtype(), t.shape());
        let hwc = dtype == DType::Uint8
            && matches!(shape, [h, w, 3] if u32::try_from(*h).is_ok() && u32::try_from(*w).is_ok());
        if !hwc {
            return Err(invalid(format!(
                "images[{name:?}]: expected uint8 [height, width, 3], got {dtype} {shape:?}"
            )));
        }
    }
    for (name, t) in obs.depth.iter() {
        if t.dtype() != DType::Float32 {
            return Err(invalid(format!(
                "depth[{name:?}] is {}, not float32",
                t.dtype()
            )));
        }
    }
    let state = &obs.state;
    if state.dtype() != DType::Float32 || state.shape().len() != 1 {
        return Err(invalid(format!(
            "state must be float32 [n], got {} {:?}",
            state.dtype(),
            state.shape()
        )));
    }
    Ok(())
}

/// A sha256 as the wire writes it: 64 lowercase hex digits.
fn is_lower_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// One environment step (`stagewise/<robot>/transition`): everything in core's [`Transition`], the robot,
/// a send time, and optionally the observations before (`obs`) and after (`next_obs`) the action. The
/// observations' tensors are held in `D` (owned by default; [`Borrowed`] from the decoded bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "D: TensorData", deserialize = "D: DecodeData<'de>"))]
pub struct TransitionMsg<D = Vec<u8>> {
    pub schema: Schema,
    pub kind: kind::Transition,
    pub robot: String,
    /// Index of the environment in a vectorised batch.
    pub env: u32,
    pub episode: u64,
    /// Step index of the action within the episode (0 = first action after reset).
    pub step: u64,
    pub action: Vec<f32>,
    /// Shaped reward `r_task + c * (gamma * phi_next - phi)` (or the configured reward mode).
    pub reward: f64,
    /// The environment's own (sparse) task reward.
    pub task_reward: f64,
    pub phi: f64,
    /// Potential of the next state as used in the reward (0 when terminated).
    pub phi_next: f64,
    pub gamma: f64,
    pub shaping_scale: f64,
    pub terminated: bool,
    pub truncated: bool,
    pub success: bool,
    /// The reward model's stage for the next state, when it has stages.
    pub stage: Option<u32>,
    /// The simulator's ground-truth progress of the next state (core's `StepInfo::progress_oracle`), when the
    /// env has one (a robot has none). Absent from the encoding when `None`, so that a message without it has
    /// the bytes it had before the field existed, and older readers (which ignore unknown keys) read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oracle_phi: Option<f32>,
    /// The reward model whose progress shaped `reward`: the lowercase hex sha256 of its ONNX (its manifest's
    /// `sha256`), so that a learner can refuse another model's transitions. `None` when the reward is not a
    /// model's (oracle or sparse); absent from the encoding then, as `oracle_phi` is (older bytes decode, older
    /// readers ignore the key). A value that is not 64 lowercase hex digits is refused by [`decode`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward_model: Option<String>,
    /// Send time, nanoseconds since the Unix epoch (sender's clock).
    pub stamp_ns: u64,
    /// Observation the action was taken in (`s_t`), when the actor sends it.
    pub obs: Option<ObservationMsg<D>>,
    /// Observation after the action (`s_{t+1}`), when the actor sends it.
    pub next_obs: Option<ObservationMsg<D>>,
}

impl TransitionMsg {
    /// A transition without observations, stamped now.
    pub fn from_transition(robot: impl Into<String>, t: &Transition) -> Self {
        Self {
            schema: Schema,
            kind: kind::Transition,
            robot: robot.into(),
            env: t.env,
            episode: t.episode,
            step: t.step,
            action: t.action.clone(),
            reward: t.reward,
            task_reward: t.task_reward,
            phi: t.phi,
            phi_next: t.phi_next,
            gamma: t.gamma,
            shaping_scale: t.shaping_scale,
            terminated: t.terminated,
            truncated: t.truncated,
            success: t.success,
            stage: t.stage,
            oracle_phi: None,
            reward_model: None,
            stamp_ns: now_ns(),
            obs: None,
            next_obs: None,
        }
    }

    pub fn with_obs(mut self, obs: ObservationMsg) -> Self {
        self.obs = Some(obs);
        self
    }

    pub fn with_next_obs(mut self, obs: ObservationMsg) -> Self {
        self.next_obs = Some(obs);
        self
    }

    /// The same message with the simulator's ground-truth progress of the next state (`None`: the env has none).
    pub fn with_oracle_phi(mut self, oracle_phi: Option<f32>) -> Self {
        self.oracle_phi = oracle_phi;
        self
    }

    /// The same message naming the reward model that shaped it (its ONNX's sha256 as its manifest gives it, taken
    /// in lowercase), or none (`None`: the reward is the oracle's or sparse).
    pub fn with_reward_model(mut self, sha256: Option<&str>) -> Self {
        self.reward_model = sha256.map(str::to_ascii_lowercase);
        self
    }
}

impl<D: TensorData> TransitionMsg<D> {
    /// The same message with the observations' tensors owned (copied when borrowed).
    pub fn into_owned(self) -> TransitionMsg {
        TransitionMsg {
            schema: Schema,
            kind: kind::Transition,
            robot: self.robot,
            env: self.env,
            episode: self.episode,
            step: self.step,
            action: self.action,
            reward: self.reward,
            task_reward: self.task_reward,
            phi: self.phi,
            phi_next: self.phi_next,
            gamma: self.gamma,
            shaping_scale: self.shaping_scale,
            terminated: self.terminated,
            truncated: self.truncated,
            success: self.success,
            stage: self.stage,
            oracle_phi: self.oracle_phi,
            reward_model: self.reward_model,
            stamp_ns: self.stamp_ns,
            obs: self.obs.map(ObservationMsg::into_owned),
            next_obs: self.next_obs.map(ObservationMsg::into_owned),
        }
    }

    /// Estimate of the encoding's size.
    fn size_estimate(&self) -> usize {
        let obs = |o: &Option<ObservationMsg<D>>| o.as_ref().map_or(0, ObservationMsg::data_len);
        512 + 4 * self.action.len() + obs(&self.obs) + obs(&self.next_obs)
    }

    fn check(&self) -> Result<(), WireError> {
        if let Some(m) = &self.reward_model {
            if !is_lower_sha256(m) {
                return Err(WireError::Invalid {
                    kind: kind::Transition::NAME,
                    field: "reward_model",
                    reason: format!(
                        "{m:?} is not a sha256 (64 lowercase hex digits, the model manifest's `sha256`)"
                    ),
                });
            }
        }
        check_obs(kind::Transition::NAME, "obs", &self.obs)?;
        check_obs(kind::Transition::NAME, "next_obs", &self.next_obs)
    }

    /// The core transition (observations are not part of it).
    pub fn to_transition(&self) -> Transition {
        Transition {
            env: self.env,
            episode: self.episode,
            step: self.step,
            action: self.action.clone(),
            reward: self.reward,
            task_reward: self.task_reward,
            phi: self.phi,
            phi_next: self.phi_next,
            gamma: self.gamma,
            shaping_scale: self.shaping_scale,
            terminated: self.terminated,
            truncated: self.truncated,
            success: self.success,
            stage: self.stage,
        }
    }
}

impl Message for TransitionMsg {
    const KIND: &'static str = kind::Transition::NAME;
    /// [`TransitionMsg::encode_parts`]: the tensors' buffers are moved in, not copied.
    fn into_parts(self) -> Result<crate::WireParts, WireError> {
        self.encode_parts()
    }
    fn size_hint(&self) -> usize {
        self.size_estimate()
    }
    fn validate(&self) -> Result<(), WireError> {
        self.check()
    }
}

impl Message for TransitionMsg<Borrowed<'_>> {
    const KIND: &'static str = kind::Transition::NAME;
    fn size_hint(&self) -> usize {
        self.size_estimate()
    }
    fn validate(&self) -> Result<(), WireError> {
        self.check()
    }
}

/// A reward model's reading of one step (`stagewise/<robot>/progress`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressMsg {
    pub schema: Schema,
    pub kind: kind::Progress,
    pub robot: String,
    pub env: u32,
    pub episode: u64,
    /// Step index of the observation the model read (0 = the reset observation).
    pub step: u64,
    /// Most likely stage (argmax of the stage logits).
    pub stage: u32,
    /// Softmax of the stage logits, one per stage.
    pub stage_probs: Vec<f32>,
    /// Within-stage progress of `stage`, in [0, 1].
    pub tau: f32,
    /// Task progress in [0, 1].
    pub phi: f32,
    /// Send time, nanoseconds since the Unix epoch.
    pub stamp_ns: u64,
}

impl ProgressMsg {
    pub fn new(robot: impl Into<String>, env: u32, episode: u64, step: u64, p: &Progress) -> Self {
        Self {
            schema: Schema,
            kind: kind::Progress,
            robot: robot.into(),
            env,
            episode,
            step,
            stage: u32::try_from(p.stage).unwrap_or(u32::MAX),
            stage_probs: p.stage_probs.clone(),
            tau: p.tau,
            phi: p.phi,
            stamp_ns: now_ns(),
        }
    }

    pub fn to_progress(&self) -> Progress {
        Progress {
            stage: self.stage as usize,
            stage_probs: self.stage_probs.clone(),
            tau: self.tau,
            phi: self.phi,
        }
    }
}

impl Message for ProgressMsg {
    const KIND: &'static str = kind::Progress::NAME;
}

/// A finished episode (`stagewise/<robot>/episode`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeMsg {
    pub schema: Schema,
    pub kind: kind::Episode,
    pub robot: String,
    pub env: u32,
    pub episode: u64,
    /// Sum of the shaped rewards (wire name `return`).
    #[serde(rename = "return")]
    pub episode_return: f64,
    /// Sum of the environment's task rewards.
    pub task_return: f64,
    /// Number of steps (transitions) in the episode.
    pub length: u64,
    pub success: bool,
    pub terminated: bool,
    pub truncated: bool,
    /// Progress `phi` of the last observation.
    pub final_phi: f64,
    /// Send time, nanoseconds since the Unix epoch.
    pub stamp_ns: u64,
}

impl Message for EpisodeMsg {
    const KIND: &'static str = kind::Episode::NAME;
}

/// Consecutive steps of one env's episode as columns, for a viewer (`stagewise/<robot>/steps`, what `serve
/// --rerun` publishes): one message where [`TransitionMsg`] would be one per step, so that a learner stepping
/// hundreds of steps a second costs the viewer a message every tenth of a second, not every step. Step `step + i`
/// is row `i` of every column; `phi`, `reward`, `task_reward` and `action` belong to the state the action was
/// taken in, `success`, `oracle_phi`, `stage` and `stage_probs` to the state after it (as in a transition).
/// Empty optional columns mean the source has none (a robot has no `oracle_phi`, a stageless model no `stage`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepsMsg {
    pub schema: Schema,
    pub kind: kind::Steps,
    pub robot: String,
    pub env: u32,
    pub episode: u64,
    /// Step index of the first row within the episode (0 = first action after reset).
    pub step: u64,
    pub action: Vec<Vec<f32>>,
    pub reward: Vec<f64>,
    pub task_reward: Vec<f64>,
    pub phi: Vec<f64>,
    pub success: Vec<bool>,
    #[serde(default)]
    pub oracle_phi: Vec<f32>,
    #[serde(default)]
    pub stage: Vec<u32>,
    #[serde(default)]
    pub stage_probs: Vec<Vec<f32>>,
    /// Send time, nanoseconds since the Unix epoch.
    pub stamp_ns: u64,
    /// Frames (RGB) after the last row's action (`s_{step + rows}`), when the sender attached them.
    pub next_obs: Option<ObservationMsg>,
}

impl StepsMsg {
    /// An empty batch of `env`'s episode starting at `step`.
    pub fn new(robot: impl Into<String>, env: u32, episode: u64, step: u64) -> Self {
        Self {
            schema: Schema,
            kind: kind::Steps,
            robot: robot.into(),
            env,
            episode,
            step,
            action: Vec::new(),
            reward: Vec::new(),
            task_reward: Vec::new(),
            phi: Vec::new(),
            success: Vec::new(),
            oracle_phi: Vec::new(),
            stage: Vec::new(),
            stage_probs: Vec::new(),
            stamp_ns: 0,
            next_obs: None,
        }
    }

    /// Number of rows (steps).
    pub fn rows(&self) -> usize {
        self.reward.len()
    }

    /// Every column has one value per row (optional ones none or one per row), and there is a row.
    fn check(&self) -> Result<(), WireError> {
        let n = self.rows();
        let invalid = |field: &'static str, reason: String| WireError::Invalid {
            kind: kind::Steps::NAME,
            field,
            reason,
        };
        if n == 0 {
            return Err(invalid("reward", "no rows".into()));
        }
        let columns = [
            ("action", self.action.len(), false),
            ("task_reward", self.task_reward.len(), false),
            ("phi", self.phi.len(), false),
            ("success", self.success.len(), false),
            ("oracle_phi", self.oracle_phi.len(), true),
            ("stage", self.stage.len(), true),
            ("stage_probs", self.stage_probs.len(), true),
        ];
        for (field, len, optional) in columns {
            if len != n && !(optional && len == 0) {
                return Err(invalid(
                    field,
                    format!("{len} values for {n} rows (`reward` has {n})"),
                ));
            }
        }
        check_obs(kind::Steps::NAME, "next_obs", &self.next_obs)
    }
}

impl Message for StepsMsg {
    const KIND: &'static str = kind::Steps::NAME;
    fn size_hint(&self) -> usize {
        let images: usize = self.next_obs.as_ref().map_or(0, |o| {
            o.images.iter().map(|(_, t)| t.data().len() + 64).sum()
        });
        256 + self.rows() * (48 + 4 * self.action.first().map_or(0, Vec::len)) + images
    }
    fn validate(&self) -> Result<(), WireError> {
        self.check()
    }
}

/// An ONNX policy put by a learner (`stagewise/<robot>/policy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyMsg {
    pub schema: Schema,
    pub kind: kind::Policy,
    /// Learner-chosen version, increasing.
    pub version: u64,
    /// Lower-case hex SHA-256 of `onnx` (64 characters).
    pub sha256: String,
    /// The ONNX model file, as bytes.
    #[serde(with = "serde_bytes")]
    pub onnx: Vec<u8>,
    /// Ed25519 signature (64 bytes) of [`policy_signing_message`] (robot, version, sha256), when the learner
    /// signs.
    #[serde(default, with = "serde_bytes")]
    pub signature: Option<Vec<u8>>,
}

/// Domain separation for policy signatures: the first bytes of every [`policy_signing_message`]. A signature made
/// for anything else (another protocol, another message layout) never verifies as a policy signature.
pub const POLICY_SIGNING_CONTEXT: &[u8] = b"stagewise-policy-v1";

/// The bytes a policy's Ed25519 signature covers:
///
/// ```text
/// "stagewise-policy-v1" (19 bytes) | u32 LE length of robot | robot (UTF-8) | u64 LE version | sha256 (32 bytes)
/// ```
///
/// Binding the robot name and the version means a signature for one robot does not move another, and a signed
/// old policy cannot be replayed under a higher version number. The ONNX bytes are covered through their hash.
pub fn policy_signing_message(robot: &str, version: u64, sha256: &[u8; 32]) -> Vec<u8> {
    let mut m = Vec::with_capacity(POLICY_SIGNING_CONTEXT.len() + 4 + robot.len() + 8 + 32);
    m.extend_from_slice(POLICY_SIGNING_CONTEXT);
    m.extend_from_slice(&(robot.len() as u32).to_le_bytes());
    m.extend_from_slice(robot.as_bytes());
    m.extend_from_slice(&version.to_le_bytes());
    m.extend_from_slice(sha256);
    m
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl PolicyMsg {
    /// An unsigned policy; computes the hash.
    pub fn new(version: u64, onnx: Vec<u8>) -> Self {
        Self {
            schema: Schema,
            kind: kind::Policy,
            version,
            sha256: sha256_hex(&onnx),
            onnx,
            signature: None,
        }
    }

    pub fn with_signature(mut self, signature: Vec<u8>) -> Self {
        self.signature = Some(signature);
        self
    }

    /// The 32-byte hash the `sha256` field names (64 hex digits).
    pub fn sha256_bytes(&self) -> Result<[u8; 32], WireError> {
        let bad = |reason: String| WireError::Invalid {
            kind: Self::KIND,
            field: "sha256",
            reason,
        };
        let bytes = hex::decode(&self.sha256).map_err(|source| WireError::Hex {
            kind: Self::KIND,
            field: "sha256",
            value: self.sha256.clone(),
            source,
        })?;
        <[u8; 32]>::try_from(bytes.as_slice())
            .map_err(|_| bad(format!("{} bytes; a sha256 is 32", bytes.len())))
    }

    /// What a signature of this policy for `robot` covers ([`policy_signing_message`] of robot, version and the
    /// `sha256` field; check the field against the bytes with [`PolicyMsg::verify_sha256`]).
    pub fn signing_message(&self, robot: &str) -> Result<Vec<u8>, WireError> {
        Ok(policy_signing_message(
            robot,
            self.version,
            &self.sha256_bytes()?,
        ))
    }

    /// Recomputes the hash of `onnx` and compares it with `sha256`.
    pub fn verify_sha256(&self) -> Result<(), WireError> {
        let got = sha256_hex(&self.onnx);
        if got == self.sha256.to_ascii_lowercase() {
            Ok(())
        } else {
            Err(WireError::Invalid {
                kind: Self::KIND,
                field: "sha256",
                reason: format!(
                    "says {} but the {} onnx bytes hash to {got}",
                    self.sha256,
                    self.onnx.len()
                ),
            })
        }
    }
}

impl Message for PolicyMsg {
    const KIND: &'static str = kind::Policy::NAME;
    fn size_hint(&self) -> usize {
        1024 + self.onnx.len()
    }
    /// Shape checks only (hash format, signature length); [`PolicyMsg::verify_sha256`] checks the hash itself.
    fn validate(&self) -> Result<(), WireError> {
        if self.sha256.len() != 64 || !self.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(WireError::Invalid {
                kind: Self::KIND,
                field: "sha256",
                reason: format!("{:?} is not 64 hex digits", self.sha256),
            });
        }
        if let Some(sig) = &self.signature {
            if sig.len() != SIGNATURE_LEN {
                return Err(WireError::Invalid {
                    kind: Self::KIND,
                    field: "signature",
                    reason: format!(
                        "{} bytes; an Ed25519 signature is {SIGNATURE_LEN}",
                        sig.len()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// A box space on the wire (mirror of core's [`BoxSpec`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxSpecMsg {
    pub names: Vec<String>,
    pub low: Vec<f32>,
    pub high: Vec<f32>,
}

/// A camera on the wire (mirror of core's [`ViewSpec`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewSpecMsg {
    pub name: String,
    pub width: u32,
    pub height: u32,
}

/// What a remote environment takes and gives (mirror of core's [`EnvSpec`]; kept separate so that a change
/// in core cannot change the wire silently).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvSpecMsg {
    pub task: String,
    pub action: BoxSpecMsg,
    pub state: BoxSpecMsg,
    pub views: Vec<ViewSpecMsg>,
    pub stage_names: Vec<String>,
    pub control_hz: f64,
    pub max_steps: u64,
}

impl From<&BoxSpec> for BoxSpecMsg {
    fn from(b: &BoxSpec) -> Self {
        Self {
            names: b.names.clone(),
            low: b.low.clone(),
            high: b.high.clone(),
        }
    }
}

impl From<&BoxSpecMsg> for BoxSpec {
    fn from(b: &BoxSpecMsg) -> Self {
        Self {
            names: b.names.clone(),
            low: b.low.clone(),
            high: b.high.clone(),
        }
    }
}

impl From<&EnvSpec> for EnvSpecMsg {
    fn from(s: &EnvSpec) -> Self {
        Self {
            task: s.task.clone(),
            action: (&s.action).into(),
            state: (&s.state).into(),
            views: s
                .views
                .iter()
                .map(|v| ViewSpecMsg {
                    name: v.name.clone(),
                    width: v.width,
                    height: v.height,
                })
                .collect(),
            stage_names: s.stage_names.clone(),
            control_hz: s.control_hz,
            max_steps: s.max_steps,
        }
    }
}

impl From<&EnvSpecMsg> for EnvSpec {
    fn from(s: &EnvSpecMsg) -> Self {
        Self {
            task: s.task.clone(),
            action: (&s.action).into(),
            state: (&s.state).into(),
            views: s
                .views
                .iter()
                .map(|v| ViewSpec {
                    name: v.name.clone(),
                    width: v.width,
                    height: v.height,
                })
                .collect(),
            stage_names: s.stage_names.clone(),
            control_hz: s.control_hz,
            max_steps: s.max_steps,
        }
    }
}

/// `env/reset` query payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ResetRequest {
    pub schema: Schema,
    pub kind: kind::ResetRequest,
    /// Seed for the episode; nil lets the server choose.
    #[serde(default)]
    pub seed: Option<u64>,
}

impl ResetRequest {
    pub fn new(seed: Option<u64>) -> Self {
        Self {
            seed,
            ..Self::default()
        }
    }
}

impl Message for ResetRequest {
    const KIND: &'static str = kind::ResetRequest::NAME;
}

/// How a served env makes the reward of its `step_reply` (in `reset_reply.reward`; added within schema 1, so
/// nil/missing from older servers, which serve the task reward).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RewardSpecMsg {
    /// `"sparse"` (the env's task reward), `"model"` (potential-based shaping with a reward model's progress)
    /// or `"oracle"` (potential-based shaping with the simulator's ground-truth progress).
    pub source: String,
    /// The reward model's manifest, for `"model"`.
    #[serde(default)]
    pub model: Option<String>,
    /// Discount used for shaping: must equal the learner's.
    pub gamma: f64,
    /// Shaping scale `c` in `r = r_task + c * (gamma * phi' - phi)` (0 for `"sparse"`).
    pub shaping_scale: f64,
    /// How progress became the reward (`--shaping`): `"potential"`, `"value:K"`, `"progress"` or `"rank:W"`. Missing for
    /// `"sparse"` and from older servers (which shape with `"potential"`, no offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shaping: Option<String>,
    /// `"potential"`: the offset `X` of the potential `phi - X`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phi_offset: Option<f64>,
    /// `"progress"`: the scale `S` of its potential part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub potential_scale: Option<f64>,
    /// `"progress"`: whether a terminated success counts as progress 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_progress_one: Option<bool>,
}

impl RewardSpecMsg {
    /// Records the reward form and its parameters (`shaping` and the fields of that form).
    pub fn with_mode(mut self, mode: &stagewise_core::RewardMode) -> Self {
        use stagewise_core::RewardMode;
        let (shaping, offset, scale, one) = match *mode {
            RewardMode::Potential { offset } => ("potential".to_string(), Some(offset), None, None),
            RewardMode::ValuePotential { horizon } => {
                (format!("value:{horizon}"), None, None, None)
            }
            RewardMode::Progress {
                potential_scale,
                success_progress_one,
            } => (
                "progress".to_string(),
                None,
                Some(potential_scale),
                Some(success_progress_one),
            ),
            RewardMode::WindowedRank { window } => (format!("rank:{window}"), None, None, None),
        };
        self.shaping = Some(shaping);
        self.phi_offset = offset;
        self.potential_scale = scale;
        self.success_progress_one = one;
        self
    }
}

/// `env/reset` reply: the spec and first observation, or an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ResetReply {
    pub schema: Schema,
    pub kind: kind::ResetReply,
    pub spec: Option<EnvSpecMsg>,
    pub obs: Option<ObservationMsg>,
    /// Why the reset failed (then `spec` and `obs` are nil).
    pub error: Option<String>,
    /// How step rewards are made (nil: the task reward).
    #[serde(default)]
    pub reward: Option<RewardSpecMsg>,
    /// Progress (potential) of the first observation, when the reward is shaped.
    #[serde(default)]
    pub phi: Option<f64>,
    /// The reward model's embeddings of the observation's frames, float32 `[views, E]`, when the server was
    /// asked for them (`serve --embeddings`). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Tensor>,
}

impl ResetReply {
    pub fn ok(spec: &EnvSpec, obs: ObservationMsg) -> Self {
        Self {
            spec: Some(spec.into()),
            obs: Some(obs),
            ..Self::default()
        }
    }
    pub fn error(reason: impl Into<String>) -> Self {
        Self {
            error: Some(reason.into()),
            ..Self::default()
        }
    }
}

impl Message for ResetReply {
    const KIND: &'static str = kind::ResetReply::NAME;
    fn size_hint(&self) -> usize {
        2048 + self.obs.as_ref().map_or(0, ObservationMsg::data_len)
    }
    fn validate(&self) -> Result<(), WireError> {
        check_obs(Self::KIND, "obs", &self.obs)?;
        check_embedding(Self::KIND, &self.embedding)
    }
}

/// An `embedding` is float32 `[views, E]`.
fn check_embedding(kind: &'static str, t: &Option<Tensor>) -> Result<(), WireError> {
    match t {
        Some(t) if t.dtype() != DType::Float32 || t.shape().len() != 2 => Err(WireError::Invalid {
            kind,
            field: "embedding",
            reason: format!(
                "expected float32 [views, E], got {} {:?}",
                t.dtype(),
                t.shape()
            ),
        }),
        _ => Ok(()),
    }
}

/// `env/step` query payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct StepRequest {
    pub schema: Schema,
    pub kind: kind::StepRequest,
    /// One value per action dimension (msgpack floats or ints).
    pub action: Vec<f32>,
}

impl StepRequest {
    pub fn new(action: Vec<f32>) -> Self {
        Self {
            action,
            ..Self::default()
        }
    }
}

impl Message for StepRequest {
    const KIND: &'static str = kind::StepRequest::NAME;
}

/// gymnasium's `info` on the wire (mirror of core's [`StepInfo`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct StepInfoMsg {
    /// Ground-truth stage, when the environment knows it.
    pub stage: Option<u32>,
    /// Ground-truth progress in [0, 1], when the environment knows it.
    pub progress_oracle: Option<f32>,
    pub success: bool,
    /// True when the action was outside its bounds and was clipped.
    pub action_clipped: bool,
}

impl From<&StepInfo> for StepInfoMsg {
    fn from(i: &StepInfo) -> Self {
        Self {
            stage: i.stage.map(|s| u32::try_from(s).unwrap_or(u32::MAX)),
            progress_oracle: i.progress_oracle,
            success: i.success,
            action_clipped: i.action_clipped,
        }
    }
}

impl From<&StepInfoMsg> for StepInfo {
    fn from(i: &StepInfoMsg) -> Self {
        Self {
            stage: i.stage.map(|s| s as usize),
            progress_oracle: i.progress_oracle,
            success: i.success,
            action_clipped: i.action_clipped,
        }
    }
}

/// `env/step` reply: gymnasium's `(obs, reward, terminated, truncated, info)`, or an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct StepReply {
    pub schema: Schema,
    pub kind: kind::StepReply,
    pub obs: Option<ObservationMsg>,
    pub reward: f64,
    pub terminated: bool,
    pub truncated: bool,
    pub info: StepInfoMsg,
    /// Why the step failed (then `obs` is nil and the other fields are zero/false).
    pub error: Option<String>,
    /// The env's own task reward when `reward` is shaped (nil: `reward` is the task reward).
    #[serde(default)]
    pub task_reward: Option<f64>,
    /// Progress (potential) of the next observation as read, when the reward is shaped.
    #[serde(default)]
    pub phi: Option<f64>,
    /// The reward model's embeddings of the next observation's frames, as in [`ResetReply::embedding`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Tensor>,
}

impl StepReply {
    pub fn ok(r: StepResult) -> Self {
        Self {
            info: (&r.info).into(),
            obs: Some(ObservationMsg::from_observation_owned(r.obs)),
            reward: r.reward,
            terminated: r.terminated,
            truncated: r.truncated,
            ..Self::default()
        }
    }
    pub fn error(reason: impl Into<String>) -> Self {
        Self {
            error: Some(reason.into()),
            ..Self::default()
        }
    }
}

impl Message for StepReply {
    const KIND: &'static str = kind::StepReply::NAME;
    fn size_hint(&self) -> usize {
        1024 + self.obs.as_ref().map_or(0, ObservationMsg::data_len)
    }
    fn validate(&self) -> Result<(), WireError> {
        check_obs(Self::KIND, "obs", &self.obs)?;
        check_embedding(Self::KIND, &self.embedding)
    }
}

/// The `(schema, kind)` of a message without decoding the rest (None if the bytes are not a message).
pub fn peek_header(bytes: &[u8]) -> Option<(u64, String)> {
    from_slice::<Header>(bytes)
        .ok()
        .map(|h| (h.schema, h.kind.into_owned()))
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
