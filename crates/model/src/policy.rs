//! ONNX policies: state in, action out, batched over environments. Policies arrive as bytes from a learner
//! (hot-swap) or as a manifest on disk; either way the graph is checked against the environment's state and
//! action sizes before it may act.
//!
//! A graph may declare its inputs in its ONNX metadata ([`PolicyInputs`]: `stagewise.state_names`,
//! `stagewise.pixels`, `stagewise.embeddings`), as it declares its action repeat ([`ACTION_REPEAT_KEY`]): then
//! the sha256 (and a push's signature) cover them, and bare bytes ([`PolicyModel::bind_bytes`]) are bound like a
//! manifest policy ([`PolicyModel::load_bound`]; a manifest that disagrees with its graph is refused).

use crate::graph::GraphCheck;
use crate::manifest::{
    Manifest, ModelKind, PolicyEmbeddings, PolicyPixels, MAX_STATE, PIXELS_AND_EMBEDDINGS,
};
use crate::runtime::{OrtRuntime, Provider, SessionOptions};
use crate::state::StateMap;
use crate::ModelError;
use ort::session::Session;
use ort::value::TensorRef;
use std::path::{Path, PathBuf};

/// ONNX metadata key (the model's `metadata_props`) of a policy that chooses an action every K control steps
/// (trained with its actions held K steps): [`PolicyModel::act_held`] holds each action that long. It lives in
/// the graph, so the sha256 and the signature of a pushed policy cover it. Absent: 1 (a new action every step).
pub const ACTION_REPEAT_KEY: &str = "stagewise.action_repeat";
/// Largest action repeat a policy may declare.
pub const MAX_ACTION_REPEAT: u32 = 1000;
/// ONNX metadata key of the state fields a policy reads, by name, in input order: a JSON list of strings
/// (a manifest's `state_names`). Absent: the source's whole state vector as it is.
pub const STATE_NAMES_KEY: &str = "stagewise.state_names";
/// ONNX metadata key of the camera frames a policy reads before its state: a JSON object
/// `{"views": [..], "width": W, "height": H}` (a manifest's `[pixels]`, [`PolicyPixels`]).
pub const PIXELS_KEY: &str = "stagewise.pixels";
/// ONNX metadata key of the reward-model embeddings a policy reads before its state: a JSON object
/// `{"encoder_sha256": "..", "views": V, "size": E}` (a manifest's `embeddings`, [`PolicyEmbeddings`]).
pub const EMBEDDINGS_KEY: &str = "stagewise.embeddings";
/// Every `stagewise.*` metadata key a policy graph may carry; any other is refused (a misspelt key would
/// otherwise leave a policy reading the whole state).
pub const POLICY_METADATA_KEYS: [&str; 4] = [
    ACTION_REPEAT_KEY,
    STATE_NAMES_KEY,
    PIXELS_KEY,
    EMBEDDINGS_KEY,
];

/// The inputs a policy graph declares in its ONNX metadata ([`STATE_NAMES_KEY`], [`PIXELS_KEY`],
/// [`EMBEDDINGS_KEY`]; `stagewise.export.write_policy` and `with_inputs` write them). A graph that declares any
/// declares all it reads: what it leaves out it does not read (no `state_names`: the source's whole state).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyInputs {
    pub state_names: Option<Vec<String>>,
    pub pixels: Option<PolicyPixels>,
    pub embeddings: Option<PolicyEmbeddings>,
}

impl PolicyInputs {
    /// Whether the graph declares any input.
    pub fn is_declared(&self) -> bool {
        self.state_names.is_some() || self.pixels.is_some() || self.embeddings.is_some()
    }

    /// The inputs `session`'s metadata declares (`path` names the graph in errors).
    pub fn from_session(session: &Session, path: &Path) -> Result<Self, ModelError> {
        let Ok(meta) = session.metadata() else {
            return Ok(Self::default());
        };
        let keys = meta.custom_keys().unwrap_or_default();
        Self::parse(&keys, |k| meta.custom(k), path)
    }

