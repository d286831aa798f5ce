//! Checking an ONNX graph's inputs and outputs against its manifest.

use crate::manifest::Manifest;
use crate::ModelError;
use ort::session::Session;
use ort::value::{Outlet, TensorElementType, ValueType};
use std::path::Path;

/// Checks a graph's tensors against what its manifest (or, for a policy, the env) implies: names, element
/// type, ranks and fixed sizes. Errors name the graph file and the manifest field.
pub(crate) struct GraphCheck<'a> {
    /// The graph's file (for errors).
    pub path: &'a Path,
    pub session: &'a Session,
    /// Input names the manifest gives; any other graph input is refused.
    pub known_inputs: Vec<Option<&'a str>>,
}

impl GraphCheck<'_> {
    pub fn err(&self, field: &str, reason: String) -> ModelError {
        ModelError::GraphMismatch {
            path: self.path.to_path_buf(),
            field: field.into(),
            reason,
        }
    }

    /// The shape of the float32 tensor `name` among the graph's inputs or outputs (`side`).
    fn shape_of(
        &self,
        field: &str,
        name: &str,
        outlets: &[Outlet],
        side: &str,
    ) -> Result<Vec<i64>, ModelError> {
        let outlet = outlets.iter().find(|o| o.name() == name).ok_or_else(|| {
            let names: Vec<&str> = outlets.iter().map(|o| o.name()).collect();
            self.err(
                field,
                format!("the graph has no {side} named `{name}` (its {side}s: {names:?})"),
            )
        })?;
        match outlet.dtype() {
            ValueType::Tensor {
                ty: TensorElementType::Float32,
                shape,
                ..
            } => Ok(shape.to_vec()),
            ValueType::Tensor { ty, .. } => Err(self.err(
                field,
                format!("tensor `{name}` is {ty:?}, expected float32"),
            )),
            other => Err(self.err(
                field,
                format!("`{name}` is {other:?}, expected a float32 tensor"),
            )),
        }
    }

    /// Checks one input's shape against `expected` (None = any size). Returns the fixed batch size, if any.
    pub fn input(
        &self,
        field: &str,
        name: &str,
        expected: &[Option<usize>],
    ) -> Result<Option<usize>, ModelError> {
        let shape = self.shape_of(field, name, self.session.inputs(), "input")?;
        self.match_shape(field, name, &shape, expected)?;
        Ok(shape.first().and_then(|&d| usize::try_from(d).ok()))
    }

    /// Checks one output against any of the allowed shapes.
    pub fn output(
        &self,
        field: &str,
        name: &str,
        allowed: &[&[Option<usize>]],
    ) -> Result<(), ModelError> {
        let shape = self.shape_of(field, name, self.session.outputs(), "output")?;
        let mut first_err = None;
        for expected in allowed {
            match self.match_shape(field, name, &shape, expected) {
                Ok(()) => return Ok(()),
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        Err(first_err.unwrap_or_else(|| self.err(field, "no allowed shape".into())))
    }

    fn match_shape(
        &self,
        field: &str,
        name: &str,
        shape: &[i64],
        expected: &[Option<usize>],
    ) -> Result<(), ModelError> {
        let show = |e: &[Option<usize>]| {
            e.iter()
                .map(|d| d.map_or("N".to_string(), |d| d.to_string()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if shape.len() != expected.len() {
            return Err(self.err(
                field,
                format!(
                    "tensor `{name}` has rank {} {shape:?}, expected rank {} [{}]",
                    shape.len(),
                    expected.len(),
                    show(expected)
                ),
            ));
        }
        for (axis, (&got, want)) in shape.iter().zip(expected).enumerate() {
            if let Some(want) = want {
                if got >= 0 && got as usize != *want {
                    return Err(self.err(
                        field,
                        format!(
                            "tensor `{name}` axis {axis} is {got}, expected {want} (shape [{}])",
                            show(expected)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The checks every stage-progress graph that produces the outputs shares (the single graph and the head
    /// of a two-part model): the manifest's state input, no unnamed inputs, and `stage_logits` `[N, K]` and
    /// `tau` `[N]`, `[N, 1]` or `[N, K]`.
    pub fn progress_state_and_outputs(&self, m: &Manifest, k: usize) -> Result<(), ModelError> {
        if let Some(state) = &m.inputs.state {
            self.input("inputs.state", state, &[None, Some(m.state_size)])?;
        }
        self.no_extra_inputs()?;
        self.output(
            "outputs.stage_logits",
            m.outputs.stage_logits.as_deref().unwrap_or_default(),
            &[&[None, Some(k)]],
        )?;
        self.output(
            "outputs.tau",
            m.outputs.tau.as_deref().unwrap_or_default(),
            &[&[None], &[None, Some(1)], &[None, Some(k)]],
        )
    }

    pub fn no_extra_inputs(&self) -> Result<(), ModelError> {
        for o in self.session.inputs() {
            if !self.known_inputs.contains(&Some(o.name())) {
                return Err(self.err(
                    "inputs",
                    format!(
                        "the graph takes input `{}`, which the manifest does not name",
                        o.name()
                    ),
                ));
            }
        }
        Ok(())
    }
}
