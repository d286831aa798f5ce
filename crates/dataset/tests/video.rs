//! Video features through ffmpeg (installed by scripts/setup.sh; these tests fail, saying so, when it is missing).
//!
//! - The writer's video mode (AV1 and H.264, LeRobot's layout) round-trips: every frame comes back within the
//!   codec's loss (PSNR reported and bounded) and is the right frame (closer to its own frame than to its
//!   neighbours: LeRobot's timestamp rule, `from_timestamp + timestamp`).
//! - A LeRobot-style video dataset made outside the writer (one lossless x264-RGB MP4, the `videos/<key>/*`
//!   episode columns added to an image dataset) decodes pixel-exactly.
//! - A missing, truncated, shortened or mismatched video is an error that names the file, the column and (for a
//!   frame that is not there) the episode, the frame and the timestamp.

use crate::common;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use common::*;
use image::RgbImage;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use stagewise_dataset::{
    Dataset, DatasetError, DatasetInfo, DatasetWriter, Images, VideoCodec, VideoSettings,
};

const KEY: &str = "observation.images.top";
const WRIST: &str = "observation.images.wrist";
const EPISODES: &str = "meta/episodes/chunk-000/file-000.parquet";

fn require_ffmpeg() {
    let ok = Command::new("ffmpeg")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "ffmpeg is not installed: scripts/setup.sh installs it (apt-get install ffmpeg)"
    );
}

fn rewrite(path: &Path, f: impl Fn(&mut Vec<Field>, &mut Vec<ArrayRef>)) {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
    let mut out = Vec::new();
    for b in &batches {
        let mut fields: Vec<Field> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let mut cols = b.columns().to_vec();
        f(&mut fields, &mut cols);
        out.push(RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap());
    }
    let mut w = ArrowWriter::try_new(File::create(path).unwrap(), out[0].schema(), None).unwrap();
    for b in &out {
        w.write(b).unwrap();
    }
    w.close().unwrap();
}

/// PSNR in dB of `got` against `want` (8-bit RGB).
fn psnr(got: &RgbImage, want: &RgbImage) -> f64 {
    let se: f64 = got
        .as_raw()
        .iter()
        .zip(want.as_raw())
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
        .sum();
    let mse = se / got.as_raw().len() as f64;
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }
}

/// Frame `f` of episode `e`, view `v` for the video tests: smooth gradients (what cameras see; the image tests'
/// pattern wraps around and is noise to a codec), a per-frame blue level and a square that moves a pixel per frame,
/// so that neighbouring frames differ clearly.
fn vframe(e: usize, f: usize, v: usize) -> RgbImage {
    let level = ((f * 23 + e * 50) % 200 + 20) as u8;
    let sx = (f as u32) % (W - 4);
    RgbImage::from_fn(W, H, |x, y| {
        if (sx..sx + 4).contains(&x) && (4..8).contains(&y) {
            image::Rgb([250, 250, 250])
        } else {
            image::Rgb([
                (x * 8 + v as u32 * 40) as u8,
                (y * 10 + e as u32 * 20) as u8,
                level,
            ])
        }
    })
}

/// common::episode with the video tests' frames (view 1 given as PNG bytes, as there).
fn vepisode(e: usize, len: usize, annotated: bool) -> stagewise_dataset::EpisodeData {
    let mut ep = episode(e, len, annotated);
    for (f, frame) in ep.frames.iter_mut().enumerate() {
        let mut png = Vec::new();
        vframe(e, f, 1)
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        frame.views = vec![
            stagewise_dataset::FrameImage::Rgb(vframe(e, f, 0)),
            stagewise_dataset::FrameImage::Png(png),
        ];
    }
    ep
}

fn write_video_dataset(dir: &Path, codec: VideoCodec) {
    let mut w = DatasetWriter::create(
        dir,
        DatasetInfo {
            video: Some(VideoSettings {
                codec,
                ..VideoSettings::default()
            }),
            ..info()
        },
    )
    .expect("create");
    for (e, &len) in LENGTHS.iter().enumerate() {
        w.add_episode(&vepisode(e, len, e != 1))
            .expect("add episode");
    }
    w.finish().expect("finish");
}

fn video_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("videos/{key}/chunk-000/file-000.mp4"))
}

