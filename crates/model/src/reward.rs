//! Batched scoring of stage-aware progress models: observations of N environments in, `Progress` per environment
//! out, with a frame window per environment.
//!
//! A model runs in one of two forms ([`ModelForm`]). The single graph takes each env's window of normalised
//! frames `[views, frames, 3, H, W]` in one run. The two-part form (manifest `[parts]`: a per-frame encoder and a
//! head, DESIGN.md "Two-part models are the fast path") encodes only the new frame of each view per step (all
//! envs' new frames in one encoder run), keeps the embeddings in the per-env window ring instead of the frames,
//! and runs the head on the cached embeddings: a window of F frames shares F - 1 frames with the previous step,
//! which the single graph encodes again every step. When `[parts]` also names a fused `step` graph (encoder and
//! head in one graph), each step is one run of it: the new frames and every window's cached older embeddings in,
//! the outputs and the new embeddings out. [`RewardModel::load`] takes the two-part form whenever the manifest
//! has one; [`RewardModel::load_as`] chooses.

use crate::graph::GraphCheck;
use crate::manifest::{Manifest, ModelKind};
use crate::preprocess::Normaliser;
use crate::runtime::{OrtRuntime, Provider, SessionOptions};
use crate::stage_progress::{progress_from_outputs, progress_spec};
use crate::state::{check_state, select_rows, StateMap};
use crate::two_part::{copy_step_input, TwoPartModel};
use crate::window::{FrameWindow, WindowLayout};
use crate::ModelError;
use ort::session::Session;
use ort::value::TensorRef;
use stagewise_core::{Observation, Progress, StageProportions};
use std::path::Path;
use std::time::{Duration, Instant};

/// Where the time of the last [`RewardModel::score`] went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepTiming {
    /// Checking observations, resizing/normalising frames, updating windows, gathering the batch.
    pub prepare: Duration,
    /// `Session::run` alone (the encoder's and the head's runs, and the progress math between them, in the
    /// two-part form).
    pub run: Duration,
    /// Softmax, progress math, output checks (single graph; inside `run` in the two-part form).
    pub finish: Duration,
}

/// Which graphs a [`RewardModel`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModelForm {
    /// The two-part form when the manifest has `[parts]`, else the single graph.
    #[default]
    Auto,
    /// The single graph (`onnx`): every step runs the whole window of frames.
    SingleGraph,
    /// The manifest's `[parts]`: per step, the encoder on the new frames and the head on cached embeddings.
    TwoPart,
}

impl std::fmt::Display for ModelForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::SingleGraph => "single graph",
            Self::TwoPart => "two-part",
        })
    }
}

/// The sessions a model runs, and what each form stages between steps.
enum Graphs {
    Single(Session),
    TwoPart {
        model: Box<TwoPartModel>,
        /// The newest frame of every view of the envs of the last call, normalised: `[n * views, 3, H, W]`.
        frames: Vec<f32>,
        /// Their embeddings, `[n * views, E]`.
        embeddings: Vec<f32>,
        /// Whether steps run the manifest's fused step graph when it has one ([`RewardModel::use_step_graph`]).
        use_step: bool,
        /// Whether the last step ran the fused step graph (what [`RewardModel::time_bare_run`] reruns).
        stepped: bool,
    },
}

