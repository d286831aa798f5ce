//! The two-part fast path of a stage-progress model (DESIGN.md "Two-part models are the fast path"): a per-frame
//! encoder and a head over windows of embeddings, from the manifest's `[parts]`. A frame is encoded once however
//! many windows it is in (a window of F frames re-encodes F - 1 frames of the previous one in the single graph).
//! The offline episode scorer ([`crate::scoring`]) uses it (encode every needed frame of an episode in batches,
//! then run the head on the windows), and so does [`crate::RewardModel`] step by step whenever the manifest has
//! `[parts]` (each step encodes only the new frame of each view and keeps the embeddings in the per-env window
//! ring). A manifest whose `[parts]` also names a `step` graph (the encoder and the head composed into one graph
//! by `python -m stagewise.training export-parts`) gives the actor one `Session::run` per step:
//! [`TwoPartModel::run_step`] takes the new frames and the window's cached embeddings, returns the outputs and the
//! new embeddings.

use crate::graph::GraphCheck;
use crate::manifest::{
    Manifest, ModelKind, Parts, ENCODER_INPUT, ENCODER_OUTPUT, HEAD_INPUT, STEP_CACHED,
    STEP_EMBEDDING, STEP_FRAMES,
};
use crate::preprocess::Normaliser;
use crate::runtime::{OrtRuntime, Provider, SessionOptions};
use crate::stage_progress::{progress_from_outputs, progress_spec};
use crate::state::select_rows;
use crate::state::StateMap;
use crate::ModelError;
use ort::memory::Allocator;
use ort::session::{IoBinding, Session, SessionOutputs};
use ort::value::{Tensor, TensorElementType, TensorRef, ValueType};
use stagewise_core::{Progress, StageProportions};
use std::path::Path;

/// Encoder and head sessions of one model. Owned by one thread (`Session::run` needs `&mut`).
pub struct TwoPartModel {
    manifest: Manifest,
    parts: Parts,
    encoder: Session,
    head: Session,
    provider: Provider,
    proportions: StageProportions,
    normaliser: Normaliser,
    /// After [`TwoPartModel::bind_state`]: how the model's state is taken from the source's rows.
    state_map: Option<StateMap>,
    /// The model's fields of the bound source's rows, for the head.
    selected: Vec<f32>,
    /// Fixed batch sizes of the encoder (frames per run) and the head (windows per run), when the graphs fix
    /// them.
    encoder_batch: Option<usize>,
    head_batch: Option<usize>,
    /// The fused step graph, when the manifest names one.
    step: Option<StepGraph>,
}

/// The fused step graph's session and its inputs and outputs for the last batch size.
struct StepGraph {
    session: Session,
    batch: Option<usize>,
    bound: Option<Box<BoundStep>>,
}

/// The step graph's input and output tensors for `n` envs, allocated once and bound to the graph (an
/// `IoBinding`): a step writes its inputs into them in place ([`TwoPartModel::step_inputs`]) and every run of
/// that size reuses them, so a run creates no input value and ONNX Runtime allocates no output.
struct BoundStep {
    n: usize,
    binding: IoBinding,
    frames: Tensor<f32>,
    cached: Tensor<f32>,
    state: Option<Tensor<f32>>,
}

/// Where a step writes its inputs for [`TwoPartModel::run_bound_step`]: `frames` `[n, views, 3, H, W]` (each
/// env's new frame of every view, normalised), `cached` `[n, views, frames - 1, E]` (the embeddings of each env's
/// older window frames, oldest first) and `state` `[n, state_size]` (empty when the model takes no state).
pub struct StepInputs<'a> {
    pub frames: &'a mut [f32],
    pub cached: &'a mut [f32],
    pub state: &'a mut [f32],
}

impl TwoPartModel {
    /// Loads the encoder and head named by the manifest's `[parts]` and checks both graphs against it.
    pub fn load(
        manifest_path: &Path,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
    ) -> Result<Self, ModelError> {
        // `from_manifest` checks the kind.
        Self::from_manifest(Manifest::load(manifest_path)?, runtime, opts)
    }