/// `min_mean_psnr`, `min_worst_psnr`: a little under what was measured (AV1 34.1 / 27.7 dB, H.264 29.4 / 26.4 dB
/// on these 16x12 frames; yuv420p halves the colour resolution of frames this small, sim frames do better:
/// tests/own_task.rs).
fn round_trip(codec: VideoCodec, codec_name: &str, min_mean_psnr: f64, min_worst_psnr: f64) {
    require_ffmpeg();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_video_dataset(&dir, codec);

    // LeRobot's layout: video features in info.json, one MP4 per camera, no image column in the data file.
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta/info.json")).unwrap())
            .unwrap();
    assert_eq!(
        info["video_path"],
        "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    );
    for key in [KEY, WRIST] {
        let f = &info["features"][key];
        assert_eq!(f["dtype"], "video", "{key}");
        assert_eq!(f["shape"], serde_json::json!([H, W, 3]));
        assert_eq!(f["info"]["video.codec"], codec_name);
        assert_eq!(f["info"]["video.pix_fmt"], "yuv420p");
        assert_eq!(f["info"]["video.fps"], 10);
        assert_eq!(f["info"]["video.g"], 2);
        assert_eq!(f["info"]["video.crf"], 30);
        assert!(video_path(&dir, key).is_file(), "{key}");
        let probe = Command::new("ffprobe")
            .args([
                "-v",
                "error",
                "-select_streams",
                "v:0",
                "-count_frames",
                "-show_entries",
                "stream=codec_name,nb_read_frames",
                "-of",
                "csv=p=0",
            ])
            .arg(video_path(&dir, key))
            .output()
            .unwrap();
        let total: usize = LENGTHS.iter().sum();
        assert_eq!(
            String::from_utf8_lossy(&probe.stdout).trim(),
            format!("{codec_name},{total}")
        );
    }
    let data = ParquetRecordBatchReaderBuilder::try_new(
        File::open(dir.join("data/chunk-000/file-000.parquet")).unwrap(),
    )
    .unwrap();
    assert!(data.schema().field_with_name(KEY).is_err());

    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.video_keys(), vec![KEY, WRIST]);
    // from_timestamp = the file's duration before the episode; to_timestamp = from + length / fps.
    let mut from = 0.0;
    for (e, &len) in LENGTHS.iter().enumerate() {
        let v = &ds.episodes()[e].videos[0];
        assert_eq!((v.chunk_index, v.file_index), (0, 0));
        assert!((v.from_timestamp - from).abs() < 1e-9, "{v:?}");
        assert!((v.to_timestamp - (from + len as f64 / 10.0)).abs() < 1e-9);
        from = v.to_timestamp;
    }

    let (mut sum, mut n, mut worst) = (0.0, 0usize, f64::INFINITY);
    for (e, &len) in LENGTHS.iter().enumerate() {
        let ep = ds.read_episode(e, Images::Decode).unwrap();
        for (v, key) in [KEY, WRIST].iter().enumerate() {
            let frames = ep.images(key).unwrap();
            assert_eq!(frames.len(), len);
            for (f, got) in frames.iter().enumerate() {
                let p = psnr(got, &vframe(e, f, v));
                sum += p;
                n += 1;
                worst = worst.min(p);
                // The right frame, not a neighbour.
                for other in [f.wrapping_sub(1), f + 1] {
                    if other < len {
                        assert!(
                            p > psnr(got, &vframe(e, other, v)) + 3.0,
                            "{codec_name} episode {e} view {key} frame {f}: closer to frame {other}"
                        );
                    }
                }
            }
        }
        assert!(ds.read_episode(e, Images::Skip).unwrap().images.is_empty());
        let here = ds.read_episode(e, Images::DecodeOnThisThread).unwrap();
        assert_eq!(here.images, ep.images);
    }
    // Several episodes in one decoder run per camera: the same frames, in the order asked for.
    let one: Vec<_> = (0..LENGTHS.len())
        .map(|e| ds.read_episode(e, Images::Decode).unwrap())
        .collect();
    for order in [vec![0, 1, 2], vec![2, 0], vec![1]] {
        for mode in [Images::Decode, Images::DecodeOnThisThread] {
            let many = ds.read_episodes(&order, mode).unwrap();
            for (got, &e) in many.iter().zip(&order) {
                assert_eq!(got, &one[e], "{codec_name} episodes {order:?}, episode {e}");
            }
        }
    }
    let mean = sum / n as f64;
    eprintln!(
        "{codec_name} crf 30: PSNR mean {mean:.2} dB, worst frame {worst:.2} dB over {n} frames"
    );
    assert!(
        mean >= min_mean_psnr && worst >= min_worst_psnr,
        "{codec_name}: PSNR mean {mean:.2} dB (bar {min_mean_psnr}), worst {worst:.2} dB (bar {min_worst_psnr})"
    );
}

