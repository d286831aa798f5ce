//! The model manifest: a TOML file beside each `.onnx` that says what the graph expects and returns.
//!
//! ```toml
//! kind = "stage_progress"          # stage_progress | hop | policy
//! task = "pick-place"               # optional: the task the model was made for (learners refuse another task's)
//! onnx = "tiny3v.onnx"              # relative to the manifest
//! sha256 = "9f2c..."                # of the .onnx file
//! views = ["front", "side", "wrist"]  # camera views, in the order of the images tensor
//! frames = 4                        # frames per window
//! stride = 2                        # control steps between frames of a window
//! state_names = ["ee_x", "ee_y", "ee_z", "gripper_width"]  # the state fields the model reads, by name, in
//!                                   # the order of the state tensor; consumers build the state from their
//!                                   # source's fields by these names (`StateMap`) and refuse a model asking for a
//!                                   # field the source lacks
//! state_size = 4                    # optional with state_names (then its length; both given: they must agree);
//!                                   # 0 = no state input
//!
//! [image]                           # each frame: resize to width x height, x/255, then (x - mean) / std
//! width = 96
//! height = 96
//! mean = [0.485, 0.456, 0.406]
//! std = [0.229, 0.224, 0.225]
//!
//! [inputs]
//! images = "images"                 # f32 [N, views, frames, 3, height, width]
//! state = "state"                   # f32 [N, state_size]; required when state_size > 0
//!
//! [outputs]
//! stage_logits = "stage_logits"     # f32 [N, K]
//! tau = "tau"                       # f32 [N], [N, 1] or [N, K]
//!
//! [stages]
//! names = ["reach", "grasp", "lift", "place"]
//! proportions = [0.2, 0.2, 0.3, 0.3]  # normalised to sum 1
//! progress = "hard"                 # hard | soft (DESIGN.md "Progress")
//!
//! [parts]                           # optional: the same model as a per-frame encoder and a head (the fast path)
//! encoder = "tiny3v.encoder.onnx"   # frames f32 [M, 3, height, width] -> embedding f32 [M, embedding]
//! encoder_sha256 = "..."
//! head = "tiny3v.head.onnx"         # embeddings f32 [N, views, frames, embedding] (+ state) -> the [outputs]
//! head_sha256 = "..."
//! embedding = 64
//! step = "tiny3v.step.onnx"         # optional, frames >= 2: the fused step graph (one run per control step):
//! step_sha256 = "..."               #   frames f32 [N, views, 3, height, width] + cached f32 [N, views, frames - 1,
//!                                   #   embedding] (+ state) -> the [outputs] + embedding f32 [N * views, embedding]
//! ```
//!
//! A policy (`kind = "policy"`) reads its state fields by name too, after what it sees: either a reward model's
//! frame embeddings (`embeddings = { encoder_sha256, views, size }`, [`PolicyEmbeddings`]) or raw camera frames
//! (never both):
//!
//! ```toml
//! [pixels]                          # the policy's input starts with these views' frames ([`PolicyPixels`])
//! views = ["front", "side", "wrist"]  # camera views, in input order
//! width = 32                        # each frame exactly width x height RGB (the runtime never resizes them)
//! height = 32
//! ```
//!
//! A manifest without `state_names` (the older form) gives only `state_size`: its model reads the source's state
//! vector as it is, so it binds only to a source whose state has exactly `state_size` values (the identity
//! mapping); any other source is refused with both sizes named. Name the fields to use such a model elsewhere.

use crate::ModelError;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use stagewise_core::StageProportions;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    StageProgress,
    Hop,
    Policy,
}

