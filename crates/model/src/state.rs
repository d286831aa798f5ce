//! Building a model's state vector by name (DESIGN.md "Progress": a reward model sees camera frames plus
//! proprioception, and the manifest names the state fields it reads).
//!
//! A source (a simulator's or robot's `EnvSpec.state`, a dataset's `observation.state`) has a state vector with
//! named fields. [`StateMap::bind`] finds each field the manifest's `state_names` lists in the source's names,
//! once, before anything runs; a field the source lacks is refused with the field named and the source's fields
//! listed. Per step, [`StateMap::select`] copies the selected values, in the model's order, into the input
//! tensor (no allocation). A manifest without `state_names` binds only to a source of exactly `state_size`
//! fields (the identity mapping).
//!
//! A source can hold fields a reward model must not read (a robot's observation carries object poses from the
//! scene channel for logging and evaluation): [`StateMap::bind_source`] takes the names a model may read.

use crate::manifest::Manifest;
use crate::ModelError;

/// For each state field of a model, where it is in a source's state vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMap {
    /// `indices[i]` is the source index of the model's field `i`.
    indices: Vec<usize>,
    source_len: usize,
}

impl StateMap {
    /// The model reads the source's state as it is (`len` values, same order).
    pub fn identity(len: usize) -> Self {
        Self {
            indices: (0..len).collect(),
            source_len: len,
        }
    }

    /// The model reads none of the source's `source_len` fields (a model without a state input).
    pub fn empty(source_len: usize) -> Self {
        Self {
            indices: Vec::new(),
            source_len,
        }
    }

    /// Binds `manifest`'s state fields to a source whose state fields are `source_names` (in the order of its
    /// state vector). See [`Self::bind_source`].
    pub fn bind(manifest: &Manifest, source_names: &[String]) -> Result<Self, ModelError> {
        Self::bind_source(manifest, "the state source", source_names, None)
    }

    /// Binds `manifest`'s state fields to the source `source` (a description for errors, e.g. `env pick-place`)
    /// whose state fields are `source_names`. With `readable`, only those of the source's fields may be read
    /// by the model (the others are refused as if the source lacked them, and the error lists `readable`).
    ///
    /// - With `state_names`: every name must be a source field (the first one of that name), else
    ///   [`ModelError::StateFieldMissing`] naming the field and listing the source's (readable) fields.
    /// - Without: the model reads the source's vector as it is, so the source must have exactly `state_size`
    ///   fields, all readable, else [`ModelError::StateSize`] with both sizes. A model without a state input
    ///   (`state_size = 0`) binds to any source.
    pub fn bind_source(
        manifest: &Manifest,
        source: &str,
        source_names: &[String],
        readable: Option<&[String]>,
    ) -> Result<Self, ModelError> {
        Self::bind_fields(
            &manifest.path,
            manifest.state_names(),
            manifest.state_size,
            source,
            source_names,
            readable,
        )
    }

