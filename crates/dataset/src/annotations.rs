//! Writing SARM sparse stage annotations into an existing LeRobot v3 dataset: the `sparse_subtask_*` columns of
//! `meta/episodes/*/*.parquet` (added, or replaced) and `meta/temporal_proportions_sparse.json` (recomputed from
//! every annotated episode, or removed when none is left), as LeRobot's `subtask_annotation.py`
//! `save_annotations_to_dataset` stores them (start/end frames and `frame / fps` times; stage `k` spans
//! `start..end`, end exclusive). Other columns and files stay as they are. Files are replaced durably.

use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, Int64Builder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::{Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use stagewise_core::StageProportions;

use crate::columns::{column, i64_values};
use crate::contents::StageAnnotation;
use crate::error::{arrow_err, io_err, pq_err, DatasetError, Result};
use crate::info::{write_proportions_json, TEMPORAL_PROPORTIONS_SPARSE_PATH};
use crate::reader::Dataset;

/// The SARM sparse annotation columns of `meta/episodes/*/*.parquet`, in the order they are written (LeRobot's
/// `save_annotations_to_dataset`): stage names (list<string>), start and end times in seconds (list<double>,
/// `frame / fps`), start and end frames (list<int64>).
pub(crate) const STAGE_COLUMNS: [&str; 5] = [
    "sparse_subtask_names",
    "sparse_subtask_start_times",
    "sparse_subtask_end_times",
    "sparse_subtask_start_frames",
    "sparse_subtask_end_frames",
];

/// The [`STAGE_COLUMNS`] for episodes `rows` (`None`: not annotated, a null in every column), as `(name,
/// array)`. Both the writer and [`write_annotations`] build them here.
pub(crate) fn stage_columns(
    rows: &[Option<&StageAnnotation>],
    fps: f64,
) -> [(&'static str, ArrayRef); 5] {
    let mut names = ListBuilder::new(StringBuilder::new());
    let mut start_t = ListBuilder::new(Float64Builder::new());
    let mut end_t = ListBuilder::new(Float64Builder::new());
    let mut starts = ListBuilder::new(Int64Builder::new());
    let mut ends = ListBuilder::new(Int64Builder::new());
    for row in rows {
        let valid = row.is_some();
        if let Some(a) = row {
            for nm in &a.names {
                names.values().append_value(nm);
            }
            for (&s, &e) in a.start_frames.iter().zip(&a.end_frames) {
                start_t.values().append_value(s as f64 / fps);
                end_t.values().append_value(e as f64 / fps);
                starts.values().append_value(s);
                ends.values().append_value(e);
            }
        }
        names.append(valid);
        start_t.append(valid);
        end_t.append(valid);
        starts.append(valid);
        ends.append(valid);
    }
    let [n, st, et, sf, ef] = STAGE_COLUMNS;
    [
        (n, Arc::new(names.finish()) as ArrayRef),
        (st, Arc::new(start_t.finish())),
        (et, Arc::new(end_t.finish())),
        (sf, Arc::new(starts.finish())),
        (ef, Arc::new(ends.finish())),
    ]
}

/// Sets the `success` flag (Stagewise's episode column, what `stagewise log export` writes from a run's episode
/// summaries) of the episodes in `labels` (`None` clears one: unknown) and keeps the others' as they are: the
/// per-episode label a person gives. Returns how many episodes are labelled successful, failed, and unknown.
pub fn write_success(
    root: impl AsRef<Path>,
    labels: &[(usize, Option<bool>)],
) -> Result<(usize, usize, usize)> {
    let root = root.as_ref();
    let ds = Dataset::open(root)?;
    let n = ds.num_episodes();
    let mut success: Vec<Option<bool>> = ds.episodes().iter().map(|e| e.success).collect();
    for &(ep, flag) in labels {
        *success.get_mut(ep).ok_or_else(|| {
            DatasetError::Input(format!(
                "episode {ep}: out of range, the dataset has {n} episodes"
            ))
        })? = flag;
    }
    rewrite_episode_columns(root, &["success"], |eps| {
        let col: BooleanArray = eps
            .iter()
            .map(|&e| {
                usize::try_from(e)
                    .ok()
                    .and_then(|e| success.get(e).copied().flatten())
            })
            .collect();
        vec![("success", Arc::new(col) as ArrayRef)]
    })?;
    let count = |want: Option<bool>| success.iter().filter(|&&s| s == want).count();
    Ok((count(Some(true)), count(Some(false)), count(None)))
}

/// Rewrites every `meta/episodes/*/*.parquet` durably with the columns `make` builds from each batch's
/// `episode_index` values: columns named in `replaced` are dropped and `make`'s appended; the others stay.
fn rewrite_episode_columns(
    root: &Path,
    replaced: &[&str],
    make: impl Fn(&[i64]) -> Vec<(&'static str, ArrayRef)>,
) -> Result<()> {
    let dir = root.join("meta/episodes");
    let mut files = Vec::new();
    for chunk in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
        let chunk = chunk.map_err(io_err(&dir))?.path();
        if chunk.is_dir() {
            for f in std::fs::read_dir(&chunk).map_err(io_err(&chunk))? {
                let f = f.map_err(io_err(&chunk))?.path();
                if f.extension().is_some_and(|e| e == "parquet") {
                    files.push(f);
                }
            }
        }
    }
    files.sort();
    for path in &files {
        let file = std::fs::File::open(path).map_err(io_err(path))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(pq_err(path))?
            .build()
            .map_err(pq_err(path))?;
        let mut out: Vec<RecordBatch> = Vec::new();
        for batch in reader {
            let batch = batch.map_err(arrow_err(path))?;
            let eps = i64_values(
                column(&batch, path, "episode_index")?,
                path,
                "episode_index",
            )?;
            let mut fields: Vec<Field> = Vec::new();
            let mut cols: Vec<ArrayRef> = Vec::new();
            for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
                if !replaced.contains(&f.name().as_str()) {
                    fields.push(f.as_ref().clone());
                    cols.push(c.clone());
                }
            }
            for (name, col) in make(&eps) {
                fields.push(Field::new(name, col.data_type().clone(), true));
                cols.push(col);
            }
            let schema = Arc::new(Schema::new_with_metadata(
                fields,
                batch.schema().metadata().clone(),
            ));
            out.push(RecordBatch::try_new(schema, cols).map_err(arrow_err(path))?);
        }
        let tmp = crate::durable::temp_path(path);
        crate::durable::write_atomic(path, |f| {
            let Some(first) = out.first() else {
                return Ok(());
            };
            let props = WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .build();
            let mut w =
                ArrowWriter::try_new(f, first.schema(), Some(props)).map_err(pq_err(&tmp))?;
            for b in &out {
                w.write(b).map_err(pq_err(&tmp))?;
            }
            w.into_inner().map_err(pq_err(&tmp))?;
            Ok(())
        })?;
    }
    Ok(())
}

/// What [`write_annotations`] left in the dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct AnnotationSummary {
    pub annotated: usize,
    pub episodes: usize,
    /// `(stage, a_k)` written to temporal_proportions_sparse.json; `None` when no episode is annotated.
    pub proportions: Option<Vec<(String, f64)>>,
}

