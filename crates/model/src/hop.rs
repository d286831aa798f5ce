//! Pairwise "hop" models (Robo-Dopamine-style): `H(s_p, s_q)` in [-1, 1], how far `s_q` moved toward the goal
//! from `s_p` relative to what was left (negative: back toward the start). Fuse the scores into a progress with
//! `stagewise_core::HopFusion`.
//!
//! Graph contract (`kind = "hop"`): `images` f32 `[N, views, 2, 3, H, W]` (frame 0 is `s_p`, frame 1 is `s_q`,
//! each normalised like a stage-progress model's frames), `state` f32 `[N, 2, state_size]` (when
//! `state_size > 0`), output `hop` f32 `[N]` or `[N, 1]`. The manifest's `frames` must be 2; its `stride` is
//! the gap, in control steps, of the pairs the fused incremental estimate takes (`H(s_{t-stride}, s_t)`).

use crate::graph::GraphCheck;
use crate::manifest::{Manifest, ModelKind};
use crate::preprocess::Normaliser;
use crate::runtime::{OrtRuntime, Provider, SessionOptions};
use crate::state::check_state;
use crate::state::StateMap;
use crate::ModelError;
use ort::session::Session;
use ort::value::TensorRef;
use stagewise_core::{HopConfig, HopError, HopFusion, Observation};
use std::path::Path;

/// A pairwise hop model. Owned by one thread (`Session::run` needs `&mut`).
pub struct HopModel {
    manifest: Manifest,
    session: Session,
    provider: Provider,
    normaliser: Normaliser,
    images: Vec<f32>,
    state: Vec<f32>,
    /// After [`HopModel::bind_state`]: how the model's state is taken from the source's.
    state_map: Option<StateMap>,
}

