//! [`Dataset`]: reads a LeRobot v3 dataset from disk (info.json, tasks, episode metadata, data parquet files,
//! image columns, SARM annotation columns, video columns through ffmpeg).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use image::RgbImage;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use parquet::file::statistics::Statistics;
use rayon::prelude::*;

use crate::columns::{column, i64_values, ints_any, list_rows, numeric_f64, strings};
use crate::contents::{StageAnnotation, ACTION_KEY, STATE_KEY};
use crate::error::{arrow_err, io_err, pq_err, DatasetError, Result};
use crate::features::{self, Cells, Column, Kind};
use crate::info::{
    format_template, read_proportions_json, Feature, InfoJson, SARM_PROGRESS_FILE, STATS_PATH,
    TASKS_PATH, TEMPORAL_PROPORTIONS_SPARSE_PATH,
};

/// Where one episode's frames of one video feature are (LeRobot v3 `videos/<key>/...` episode columns).
#[derive(Debug, Clone, PartialEq)]
pub struct VideoRef {
    pub key: String,
    pub chunk_index: u64,
    pub file_index: u64,
    pub from_timestamp: f64,
    pub to_timestamp: f64,
}

/// One row of `meta/episodes/*/*.parquet`.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeMeta {
    pub episode_index: usize,
    pub length: usize,
    pub tasks: Vec<String>,
    pub dataset_from_index: u64,
    pub dataset_to_index: u64,
    pub data_chunk_index: u64,
    pub data_file_index: u64,
    /// Stagewise's `success` column, when the dataset has one.
    pub success: Option<bool>,
    /// SARM `sparse_subtask_*` columns (or the legacy unprefixed `subtask_*`), when annotated.
    pub stages: Option<StageAnnotation>,
    pub videos: Vec<VideoRef>,
}

/// Whether [`Dataset::read_episode`] decodes image/video columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Images {
    /// Decode, the PNG frames spread over rayon's thread pool.
    Decode,
    /// Decode on the calling thread: for callers that already run one reader per core (more threads than
    /// cores would only take turns).
    DecodeOnThisThread,
    Skip,
}

/// The frames of one episode, column by column.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub meta: EpisodeMeta,
    pub index: Vec<i64>,
    pub frame_index: Vec<i64>,
    pub timestamp: Vec<f32>,
    pub task_index: Vec<i64>,
    pub state_dim: usize,
    /// Row-major `len x state_dim` (empty when the dataset has no `observation.state`).
    pub state: Vec<f32>,
    pub action_dim: usize,
    /// Row-major `len x action_dim` (empty when the dataset has no `action`).
    pub action: Vec<f32>,
    /// `(feature key, one image per frame)` for every image/video feature, in info.json order
    /// (empty with [`Images::Skip`]).
    pub images: Vec<(String, Vec<RgbImage>)>,
    /// Other scalar feature columns, as f64 (NaN for nulls), in info.json order.
    pub extras: Vec<(String, Vec<f64>)>,
}

impl Episode {
    pub fn len(&self) -> usize {
        self.frame_index.len()
    }
    pub fn is_empty(&self) -> bool {
        self.frame_index.is_empty()
    }
    pub fn state(&self, frame: usize) -> &[f32] {
        self.state
            .get(frame * self.state_dim..(frame + 1) * self.state_dim)
            .unwrap_or(&[])
    }
    pub fn action(&self, frame: usize) -> &[f32] {
        self.action
            .get(frame * self.action_dim..(frame + 1) * self.action_dim)
            .unwrap_or(&[])
    }
    pub fn images(&self, key: &str) -> Option<&[RgbImage]> {
        self.images
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_slice())
    }
    pub fn extra(&self, key: &str) -> Option<&[f64]> {
        self.extras
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_slice())
    }
}

/// A LeRobot v3 dataset opened from disk. Frames are read per episode ([`Dataset::read_episode`]).
#[derive(Debug, Clone)]
pub struct Dataset {
    root: PathBuf,
    info: InfoJson,
    /// info.json's features as the column table ([`features::table`]) that reading iterates.
    columns: Vec<Column>,
    tasks: Vec<String>,
    episodes: Vec<EpisodeMeta>,
    stats: Option<serde_json::Value>,
    proportions: Option<Vec<(String, f64)>>,
    /// Parsed parquet footers of the data files, read once: an episode read parses only its row groups.
    footers: Arc<Mutex<HashMap<PathBuf, ArrowReaderMetadata>>>,
    /// How far a video frame may be from its row's timestamp (LeRobot's `tolerance_s`).
    video_tolerance_s: f64,
}