    /// Like [`Self::load`] with a manifest already read and checked ([`Manifest::load`] hashes every file it
    /// names: callers that build several models from one manifest read it once).
    pub fn from_manifest(
        manifest: Manifest,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
    ) -> Result<Self, ModelError> {
        manifest.expect_kind(ModelKind::StageProgress)?;
        let parts = manifest
            .parts
            .clone()
            .ok_or_else(|| ModelError::ManifestField {
                path: manifest.path.clone(),
                field: "parts".into(),
                reason: "missing: this model has no two-part form (`python -m stagewise.training \
                         export-parts` adds one)"
                    .into(),
            })?;
        let (image, k, proportions) = progress_spec(&manifest)?;
        let (encoder, provider) = runtime.session(&parts.encoder, opts)?;
        let (head, _) = runtime.session(&parts.head, opts)?;
        let e = Some(parts.embedding);
        let enc = GraphCheck {
            path: &parts.encoder,
            session: &encoder,
            known_inputs: vec![Some(ENCODER_INPUT)],
        };
        let encoder_batch = enc.input(
            "parts.encoder",
            ENCODER_INPUT,
            &[
                None,
                Some(3),
                Some(image.height as usize),
                Some(image.width as usize),
            ],
        )?;
        enc.no_extra_inputs()?;
        enc.output("parts.embedding", ENCODER_OUTPUT, &[&[None, e]])?;
        let hd = GraphCheck {
            path: &parts.head,
            session: &head,
            known_inputs: vec![Some(HEAD_INPUT), manifest.inputs.state.as_deref()],
        };
        let head_batch = hd.input(
            "parts.head",
            HEAD_INPUT,
            &[None, Some(manifest.views.len()), Some(manifest.frames), e],
        )?;
        hd.progress_state_and_outputs(&manifest, k)?;
        let step = match &parts.step {
            Some(path) => {
                let (session, _) = runtime.session(path, opts)?;
                let check = GraphCheck {
                    path,
                    session: &session,
                    known_inputs: vec![
                        Some(STEP_FRAMES),
                        Some(STEP_CACHED),
                        manifest.inputs.state.as_deref(),
                    ],
                };
                let views = Some(manifest.views.len());
                let batch = check.input(
                    "parts.step",
                    STEP_FRAMES,
                    &[
                        None,
                        views,
                        Some(3),
                        Some(image.height as usize),
                        Some(image.width as usize),
                    ],
                )?;
                check.input(
                    "parts.step",
                    STEP_CACHED,
                    &[None, views, Some(manifest.frames - 1), e],
                )?;
                check.output("parts.step", STEP_EMBEDDING, &[&[None, e]])?;
                check.progress_state_and_outputs(&manifest, k)?;
                Some(StepGraph {
                    session,
                    batch,
                    bound: None,
                })
            }
            None => None,
        };
        let mut model = Self {
            normaliser: Normaliser::new(&image),
            manifest,
            parts,
            encoder,
            head,
            provider,
            proportions,
            state_map: None,
            selected: Vec::new(),
            encoder_batch,
            head_batch,
            step,
        };
        model.check_step_agrees()?;
        Ok(model)
    }