    /// Parses the metadata's `stagewise.*` entries (`keys`: every custom key; `get`: a key's value). Refused,
    /// with the key and the reason: an unknown `stagewise.*` key, a value that is not the JSON it should be (an
    /// object with an unknown field among them), names repeated or empty, sizes out of bounds (the manifest's
    /// bounds), and pixels together with embeddings.
    pub fn parse(
        keys: &[String],
        get: impl Fn(&str) -> Option<String>,
        path: &Path,
    ) -> Result<Self, ModelError> {
        let err = |key: &str, reason: String| ModelError::PolicyMetadata {
            path: path.to_path_buf(),
            key: key.to_string(),
            reason,
        };
        if let Some(k) = keys
            .iter()
            .find(|k| k.starts_with("stagewise.") && !POLICY_METADATA_KEYS.contains(&k.as_str()))
        {
            return Err(err(
                k,
                format!(
                    "unknown key (a policy graph may carry {})",
                    POLICY_METADATA_KEYS.join(", ")
                ),
            ));
        }
        let shown = |v: &str| {
            let cut: String = v.chars().take(80).collect();
            if cut.len() < v.len() {
                format!("{cut:?}...")
            } else {
                format!("{cut:?}")
            }
        };
        let state_names = match get(STATE_NAMES_KEY) {
            None => None,
            Some(v) => {
                let names: Vec<String> = serde_json::from_str(&v).map_err(|e| {
                    err(
                        STATE_NAMES_KEY,
                        format!("{} is not a JSON list of state field names: {e}", shown(&v)),
                    )
                })?;
                let mut seen = std::collections::HashSet::new();
                if let Some(n) = names
                    .iter()
                    .find(|n| n.trim().is_empty() || !seen.insert(n.as_str()))
                {
                    return Err(err(
                        STATE_NAMES_KEY,
                        format!("state field names must be unique and non-empty ({n:?})"),
                    ));
                }
                if names.len() > MAX_STATE {
                    return Err(err(
                        STATE_NAMES_KEY,
                        format!("{} names is more than {MAX_STATE}", names.len()),
                    ));
                }
                Some(names)
            }
        };
        let pixels = match get(PIXELS_KEY) {
            None => None,
            Some(v) => {
                let p: PolicyPixels = serde_json::from_str(&v).map_err(|e| {
                    err(
                        PIXELS_KEY,
                        format!(
                            "{} is not a JSON object {{\"views\": [..], \"width\": W, \"height\": H}}: {e}",
                            shown(&v)
                        ),
                    )
                })?;
                p.check()
                    .map_err(|(field, reason)| err(PIXELS_KEY, format!("{field}: {reason}")))?;
                Some(p)
            }
        };
        let embeddings = match get(EMBEDDINGS_KEY) {
            None => None,
            Some(v) => {
                let e: PolicyEmbeddings = serde_json::from_str(&v).map_err(|e| {
                    err(
                        EMBEDDINGS_KEY,
                        format!(
                            "{} is not a JSON object {{\"encoder_sha256\": \"..\", \"views\": V, \"size\": E}}: {e}",
                            shown(&v)
                        ),
                    )
                })?;
                e.check()
                    .map_err(|(field, reason)| err(EMBEDDINGS_KEY, format!("{field}: {reason}")))?;
                Some(e)
            }
        };
        if pixels.is_some() && embeddings.is_some() {
            return Err(err(PIXELS_KEY, PIXELS_AND_EMBEDDINGS.to_string()));
        }
        Ok(Self {
            state_names,
            pixels,
            embeddings,
        })
    }

    /// Refuses a manifest `m` that says otherwise than the graph's metadata (which declares inputs: a graph that
    /// declares none is not compared), naming the manifest, the field and both values.
    pub fn check_manifest(&self, m: &Manifest) -> Result<(), ModelError> {
        if !self.is_declared() {
            return Ok(());
        }
        let differ = |field: &str, key: &str, graph: String, manifest: String| {
            ModelError::ManifestField {
                path: m.path.clone(),
                field: field.to_string(),
                reason: format!(
                    "the graph {} declares {graph} in its ONNX metadata ({key}), the manifest {manifest}: they \
                     must agree (write both with stagewise.export.write_policy)",
                    m.onnx.display()
                ),
            }
        };
        let or_none = |v: Option<String>| v.unwrap_or_else(|| "none".into());
        if self.state_names.as_deref() != m.state_names() {
            return Err(differ(
                "state_names",
                STATE_NAMES_KEY,
                or_none(
                    self.state_names
                        .as_ref()
                        .map(|n| format!("state_names {n:?}")),
                ),
                or_none(m.state_names().map(|n| format!("{n:?}"))),
            ));
        }
        if self.pixels != m.pixels {
            return Err(differ(
                "pixels",
                PIXELS_KEY,
                or_none(
                    self.pixels
                        .as_ref()
                        .map(|p| format!("pixels {:?} at {}", p.views, p.size())),
                ),
                or_none(
                    m.pixels
                        .as_ref()
                        .map(|p| format!("{:?} at {}", p.views, p.size())),
                ),
            ));
        }
        if self.embeddings != m.embeddings {
            let show = |e: &PolicyEmbeddings| {
                format!(
                    "encoder {} ({} views x {})",
                    e.encoder_sha256, e.views, e.size
                )
            };
            return Err(differ(
                "embeddings",
                EMBEDDINGS_KEY,
                or_none(
                    self.embeddings
                        .as_ref()
                        .map(|e| format!("embeddings of {}", show(e))),
                ),
                or_none(m.embeddings.as_ref().map(show)),
            ));
        }
        Ok(())
    }