impl ModelKind {
    /// What a model of this kind is, for errors ("... is a hop model, expected a policy").
    pub fn description(self) -> &'static str {
        match self {
            Self::StageProgress => "a stage-progress reward model",
            Self::Hop => "a hop model",
            Self::Policy => "a policy",
        }
    }
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::StageProgress => "stage_progress",
            Self::Hop => "hop",
            Self::Policy => "policy",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressMode {
    #[default]
    Hard,
    Soft,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSpec {
    pub width: u32,
    pub height: u32,
    #[serde(default = "default_mean")]
    pub mean: [f32; 3],
    #[serde(default = "default_std")]
    pub std: [f32; 3],
}

fn default_mean() -> [f32; 3] {
    [0.0; 3]
}
fn default_std() -> [f32; 3] {
    [1.0; 3]
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    pub images: Option<String>,
    pub state: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    pub stage_logits: Option<String>,
    pub tau: Option<String>,
    /// Hop models: `H(s_p, s_q)` in [-1, 1].
    pub hop: Option<String>,
    /// Policies: the action.
    pub action: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stages {
    pub names: Vec<String>,
    pub proportions: Vec<f64>,
    #[serde(default)]
    pub progress: ProgressMode,
}

/// Tensor names of the two-part graphs ([`Parts`]).
pub const ENCODER_INPUT: &str = "frames";
pub const ENCODER_OUTPUT: &str = "embedding";
pub const HEAD_INPUT: &str = "embeddings";
/// Tensor names of the fused step graph ([`Parts::step`]): each env's new frame of every view, the embeddings of
/// the older frames of its window (cached by the runtime) and, out, the new frames' embeddings.
pub const STEP_FRAMES: &str = "frames";
pub const STEP_CACHED: &str = "cached";
pub const STEP_EMBEDDING: &str = "embedding";

/// The two-part form of a stage-progress model (DESIGN.md "Two-part models are the fast path"): a per-frame
/// `encoder` (input `frames` [M, 3, H, W] -> output `embedding` [M, E]) and a `head` (input `embeddings`
/// [N, views, frames, E] plus the manifest's state input -> the manifest's outputs). Each frame is encoded once,
/// however many windows it is in. The single graph (`onnx`) stays the reference.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parts {
    pub encoder: PathBuf,
    pub encoder_sha256: String,
    pub head: PathBuf,
    pub head_sha256: String,
    /// Values per frame embedding (E).
    pub embedding: usize,
    /// Optional (`python -m stagewise.training export-parts` writes it for frames >= 2): the encoder and the head composed
    /// into one graph for the actor's step: inputs `frames` [N, views, 3, H, W] (the new frame of each view),
    /// `cached` [N, views, frames - 1, E] (the embeddings of the window's older frames, oldest first) and the
    /// manifest's state input; outputs the manifest's outputs and `embedding` [N * views, E] (the new frames'
    /// embeddings). One `Session::run` per step instead of the encoder's and the head's.
    #[serde(default)]
    pub step: Option<PathBuf>,
    #[serde(default)]
    pub step_sha256: Option<String>,
}

/// A policy's visual input (`[embeddings]` of a `kind = "policy"` manifest): the frame embeddings of a two-part
/// reward model, every view's flattened in the model's view order, before the named state fields in the policy's
/// input (`[N, views * size + state_size]`). The runtime takes them from the run's reward model and refuses a
/// model whose encoder is not this one.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyEmbeddings {
    /// sha256 of the reward model's encoder (its manifest's `parts.encoder_sha256`) the policy was trained with.
    pub encoder_sha256: String,
    /// Camera views, and values per view (the encoder's embedding size).
    pub views: usize,
    pub size: usize,
}

impl PolicyEmbeddings {
    /// Values of the policy's input the embeddings take.
    pub fn len(&self) -> usize {
        self.views * self.size
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Refuses a malformed declaration (the sha256 not 64 hex digits, sizes out of bounds): `(field, reason)`,
    /// the field as a manifest names it (`embeddings.encoder_sha256`, `embeddings`).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !is_sha256(&self.encoder_sha256) {
            return Err((
                "embeddings.encoder_sha256",
                "must be 64 hexadecimal digits".into(),
            ));
        }
        if self.views == 0 || self.views > MAX_VIEWS || self.size == 0 || self.size > MAX_EMBEDDING
        {
            return Err((
                "embeddings",
                format!(
                    "views {} and size {} must be in 1..={MAX_VIEWS} and 1..={MAX_EMBEDDING}",
                    self.views, self.size
                ),
            ));
        }
        Ok(())
    }
}

/// Why a policy may not read both camera frames and embeddings.
pub(crate) const PIXELS_AND_EMBEDDINGS: &str =
    "a policy reads either [pixels] (camera frames) or [embeddings] (a reward model's frame embeddings), not both";

/// A policy's camera input (`[pixels]` of a `kind = "policy"` manifest): every view's frame, in `views` order,
/// channel-major `[3, height, width]` RGB with the raw bytes 0..255 as f32 (the graph normalises them itself),
/// before the named state fields in the policy's input (`[N, views * 3 * height * width + state_size]`). Frames
/// are picked by view name and must be exactly this size: the runtime renders or refuses, it never resizes (a
/// resized frame is not what the policy was trained on). With `remember_first` the row (frames, then state) is
/// followed by the same row of the env's episode's first observation, which the runtime keeps per env: what a
/// camera saw at the start (a target before the pushed block covers it).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyPixels {
    pub views: Vec<String>,
    pub width: u32,
    pub height: u32,
    #[serde(default)]
    pub remember_first: bool,
}

impl PolicyPixels {
    /// Values of one view's frame: `3 * height * width`.
    pub fn frame_len(&self) -> usize {
        3 * self.width as usize * self.height as usize
    }

    /// Values of the policy's input the frames take (of one observation).
    pub fn len(&self) -> usize {
        self.views.len() * self.frame_len()
    }