impl HopModel {
    /// Loads a `kind = "hop"` manifest and checks the graph's inputs and output against it (names, element
    /// type, ranks and the sizes the manifest fixes).
    pub fn load(
        manifest_path: &Path,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
    ) -> Result<Self, ModelError> {
        let manifest = Manifest::load_kind(manifest_path, ModelKind::Hop)?;
        let field = |field: &str, reason: String| ModelError::ManifestField {
            path: manifest.path.clone(),
            field: field.into(),
            reason,
        };
        let image = manifest
            .image
            .clone()
            .ok_or_else(|| field("image", "missing (a hop model takes images)".into()))?;
        if manifest.frames != 2 {
            return Err(field(
                "frames",
                format!("is {}: a hop model takes a pair (2)", manifest.frames),
            ));
        }
        if manifest.views.is_empty() {
            return Err(field("views", "a hop model needs at least one view".into()));
        }
        let images_name = manifest
            .inputs
            .images
            .clone()
            .ok_or_else(|| field("inputs.images", "missing".into()))?;
        let state_name = match (&manifest.inputs.state, manifest.state_size) {
            (_, 0) => None,
            (Some(n), _) => Some(n.clone()),
            (None, _) => return Err(field("inputs.state", "missing".into())),
        };
        let (session, provider) = runtime.session(&manifest.onnx, opts)?;
        let check = GraphCheck {
            path: &manifest.onnx,
            session: &session,
            known_inputs: vec![Some(images_name.as_str()), state_name.as_deref()],
        };
        let (h, w) = (image.height as usize, image.width as usize);
        let views = manifest.views.len();
        check.input(
            "inputs.images",
            &images_name,
            &[None, Some(views), Some(2), Some(3), Some(h), Some(w)],
        )?;
        if let Some(state) = &state_name {
            check.input(
                "inputs.state",
                state,
                &[None, Some(2), Some(manifest.state_size)],
            )?;
        }
        check.no_extra_inputs()?;
        check.output(
            "outputs.hop",
            manifest.outputs.hop.as_deref().unwrap_or_default(),
            &[&[None], &[None, Some(1)]],
        )?;
        Ok(Self {
            normaliser: Normaliser::new(&image),
            manifest,
            session,
            provider,
            images: Vec::new(),
            state: Vec::new(),
            state_map: None,
        })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// Binds the model's state fields by name to a source whose state fields are `source_names` (as
    /// [`crate::RewardModel::bind_state`]): afterwards observations carry the source's whole state and the
    /// model's fields are copied, in its order, into the `[N, 2, S]` state input.
    pub fn bind_state(&mut self, source_names: &[String]) -> Result<(), ModelError> {
        let map = StateMap::bind(&self.manifest, source_names)?;
        self.set_state_map(map)
    }

    /// Like [`Self::bind_state`] with a map built by the caller. Refuses a map for another state size.
    pub fn set_state_map(&mut self, map: StateMap) -> Result<(), ModelError> {
        map.check_model_len(self.manifest.state_size)
            .map_err(|reason| ModelError::BadInput {
                tensor: self
                    .manifest
                    .inputs
                    .state
                    .clone()
                    .unwrap_or_else(|| "state".into()),
                reason,
            })?;
        self.state_map = Some(map);
        Ok(())
    }

    /// The binding of [`Self::bind_state`], if any.
    pub fn state_map(&self) -> Option<&StateMap> {
        self.state_map.as_ref()
    }

    /// Scores pairs `(s_p, s_q)` in one batched run; returns `H(s_p, s_q)` per pair, clamped to [-1, 1]. Views
    /// are matched to the manifest by name. NaN outputs are refused.
    pub fn score_pairs(
        &mut self,
        pairs: &[(&Observation, &Observation)],
    ) -> Result<Vec<f32>, ModelError> {
        let n = pairs.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let views = self.manifest.views.len();
        let fl = self.normaliser.frame_len();
        let s = self.manifest.state_size;
        self.images.resize(n * views * 2 * fl, 0.0);
        self.state.resize(n * 2 * s, 0.0);
        for (row, (p, q)) in pairs.iter().enumerate() {
            for (member, o) in [p, q].into_iter().enumerate() {
                let bad = |reason: String| ModelError::BadObservation { env: row, reason };
                check_state(&self.state_map, s, &o.state).map_err(bad)?;
                let at = (row * 2 + member) * s;
                let dst = &mut self.state[at..at + s];
                match &self.state_map {
                    Some(map) => map.select(&o.state, dst).map_err(bad)?,
                    None => dst.copy_from_slice(&o.state),
                }
                for (v, name) in self.manifest.views.iter().enumerate() {
                    let view = o
                        .views
                        .iter()
                        .find(|x| &x.name == name)
                        .ok_or_else(|| bad(format!("has no view named {name:?}")))?;
                    let at = ((row * views + v) * 2 + member) * fl;
                    self.normaliser
                        .write_chw(&view.rgb, &mut self.images[at..at + fl])
                        .map_err(bad)?;
                }
            }
        }
        let m = &self.manifest;
        let img = m
            .image
            .as_ref()
            .map(|i| (i.height as usize, i.width as usize))
            .unwrap_or_default();
        let run_err = |source: ort::Error| ModelError::Run {
            path: m.onnx.clone(),
            source,
        };
        let images = TensorRef::from_array_view((
            [n, views, 2, 3, img.0, img.1],
            &self.images[..n * views * 2 * fl],
        ))
        .map_err(run_err)?;
        let images_name = m.inputs.images.clone().unwrap_or_default();
        let hop_name = m.outputs.hop.clone().unwrap_or_default();
        let outputs = match (&m.inputs.state, s) {
            (Some(state_name), s) if s > 0 => {
                let state = TensorRef::from_array_view(([n, 2, s], &self.state[..n * 2 * s]))
                    .map_err(run_err)?;
                self.session
                    .run(ort::inputs![images_name => images, state_name.clone() => state])
            }
            _ => self.session.run(ort::inputs![images_name => images]),
        }
        .map_err(run_err)?;
        let bad_out = |reason: String| ModelError::BadOutput {
            path: m.onnx.clone(),
            tensor: hop_name.clone(),
            reason,
        };
        let v = outputs
            .get(hop_name.as_str())
            .ok_or_else(|| bad_out("missing from the run's outputs".into()))?;
        let (_, data) = v
            .try_extract_tensor::<f32>()
            .map_err(|source| ModelError::OutputRead {
                path: m.onnx.clone(),
                tensor: hop_name.clone(),
                source,
            })?;
        if data.len() != n {
            return Err(bad_out(format!("has {} values for {n} pairs", data.len())));
        }
        if let Some(i) = data.iter().position(|x| !x.is_finite()) {
            return Err(bad_out(format!("value {i} is {}", data[i])));
        }
        Ok(data.iter().map(|x| x.clamp(-1.0, 1.0)).collect())
    }

    /// Fused progress of one episode through core's `HopFusion` (consistency weight off), scoring the pairs
    /// (frame `stride` steps back, frame), (first frame, frame) and (`goal`, frame) of every step in batches of
    /// 64 steps; `stride` is the manifest's (the gap of the incremental estimate's pairs). `goal` is a
    /// reference goal observation (e.g. the last frame of a successful episode).
    pub fn fused_progress(
        &mut self,
        ep: &[Observation],
        goal: &Observation,
    ) -> Result<Vec<f64>, ModelError> {
        let Some(first) = ep.first() else {
            return Ok(Vec::new());
        };
        let (path, tensor) = (
            self.manifest.onnx.clone(),
            self.manifest.outputs.hop.clone().unwrap_or_default(),
        );
        let fusion_err = |source: HopError| ModelError::HopFusion {
            path: path.clone(),
            tensor: tensor.clone(),
            source,
        };
        let gap = self.manifest.stride;
        let mut fusion = HopFusion::with_gap(
            HopConfig {
                consistency_alpha: None,
                ..HopConfig::default()
            },
            gap,
        )
        .map_err(fusion_err)?;
        let mut phi = Vec::with_capacity(ep.len());
        let chunk = 64;
        for start in (0..ep.len()).step_by(chunk) {
            let end = (start + chunk).min(ep.len());
            let mut pairs: Vec<(&Observation, &Observation)> =
                Vec::with_capacity(3 * (end - start));
            for t in start..end {
                pairs.push((&ep[t.saturating_sub(gap)], &ep[t]));
                pairs.push((first, &ep[t]));
                pairs.push((goal, &ep[t]));
            }
            let h = self.score_pairs(&pairs)?;
            for t in 0..end - start {
                let e = fusion
                    .step(
                        f64::from(h[3 * t]),
                        f64::from(h[3 * t + 1]),
                        f64::from(h[3 * t + 2]),
                    )
                    .map_err(fusion_err)?;
                phi.push(e.phi);
            }
        }
        Ok(phi)
    }
}