/// A stage-aware progress model with per-environment frame windows. Owned by one thread (ONNX Runtime's
/// `Session::run` needs `&mut`); make one per worker thread.
pub struct RewardModel {
    manifest: Manifest,
    graphs: Graphs,
    provider: Provider,
    proportions: StageProportions,
    normaliser: Normaliser,
    fixed_batch: Option<usize>,
    /// Per env: normalised frames (single graph) or frame embeddings (two-part), in the model's input layout.
    windows: Vec<Option<FrameWindow>>,
    /// Batch staging for more than one env (one env's window is read in place): windows of frames (single graph)
    /// or of embeddings (two-part).
    images: Vec<f32>,
    state: Vec<f32>,
    /// How the model's state is taken from the source's (after [`RewardModel::bind_state`]); None: the
    /// observations carry the model's state as it is.
    state_map: Option<StateMap>,
    /// Where the last [`RewardModel::score_envs`] input lives, for [`RewardModel::time_bare_run`].
    last_input: LastInput,
    timing: StepTiming,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LastInput {
    None,
    Staged,
    Window(usize),
}

impl RewardModel {
    /// Loads a model from its manifest, checks the manifest against the ONNX graph(s), and builds the sessions:
    /// the two-part form when the manifest has `[parts]`, else the single graph ([`ModelForm::Auto`]).
    pub fn load(
        manifest_path: &Path,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
    ) -> Result<Self, ModelError> {
        Self::load_as(manifest_path, runtime, opts, ModelForm::Auto)
    }

    /// Like [`Self::load`] in the form `form` ([`ModelForm::TwoPart`] refuses a manifest without `[parts]`).
    pub fn load_as(
        manifest_path: &Path,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
        form: ModelForm,
    ) -> Result<Self, ModelError> {
        // `from_manifest_as` checks the kind.
        Self::from_manifest_as(Manifest::load(manifest_path)?, runtime, opts, form)
    }

    /// Like [`Self::load`] with a manifest already read and checked ([`Manifest::load`] hashes every file it
    /// names: callers that build several models from one manifest read it once).
    pub fn from_manifest(
        manifest: Manifest,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
    ) -> Result<Self, ModelError> {
        Self::from_manifest_as(manifest, runtime, opts, ModelForm::Auto)
    }

    /// Like [`Self::from_manifest`] in the form `form`.
    pub fn from_manifest_as(
        manifest: Manifest,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
        form: ModelForm,
    ) -> Result<Self, ModelError> {
        manifest.expect_kind(ModelKind::StageProgress)?;
        let two_part = match form {
            ModelForm::Auto => manifest.parts.is_some(),
            ModelForm::SingleGraph => false,
            ModelForm::TwoPart => true,
        };
        if two_part {
            let model = TwoPartModel::from_manifest(manifest.clone(), runtime, opts)?;
            let provider = model.provider();
            return Self::from_graphs(
                manifest,
                Graphs::TwoPart {
                    model: Box::new(model),
                    frames: Vec::new(),
                    embeddings: Vec::new(),
                    use_step: true,
                    stepped: false,
                },
                provider,
                None,
            );
        }
        let (session, provider) = runtime.session(&manifest.onnx, opts)?;
        let check = GraphCheck {
            path: &manifest.onnx,
            session: &session,
            known_inputs: vec![
                manifest.inputs.images.as_deref(),
                manifest.inputs.state.as_deref(),
            ],
        };
        let (image_spec, k, _) = progress_spec(&manifest)?;
        let images_name = manifest.inputs.images.as_deref().unwrap_or_default();
        let fixed_batch = check.input(
            "inputs.images",
            images_name,
            &[
                None,
                Some(manifest.views.len()),
                Some(manifest.frames),
                Some(3),
                Some(image_spec.height as usize),
                Some(image_spec.width as usize),
            ],
        )?;
        check.progress_state_and_outputs(&manifest, k)?;
        Self::from_graphs(manifest, Graphs::Single(session), provider, fixed_batch)
    }