    /// The step graph is checked against this model's own encoder and head on one fixed input at load: its
    /// sha256 only proves the file is the one the manifest names, and its shapes match any export of the same
    /// architecture (e.g. another training run's), which would silently score steady steps with other weights.
    fn check_step_agrees(&mut self) -> Result<(), ModelError> {
        let Some(batch) = self.step.as_ref().map(|s| s.batch) else {
            return Ok(());
        };
        let one = |b: Option<usize>| b.is_none_or(|b| b == 1);
        if !one(batch) || !one(self.encoder_batch) || !one(self.head_batch) {
            return Ok(()); // fixed batches: run_step checks them per call
        }
        let m = &self.manifest;
        let (views, frames, e, state_size) =
            (m.views.len(), m.frames, self.parts.embedding, m.state_size);
        let frame_len = self.normaliser.frame_len();
        // A fixed, frame-dependent pattern in the normalised range (no image needed).
        let pattern = |k: usize| -> Vec<f32> {
            (0..frame_len)
                .map(|i| ((i * 7 + k * 131) % 97) as f32 / 48.0 - 1.0)
                .collect()
        };
        let older: Vec<f32> = (0..views * (frames - 1)).flat_map(pattern).collect();
        let new: Vec<f32> = (0..views).flat_map(|v| pattern(1000 + v)).collect();
        let state = vec![0.25f32; state_size];
        let (mut cached, mut fresh) = (Vec::new(), Vec::new());
        self.encode(&older, views * (frames - 1), &mut cached)?;
        self.encode(&new, views, &mut fresh)?;
        let mut window = Vec::with_capacity(views * frames * e);
        for v in 0..views {
            window.extend_from_slice(&cached[v * (frames - 1) * e..(v + 1) * (frames - 1) * e]);
            window.extend_from_slice(&fresh[v * e..(v + 1) * e]);
        }
        let want = self.score_embeddings(&window, &state, 1)?;
        let mut got_emb = Vec::new();
        let got = self.run_step(&new, &cached, &state, 1, &mut got_emb)?;
        let emb_err = got_emb
            .iter()
            .zip(&fresh)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let phi_err = (got[0].phi - want[0].phi).abs();
        if emb_err > 1e-3 || phi_err > 1e-3 || got[0].stage != want[0].stage {
            return Err(ModelError::GraphMismatch {
                path: self.parts.step.clone().unwrap_or_default(),
                field: "parts.step".into(),
                reason: format!(
                    "disagrees with this model's encoder + head on a test input (embedding max |d| {emb_err:.2e}, \
                     phi {:.4} vs {:.4}): it was exported from other weights; re-export it with \
                     python -m stagewise.training export-parts --step-only",
                    got[0].phi, want[0].phi
                ),
            });
        }
        Ok(())
    }

    /// Whether the manifest names a fused step graph ([`Self::run_step`]).
    pub fn has_step(&self) -> bool {
        self.step.is_some()
    }

    /// The step graph's file, when there is one.
    pub fn step_path(&self) -> Option<&Path> {
        self.parts.step.as_deref().filter(|_| self.step.is_some())
    }

    /// One run of the fused step graph for `n` envs on the given inputs (laid out as in [`StepInputs`], which
    /// they are copied into; the actor writes its inputs there in place instead). Appends the new frames'
    /// embeddings (`[n * views, E]`) to `embeddings` and returns the progress of each env's window.
    pub fn run_step(
        &mut self,
        frames: &[f32],
        cached: &[f32],
        state: &[f32],
        n: usize,
        embeddings: &mut Vec<f32>,
    ) -> Result<Vec<Progress>, ModelError> {
        if n == 0 && frames.is_empty() && cached.is_empty() && state.is_empty() {
            return Ok(Vec::new());
        }
        let state_name = self.manifest.inputs.state.clone();
        let state_name = state_name.as_deref().unwrap_or("state");
        let inputs = self.step_inputs(n)?;
        for (tensor, src, dst) in [
            (STEP_FRAMES, frames, inputs.frames),
            (STEP_CACHED, cached, inputs.cached),
            (state_name, state, inputs.state),
        ] {
            copy_step_input(tensor, src, dst, n)?;
        }
        self.run_bound_step(n, embeddings)
    }