    /// Values of the input before the state: the embeddings' or the frames'.
    fn before_state(&self) -> usize {
        self.embeddings.as_ref().map_or(0, PolicyEmbeddings::len)
            + self.pixels.as_ref().map_or(0, PolicyPixels::len)
    }
}

/// A policy loaded for a source ([`PolicyModel::load_bound`]): the graph, how its state fields are taken from
/// the source's state, and what it reads before them: the reward-model embeddings or the camera frames (if any).
pub struct BoundPolicy {
    pub model: PolicyModel,
    pub state_map: StateMap,
    pub embeddings: Option<PolicyEmbeddings>,
    pub pixels: Option<PolicyPixels>,
    /// The manifest it was loaded from, or the label of its bytes ([`PolicyModel::bind_bytes`]), for errors.
    pub manifest: PathBuf,
}

impl BoundPolicy {
    /// Refuses a source whose camera views (`views`; `origin` describes the source) lack one the policy's
    /// `[pixels]` reads, or give it at another size ([`PolicyPixels::check_source`]). Nothing to check for
    /// a policy without `[pixels]`.
    pub fn check_views(
        &self,
        origin: &str,
        views: &[stagewise_core::ViewSpec],
    ) -> Result<(), ModelError> {
        match &self.pixels {
            Some(p) => p.check_source(&self.manifest, origin, views),
            None => Ok(()),
        }
    }

    /// Refuses a run whose reward model (`offered`: the frame embeddings it computes, None when it computes
    /// none; `origin` describes it) does not give the embeddings the policy reads: the same encoder (sha256),
    /// views and size. Nothing to check for a policy that reads none.
    pub fn check_embeddings(
        &self,
        origin: &str,
        offered: Option<&PolicyEmbeddings>,
    ) -> Result<(), ModelError> {
        let Some(e) = &self.embeddings else {
            return Ok(());
        };
        let reason = match offered {
            Some(o)
                if o.encoder_sha256.eq_ignore_ascii_case(&e.encoder_sha256)
                    && (o.views, o.size) == (e.views, e.size) =>
            {
                return Ok(())
            }
            Some(o) => format!(
                "{origin} gives those of encoder {} ({} views x {})",
                &o.encoder_sha256[..12.min(o.encoder_sha256.len())],
                o.views,
                o.size
            ),
            None => format!("{origin} computes none"),
        };
        Err(ModelError::PolicyEmbeddingSource {
            policy: self.manifest.clone(),
            encoder: e.encoder_sha256[..12.min(e.encoder_sha256.len())].to_string(),
            views: e.views,
            size: e.size,
            reason,
        })
    }
}

/// A policy graph `state f32 [N, state_size] -> action f32 [N, action_size]`.
pub struct PolicyModel {
    session: Session,
    provider: Provider,
    label: PathBuf,
    input: String,
    output: String,
    state_size: usize,
    action_size: usize,
    action_repeat: u32,
    /// Per env index: the action being held and how many more steps it is held.
    held: Vec<Option<Held>>,
    buf: Vec<f32>,
}

struct Held {
    action: Vec<f32>,
    left: u32,
}

