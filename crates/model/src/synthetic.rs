//! Deterministic synthetic observations: a bright square moving across textured noise in every view, for
//! latency samples and benchmarks when no recording or simulator is at hand.

use stagewise_core::{Frame, Observation, View};

pub fn frame(seed: u64, step: u64, w: u32, h: u32) -> Frame {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ step.wrapping_add(1);
    let (cx, cy) = ((step * 3 + seed) % w as u64, (step * 2) % h as u64);
    let mut f = Frame::new(w, h);
    for (px, py, p) in f.enumerate_pixels_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let near =
            (px as u64).abs_diff(cx) < w as u64 / 6 && (py as u64).abs_diff(cy) < h as u64 / 6;
        let base = if near { 200 } else { 40 };
        p.0 = [
            base + (x & 31) as u8,
            base + ((x >> 8) & 31) as u8,
            base + ((x >> 16) & 31) as u8,
        ];
    }
    f
}

pub fn observation(
    views: &[String],
    seed: u64,
    step: u64,
    w: u32,
    h: u32,
    state_size: usize,
) -> Observation {
    Observation {
        step,
        time: step as f64 * 0.02,
        views: views
            .iter()
            .enumerate()
            .map(|(i, n)| View::new(n.clone(), frame(seed * 31 + i as u64, step, w, h)))
            .collect(),
        state: (0..state_size)
            .map(|i| ((seed + step) as f32 * 0.1 + i as f32).sin())
            .collect(),
    }
}
