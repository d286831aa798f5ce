//! Errors name the file and the field or column: malformed info.json, missing columns, wrong dtypes, corrupt
//! PNG bytes and bad writer input (video errors: tests/video.rs).

use crate::common;

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch, StringArray, StructArray};
use arrow_schema::{DataType, Field, Schema};
use common::*;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use stagewise_dataset::{
    ColumnValues, DatasetError, DatasetWriter, FrameImage, Images, SarmProgress, StageAnnotation,
};

const DATA: &str = "data/chunk-000/file-000.parquet";

fn fresh() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_dataset(&dir);
    (tmp, dir)
}

/// The error of opening `dir`, with its causes (`outer: cause: ...`).
fn open_err(dir: &Path) -> String {
    match stagewise_dataset::Dataset::open(dir) {
        Ok(_) => panic!("expected an error"),
        Err(e) => stagewise_core::ErrorChain(&e).to_string(),
    }
}

/// Rewrites a parquet file through `f(schema fields, columns)`.
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

fn edit_info(dir: &Path, f: impl Fn(&mut serde_json::Value)) {
    let p = dir.join("meta/info.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(p, v.to_string()).unwrap();
}

#[test]
fn malformed_info_json() {
    let (_t, dir) = fresh();
    std::fs::write(
        dir.join("meta/info.json"),
        "{\"codebase_version\": \"v3.0\", ",
    )
    .unwrap();
    let e = open_err(&dir);
    assert!(
        e.contains("meta/info.json") && e.contains("malformed JSON"),
        "{e}"
    );

    let (_t, dir) = fresh();
    edit_info(&dir, |v| {
        v.as_object_mut().unwrap().remove("fps");
    });
    let e = open_err(&dir);
    assert!(e.contains("info.json") && e.contains("fps"), "{e}");

    let (_t, dir) = fresh();
    edit_info(&dir, |v| v["codebase_version"] = "v2.1".into());
    let e = open_err(&dir);
    assert!(e.contains("codebase_version") && e.contains("v2.1"), "{e}");

    let (_t, dir) = fresh();
    edit_info(&dir, |v| {
        v["features"]["observation.images.top"]["shape"] = serde_json::json!([12, 16])
    });
    let e = open_err(&dir);
    assert!(e.contains("features.observation.images.top"), "{e}");

    let (_t, dir) = fresh();
    edit_info(&dir, |v| v["total_episodes"] = 5.into());
    let e = open_err(&dir);
    assert!(e.contains("total_episodes"), "{e}");

    let (_t, dir) = fresh();
    std::fs::remove_file(dir.join("meta/info.json")).unwrap();
    let e = open_err(&dir);
    assert!(e.contains("meta/info.json"), "{e}");
}

#[test]
fn missing_column_in_data_file() {
    let (_t, dir) = fresh();
    rewrite(&dir.join(DATA), |fields, cols| {
        let i = fields.iter().position(|f| f.name() == "action").unwrap();
        fields.remove(i);
        cols.remove(i);
    });
    let ds = stagewise_dataset::Dataset::open(&dir).unwrap();
    let e = ds.read_episode(0, Images::Skip).unwrap_err();
    assert!(
        matches!(&e, DatasetError::MissingColumn { column, .. } if column == "action"),
        "{e}"
    );
    let msg = e.to_string();
    assert!(msg.contains(DATA) && msg.contains("`action`"), "{msg}");
}

#[test]
fn missing_column_in_episode_metadata() {
    let (_t, dir) = fresh();
    rewrite(
        &dir.join("meta/episodes/chunk-000/file-000.parquet"),
        |fields, cols| {
            let i = fields
                .iter()
                .position(|f| f.name() == "dataset_from_index")
                .unwrap();
            fields.remove(i);
            cols.remove(i);
        },
    );
    let e = open_err(&dir);
    assert!(
        e.contains("meta/episodes/chunk-000/file-000.parquet") && e.contains("dataset_from_index"),
        "{e}"
    );
}

#[test]
fn wrong_dtype() {
    let (_t, dir) = fresh();
    rewrite(&dir.join(DATA), |fields, cols| {
        let i = fields
            .iter()
            .position(|f| f.name() == "observation.state")
            .unwrap();
        let n = cols[i].len();
        fields[i] = Field::new("observation.state", DataType::Utf8, true);
        cols[i] = Arc::new(StringArray::from(vec!["x"; n]));
    });
    let ds = stagewise_dataset::Dataset::open(&dir).unwrap();
    let e = ds.read_episode(1, Images::Skip).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, DatasetError::ColumnType { .. }), "{msg}");
    assert!(
        msg.contains(DATA) && msg.contains("observation.state") && msg.contains("Utf8"),
        "{msg}"
    );

    let (_t, dir) = fresh();
    rewrite(&dir.join(DATA), |fields, cols| {
        let i = fields
            .iter()
            .position(|f| f.name() == "frame_index")
            .unwrap();
        let n = cols[i].len();
        fields[i] = Field::new("frame_index", DataType::Utf8, true);
        cols[i] = Arc::new(StringArray::from(vec!["0"; n]));
    });
    let ds = stagewise_dataset::Dataset::open(&dir).unwrap();
    let msg = ds.read_episode(0, Images::Skip).unwrap_err().to_string();
    assert!(
        msg.contains("frame_index") && msg.contains("int64"),
        "{msg}"
    );
}