#[test]
fn av1_round_trip_within_codec_loss() {
    round_trip(VideoCodec::Av1, "av1", 32.0, 26.0);
}

#[test]
fn h264_round_trip_within_codec_loss() {
    round_trip(VideoCodec::H264, "h264", 28.0, 25.0);
}

/// A video dataset written by the writer, in a fresh temporary directory.
fn fresh_video() -> (tempfile::TempDir, PathBuf) {
    require_ffmpeg();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_video_dataset(&dir, VideoCodec::H264);
    (tmp, dir)
}

fn read_err(dir: &Path, ep: usize) -> DatasetError {
    Dataset::open(dir)
        .unwrap()
        .read_episode(ep, Images::Decode)
        .unwrap_err()
}

#[test]
fn missing_and_truncated_files_name_the_file() {
    let (_t, dir) = fresh_video();
    let mp4 = video_path(&dir, KEY);
    let bytes = std::fs::read(&mp4).unwrap();

    // Cut in half: the MP4 index is at the end, nothing decodes.
    std::fs::write(&mp4, &bytes[..bytes.len() / 2]).unwrap();
    let e = read_err(&dir, 0);
    let msg = e.to_string();
    assert!(matches!(e, DatasetError::Video { .. }), "{msg}");
    assert!(
        msg.contains("file-000.mp4") && msg.contains(KEY) && msg.contains("episode 0"),
        "{msg}"
    );

    std::fs::remove_file(&mp4).unwrap();
    let msg = read_err(&dir, 1).to_string();
    assert!(
        msg.contains("file-000.mp4") && msg.contains("does not exist"),
        "{msg}"
    );
}

