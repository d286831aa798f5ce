//! Offline scoring of whole episodes with a stage-progress model: the engine behind `stagewise label`, `eval` and
//! `score` (the actor scores step by step with [`crate::RewardModel`]; both build their windows from the one
//! [`WindowLayout`], so a frame sees the same window offline and online).
//!
//! [`EpisodeScorer::score`] takes an episode ([`FrameSource`]: frames per model view and the source's state per
//! frame) and the frames to score, and
//!
//! 1. plans the windows: the frames `t - (F-1) s, ..., t` of every scored frame `t` ([`WindowLayout`]; early
//!    windows repeat the first frame), so that each needed frame is normalised once;
//! 2. in the single-graph form, gathers windows of normalised frames and runs them `batch` at a time (fewer when
//!    they would pass [`WINDOW_BATCH_BYTES`]); in the two-part form (manifest `[parts]`: per-frame encoder +
//!    head, DESIGN.md "Two-part models are the fast path") encodes each needed frame once (at most `batch`
//!    frames, all views, per encoder run, and fewer when their normalised pixels would pass
//!    [`ENCODE_CHUNK_BYTES`]) and runs the head on windows of embeddings, `batch` windows at a time, instead of
//!    re-encoding every frame of every window.
//!
//! [`score_in_workers`] spreads items (episodes) over worker threads, one model each (`Session::run` takes
//! `&mut`), reading ahead while the models load. LeRobot's own labelling runs one window per query.

use crate::preprocess::Normaliser;
use crate::reward::{ModelForm, RewardModel};
use crate::runtime::{OrtRuntime, SessionOptions};
use crate::state::StateMap;
use crate::two_part::TwoPartModel;
use crate::window::WindowLayout;
use crate::{Manifest, ModelError};
use stagewise_core::{Frame, Observation, Progress};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The most normalised pixels (bytes of f32) per encoder run: a chunk's input and the encoder's activations
/// then stay in a core's L2 cache. Measured with the 8-16-16 pick-place model (3 views at 32x32, so 10 frames
/// per run): 28-31 us of model time per frame against 34-38 us with 64 frames per run.
pub const ENCODE_CHUNK_BYTES: usize = 384 * 1024;

/// The most normalised pixels (bytes of f32) per run of the single graph: a batch of windows of large frames
/// (ONNX Runtime's activations grow with it) costs page faults and cache misses. Measured with the tiny3v test
/// model (3 views x 4 frames at 96x96, 1.3 MB per window): 64 windows per run took 1.4-1.9x the wall time of
/// 8-16 per run. The shipped 32x32 models' windows (73 KB) still run 64 at a time.
pub const WINDOW_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// What was wrong with an episode, or with a model run on it.
#[derive(Debug, thiserror::Error)]
pub enum ScoringError {
    #[error("the episode has no frames")]
    Empty,
    #[error("frame {frame} was asked for, the episode has {len} frames")]
    FrameOutOfRange { frame: usize, len: usize },
    #[error("view `{view}` has {got} frames, the episode {len}")]
    ViewLength {
        view: String,
        got: usize,
        len: usize,
    },
    #[error("the model takes {want} views {names:?}, the episode has {got}")]
    Views {
        want: usize,
        got: usize,
        names: Vec<String>,
    },
    #[error("frame {frame}: the state has {got} values, the model reads rows of {want}")]
    StateLength {
        frame: usize,
        got: usize,
        want: usize,
    },
    #[error("frame {frame}: state[{index}] is {value}: the state the model reads must be finite")]
    StateNotFinite {
        frame: usize,
        index: usize,
        value: f32,
    },
    #[error("frame {frame} has no view named {view:?} (the model takes {views:?})")]
    MissingView {
        frame: usize,
        view: String,
        views: Vec<String>,
    },
    #[error("frame {frame}, view `{view}`: {reason}")]
    Frame {
        frame: usize,
        view: String,
        reason: String,
    },
    #[error("encoding frames {frames:?}")]
    Encode {
        frames: Vec<usize>,
        #[source]
        source: Box<ModelError>,
    },
    #[error("scoring frames {frames:?}")]
    Score {
        frames: Vec<usize>,
        #[source]
        source: Box<ModelError>,
    },
}

