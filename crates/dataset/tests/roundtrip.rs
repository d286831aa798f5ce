//! Write -> read round trip of a small dataset, and the meta files' contents.

use crate::common;

use common::*;
use stagewise_core::StageProportions;
use stagewise_dataset::{Dataset, Images, SarmProgress, CODEBASE_VERSION};

#[test]
fn round_trip_frames_images_annotations() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let summary = write_dataset(&dir);
    assert_eq!(summary.episodes, 3);
    assert_eq!(summary.frames, 30);
    assert_eq!(summary.data_files, 1);

    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.info().codebase_version, CODEBASE_VERSION);
    assert_eq!(ds.fps(), 10);
    assert_eq!(ds.num_episodes(), 3);
    assert_eq!(ds.num_frames(), 30);
    assert_eq!(ds.tasks(), ["pick the cube", "stack the cubes"]);
    assert_eq!(
        ds.camera_keys(),
        ["observation.images.top", "observation.images.wrist"]
    );
    assert_eq!(ds.camera_key("top").unwrap(), "observation.images.top");
    assert_eq!(
        ds.camera_key("observation.images.wrist").unwrap(),
        "observation.images.wrist"
    );
    let msg = ds.camera_key("side").unwrap_err().to_string();
    assert!(
        msg.contains("info.json")
            && msg.contains("`side`")
            && msg.contains("observation.images.top"),
        "{msg}"
    );
    assert_eq!(
        ds.state_names().unwrap(),
        ["joint_0", "joint_1", "joint_2", "joint_3"]
    );
    assert_eq!(ds.action_names().unwrap().len(), 3);

    let mut from = 0;
    for (e, &len) in LENGTHS.iter().enumerate() {
        let meta = &ds.episodes()[e];
        assert_eq!(meta.episode_index, e);
        assert_eq!(meta.length, len);
        assert_eq!(
            (meta.dataset_from_index, meta.dataset_to_index),
            (from, from + len as u64)
        );
        assert_eq!(meta.success, Some(e != 1));
        assert_eq!(
            meta.tasks,
            [if e == 2 {
                "stack the cubes"
            } else {
                "pick the cube"
            }]
        );
        let written = episode(e, len, e != 1);
        assert_eq!(meta.stages, written.stages);

        let ep = ds.read_episode(e, Images::Decode).unwrap();
        // Decoding on the calling thread reads the same episode (the label workers use it).
        assert_eq!(ds.read_episode(e, Images::DecodeOnThisThread).unwrap(), ep);
        assert_eq!(ep.len(), len);
        assert_eq!(ep.frame_index, (0..len as i64).collect::<Vec<_>>());
        assert_eq!(
            ep.index,
            (from as i64..(from + len as u64) as i64).collect::<Vec<_>>()
        );
        assert_eq!(ep.task_index, vec![if e == 2 { 1 } else { 0 }; len]);
        for f in 0..len {
            assert_eq!(ep.state(f), state(e, f).as_slice());
            assert_eq!(ep.action(f), action(e, f).as_slice());
            assert_eq!(ep.timestamp[f], f as f32 / 10.0);
            assert_eq!(
                ep.images("observation.images.top").unwrap()[f],
                image(e, f, 0)
            );
            assert_eq!(
                ep.images("observation.images.wrist").unwrap()[f],
                image(e, f, 1)
            );
        }
        let prog = ep.extra("progress_gt").unwrap();
        assert!((prog[len - 1] - 1.0).abs() < 1e-6);
        let stage = ep.extra("stage_gt").unwrap();
        assert_eq!(stage[len - 1], 2.0);

        let skipped = ds.read_episode(e, Images::Skip).unwrap();
        assert!(skipped.images.is_empty());
        assert_eq!(skipped.state, ep.state);
        from += len as u64;
    }
    assert!(ds.read_episode(3, Images::Skip).is_err());
}