#[test]
fn corrupt_png_bytes() {
    let (_t, dir) = fresh();
    rewrite(&dir.join(DATA), |fields, cols| {
        let i = fields
            .iter()
            .position(|f| f.name() == "observation.images.wrist")
            .unwrap();
        let st = cols[i].as_any().downcast_ref::<StructArray>().unwrap();
        let bytes = st
            .column_by_name("bytes")
            .unwrap()
            .as_any()
            .downcast_ref::<BinaryArray>()
            .unwrap();
        let mut rows: Vec<Vec<u8>> = (0..bytes.len()).map(|r| bytes.value(r).to_vec()).collect();
        // Row 3 (episode 0, frame 3): keep the PNG signature, truncate the rest.
        rows[3].truncate(20);
        let new_bytes = BinaryArray::from_iter_values(rows.iter());
        let paths = st.column_by_name("path").unwrap().clone();
        let fields_st = match fields[i].data_type() {
            DataType::Struct(f) => f.clone(),
            _ => unreachable!(),
        };
        cols[i] = Arc::new(
            StructArray::try_new(fields_st, vec![Arc::new(new_bytes), paths], None).unwrap(),
        );
    });
    let ds = stagewise_dataset::Dataset::open(&dir).unwrap();
    // Skipping images still works.
    ds.read_episode(0, Images::Skip).unwrap();
    let e = ds.read_episode(0, Images::Decode).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            &e,
            DatasetError::Image {
                episode: 0,
                frame: 3,
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains(DATA) && msg.contains("observation.images.wrist") && msg.contains("frame 3"),
        "{msg}"
    );
    // The other episodes decode.
    ds.read_episode(1, Images::Decode).unwrap();
}

#[test]
fn image_column_with_wrong_struct() {
    let (_t, dir) = fresh();
    rewrite(&dir.join(DATA), |fields, cols| {
        let i = fields
            .iter()
            .position(|f| f.name() == "observation.images.top")
            .unwrap();
        let n = cols[i].len();
        fields[i] = Field::new("observation.images.top", DataType::Utf8, true);
        cols[i] = Arc::new(StringArray::from(vec!["frame.png"; n]));
    });
    let ds = stagewise_dataset::Dataset::open(&dir).unwrap();
    let msg = ds.read_episode(0, Images::Decode).unwrap_err().to_string();
    assert!(
        msg.contains("observation.images.top") && msg.contains("struct<bytes"),
        "{msg}"
    );
}

#[test]
fn writer_refuses_bad_episodes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = DatasetWriter::create(&dir, info()).unwrap();
    let check = |w: &mut DatasetWriter, ep: stagewise_dataset::EpisodeData, needle: &str| {
        let msg = w.add_episode(&ep).unwrap_err().to_string();
        assert!(msg.contains(needle), "{msg} lacks {needle}");
    };
    let mut ep = episode(0, 5, true);
    ep.frames[2].state.pop();
    check(&mut w, ep, "state has 3 values");
    let mut ep = episode(0, 5, true);
    ep.frames[1].views[0] = FrameImage::Rgb(image::RgbImage::new(3, 3));
    check(&mut w, ep, "image is 3x3");
    let mut ep = episode(0, 5, true);
    ep.frames[1].views[1] = FrameImage::Png(b"\x89PNG\r\n\x1a\nnope".to_vec());
    check(&mut w, ep, "view \"wrist\"");
    let mut ep = episode(0, 5, true);
    ep.stages = Some(StageAnnotation {
        names: vec!["a".into(), "b".into()],
        start_frames: vec![0, 3],
        end_frames: vec![4, 5],
    });
    check(&mut w, ep, "non-overlapping");
    let mut ep = episode(0, 5, true);
    ep.extras[0].1 = ColumnValues::I64(vec![0; 5]);
    check(&mut w, ep, "progress_gt");
    let mut ep = episode(0, 5, true);
    ep.frames[3].timestamp = 0.0;
    check(&mut w, ep, "timestamps go backwards at frame 3");
    let mut ep = episode(0, 5, true);
    ep.frames.clear();
    check(&mut w, ep, "no frames");
    // A good episode still goes in, and a different stage vocabulary afterwards is refused.
    w.add_episode(&episode(0, 5, true)).unwrap();
    let mut ep = episode(1, 5, true);
    ep.stages.as_mut().unwrap().names[0] = "approach".into();
    check(&mut w, ep, "stage names");
    w.finish().unwrap();

    // An existing, non-empty directory is not overwritten.
    let msg = DatasetWriter::create(&dir, info())
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("not empty"), "{msg}");
}

