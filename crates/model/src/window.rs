//! Per-environment frame windows, kept in the model's input layout so that scoring one environment needs no
//! gather copy: the window `t - (F-1) s, ..., t - s, t` of all views is one contiguous `[views, frames,
//! frame_len]` slice that ONNX Runtime reads in place.
//!
//! How: a window of `V` views by `F` frames is `W = V * F` frames long. Advancing by one frame along a single
//! "tape" slides every view's row at once: view `v`'s new frame goes to `base + v F + F - 1`, which held the
//! oldest frame of view `v + 1`, no longer needed. The tape is a mirrored ring of `2 W` frames (every frame is
//! written at `q` and `q ± W`), so the window `[base, base + W)` is always contiguous and nothing is ever
//! shifted. With a stride `s > 1` each phase (step index mod `s`) has its own tape. At episode start the first
//! frame fills every slot, so early windows repeat it.
//!
//! Cost per step: the new frames are normalised once and stored twice. Memory: `2 W s` frames per env.
//!
//! [`WindowLayout`] is the one definition of which frames a window holds and in what order; the ring above is
//! checked against it (the property test below), and offline scoring ([`crate::scoring`]) gathers its windows
//! of whole episodes with it, so the actor and `label`/`eval` feed a model the same windows.

/// Which frames the window of step `t` holds, and in what order: per view (the manifest's view order), the
/// `frames` frames `t - (frames - 1) stride, ..., t - stride, t`, oldest first, so a window is `[views, frames,
/// frame_len]`. Before the episode start (frame 0) the first frame repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowLayout {
    views: usize,
    frames: usize,
    stride: usize,
}

impl WindowLayout {
    /// `frames` per window and view, `stride` steps apart, `views` views (each at least 1).
    pub fn new(views: usize, frames: usize, stride: usize) -> Self {
        Self {
            views: views.max(1),
            frames: frames.max(1),
            stride: stride.max(1),
        }
    }

    /// The layout of a model's windows: its views, `frames` and `stride`.
    pub fn of(manifest: &crate::Manifest) -> Self {
        Self::new(manifest.views.len(), manifest.frames, manifest.stride)
    }

    pub fn views(&self) -> usize {
        self.views
    }

    pub fn frames(&self) -> usize {
        self.frames
    }

    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Values in one window of frames (or embeddings) of `frame_len` values each.
    pub fn window_len(&self, frame_len: usize) -> usize {
        self.views * self.frames * frame_len
    }

    /// The episode frame in slot `f` (0 = oldest) of the window whose newest frame is `t` (episode frames count
    /// from 0).
    pub fn frame(&self, t: usize, f: usize) -> usize {
        t.saturating_sub((self.frames - 1 - f) * self.stride)
    }

    /// The frames of the window of step `t`, oldest first (the same for every view).
    pub fn frames_of(&self, t: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.frames).map(move |f| self.frame(t, f))
    }

    /// Appends the window of step `t` to `out`: for each view `v`, for each of its frames `i` oldest first,
    /// `row(i, v)` (the `frame_len` values of frame `i` of view `v`).
    pub fn gather<'a>(
        &self,
        t: usize,
        mut row: impl FnMut(usize, usize) -> &'a [f32],
        out: &mut Vec<f32>,
    ) {
        for v in 0..self.views {
            for f in 0..self.frames {
                out.extend_from_slice(row(self.frame(t, f), v));
            }
        }
    }
}

/// The frame windows of one environment.
#[derive(Debug, Clone)]
pub struct FrameWindow {
    layout: WindowLayout,
    views: usize,
    frame_len: usize,
    frames: usize,
    /// One mirrored ring per phase, each `2 W` frames.
    tapes: Vec<Vec<f32>>,
    /// Start of each phase's window, in frames, in `0..W`.
    bases: Vec<usize>,
    /// Phase of the newest step.
    phase: usize,
}

impl FrameWindow {
    /// `frames` per window, `stride` steps apart, `views` frames of `frame_len` values per step.
    pub fn new(views: usize, frame_len: usize, frames: usize, stride: usize) -> Self {
        Self::with_layout(WindowLayout::new(views, frames, stride), frame_len)
    }

