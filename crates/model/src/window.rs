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

/// The frame windows of one environment.
#[derive(Debug, Clone)]
pub struct FrameWindow {
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
        let (views, frames, stride) = (views.max(1), frames.max(1), stride.max(1));
        let w = views * frames;
        Self {
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
        self.views * self.frames * self.frame_len
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
            }
        }
    }
}