#[test]
fn shortened_video_names_the_missing_frame() {
    let (_t, dir) = fresh_video();
    let mp4 = video_path(&dir, WRIST);
    let short = dir.join("short.mp4");
    let total: usize = LENGTHS.iter().sum();
    // The same stream without its last 4 frames (remuxed, no re-encoding).
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-i"])
        .arg(&mp4)
        .args(["-c", "copy", "-frames:v", &(total - 4).to_string()])
        .arg(&short)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::rename(&short, &mp4).unwrap();
    let ds = Dataset::open(&dir).unwrap();
    ds.read_episode(0, Images::Decode).unwrap();
    let e = ds.read_episode(2, Images::Decode).unwrap_err();
    let msg = e.to_string();
    // Episode 2 starts at 1.7 s; its frame 9 is at 2.6 s, the first frame the file no longer has.
    match &e {
        DatasetError::VideoFrame {
            episode,
            frame,
            timestamp,
            ..
        } => {
            assert_eq!((*episode, *frame), (2, 9), "{msg}");
            assert!((timestamp - 2.6).abs() < 1e-6, "{msg}");
        }
        _ => panic!("expected VideoFrame, got {msg}"),
    }
    assert!(
        msg.contains("file-000.mp4") && msg.contains(WRIST) && msg.contains("2.600000 s"),
        "{msg}"
    );
    assert!(msg.contains("ends at"), "{msg}");
    // Read together with other episodes, the error still names episode 2's frame 9.
    let e = ds.read_episodes(&[0, 1, 2], Images::Decode).unwrap_err();
    assert!(
        matches!(
            e,
            DatasetError::VideoFrame {
                episode: 2,
                frame: 9,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn mismatched_timestamps_and_sizes_are_errors() {
    let (_t, dir) = fresh_video();
    // Half a frame off: no frame within LeRobot's 1e-4 s of any row.
    rewrite(&dir.join(EPISODES), |fields, cols| {
        let i = fields
            .iter()
            .position(|f| f.name() == &format!("videos/{KEY}/from_timestamp"))
            .unwrap();
        let old = cols[i].as_any().downcast_ref::<Float64Array>().unwrap();
        let shifted: Vec<f64> = (0..old.len()).map(|r| old.value(r) + 0.05).collect();
        cols[i] = Arc::new(Float64Array::from(shifted));
    });
    let e = read_err(&dir, 1);
    let msg = e.to_string();
    assert!(matches!(e, DatasetError::VideoFrame { .. }), "{msg}");
    assert!(
        msg.contains("file-000.mp4")
            && msg.contains("episode 1, frame 0")
            && msg.contains("1.050000 s")
            && msg.contains("tolerance"),
        "{msg}"
    );
    // A looser tolerance (the caller's choice) takes the nearest frame.
    let ds = Dataset::open(&dir).unwrap().with_video_tolerance(0.06);
    assert_eq!(
        ds.read_episode(1, Images::Decode).unwrap().images[0]
            .1
            .len(),
        LENGTHS[1]
    );

    // info.json says another frame size than the file has.
    let (_t2, dir) = fresh_video();
    let info_path = dir.join("meta/info.json");
    let mut info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&info_path).unwrap()).unwrap();
    info["features"][KEY]["shape"] = serde_json::json!([H * 2, W * 2, 3]);
    std::fs::write(&info_path, info.to_string()).unwrap();
    let msg = read_err(&dir, 0).to_string();
    assert!(
        msg.contains("file-000.mp4") && msg.contains(&format!("frames are {W}x{H}")),
        "{msg}"
    );
}

/// Noise frames of 64x64 (what a codec cannot compress): neighbours differ completely.
fn noise(e: usize, f: usize) -> RgbImage {
    let mut x = (e as u32 + 1).wrapping_mul(2_654_435_761) ^ (f as u32).wrapping_mul(40_503);
    RgbImage::from_fn(64, 64, |_, _| {
        let mut px = [0u8; 3];
        for c in &mut px {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *c = (x >> 24) as u8;
        }
        image::Rgb(px)
    })
}

#[test]
fn video_files_roll_over_at_the_size_limit() {
    require_ffmpeg();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let lens = [120usize, 120, 120, 120];
    let mut info = DatasetInfo {
        // crf 10: ~8 KB per noise frame, so 1 MB fills within two episodes.
        video: Some(VideoSettings {
            codec: VideoCodec::H264,
            crf: 10,
            ..VideoSettings::default()
        }),
        video_files_size_in_mb: 1,
        ..info()
    };
    info.views.truncate(1);
    info.views[0].width = 64;
    info.views[0].height = 64;
    let mut w = DatasetWriter::create(&dir, info).unwrap();
    for (e, &len) in lens.iter().enumerate() {
        let mut ep = episode(e, len, true);
        for (f, frame) in ep.frames.iter_mut().enumerate() {
            frame.views = vec![stagewise_dataset::FrameImage::Rgb(noise(e, f))];
        }
        w.add_episode(&ep).unwrap();
    }
    w.finish().unwrap();
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.info().video_files_size_in_mb, 1);
    let refs: Vec<_> = ds.episodes().iter().map(|e| e.videos[0].clone()).collect();
    let files: Vec<u64> = refs.iter().map(|v| v.file_index).collect();
    assert!(
        files.windows(2).all(|p| p[1] == p[0] || p[1] == p[0] + 1),
        "{files:?}"
    );
    assert!(*files.last().unwrap() >= 1, "no roll-over: {files:?}");
    for (e, v) in refs.iter().enumerate() {
        let path = ds.video_file(e, KEY).unwrap();
        assert!(
            path.ends_with(format!("file-{:03}.mp4", v.file_index)),
            "{path:?}"
        );
        // A new file starts at 0 s; in the same file the episode follows the one before.
        let expect_from = if e == 0 || refs[e - 1].file_index != v.file_index {
            0.0
        } else {
            refs[e - 1].to_timestamp
        };
        assert!((v.from_timestamp - expect_from).abs() < 1e-9, "{refs:?}");
    }
    // Every frame is its own (noise neighbours are far apart), read one by one or all together.
    let all: Vec<usize> = (0..lens.len()).collect();
    for (e, ep) in ds
        .read_episodes(&all, Images::Decode)
        .unwrap()
        .iter()
        .enumerate()
    {
        let frames = ep.images(KEY).unwrap();
        assert_eq!(frames.len(), lens[e]);
        for (f, got) in frames.iter().enumerate() {
            let own = psnr(got, &noise(e, f));
            let next = psnr(got, &noise(e, (f + 1) % lens[e]));
            assert!(
                own > next + 3.0,
                "episode {e} frame {f}: {own:.1} vs {next:.1} dB"
            );
        }
    }
}

#[test]
fn writer_refuses_what_a_video_cannot_hold() {
    require_ffmpeg();
    let tmp = tempfile::tempdir().unwrap();
    let video = Some(VideoSettings::default());
    // Timestamps that are not i / fps: no frame would match them.
    let mut w =
        DatasetWriter::create(tmp.path().join("a"), DatasetInfo { video, ..info() }).unwrap();
    let mut ep = episode(0, 6, true);
    ep.frames[3].timestamp += 0.01;
    let msg = w.add_episode(&ep).unwrap_err().to_string();
    assert!(msg.contains("frame 3") && msg.contains("i / fps"), "{msg}");
    // yuv420p needs even sizes.
    let mut odd = DatasetInfo { video, ..info() };
    odd.views[0].width = 15;
    let msg = match DatasetWriter::create(tmp.path().join("b"), odd) {
        Ok(_) => panic!("odd width accepted"),
        Err(e) => e.to_string(),
    };
    assert!(msg.contains("even") && msg.contains("15x12"), "{msg}");
    assert!(!tmp.path().join("b").exists());
}

/// Turns `KEY` of the image dataset at `dir` into a video feature by hand (lossless x264 RGB, as another tool
/// would write it).
fn to_video_dataset(dir: &Path) {
    let mp4 = video_path(dir, KEY);
    std::fs::create_dir_all(mp4.parent().unwrap()).unwrap();
    let mut child = Command::new("ffmpeg")
        .args([
            "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s",
        ])
        .arg(format!("{W}x{H}"))
        .args([
            "-r",
            "10",
            "-i",
            "-",
            "-c:v",
            "libx264rgb",
            "-qp",
            "0",
            "-pix_fmt",
            "rgb24",
        ])
        .arg(&mp4)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let stdin = child.stdin.as_mut().unwrap();
        for (e, &len) in LENGTHS.iter().enumerate() {
            for f in 0..len {
                stdin.write_all(image(e, f, 0).as_raw()).unwrap();
            }
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "ffmpeg cannot encode libx264rgb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info_path = dir.join("meta/info.json");
    let mut info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&info_path).unwrap()).unwrap();
    info["features"][KEY]["dtype"] = "video".into();
    info["video_path"] =
        "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4".into();
    std::fs::write(&info_path, info.to_string()).unwrap();
    rewrite(
        &dir.join("data/chunk-000/file-000.parquet"),
        |fields, cols| {
            let i = fields.iter().position(|f| f.name() == KEY).unwrap();
            fields.remove(i);
            cols.remove(i);
        },
    );
    let mut from = 0usize;
    let spans: Vec<(f64, f64)> = LENGTHS
        .iter()
        .map(|&len| {
            let s = (from as f64 / 10.0, (from + len) as f64 / 10.0);
            from += len;
            s
        })
        .collect();
    rewrite(&dir.join(EPISODES), |fields, cols| {
        let n = spans.len();
        for (suffix, col) in [
            (
                "chunk_index",
                Arc::new(Int64Array::from(vec![0; n])) as ArrayRef,
            ),
            ("file_index", Arc::new(Int64Array::from(vec![0; n]))),
            (
                "from_timestamp",
                Arc::new(Float64Array::from(
                    spans.iter().map(|s| s.0).collect::<Vec<_>>(),
                )),
            ),
            (
                "to_timestamp",
                Arc::new(Float64Array::from(
                    spans.iter().map(|s| s.1).collect::<Vec<_>>(),
                )),
            ),
        ] {
            let dt = if suffix.ends_with("index") {
                DataType::Int64
            } else {
                DataType::Float64
            };
            fields.push(Field::new(format!("videos/{KEY}/{suffix}"), dt, true));
            cols.push(col);
        }
    });
}

#[test]
fn lossless_video_from_another_writer_is_pixel_exact() {
    require_ffmpeg();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_dataset(&dir);
    to_video_dataset(&dir);
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.episodes()[1].videos[0].key, KEY);
    for (e, &len) in LENGTHS.iter().enumerate() {
        let ep = ds.read_episode(e, Images::Decode).unwrap();
        let frames = ep.images(KEY).unwrap();
        assert_eq!(frames.len(), len);
        for (f, got) in frames.iter().enumerate() {
            assert_eq!(got, &image(e, f, 0), "episode {e} frame {f}");
        }
        // The image column still comes from the parquet.
        assert_eq!(ep.images(WRIST).unwrap()[0], image(e, 0, 1));
    }
}