    /// The windows of `layout`, frames of `frame_len` values.
    pub fn with_layout(layout: WindowLayout, frame_len: usize) -> Self {
        let (views, frames, stride) = (layout.views, layout.frames, layout.stride);
        let w = views * frames;
        Self {
            layout,
            views,
            frame_len,
            frames,
            tapes: vec![vec![0.0; 2 * w * frame_len]; stride],
            bases: vec![0; stride],
            phase: 0,
        }
    }

    /// Values in one window: `views * frames * frame_len`.
    pub fn window_len(&self) -> usize {
        self.layout.window_len(self.frame_len)
    }

    /// Which frames a window holds, in what order.
    pub fn layout(&self) -> WindowLayout {
        self.layout
    }

    /// Frames per window and view, times views.
    fn w(&self) -> usize {
        self.views * self.frames
    }

    /// Starts a step. `fresh` (first observation of an episode) starts every phase over; otherwise the next
    /// phase's window slides by one frame. Then fill each view with [`Self::write_view`].
    pub fn begin_step(&mut self, fresh: bool) {
        if fresh {
            self.phase = 0;
            self.bases.iter_mut().for_each(|b| *b = 0);
        } else {
            self.phase = (self.phase + 1) % self.tapes.len();
            let b = &mut self.bases[self.phase];
            *b = (*b + 1) % (self.views * self.frames);
        }
    }

    /// Writes view `v`'s frame of the current step: `fill` gets the two mirror slots of that frame (each
    /// `frame_len` values) and must write the same values into both. Returns what `fill` returned.
    pub fn write_view<R>(&mut self, v: usize, fill: impl FnOnce(&mut [f32], &mut [f32]) -> R) -> R {
        let (w, fl) = (self.w(), self.frame_len);
        let q = (self.bases[self.phase] + v * self.frames + self.frames - 1) % w;
        let (low, high) = self.tapes[self.phase].split_at_mut(w * fl);
        fill(
            &mut low[q * fl..(q + 1) * fl],
            &mut high[q * fl..(q + 1) * fl],
        )
    }

    /// Writes the current step's frame of every view from `frames` (`[views, frame_len]`, view order): each into
    /// both of its mirror slots ([`Self::write_view`] with copies).
    pub fn copy_views(&mut self, frames: &[f32]) {
        let fl = self.frame_len;
        for (v, frame) in frames.chunks_exact(fl).enumerate().take(self.views) {
            self.write_view(v, |slot, mirror| {
                slot.copy_from_slice(frame);
                mirror.copy_from_slice(frame);
            });
        }
    }

    /// Ends a fresh step (after [`Self::begin_step`] with `fresh` and every view written): the first frame of
    /// each view fills all of that view's slots in every phase.
    pub fn fill_from_newest(&mut self) {
        let (w, fl, f) = (self.w(), self.frame_len, self.frames);
        let (first, rest) = self.tapes.split_at_mut(1);
        let tape = &mut first[0];
        for v in 0..self.views {
            let newest = (v * f + f - 1) * fl;
            for slot in (0..2 * w).filter(|&q| q % w / f == v && q % w != v * f + f - 1) {
                tape.copy_within(newest..newest + fl, slot * fl);
            }
        }
        for other in rest {
            other.copy_from_slice(tape);
        }
    }