impl PolicyModel {
    /// Builds a policy from ONNX bytes. The graph must take exactly one f32 input of shape `[N, state_size]` and
    /// return an f32 output of shape `[N, action_size]` (the output named `action`, or else the first one). A
    /// graph that declares its inputs in its metadata ([`PolicyInputs`]) is refused: it reads by name, so it
    /// must be bound to its source ([`Self::bind_bytes`]).
    pub fn from_bytes(
        bytes: &[u8],
        label: &str,
        state_size: usize,
        action_size: usize,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
    ) -> Result<Self, ModelError> {
        let label = PathBuf::from(label);
        let (session, provider) = runtime.session_from_bytes(bytes, &label, opts)?;
        let inputs = PolicyInputs::from_session(&session, &label)?;
        if inputs.is_declared() {
            return Err(ModelError::PolicyMetadata {
                path: label,
                key: "stagewise.*".into(),
                reason: "the graph declares its inputs (state fields by name, frames or embeddings): it must \
                         be bound to its source's fields and cameras (PolicyModel::bind_bytes), not read a state \
                         vector as it is"
                    .into(),
            });
        }
        Self::from_session(session, provider, label, state_size, action_size)
    }

    /// Checks an opened graph against the input width and the action size, and reads its action repeat.
    fn from_session(
        session: Session,
        provider: Provider,
        label: PathBuf,
        state_size: usize,
        action_size: usize,
    ) -> Result<Self, ModelError> {
        let inputs: Vec<String> = session
            .inputs()
            .iter()
            .map(|i| i.name().to_string())
            .collect();
        let outputs: Vec<String> = session
            .outputs()
            .iter()
            .map(|o| o.name().to_string())
            .collect();
        let check = GraphCheck {
            path: &label,
            session: &session,
            known_inputs: inputs.iter().map(|i| Some(i.as_str())).collect(),
        };
        // A policy's graph names are free: its one input is the state, its output `action` or else the first.
        let [input] = inputs.as_slice() else {
            return Err(check.err(
                "inputs",
                format!(
                    "a policy takes exactly one input (the state), this graph takes {inputs:?}"
                ),
            ));
        };
        check.input("inputs.state", input, &[None, Some(state_size)])?;
        let output = outputs
            .iter()
            .find(|o| *o == "action")
            .or_else(|| outputs.first())
            .ok_or_else(|| check.err("outputs.action", "the graph has no outputs".into()))?;
        check.output("outputs.action", output, &[&[None, Some(action_size)]])?;
        let declared = session
            .metadata()
            .ok()
            .and_then(|m| m.custom(ACTION_REPEAT_KEY));
        let action_repeat = match declared {
            None => 1,
            Some(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|k| (1..=MAX_ACTION_REPEAT).contains(k))
                .ok_or_else(|| {
                    check.err(
                        "metadata",
                        format!(
                            "{ACTION_REPEAT_KEY} is {v:?}: an integer in 1..={MAX_ACTION_REPEAT} expected"
                        ),
                    )
                })?,
        };
        let (input, output) = (input.clone(), output.clone());
        Ok(Self {
            session,
            provider,
            label,
            input,
            output,
            state_size,
            action_size,
            action_repeat,
            held: Vec::new(),
            buf: Vec::new(),
        })
    }

    /// Reads a manifest's graph and opens it; refuses a graph whose metadata disagrees with the manifest.
    fn open_manifest(
        m: &Manifest,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
    ) -> Result<(Session, Provider), ModelError> {
        let bytes = std::fs::read(&m.onnx).map_err(|source| ModelError::Io {
            path: m.onnx.clone(),
            source,
        })?;
        let (session, provider) = runtime.session_from_bytes(&bytes, &m.onnx, opts)?;
        PolicyInputs::from_session(&session, &m.onnx)?.check_manifest(m)?;
        Ok((session, provider))
    }

    /// Loads a `kind = "policy"` manifest and checks its graph against the given sizes.
    pub fn load(
        manifest_path: &Path,
        state_size: usize,
        action_size: usize,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
    ) -> Result<Self, ModelError> {
        let m = Manifest::load_kind(manifest_path, ModelKind::Policy)?;
        if m.state_size != state_size {
            return Err(ModelError::ManifestField {
                path: m.path.clone(),
                field: "state_size".into(),
                reason: format!(
                    "is {}, the environment's state has {state_size} values",
                    m.state_size
                ),
            });
        }
        let (session, provider) = Self::open_manifest(&m, runtime, opts)?;
        Self::from_session(session, provider, m.onnx.clone(), state_size, action_size)
    }