/// An episode to score: frames per model view (the manifest's view order) and the source's state per frame.
pub trait FrameSource {
    /// Frames in the episode.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Frame `t` of the model's view `v`.
    fn frame(&self, t: usize, v: usize) -> &Frame;
    /// The source's state at frame `t` (the bound source's whole row after [`EpisodeScorer::set_state_map`],
    /// else the model's state; empty when the model takes none).
    fn state(&self, t: usize) -> &[f32];
}

/// An episode stored per view: `views[v][t]` is frame `t` of the model's view `v`; `state` is `[len, state_len]`.
#[derive(Debug, Clone, Copy)]
pub struct ViewFrames<'a> {
    views: &'a [&'a [Frame]],
    state: &'a [f32],
    state_len: usize,
    len: usize,
}

impl<'a> ViewFrames<'a> {
    /// `names` name the views in errors. Refuses views of different lengths and a state that is not
    /// `state_len` values per frame.
    pub fn new(
        views: &'a [&'a [Frame]],
        names: &[String],
        state: &'a [f32],
        state_len: usize,
    ) -> Result<Self, ScoringError> {
        let len = views.first().map_or(0, |v| v.len());
        for (v, frames) in views.iter().enumerate() {
            if frames.len() != len {
                return Err(ScoringError::ViewLength {
                    view: names.get(v).cloned().unwrap_or_else(|| v.to_string()),
                    got: frames.len(),
                    len,
                });
            }
        }
        if state.len() != len * state_len {
            return Err(ScoringError::StateLength {
                frame: 0,
                got: state.len(),
                want: len * state_len,
            });
        }
        Ok(Self {
            views,
            state,
            state_len,
            len,
        })
    }
}

impl FrameSource for ViewFrames<'_> {
    fn len(&self) -> usize {
        self.len
    }
    fn frame(&self, t: usize, v: usize) -> &Frame {
        &self.views[v][t]
    }
    fn state(&self, t: usize) -> &[f32] {
        &self.state[t * self.state_len..(t + 1) * self.state_len]
    }
}

/// An episode of observations, their views found by the model's view names.
#[derive(Debug, Clone)]
pub struct ObservationFrames<'a> {
    obs: &'a [Observation],
    /// Per observation, the index of each model view in its `views`.
    order: Vec<usize>,
    views: usize,
}

impl<'a> ObservationFrames<'a> {
    /// Refuses an observation without one of `views` (the model's view names, in order).
    pub fn new(obs: &'a [Observation], views: &[String]) -> Result<Self, ScoringError> {
        let mut order = Vec::with_capacity(obs.len() * views.len());
        for (t, o) in obs.iter().enumerate() {
            for name in views {
                let i = o
                    .views
                    .iter()
                    .position(|v| &v.name == name)
                    .ok_or_else(|| ScoringError::MissingView {
                        frame: t,
                        view: name.clone(),
                        views: views.to_vec(),
                    })?;
                order.push(i);
            }
        }
        Ok(Self {
            obs,
            order,
            views: views.len(),
        })
    }
}

impl FrameSource for ObservationFrames<'_> {
    fn len(&self) -> usize {
        self.obs.len()
    }
    fn frame(&self, t: usize, v: usize) -> &Frame {
        &self.obs[t].views[self.order[t * self.views + v]].rgb
    }
    fn state(&self, t: usize) -> &[f32] {
        &self.obs[t].state
    }
}

/// An episode played backwards (its last frame first): the reversed playback of VROC.
#[derive(Debug, Clone, Copy)]
pub struct Reversed<S>(pub S);

impl<S: FrameSource> FrameSource for Reversed<S> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn frame(&self, t: usize, v: usize) -> &Frame {
        self.0.frame(self.0.len() - 1 - t, v)
    }
    fn state(&self, t: usize) -> &[f32] {
        self.0.state(self.0.len() - 1 - t)
    }
}

/// Where the time of the last [`EpisodeScorer::score`] went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScoreTiming {
    /// Planning, normalising frames and gathering windows into batches.
    pub prepare: Duration,
    /// ONNX Runtime runs (the encoder's and the head's in the two-part form).
    pub model: Duration,
}

/// The graphs the scorer runs.
enum Graphs {
    Single(RewardModel),
    TwoPart(TwoPartModel),
}