    fn from_graphs(
        manifest: Manifest,
        graphs: Graphs,
        provider: Provider,
        fixed_batch: Option<usize>,
    ) -> Result<Self, ModelError> {
        let (image_spec, _, proportions) = progress_spec(&manifest)?;
        Ok(Self {
            normaliser: Normaliser::new(&image_spec),
            fixed_batch,
            proportions,
            graphs,
            provider,
            manifest,
            windows: Vec::new(),
            images: Vec::new(),
            state: Vec::new(),
            state_map: None,
            last_input: LastInput::None,
            timing: StepTiming::default(),
        })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The embeddings of the newest frames of the last successful [`Self::score_envs`] (two-part form):
    /// `[n * views, E]`, the call's envs in its order and each env's views in the manifest's order, with `E`;
    /// `None` for the single graph (it has no frame embedding). What a policy can read as its visual input: the
    /// frames the reward model saw, encoded once.
    pub fn last_embeddings(&self) -> Option<(&[f32], usize)> {
        match &self.graphs {
            Graphs::TwoPart {
                model, embeddings, ..
            } => Some((embeddings.as_slice(), model.embedding_len())),
            Graphs::Single(_) => None,
        }
    }

    /// The form this model runs in: [`ModelForm::SingleGraph`] or [`ModelForm::TwoPart`].
    pub fn form(&self) -> ModelForm {
        match self.graphs {
            Graphs::Single(_) => ModelForm::SingleGraph,
            Graphs::TwoPart { .. } => ModelForm::TwoPart,
        }
    }

    /// The execution provider the session (the encoder's, in the two-part form) got.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// Binds the model's state fields by name to a source whose state fields are `source_names` ([`StateMap::bind`]:
    /// a field the source lacks is refused here, naming it). Afterwards every call takes the *source's* whole state
    /// (observations' `state`, and `score_windows`' rows) and the fields the model reads are copied, in its order,
    /// into the input tensor; size and finiteness checks apply to the source's size and the values read.
    pub fn bind_state(&mut self, source_names: &[String]) -> Result<(), ModelError> {
        let map = StateMap::bind(&self.manifest, source_names)?;
        self.set_state_map(map)
    }

    /// Like [`Self::bind_state`] with a map built by the caller (e.g. [`StateMap::bind_source`] with the fields a
    /// reward model may read). Refuses a map for another state size.
    pub fn set_state_map(&mut self, map: StateMap) -> Result<(), ModelError> {
        map.check_model_len(self.manifest.state_size)
            .map_err(|reason| self.bad_input("inputs.state", reason))?;
        self.state_map = Some(map);
        Ok(())
    }

    /// The binding of [`Self::bind_state`], if any.
    pub fn state_map(&self) -> Option<&StateMap> {
        self.state_map.as_ref()
    }

    /// Values of the state each call takes: the bound source's, else the model's.
    pub fn source_state_len(&self) -> usize {
        self.state_map
            .as_ref()
            .map_or(self.manifest.state_size, StateMap::source_len)
    }

    /// The graph files and their sessions: the single graph, or the encoder and the head.
    pub fn graphs(&self) -> Vec<(&Path, &Session)> {
        match &self.graphs {
            Graphs::Single(s) => vec![(self.manifest.onnx.as_path(), s)],
            Graphs::TwoPart { model, .. } => model.graphs().to_vec(),
        }
    }

    /// Whether steps run the manifest's fused step graph (`[parts] step`) when it has one: on by default. Off,
    /// a two-part model runs the encoder and the head (two runs per step); for benchmarks and parity tests.
    pub fn use_step_graph(&mut self, on: bool) {
        if let Graphs::TwoPart { use_step, .. } = &mut self.graphs {
            *use_step = on;
        }
    }

    /// Whether the last step ran the fused step graph.
    pub fn last_step_fused(&self) -> bool {
        matches!(self.graphs, Graphs::TwoPart { stepped: true, .. })
    }

    /// Timing of the last `score` call.
    pub fn last_timing(&self) -> StepTiming {
        self.timing
    }

    /// Values of one environment's image window: `views * frames * 3 * height * width` (what
    /// [`Self::score_windows`] takes per env, in either form).
    pub fn window_len(&self) -> usize {
        self.manifest.views.len() * self.manifest.frames * self.normaliser.frame_len()
    }

    /// Forgets env `env`'s window: its next observation starts a new episode (as does any observation with
    /// `step == 0`).
    pub fn reset_env(&mut self, env: usize) {
        if let Some(w) = self.windows.get_mut(env) {
            *w = None;
        }
    }

    /// Scores one observation per environment (`obs[i]` is env `i`'s newest observation) in one batched run.
    /// Each call advances every environment's window by one step. Bad observations are refused before any
    /// window changes, so a failed call loses nothing.
    pub fn score(&mut self, obs: &[&Observation]) -> Result<Vec<Progress>, ModelError> {
        let envs: Vec<usize> = (0..obs.len()).collect();
        self.score_envs(&envs, obs)
    }

    /// Like [`Self::score`] for a subset of environments: `obs[i]` is the newest observation of env `envs[i]`;
    /// only those windows advance. The runtime uses it to score a reset observation of the envs whose episode
    /// just ended.
    pub fn score_envs(
        &mut self,
        envs: &[usize],
        obs: &[&Observation],
    ) -> Result<Vec<Progress>, ModelError> {
        let t0 = Instant::now();
        let n = obs.len();
        if envs.len() != n {
            return Err(self.bad_input(
                "inputs.images",
                format!("{} env indices for {n} observations", envs.len()),
            ));
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut seen = envs.to_vec();
        seen.sort_unstable();
        if seen.windows(2).any(|w| w[0] == w[1]) {
            return Err(self.bad_input(
                "inputs.images",
                format!("env indices {envs:?} repeat: one observation per env"),
            ));
        }
        self.check_batch(n)?;
        let order = envs
            .iter()
            .zip(obs)
            .map(|(&env, o)| self.view_order(env, o))
            .collect::<Result<Vec<_>, _>>()?;
        let max_env = seen[n - 1];
        if self.windows.len() <= max_env {
            self.windows.resize(max_env + 1, None);
        }
        let s = self.manifest.state_size;
        self.state.resize(n * s, 0.0);
        for (row, (&env, o)) in envs.iter().zip(obs).enumerate() {
            let dst = &mut self.state[row * s..(row + 1) * s];
            match &self.state_map {
                // Sizes were checked in view_order.
                Some(map) => map
                    .select(&o.state, dst)
                    .map_err(|reason| ModelError::BadObservation { env, reason })?,
                None => dst.copy_from_slice(&o.state),
            }
        }
        let out = match self.graphs {
            Graphs::Single(_) => self.step_single(envs, obs, &order, t0),
            Graphs::TwoPart { .. } => self.step_two_part(envs, obs, &order, t0),
        };
        self.last_input = match (&out, n) {
            (Err(_), _) => LastInput::None,
            (Ok(_), 1) => LastInput::Window(envs[0]),
            (Ok(_), _) => LastInput::Staged,
        };
        out
    }

    /// The single graph's step: each env's new frames are normalised into its window of frames, the windows
    /// run in one batch.
    fn step_single(
        &mut self,
        envs: &[usize],
        obs: &[&Observation],
        order: &[Vec<usize>],
        t0: Instant,
    ) -> Result<Vec<Progress>, ModelError> {
        let n = obs.len();
        let layout = WindowLayout::of(&self.manifest);
        let frame_len = self.normaliser.frame_len();
        let window_len = self.window_len();
        // One env reads its window in place; a batch is staged row by row.
        let staged = n > 1;
        self.images
            .resize(if staged { n * window_len } else { 0 }, 0.0);
        for (row, ((&env, o), order)) in envs.iter().zip(obs).zip(order).enumerate() {
            let fresh = o.step == 0 || self.windows[env].is_none();
            let window = self.windows[env]
                .get_or_insert_with(|| FrameWindow::with_layout(layout, frame_len));
            window.begin_step(fresh);
            for (v, &idx) in order.iter().enumerate() {
                // Sizes were checked in view_order, so this cannot fail.
                window
                    .write_view(v, |slot, mirror| {
                        self.normaliser
                            .write_chw_twice(&o.views[idx].rgb, slot, Some(mirror))
                    })
                    .map_err(|reason| ModelError::BadObservation { env, reason })?;
            }
            if fresh {
                window.fill_from_newest();
            }
            if staged {
                self.images[row * window_len..(row + 1) * window_len]
                    .copy_from_slice(window.window());
            }
        }
        self.last_input = if staged {
            LastInput::Staged
        } else {
            LastInput::Window(envs[0])
        };
        let prepared = Instant::now();
        self.timing.prepare = prepared - t0;
        self.run_prepared(n, None)
    }

    /// The two-part step: every env's new frames are normalised into one batch. With the manifest's fused step
    /// graph (and at least one env past its first step), one run takes the new frames and the embeddings of
    /// every window's older frames (cached in the rings) and gives the outputs and the new embeddings, which go
    /// into the rings. Otherwise the new frames are encoded in one run, the rings take the embeddings and the
    /// head runs on the windows of embeddings.
    fn step_two_part(
        &mut self,
        envs: &[usize],
        obs: &[&Observation],
        order: &[Vec<usize>],
        t0: Instant,
    ) -> Result<Vec<Progress>, ModelError> {
        let n = obs.len();
        let layout = WindowLayout::of(&self.manifest);
        let views = layout.views();
        let frame_len = self.normaliser.frame_len();
        let Graphs::TwoPart {
            model,
            frames: new_frames,
            embeddings,
            use_step,
            stepped,
        } = &mut self.graphs
        else {
            unreachable!("step_two_part runs the two-part form")
        };
        model.check_batch(n * views, n)?;
        let e = model.embedding_len();
        let fresh = |(&env, o): (&usize, &&Observation)| o.step == 0 || self.windows[env].is_none();
        *stepped = *use_step && model.has_step() && !envs.iter().zip(obs).all(fresh);
        // The new frames of every view, normalised: straight into the step graph's bound input when it runs.
        let normalise = |frames: &mut [f32]| -> Result<(), ModelError> {
            for (row, ((&env, o), order)) in envs.iter().zip(obs).zip(order).enumerate() {
                for (v, &idx) in order.iter().enumerate() {
                    let at = (row * views + v) * frame_len;
                    // Sizes were checked in view_order, so this cannot fail.
                    self.normaliser
                        .write_chw(&o.views[idx].rgb, &mut frames[at..at + frame_len])
                        .map_err(|reason| ModelError::BadObservation { env, reason })?;
                }
            }
            Ok(())
        };
        if *stepped {
            let fresh: Vec<bool> = envs.iter().zip(obs).map(fresh).collect();
            let inputs = model.step_inputs(n)?;
            normalise(inputs.frames)?;
            let state_name = self.manifest.inputs.state.as_deref().unwrap_or("state");
            copy_step_input(state_name, &self.state, inputs.state, n)?;
            // Each env's window slides; its older frames' embeddings go to the step graph. An env whose episode
            // starts here has none (its window is its new frame repeated): it gets zeros, and the head reruns
            // on its window below.
            let (f, older) = (layout.frames(), (layout.frames() - 1) * e);
            for ((&env, &is_fresh), dst) in envs
                .iter()
                .zip(&fresh)
                .zip(inputs.cached.chunks_exact_mut(views * older))
            {
                let window =
                    self.windows[env].get_or_insert_with(|| FrameWindow::with_layout(layout, e));
                window.begin_step(is_fresh);
                if is_fresh {
                    dst.fill(0.0);
                    continue;
                }
                let w = window.window();
                for (v, d) in dst.chunks_exact_mut(older).enumerate() {
                    d.copy_from_slice(&w[v * f * e..v * f * e + older]);
                }
            }
            let prepared = Instant::now();
            embeddings.clear();
            let out = model.run_bound_step(n, embeddings);
            let ran = Instant::now();
            let mut out = match out {
                Ok(out) => out,
                Err(err) => {
                    // The windows slid but took no frame: those episodes start over.
                    for &env in envs {
                        self.windows[env] = None;
                    }
                    return Err(err);
                }
            };
            for (row, (&env, &is_fresh)) in envs.iter().zip(&fresh).enumerate() {
                let window = self.windows[env].as_mut().expect("created above");
                window.copy_views(&embeddings[row * views * e..(row + 1) * views * e]);
                if is_fresh {
                    window.fill_from_newest();
                }
            }
            let written = Instant::now();
            let starts: Vec<usize> = (0..n).filter(|&r| fresh[r]).collect();
            if !starts.is_empty() {
                let s = self.manifest.state_size;
                let mut state = Vec::with_capacity(starts.len() * s);
                self.images.clear();
                for &r in &starts {
                    let window = self.windows[envs[r]].as_ref().expect("created above");
                    self.images.extend_from_slice(window.window());
                    state.extend_from_slice(&self.state[r * s..(r + 1) * s]);
                }
                let redo = model.score_embeddings(&self.images, &state, starts.len())?;
                for (r, p) in starts.into_iter().zip(redo) {
                    out[r] = p;
                }
            }
            self.timing = StepTiming {
                prepare: (prepared - t0) + (written - ran),
                run: (ran - prepared) + written.elapsed(),
                finish: Duration::ZERO,
            };
            return Ok(out);
        }
        new_frames.resize(n * views * frame_len, 0.0);
        normalise(new_frames)?;
        let prepared = Instant::now();
        embeddings.clear();
        model.encode(new_frames, n * views, embeddings)?;
        let encoded = Instant::now();
        let window_len = layout.window_len(e);
        let staged = n > 1;
        self.images
            .resize(if staged { n * window_len } else { 0 }, 0.0);
        for (row, (&env, o)) in envs.iter().zip(obs).enumerate() {
            let fresh = o.step == 0 || self.windows[env].is_none();
            let window =
                self.windows[env].get_or_insert_with(|| FrameWindow::with_layout(layout, e));
            window.begin_step(fresh);
            window.copy_views(&embeddings[row * views * e..(row + 1) * views * e]);
            if fresh {
                window.fill_from_newest();
            }
            if staged {
                self.images[row * window_len..(row + 1) * window_len]
                    .copy_from_slice(window.window());
            }
        }
        let windowed = Instant::now();
        let input = if staged {
            &self.images[..]
        } else {
            self.windows[envs[0]]
                .as_ref()
                .map(FrameWindow::window)
                .unwrap_or_default()
        };
        let out = model.score_embeddings(input, &self.state, n);
        self.timing = StepTiming {
            prepare: (prepared - t0) + (windowed - encoded),
            run: (encoded - prepared) + windowed.elapsed(),
            finish: Duration::ZERO,
        };
        out
    }

    /// Runs the model on already-built windows: `images` is `[n, views, frames, 3, H, W]` normalised f32 and
    /// `state` is `[n, state_size]` (`[n, source's state size]` after [`Self::bind_state`]: the model's fields
    /// are picked from each row). For labelling and benchmarks; bypasses the per-env windows. In the two-part form
    /// every frame of the windows is encoded, then the head runs.
    pub fn score_windows(
        &mut self,
        images: &[f32],
        state: &[f32],
        n: usize,
    ) -> Result<Vec<Progress>, ModelError> {
        let t0 = Instant::now();
        self.check_batch(n)?;
        let want = n * self.window_len();
        if images.len() != want {
            return Err(self.bad_input(
                "inputs.images",
                format!("has {} values, expected {want} for batch {n}", images.len()),
            ));
        }
        let want_s = n * self.source_state_len();
        if state.len() != want_s {
            return Err(self.bad_input(
                "inputs.state",
                format!(
                    "has {} values, expected {want_s} for batch {n}",
                    state.len()
                ),
            ));
        }
        self.last_input = LastInput::None;
        // Bound: the model's fields of each row go to a staging buffer. Else the caller's buffers go to ONNX
        // Runtime as they are: no copy.
        let selected = match &self.state_map {
            Some(map) => {
                let mut buf = std::mem::take(&mut self.state);
                let picked = select_rows(map, state, n, &mut buf);
                if let Err(reason) = picked {
                    self.state = buf;
                    return Err(self.bad_input("inputs.state", reason));
                }
                Some(buf)
            }
            None => None,
        };
        let prepared = Instant::now();
        self.timing.prepare = prepared - t0;
        let state_rows = selected.as_deref().unwrap_or(state);
        let frames = n * self.manifest.views.len() * self.manifest.frames;
        let out = match &mut self.graphs {
            Graphs::Single(_) => self.run_prepared(n, Some((images, state_rows))),
            Graphs::TwoPart {
                model, embeddings, ..
            } => {
                let out = model.check_batch(frames, n).and_then(|()| {
                    embeddings.clear();
                    model.encode(images, frames, embeddings)?;
                    model.score_embeddings(embeddings, state_rows, n)
                });
                self.timing.run = prepared.elapsed();
                self.timing.finish = Duration::ZERO;
                out
            }
        };
        if let Some(buf) = selected {
            self.state = buf;
        }
        out
    }

    /// Times the bare runs alone on the input of the last [`Self::score`] / [`Self::score_envs`] call (for
    /// benchmarks: the bare-ORT reference): `Session::run` of the single graph, the fused step graph's run on
    /// the new frames and cached embeddings, or the encoder's run on the new frames and the head's on the windows
    /// of embeddings (whichever the last step ran).
    pub fn time_bare_run(&mut self, n: usize) -> Result<Duration, ModelError> {
        if self.last_input == LastInput::None {
            return Err(self.bad_input(
                "inputs.images",
                "time_bare_run reruns the last score call's input: score first".into(),
            ));
        }
        let t0 = Instant::now();
        match &mut self.graphs {
            Graphs::Single(_) => {
                self.run_raw(n, None)?;
            }
            Graphs::TwoPart {
                model,
                embeddings,
                stepped: true,
                ..
            } => {
                embeddings.clear();
                model.run_bound_step(n, embeddings)?;
            }
            Graphs::TwoPart {
                model,
                frames,
                embeddings,
                ..
            } => {
                let views = self.manifest.views.len();
                embeddings.clear();
                model.encode(frames, n * views, embeddings)?;
                let input = match self.last_input {
                    LastInput::Window(env) => self
                        .windows
                        .get(env)
                        .and_then(Option::as_ref)
                        .map(FrameWindow::window)
                        .unwrap_or_default(),
                    _ => &self.images[..],
                };
                model.score_embeddings(input, &self.state, n)?;
            }
        }
        Ok(t0.elapsed())
    }

    fn bad_input(&self, field: &str, reason: String) -> ModelError {
        let tensor = match field {
            "inputs.state" => self.manifest.inputs.state.clone(),
            _ => self.manifest.inputs.images.clone(),
        };
        ModelError::BadInput {
            tensor: tensor.unwrap_or_else(|| field.to_string()),
            reason,
        }
    }

    fn check_batch(&self, n: usize) -> Result<(), ModelError> {
        match self.fixed_batch {
            Some(b) if b != n => Err(self.bad_input(
                "inputs.images",
                format!("the graph has a fixed batch of {b}, got {n} environments"),
            )),
            _ => Ok(()),
        }
    }

    /// For each manifest view, the index of the observation's view with that name; refuses missing views, extra
    /// views, empty frames and a wrong state size.
    fn view_order(&self, env: usize, o: &Observation) -> Result<Vec<usize>, ModelError> {
        let bad = |reason: String| ModelError::BadObservation { env, reason };
        let expected = &self.manifest.views;
        if o.views.len() != expected.len() {
            let got: Vec<&str> = o.views.iter().map(|v| v.name.as_str()).collect();
            return Err(bad(format!(
                "has {} views {got:?}, the model takes {} {expected:?}",
                got.len(),
                expected.len()
            )));
        }
        let mut order = Vec::with_capacity(expected.len());
        for name in expected {
            let idx = o
                .views
                .iter()
                .position(|v| &v.name == name)
                .ok_or_else(|| {
                    bad(format!(
                        "has no view named {name:?} (the model takes {expected:?})"
                    ))
                })?;
            let f = &o.views[idx].rgb;
            if f.width() == 0 || f.height() == 0 {
                return Err(bad(format!(
                    "view {name:?} is {}x{}: frames must not be empty",
                    f.width(),
                    f.height()
                )));
            }
            order.push(idx);
        }
        check_state(&self.state_map, self.manifest.state_size, &o.state).map_err(bad)?;
        Ok(order)
    }

    /// One `Session::run` of the single graph: on `given` (images, state) when there, else on the last score
    /// call's input (the staged batch or one env's window in place).
    fn run_raw(
        &mut self,
        n: usize,
        given: Option<(&[f32], &[f32])>,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        let m = &self.manifest;
        let Graphs::Single(session) = &mut self.graphs else {
            unreachable!("run_raw runs the single graph")
        };
        let (images, state) = match (given, self.last_input) {
            (Some(g), _) => g,
            (None, LastInput::Window(env)) => (
                self.windows
                    .get(env)
                    .and_then(Option::as_ref)
                    .map(FrameWindow::window)
                    .unwrap_or_default(),
                &self.state[..],
            ),
            (None, _) => (&self.images[..], &self.state[..]),
        };
        let img = m
            .image
            .as_ref()
            .map(|i| (i.height as usize, i.width as usize))
            .unwrap_or_default();
        let shape = [n, m.views.len(), m.frames, 3, img.0, img.1];
        let run_err = |source: ort::Error| ModelError::Run {
            path: m.onnx.clone(),
            source,
        };
        let images = TensorRef::from_array_view((shape, images)).map_err(run_err)?;
        let images_name = m.inputs.images.as_deref().unwrap_or_default();
        let logits_name = m.outputs.stage_logits.as_deref().unwrap_or_default();
        let tau_name = m.outputs.tau.as_deref().unwrap_or_default();
        let outputs = if let Some(state_name) = m.inputs.state.as_deref() {
            let state = TensorRef::from_array_view(([n, m.state_size], state)).map_err(run_err)?;
            session.run(ort::inputs![images_name => images, state_name => state])
        } else {
            session.run(ort::inputs![images_name => images])
        }
        .map_err(run_err)?;
        let path = &m.onnx;
        let extract = |name: &str| -> Result<Vec<f32>, ModelError> {
            let v = outputs.get(name).ok_or_else(|| ModelError::BadOutput {
                path: path.clone(),
                tensor: name.to_string(),
                reason: "missing from the run's outputs".into(),
            })?;
            let (_, data) =
                v.try_extract_tensor::<f32>()
                    .map_err(|source| ModelError::OutputRead {
                        path: path.clone(),
                        tensor: name.to_string(),
                        source,
                    })?;
            Ok(data.to_vec())
        };
        Ok((extract(logits_name)?, extract(tau_name)?))
    }

    fn run_prepared(
        &mut self,
        n: usize,
        given: Option<(&[f32], &[f32])>,
    ) -> Result<Vec<Progress>, ModelError> {
        let t0 = Instant::now();
        let (logits, taus) = self.run_raw(n, given)?;
        let t1 = Instant::now();
        let out = progress_from_outputs(
            &self.manifest,
            &self.proportions,
            &self.manifest.onnx,
            n,
            &logits,
            &taus,
        )?;
        self.timing.run = t1 - t0;
        self.timing.finish = t1.elapsed();
        Ok(out)
    }
}
