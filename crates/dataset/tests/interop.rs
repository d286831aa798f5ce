//! Python interop: tests/interop.py reads the written dataset and sarm_progress.parquet with pyarrow.
//! Runs with `<repo>/.venv/bin/python` (scripts/setup.sh installs pyarrow there from scripts/requirements.txt);
//! skipped with a message when that interpreter does not exist.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use stagewise_dataset::{Dataset, Images, SarmProgress};

fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("STAGEWISE_PYTHON") {
        return Some(p.into());
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    venv.exists().then_some(venv)
}

#[test]
fn pyarrow_reads_dataset_and_progress() {
    let Some(py) = python() else {
        eprintln!("skipped: no .venv/bin/python (run scripts/setup.sh)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_dataset(&dir);

    // sarm_progress.parquet for every frame, ground truth progress as the "model" output.
    let ds = Dataset::open(&dir).unwrap();
    let mut p = SarmProgress {
        reward_model_path: Some("models/pick_cube/model.onnx".into()),
        ..Default::default()
    };
    for e in 0..ds.num_episodes() {
        let ep = ds.read_episode(e, Images::Skip).unwrap();
        p.index.extend(&ep.index);
        p.episode_index.extend(vec![e as i64; ep.len()]);
        p.frame_index.extend(&ep.frame_index);
        p.progress_sparse
            .extend(ep.extra("progress_gt").unwrap().iter().map(|&x| x as f32));
    }
    p.progress_dense = Some(p.progress_sparse.iter().map(|x| x * 0.5).collect());
    p.write(ds.sarm_progress_path()).unwrap();

    // Pixels to check after Python decodes the PNGs: (column, global row, x, y, rgb).
    let mut pixels = Vec::new();
    for (key, v) in [
        ("observation.images.top", 0usize),
        ("observation.images.wrist", 1),
    ] {
        for (row, e, f) in [(0usize, 0usize, 0usize), (12, 1, 2), (29, 2, 12)] {
            for (x, y) in [(0u32, 0u32), (5, 7), (W - 1, H - 1)] {
                let px = pixel(e, f, v, x, y);
                pixels.push(serde_json::json!([key, row, x, y, [px[0], px[1], px[2]]]));
            }
        }
    }
    let stage_names: Vec<String> = STAGES.iter().map(|s| s.to_string()).collect();
    let expect = serde_json::json!({
        "fps": 10,
        "episodes": 3,
        "frames": 30,
        "lengths": LENGTHS,
        "width": W,
        "height": H,
        "image_keys": ["observation.images.top", "observation.images.wrist"],
        "state0": state(0, 0),
        "pixels": pixels,
        "tasks": ["pick the cube", "stack the cubes"],
        "stage_names": stage_names,
        "stage_names_per_episode": [stage_names, null, stage_names],
        "reward_model_path": "models/pick_cube/model.onnx",
        "progress_sparse": p.progress_sparse,
    });
    let expect_path = tmp.path().join("expect.json");
    std::fs::write(&expect_path, expect.to_string()).unwrap();

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(&dir)
        .arg(&expect_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "interop.py failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("checks passed"), "{stdout}");
    println!("{stdout}");
}

#[test]
fn rust_reads_files_written_like_lerobot() {
    let Some(py) = python() else {
        eprintln!("skipped: no .venv/bin/python (run scripts/setup.sh)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_dataset(&dir);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg("--write-like-lerobot")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "interop.py --write-like-lerobot failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let ds = Dataset::open(&dir).unwrap();
    let p = SarmProgress::read(ds.sarm_progress_path()).unwrap();
    assert_eq!(
        p.reward_model_path.as_deref(),
        Some("pepijn223/sarm_single_uni4")
    );
    assert_eq!(p.len(), 30);
    assert_eq!(p.index[0], 29);
    assert_eq!(p.progress_sparse[0], 1.0);
    assert!(p
        .progress_dense
        .as_ref()
        .unwrap()
        .iter()
        .all(|x| x.is_nan()));

    // list<float> vectors and large_binary image bytes read the same as our fixed_size_list / binary.
    for (e, &len) in LENGTHS.iter().enumerate() {
        let ep = ds.read_episode(e, Images::Decode).unwrap();
        for f in 0..len {
            assert_eq!(ep.state(f), state(e, f).as_slice());
            assert_eq!(
                ep.images("observation.images.top").unwrap()[f],
                image(e, f, 0)
            );
        }
    }
}
