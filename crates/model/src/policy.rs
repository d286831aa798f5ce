//! ONNX policies: state in, action out, batched over environments. Policies arrive as bytes from a learner
//! (hot-swap) or as a manifest on disk; either way the graph is checked against the environment's state and
//! action sizes before it may act.

use crate::manifest::{Manifest, ModelKind};
use crate::runtime::{OrtRuntime, Provider, SessionOptions};
use crate::ModelError;
use ort::session::Session;
use ort::value::{TensorElementType, TensorRef, ValueType};
use std::path::{Path, PathBuf};

/// A policy graph `state f32 [N, state_size] -> action f32 [N, action_size]`.
pub struct PolicyModel {
    session: Session,
    provider: Provider,
    label: PathBuf,
    input: String,
    output: String,
    state_size: usize,
    action_size: usize,
    buf: Vec<f32>,
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
        let mismatch = |field: &str, reason: String| ModelError::GraphMismatch {
            path: label.clone(),
            field: field.to_string(),
            reason,
        };
        let inputs = session.inputs();
        if inputs.len() != 1 {
            let names: Vec<&str> = inputs.iter().map(|i| i.name()).collect();
            return Err(mismatch(
                "inputs",
                format!("a policy takes exactly one input (the state), this graph takes {names:?}"),
            ));
        }
        let input = inputs[0].name().to_string();
        check_2d(inputs[0].dtype(), state_size)
            .map_err(|r| mismatch("inputs.state", format!("`{input}`: {r}")))?;
        let outputs = session.outputs();
        let out = outputs
            .iter()
            .find(|o| o.name() == "action")
            .or_else(|| outputs.first())
            .ok_or_else(|| mismatch("outputs.action", "the graph has no outputs".into()))?;
        let output = out.name().to_string();
        check_2d(out.dtype(), action_size)
            .map_err(|r| mismatch("outputs.action", format!("`{output}`: {r}")))?;
        Ok(Self {
            session,
            provider,
            label,
            input,
            output,
            state_size,
            action_size,
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
        let m = Manifest::load_kind(manifest_path, ModelKind::Policy, "a policy")?;
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

    pub fn provider(&self) -> Provider {
        self.provider
    }

    pub fn action_size(&self) -> usize {
        self.action_size
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
        let run_err = |e: ort::Error| ModelError::Run {
            path: self.label.clone(),
            reason: e.to_string(),
        };
        let input =
            TensorRef::from_array_view(([n, self.state_size], &self.buf[..])).map_err(run_err)?;
        let outputs = self
            .session
            .run(ort::inputs![self.input.clone() => input])
            .map_err(|e| ModelError::Run {
                path: self.label.clone(),
                reason: e.to_string(),
            })?;
        let bad = |reason: String| ModelError::BadOutput {
            path: self.label.clone(),
            tensor: self.output.clone(),
            reason,
        };
        let value = outputs
            .get(&self.output)
            .ok_or_else(|| bad("missing from the run's outputs".into()))?;
        let (_, data) = value
            .try_extract_tensor::<f32>()
            .map_err(|e| bad(e.to_string()))?;
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

fn check_2d(ty: &ValueType, size: usize) -> Result<(), String> {
    match ty {
        ValueType::Tensor {
            ty: TensorElementType::Float32,
            shape,
            ..
        } => {
            if shape.len() != 2 {
                return Err(format!(
                    "has rank {} {:?}, expected [N, {size}]",
                    shape.len(),
                    shape.to_vec()
                ));
            }
            if shape[1] >= 0 && shape[1] as usize != size {
                return Err(format!("axis 1 is {}, expected {size}", shape[1]));
            }
            Ok(())
        }
        other => Err(format!(
            "is {other:?}, expected a float32 tensor [N, {size}]"
        )),
    }
}
