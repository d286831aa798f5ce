//! Video feature columns through ffmpeg (cargo feature `video`). Builds a LeRobot v3 video dataset from a written
//! image dataset: the frames of one camera go into one MP4 (lossless x264 RGB), the column leaves the data file,
//! and the episodes get `videos/<key>/{chunk_index,file_index,from_timestamp,to_timestamp}`. Skipped when
//! `ffmpeg` is not installed.
#![cfg(feature = "video")]

use crate::common;

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use common::*;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use stagewise_dataset::{Dataset, DatasetError, Images};

const KEY: &str = "observation.images.top";

fn have_ffmpeg() -> bool {
    Command::new("ffmpeg")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
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

/// Turns `KEY` of the dataset at `dir` into a video feature. Returns false when no lossless encoder works.
fn to_video_dataset(dir: &Path) -> bool {
    let mp4 = dir.join(format!("videos/{KEY}/chunk-000/file-000.mp4"));
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
    if !out.status.success() {
        eprintln!(
            "skipped: ffmpeg cannot encode libx264rgb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return false;
    }
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
    rewrite(
        &dir.join("meta/episodes/chunk-000/file-000.parquet"),
        |fields, cols| {
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
        },
    );
    true
}

#[test]
fn video_frames_decode_through_ffmpeg() {
    if !have_ffmpeg() {
        eprintln!("skipped: ffmpeg is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_dataset(&dir);
    if !to_video_dataset(&dir) {
        return;
    }
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
        assert_eq!(
            ep.images("observation.images.wrist").unwrap()[0],
            image(e, 0, 1)
        );
        assert!(ds.read_episode(e, Images::Skip).unwrap().images.is_empty());
    }

    std::fs::remove_file(dir.join(format!("videos/{KEY}/chunk-000/file-000.mp4"))).unwrap();
    let e = ds.read_episode(0, Images::Decode).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, DatasetError::Video { .. }), "{msg}");
    assert!(msg.contains("file-000.mp4") && msg.contains(KEY), "{msg}");
}
