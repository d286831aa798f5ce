//! docs/own-task.md end to end, every command of the walkthrough (with 6 episodes and 2 short epochs): record a video
//! dataset, annotate (export, clear, train refuses, import), train, evaluate, label for RA-BC, adapt from one
//! demonstration (10 steps), run as the reward.
//! Also: recorded video frames against the same episodes recorded as PNG (PSNR of the codec, reported), and the
//! clear errors of `train` (simulator-only state, a missing view, ffmpeg missing).

use stagewise_dataset::{Dataset, Images, SarmProgress};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_stagewise")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn stagewise(args: &[&str]) -> Output {
    Command::new(exe())
        .current_dir(root())
        .args(["--log", "warn"])
        .args(args)
        .output()
        .expect("run stagewise")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn err(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected a failure, got: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn record(out: &Path, video: bool) -> String {
    let mut args = vec![
        "record",
        "--task",
        "pick-place",
        "--episodes",
        "6",
        "--degraded",
        "0",
        "--seed",
        "21",
        "--width",
        "32",
        "--height",
        "32",
        "--threads",
        "2",
        "--out",
        s(out),
    ];
    if video {
        args.push("--video");
    }
    ok(&stagewise(&args))
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let se: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum();
    let mse = se / a.len() as f64;
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }
}