fn read_all(path: &Path) -> Result<Vec<RecordBatch>> {
    let f = File::open(path).map_err(io_err(path))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(f)
        .map_err(pq_err(path))?
        .build()
        .map_err(pq_err(path))?;
    reader.map(|b| b.map_err(arrow_err(path))).collect()
}

impl Dataset {
    /// Opens the dataset in `dir`: reads and checks info.json, tasks, episode metadata, stats.json and the SARM
    /// stage priors. Fails on video features unless built with the `video` feature.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let root = dir.as_ref().to_owned();
        let info = InfoJson::read(&root)?;
        let columns = features::table(&info.features);
        let tasks = read_tasks(&root.join(TASKS_PATH))?;
        let episodes = read_episodes(&root, &info, &columns, &tasks)?;
        let stats_path = root.join(STATS_PATH);
        let stats = if stats_path.exists() {
            let text = std::fs::read_to_string(&stats_path).map_err(io_err(&stats_path))?;
            Some(
                serde_json::from_str(&text).map_err(|source| DatasetError::Json {
                    path: stats_path,
                    source,
                })?,
            )
        } else {
            None
        };
        let prop_path = root.join(TEMPORAL_PROPORTIONS_SPARSE_PATH);
        let proportions = if prop_path.exists() {
            Some(read_proportions_json(&prop_path)?)
        } else {
            None
        };
        Ok(Self {
            root,
            info,
            columns,
            tasks,
            episodes,
            stats,
            proportions,
            footers: Default::default(),
            video_tolerance_s: crate::video::VIDEO_TOLERANCE_S,
        })
    }

    /// How far the decoded frame of a video feature may be from its row's `from_timestamp + timestamp`
    /// (LeRobot's `tolerance_s`; default [`crate::video::VIDEO_TOLERANCE_S`], 1e-4 s).
    pub fn with_video_tolerance(mut self, seconds: f64) -> Self {
        self.video_tolerance_s = seconds;
        self
    }

    /// The video feature keys, in info.json order.
    pub fn video_keys(&self) -> Vec<&str> {
        self.video_features().into_iter().map(|(k, _)| k).collect()
    }

    /// Path of the MP4 file that holds episode `ep`'s frames of video feature `key`.
    pub fn video_file(&self, ep: usize, key: &str) -> Result<PathBuf> {
        let meta = self.episode_meta(ep)?;
        let template = self
            .info
            .video_path
            .as_deref()
            .ok_or_else(|| self.info_field("video_path", "is null".into()))?;
        let vref =
            meta.videos
                .iter()
                .find(|v| v.key == key)
                .ok_or_else(|| DatasetError::Episode {
                    path: self.root.clone(),
                    episode: ep,
                    reason: format!("episode metadata lacks the videos/{key}/* columns"),
                })?;
        let rel = format_template(
            template,
            &[
                ("video_key", key, 0),
                ("chunk_index", "", vref.chunk_index),
                ("file_index", "", vref.file_index),
            ],
        )
        .map_err(|reason| self.info_field("video_path", reason))?;
        Ok(self.root.join(rel))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn info(&self) -> &InfoJson {
        &self.info
    }
    pub fn fps(&self) -> u32 {
        self.info.fps
    }
    /// Task strings by task_index.
    pub fn tasks(&self) -> &[String] {
        &self.tasks
    }
    pub fn episodes(&self) -> &[EpisodeMeta] {
        &self.episodes
    }
    pub fn num_episodes(&self) -> usize {
        self.episodes.len()
    }
    pub fn num_frames(&self) -> u64 {
        self.episodes.iter().map(|e| e.length as u64).sum()
    }
    /// meta/stats.json as JSON, when present.
    pub fn stats(&self) -> Option<&serde_json::Value> {
        self.stats.as_ref()
    }
    /// meta/temporal_proportions_sparse.json: `(stage name, proportion)` in file order.
    pub fn temporal_proportions_sparse(&self) -> Option<&[(String, f64)]> {
        self.proportions.as_deref()
    }
    /// Image and video feature keys, in info.json order.
    pub fn camera_keys(&self) -> Vec<&str> {
        self.info
            .features
            .iter()
            .filter(|(_, f)| f.is_visual())
            .map(|(k, _)| k)
            .collect()
    }
    /// The image/video feature key of a camera called `view` (a model's view name): the key itself,
    /// `observation.images.<view>`, or the one camera key ending in `.<view>`. The error names info.json and lists
    /// the dataset's camera keys.
    pub fn camera_key(&self, view: &str) -> Result<String> {
        let keys = self.camera_keys();
        let suffix = format!(".{view}");
        let full = format!("observation.images.{view}");
        let found = keys
            .iter()
            .find(|k| **k == view)
            .or_else(|| keys.iter().find(|k| **k == full))
            .copied()
            .or_else(|| {
                let mut it = keys.iter().filter(|k| k.ends_with(&suffix));
                match (it.next(), it.next()) {
                    (Some(k), None) => Some(*k),
                    _ => None,
                }
            });
        found.map(str::to_owned).ok_or_else(|| {
            self.info_field(
                "features",
                format!("no image or video feature for camera `{view}` (camera keys: {keys:?})"),
            )
        })
    }
    pub fn state_names(&self) -> Option<Vec<String>> {
        self.info
            .features
            .get(STATE_KEY)
            .and_then(|f| f.name_list())
    }
    pub fn action_names(&self) -> Option<Vec<String>> {
        self.info
            .features
            .get(ACTION_KEY)
            .and_then(|f| f.name_list())
    }
    /// `<root>/sarm_progress.parquet`, where LeRobot's RA-BC looks for per-frame progress.
    pub fn sarm_progress_path(&self) -> PathBuf {
        self.root.join(SARM_PROGRESS_FILE)
    }

    /// Path of the data file that holds episode `ep`.
    pub fn data_file(&self, ep: usize) -> Result<PathBuf> {
        let meta = self.episode_meta(ep)?;
        let rel = format_template(
            &self.info.data_path,
            &[
                ("chunk_index", "", meta.data_chunk_index),
                ("file_index", "", meta.data_file_index),
            ],
        )
        .map_err(|reason| self.info_field("data_path", reason))?;
        Ok(self.root.join(rel))
    }

    fn info_field(&self, field: &str, reason: String) -> DatasetError {
        DatasetError::Field {
            path: self.root.join(crate::info::INFO_PATH),
            field: field.into(),
            reason,
        }
    }

    fn episode_meta(&self, ep: usize) -> Result<&EpisodeMeta> {
        self.episodes.get(ep).ok_or_else(|| DatasetError::Episode {
            path: self.root.clone(),
            episode: ep,
            reason: format!(
                "out of range: the dataset has {} episodes",
                self.episodes.len()
            ),
        })
    }

    /// The parsed footer of data file `path` (opened as `f`), parsed on first use.
    fn footer(&self, path: &Path, f: &File) -> Result<ArrowReaderMetadata> {
        // A poisoned lock only means another reader panicked; the map itself is still valid.
        let mut footers = self.footers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = footers.get(path) {
            return Ok(m.clone());
        }
        let m =
            ArrowReaderMetadata::load(f, ArrowReaderOptions::default()).map_err(pq_err(path))?;
        footers.insert(path.to_owned(), m.clone());
        Ok(m)
    }

    /// Reads all columns of episode `ep`; image columns are decoded (on rayon's pool, or on this thread)
    /// unless `images` is [`Images::Skip`].
    pub fn read_episode(&self, ep: usize, images: Images) -> Result<Episode> {
        self.read_episode_inner(ep, images, true)
    }

    /// [`Self::read_episode`] for several episodes: the frames of consecutive episodes that share a video file
    /// come from one ffmpeg run per camera (a run costs ~0.1 s of CPU to start: per episode it dominates
    /// reading a dataset of short episodes), at most ~256 MB of decoded frames at a time. Episodes come back in
    /// the order asked for.
    pub fn read_episodes(&self, eps: &[usize], images: Images) -> Result<Vec<Episode>> {
        let mut out: Vec<Episode> = if images == Images::DecodeOnThisThread {
            eps.iter()
                .map(|&e| self.read_episode_inner(e, images, false))
                .collect::<Result<_>>()?
        } else {
            eps.par_iter()
                .map(|&e| self.read_episode_inner(e, images, false))
                .collect::<Result<_>>()?
        };
        if images == Images::Skip {
            return Ok(out);
        }
        let videos = self.video_features();
        let decode = |(key, ft): &(&str, &Feature)| -> Result<Vec<Vec<RgbImage>>> {
            let (h, w, _) = ft.image_hwc().ok_or_else(|| {
                self.info_field(&format!("features.{key}.shape"), "not [h, w, 3]".into())
            })?;
            let budget = (256usize << 20) / (w as usize * h as usize * 3).max(1);
            let mut per_ep: Vec<Vec<RgbImage>> = Vec::with_capacity(out.len());
            let mut i = 0;
            while i < out.len() {
                // A run of episodes in the same file, within the frame budget.
                let path = self.video_file(out[i].meta.episode_index, key)?;
                let mut j = i + 1;
                let mut frames = out[i].len();
                while j < out.len()
                    && frames + out[j].len() <= budget
                    && self.video_file(out[j].meta.episode_index, key)? == path
                {
                    frames += out[j].len();
                    j += 1;
                }
                let mut wanted = Vec::with_capacity(frames);
                for e in &out[i..j] {
                    let vref = self.video_ref(&e.meta, key)?;
                    wanted.extend(e.timestamp.iter().enumerate().map(|(f, &t)| {
                        crate::video::Wanted {
                            episode: e.meta.episode_index,
                            frame: f,
                            time: vref.from_timestamp + f64::from(t),
                        }
                    }));
                }
                let mut decoded = crate::video::decode_wanted(
                    &path,
                    key,
                    &wanted,
                    self.info.fps,
                    w,
                    h,
                    self.video_tolerance_s,
                )?
                .into_iter();
                for e in &out[i..j] {
                    per_ep.push(decoded.by_ref().take(e.len()).collect());
                }
                i = j;
            }
            Ok(per_ep)
        };
        let decoded: Vec<Vec<Vec<RgbImage>>> = if images == Images::DecodeOnThisThread {
            videos.iter().map(decode).collect::<Result<_>>()?
        } else {
            videos.par_iter().map(decode).collect::<Result<_>>()?
        };
        for ((key, _), per_ep) in videos.iter().zip(decoded) {
            for (e, frames) in out.iter_mut().zip(per_ep) {
                e.images.push(((*key).to_owned(), frames));
            }
        }
        Ok(out)
    }

    fn video_ref<'m>(&self, meta: &'m EpisodeMeta, key: &str) -> Result<&'m VideoRef> {
        meta.videos
            .iter()
            .find(|v| v.key == key)
            .ok_or_else(|| DatasetError::Episode {
                path: self.root.clone(),
                episode: meta.episode_index,
                reason: format!("episode metadata lacks the videos/{key}/* columns"),
            })
    }

    /// Reads episode `ep` from its data file, in named steps: open the rows ([`Self::episode_rows`]), take the
    /// episode's values of every column the table reads ([`read_rows`]), check the length, put the rows in
    /// frame order, decode the image columns ([`decode_images`]) and, when `videos`, the video features.
    fn read_episode_inner(&self, ep: usize, images: Images, videos: bool) -> Result<Episode> {
        let meta = self.episode_meta(ep)?.clone();
        let path = self.data_file(ep)?;
        let columns: Vec<&Column> = self
            .columns
            .iter()
            .filter(|c| c.reads(images != Images::Skip))
            .collect();
        let rows = self.episode_rows(ep, &path, &columns)?;
        let mut cells = read_rows(rows, &path, ep, &columns)?;
        let frame_index = frame_index(&columns, &cells);
        if frame_index.len() != meta.length {
            return Err(DatasetError::Episode {
                path,
                episode: ep,
                reason: format!(
                    "episode metadata says {} frames, the data file has {} rows with episode_index {ep}",
                    meta.length,
                    frame_index.len()
                ),
            });
        }
        // Frames in frame_index order.
        let mut order: Vec<usize> = (0..frame_index.len()).collect();
        order.sort_by_key(|&i| frame_index[i]);
        if order.iter().enumerate().any(|(a, &b)| a != b) {
            for c in cells.iter_mut().flatten() {
                c.permute(&order);
            }
        }
        let (mut out, pngs) = self.assemble(meta, &columns, cells);
        out.images = decode_images(&path, ep, pngs, images)?;
        if videos && images != Images::Skip {
            let read = |(key, ft): &(&str, &Feature)| {
                self.read_video(&out.meta, key, ft, &out.timestamp)
                    .map(|frames| ((*key).to_owned(), frames))
            };
            let features = self.video_features();
            let decoded: Result<Vec<(String, Vec<RgbImage>)>> =
                if images == Images::DecodeOnThisThread {
                    features.iter().map(read).collect()
                } else {
                    features.par_iter().map(read).collect()
                };
            out.images.extend(decoded?);
        }
        Ok(out)
    }

    /// The video features of the column table, with their info.json entries.
    fn video_features(&self) -> Vec<(&str, &Feature)> {
        self.columns
            .iter()
            .filter(|c| matches!(c.kind, Kind::Video { .. }))
            .filter_map(|c| Some((c.key.as_str(), self.info.features.get(&c.key)?)))
            .collect()
    }

    /// Opens data file `path` for episode `ep`: every column in `columns` must be there (the error names the file
    /// and the column); only those columns are read, and only the row groups whose `episode_index` statistics
    /// may hold `ep`.
    fn episode_rows(
        &self,
        ep: usize,
        path: &Path,
        columns: &[&Column],
    ) -> Result<ParquetRecordBatchReader> {
        let f = File::open(path).map_err(io_err(path))?;
        let footer = self.footer(path, &f)?;
        let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(f, footer);
        let schema = builder.schema().clone();
        let mut roots = Vec::with_capacity(columns.len());
        for c in columns {
            let i = schema
                .index_of(&c.key)
                .map_err(|_| DatasetError::MissingColumn {
                    path: path.to_owned(),
                    column: c.key.clone(),
                })?;
            roots.push(i);
        }
        let parquet_schema = builder.parquet_schema();
        let mask = parquet::arrow::ProjectionMask::roots(parquet_schema, roots);

        // Skip row groups whose episode_index statistics exclude this episode.
        let epi_col = parquet_schema
            .columns()
            .iter()
            .position(|c| c.path().string() == "episode_index");
        let groups: Vec<usize> = builder
            .metadata()
            .row_groups()
            .iter()
            .enumerate()
            .filter(
                |(_, rg)| match epi_col.and_then(|c| rg.column(c).statistics()) {
                    Some(Statistics::Int64(s)) => match (s.min_opt(), s.max_opt()) {
                        (Some(&lo), Some(&hi)) => lo <= ep as i64 && ep as i64 <= hi,
                        _ => true,
                    },
                    _ => true,
                },
            )
            .map(|(i, _)| i)
            .collect();
        builder
            .with_projection(mask)
            .with_row_groups(groups)
            .build()
            .map_err(pq_err(path))
    }

    /// An [`Episode`] from the values read for `columns` (and the PNG bytes of the image columns, still to be
    /// decoded).
    fn assemble(
        &self,
        meta: EpisodeMeta,
        columns: &[&Column],
        cells: Vec<Option<Cells>>,
    ) -> (Episode, PngColumns) {
        let dim = |key: &str| {
            self.info
                .features
                .get(key)
                .map(|f| f.shape.iter().product())
                .unwrap_or(0)
        };
        let mut out = Episode {
            meta,
            index: Vec::new(),
            frame_index: Vec::new(),
            timestamp: Vec::new(),
            task_index: Vec::new(),
            state_dim: dim(STATE_KEY),
            state: Vec::new(),
            action_dim: dim(ACTION_KEY),
            action: Vec::new(),
            images: Vec::new(),
            extras: Vec::new(),
        };
        let mut pngs = Vec::new();
        for (col, c) in columns.iter().zip(cells) {
            match (col.kind, c) {
                (Kind::Index, Some(Cells::I64(v))) => out.index = v,
                (Kind::FrameIndex, Some(Cells::I64(v))) => out.frame_index = v,
                (Kind::TaskIndex, Some(Cells::I64(v))) => out.task_index = v,
                (Kind::Timestamp, Some(Cells::F32(v))) => out.timestamp = v,
                (Kind::State, Some(Cells::Vectors { values, .. })) => out.state = values,
                (Kind::Action, Some(Cells::Vectors { values, .. })) => out.action = values,
                (Kind::Image { .. }, Some(Cells::Png(b))) => pngs.push((col.key.clone(), b)),
                (Kind::Extra, Some(Cells::F64(v))) => out.extras.push((col.key.clone(), v)),
                _ => {}
            }
        }
        (out, pngs)
    }

    /// The frames of video feature `key` for the rows with `timestamps` (LeRobot: the frame nearest
    /// `from_timestamp + timestamp`, within the tolerance).
    fn read_video(
        &self,
        meta: &EpisodeMeta,
        key: &str,
        ft: &Feature,
        timestamps: &[f32],
    ) -> Result<Vec<RgbImage>> {
        let path = self.video_file(meta.episode_index, key)?;
        let vref =
            meta.videos
                .iter()
                .find(|v| v.key == key)
                .ok_or_else(|| DatasetError::Episode {
                    path: self.root.clone(),
                    episode: meta.episode_index,
                    reason: format!("episode metadata lacks the videos/{key}/* columns"),
                })?;
        let (h, w, _) = ft.image_hwc().ok_or_else(|| {
            self.info_field(&format!("features.{key}.shape"), "not [h, w, 3]".into())
        })?;
        crate::video::decode_frames(
            &path,
            &crate::video::FrameQuery {
                column: key,
                episode: meta.episode_index,
                from_timestamp: vref.from_timestamp,
                timestamps,
                fps: self.info.fps,
                width: w,
                height: h,
                tolerance_s: self.video_tolerance_s,
            },
        )
    }
}