    /// Loads a `kind = "policy"` manifest for a source whose state fields are `source_names` (`source`
    /// describes it for errors): the manifest's `state_names` are bound by name ([`StateMap::bind_source`];
    /// `readable` limits which source fields may be read), and the graph is checked against its input: the
    /// manifest's `[embeddings]` or `[pixels]` (when it has them) then the bound state. A manifest without
    /// names reads the source's vector as it is. Feed the policy `[embeddings or frames, map.select(state)]`
    /// (check a source's cameras against `[pixels]` with [`BoundPolicy::check_views`]). A graph whose metadata
    /// declares other inputs than the manifest is refused ([`PolicyInputs::check_manifest`]).
    pub fn load_bound(
        manifest_path: &Path,
        source: &str,
        source_names: &[String],
        readable: Option<&[String]>,
        action_size: usize,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
    ) -> Result<BoundPolicy, ModelError> {
        let m = Manifest::load_kind(manifest_path, ModelKind::Policy)?;
        let state_map = StateMap::bind_source(&m, source, source_names, readable)?;
        let (session, provider) = Self::open_manifest(&m, runtime, opts)?;
        let inputs = PolicyInputs {
            state_names: m.state_names.clone(),
            pixels: m.pixels,
            embeddings: m.embeddings,
        };
        let explain = |reason: String| ModelError::ManifestField {
            path: m.path.clone(),
            field: "pixels".into(),
            reason,
        };
        Self::bound(
            session,
            provider,
            m.onnx,
            inputs,
            state_map,
            action_size,
            m.path.clone(),
            explain,
        )
    }

    /// Builds a policy from ONNX bytes (a learner's push, a bare `.onnx` file; `label` names it in errors) for a
    /// source whose state fields are `source_names` (`source` describes it). A graph whose metadata declares its
    /// inputs ([`PolicyInputs`]) is bound as [`Self::load_bound`] binds a manifest's: its `state_names` by name
    /// (`readable` limits which source fields may be read; none named: the whole state), its frames or
    /// embeddings before them (check the source's cameras with [`BoundPolicy::check_views`], and the run's
    /// reward model against [`BoundPolicy::embeddings`]). A graph that declares none reads the source's whole
    /// state vector as it is.
    #[allow(clippy::too_many_arguments)]
    pub fn bind_bytes(
        bytes: &[u8],
        label: &str,
        source: &str,
        source_names: &[String],
        readable: Option<&[String]>,
        action_size: usize,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
    ) -> Result<BoundPolicy, ModelError> {
        let label = PathBuf::from(label);
        let (session, provider) = runtime.session_from_bytes(bytes, &label, opts)?;
        let inputs = PolicyInputs::from_session(&session, &label)?;
        let state_map = if inputs.is_declared() {
            StateMap::bind_fields(
                &label,
                inputs.state_names.as_deref(),
                source_names.len(),
                source,
                source_names,
                readable,
            )?
        } else {
            StateMap::identity(source_names.len())
        };
        let explain = |reason: String| ModelError::PolicyMetadata {
            path: label.clone(),
            key: PIXELS_KEY.into(),
            reason,
        };
        Self::bound(
            session,
            provider,
            label.clone(),
            inputs,
            state_map,
            action_size,
            label.clone(),
            explain,
        )
    }

    /// Checks an opened graph against its declared inputs and bound state (`graph` names it, `origin` is the
    /// manifest or label a [`BoundPolicy`] keeps); a pixel policy's width mismatch is explained by `explain`.
    #[allow(clippy::too_many_arguments)]
    fn bound(
        session: Session,
        provider: Provider,
        graph: PathBuf,
        inputs: PolicyInputs,
        state_map: StateMap,
        action_size: usize,
        origin: PathBuf,
        explain: impl FnOnce(String) -> ModelError,
    ) -> Result<BoundPolicy, ModelError> {
        let width = match &inputs.pixels {
            Some(p) => p.row_len(state_map.model_len()),
            None => inputs.before_state() + state_map.model_len(),
        };
        let model = Self::from_session(session, provider, graph, width, action_size).map_err(
            |e| match (e, &inputs.pixels) {
                // The graph's input width follows from the pixels: say how, where they are declared.
                (ModelError::GraphMismatch { field, reason, path }, Some(p))
                    if field == "inputs.state" =>
                {
                    explain(format!(
                        "the policy's input is ({} views x 3 x {} x {} frame values + {} state values){} = \
                         {width} values, but its graph {} disagrees: {reason}",
                        p.views.len(),
                        p.height,
                        p.width,
                        state_map.model_len(),
                        if p.remember_first {
                            " x 2 (remember_first: now, then the episode's first observation)"
                        } else {
                            ""
                        },
                        path.display()
                    ))
                }
                (e, _) => e,
            },
        )?;
        Ok(BoundPolicy {
            model,
            state_map,
            embeddings: inputs.embeddings,
            pixels: inputs.pixels,
            manifest: origin,
        })
    }