    /// The step graph's input buffers for `n` envs (bound to the graph once per batch size; see
    /// [`StepInputs`]) for a step to write, then [`Self::run_bound_step`]. They keep what was written last.
    pub fn step_inputs(&mut self, n: usize) -> Result<StepInputs<'_>, ModelError> {
        let m = &self.manifest;
        let path = self.parts.step.as_deref().unwrap_or(Path::new("step"));
        let Some(step) = self.step.as_mut() else {
            return Err(no_step_graph());
        };
        if let Some(b) = step.batch.filter(|&b| b != n) {
            return Err(bad_input(
                STEP_FRAMES,
                format!("the graph has a fixed batch of {b}, got {n} envs"),
            ));
        }
        if step.bound.as_ref().map(|b| b.n) != Some(n) {
            step.bound = None;
            step.bound = Some(Box::new(
                bind_step(&step.session, m, self.parts.embedding, n)
                    .map_err(|e| run_err(path, e))?,
            ));
        }
        let bound = step.bound.as_mut().expect("bound above");
        let frames = tensor_data(&mut bound.frames).map_err(|e| run_err(path, e))?;
        let cached = tensor_data(&mut bound.cached).map_err(|e| run_err(path, e))?;
        let state = match bound.state.as_mut() {
            Some(t) => tensor_data(t).map_err(|e| run_err(path, e))?,
            None => &mut [],
        };
        Ok(StepInputs {
            frames,
            cached,
            state,
        })
    }

    /// One run of the fused step graph on what [`Self::step_inputs`] holds for `n` envs. Appends the new frames'
    /// embeddings (`[n * views, E]`) to `embeddings` and returns the progress of each env's window.
    pub fn run_bound_step(
        &mut self,
        n: usize,
        embeddings: &mut Vec<f32>,
    ) -> Result<Vec<Progress>, ModelError> {
        let m = &self.manifest;
        let path = self.parts.step.as_deref().unwrap_or(Path::new("step"));
        let Some(step) = self.step.as_mut() else {
            return Err(no_step_graph());
        };
        let Some(bound) = step.bound.as_ref().filter(|b| b.n == n) else {
            return Err(bad_input(
                STEP_FRAMES,
                format!("no step inputs for {n} envs were written (step_inputs first)"),
            ));
        };
        if n == 0 {
            return Ok(Vec::new());
        }
        let outputs = step
            .session
            .run_binding(&bound.binding)
            .map_err(|e| run_err(path, e))?;
        let (views, e) = (m.views.len(), self.parts.embedding);
        let emb = extract(&outputs, path, STEP_EMBEDDING)?;
        if emb.len() != n * views * e {
            return Err(bad_input(
                STEP_EMBEDDING,
                format!("has {} values, expected {n} x {views} x {e}", emb.len()),
            ));
        }
        embeddings.extend_from_slice(emb);
        let logits = extract(
            &outputs,
            path,
            m.outputs.stage_logits.as_deref().unwrap_or_default(),
        )?;
        let taus = extract(&outputs, path, m.outputs.tau.as_deref().unwrap_or_default())?;
        progress_from_outputs(m, &self.proportions, path, n, logits, taus)
    }

    /// The encoder's and the head's files and sessions.
    pub fn graphs(&self) -> [(&Path, &Session); 2] {
        [
            (&self.parts.encoder, &self.encoder),
            (&self.parts.head, &self.head),
        ]
    }

    /// Refuses `frames` frames per encoder run or `windows` windows per head run where a graph fixes its batch
    /// to another size.
    pub(crate) fn check_batch(&self, frames: usize, windows: usize) -> Result<(), ModelError> {
        for (tensor, fixed, got, what) in [
            (ENCODER_INPUT, self.encoder_batch, frames, "frames"),
            (HEAD_INPUT, self.head_batch, windows, "windows"),
        ] {
            if let Some(b) = fixed.filter(|&b| b != got) {
                return Err(bad_input(
                    tensor,
                    format!("the graph has a fixed batch of {b}, got {got} {what}"),
                ));
            }
        }
        Ok(())
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The execution provider the encoder got.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// Binds the model's state fields by name to a source whose state fields are `source_names` (as
    /// [`crate::RewardModel::bind_state`]): afterwards [`Self::score_embeddings`] takes rows of the source's whole
    /// state and gives the head the model's fields, in its order.
    pub fn bind_state(&mut self, source_names: &[String]) -> Result<(), ModelError> {
        let map = StateMap::bind(&self.manifest, source_names)?;
        self.set_state_map(map)
    }

    /// Like [`Self::bind_state`] with a map built by the caller. Refuses a map for another state size.
    pub fn set_state_map(&mut self, map: StateMap) -> Result<(), ModelError> {
        map.check_model_len(self.manifest.state_size)
            .map_err(|reason| {
                bad_input(
                    self.manifest.inputs.state.as_deref().unwrap_or("state"),
                    reason,
                )
            })?;
        self.state_map = Some(map);
        Ok(())
    }

    /// The binding of [`Self::bind_state`], if any.
    pub fn state_map(&self) -> Option<&StateMap> {
        self.state_map.as_ref()
    }

    /// How frames are resized and normalised before [`Self::encode`].
    pub fn normaliser(&self) -> &Normaliser {
        &self.normaliser
    }

    /// Values per frame embedding.
    pub fn embedding_len(&self) -> usize {
        self.parts.embedding
    }

    /// Encodes `m` normalised frames (`frames` is `[m, 3, H, W]`) and appends their embeddings (`[m, E]`) to `out`.
    pub fn encode(
        &mut self,
        frames: &[f32],
        m: usize,
        out: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let frame_len = self.normaliser.frame_len();
        if frames.len() != m * frame_len {
            return Err(bad_input(
                ENCODER_INPUT,
                format!(
                    "has {} values, expected {} for {m} frames",
                    frames.len(),
                    m * frame_len
                ),
            ));
        }
        if m == 0 {
            return Ok(());
        }
        let img = self
            .manifest
            .image
            .as_ref()
            .map_or((0, 0), |i| (i.height as usize, i.width as usize));
        let path = &self.parts.encoder;
        let input = TensorRef::from_array_view(([m, 3, img.0, img.1], frames))
            .map_err(|e| run_err(path, e))?;
        let outputs = self
            .encoder
            .run(ort::inputs![ENCODER_INPUT => input])
            .map_err(|e| run_err(path, e))?;
        let emb = extract(&outputs, path, ENCODER_OUTPUT)?;
        if emb.len() != m * self.parts.embedding {
            return Err(ModelError::BadOutput {
                path: path.clone(),
                tensor: ENCODER_OUTPUT.into(),
                reason: format!(
                    "has {} values, expected {m} x {}",
                    emb.len(),
                    self.parts.embedding
                ),
            });
        }
        out.extend_from_slice(emb);
        Ok(())
    }

    /// Runs the head on `n` windows of embeddings (`embeddings` is `[n, views, frames, E]`, oldest frame first)
    /// and `state` (`[n, state_size]`; `[n, source's state size]` after [`Self::bind_state`]).
    pub fn score_embeddings(
        &mut self,
        embeddings: &[f32],
        state: &[f32],
        n: usize,
    ) -> Result<Vec<Progress>, ModelError> {
        let m = &self.manifest;
        let shape = [n, m.views.len(), m.frames, self.parts.embedding];
        let want: usize = shape.iter().product();
        if embeddings.len() != want {
            return Err(bad_input(
                HEAD_INPUT,
                format!(
                    "has {} values, expected {want} for {n} windows",
                    embeddings.len()
                ),
            ));
        }
        let state_tensor = m.inputs.state.as_deref().unwrap_or("state");
        let state: &[f32] = match &self.state_map {
            Some(map) => {
                select_rows(map, state, n, &mut self.selected)
                    .map_err(|reason| bad_input(state_tensor, reason))?;
                &self.selected
            }
            None => {
                if state.len() != n * m.state_size {
                    return Err(bad_input(
                        state_tensor,
                        format!(
                            "has {} values, expected {} for {n} windows",
                            state.len(),
                            n * m.state_size
                        ),
                    ));
                }
                state
            }
        };
        if n == 0 {
            return Ok(Vec::new());
        }
        let path = &self.parts.head;
        let emb = TensorRef::from_array_view((shape, embeddings)).map_err(|e| run_err(path, e))?;
        let outputs = if let Some(state_name) = &m.inputs.state {
            let st = TensorRef::from_array_view(([n, m.state_size], state))
                .map_err(|e| run_err(path, e))?;
            self.head
                .run(ort::inputs![HEAD_INPUT => emb, state_name.clone() => st])
        } else {
            self.head.run(ort::inputs![HEAD_INPUT => emb])
        }
        .map_err(|e| run_err(path, e))?;
        let logits = extract(
            &outputs,
            path,
            m.outputs.stage_logits.as_deref().unwrap_or_default(),
        )?;
        let taus = extract(&outputs, path, m.outputs.tau.as_deref().unwrap_or_default())?;
        progress_from_outputs(m, &self.proportions, path, n, logits, taus)
    }
}

