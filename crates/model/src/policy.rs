//! ONNX policies: state in, action out, batched over environments. Policies arrive as bytes from a learner
//! (hot-swap) or as a manifest on disk; either way the graph is checked against the environment's state and
//! action sizes before it may act.

use crate::graph::GraphCheck;
use crate::manifest::{Manifest, ModelKind, PolicyEmbeddings, PolicyPixels};
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

/// A policy loaded for a source ([`PolicyModel::load_bound`]): the graph, how its state fields are taken from
/// the source's state, and what it reads before them: the reward-model embeddings or the camera frames (if any).
pub struct BoundPolicy {
    pub model: PolicyModel,
    pub state_map: StateMap,
    pub embeddings: Option<PolicyEmbeddings>,
    pub pixels: Option<PolicyPixels>,
    /// The manifest it was loaded from (for errors).
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
    /// return an f32 output of shape `[N, action_size]` (the output named `action`, or else the first one).
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
        let bytes = std::fs::read(&m.onnx).map_err(|source| ModelError::Io {
            path: m.onnx.clone(),
            source,
        })?;
        Self::from_bytes(
            &bytes,
            &m.onnx.display().to_string(),
            state_size,
            action_size,
            runtime,
            opts,
        )
    }

    /// Loads a `kind = "policy"` manifest for a source whose state fields are `source_names` (`source`
    /// describes it for errors): the manifest's `state_names` are bound by name ([`StateMap::bind_source`];
    /// `readable` limits which source fields may be read), and the graph is checked against its input: the
    /// manifest's `[embeddings]` or `[pixels]` (when it has them) then the bound state. A manifest without
    /// names reads the source's vector as it is. Feed the policy `[embeddings or frames, map.select(state)]`
    /// (check a source's cameras against `[pixels]` with [`BoundPolicy::check_views`]).
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
        let extra = m.embeddings.as_ref().map_or(0, PolicyEmbeddings::len)
            + m.pixels.as_ref().map_or(0, PolicyPixels::len);
        let bytes = std::fs::read(&m.onnx).map_err(|source| ModelError::Io {
            path: m.onnx.clone(),
            source,
        })?;
        let width = extra + state_map.model_len();
        let model = Self::from_bytes(
            &bytes,
            &m.onnx.display().to_string(),
            width,
            action_size,
            runtime,
            opts,
        )
        .map_err(|e| match (e, &m.pixels) {
            // The graph's input width follows from [pixels]: say how, on the manifest that says so.
            (ModelError::GraphMismatch { field, reason, path }, Some(p))
                if field == "inputs.state" =>
            {
                ModelError::ManifestField {
                    path: m.path.clone(),
                    field: "pixels".into(),
                    reason: format!(
                        "the policy's input is {} views x 3 x {} x {} frame values + {} state values = {width} \
                         values, but its graph {} disagrees: {reason}",
                        p.views.len(),
                        p.height,
                        p.width,
                        state_map.model_len(),
                        path.display()
                    ),
                }
            }
            (e, _) => e,
        })?;
        Ok(BoundPolicy {
            model,
            state_map,
            embeddings: m.embeddings,
            pixels: m.pixels,
            manifest: m.path,
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