    /// Values of the policy's whole input row for `state` state values: frames and state, twice with
    /// `remember_first` (now, then the episode's first observation).
    pub fn row_len(&self, state: usize) -> usize {
        (self.len() + state) * if self.remember_first { 2 } else { 1 }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Refuses a malformed declaration (no views, repeated or empty view names, sides or input size out of
    /// bounds): `(field, reason)`, the field as a manifest names it (`pixels.views`, `pixels`).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.views.is_empty() || self.views.len() > MAX_VIEWS {
            return Err((
                "pixels.views",
                format!("{} views: 1..={MAX_VIEWS} expected", self.views.len()),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(v) = self
            .views
            .iter()
            .find(|v| v.trim().is_empty() || !seen.insert(*v))
        {
            return Err((
                "pixels.views",
                format!("view names must be unique and non-empty ({v:?})"),
            ));
        }
        if !(1..=MAX_SIDE).contains(&self.width) || !(1..=MAX_SIDE).contains(&self.height) {
            return Err((
                "pixels",
                format!(
                    "{}x{}: width and height must be in 1..={MAX_SIDE}",
                    self.width, self.height
                ),
            ));
        }
        // The runtime allocates a row of this per env: bounded like every other size it allocates from.
        if self.len() > MAX_PIXEL_INPUT {
            return Err((
                "pixels",
                format!(
                    "{} views of {}x{} are {} input values (at most {MAX_PIXEL_INPUT})",
                    self.views.len(),
                    self.width,
                    self.height,
                    self.len()
                ),
            ));
        }
        Ok(())
    }

    /// `width x height`, for messages.
    pub fn size(&self) -> String {
        format!("{}x{}", self.width, self.height)
    }

    /// Refuses a source (`origin`, for errors) that lacks one of the views or gives it at another size, before
    /// anything runs. `policy` is the manifest (for errors).
    pub fn check_source(
        &self,
        policy: &Path,
        origin: &str,
        views: &[stagewise_core::ViewSpec],
    ) -> Result<(), ModelError> {
        for name in &self.views {
            let err = |reason: String| ModelError::PolicyView {
                policy: policy.to_path_buf(),
                view: name.clone(),
                size: self.size(),
                reason,
            };
            let Some(v) = views.iter().find(|v| &v.name == name) else {
                let has: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
                return Err(err(format!(
                    "{origin} has no such view (it has: {})",
                    if has.is_empty() {
                        "none".into()
                    } else {
                        has.join(", ")
                    }
                )));
            };
            if (v.width, v.height) != (self.width, self.height) {
                return Err(err(format!(
                    "{origin} gives it at {}x{}",
                    v.width, v.height
                )));
            }
        }
        Ok(())
    }

    /// Writes `obs`'s frames of the policy's views into `out` ([`Self::len`] values) as the graph reads them:
    /// channel-major, raw bytes as f32. A missing view or a frame of another size is refused, naming both.
    pub fn write(&self, obs: &stagewise_core::Observation, out: &mut [f32]) -> Result<(), String> {
        let plane = self.width as usize * self.height as usize;
        assert_eq!(out.len(), self.len(), "one row of frames");
        for (name, dst) in self.views.iter().zip(out.chunks_exact_mut(3 * plane)) {
            let Some(view) = obs.view(name) else {
                let has: Vec<&str> = obs.views.iter().map(|v| v.name.as_str()).collect();
                return Err(format!(
                    "the policy reads camera view {name:?} ({}), the observation has only [{}]",
                    self.size(),
                    has.join(", ")
                ));
            };
            let rgb = &view.rgb;
            if rgb.dimensions() != (self.width, self.height) {
                return Err(format!(
                    "camera view {name:?} is {}x{}, the policy reads {}",
                    rgb.width(),
                    rgb.height(),
                    self.size()
                ));
            }
            let (r, rest) = dst.split_at_mut(plane);
            let (g, b) = rest.split_at_mut(plane);
            for (i, px) in rgb.as_raw().chunks_exact(3).enumerate() {
                r[i] = f32::from(px[0]);
                g[i] = f32::from(px[1]);
                b[i] = f32::from(px[2]);
            }
        }
        Ok(())
    }
}

/// A parsed manifest, with `onnx` (and the [`Parts`] files) resolved against the manifest's directory.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub kind: ModelKind,
    /// The task the model or policy was made for, when the manifest says (`stagewise.rl` refuses a reward model
    /// of another task before training; older manifests leave it out).
    #[serde(default)]
    pub task: Option<String>,
    pub onnx: PathBuf,
    pub sha256: String,
    #[serde(default)]
    pub views: Vec<String>,
    #[serde(default = "one")]
    pub frames: usize,
    #[serde(default = "one")]
    pub stride: usize,
    /// Values of the state input: `state_names.len()` when the manifest names the fields and omits it, 0 when
    /// neither is given.
    #[serde(default = "state_size_unset")]
    pub state_size: usize,
    /// The state fields the model reads, by name, in the order of its state tensor (see [`crate::StateMap`]).
    #[serde(default)]
    pub state_names: Option<Vec<String>>,
    pub image: Option<ImageSpec>,
    pub inputs: Inputs,
    pub outputs: Outputs,
    pub stages: Option<Stages>,
    pub parts: Option<Parts>,
    /// A policy's reward-model embeddings input ([`PolicyEmbeddings`]).
    #[serde(default)]
    pub embeddings: Option<PolicyEmbeddings>,
    /// A policy's camera-frame input ([`PolicyPixels`]); never together with `embeddings`.
    #[serde(default)]
    pub pixels: Option<PolicyPixels>,
    /// Free text: where the model came from, what it was trained on.
    #[serde(default)]
    pub description: String,
    /// Where this manifest was read from (not a TOML field).
    #[serde(skip)]
    pub path: PathBuf,
}

fn one() -> usize {
    1
}

/// Largest `frames` a manifest may give.
pub const MAX_FRAMES: usize = 1024;
/// Largest `stride` (steps between a window's frames).
pub const MAX_STRIDE: usize = 1 << 16;
/// Largest `state_size`.
pub const MAX_STATE: usize = 1 << 16;
/// Most camera views.
pub const MAX_VIEWS: usize = 64;
/// Largest frame embedding of a two-part model.
pub const MAX_EMBEDDING: usize = 1 << 16;
/// Largest image side.
pub const MAX_SIDE: u32 = 4096;
/// Most input values a policy's `[pixels]` may take (views x 3 x height x width): 256 MiB of f32 per env.
pub const MAX_PIXEL_INPUT: usize = 1 << 26;
/// Largest window ring of one env (2 x views x frames x stride frames of f32 RGB), bytes.
pub const MAX_WINDOW_BYTES: u64 = 4 << 30;

/// A sha256 as manifests write it: 64 hexadecimal digits.
fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// `state_size` left out of the TOML: resolved after parsing (TOML integers are i64, so no manifest can write
/// this value itself).
const STATE_SIZE_UNSET: usize = usize::MAX;

fn state_size_unset() -> usize {
    STATE_SIZE_UNSET
}

impl Manifest {
    /// Loads a manifest and refuses one of another kind (the error says what `kind` is: [`ModelKind::description`]).
    pub fn load_kind(path: &Path, kind: ModelKind) -> Result<Self, ModelError> {
        let m = Self::load(path)?;
        m.expect_kind(kind)?;
        Ok(m)
    }

    /// Refuses a manifest of another kind than `kind`.
    pub fn expect_kind(&self, kind: ModelKind) -> Result<(), ModelError> {
        if self.kind != kind {
            return Err(ModelError::WrongKind {
                kind: self.kind.to_string(),
                wanted: kind.description(),
            });
        }
        Ok(())
    }

    /// Reads and checks a manifest: syntax, field consistency, the .onnx file's existence and sha256.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut m = Self::parse(&text, path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        m.onnx = dir.join(&m.onnx);
        if let Some(p) = &mut m.parts {
            p.encoder = dir.join(&p.encoder);
            p.head = dir.join(&p.head);
            if let Some(step) = &mut p.step {
                *step = dir.join(&*step);
            }
        }
        m.verify_checksum()?;
        Ok(m)
    }

    /// Parses and checks fields without touching the file system (`path` is only used in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ModelError> {
        let mut m: Manifest =
            toml::from_str(text).map_err(|source| ModelError::ManifestSyntax {
                path: path.to_path_buf(),
                source,
            })?;
        m.path = path.to_path_buf();
        m.resolve_state_size()?;
        m.check_fields()?;
        Ok(m)
    }