/// The step graph's inputs and outputs for `n` envs, allocated and bound. An output with a static shape past its
/// first axis (`n`, or `n * views` for the embeddings) gets a tensor of its own that every run writes into; any
/// other is bound to the CPU and allocated by ONNX Runtime per run.
fn bind_step(session: &Session, m: &Manifest, e: usize, n: usize) -> Result<BoundStep, ort::Error> {
    let views = m.views.len();
    let (h, w) = m
        .image
        .as_ref()
        .map_or((0, 0), |i| (i.height as usize, i.width as usize));
    let alloc = Allocator::default();
    let frames = Tensor::<f32>::new(&alloc, [n, views, 3, h, w])?;
    let cached = Tensor::<f32>::new(&alloc, [n, views, m.frames - 1, e])?;
    let mut binding = session.create_binding()?;
    binding.bind_input(STEP_FRAMES, &frames)?;
    binding.bind_input(STEP_CACHED, &cached)?;
    let state = match &m.inputs.state {
        Some(name) => {
            let t = Tensor::<f32>::new(&alloc, [n, m.state_size])?;
            binding.bind_input(name.as_str(), &t)?;
            Some(t)
        }
        None => None,
    };
    for o in session.outputs() {
        let rows = if o.name() == STEP_EMBEDDING {
            n * views
        } else {
            n
        };
        let dims = match o.dtype() {
            ValueType::Tensor {
                ty: TensorElementType::Float32,
                shape,
                ..
            } => shape
                .iter()
                .enumerate()
                .map(|(axis, &d)| match usize::try_from(d) {
                    _ if axis == 0 => Some(rows),
                    Ok(d) if d > 0 => Some(d),
                    _ => None,
                })
                .collect::<Option<Vec<usize>>>(),
            _ => None,
        };
        match dims {
            Some(dims) => binding.bind_output(o.name(), Tensor::<f32>::new(&alloc, dims)?)?,
            None => binding.bind_output_to_device(o.name(), alloc.memory_info())?,
        }
    }
    Ok(BoundStep {
        n,
        binding,
        frames,
        cached,
        state,
    })
}