#[test]
fn temporal_proportions_match_core() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let summary = write_dataset(&dir);
    let durations: Vec<Vec<f64>> = [0, 2]
        .iter()
        .map(|&e| episode(e, LENGTHS[e], true).stages.unwrap().durations())
        .collect();
    let expected = StageProportions::from_durations(&durations).unwrap();
    let ds = Dataset::open(&dir).unwrap();
    let props = ds.temporal_proportions_sparse().unwrap();
    assert_eq!(
        props.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        STAGES
    );
    for ((_, got), want) in props.iter().zip(expected.proportions()) {
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
    assert_eq!(summary.stage_proportions.unwrap(), props.to_vec());
    // The file itself: a JSON object in stage order.
    let text = std::fs::read_to_string(dir.join("meta/temporal_proportions_sparse.json")).unwrap();
    let (r, g, l) = (
        text.find("reach").unwrap(),
        text.find("grasp").unwrap(),
        text.find("lift").unwrap(),
    );
    assert!(r < g && g < l);
}

#[test]
fn info_and_stats_json() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_dataset(&dir);
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta/info.json")).unwrap())
            .unwrap();
    assert_eq!(info["codebase_version"], "v3.0");
    assert_eq!(info["total_episodes"], 3);
    assert_eq!(info["total_frames"], 30);
    assert_eq!(info["total_tasks"], 2);
    assert_eq!(info["chunks_size"], 1000);
    assert_eq!(info["splits"]["train"], "0:3");
    assert_eq!(
        info["data_path"],
        "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    );
    assert!(info["video_path"].is_null());
    let f = &info["features"];
    assert_eq!(f["observation.images.top"]["dtype"], "image");
    assert_eq!(
        f["observation.images.top"]["shape"],
        serde_json::json!([H, W, 3])
    );
    assert_eq!(
        f["observation.images.top"]["names"],
        serde_json::json!(["height", "width", "channels"])
    );
    assert_eq!(f["observation.state"]["shape"], serde_json::json!([4]));
    assert_eq!(f["action"]["names"][2], "dq_2");
    assert_eq!(f["timestamp"]["dtype"], "float32");
    assert_eq!(f["index"]["dtype"], "int64");
    assert_eq!(f["progress_gt"]["dtype"], "float32");

    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta/stats.json")).unwrap())
            .unwrap();
    // action mean/std/min/max against a direct computation.
    let all: Vec<Vec<f32>> = LENGTHS
        .iter()
        .enumerate()
        .flat_map(|(e, &len)| (0..len).map(move |f| action(e, f)))
        .collect();
    for d in 0..3 {
        let xs: Vec<f64> = all.iter().map(|a| a[d] as f64).collect();
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let std = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        let a = &stats["action"];
        assert!((a["mean"][d].as_f64().unwrap() - mean).abs() < 1e-9);
        assert!((a["std"][d].as_f64().unwrap() - std).abs() < 1e-9);
        let min = xs.iter().cloned().fold(f64::INFINITY, f64::min);
        assert!((a["min"][d].as_f64().unwrap() - min).abs() < 1e-12);
    }
    assert_eq!(stats["action"]["count"], serde_json::json!([30]));
    assert_eq!(stats["index"]["max"], serde_json::json!([29.0]));
    // Images: per channel, shape (3, 1, 1), values in [0, 1].
    let m = &stats["observation.images.top"]["mean"];
    assert_eq!(m.as_array().unwrap().len(), 3);
    let v = m[0][0][0].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&v));
}

#[test]
fn sarm_progress_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("sarm_progress.parquet");
    let p = SarmProgress {
        index: vec![2, 0, 1, 3],
        episode_index: vec![0, 0, 0, 1],
        frame_index: vec![2, 0, 1, 0],
        progress_sparse: vec![0.9, 0.1, f32::NAN, 0.0],
        progress_dense: Some(vec![0.8, 0.2, 0.5, 0.05]),
        reward_model_path: Some("models/pick/model.onnx".into()),
    };
    p.write(&path).unwrap();
    let r = SarmProgress::read(&path).unwrap();
    // Sorted by index, like LeRobot's writer.
    assert_eq!(r.index, [0, 1, 2, 3]);
    assert_eq!(r.frame_index, [0, 1, 2, 0]);
    assert_eq!(r.episode_index, [0, 0, 0, 1]);
    assert_eq!(r.progress_sparse[0], 0.1);
    assert!(r.progress_sparse[1].is_nan());
    assert_eq!(
        r.progress_dense.as_deref(),
        Some(&[0.2, 0.5, 0.8, 0.05][..])
    );
    assert_eq!(
        r.reward_model_path.as_deref(),
        Some("models/pick/model.onnx")
    );

    let sparse_only = SarmProgress {
        progress_dense: None,
        reward_model_path: None,
        ..p
    };
    sparse_only.write(&path).unwrap();
    let r = SarmProgress::read(&path).unwrap();
    assert!(r.progress_dense.is_none());
    assert!(r.reward_model_path.is_none());
}

