//! stagewise-model: ONNX Runtime sessions for Stagewise reward models (and later policies): the model
//! manifest and its check against the ONNX graph, library discovery and execution providers, frame
//! preprocessing, per-view frame windows, batched scoring into `Progress` ([`RewardModel`]: the two-part form,
//! per-frame encoder + head, whenever the manifest has one, so each step encodes only the new frames, in one run
//! of the fused step graph when `[parts]` names one; or the single graph, [`ModelForm`]), the two-part model
//! itself ([`TwoPartModel`]), the by-name map from a source's
//! state to the state fields a model reads ([`StateMap`]), and the offline scoring engine ([`scoring`]:
//! [`EpisodeScorer`] plans the windows of whole episodes, runs the single graph or the two-part form in batches,
//! and `scoring::score_in_workers` spreads episodes over worker threads) that `stagewise label`, `eval` and
//! `score` call. Online and offline windows come from one definition, [`window::WindowLayout`].
//!
//! Depends on `stagewise-core` and `ort` only: never on the simulator, streaming or runtime crates.
//! `Session::run` takes `&mut self`, so a [`RewardModel`] is owned by one worker thread; make one per thread.

mod error;
mod graph;
pub mod hop;
pub mod manifest;
pub mod policy;
pub mod preprocess;
pub mod reward;
pub mod runtime;
pub mod scoring;
mod stage_progress;
pub mod state;
pub mod synthetic;
pub mod two_part;
pub mod window;

pub use error::ModelError;
pub use hop::HopModel;
pub use manifest::{Manifest, ModelKind, PolicyEmbeddings, PolicyPixels, ProgressMode};
pub use policy::{
    BoundPolicy, PolicyInputs, PolicyModel, ACTION_REPEAT_KEY, EMBEDDINGS_KEY, MAX_ACTION_REPEAT,
    PIXELS_KEY, POLICY_METADATA_KEYS, STATE_NAMES_KEY,
};
pub use reward::{ModelForm, RewardModel, StepTiming};
pub use runtime::{OrtRuntime, Provider, SessionOptions};
pub use scoring::{EpisodeScorer, FrameSource, ScoringError};
pub use state::StateMap;
pub use two_part::TwoPartModel;
