//! The `meta/` side of [`DatasetWriter`]: at [`DatasetWriter::finish`], info.json, stats.json, tasks.parquet,
//! the episodes parquet and the SARM stage priors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int64Builder, ListBuilder, StringBuilder,
};
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use stagewise_core::StageProportions;

use super::{write_parquet, DatasetSummary, DatasetWriter, EpisodeRecord, StageAnnotation};
use crate::annotations::stage_columns;
use crate::durable;
use crate::error::{arrow_err, io_err, DatasetError, Result};
use crate::info::{
    format_template, write_proportions_json, InfoJson, OrderedMap, CODEBASE_VERSION,
    DEFAULT_CHUNK_SIZE, DEFAULT_DATA_PATH, DEFAULT_VIDEO_PATH, EPISODES_PATH, INFO_PATH,
    STATS_PATH, TASKS_PATH, TEMPORAL_PROPORTIONS_SPARSE_PATH,
};
use crate::stats::FeatureStats;

impl DatasetWriter {
    /// Closes the data file and writes `meta/`: info.json, stats.json, tasks.parquet, the episodes parquet and,
    /// when any episode is annotated, temporal_proportions_sparse.json.
    pub fn finish(mut self) -> Result<DatasetSummary> {
        self.close_file()?;
        for v in 0..self.tracks.len() {
            self.close_track(v)?;
        }
        tracing::debug!(
            root = %self.root.display(),
            episodes = self.episodes.len(),
            frames = self.total_frames,
            "writing dataset metadata"
        );

        // Stage priors a_k = (1/M) sum_i L_ik / T_i over the M annotated episodes (DESIGN.md; SARM eq. 1).
        let mut stage_proportions = None;
        let durations: Vec<Vec<f64>> = self
            .episodes
            .iter()
            .filter_map(|e| e.stages.as_ref().map(StageAnnotation::durations))
            .collect();
        if let (false, Some(names)) = (durations.is_empty(), &self.stage_names) {
            let props = StageProportions::from_durations(&durations)?;
            let path = self.root.join(TEMPORAL_PROPORTIONS_SPARSE_PATH);
            write_proportions_json(&path, names, props.proportions())?;
            stage_proportions = Some(
                names
                    .iter()
                    .cloned()
                    .zip(props.proportions().iter().copied())
                    .collect(),
            );
        }

        self.write_tasks()?;
        self.write_episodes()?;

        // stats.json: one entry per feature of the column table, cameras per channel.
        let mut stats = serde_json::Map::new();
        for (col, st) in self.columns.iter().zip(&self.stats) {
            match st {
                Some(st) if st.count > 0 && col.is_camera() => {
                    stats.insert(col.key.clone(), st.to_json_image());
                }
                Some(st) if st.count > 0 => {
                    stats.insert(col.key.clone(), st.to_json());
                }
                _ => {}
            }
        }
        let stats_path = self.root.join(STATS_PATH);
        write_json(&stats_path, &serde_json::Value::Object(stats))?;

        let n = self.episodes.len() as u64;
        let info = InfoJson {
            codebase_version: CODEBASE_VERSION.into(),
            robot_type: self.info.robot_type.clone(),
            total_episodes: n,
            total_frames: self.total_frames,
            total_tasks: self.tasks.len() as u64,
            chunks_size: DEFAULT_CHUNK_SIZE,
            data_files_size_in_mb: self.info.data_files_size_in_mb,
            video_files_size_in_mb: self.info.video_files_size_in_mb,
            fps: self.info.fps,
            splits: OrderedMap(vec![("train".into(), format!("0:{n}"))]),
            data_path: DEFAULT_DATA_PATH.into(),
            video_path: (!self.tracks.is_empty()).then(|| DEFAULT_VIDEO_PATH.to_string()),
            features: self.features.clone(),
        };
        // info.json last: a dataset whose info.json is on disk is complete. The directories the writer created
        // are fsynced up to the root's parent, so their names are on disk too.
        let info_path = self.root.join(INFO_PATH);
        write_json(&info_path, &info)?;
        durable::sync_dirs_up_to(&self.created_dirs()?, &self.root)?;
        Ok(DatasetSummary {
            root: self.root.clone(),
            episodes: self.episodes.len(),
            frames: self.total_frames,
            data_files: self.data_files,
            stage_proportions,
        })
    }