/// Buffers reused across episodes: fresh multi-megabyte buffers per episode cost page faults and memsets that
/// showed up at ~7% of a label run's profile.
#[derive(Default)]
struct Scratch {
    /// Normalised frames (`[row, view, CHW]`).
    pre: Vec<f32>,
    /// Embeddings of the needed frames (`[row, view, E]`; two-part form).
    emb: Vec<f32>,
    /// One batch of windows and its states.
    windows: Vec<f32>,
    state: Vec<f32>,
    /// Row of each episode frame in `pre` / `emb` (`usize::MAX`: not needed).
    slot: Vec<usize>,
    needed: Vec<usize>,
}

/// Grows `buf` to at least `len` values; the contents are overwritten by the caller.
fn grow(buf: &mut Vec<f32>, len: usize) {
    if buf.len() < len {
        buf.resize(len, 0.0);
    }
}

/// A stage-progress model that scores whole episodes (see the module doc). Owned by one thread; make one per
/// worker.
pub struct EpisodeScorer {
    manifest: Manifest,
    graphs: Graphs,
    layout: WindowLayout,
    normaliser: Normaliser,
    state_map: Option<StateMap>,
    batch: usize,
    scratch: Scratch,
    timing: ScoreTiming,
}

impl EpisodeScorer {
    /// Builds the sessions of `form` ([`ModelForm::Auto`]: the two-part form when the manifest has `[parts]`;
    /// [`ModelForm::TwoPart`] refuses a manifest without). `batch` (at least 1) is the windows per run of the
    /// single graph or the head, and the most frames per encoder run.
    pub fn from_manifest(
        manifest: Manifest,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
        form: ModelForm,
        batch: usize,
    ) -> Result<Self, ModelError> {
        let two_part = match form {
            ModelForm::Auto => manifest.parts.is_some(),
            ModelForm::SingleGraph => false,
            ModelForm::TwoPart => true,
        };
        let graphs = if two_part {
            Graphs::TwoPart(TwoPartModel::from_manifest(
                manifest.clone(),
                runtime,
                opts,
            )?)
        } else {
            Graphs::Single(RewardModel::from_manifest_as(
                manifest.clone(),
                runtime,
                opts,
                ModelForm::SingleGraph,
            )?)
        };
        let (image, _, _) = crate::stage_progress::progress_spec(&manifest)?;
        Ok(Self {
            layout: WindowLayout::of(&manifest),
            manifest,
            graphs,
            normaliser: Normaliser::new(&image),
            state_map: None,
            batch: batch.max(1),
            scratch: Scratch::default(),
            timing: ScoreTiming::default(),
        })
    }