#[test]
fn walkthrough_record_annotate_train_eval_label_run() {
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("my-task");
    let model_dir = tmp.path().join("models/my-task");
    let manifest = model_dir.join("my-task-progress.toml");

    // 1. Record a LeRobot v3 dataset whose cameras are AV1 videos.
    let out = record(&ds, true);
    assert!(out.contains("videos (front, side, wrist): av1"), "{out}");
    let t_record = t0.elapsed();

    // The same episodes as PNG image columns: the video frames are those frames within the codec's loss.
    let png = tmp.path().join("png");
    record(&png, false);
    let (v, p) = (Dataset::open(&ds).unwrap(), Dataset::open(&png).unwrap());
    assert_eq!(v.video_keys().len(), 3);
    assert_eq!(v.num_frames(), p.num_frames());
    let mut report = Vec::new();
    for key in v.video_keys() {
        let (mut sum, mut n, mut worst) = (0.0, 0usize, f64::INFINITY);
        for e in 0..v.num_episodes() {
            let a = v.read_episode(e, Images::Decode).unwrap();
            let b = p.read_episode(e, Images::Decode).unwrap();
            for (x, y) in a.images(key).unwrap().iter().zip(b.images(key).unwrap()) {
                let q = psnr(x.as_raw(), y.as_raw());
                sum += q;
                n += 1;
                worst = worst.min(q);
            }
        }
        let mean = sum / n as f64;
        report.push(format!("{key}: mean {mean:.2} dB, worst {worst:.2} dB"));
        assert!(
            mean >= 29.0 && worst >= 24.0,
            "{key}: PSNR mean {mean:.2}, worst {worst:.2}"
        );
    }
    eprintln!(
        "AV1 crf 30 (libaom-av1) on 32x32 sim frames, {} frames: {}",
        v.num_frames(),
        report.join("; ")
    );

    // `train` reads image datasets the same way: the PNG recording prepares the same arrays' shapes.
    let prep = tmp.path().join("prep");
    ok(&stagewise(&[
        "train",
        "--dataset",
        s(&png),
        "--views",
        "front,side,wrist",
        "--state",
        "ee_x,ee_y,ee_z,gripper_width",
        "--out",
        s(&prep),
        "--prepare-only",
    ]));
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(prep.join("prep-progress.train-data/meta.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        meta["view_keys"],
        serde_json::json!([
            "observation.images.front",
            "observation.images.side",
            "observation.images.wrist"
        ])
    );
    assert!(meta["episodes"].as_array().unwrap().len() >= 5);

    // 2. Annotate: export the recorded stages, clear them (a dataset as it would come without annotations),
    //    see train refuse it, then write them back from the JSON file.
    let stages = tmp.path().join("stages.json");
    ok(&stagewise(&[
        "annotate",
        "--dataset",
        s(&ds),
        "--export",
        s(&stages),
    ]));
    let before: Vec<_> = v.episodes().iter().map(|e| e.stages.clone()).collect();
    assert!(before.iter().filter(|a| a.is_some()).count() >= 5);
    ok(&stagewise(&["annotate", "--dataset", s(&ds), "--clear"]));
    let train_args = [
        "train",
        "--dataset",
        s(&ds),
        "--views",
        "front,side,wrist",
        "--state",
        "ee_x,ee_y,ee_z,gripper_width",
        "--out",
        s(&model_dir),
        "--epochs",
        "2",
        "--samples-per-epoch",
        "512",
        "--val-every",
        "3",
    ];
    let e = err(&stagewise(&train_args));
    assert!(
        e.contains("no stage annotation")
            && e.contains("sparse_subtask_names")
            && e.contains("stagewise annotate")
            && e.contains("temporal_proportions_sparse.json"),
        "{e}"
    );
    ok(&stagewise(&[
        "annotate",
        "--dataset",
        s(&ds),
        "--from",
        s(&stages),
    ]));
    let after: Vec<_> = Dataset::open(&ds)
        .unwrap()
        .episodes()
        .iter()
        .map(|e| e.stages.clone())
        .collect();
    assert_eq!(after, before);
    // The short form a person gives, stage starts only (each stage ends where the next starts, the last at the
    // episode's end), reads back the same annotations where they are contiguous.
    let mut file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stages).unwrap()).unwrap();
    let frames = |e: &serde_json::Value, k: &str| -> Vec<i64> {
        e[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect()
    };
    let mut short = 0;
    for e in file["episodes"].as_array_mut().unwrap() {
        let (starts, ends) = (frames(e, "start_frames"), frames(e, "end_frames"));
        let ep = e["episode_index"].as_u64().unwrap() as usize;
        let len = v
            .episodes()
            .iter()
            .find(|m| m.episode_index == ep)
            .unwrap()
            .length as i64;
        if starts[1..] == ends[..ends.len() - 1] && ends.last() == Some(&len) {
            e.as_object_mut().unwrap().remove("end_frames");
            short += 1;
        }
    }
    assert!(
        short >= 3,
        "{short} episodes with contiguous stages: {file}"
    );
    let starts_only = tmp.path().join("starts.json");
    std::fs::write(&starts_only, file.to_string()).unwrap();
    ok(&stagewise(&["annotate", "--dataset", s(&ds), "--clear"]));
    ok(&stagewise(&[
        "annotate",
        "--dataset",
        s(&ds),
        "--from",
        s(&starts_only),
    ]));
    let short_after: Vec<_> = Dataset::open(&ds)
        .unwrap()
        .episodes()
        .iter()
        .map(|e| e.stages.clone())
        .collect();
    assert_eq!(short_after, before);
    // Outcome labels a person gives (`success`, an entry may give only it) land in the `success` column; an
    // episode out of range is refused before anything is written.
    let outcomes = tmp.path().join("outcomes.json");
    std::fs::write(
        &outcomes,
        r#"{"episodes": [{"episode_index": 0, "success": false}, {"episode_index": 1, "success": true}]}"#,
    )
    .unwrap();
    let said = ok(&stagewise(&[
        "annotate",
        "--dataset",
        s(&ds),
        "--from",
        s(&outcomes),
    ]));
    assert!(said.contains("2 outcomes labelled"), "{said}");
    let labelled = Dataset::open(&ds).unwrap();
    let flags: Vec<Option<bool>> = labelled.episodes().iter().map(|e| e.success).collect();
    assert_eq!(&flags[..2], &[Some(false), Some(true)], "{flags:?}");
    let stages_kept: Vec<_> = labelled
        .episodes()
        .iter()
        .map(|e| e.stages.clone())
        .collect();
    assert_eq!(
        stages_kept, before,
        "outcome labels leave the stages as they were"
    );
    std::fs::write(
        &outcomes,
        r#"{"episodes": [{"episode_index": 99, "success": true}]}"#,
    )
    .unwrap();
    let e = err(&stagewise(&[
        "annotate",
        "--dataset",
        s(&ds),
        "--from",
        s(&outcomes),
    ]));
    assert!(e.contains("episode 99: out of range"), "{e}");

    // 3. Train: single graph + two-part form + manifest + training record, validation metrics printed.
    let t_train = Instant::now();
    let out = ok(&stagewise(&train_args));
    let t_train = t_train.elapsed();
    assert!(
        out.contains("training set: ") && out.contains("val ") && out.contains("VOC"),
        "{out}"
    );
    for f in [
        "my-task-progress.onnx",
        "my-task-progress.encoder.onnx",
        "my-task-progress.head.onnx",
        "my-task-progress.step.onnx",
        "my-task-progress.toml",
        "my-task-progress.train.json",
    ] {
        assert!(model_dir.join(f).is_file(), "{f} missing: {out}");
    }
    assert!(!model_dir.join("my-task-progress.train-data").exists());
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(
        text.contains(r#"views = ["front", "side", "wrist"]"#)
            && text.contains(r#"state_names = ["ee_x", "ee_y", "ee_z", "gripper_width"]"#)
            && text.contains("[parts]")
            && text.contains(r#"step = "my-task-progress.step.onnx""#)
            && text.contains(r#"names = ["reach", "grasp", "lift", "carry", "place", "release"]"#),
        "{text}"
    );
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(model_dir.join("my-task-progress.train.json")).unwrap(),
    )
    .unwrap();
    let val = &record["validation"]["val"];
    assert!(val["episodes"].as_u64().unwrap() >= 1, "{record}");
    for m in ["mae", "stage_acc", "mae_views_blanked"] {
        let x = val[m].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&x), "{m} = {x}");
    }
    assert_eq!(record["trained_by"], "stagewise train");
    // A second run into the same model refuses to overwrite it.
    let e = err(&stagewise(&train_args));
    assert!(e.contains("exists") && e.contains("--force"), "{e}");

    // 4. Evaluate on a recorded dataset (the sim's ground truth: VOC, MAE, stage accuracy ...).
    let out = ok(&stagewise(&[
        "eval",
        "model",
        "--model",
        s(&manifest),
        "--dataset",
        s(&png),
    ]));
    assert!(out.contains("VOC") && out.contains("progress MAE"), "{out}");
    // The ablations (every view blanked, one view missing): what the model reads.
    let out = ok(&stagewise(&[
        "eval",
        "model",
        "--model",
        s(&manifest),
        "--dataset",
        s(&png),
        "--ablations",
    ]));
    assert!(out.contains("blanked"), "{out}");

    // 5. Label every frame for RA-BC: sarm_progress.parquet in the dataset, read from the AV1 videos.
    let out = ok(&stagewise(&[
        "label",
        "--dataset",
        s(&ds),
        "--model",
        s(&manifest),
        "--plots",
        "0",
    ]));
    assert!(out.contains("sarm_progress.parquet"), "{out}");
    let prog = SarmProgress::read(ds.join("sarm_progress.parquet")).unwrap();
    assert_eq!(prog.index.len() as u64, v.num_frames());
    assert!(prog
        .progress_sparse
        .iter()
        .all(|x| x.is_finite() && (0.0..=1.0).contains(x)));

    // 7 (docs: "Adapt to a variant"). Adapt the model from one annotated demonstration (a few steps here), with
    //    another episode replayed as the original task: the same files as train writes, the model's views, state,
    //    stages and readout (train's default, soft) kept.
    let adapted = tmp.path().join("models/my-task-dark");
    let out = ok(&stagewise(&[
        "adapt",
        "--model",
        s(&manifest),
        "--demo",
        &format!("{}:0", s(&ds)),
        "--replay",
        &format!("{}:1", s(&ds)),
        "--out",
        s(&adapted),
        "--steps",
        "10",
    ]));
    assert!(out.contains("demonstrations_after"), "{out}");
    assert!(
        out.contains("replaying 1 episode(s) of the original task"),
        "{out}"
    );
    assert!(!adapted.join("my-task-dark-progress.replay-data").exists());
    let text = std::fs::read_to_string(adapted.join("my-task-dark-progress.toml")).unwrap();
    assert!(
        text.contains(r#"views = ["front", "side", "wrist"]"#)
            && text.contains(r#"state_names = ["ee_x", "ee_y", "ee_z", "gripper_width"]"#)
            && text.contains("[parts]")
            && text.contains(r#"step = "my-task-dark-progress.step.onnx""#)
            && text.contains(r#"progress = "soft""#),
        "{text}"
    );
    let e = err(&stagewise(&[
        "adapt",
        "--model",
        s(&manifest),
        "--demo",
        &format!("{}:99", s(&ds)),
        "--out",
        s(&tmp.path().join("x")),
    ]));
    assert!(e.contains("episode 99"), "{e}");

    // 6. The reward of `stagewise run` (simulated pick-place, the expert policy, no stream).
    let log = tmp.path().join("run.swlog");
    let out = stagewise(&[
        "run",
        "--task",
        "pick-place",
        "--model",
        s(&manifest),
        "--envs",
        "1",
        "--episodes",
        "1",
        "--width",
        "32",
        "--height",
        "32",
        "--no-stream",
        "--log-file",
        s(&log),
    ]);
    ok(&out);
    assert!(log.is_file());
    eprintln!(
        "walkthrough: {:.1} s (record video {:.1} s, train {:.1} s)",
        t0.elapsed().as_secs_f64(),
        t_record.as_secs_f64(),
        t_train.as_secs_f64()
    );
}

#[test]
fn train_inputs_and_refusals() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    ok(&stagewise(&[
        "record",
        "--task",
        "push-target",
        "--episodes",
        "1",
        "--width",
        "16",
        "--height",
        "16",
        "--video",
        "--video-codec",
        "h264",
        "--out",
        s(&ds),
    ]));
    let out = tmp.path().join("m");
    let train = |views: &str, state: &str| {
        stagewise(&[
            "train",
            "--dataset",
            s(&ds),
            "--views",
            views,
            "--state",
            state,
            "--out",
            s(&out),
        ])
    };
    let e = err(&train("front", "gripper_width,block0_x"));
    assert!(
        e.contains("block0_x") && e.contains("proprioception"),
        "{e}"
    );
    let e = err(&train("front", "target_x"));
    assert!(e.contains("target_x"), "{e}");
    let e = err(&train("top", "gripper_width"));
    assert!(
        e.contains("`top`") && e.contains("observation.images.front"),
        "{e}"
    );
    let e = err(&train("front", "joint_7"));
    assert!(e.contains("joint_7") && e.contains("gripper_width"), "{e}");

    // No per-episode annotation, only temporal_proportions_sparse.json: time-linear stages at those shares;
    // frames resized to --image-size. --prepare-only stops before training, keeping the arrays.
    ok(&stagewise(&["annotate", "--dataset", s(&ds), "--clear"]));
    std::fs::write(
        ds.join("meta/temporal_proportions_sparse.json"),
        r#"{"reach": 0.25, "push": 0.25, "settle": 0.5}"#,
    )
    .unwrap();
    let prep = tmp.path().join("prep");
    ok(&stagewise(&[
        "train",
        "--dataset",
        s(&ds),
        "--views",
        "front,wrist",
        "--state",
        "gripper_width",
        "--out",
        s(&prep),
        "--image-size",
        "8x8",
        "--val-every",
        "0",
        "--prepare-only",
    ]));
    let data = prep.join("prep-progress.train-data");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        meta["stage_names"],
        serde_json::json!(["reach", "push", "settle"])
    );
    assert_eq!(
        meta["episodes"][0]["targets"],
        "temporal_proportions_sparse"
    );
    let len = meta["episodes"][0]["length"].as_u64().unwrap() as usize;
    let header = |f: &str| {
        let b = std::fs::read(data.join(f)).unwrap();
        let n = u16::from_le_bytes([b[8], b[9]]) as usize;
        (
            String::from_utf8_lossy(&b[10..10 + n]).to_string(),
            b[10 + n..].to_vec(),
        )
    };
    let (h, px) = header("frames.npy");
    assert!(h.contains(&format!("'shape': ({len}, 2, 8, 8, 3)")), "{h}");
    assert_eq!(px.len(), len * 2 * 8 * 8 * 3);
    let (_, stage) = header("stage.npy");
    let stage: Vec<i64> = stage
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // Stage boundaries at 25% and 50% of the episode.
    assert_eq!(stage[0], 0);
    assert_eq!(stage[len / 4 + 1], 1);
    assert_eq!(stage[len / 2 + 1], 2);
    assert!(stage.windows(2).all(|w| w[0] <= w[1]));
    // Video needs ffmpeg: without it, reading says what to install.
    let out = Command::new(exe())
        .current_dir(root())
        .env("STAGEWISE_FFMPEG", "/nonexistent/ffmpeg")
        .args([
            "--log",
            "warn",
            "label",
            "--dataset",
            s(&ds),
            "--model",
            "models/push-target/push-target-progress.toml",
        ])
        .output()
        .unwrap();
    let e = err(&out);
    assert!(
        e.contains("/nonexistent/ffmpeg") && e.contains("scripts/setup.sh"),
        "{e}"
    );
}
