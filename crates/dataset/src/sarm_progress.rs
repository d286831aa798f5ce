//! `sarm_progress.parquet`: per-frame progress in the file LeRobot's RA-BC reads.
//!
//! LeRobot (`policies/sarm/compute_rabc_weights.py`) writes columns `index`, `episode_index`, `frame_index`
//! (int64), `progress_sparse` and/or `progress_dense` (float32, NaN where a frame failed), rows sorted by
//! `index`, and replaces the schema metadata with `{b"reward_model_path": ...}`. `policies/sarm/rabc.py` reads it
//! with `pd.read_parquet` and looks up `progress_<head_mode>` (default `sparse`), skipping NaN.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::columns::{column, f32_values, i64_values};
use crate::error::{arrow_err, io_err, pq_err, DatasetError, Result};
use crate::writer::write_parquet;

/// Schema-metadata key LeRobot reads the reward model from.
pub const REWARD_MODEL_PATH_KEY: &str = "reward_model_path";

/// Per-frame progress for a whole dataset.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SarmProgress {
    /// Global frame index (`index` column of the dataset).
    pub index: Vec<i64>,
    pub episode_index: Vec<i64>,
    pub frame_index: Vec<i64>,
    pub progress_sparse: Vec<f32>,
    pub progress_dense: Option<Vec<f32>>,
    /// Stored as `reward_model_path` in the parquet/arrow schema metadata.
    pub reward_model_path: Option<String>,
}

impl SarmProgress {
    pub fn len(&self) -> usize {
        self.index.len()
    }
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn check(&self, path: &Path) -> Result<()> {
        let n = self.index.len();
        let mut lens = vec![
            ("episode_index", self.episode_index.len()),
            ("frame_index", self.frame_index.len()),
            ("progress_sparse", self.progress_sparse.len()),
        ];
        if let Some(d) = &self.progress_dense {
            lens.push(("progress_dense", d.len()));
        }
        for (name, len) in lens {
            if len != n {
                return Err(DatasetError::Other {
                    path: path.to_owned(),
                    reason: format!("column `{name}` has {len} rows, `index` has {n}"),
                });
            }
        }
        Ok(())
    }

    /// Writes the file; rows are sorted by `index` as LeRobot's writer does.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        self.check(path)?;
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.sort_by_key(|&i| self.index[i]);
        let pick_i = |v: &[i64]| -> ArrayRef {
            Arc::new(Int64Array::from(
                order.iter().map(|&i| v[i]).collect::<Vec<_>>(),
            ))
        };
        let pick_f = |v: &[f32]| -> ArrayRef {
            Arc::new(Float32Array::from(
                order.iter().map(|&i| v[i]).collect::<Vec<_>>(),
            ))
        };
        let mut fields = vec![
            Field::new("index", DataType::Int64, true),
            Field::new("episode_index", DataType::Int64, true),
            Field::new("frame_index", DataType::Int64, true),
            Field::new("progress_sparse", DataType::Float32, true),
        ];
        let mut cols = vec![
            pick_i(&self.index),
            pick_i(&self.episode_index),
            pick_i(&self.frame_index),
            pick_f(&self.progress_sparse),
        ];
        if let Some(d) = &self.progress_dense {
            fields.push(Field::new("progress_dense", DataType::Float32, true));
            cols.push(pick_f(d));
        }
        let metadata: HashMap<String, String> = self
            .reward_model_path
            .iter()
            .map(|p| (REWARD_MODEL_PATH_KEY.to_owned(), p.clone()))
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(fields, metadata));
        let batch = RecordBatch::try_new(schema, cols).map_err(arrow_err(path))?;
        write_parquet(path, batch)
    }

    /// Reads a file written by LeRobot or by [`SarmProgress::write`]. `progress_sparse` is required (LeRobot's
    /// default head); `progress_dense` is read when present.
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let f = File::open(path).map_err(io_err(path))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(f).map_err(pq_err(path))?;
        let reward_model_path = builder
            .schema()
            .metadata()
            .get(REWARD_MODEL_PATH_KEY)
            .cloned();
        let has_dense = builder.schema().field_with_name("progress_dense").is_ok();
        let reader = builder.build().map_err(pq_err(path))?;
        let mut out = SarmProgress {
            reward_model_path,
            progress_dense: has_dense.then(Vec::new),
            ..Default::default()
        };
        for batch in reader {
            let batch = batch.map_err(arrow_err(path))?;
            for (name, dst) in [
                ("index", &mut out.index),
                ("episode_index", &mut out.episode_index),
                ("frame_index", &mut out.frame_index),
            ] {
                dst.extend(i64_values(column(&batch, path, name)?, path, name)?);
            }
            out.progress_sparse.extend(f32_values(
                column(&batch, path, "progress_sparse")?,
                path,
                "progress_sparse",
            )?);
            if let Some(d) = out.progress_dense.as_mut() {
                d.extend(f32_values(
                    column(&batch, path, "progress_dense")?,
                    path,
                    "progress_dense",
                )?);
            }
        }
        Ok(out)
    }
}