    /// The directories under the root that hold files of this dataset (data chunks, meta, meta/episodes
    /// chunks).
    fn created_dirs(&self) -> Result<Vec<PathBuf>> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut add = |rel: String| {
            if let Some(parent) = self.root.join(rel).parent() {
                if !dirs.iter().any(|d| d == parent) {
                    dirs.push(parent.to_owned());
                }
            }
        };
        let (last_chunk, _) = self.next_chunk_file;
        for chunk in 0..=last_chunk {
            add(format_template(
                DEFAULT_DATA_PATH,
                &[("chunk_index", "", chunk), ("file_index", "", 0)],
            )
            .map_err(DatasetError::Input)?);
        }
        add(format_template(
            EPISODES_PATH,
            &[("chunk_index", "", 0), ("file_index", "", 0)],
        )
        .map_err(DatasetError::Input)?);
        add(INFO_PATH.to_string());
        for t in &self.tracks {
            for &chunk in &t.chunks {
                add(format_template(
                    DEFAULT_VIDEO_PATH,
                    &[
                        ("video_key", &t.key, 0),
                        ("chunk_index", "", chunk),
                        ("file_index", "", 0),
                    ],
                )
                .map_err(DatasetError::Input)?);
            }
        }
        Ok(dirs.into_iter().filter(|d| d.is_dir()).collect())
    }

    fn write_tasks(&self) -> Result<()> {
        // pandas `DataFrame({"task_index": ...}, index=Index(tasks, name="task")).to_parquet()`: the index is
        // stored as the last column, and the `pandas` schema metadata makes pandas restore it as the index
        // (LeRobot looks tasks up by `tasks.loc[task]` and `tasks.iloc[i].name`).
        let path = self.root.join(TASKS_PATH);
        let pandas_meta = serde_json::json!({
            "index_columns": ["task"],
            "column_indexes": [{"name": null, "field_name": null, "pandas_type": "unicode", "numpy_type": "object",
                                "metadata": {"encoding": "UTF-8"}}],
            "columns": [
                {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
                 "metadata": null},
                {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object",
                 "metadata": null}
            ],
            "creator": {"library": "stagewise-dataset", "version": env!("CARGO_PKG_VERSION")},
            "pandas_version": "2.2.3"
        });
        let schema = Schema::new_with_metadata(
            vec![
                Field::new("task_index", DataType::Int64, true),
                Field::new("task", DataType::Utf8, true),
            ],
            [("pandas".to_owned(), pandas_meta.to_string())]
                .into_iter()
                .collect::<HashMap<_, _>>(),
        );
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(
                    (0..self.tasks.len() as i64).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from(self.tasks.clone())),
            ],
        )
        .map_err(arrow_err(&path))?;
        write_parquet(&path, batch)
    }

    /// `meta/episodes/chunk-000/file-000.parquet`, one row per episode, its columns in LeRobot's order: where the
    /// episode is ([`Self::location_columns`], [`Self::video_columns`]), `success`, the SARM stage columns
    /// ([`stage_columns`]), its statistics ([`Self::stats_columns`]), then where its metadata is.
    fn write_episodes(&self) -> Result<()> {
        let rel = format_template(
            EPISODES_PATH,
            &[("chunk_index", "", 0), ("file_index", "", 0)],
        )
        .map_err(DatasetError::Input)?;
        let path = self.root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        let eps = &self.episodes;
        let mut cols = EpisodeColumns::default();
        self.location_columns(&mut cols);
        self.video_columns(&mut cols);
        let mut success = BooleanBuilder::new();
        for e in eps {
            success.append_value(e.success);
        }
        cols.push("success", Arc::new(success.finish()));
        // SARM sparse annotation columns, null for episodes without annotation.
        let stages: Vec<Option<&StageAnnotation>> = eps.iter().map(|e| e.stages.as_ref()).collect();
        for (name, col) in stage_columns(&stages, self.info.fps as f64) {
            cols.push(name, col);
        }
        self.stats_columns(&mut cols);
        cols.int("meta/episodes/chunk_index", eps, |_| 0);
        cols.int("meta/episodes/file_index", eps, |_| 0);
        let batch = RecordBatch::try_new(Arc::new(Schema::new(cols.fields)), cols.arrays)
            .map_err(arrow_err(&path))?;
        write_parquet(&path, batch)
    }

    /// `episode_index`, `tasks`, `length`, `data/chunk_index`, `data/file_index`, `dataset_from_index`,
    /// `dataset_to_index`.
    fn location_columns(&self, cols: &mut EpisodeColumns) {
        let eps = &self.episodes;
        cols.int("episode_index", eps, |e| e.index as i64);
        let mut tasks = ListBuilder::new(StringBuilder::new());
        for e in eps {
            tasks.values().append_value(&e.task);
            tasks.append(true);
        }
        cols.push("tasks", Arc::new(tasks.finish()));
        cols.int("length", eps, |e| e.length as i64);
        cols.int("data/chunk_index", eps, |e| e.chunk as i64);
        cols.int("data/file_index", eps, |e| e.file as i64);
        cols.int("dataset_from_index", eps, |e| e.from as i64);
        cols.int("dataset_to_index", eps, |e| {
            (e.from + e.length as u64) as i64
        });
    }

    /// LeRobot v3 video columns: where each episode's frames are (`_save_episode_video`), per video camera
    /// `videos/<key>/{chunk_index, file_index, from_timestamp, to_timestamp}`.
    fn video_columns(&self, cols: &mut EpisodeColumns) {
        let eps = &self.episodes;
        for (v, t) in self.tracks.iter().enumerate() {
            cols.int(&format!("videos/{}/chunk_index", t.key), eps, |e| {
                e.videos[v].0 as i64
            });
            cols.int(&format!("videos/{}/file_index", t.key), eps, |e| {
                e.videos[v].1 as i64
            });
            let from: Vec<f64> = eps.iter().map(|e| e.videos[v].2).collect();
            let to: Vec<f64> = eps.iter().map(|e| e.videos[v].3).collect();
            cols.push(
                &format!("videos/{}/from_timestamp", t.key),
                Arc::new(Float64Array::from(from)),
            );
            cols.push(
                &format!("videos/{}/to_timestamp", t.key),
                Arc::new(Float64Array::from(to)),
            );
        }
    }

    /// Per-episode statistics of the numeric features of the column table (`stats/<feature>/<stat>`, lists
    /// like LeRobot), in table order.
    fn stats_columns(&self, cols: &mut EpisodeColumns) {
        let eps = &self.episodes;
        for (k, col) in self.columns.iter().enumerate() {
            if col.episode_stats().is_none() {
                continue;
            }
            let key = &col.key;
            let list = |get: &dyn Fn(&FeatureStats) -> Vec<f64>| -> ArrayRef {
                let mut b = ListBuilder::new(Float64Builder::new());
                for e in eps {
                    for v in e.stats[k].as_ref().map(get).unwrap_or_default() {
                        b.values().append_value(v);
                    }
                    b.append(true);
                }
                Arc::new(b.finish())
            };
            cols.push(&format!("stats/{key}/min"), list(&|s| s.min.clone()));
            cols.push(&format!("stats/{key}/max"), list(&|s| s.max.clone()));
            cols.push(&format!("stats/{key}/mean"), list(&|s| s.mean.clone()));
            cols.push(&format!("stats/{key}/std"), list(&|s| s.std()));
            let mut count = ListBuilder::new(Int64Builder::new());
            for e in eps {
                count
                    .values()
                    .append_value(e.stats[k].as_ref().map_or(0, |s| s.count) as i64);
                count.append(true);
            }
            cols.push(&format!("stats/{key}/count"), Arc::new(count.finish()));
        }
    }
}

/// The columns of the episodes parquet, in the order they are pushed.
#[derive(Default)]
struct EpisodeColumns {
    fields: Vec<Field>,
    arrays: Vec<ArrayRef>,
}

impl EpisodeColumns {
    fn push(&mut self, name: &str, col: ArrayRef) {
        self.fields
            .push(Field::new(name, col.data_type().clone(), true));
        self.arrays.push(col);
    }

    /// An int64 column with one value per episode.
    fn int(&mut self, name: &str, eps: &[EpisodeRecord], f: impl Fn(&EpisodeRecord) -> i64) {
        self.push(
            name,
            Arc::new(Int64Array::from(eps.iter().map(f).collect::<Vec<_>>())),
        );
    }
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    // LeRobot's write_json: indent=4.
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    value
        .serialize(&mut ser)
        .map_err(|source| DatasetError::Json {
            path: path.to_owned(),
            source,
        })?;
    buf.push(b'\n');
    durable::write_bytes(path, &buf)
}