/// `(feature key, encoded bytes per frame)` of the image columns of an episode, before decoding.
type PngColumns = Vec<(String, Vec<Vec<u8>>)>;

/// The values of `columns` in the rows of episode `ep` (rows of other episodes in the same row groups are left
/// out), in file order; `None` for columns whose values are not kept.
fn read_rows(
    rows: ParquetRecordBatchReader,
    path: &Path,
    ep: usize,
    columns: &[&Column],
) -> Result<Vec<Option<Cells>>> {
    let mut cells: Vec<Option<Cells>> = columns.iter().map(|c| c.empty()).collect();
    for batch in rows {
        let batch = batch.map_err(arrow_err(path))?;
        let epi = i64_values(
            column(&batch, path, "episode_index")?,
            path,
            "episode_index",
        )?;
        let sel: Vec<usize> = (0..epi.len()).filter(|&i| epi[i] == ep as i64).collect();
        if sel.is_empty() {
            continue;
        }
        for (col, acc) in columns.iter().zip(cells.iter_mut()) {
            if let (Some(acc), Some(more)) = (acc.as_mut(), col.read(&batch, path, &sel)?) {
                acc.append(more);
            }
        }
    }
    Ok(cells)
}

/// The `frame_index` values among `cells`.
fn frame_index<'c>(columns: &[&Column], cells: &'c [Option<Cells>]) -> &'c [i64] {
    columns
        .iter()
        .zip(cells)
        .find_map(|(col, c)| match (col.kind, c) {
            (Kind::FrameIndex, Some(Cells::I64(v))) => Some(v.as_slice()),
            _ => None,
        })
        .unwrap_or(&[])
}