    pub fn provider(&self) -> Provider {
        self.provider
    }

    pub fn action_size(&self) -> usize {
        self.action_size
    }

    /// Control steps each action is held by [`Self::act_held`] (the graph's [`ACTION_REPEAT_KEY`]; 1 when it
    /// has none).
    pub fn action_repeat(&self) -> u32 {
        self.action_repeat
    }

    /// Env `env` starts an episode: its next [`Self::act_held`] chooses a new action.
    pub fn reset_env(&mut self, env: usize) {
        if let Some(h) = self.held.get_mut(env) {
            *h = None;
        }
    }

    /// One action per env (`envs[i]` is the env index of `states[i]`), each held for [`Self::action_repeat`]
    /// steps as the policy was trained: the graph runs, in one batch, only for the envs whose held action has
    /// run out (or that have none since [`Self::reset_env`]); the others repeat theirs. A bad state is refused
    /// when the graph would read it (`BadObservation`'s `env` is its position in `states`).
    pub fn act_held(
        &mut self,
        envs: &[usize],
        states: &[&[f32]],
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        assert_eq!(envs.len(), states.len(), "one env index per state");
        if let Some(&max) = envs.iter().max() {
            if self.held.len() <= max {
                self.held.resize_with(max + 1, || None);
            }
        }
        let due: Vec<usize> = (0..envs.len())
            .filter(|&i| self.held[envs[i]].as_ref().is_none_or(|h| h.left == 0))
            .collect();
        if !due.is_empty() {
            let batch: Vec<&[f32]> = due.iter().map(|&i| states[i]).collect();
            let fresh = self.act(&batch).map_err(|e| match e {
                ModelError::BadObservation { env, reason } => ModelError::BadObservation {
                    env: due[env],
                    reason,
                },
                e => e,
            })?;
            for (&i, action) in due.iter().zip(fresh) {
                self.held[envs[i]] = Some(Held {
                    action,
                    left: self.action_repeat,
                });
            }
        }
        Ok(envs
            .iter()
            .map(|&e| {
                let h = self.held[e].as_mut().expect("every env holds an action");
                h.left -= 1;
                h.action.clone()
            })
            .collect())
    }

    /// One action per state, in one batched run. Refuses wrong state sizes and non-finite states or actions.
    pub fn act(&mut self, states: &[&[f32]]) -> Result<Vec<Vec<f32>>, ModelError> {
        let n = states.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        self.buf.clear();
        for (env, s) in states.iter().enumerate() {
            if s.len() != self.state_size {
                return Err(ModelError::BadObservation {
                    env,
                    reason: format!(
                        "state has {} values, the policy takes {}",
                        s.len(),
                        self.state_size
                    ),
                });
            }
            if let Some(i) = s.iter().position(|x| !x.is_finite()) {
                return Err(ModelError::BadObservation {
                    env,
                    reason: format!("state[{i}] is {}", s[i]),
                });
            }
            self.buf.extend_from_slice(s);
        }
        let run_err = |source: ort::Error| ModelError::Run {
            path: self.label.clone(),
            source,
        };
        let input =
            TensorRef::from_array_view(([n, self.state_size], &self.buf[..])).map_err(run_err)?;
        let outputs = self
            .session
            .run(ort::inputs![self.input.clone() => input])
            .map_err(|source| ModelError::Run {
                path: self.label.clone(),
                source,
            })?;
        let bad = |reason: String| ModelError::BadOutput {
            path: self.label.clone(),
            tensor: self.output.clone(),
            reason,
        };
        let value = outputs
            .get(&self.output)
            .ok_or_else(|| bad("missing from the run's outputs".into()))?;
        let (_, data) =
            value
                .try_extract_tensor::<f32>()
                .map_err(|source| ModelError::OutputRead {
                    path: self.label.clone(),
                    tensor: self.output.clone(),
                    source,
                })?;
        if data.len() != n * self.action_size {
            return Err(bad(format!(
                "has {} values, expected {} ([{n}, {}])",
                data.len(),
                n * self.action_size,
                self.action_size
            )));
        }
        if let Some(i) = data.iter().position(|x| !x.is_finite()) {
            return Err(bad(format!(
                "env {}: value {} is not finite",
                i / self.action_size,
                data[i]
            )));
        }
        Ok(data
            .chunks_exact(self.action_size)
            .map(<[f32]>::to_vec)
            .collect())
    }
}
