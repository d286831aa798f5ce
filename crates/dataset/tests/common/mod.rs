//! Small deterministic datasets for the tests.
#![allow(dead_code)]

use std::path::Path;

use image::{Rgb, RgbImage};
use stagewise_dataset::{
    ColumnValues, DatasetInfo, DatasetSummary, DatasetWriter, EpisodeData, ExtraColumnSpec,
    ExtraDtype, FrameData, FrameImage, StageAnnotation, ViewSpec,
};

pub const W: u32 = 16;
pub const H: u32 = 12;
pub const STAGES: [&str; 3] = ["reach", "grasp", "lift"];

/// Deterministic pixel pattern of episode `e`, frame `f`, view `v`.
pub fn pixel(e: usize, f: usize, v: usize, x: u32, y: u32) -> Rgb<u8> {
    Rgb([
        (x * 13 + f as u32 * 7) as u8,
        (y * 17 + e as u32 * 31) as u8,
        (v as u32 * 90 + x + y) as u8,
    ])
}

pub fn image(e: usize, f: usize, v: usize) -> RgbImage {
    RgbImage::from_fn(W, H, |x, y| pixel(e, f, v, x, y))
}

pub fn info() -> DatasetInfo {
    DatasetInfo {
        fps: 10,
        robot_type: Some("sim_arm".into()),
        state_names: (0..4).map(|i| format!("joint_{i}")).collect(),
        action_names: (0..3).map(|i| format!("dq_{i}")).collect(),
        views: vec![
            ViewSpec {
                name: "top".into(),
                height: H,
                width: W,
            },
            ViewSpec {
                name: "wrist".into(),
                height: H,
                width: W,
            },
        ],
        tasks: vec!["pick the cube".into()],
        extra_columns: vec![
            ExtraColumnSpec {
                name: "progress_gt".into(),
                dtype: ExtraDtype::Float32,
            },
            ExtraColumnSpec {
                name: "stage_gt".into(),
                dtype: ExtraDtype::Int64,
            },
        ],
        stage_names: None,
        frames_per_row_group: 4,
        ..DatasetInfo::default()
    }
}

pub fn state(e: usize, f: usize) -> Vec<f32> {
    (0..4)
        .map(|i| e as f32 + 0.1 * f as f32 - 0.5 * i as f32)
        .collect()
}

pub fn action(e: usize, f: usize) -> Vec<f32> {
    (0..3)
        .map(|i| (f as f32 * 0.3 + i as f32).sin() + e as f32)
        .collect()
}

/// Episode `e` with `len` frames; stage boundaries at 30% and 70% when annotated. The second view is given as
/// PNG bytes to exercise that input path.
pub fn episode(e: usize, len: usize, annotated: bool) -> EpisodeData {
    let b1 = (len * 3 / 10) as i64;
    let b2 = (len * 7 / 10) as i64;
    let frames = (0..len)
        .map(|f| {
            let mut png = Vec::new();
            image(e, f, 1)
                .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
                .expect("encode test png");
            FrameData {
                views: vec![FrameImage::Rgb(image(e, f, 0)), FrameImage::Png(png)],
                state: state(e, f),
                action: action(e, f),
                timestamp: f as f32 / 10.0,
            }
        })
        .collect();
    let progress: Vec<f32> = (0..len).map(|f| f as f32 / (len - 1) as f32).collect();
    let stage: Vec<i64> = (0..len as i64)
        .map(|f| {
            if f < b1 {
                0
            } else if f < b2 {
                1
            } else {
                2
            }
        })
        .collect();
    EpisodeData {
        task: if e == 2 {
            "stack the cubes".into()
        } else {
            "pick the cube".into()
        },
        frames,
        stages: annotated.then(|| StageAnnotation {
            names: STAGES.iter().map(|s| s.to_string()).collect(),
            start_frames: vec![0, b1, b2],
            end_frames: vec![b1, b2, len as i64],
        }),
        success: e != 1,
        extras: vec![
            ("progress_gt".into(), ColumnValues::F32(progress)),
            ("stage_gt".into(), ColumnValues::I64(stage)),
        ],
    }
}

pub const LENGTHS: [usize; 3] = [10, 7, 13];

/// Three episodes (lengths 10, 7, 13); episodes 0 and 2 annotated.
pub fn write_dataset(dir: &Path) -> DatasetSummary {
    let mut w = DatasetWriter::create(dir, info()).expect("create");
    for (e, &len) in LENGTHS.iter().enumerate() {
        w.add_episode(&episode(e, len, e != 1))
            .expect("add episode");
    }
    w.finish().expect("finish")
}