#[test]
fn sarm_progress_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("sarm_progress.parquet");
    let bad = SarmProgress {
        index: vec![0, 1],
        episode_index: vec![0],
        frame_index: vec![0, 1],
        progress_sparse: vec![0.0, 1.0],
        ..Default::default()
    };
    let msg = bad.write(&path).unwrap_err().to_string();
    assert!(msg.contains("episode_index"), "{msg}");

    let good = SarmProgress {
        episode_index: vec![0, 0],
        ..bad
    };
    good.write(&path).unwrap();
    rewrite(&path, |fields, cols| {
        let i = fields
            .iter()
            .position(|f| f.name() == "progress_sparse")
            .unwrap();
        fields.remove(i);
        cols.remove(i);
    });
    let msg = SarmProgress::read(&path).unwrap_err().to_string();
    assert!(
        msg.contains("sarm_progress.parquet") && msg.contains("progress_sparse"),
        "{msg}"
    );

    good.write(&path).unwrap();
    rewrite(&path, |fields, cols| {
        fields[0] = Field::new("index", DataType::Utf8, true);
        cols[0] = Arc::new(StringArray::from(vec!["0", "1"]));
    });
    let msg = SarmProgress::read(&path).unwrap_err().to_string();
    assert!(msg.contains("`index`") && msg.contains("int64"), "{msg}");

    std::fs::write(&path, b"not parquet").unwrap();
    let msg = SarmProgress::read(&path).unwrap_err().to_string();
    assert!(
        msg.contains("sarm_progress.parquet") && msg.contains("parquet"),
        "{msg}"
    );
}

/// A corrupt parquet file and a malformed info.json: the error names the file, keeps the parquet / JSON
/// library's error as its source, and no message of the chain repeats the cause.
#[test]
fn corrupt_files_keep_the_library_error_as_their_source() {
    let (_t, dir) = fresh();
    let path = dir.join("sarm_progress.parquet");
    std::fs::write(&path, b"not parquet").unwrap();
    let e = SarmProgress::read(&path).unwrap_err();
    assert!(matches!(e, DatasetError::Parquet { .. }), "{e}");
    let msgs = stagewise_core::chain_messages(&e);
    assert!(msgs.len() >= 2, "{msgs:?}");
    assert!(msgs[0].contains("sarm_progress.parquet"), "{msgs:?}");
    assert!(
        std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<parquet::errors::ParquetError>())
            .is_some(),
        "the source is the parquet error: {msgs:?}"
    );
    for (i, m) in msgs.iter().enumerate() {
        for later in &msgs[i + 1..] {
            assert!(
                !m.contains(later.as_str()),
                "the cause is printed twice: {msgs:?}"
            );
        }
    }

    let (_t, dir) = fresh();
    std::fs::write(dir.join("meta/info.json"), "{\"fps\": ").unwrap();
    let e = match stagewise_dataset::Dataset::open(&dir) {
        Ok(_) => panic!("a malformed info.json opened"),
        Err(e) => e,
    };
    let msgs = stagewise_core::chain_messages(&e);
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        msgs[0].contains("meta/info.json") && msgs[0].contains("malformed JSON"),
        "{msgs:?}"
    );
    assert!(
        std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<serde_json::Error>())
            .is_some(),
        "the source is the JSON error: {msgs:?}"
    );
    assert!(!msgs[0].contains(msgs[1].as_str()), "{msgs:?}");
}