    /// Takes the model's state fields from the source's rows through `map` (see
    /// [`RewardModel::set_state_map`]); afterwards [`FrameSource::state`] gives the source's whole row.
    pub fn set_state_map(&mut self, map: StateMap) -> Result<(), ModelError> {
        match &mut self.graphs {
            Graphs::Single(m) => m.set_state_map(map.clone())?,
            Graphs::TwoPart(m) => m.set_state_map(map.clone())?,
        }
        self.state_map = Some(map);
        Ok(())
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// [`ModelForm::SingleGraph`] or [`ModelForm::TwoPart`].
    pub fn form(&self) -> ModelForm {
        match self.graphs {
            Graphs::Single(_) => ModelForm::SingleGraph,
            Graphs::TwoPart(_) => ModelForm::TwoPart,
        }
    }

    /// The execution provider the session (the encoder's, in the two-part form) got.
    pub fn provider(&self) -> crate::Provider {
        match &self.graphs {
            Graphs::Single(m) => m.provider(),
            Graphs::TwoPart(m) => m.provider(),
        }
    }

    /// The windows this model takes.
    pub fn layout(&self) -> WindowLayout {
        self.layout
    }

    /// Values of state per frame that [`FrameSource::state`] must give: the bound source's, else the model's.
    pub fn source_state_len(&self) -> usize {
        self.state_map
            .as_ref()
            .map_or(self.manifest.state_size, StateMap::source_len)
    }

    /// Timing of the last [`Self::score`].
    pub fn last_timing(&self) -> ScoreTiming {
        self.timing
    }

    /// Scores every frame of `ep`.
    pub fn score_all(&mut self, ep: &impl FrameSource) -> Result<Vec<Progress>, ScoringError> {
        let frames: Vec<usize> = (0..ep.len()).collect();
        self.score(ep, &frames)
    }

    /// Refuses an empty episode, frames out of range, states of the wrong size and non-finite values the model
    /// reads; returns the source's state length.
    fn check_episode(
        &self,
        ep: &impl FrameSource,
        frames: &[usize],
    ) -> Result<usize, ScoringError> {
        let len = ep.len();
        let state_len = self.source_state_len();
        if len == 0 {
            return Err(ScoringError::Empty);
        }
        if let Some(&frame) = frames.iter().find(|&&t| t >= len) {
            return Err(ScoringError::FrameOutOfRange { frame, len });
        }
        for t in 0..len {
            let s = ep.state(t);
            if s.len() != state_len {
                return Err(ScoringError::StateLength {
                    frame: t,
                    got: s.len(),
                    want: state_len,
                });
            }
            if let Some((index, value)) = self.state_map.as_ref().map_or_else(
                || s.iter().position(|x| !x.is_finite()).map(|i| (i, s[i])),
                |m| m.first_non_finite(s),
            ) {
                return Err(ScoringError::StateNotFinite {
                    frame: t,
                    index,
                    value,
                });
            }
        }
        Ok(state_len)
    }

    /// Scores the windows of `frames` (frame indices of `ep`, in the order the results come back) of `ep`.
    /// Refuses an empty episode, frames out of range, states of the wrong size and non-finite values the
    /// model reads, before any model run.
    pub fn score(
        &mut self,
        ep: &impl FrameSource,
        frames: &[usize],
    ) -> Result<Vec<Progress>, ScoringError> {
        let t0 = Instant::now();
        let mut model_time = Duration::ZERO;
        let len = ep.len();
        let state_len = self.check_episode(ep, frames)?;
        let Self {
            manifest,
            graphs,
            layout,
            normaliser,
            batch,
            scratch,
            ..
        } = self;
        let (layout, batch) = (*layout, *batch);
        let frame_len = normaliser.frame_len();
        let views = layout.views();
        let step_len = views * frame_len;
        let Scratch {
            pre,
            emb,
            windows,
            state,
            slot,
            needed,
        } = scratch;
        // The frames the scored windows need: row `slot[t]` of `rows` below holds frame t.
        slot.clear();
        slot.resize(len, usize::MAX);
        needed.clear();
        for &t in frames {
            for b in layout.frames_of(t) {
                if slot[b] == usize::MAX {
                    slot[b] = 0;
                    needed.push(b);
                }
            }
        }
        needed.sort_unstable();
        for (row, &t) in needed.iter().enumerate() {
            slot[t] = row;
        }
        let names = &manifest.views;
        let normalise = |rows: &[usize], dst: &mut [f32]| -> Result<(), ScoringError> {
            for (&t, step) in rows.iter().zip(dst.chunks_exact_mut(step_len)) {
                for (v, out) in step.chunks_exact_mut(frame_len).enumerate() {
                    normaliser
                        .write_chw(ep.frame(t, v), out)
                        .map_err(|reason| ScoringError::Frame {
                            frame: t,
                            view: names.get(v).cloned().unwrap_or_default(),
                            reason,
                        })?;
                }
            }
            Ok(())
        };
        // Rows ([row, view, row_len]): normalised frames (single graph) or their embeddings (two-part).
        let (rows, row_len): (&[f32], usize) = match graphs {
            Graphs::Single(_) => {
                grow(pre, needed.len() * step_len);
                let pre = &mut pre[..needed.len() * step_len];
                normalise(needed, pre)?;
                (pre, frame_len)
            }
            Graphs::TwoPart(m) => {
                // Encode every needed frame once, a chunk at a time (the chunk stays in cache between the
                // normalising and the encoder); windows are then windows of embeddings.
                let e = m.embedding_len();
                emb.clear();
                let chunk_frames =
                    (ENCODE_CHUNK_BYTES / (step_len * size_of::<f32>()).max(1)).clamp(1, batch);
                grow(pre, chunk_frames * step_len);
                for chunk in needed.chunks(chunk_frames) {
                    let pre = &mut pre[..chunk.len() * step_len];
                    normalise(chunk, pre)?;
                    let t_run = Instant::now();
                    m.encode(pre, chunk.len() * views, emb).map_err(|source| {
                        ScoringError::Encode {
                            frames: chunk.to_vec(),
                            source: Box::new(source),
                        }
                    })?;
                    model_time += t_run.elapsed();
                }
                (emb, e)
            }
        };
        let row_step = views * row_len;
        let run_windows = match graphs {
            Graphs::Single(_) => {
                let window_bytes = layout.window_len(frame_len) * size_of::<f32>();
                (WINDOW_BATCH_BYTES / window_bytes.max(1)).clamp(1, batch)
            }
            Graphs::TwoPart(_) => batch,
        };
        let mut out = Vec::with_capacity(frames.len());
        for chunk in frames.chunks(run_windows) {
            windows.clear();
            state.clear();
            for &t in chunk {
                layout.gather(
                    t,
                    |i, v| {
                        let s = slot[i] * row_step + v * row_len;
                        &rows[s..s + row_len]
                    },
                    windows,
                );
                if state_len > 0 {
                    state.extend_from_slice(ep.state(t));
                }
            }
            let t_run = Instant::now();
            let progress = match graphs {
                Graphs::Single(m) => m.score_windows(windows, state, chunk.len()),
                Graphs::TwoPart(m) => m.score_embeddings(windows, state, chunk.len()),
            }
            .map_err(|source| ScoringError::Score {
                frames: chunk.to_vec(),
                source: Box::new(source),
            })?;
            model_time += t_run.elapsed();
            out.extend(progress);
        }
        self.timing = ScoreTiming {
            prepare: t0.elapsed().saturating_sub(model_time),
            model: model_time,
        };
        Ok(out)
    }
}

/// Runs `score` on items `0..n` (episodes) on `workers` threads, each with its own model from `load(worker)`,
/// and returns the results in item order. While a worker's model loads (tens of milliseconds on the CPU,
/// minutes for a first TensorRT engine build) it reads items ahead with `read`, at least one and at most
/// `read_ahead`. The first error stops every worker after its current item and is returned; `done` sees each
/// result as it arrives (for progress bars).
pub fn score_in_workers<M, T, R, E>(
    n: usize,
    workers: usize,
    read_ahead: usize,
    load: impl Fn(usize) -> Result<M, E> + Sync,
    read: impl Fn(usize) -> Result<T, E> + Sync,
    score: impl Fn(&mut M, usize, T) -> Result<R, E> + Sync,
    mut done: impl FnMut(usize, &R),
) -> Result<Vec<R>, E>
where
    M: Send,
    T: Send,
    R: Send,
    E: Send,
{
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(usize, Result<R, E>)>();
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let mut first_err = None;
    let (load, read, score) = (&load, &read, &score);
    std::thread::scope(|s| {
        for w in 0..workers.clamp(1, n.max(1)) {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            s.spawn(move || {
                // The next item, or None when all are taken or a worker failed.
                let claim = || {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    (i < n && !stop.load(Ordering::Relaxed)).then_some(i)
                };
                let loader = s.spawn(move || load(w));
                let mut pending = std::collections::VecDeque::new();
                while pending.is_empty() || (!loader.is_finished() && pending.len() < read_ahead) {
                    match claim() {
                        Some(i) => pending.push_back((i, read(i))),
                        None => break,
                    }
                }
                let loaded = loader
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                let mut model = match loaded {
                    Ok(m) => m,
                    Err(e) => {
                        let i = pending.front().map_or(usize::MAX, |p| p.0);
                        let _ = tx.send((i, Err(e)));
                        return;
                    }
                };
                while let Some((i, item)) = pending
                    .pop_front()
                    .or_else(|| claim().map(|i| (i, read(i))))
                {
                    let r = item.and_then(|item| score(&mut model, i, item));
                    let failed = r.is_err();
                    if tx.send((i, r)).is_err() || failed {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            match r {
                Ok(r) => {
                    done(i, &r);
                    out[i] = Some(r);
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    if first_err.is_none() {
                        first_err = Some(e);
                    }
                }
            }
        }
    });
    if let Some(e) = first_err {
        return Err(e);
    }
    // Without an error every item was claimed and scored.
    Ok(out.into_iter().flatten().collect())
}