/// Decodes the image columns' bytes (on rayon's pool, or on this thread); errors name the file, column, episode
/// and frame.
fn decode_images(
    path: &Path,
    ep: usize,
    pngs: PngColumns,
    images: Images,
) -> Result<Vec<(String, Vec<RgbImage>)>> {
    let mut out = Vec::with_capacity(pngs.len());
    for (key, png) in pngs {
        let decode = |(row, bytes): (usize, &Vec<u8>)| {
            image::load_from_memory(bytes)
                .map(|im| im.into_rgb8())
                .map_err(|source| DatasetError::Image {
                    path: path.to_owned(),
                    column: key.clone(),
                    episode: ep,
                    frame: row,
                    source: Box::new(source),
                })
        };
        let decoded: Result<Vec<RgbImage>> = if images == Images::DecodeOnThisThread {
            png.iter().enumerate().map(decode).collect()
        } else {
            png.par_iter().enumerate().map(decode).collect()
        };
        out.push((key, decoded?));
    }
    Ok(out)
}

/// meta/tasks.parquet: `task_index` (int64) and `task` (string, the pandas index). Returned by task_index.
fn read_tasks(path: &Path) -> Result<Vec<String>> {
    let mut pairs: Vec<(i64, String)> = Vec::new();
    for batch in read_all(path)? {
        let idx = i64_values(column(&batch, path, "task_index")?, path, "task_index")?;
        let names = match batch.column_by_name("task") {
            Some(c) => strings(c, path, "task")?,
            // pandas without index metadata round trip: `__index_level_0__`.
            None => {
                let c = column(&batch, path, "__index_level_0__").map_err(|_| {
                    DatasetError::MissingColumn {
                        path: path.to_owned(),
                        column: "task".into(),
                    }
                })?;
                strings(c, path, "__index_level_0__")?
            }
        };
        pairs.extend(idx.into_iter().zip(names));
    }
    pairs.sort_by_key(|(i, _)| *i);
    for (pos, (i, _)) in pairs.iter().enumerate() {
        if *i != pos as i64 {
            return Err(DatasetError::BadValue {
                path: path.to_owned(),
                column: "task_index".into(),
                row: pos,
                reason: format!("task indices must be 0..{}, found {i}", pairs.len()),
            });
        }
    }
    Ok(pairs.into_iter().map(|(_, t)| t).collect())
}