/// Sets the annotation of the episodes in `changes` (`None` clears one) and keeps the others' as they are. Every
/// annotation is checked against its episode's length, and all annotated episodes must name the same stages in
/// the same order.
pub fn write_annotations(
    root: impl AsRef<Path>,
    changes: &[(usize, Option<StageAnnotation>)],
) -> Result<AnnotationSummary> {
    let root = root.as_ref();
    let ds = Dataset::open(root)?;
    let n = ds.num_episodes();
    let mut ann: Vec<Option<StageAnnotation>> =
        ds.episodes().iter().map(|e| e.stages.clone()).collect();
    for (ep, a) in changes {
        let slot = ann.get_mut(*ep).ok_or_else(|| {
            DatasetError::Input(format!(
                "episode {ep}: out of range, the dataset has {n} episodes"
            ))
        })?;
        if let Some(a) = a {
            a.check(ds.episodes()[*ep].length)
                .map_err(|reason| DatasetError::InputAnnotation {
                    episode: *ep,
                    reason,
                })?;
        }
        *slot = a.clone();
    }
    let mut names: Option<&Vec<String>> = None;
    for (ep, a) in ann.iter().enumerate() {
        if let Some(a) = a {
            match names {
                None => names = Some(&a.names),
                Some(first) if *first != a.names => {
                    return Err(DatasetError::Input(format!(
                        "episode {ep}: stages {:?} differ from the other episodes' {first:?}",
                        a.names
                    )))
                }
                Some(_) => {}
            }
        }
    }
    let fps = f64::from(ds.fps());

    // Rewrite every episodes file with the five stage columns (replaced where they were, appended otherwise).
    rewrite_episode_columns(root, &STAGE_COLUMNS, |eps| {
        let rows: Vec<Option<&StageAnnotation>> = eps
            .iter()
            .map(|&e| {
                usize::try_from(e)
                    .ok()
                    .and_then(|e| ann.get(e))
                    .and_then(Option::as_ref)
            })
            .collect();
        stage_columns(&rows, fps).to_vec()
    })?;

    // Stage priors a_k over the annotated episodes (DESIGN.md; the writer's formula).
    let prop_path = root.join(TEMPORAL_PROPORTIONS_SPARSE_PATH);
    let durations: Vec<Vec<f64>> = ann
        .iter()
        .flatten()
        .map(StageAnnotation::durations)
        .collect();
    let proportions = match names {
        Some(names) if !durations.is_empty() => {
            let p = StageProportions::from_durations(&durations)?;
            write_proportions_json(&prop_path, names, p.proportions())?;
            Some(
                names
                    .iter()
                    .cloned()
                    .zip(p.proportions().iter().copied())
                    .collect(),
            )
        }
        _ => {
            if prop_path.exists() {
                std::fs::remove_file(&prop_path).map_err(io_err(&prop_path))?;
                crate::durable::sync_dir(&root.join("meta"))?;
            }
            None
        }
    };
    Ok(AnnotationSummary {
        annotated: ann.iter().flatten().count(),
        episodes: n,
        proportions,
    })
}
