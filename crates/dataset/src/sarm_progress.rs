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
                return Err(DatasetError::ColumnLength {
                    path: path.to_owned(),
                    column: name.into(),
                    rows: len,
                    expected: n,
                });
            }
        }
        Ok(())
    }

    /// Writes the file durably ([`crate::durable::write_atomic`]: `<name>.tmp`, fsync, rename, directory fsync);
    /// rows are sorted by `index` as LeRobot's writer does.
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

/// Frames scored when only every `stride`-th frame of an episode of `len` frames is run through the model:
/// `0, stride, 2 stride, ...` and always the last frame (so interpolation never extrapolates). `stride` 0 counts
/// as 1. Empty for an empty episode.
pub fn strided_frames(len: usize, stride: usize) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    let mut out: Vec<usize> = (0..len).step_by(stride.max(1)).collect();
    if out.last() != Some(&(len - 1)) {
        out.push(len - 1);
    }
    out
}

/// Per-frame values of an episode of `len` frames from values at the `scored` frames (strictly increasing, the
/// first 0 and the last `len - 1`, as [`strided_frames`] returns), linearly interpolated in between.
pub fn interpolate_linear(
    len: usize,
    scored: &[usize],
    values: &[f32],
) -> Result<Vec<f32>, String> {
    if scored.len() != values.len() {
        return Err(format!(
            "{} scored frames but {} values",
            scored.len(),
            values.len()
        ));
    }
    if len == 0 {
        return if scored.is_empty() {
            Ok(Vec::new())
        } else {
            Err("scored frames given for an empty episode".into())
        };
    }
    if scored.first() != Some(&0) || scored.last() != Some(&(len - 1)) {
        return Err(format!(
            "scored frames must start at 0 and end at the last frame {}, got {:?}..{:?}",
            len - 1,
            scored.first(),
            scored.last()
        ));
    }
    if scored.windows(2).any(|w| w[0] >= w[1]) {
        return Err("scored frames must be strictly increasing".into());
    }
    let mut out = vec![0.0f32; len];
    out[0] = values[0];
    for (w, v) in scored.windows(2).zip(values.windows(2)) {
        let (a, b) = (w[0], w[1]);
        let span = (b - a) as f64;
        for (t, slot) in out.iter_mut().enumerate().take(b + 1).skip(a) {
            let x = (t - a) as f64 / span;
            *slot = (f64::from(v[0]) * (1.0 - x) + f64::from(v[1]) * x) as f32;
        }
    }
    Ok(out)
}

impl SarmProgress {
    /// Progress grouped by episode: `(episode_index, progress by frame_index)`, episodes in increasing order.
    /// Refuses repeated or missing frame indices (every episode must cover `0..len`), naming `path` (the file the
    /// rows came from) in the error.
    pub fn per_episode(&self, path: &Path) -> Result<Vec<(i64, Vec<f32>)>> {
        self.check(path)?;
        let mut rows: Vec<usize> = (0..self.len()).collect();
        rows.sort_by_key(|&i| (self.episode_index[i], self.frame_index[i]));
        let mut out: Vec<(i64, Vec<f32>)> = Vec::new();
        for &i in &rows {
            let (ep, frame) = (self.episode_index[i], self.frame_index[i]);
            if out.last().map(|(e, _)| *e) != Some(ep) {
                out.push((ep, Vec::new()));
            }
            let (_, values) = out.last_mut().expect("pushed above");
            if frame != values.len() as i64 {
                return Err(DatasetError::BadValue {
                    path: path.to_owned(),
                    column: "frame_index".into(),
                    row: i,
                    reason: format!(
                        "episode {ep}: frame_index {frame} where {} was expected (frames must be 0..len, once each)",
                        values.len()
                    ),
                });
            }
            values.push(self.progress_sparse[i]);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_frames_always_end_on_the_last_frame() {
        assert_eq!(strided_frames(0, 4), Vec::<usize>::new());
        assert_eq!(strided_frames(1, 4), vec![0]);
        assert_eq!(strided_frames(9, 4), vec![0, 4, 8]);
        assert_eq!(strided_frames(10, 4), vec![0, 4, 8, 9]);
        assert_eq!(strided_frames(3, 0), vec![0, 1, 2]);
    }

    #[test]
    fn interpolation_is_linear_between_scored_frames() {
        let scored = strided_frames(10, 4);
        let v = interpolate_linear(10, &scored, &[0.0, 0.4, 0.8, 1.0]).unwrap();
        let want = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0];
        for (a, b) in v.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{v:?}");
        }
        assert_eq!(interpolate_linear(1, &[0], &[0.3]).unwrap(), vec![0.3]);
        assert!(interpolate_linear(10, &[0, 4], &[0.0, 1.0]).is_err());
        assert!(interpolate_linear(10, &[0, 9], &[0.0]).is_err());
        assert!(interpolate_linear(10, &[0, 5, 5, 9], &[0.0; 4]).is_err());
    }

    #[test]
    fn per_episode_groups_and_checks_frames() {
        let p = SarmProgress {
            index: vec![3, 0, 1, 2],
            episode_index: vec![1, 0, 0, 1],
            frame_index: vec![1, 0, 1, 0],
            progress_sparse: vec![0.9, 0.1, 0.2, 0.5],
            ..Default::default()
        };
        let path = Path::new("x/sarm_progress.parquet");
        let g = p.per_episode(path).unwrap();
        assert_eq!(g, vec![(0, vec![0.1, 0.2]), (1, vec![0.5, 0.9])]);
        let gap = SarmProgress {
            frame_index: vec![2, 0, 1, 0],
            ..p
        };
        let msg = gap.per_episode(path).unwrap_err().to_string();
        assert!(
            msg.contains("sarm_progress.parquet") && msg.contains("frame_index"),
            "{msg}"
        );
    }
}
