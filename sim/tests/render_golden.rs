//! The renderer keeps its look: frames of fixed seeds (expert episodes, all three views at 96x96) are compared
//! with golden frames in `tests/golden/`, written by the renderer that the shipped vision models were trained
//! on (every pixel's ray through rapier's query pipeline, as of commit 67410fc).
//!
//! Each case is one RGB PNG (rows: state indices in `STEPS`, columns: front, side, wrist) and one 16-bit PNG
//! of depth in millimetres (65535: no hit). Bar: every RGB channel within 1 of the golden value and depth
//! within 1 mm on at least 99.9 % of pixels per case (the number of exactly equal pixels is printed).
//! `STAGEWISE_BLESS=1 cargo test -p stagewise-sim --release --test integration render_golden::` rewrites the files: only
//! when the look is meant to change (and the models retrained).

use image::{ImageBuffer, Luma, RgbImage};
use stagewise_sim::{rollout_with, Degradation, SimConfig, Task};
use std::path::PathBuf;

const STEPS: [usize; 6] = [0, 20, 40, 60, 80, 100];
const SIZE: u32 = 96;

fn cases() -> Vec<(&'static str, SimConfig, u64)> {
    let mut jittered = SimConfig::new(Task::PickPlace);
    jittered.randomization.colors = true;
    jittered.randomization.camera_jitter = 0.01;
    vec![
        ("pick_place_s3", SimConfig::new(Task::PickPlace), 3),
        ("push_target_s5", SimConfig::new(Task::PushTarget), 5),
        ("stack_s11", SimConfig::new(Task::Stack), 11),
        ("pick_place_jitter_colors_s8", jittered, 8),
    ]
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("golden")
}

/// Renders one case into an RGB grid and a depth grid (millimetres).
fn render_case(cfg: &SimConfig, seed: u64) -> (RgbImage, ImageBuffer<Luma<u16>, Vec<u16>>) {
    let rec = rollout_with(cfg, seed, Degradation::none()).expect("rollout");
    let frames = rec.frames.expect("frames");
    let n_views = frames[0].len() as u32;
    let mut rgb = RgbImage::new(SIZE * n_views, SIZE * STEPS.len() as u32);
    let mut dep =
        ImageBuffer::<Luma<u16>, Vec<u16>>::new(SIZE * n_views, SIZE * STEPS.len() as u32);
    for (row, &step) in STEPS.iter().enumerate() {
        // episodes shorter than a step index repeat their last frame
        let views = &frames[step.min(frames.len() - 1)];
        for (col, view) in views.iter().enumerate() {
            let (ox, oy) = (col as u32 * SIZE, row as u32 * SIZE);
            let depth = view.depth.as_ref().expect("depth");
            for y in 0..SIZE {
                for x in 0..SIZE {
                    rgb.put_pixel(ox + x, oy + y, *view.rgb.get_pixel(x, y));
                    let d = depth[(y * SIZE + x) as usize];
                    let q = if d.is_finite() {
                        (d * 1_000.0).round().min(65_534.0) as u16
                    } else {
                        65_535
                    };
                    dep.put_pixel(ox + x, oy + y, Luma([q]));
                }
            }
        }
    }
    (rgb, dep)
}

#[test]
fn frames_match_the_golden_frames() {
    let dir = golden_dir();
    let bless = std::env::var("STAGEWISE_BLESS").is_ok_and(|v| v == "1");
    for (name, cfg, seed) in cases() {
        assert_eq!((cfg.cameras[0].width, cfg.cameras[0].height), (SIZE, SIZE));
        let (rgb, dep) = render_case(&cfg, seed);
        let rgb_path = dir.join(format!("{name}_rgb.png"));
        let dep_path = dir.join(format!("{name}_depth.png"));
        if bless {
            std::fs::create_dir_all(&dir).expect("golden dir");
            rgb.save(&rgb_path).expect("write golden rgb");
            dep.save(&dep_path).expect("write golden depth");
            continue;
        }
        let want_rgb = image::open(&rgb_path).expect("golden rgb").to_rgb8();
        let want_dep = image::open(&dep_path).expect("golden depth").to_luma16();
        assert_eq!(want_rgb.dimensions(), rgb.dimensions(), "{name}");
        let total = rgb.pixels().len();
        let mut exact = 0;
        let mut within = 0;
        let mut max_diff = 0u8;
        for (a, b) in rgb.pixels().zip(want_rgb.pixels()) {
            let d = (0..3).map(|c| a.0[c].abs_diff(b.0[c])).max().unwrap_or(0);
            max_diff = max_diff.max(d);
            exact += (d == 0) as usize;
            within += (d <= 1) as usize;
        }
        let dep_within = dep
            .pixels()
            .zip(want_dep.pixels())
            .filter(|(a, b)| a.0[0].abs_diff(b.0[0]) <= 1)
            .count();
        eprintln!(
            "{name}: rgb exact {exact}/{total}, within 1: {within}, max diff {max_diff}; depth within 1 mm: {dep_within}"
        );
        assert!(
            within * 1000 >= total * 999,
            "{name}: rgb {within}/{total} within 1"
        );
        assert!(
            dep_within * 1000 >= total * 999,
            "{name}: depth {dep_within}/{total} within 1 mm"
        );
    }
}