    /// [`Self::bind_source`] for a model (`model`, for errors) that names its state fields `names` (None: it
    /// reads a state of `state_size` values as it is), wherever it declares them (a manifest, or a policy
    /// graph's metadata: [`crate::policy::PolicyInputs`]).
    pub fn bind_fields(
        model: &std::path::Path,
        names: Option<&[String]>,
        state_size: usize,
        source: &str,
        source_names: &[String],
        readable: Option<&[String]>,
    ) -> Result<Self, ModelError> {
        let may_read = |name: &str| readable.is_none_or(|r| r.iter().any(|n| n == name));
        let offered: Vec<&String> = source_names.iter().filter(|n| may_read(n)).collect();
        let has = || {
            offered
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(names) = names else {
            let n = state_size;
            if n == 0 {
                return Ok(Self::empty(source_names.len()));
            }
            if n != source_names.len() || offered.len() != source_names.len() {
                return Err(ModelError::StateSize {
                    model: model.to_path_buf(),
                    state_size: n,
                    origin: source.to_string(),
                    source_len: offered.len(),
                    has: has(),
                });
            }
            return Ok(Self::identity(n));
        };
        let indices = names
            .iter()
            .map(|name| {
                source_names
                    .iter()
                    .position(|n| n == name)
                    .filter(|_| may_read(name))
                    .ok_or_else(|| ModelError::StateFieldMissing {
                        model: model.to_path_buf(),
                        field: name.clone(),
                        origin: source.to_string(),
                        has: has(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            indices,
            source_len: source_names.len(),
        })
    }

    /// Source index of each model field, in the model's order.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }

    /// Values of the model's state.
    pub fn model_len(&self) -> usize {
        self.indices.len()
    }

    /// Values of the source's state vector.
    pub fn source_len(&self) -> usize {
        self.source_len
    }

    /// True when the model reads the source's vector as it is.
    pub fn is_identity(&self) -> bool {
        self.source_len == self.indices.len()
            && self.indices.iter().enumerate().all(|(i, &j)| i == j)
    }

    /// Copies the model's fields of `source` (the source's whole state) into `out` (the model's state), in the
    /// model's order. Refuses (with the sizes) a `source` or `out` of the wrong length.
    pub fn select(&self, source: &[f32], out: &mut [f32]) -> Result<(), String> {
        if source.len() != self.source_len {
            return Err(format!(
                "state has {} values, the source's state has {}",
                source.len(),
                self.source_len
            ));
        }
        if out.len() != self.indices.len() {
            return Err(format!(
                "{} values for a model state of {}",
                out.len(),
                self.indices.len()
            ));
        }
        for (o, &i) in out.iter_mut().zip(&self.indices) {
            *o = source[i];
        }
        Ok(())
    }

    /// Refuses (with both sizes) a map that selects other than `state_size` fields: a map made for another model.
    pub fn check_model_len(&self, state_size: usize) -> Result<(), String> {
        if self.indices.len() == state_size {
            return Ok(());
        }
        Err(format!(
            "the state map selects {} fields, the model takes {state_size}",
            self.indices.len()
        ))
    }

    /// The first value the model reads that is not finite: `(source index, value)`.
    pub fn first_non_finite(&self, source: &[f32]) -> Option<(usize, f32)> {
        self.indices
            .iter()
            .filter_map(|&i| source.get(i).map(|&x| (i, x)))
            .find(|(_, x)| !x.is_finite())
    }
}

/// Checks one observation's state against the model (`map` None) or the bound source: its size, and that the
/// values the model reads are finite.
pub(crate) fn check_state(
    map: &Option<StateMap>,
    state_size: usize,
    state: &[f32],
) -> Result<(), String> {
    let (want, of) = match map {
        Some(m) => (m.source_len(), "the source's state has"),
        None => (state_size, "the model takes"),
    };
    if state.len() != want {
        return Err(format!("state has {} values, {of} {want}", state.len()));
    }
    let bad = match map {
        Some(m) => m.first_non_finite(state),
        None => state
            .iter()
            .position(|x| !x.is_finite())
            .map(|i| (i, state[i])),
    };
    match bad {
        Some((i, x)) => Err(format!("state[{i}] is {x}: state must be finite")),
        None => Ok(()),
    }
}

/// The model's fields of `n` rows of source state (`[n, map.source_len()]`) into `out` (`[n, map.model_len()]`).
pub(crate) fn select_rows(
    map: &StateMap,
    source: &[f32],
    n: usize,
    out: &mut Vec<f32>,
) -> Result<(), String> {
    let (src, dst) = (map.source_len(), map.model_len());
    if source.len() != n * src {
        return Err(format!(
            "has {} values, expected {} ({n} rows of the source's {src})",
            source.len(),
            n * src
        ));
    }
    out.resize(n * dst, 0.0);
    if dst == 0 || src == 0 {
        return Ok(());
    }
    for (row, o) in source.chunks_exact(src).zip(out.chunks_exact_mut(dst)) {
        map.select(row, o)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn manifest(state: &str) -> Manifest {
        let text = format!(
            r#"
kind = "stage_progress"
onnx = "m.onnx"
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
views = ["front"]
{state}
[image]
width = 8
height = 8
[inputs]
images = "images"
state = "state"
[outputs]
stage_logits = "stage_logits"
tau = "tau"
[stages]
names = ["a"]
proportions = [1.0]
"#
        );
        Manifest::parse(&text, Path::new("m.toml")).unwrap()
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fields_are_selected_by_name_in_the_models_order() {
        let m = manifest(r#"state_names = ["ee_z", "ee_x", "gripper_width"]"#);
        let src = names(&[
            "block0_x",
            "ee_x",
            "ee_y",
            "ee_z",
            "gripper_width",
            "grasped",
        ]);
        let map = StateMap::bind(&m, &src).unwrap();
        assert_eq!(map.indices(), &[3, 1, 4]);
        assert_eq!((map.model_len(), map.source_len()), (3, 6));
        assert!(!map.is_identity());
        let mut out = [0.0; 3];
        map.select(&[9.0, 1.0, 2.0, 3.0, 4.0, 5.0], &mut out)
            .unwrap();
        assert_eq!(out, [3.0, 1.0, 4.0]);
        assert!(map.select(&[1.0; 5], &mut out).unwrap_err().contains('5'));
        // Only the fields read count as non-finite.
        assert_eq!(
            map.first_non_finite(&[f32::NAN, 1.0, 2.0, 3.0, 4.0, 5.0]),
            None
        );
        assert_eq!(
            map.first_non_finite(&[0.0, 1.0, 2.0, f32::INFINITY, 4.0, 5.0]),
            Some((3, f32::INFINITY))
        );
    }

    #[test]
    fn a_field_the_source_lacks_is_refused_naming_it_and_the_sources_fields() {
        let m = manifest(r#"state_names = ["ee_x", "block0_x"]"#);
        let e = StateMap::bind(&m, &names(&["ee_x", "ee_y"])).unwrap_err();
        assert!(
            matches!(&e, ModelError::StateFieldMissing { field, .. } if field == "block0_x"),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("m.toml")
                && msg.contains("\"block0_x\"")
                && msg.contains("the state source")
                && msg.contains("(it has: ee_x, ee_y)"),
            "{msg}"
        );
    }

    #[test]
    fn fields_outside_readable_are_refused_though_the_source_has_them() {
        let m = manifest(r#"state_names = ["ee_x", "block0_x"]"#);
        let src = names(&["ee_x", "gripper_width", "block0_x"]);
        let readable = names(&["ee_x", "gripper_width"]);
        let e = StateMap::bind_source(&m, "robot udp://x", &src, Some(&readable)).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("\"block0_x\"")
                && msg.contains("robot udp://x")
                && msg.contains("(it has: ee_x, gripper_width)"),
            "{msg}"
        );
        // Readable fields bind to their place in the whole vector.
        let m = manifest(r#"state_names = ["gripper_width"]"#);
        let map = StateMap::bind_source(&m, "robot", &src, Some(&readable)).unwrap();
        assert_eq!((map.indices(), map.source_len()), (&[1][..], 3));
    }

    #[test]
    fn a_manifest_without_names_binds_only_at_its_size() {
        let m = manifest("state_size = 3");
        let map = StateMap::bind(&m, &names(&["a", "b", "c"])).unwrap();
        assert!(map.is_identity());
        let e = StateMap::bind(&m, &names(&["a", "b", "c", "d"])).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(
                e,
                ModelError::StateSize {
                    state_size: 3,
                    source_len: 4,
                    ..
                }
            ) && msg.contains("state_names")
                && msg.contains('3')
                && msg.contains('4'),
            "{msg}"
        );
        // A source with fields the model may not read cannot be read as it is.
        let src = names(&["a", "b", "c"]);
        let e = StateMap::bind_source(&m, "robot", &src, Some(&names(&["a", "b"]))).unwrap_err();
        assert!(
            matches!(e, ModelError::StateSize { source_len: 2, .. }),
            "{e}"
        );
    }
}