    /// The current window, `[views, frames, frame_len]`, oldest frame first.
    pub fn window(&self) -> &[f32] {
        let start = self.bases[self.phase] * self.frame_len;
        &self.tapes[self.phase][start..start + self.window_len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A step of `views` views, one value each: view `v` at step `t` is `t + v / 10`.
    fn push(w: &mut FrameWindow, t: u32, fresh: bool) {
        w.begin_step(fresh);
        for v in 0..w.views {
            let x = t as f32 + v as f32 / 10.0;
            w.write_view(v, |a, b| {
                a.fill(x);
                b.fill(x);
            });
        }
        if fresh {
            w.fill_from_newest();
        }
    }

    /// The window the definition asks for: frames `t - (F-1) s, ..., t`, clamped to the episode start `t0`.
    fn expected(views: usize, frames: usize, stride: usize, t0: u32, t: u32) -> Vec<f32> {
        let mut out = Vec::new();
        for v in 0..views {
            for f in 0..frames {
                let back = ((frames - 1 - f) * stride) as u32;
                let tt = t.saturating_sub(back).max(t0);
                out.push(tt as f32 + v as f32 / 10.0);
            }
        }
        out
    }

    /// The window [`WindowLayout::gather`] builds from the episode's frames (episode start `t0`).
    fn gathered(layout: WindowLayout, t0: u32, t: u32) -> Vec<f32> {
        let values: Vec<Vec<f32>> = (t0..=t)
            .map(|tt| {
                (0..layout.views())
                    .map(|v| tt as f32 + v as f32 / 10.0)
                    .collect()
            })
            .collect();
        let mut out = Vec::new();
        layout.gather(
            (t - t0) as usize,
            |i, v| std::slice::from_ref(&values[i][v]),
            &mut out,
        );
        out
    }

    #[test]
    fn layout_names_the_frames_of_a_window() {
        let l = WindowLayout::new(2, 3, 4);
        assert_eq!(l.frames_of(0).collect::<Vec<_>>(), [0, 0, 0]);
        assert_eq!(l.frames_of(5).collect::<Vec<_>>(), [0, 1, 5]);
        assert_eq!(l.frames_of(9).collect::<Vec<_>>(), [1, 5, 9]);
        assert_eq!(l.window_len(7), 2 * 3 * 7);
        // Zero frames, views or stride count as one.
        assert_eq!(WindowLayout::new(0, 0, 0), WindowLayout::new(1, 1, 1));
    }

    #[test]
    fn first_frame_repeats_then_stride_applies() {
        let mut w = FrameWindow::new(2, 1, 3, 2);
        push(&mut w, 0, true);
        assert_eq!(w.window(), [0.0, 0.0, 0.0, 0.1, 0.1, 0.1]);
        for t in 1..=5 {
            push(&mut w, t, false);
        }
        // newest t=5, stride 2: t=1, 3, 5
        assert_eq!(w.window(), [1.0, 3.0, 5.0, 1.1, 3.1, 5.1]);
        push(&mut w, 6, false);
        assert_eq!(w.window(), [2.0, 4.0, 6.0, 2.1, 4.1, 6.1]);
        // a new episode forgets the old one
        push(&mut w, 9, true);
        assert_eq!(w.window(), [9.0, 9.0, 9.0, 9.1, 9.1, 9.1]);
    }

    #[test]
    fn early_steps_pad_with_the_first_frame() {
        let mut w = FrameWindow::new(1, 1, 4, 1);
        push(&mut w, 1, true);
        push(&mut w, 2, false);
        assert_eq!(w.window(), [1.0, 1.0, 1.0, 2.0]);
    }

    #[test]
    fn frames_of_many_values_stay_whole() {
        let mut w = FrameWindow::new(3, 5, 4, 2);
        for t in 0..40u32 {
            w.begin_step(t == 0);
            for v in 0..3 {
                w.write_view(v, |a, b| {
                    for (i, (a, b)) in a.iter_mut().zip(b.iter_mut()).enumerate() {
                        *a = (t * 100 + v as u32 * 10 + i as u32) as f32;
                        *b = *a;
                    }
                });
            }
            if t == 0 {
                w.fill_from_newest();
            }
            let win = w.window();
            for v in 0..3 {
                for f in 0..4 {
                    let tt = t.saturating_sub(((3 - f) * 2) as u32);
                    for i in 0..5 {
                        let got = win[(v * 4 + f) * 5 + i];
                        assert_eq!(got, (tt * 100 + v as u32 * 10 + i as u32) as f32);
                    }
                }
            }
        }
    }

    proptest! {
        /// Over long runs with episode resets anywhere, the window always equals the definition.
        #[test]
        fn matches_the_definition(
            views in 1usize..4,
            frames in 1usize..5,
            stride in 1usize..4,
            resets in proptest::collection::vec(any::<bool>(), 1..120),
        ) {
            let mut w = FrameWindow::new(views, 1, frames, stride);
            let mut t0 = 0;
            for (t, &reset) in resets.iter().enumerate() {
                let t = t as u32;
                let fresh = t == 0 || reset;
                if fresh {
                    t0 = t;
                }
                push(&mut w, t, fresh);
                prop_assert_eq!(w.window(), &expected(views, frames, stride, t0, t)[..]);
                // The ring holds the windows offline scoring gathers with the layout.
                prop_assert_eq!(w.window(), &gathered(w.layout(), t0, t)[..]);
            }
        }
    }
}