    /// The state fields the model reads, in the order of its state tensor; `None` for a manifest without
    /// `state_names` (its state is the source's vector as it is: see [`crate::StateMap::bind`]).
    pub fn state_names(&self) -> Option<&[String]> {
        self.state_names.as_deref()
    }

    /// `state_size` from `state_names` when left out; both given must agree; names unique and non-empty.
    fn resolve_state_size(&mut self) -> Result<(), ModelError> {
        let given = (self.state_size != STATE_SIZE_UNSET).then_some(self.state_size);
        let Some(names) = &self.state_names else {
            self.state_size = given.unwrap_or(0);
            return Ok(());
        };
        let mut seen = std::collections::HashSet::new();
        for n in names {
            if n.trim().is_empty() || !seen.insert(n.as_str()) {
                return Err(self.field_err(
                    "state_names",
                    format!("state field names must be unique and non-empty ({n:?})"),
                ));
            }
        }
        match given {
            Some(size) if size != names.len() => Err(self.field_err(
                "state_names",
                format!(
                    "has {} names, but state_size is {size}: they must agree (state_size may be left out)",
                    names.len()
                ),
            )),
            _ => {
                self.state_size = names.len();
                Ok(())
            }
        }
    }

    fn field_err(&self, field: &str, reason: impl Into<String>) -> ModelError {
        ModelError::ManifestField {
            path: self.path.clone(),
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    /// Checks the fields against each other and against the runtime's bounds; the first problem found is the
    /// error (in this order: checksums, parts, sizes, inputs, what the kind needs).
    fn check_fields(&self) -> Result<(), ModelError> {
        if !is_sha256(&self.sha256) {
            return Err(self.field_err("sha256", "must be 64 hexadecimal digits"));
        }
        if let Some(p) = &self.parts {
            self.check_parts(p)?;
        }
        self.check_sizes()?;
        self.check_inputs()?;
        self.check_kind()
    }

    /// A two-part model's checksums, step graph and embedding size.
    fn check_parts(&self, p: &Parts) -> Result<(), ModelError> {
        if self.kind != ModelKind::StageProgress {
            return Err(self.field_err("parts", "only stage_progress models have parts"));
        }
        if !is_sha256(&p.encoder_sha256) {
            return Err(self.field_err("parts.encoder_sha256", "must be 64 hexadecimal digits"));
        }
        if !is_sha256(&p.head_sha256) {
            return Err(self.field_err("parts.head_sha256", "must be 64 hexadecimal digits"));
        }
        match (&p.step, &p.step_sha256) {
            (Some(_), Some(sha)) if !is_sha256(sha) => {
                return Err(self.field_err("parts.step_sha256", "must be 64 hexadecimal digits"));
            }
            (Some(_), None) => {
                return Err(
                    self.field_err("parts.step_sha256", "missing (parts.step names a file)")
                );
            }
            (None, Some(_)) => {
                return Err(self.field_err("parts.step", "missing (parts.step_sha256 is given)"));
            }
            (Some(_), Some(_)) if self.frames < 2 => {
                return Err(self.field_err(
                    "parts.step",
                    format!("a step graph needs frames >= 2 (frames is {})", self.frames),
                ));
            }
            _ => {}
        }
        if p.embedding == 0 || p.embedding > MAX_EMBEDDING {
            return Err(self.field_err(
                "parts.embedding",
                format!("{} is not in 1..={MAX_EMBEDDING}", p.embedding),
            ));
        }
        Ok(())
    }

    /// Frames, stride, state, views and image sizes: at least 1 where needed, and bounded.
    fn check_sizes(&self) -> Result<(), ModelError> {
        if self.frames == 0 {
            return Err(self.field_err("frames", "must be >= 1"));
        }
        if self.stride == 0 {
            return Err(self.field_err("stride", "must be >= 1"));
        }
        // Sizes the runtime allocates from: bounded, so that a bad manifest is an error here, not an overflow or
        // an allocation failure later (tests/manifest_corpus.rs).
        for (field, value, max) in [
            ("frames", self.frames, MAX_FRAMES),
            ("stride", self.stride, MAX_STRIDE),
            ("state_size", self.state_size, MAX_STATE),
            ("views", self.views.len(), MAX_VIEWS),
        ] {
            if value > max {
                return Err(self.field_err(field, format!("{value} is more than {max}")));
            }
        }
        if let Some(img) = &self.image {
            if img.width > MAX_SIDE || img.height > MAX_SIDE {
                return Err(self.field_err(
                    "image",
                    format!(
                        "{}x{} is larger than {MAX_SIDE}x{MAX_SIDE}",
                        img.width, img.height
                    ),
                ));
            }
            // The window ring of one env: 2 x views x frames x stride normalised RGB frames (window.rs).
            let bytes = [
                2,
                self.views.len().max(1) as u64,
                self.frames as u64,
                self.stride as u64,
                u64::from(img.width) * u64::from(img.height),
                12,
            ]
            .into_iter()
            .try_fold(1u64, u64::checked_mul)
            .unwrap_or(u64::MAX);
            if bytes > MAX_WINDOW_BYTES {
                return Err(self.field_err(
                    "frames",
                    format!(
                        "{} frames {} steps apart of {} views at {}x{} need {bytes} bytes of window per env \
                         (at most {MAX_WINDOW_BYTES})",
                        self.frames,
                        self.stride,
                        self.views.len(),
                        img.width,
                        img.height
                    ),
                ));
            }
        }
        Ok(())
    }

    /// State tensor against state size, view names, image normalisation, stage proportions.
    fn check_inputs(&self) -> Result<(), ModelError> {
        if self.state_size > 0 && self.inputs.state.is_none() {
            return Err(self.field_err(
                "inputs.state",
                format!("missing, but state_size is {}", self.state_size),
            ));
        }
        if self.state_size == 0 && self.inputs.state.is_some() {
            return Err(self.field_err("state_size", "is 0, but inputs.state names a state tensor"));
        }
        let mut seen = std::collections::HashSet::new();
        for v in &self.views {
            if v.is_empty() || !seen.insert(v) {
                return Err(self.field_err(
                    "views",
                    format!("view names must be unique and non-empty ({v:?})"),
                ));
            }
        }
        if let Some(img) = &self.image {
            if img.width == 0 || img.height == 0 {
                return Err(self.field_err("image", "width and height must be >= 1"));
            }
            if img.std.iter().any(|s| !s.is_finite() || *s == 0.0)
                || img.mean.iter().any(|m| !m.is_finite())
            {
                return Err(self.field_err(
                    "image.std",
                    "mean must be finite and std finite and non-zero",
                ));
            }
        }
        if let Some(st) = &self.stages {
            if st.names.len() != st.proportions.len() {
                return Err(self.field_err(
                    "stages.proportions",
                    format!(
                        "{} proportions for {} stage names",
                        st.proportions.len(),
                        st.names.len()
                    ),
                ));
            }
            StageProportions::new(&st.proportions).map_err(|source| {
                ModelError::ManifestProportions {
                    path: self.path.clone(),
                    source,
                }
            })?;
        }
        Ok(())
    }

    /// The inputs and outputs the model's kind needs.
    fn check_kind(&self) -> Result<(), ModelError> {
        match self.kind {
            ModelKind::StageProgress => {
                if self.views.is_empty() {
                    return Err(
                        self.field_err("views", "a stage_progress model needs at least one view")
                    );
                }
                if self.image.is_none() {
                    return Err(
                        self.field_err("image", "missing (a stage_progress model takes images)")
                    );
                }
                if self.inputs.images.is_none() {
                    return Err(self.field_err("inputs.images", "missing"));
                }
                if self.outputs.stage_logits.is_none() {
                    return Err(self.field_err("outputs.stage_logits", "missing"));
                }
                if self.outputs.tau.is_none() {
                    return Err(self.field_err("outputs.tau", "missing"));
                }
                if self.stages.is_none() {
                    return Err(self.field_err("stages", "missing (names and proportions)"));
                }
            }
            ModelKind::Hop => {
                if self.outputs.hop.is_none() {
                    return Err(self.field_err("outputs.hop", "missing"));
                }
            }
            ModelKind::Policy => {
                if self.outputs.action.is_none() {
                    return Err(self.field_err("outputs.action", "missing"));
                }
            }
        }
        self.check_policy_inputs()
    }

    /// A policy's visual input: `[embeddings]` or `[pixels]` (one of them at most), each within bounds.
    fn check_policy_inputs(&self) -> Result<(), ModelError> {
        if let Some(e) = &self.embeddings {
            if self.kind != ModelKind::Policy {
                return Err(self.field_err("embeddings", "only a policy reads embeddings"));
            }
            e.check()
                .map_err(|(field, reason)| self.field_err(field, reason))?;
        }
        if let Some(p) = &self.pixels {
            if self.kind != ModelKind::Policy {
                return Err(self.field_err("pixels", "only a policy reads [pixels]"));
            }
            // One input row holds one or the other: a policy trained on both has no layout here.
            if self.embeddings.is_some() {
                return Err(self.field_err("pixels", PIXELS_AND_EMBEDDINGS));
            }
            p.check()
                .map_err(|(field, reason)| self.field_err(field, reason))?;
        }
        Ok(())
    }

    /// Checks the sha256 of the .onnx file (and of the parts' files) against the manifest.
    pub fn verify_checksum(&self) -> Result<(), ModelError> {
        let mut files = vec![(&self.onnx, &self.sha256)];
        if let Some(p) = &self.parts {
            files.push((&p.encoder, &p.encoder_sha256));
            files.push((&p.head, &p.head_sha256));
            if let (Some(step), Some(sha)) = (&p.step, &p.step_sha256) {
                files.push((step, sha));
            }
        }
        for (file, expected) in files {
            let actual = sha256_file(file)?;
            if !actual.eq_ignore_ascii_case(expected) {
                return Err(ModelError::Checksum {
                    path: file.clone(),
                    manifest: self.path.clone(),
                    expected: expected.clone(),
                    actual,
                });
            }
        }
        Ok(())
    }

    /// Stage proportions (normalised), when the manifest has stages.
    pub fn proportions(&self) -> Option<StageProportions> {
        self.stages
            .as_ref()
            .and_then(|s| StageProportions::new(&s.proportions).ok())
    }

    /// Control steps of history a window spans: `(frames - 1) * stride + 1`.
    pub fn history_len(&self) -> usize {
        (self.frames - 1) * self.stride + 1
    }
}

/// Lower-case hex sha256 of a file.
pub fn sha256_file(path: &Path) -> Result<String, ModelError> {
    let bytes = std::fs::read(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
kind = "stage_progress"
onnx = "m.onnx"
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
views = ["front", "wrist"]
frames = 4
stride = 2
state_size = 3
[image]
width = 32
height = 24
[inputs]
images = "images"
state = "state"
[outputs]
stage_logits = "stage_logits"
tau = "tau"
[stages]
names = ["a", "b"]
proportions = [1.0, 3.0]
"#;

    const PARTS: &str = r#"
[parts]
encoder = "m.encoder.onnx"
encoder_sha256 = "2222222222222222222222222222222222222222222222222222222222222222"
head = "m.head.onnx"
head_sha256 = "1111111111111111111111111111111111111111111111111111111111111111"
embedding = 16
"#;

    #[test]
    fn parts_parse_and_resolve_next_to_the_manifest() {
        let m = parse(&format!("{GOOD}{PARTS}")).unwrap();
        let p = m.parts.as_ref().unwrap();
        assert_eq!(
            (p.embedding, p.head.as_path()),
            (16, Path::new("m.head.onnx"))
        );
        assert!(parse(GOOD).unwrap().parts.is_none());
        // load() resolves the files against the manifest's directory, then checks their sha256
        let dir = tempfile::tempdir().unwrap();
        let sha = |b: &[u8]| format!("{:x}", Sha256::digest(b));
        for (f, b) in [
            ("m.onnx", b"a"),
            ("m.encoder.onnx", b"b"),
            ("m.head.onnx", b"c"),
        ] {
            std::fs::write(dir.path().join(f), b).unwrap();
        }
        let text = format!("{GOOD}{PARTS}")
            .replace(&"0".repeat(64), &sha(b"a"))
            .replace(&"2".repeat(64), &sha(b"b"))
            .replace(&"1".repeat(64), &sha(b"c"));
        let path = dir.path().join("m.toml");
        std::fs::write(&path, &text).unwrap();
        let m = Manifest::load(&path).unwrap();
        assert_eq!(m.parts.unwrap().encoder, dir.path().join("m.encoder.onnx"));
        std::fs::write(dir.path().join("m.head.onnx"), b"tampered").unwrap();
        match Manifest::load(&path).unwrap_err() {
            ModelError::Checksum { path, .. } => assert_eq!(path, dir.path().join("m.head.onnx")),
            other => panic!("expected a checksum error, got {other}"),
        }
    }

    /// A policy's `[embeddings]` (a reward model's frame embeddings before its named state): parsed, and refused
    /// on another kind, with a bad sha256 or sizes out of bounds, naming the field.
    #[test]
    fn policy_embeddings_are_checked() {
        let policy = r#"
kind = "policy"
onnx = "p.onnx"
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
state_names = ["ee_x", "gripper_width"]
embeddings = { encoder_sha256 = "2222222222222222222222222222222222222222222222222222222222222222", views = 3, size = 64 }
[inputs]
state = "state"
[outputs]
action = "action"
"#;
        let m = parse(policy).unwrap();
        let e = m.embeddings.as_ref().unwrap();
        assert_eq!((e.views, e.size, e.len(), m.state_size), (3, 64, 192, 2));
        for (bad, field) in [
            (
                policy.replace(&"2".repeat(64), "abc"),
                "embeddings.encoder_sha256",
            ),
            (policy.replace("views = 3", "views = 0"), "embeddings"),
            (policy.replace("size = 64", "size = 1000000"), "embeddings"),
        ] {
            assert_eq!(field_of(parse(&bad).unwrap_err()), field, "{bad}");
        }
        let on_a_model = format!(
            "embeddings = {{ encoder_sha256 = \"{}\", views = 1, size = 1 }}\n{GOOD}",
            "2".repeat(64)
        );
        assert_eq!(field_of(parse(&on_a_model).unwrap_err()), "embeddings");
    }

    /// A policy's `[pixels]` (camera frames before its named state): parsed, its input length computed, and
    /// refused with [embeddings], on another kind, without views, with duplicate views, sizes out of bounds or
    /// unknown fields, naming the field (and, for both inputs, both).
    #[test]
    fn policy_pixels_are_checked() {
        let policy = r#"
kind = "policy"
onnx = "p.onnx"
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
state_names = ["ee_x", "ee_y", "ee_z", "gripper_width"]
state_size = 4
[pixels]
views = ["front", "side", "wrist"]
width = 32
height = 24
[inputs]
state = "state"
[outputs]
action = "action"
"#;
        let m = parse(policy).unwrap();
        let p = m.pixels.as_ref().unwrap();
        assert_eq!(p.views, ["front", "side", "wrist"]);
        assert_eq!((p.frame_len(), p.len(), m.state_size), (2304, 6912, 4));
        for (bad, field) in [
            (
                policy.replace("[\"front\", \"side\", \"wrist\"]", "[]"),
                "pixels.views",
            ),
            (policy.replace("\"side\"", "\"front\""), "pixels.views"),
            (policy.replace("\"side\"", "\" \""), "pixels.views"),
            (policy.replace("width = 32", "width = 0"), "pixels"),
            (policy.replace("height = 24", "height = 4097"), "pixels"),
            (
                policy.replace("width = 32\nheight = 24", "width = 4096\nheight = 4096"),
                "pixels",
            ),
        ] {
            assert_eq!(field_of(parse(&bad).unwrap_err()), field, "{bad}");
        }
        let many: Vec<String> = (0..=MAX_VIEWS).map(|i| format!("\"v{i}\"")).collect();
        let too_many = policy.replace(
            "[\"front\", \"side\", \"wrist\"]",
            &format!("[{}]", many.join(", ")),
        );
        assert_eq!(field_of(parse(&too_many).unwrap_err()), "pixels.views");
        let unknown = policy.replace("height = 24", "height = 24\nmean = 0.5");
        assert!(field_of(parse(&unknown).unwrap_err()).starts_with("syntax"));
        // Both visual inputs: refused naming the file and both fields.
        let both = policy.replace(
            "state_size = 4\n",
            &format!(
                "state_size = 4\nembeddings = {{ encoder_sha256 = \"{}\", views = 3, size = 8 }}\n",
                "2".repeat(64)
            ),
        );
        let e = parse(&both).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("test.toml")
                && text.contains("[pixels]")
                && text.contains("[embeddings]"),
            "{text}"
        );
        assert_eq!(field_of(e), "pixels");
        let on_a_model = GOOD.replace(
            "[inputs]",
            "[pixels]\nviews = [\"front\"]\nwidth = 8\nheight = 8\n[inputs]",
        );
        assert_eq!(field_of(parse(&on_a_model).unwrap_err()), "pixels");
    }

    fn parse(text: &str) -> Result<Manifest, ModelError> {
        Manifest::parse(text, Path::new("test.toml"))
    }

    fn field_of(e: ModelError) -> String {
        match e {
            ModelError::ManifestField { field, .. } => field,
            ModelError::ManifestProportions { .. } => "stages.proportions".into(),
            ModelError::ManifestSyntax { source, .. } => format!("syntax: {source}"),
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn good_manifest_parses() {
        let m = parse(GOOD).unwrap();
        assert_eq!(m.kind, ModelKind::StageProgress);
        assert_eq!(m.history_len(), 7);
        assert_eq!(m.image.as_ref().unwrap().std, [1.0; 3]);
        assert_eq!(m.proportions().unwrap().proportions(), &[0.25, 0.75]);
        assert_eq!(m.stages.as_ref().unwrap().progress, ProgressMode::Hard);
        assert_eq!(m.task, None);
        let tasked = parse(&format!("task = \"push-target\"\n{GOOD}")).unwrap();
        assert_eq!(tasked.task.as_deref(), Some("push-target"));
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (GOOD.replace("frames = 4", "frames = 0"), "frames"),
            (GOOD.replace("stride = 2", "stride = 0"), "stride"),
            (GOOD.replace("state = \"state\"", ""), "inputs.state"),
            (
                GOOD.replace("proportions = [1.0, 3.0]", "proportions = [1.0]"),
                "stages.proportions",
            ),
            (
                GOOD.replace("proportions = [1.0, 3.0]", "proportions = [1.0, -3.0]"),
                "stages.proportions",
            ),
            (
                GOOD.replace("[\"front\", \"wrist\"]", "[\"front\", \"front\"]"),
                "views",
            ),
            (GOOD.replace("sha256 = \"0000", "sha256 = \"zz00"), "sha256"),
            (GOOD.replace("tau = \"tau\"", ""), "outputs.tau"),
            (GOOD.replace("width = 32", "width = 0"), "image"),
            (
                format!("{GOOD}{PARTS}").replace("embedding = 16", "embedding = 0"),
                "parts.embedding",
            ),
            (
                format!("{GOOD}{PARTS}").replace("head_sha256 = \"11", "head_sha256 = \"zz"),
                "parts.head_sha256",
            ),
            (
                format!("{GOOD}{PARTS}step = \"m.step.onnx\"\n"),
                "parts.step_sha256",
            ),
            (
                format!("{GOOD}{PARTS}step_sha256 = \"{}\"\n", "3".repeat(64)),
                "parts.step",
            ),
            (
                format!("{GOOD}{PARTS}step = \"m.step.onnx\"\nstep_sha256 = \"33\"\n"),
                "parts.step_sha256",
            ),
            (
                format!(
                    "{GOOD}{PARTS}step = \"m.step.onnx\"\nstep_sha256 = \"{}\"\n",
                    "3".repeat(64)
                )
                .replace("frames = 4", "frames = 1"),
                "parts.step",
            ),
            (
                format!("{GOOD}{PARTS}").replace("encoder_sha256 = \"2222", "encoder_sha256 = \"2"),
                "parts.encoder_sha256",
            ),
        ];
        for (text, field) in cases {
            assert_eq!(field_of(parse(&text).unwrap_err()), field, "{text}");
        }
    }

    #[test]
    fn state_names_give_the_state_size() {
        assert_eq!(parse(GOOD).unwrap().state_names(), None);
        let named = GOOD.replace(
            "state_size = 3",
            "state_names = [\"ee_x\", \"gripper_width\", \"ee_z\"]",
        );
        let m = parse(&named).unwrap();
        assert_eq!(m.state_size, 3);
        assert_eq!(
            m.state_names().unwrap(),
            ["ee_x", "gripper_width", "ee_z"].map(String::from)
        );
        // Both given and agreeing is fine.
        let both = format!("state_size = 3\n{named}");
        assert_eq!(parse(&both).unwrap().state_size, 3);
        // Neither: no state (and then no state input either).
        let none = GOOD
            .replace("state_size = 3", "")
            .replace("state = \"state\"", "");
        assert_eq!(parse(&none).unwrap().state_size, 0);
    }

    #[test]
    fn bad_state_names_are_refused_naming_the_field() {
        let cases = [
            // disagrees with state_size
            GOOD.replace(
                "state_size = 3",
                "state_size = 3\nstate_names = [\"a\", \"b\"]",
            ),
            GOOD.replace("state_size = 3", "state_names = [\"a\", \"b\", \"a\"]"),
            GOOD.replace("state_size = 3", "state_names = [\"a\", \"\", \"c\"]"),
        ];
        for text in cases {
            let e = parse(&text).unwrap_err();
            let msg = e.to_string();
            assert_eq!(field_of(e), "state_names", "{text}");
            assert!(msg.contains("test.toml"), "{msg}");
        }
        let msg = parse(&GOOD.replace(
            "state_size = 3",
            "state_size = 3\nstate_names = [\"a\", \"b\"]",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("2 names") && msg.contains("state_size is 3"),
            "{msg}"
        );
    }

    #[test]
    fn syntax_errors_and_unknown_fields_are_refused() {
        let e = field_of(parse(&GOOD.replace("frames = 4", "frames = \"four\"")).unwrap_err());
        assert!(e.contains("frames"), "{e}");
        let e = field_of(parse(&GOOD.replace("stride = 2", "stride = 2\nstrid = 3")).unwrap_err());
        assert!(e.contains("strid"), "{e}");
        let e = field_of(parse(&GOOD.replace("stage_progress", "magic")).unwrap_err());
        assert!(e.contains("magic"), "{e}");
    }
}