/// Copies `src` into the bound step input `dst` (the tensor `tensor` for `n` envs), refusing another size.
pub(crate) fn copy_step_input(
    tensor: &str,
    src: &[f32],
    dst: &mut [f32],
    n: usize,
) -> Result<(), ModelError> {
    if src.len() != dst.len() {
        return Err(bad_input(
            tensor,
            format!(
                "has {} values, expected {} for {n} envs",
                src.len(),
                dst.len()
            ),
        ));
    }
    dst.copy_from_slice(src);
    Ok(())
}

fn no_step_graph() -> ModelError {
    bad_input(STEP_FRAMES, "the manifest names no step graph".into())
}

fn tensor_data(t: &mut Tensor<f32>) -> Result<&mut [f32], ort::Error> {
    t.try_extract_tensor_mut::<f32>().map(|(_, d)| d)
}

fn bad_input(tensor: &str, reason: String) -> ModelError {
    ModelError::BadInput {
        tensor: tensor.into(),
        reason,
    }
}

fn run_err(path: &Path, source: ort::Error) -> ModelError {
    ModelError::Run {
        path: path.to_path_buf(),
        source,
    }
}

fn extract<'a>(
    outputs: &'a SessionOutputs<'_>,
    path: &Path,
    name: &str,
) -> Result<&'a [f32], ModelError> {
    let bad = |reason: String| ModelError::BadOutput {
        path: path.to_path_buf(),
        tensor: name.into(),
        reason,
    };
    let v = outputs
        .get(name)
        .ok_or_else(|| bad("missing from the run's outputs".into()))?;
    let (_, data) = v
        .try_extract_tensor::<f32>()
        .map_err(|source| ModelError::OutputRead {
            path: path.to_path_buf(),
            tensor: name.into(),
            source,
        })?;
    Ok(data)
}