#[test]
fn data_files_roll_over_at_the_size_limit() {
    // Incompressible 256x256 images: ~0.4 MB per frame over two views, so each 3-frame episode passes the 1 MB
    // limit and the next episode starts a new file.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut noise = |w: u32, h: u32| {
        image::RgbImage::from_fn(w, h, |_, _| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            image::Rgb([seed as u8, (seed >> 8) as u8, (seed >> 16) as u8])
        })
    };
    let mut info = info();
    for v in &mut info.views {
        v.width = 256;
        v.height = 256;
    }
    info.data_files_size_in_mb = 1;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = stagewise_dataset::DatasetWriter::create(&dir, info).unwrap();
    let mut written = Vec::new();
    for e in 0..3 {
        let mut ep = episode(e, 3, false);
        for f in &mut ep.frames {
            f.views = vec![
                stagewise_dataset::FrameImage::Rgb(noise(256, 256)),
                stagewise_dataset::FrameImage::Rgb(noise(256, 256)),
            ];
        }
        w.add_episode(&ep).unwrap();
        written.push(ep);
    }
    let summary = w.finish().unwrap();
    assert_eq!(summary.data_files, 3);
    for f in 0..3 {
        assert!(dir
            .join(format!("data/chunk-000/file-{f:03}.parquet"))
            .exists());
    }
    let ds = Dataset::open(&dir).unwrap();
    for (e, ep) in written.iter().enumerate() {
        assert_eq!(ds.episodes()[e].data_file_index, e as u64);
        let got = ds.read_episode(e, Images::Decode).unwrap();
        assert_eq!(
            got.index,
            [3 * e as i64, 3 * e as i64 + 1, 3 * e as i64 + 2]
        );
        for (f, frame) in ep.frames.iter().enumerate() {
            let stagewise_dataset::FrameImage::Rgb(want) = &frame.views[1] else {
                unreachable!()
            };
            assert_eq!(&got.images("observation.images.wrist").unwrap()[f], want);
        }
    }
}

/// Every file is written under `<name>.tmp` and renamed into place once complete (fsynced before, directory
/// after): a finished dataset holds no temporary file; a writer dropped before `finish` (a crashed recording)
/// leaves its open data file under the temporary name only, never a half parquet file at a name a reader opens.
#[test]
fn files_appear_under_their_names_only_when_complete() {
    fn files(dir: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                files(&p, out);
            } else {
                out.push(p.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_dataset(&dir);
    let mut names = Vec::new();
    files(&dir, &mut names);
    names.sort();
    assert_eq!(
        names,
        [
            "file-000.parquet",
            "file-000.parquet",
            "info.json",
            "stats.json",
            "tasks.parquet",
            "temporal_proportions_sparse.json"
        ],
        "no temporary file is left"
    );

    let crashed = tmp.path().join("crashed");
    let mut w = stagewise_dataset::DatasetWriter::create(&crashed, info()).unwrap();
    w.add_episode(&episode(0, 5, true)).unwrap();
    drop(w);
    let data = crashed.join("data/chunk-000");
    assert!(!data.join("file-000.parquet").exists());
    assert!(data.join("file-000.parquet.tmp").exists());
    assert!(Dataset::open(&crashed).is_err(), "no info.json: incomplete");

    // sarm_progress.parquet: replaced whole, no temporary file left.
    let path = tmp.path().join("sarm_progress.parquet");
    let p = SarmProgress {
        index: vec![0, 1],
        episode_index: vec![0, 0],
        frame_index: vec![0, 1],
        progress_sparse: vec![0.25, 0.5],
        progress_dense: None,
        reward_model_path: None,
    };
    p.write(&path).unwrap();
    p.write(&path).unwrap();
    assert_eq!(
        SarmProgress::read(&path).unwrap().progress_sparse,
        [0.25, 0.5]
    );
    assert!(!stagewise_dataset::durable::temp_path(&path).exists());
}