fn episode_files(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join("meta/episodes");
    let mut files = Vec::new();
    let chunks = std::fs::read_dir(&dir).map_err(io_err(&dir))?;
    for chunk in chunks {
        let chunk = chunk.map_err(io_err(&dir))?.path();
        if !chunk.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&chunk).map_err(io_err(&chunk))? {
            let f = f.map_err(io_err(&chunk))?.path();
            if f.extension().is_some_and(|e| e == "parquet") {
                files.push(f);
            }
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(DatasetError::NoEpisodeFiles { path: dir });
    }
    Ok(files)
}

fn read_episodes(
    root: &Path,
    info: &InfoJson,
    columns: &[Column],
    tasks: &[String],
) -> Result<Vec<EpisodeMeta>> {
    let video_keys: Vec<&str> = columns
        .iter()
        .filter(|c| matches!(c.kind, Kind::Video { .. }))
        .map(|c| c.key.as_str())
        .collect();
    let mut out = Vec::new();
    for path in episode_files(root)? {
        let path = &path;
        for batch in read_all(path)? {
            let get_i64 = |name: &str| i64_values(column(&batch, path, name)?, path, name);
            let ep_idx = get_i64("episode_index")?;
            let length = get_i64("length")?;
            let from = get_i64("dataset_from_index")?;
            let to = get_i64("dataset_to_index")?;
            let chunk = get_i64("data/chunk_index")?;
            let file = get_i64("data/file_index")?;
            let n = ep_idx.len();
            let task_rows = match batch.column_by_name("tasks") {
                Some(c) => list_rows(c, path, "tasks")?,
                None => vec![None; n],
            };
            let success = match batch.column_by_name("success") {
                Some(c) => {
                    let v = numeric_f64(c, path, "success")?;
                    v.into_iter()
                        .map(|x| (!x.is_nan()).then_some(x != 0.0))
                        .collect()
                }
                None => vec![None; n],
            };
            let stages = read_stage_columns(&batch, path, n)?;
            let mut videos: Vec<Vec<VideoRef>> = vec![Vec::new(); n];
            for key in &video_keys {
                let c = get_i64(&format!("videos/{key}/chunk_index"))?;
                let f = get_i64(&format!("videos/{key}/file_index"))?;
                let fname = format!("videos/{key}/from_timestamp");
                let tname = format!("videos/{key}/to_timestamp");
                let from_ts = numeric_f64(column(&batch, path, &fname)?, path, &fname)?;
                let to_ts = numeric_f64(column(&batch, path, &tname)?, path, &tname)?;
                for row in 0..n {
                    videos[row].push(VideoRef {
                        key: (*key).to_owned(),
                        chunk_index: c[row].max(0) as u64,
                        file_index: f[row].max(0) as u64,
                        from_timestamp: from_ts[row],
                        to_timestamp: to_ts[row],
                    });
                }
            }
            for row in 0..n {
                let bad = |column: &str, reason: String| DatasetError::BadValue {
                    path: path.clone(),
                    column: column.into(),
                    row,
                    reason,
                };
                if ep_idx[row] < 0
                    || length[row] < 0
                    || from[row] < 0
                    || to[row] - from[row] != length[row]
                {
                    return Err(bad(
                        "length",
                        format!(
                            "episode {} has length {} but dataset_from_index..dataset_to_index = {}..{}",
                            ep_idx[row], length[row], from[row], to[row]
                        ),
                    ));
                }
                if chunk[row] < 0 || file[row] < 0 {
                    return Err(bad("data/chunk_index", "negative chunk/file index".into()));
                }
                let ep_tasks = match &task_rows[row] {
                    Some(a) => strings(a, path, "tasks")?,
                    None => Vec::new(),
                };
                if let Some(t) = ep_tasks.iter().find(|t| !tasks.contains(t)) {
                    return Err(bad(
                        "tasks",
                        format!("task {t:?} is not in meta/tasks.parquet"),
                    ));
                }
                out.push(EpisodeMeta {
                    episode_index: ep_idx[row] as usize,
                    length: length[row] as usize,
                    tasks: ep_tasks,
                    dataset_from_index: from[row] as u64,
                    dataset_to_index: to[row] as u64,
                    data_chunk_index: chunk[row] as u64,
                    data_file_index: file[row] as u64,
                    success: success[row],
                    stages: stages[row].clone(),
                    videos: std::mem::take(&mut videos[row]),
                });
            }
        }
    }
    out.sort_by_key(|e| e.episode_index);
    let eps_dir = root.join("meta/episodes");
    for (pos, e) in out.iter().enumerate() {
        if e.episode_index != pos {
            return Err(DatasetError::EpisodeIndices {
                path: eps_dir,
                expected: out.len(),
                found: e.episode_index,
                position: pos,
            });
        }
    }
    if out.len() as u64 != info.total_episodes {
        return Err(DatasetError::Field {
            path: root.join(crate::info::INFO_PATH),
            field: "total_episodes".into(),
            reason: format!(
                "is {}, but meta/episodes holds {} episodes",
                info.total_episodes,
                out.len()
            ),
        });
    }
    Ok(out)
}

