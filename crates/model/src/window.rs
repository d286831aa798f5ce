//! Per-environment frame windows: a ring buffer of preprocessed frames (all views of one step per slot) from
//! which the window `t - (F-1) s, ..., t - s, t` is gathered. At episode start the first frame fills the ring, so
//! early windows repeat it.

/// Ring of the last `history` steps of one environment, each slot holding every view's preprocessed frame.
#[derive(Debug, Clone)]
pub struct FrameWindow {
    views: usize,
    frame_len: usize,
    frames: usize,
    stride: usize,
    slots: Vec<Vec<f32>>,
    newest: usize,
}

impl FrameWindow {
    /// `frames` per window, `stride` steps apart, `views` frames of `frame_len` values per step.
    pub fn new(views: usize, frame_len: usize, frames: usize, stride: usize) -> Self {
        let history = (frames.max(1) - 1) * stride.max(1) + 1;
        Self {
            views,
            frame_len,
            frames: frames.max(1),
            stride: stride.max(1),
            slots: vec![vec![0.0; views * frame_len]; history],
            newest: 0,
        }
    }

    /// Values per step (all views).
    pub fn step_len(&self) -> usize {
        self.views * self.frame_len
    }

    /// Starts an episode from the newest slot (filled through [`Self::newest_mut`]): every slot becomes a copy.
    pub fn reset_to_newest(&mut self) {
        let (first, rest) = self.slots.split_at_mut(1);
        if self.newest != 0 {
            first[0].copy_from_slice(&rest[self.newest - 1]);
            self.newest = 0;
        }
        for s in rest {
            s.copy_from_slice(&first[0]);
        }
    }

    /// Advances one step; returns the slot to fill with the new step's frames.
    pub fn advance(&mut self) -> &mut [f32] {
        self.newest = (self.newest + 1) % self.slots.len();
        &mut self.slots[self.newest]
    }

    /// Slot of the newest step (to fill after [`Self::advance`] or before [`Self::reset_to_newest`]).
    pub fn newest_mut(&mut self) -> &mut [f32] {
        &mut self.slots[self.newest]
    }

    /// Writes the window as `[views, frames, frame_len]` (oldest frame first) into `out`.
    pub fn gather(&self, out: &mut [f32]) {
        let n = self.slots.len();
        for f in 0..self.frames {
            let back = (self.frames - 1 - f) * self.stride;
            let slot = &self.slots[(self.newest + n - back) % n];
            for v in 0..self.views {
                let dst = (v * self.frames + f) * self.frame_len;
                out[dst..dst + self.frame_len]
                    .copy_from_slice(&slot[v * self.frame_len..(v + 1) * self.frame_len]);
            }
        }
    }

    /// Values in one gathered window: `views * frames * frame_len`.
    pub fn window_len(&self) -> usize {
        self.views * self.frames * self.frame_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(v: f32) -> Vec<f32> {
        vec![v, v + 0.5] // two views, one value each
    }

    fn reset(w: &mut FrameWindow, step: &[f32]) {
        w.newest_mut().copy_from_slice(step);
        w.reset_to_newest();
    }

    #[test]
    fn first_frame_repeats_then_stride_applies() {
        let mut w = FrameWindow::new(2, 1, 3, 2);
        reset(&mut w, &step(0.0));
        let mut out = vec![0.0; w.window_len()];
        w.gather(&mut out);
        // [view0: f0 f1 f2, view1: f0 f1 f2]
        assert_eq!(out, vec![0.0, 0.0, 0.0, 0.5, 0.5, 0.5]);
        for t in 1..=5 {
            w.advance().copy_from_slice(&step(t as f32));
        }
        w.gather(&mut out);
        // newest t=5, stride 2: t=1, 3, 5
        assert_eq!(out, vec![1.0, 3.0, 5.0, 1.5, 3.5, 5.5]);
        w.advance().copy_from_slice(&step(6.0));
        w.gather(&mut out);
        assert_eq!(out, vec![2.0, 4.0, 6.0, 2.5, 4.5, 6.5]);
        // a new episode forgets the old one
        reset(&mut w, &step(9.0));
        w.gather(&mut out);
        assert_eq!(out, vec![9.0, 9.0, 9.0, 9.5, 9.5, 9.5]);
    }

    #[test]
    fn early_steps_pad_with_the_first_frame() {
        let mut w = FrameWindow::new(1, 1, 4, 1);
        reset(&mut w, &[1.0]);
        w.advance().copy_from_slice(&[2.0]);
        let mut out = vec![0.0; 4];
        w.gather(&mut out);
        assert_eq!(out, vec![1.0, 1.0, 1.0, 2.0]);
    }
}