/// `sparse_subtask_{names,start_frames,end_frames}` (LeRobot SARM), falling back to the legacy unprefixed
/// `subtask_*` columns as LeRobot's `_load_episode_annotations` does.
fn read_stage_columns(
    batch: &RecordBatch,
    path: &Path,
    n: usize,
) -> Result<Vec<Option<StageAnnotation>>> {
    let prefix = if batch.column_by_name("sparse_subtask_names").is_some() {
        "sparse_"
    } else if batch.column_by_name("subtask_names").is_some() {
        ""
    } else {
        return Ok(vec![None; n]);
    };
    let cname = |s: &str| format!("{prefix}subtask_{s}");
    let names = list_rows(column(batch, path, &cname("names"))?, path, &cname("names"))?;
    let starts = list_rows(
        column(batch, path, &cname("start_frames"))?,
        path,
        &cname("start_frames"),
    )?;
    let ends = list_rows(
        column(batch, path, &cname("end_frames"))?,
        path,
        &cname("end_frames"),
    )?;
    let mut out = Vec::with_capacity(n);
    for row in 0..n {
        let ann = match (&names[row], &starts[row], &ends[row]) {
            (Some(nm), Some(s), Some(e)) => {
                let ann = StageAnnotation {
                    names: strings(nm, path, &cname("names"))?,
                    start_frames: ints_any(s, path, &cname("start_frames"))?,
                    end_frames: ints_any(e, path, &cname("end_frames"))?,
                };
                if ann.names.len() != ann.start_frames.len()
                    || ann.names.len() != ann.end_frames.len()
                {
                    return Err(DatasetError::BadValue {
                        path: path.to_owned(),
                        column: cname("names"),
                        row,
                        reason: format!(
                            "{} stage names, {} start frames, {} end frames",
                            ann.names.len(),
                            ann.start_frames.len(),
                            ann.end_frames.len()
                        ),
                    });
                }
                Some(ann)
            }
            _ => None,
        };
        out.push(ann);
    }
    Ok(out)
}
