//! [`DatasetWriter`]: episodes in, a LeRobot v3 dataset on disk out.
//!
//! Memory stays bounded by one slice of frames: each episode is encoded (PNG, in parallel with rayon) and written
//! `frames_per_row_group` frames at a time, and every episode ends its parquet row group. Only per-episode metadata
//! and running statistics are kept until [`DatasetWriter::finish`].

use std::collections::HashMap;
use std::fs::File;
use std::io::Cursor;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema, SchemaRef};
use image::{ImageDecoder, ImageEncoder, RgbImage};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use rayon::prelude::*;

use crate::durable;
use crate::error::{arrow_err, io_err, pq_err, DatasetError, Result};
use crate::features::{self, Column, Kind, Slice};
use crate::info::{
    format_template, Feature, OrderedMap, DEFAULT_CHUNK_SIZE, DEFAULT_DATA_PATH, DEFAULT_FEATURES,
    DEFAULT_VIDEO_PATH,
};
use crate::stats::FeatureStats;
use crate::video::{choose_encoding, VideoEncoder, VideoEncoding};

mod meta;

pub use crate::contents::{
    image_key, ColumnValues, DatasetInfo, EpisodeData, ExtraColumnSpec, ExtraDtype, FrameData,
    FrameImage, StageAnnotation, ViewSpec, ACTION_KEY, STATE_KEY,
};

/// At most this many frames per episode and view feed the image statistics (LeRobot samples images too).
const IMAGE_STATS_FRAMES: usize = 64;

/// What [`DatasetWriter::finish`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetSummary {
    pub root: PathBuf,
    pub episodes: usize,
    pub frames: u64,
    pub data_files: usize,
    /// `(stage name, a_k)` when any episode was annotated.
    pub stage_proportions: Option<Vec<(String, f64)>>,
}

/// One frame of one view, ready to be written.
enum ViewOut {
    /// PNG bytes for the image column.
    Png(Vec<u8>),
    /// For a video camera: the input frame as it is (already RGB).
    Same,
    /// For a video camera: the input PNG, decoded.
    Decoded(RgbImage),
}

/// One frame's output per view, and image statistics for the views sampled for stats.
type EncodedFrame = (Vec<ViewOut>, Vec<Option<FeatureStats>>);

struct EpisodeRecord {
    index: usize,
    length: usize,
    task: String,
    chunk: u64,
    file: u64,
    from: u64,
    stages: Option<StageAnnotation>,
    success: bool,
    /// Per column of `DatasetWriter::columns`: the episode's statistics of each numeric feature (`None` for
    /// cameras, whose statistics are kept for the whole dataset only).
    stats: Vec<Option<FeatureStats>>,
    /// Per video camera: (chunk, file, from_timestamp, to_timestamp).
    videos: Vec<(u64, u64, f64, f64)>,
}

/// Where an episode goes, decided before its first frame is written.
struct EpisodePlace {
    episode_index: usize,
    task_index: usize,
    /// Dataset-wide index of its first frame.
    from: u64,
    /// The data file (chunk, file) that holds it.
    chunk: u64,
    file: u64,
    /// Per video camera: the duration of the current file before it (LeRobot's `from_timestamp`).
    video_from: Vec<f64>,
}

/// The MP4 files of one video camera.
struct VideoTrack {
    key: String,
    width: u32,
    height: u32,
    encoding: VideoEncoding,
    open: Option<VideoEncoder>,
    /// (chunk, file) of the file being written, or of the next one.
    current: (u64, u64),
    /// Directories holding this camera's files.
    chunks: Vec<u64>,
}

struct OpenFile {
    writer: ArrowWriter<File>,
    /// Where the file is written until it is closed ([`crate::durable::temp_path`] of `path`).
    tmp: PathBuf,
    path: PathBuf,
    chunk: u64,
    file: u64,
}

/// Writes a LeRobot v3 dataset. Call [`finish`](Self::finish) at the end: the metadata files are written there.
pub struct DatasetWriter {
    root: PathBuf,
    info: DatasetInfo,
    /// info.json's `features` ([`features::describe`]).
    features: OrderedMap<Feature>,
    /// The same features as the column table every step iterates ([`features::table`]).
    columns: Vec<Column>,
    /// The data files' schema: the columns that have an arrow type, in order.
    schema: SchemaRef,
    tasks: Vec<String>,
    task_index: HashMap<String, usize>,
    stage_names: Option<Vec<String>>,
    episodes: Vec<EpisodeRecord>,
    total_frames: u64,
    open: Option<OpenFile>,
    next_chunk_file: (u64, u64),
    data_files: usize,
    /// Per column: the whole dataset's statistics (per channel for cameras; `None` without statistics).
    stats: Vec<Option<FeatureStats>>,
    /// Per view: its column in `columns`.
    view_columns: Vec<usize>,
    /// One per view when the cameras are video features (empty otherwise).
    tracks: Vec<VideoTrack>,
}

impl DatasetWriter {
    /// Starts a dataset in `dir`, which must not exist or be empty.
    pub fn create(dir: impl AsRef<Path>, info: DatasetInfo) -> Result<Self> {
        let root = dir.as_ref().to_owned();
        check_info(&info)?;
        // Video cameras: the encoder of each, chosen before anything is written (ffmpeg missing, odd sizes).
        let mut encodings = Vec::new();
        if let Some(settings) = info.video {
            for v in &info.views {
                encodings.push(choose_encoding(settings, v.width, v.height)?);
            }
        }
        if root.exists() {
            let mut entries = std::fs::read_dir(&root).map_err(io_err(&root))?;
            if entries.next().is_some() {
                return Err(DatasetError::NotEmpty { path: root });
            }
        }
        std::fs::create_dir_all(root.join("meta")).map_err(io_err(&root))?;

        let features = OrderedMap(features::describe(&info, &encodings));
        let columns = features::table(&features);
        let fields: Vec<Field> = columns
            .iter()
            .filter_map(|c| Some(Field::new(c.key.clone(), c.arrow_type()?, true)))
            .collect();
        let view_columns = (0..info.views.len())
            .map(|v| {
                columns
                    .iter()
                    .position(|c| matches!(c.kind, Kind::Image { view } | Kind::Video { view } if view == v))
                    .ok_or_else(|| DatasetError::Input(format!("internal: no column for view {v}")))
            })
            .collect::<Result<_>>()?;
        // A LeRobot video feature has no parquet column: its frames go to videos/<key>/chunk-NNN/file-NNN.mp4.
        let mut tracks = Vec::new();
        for (v, encoding) in info.views.iter().zip(encodings) {
            if let Some(note) = &encoding.note {
                tracing::info!(view = %v.name, "{note}");
            }
            tracks.push(VideoTrack {
                key: image_key(&v.name),
                width: v.width,
                height: v.height,
                encoding,
                open: None,
                current: (0, 0),
                chunks: vec![0],
            });
        }

        let mut tasks = Vec::new();
        let mut task_index = HashMap::new();
        for t in &info.tasks {
            if !task_index.contains_key(t) {
                task_index.insert(t.clone(), tasks.len());
                tasks.push(t.clone());
            }
        }
        let stats = columns.iter().map(Column::stats).collect();
        Ok(Self {
            root,
            stage_names: info.stage_names.clone(),
            info,
            features,
            columns,
            schema: Arc::new(Schema::new(fields)),
            tasks,
            task_index,
            episodes: Vec::new(),
            total_frames: 0,
            open: None,
            next_chunk_file: (0, 0),
            data_files: 0,
            stats,
            view_columns,
            tracks,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn num_episodes(&self) -> usize {
        self.episodes.len()
    }

    pub fn num_frames(&self) -> u64 {
        self.total_frames
    }

    /// The encoder of each video camera (feature key, encoding), empty for image datasets.
    pub fn video_encodings(&self) -> Vec<(&str, &VideoEncoding)> {
        self.tracks
            .iter()
            .map(|t| (t.key.as_str(), &t.encoding))
            .collect()
    }

    /// Checks an episode against the dataset's features before anything of it is written, in named steps: its
    /// frames, its timestamps, its extra columns, its stage annotation. Errors name the episode (and the frame,
    /// view or column).
    fn validate(&self, ep: &EpisodeData) -> Result<()> {
        if ep.frames.is_empty() {
            return self.refuse("has no frames".into());
        }
        self.check_frames(ep)?;
        self.check_timestamps(ep)?;
        self.check_extras(ep)?;
        self.check_stages(ep)
    }

    /// Every frame has one image per view, of the view's size, state and action of the declared lengths and a
    /// finite timestamp.
    fn check_frames(&self, ep: &EpisodeData) -> Result<()> {
        let n = self.episodes.len();
        let bad = |msg: String| self.refuse(msg);
        for (i, f) in ep.frames.iter().enumerate() {
            if f.views.len() != self.info.views.len() {
                return bad(format!(
                    "frame {i} has {} views, the dataset has {}",
                    f.views.len(),
                    self.info.views.len()
                ));
            }
            if f.state.len() != self.info.state_names.len() {
                return bad(format!(
                    "frame {i}: state has {} values, the dataset declares {}",
                    f.state.len(),
                    self.info.state_names.len()
                ));
            }
            if f.action.len() != self.info.action_names.len() {
                return bad(format!(
                    "frame {i}: action has {} values, the dataset declares {}",
                    f.action.len(),
                    self.info.action_names.len()
                ));
            }
            if !f.timestamp.is_finite() {
                return bad(format!(
                    "frame {i}: timestamp {} is not finite",
                    f.timestamp
                ));
            }
            for (img, spec) in f.views.iter().zip(&self.info.views) {
                let (w, h) = match img {
                    FrameImage::Rgb(im) => im.dimensions(),
                    FrameImage::Png(bytes) => {
                        image::codecs::png::PngDecoder::new(Cursor::new(bytes))
                            .map(|d| d.dimensions())
                            .map_err(|source| DatasetError::InputImage {
                                episode: n,
                                frame: i,
                                view: spec.name.clone(),
                                source,
                            })?
                    }
                };
                if (w, h) != (spec.width, spec.height) {
                    return bad(format!(
                        "frame {i}, view {:?}: image is {w}x{h}, the dataset declares {}x{}",
                        spec.name, spec.width, spec.height
                    ));
                }
            }
        }
        Ok(())
    }

    /// Timestamps never go backwards; a video dataset needs frame `i` at `i / fps`. Steps other than `1 / fps`
    /// are logged.
    fn check_timestamps(&self, ep: &EpisodeData) -> Result<()> {
        let n = self.episodes.len();
        let bad = |msg: String| self.refuse(msg);
        // LeRobot expects consecutive timestamps 1/fps apart (its `check_timestamps_sync`, tolerance 1e-4 s).
        // Going backwards is refused; other deviations are logged, since a real robot's clock may jitter.
        let dt = 1.0 / self.info.fps as f64;
        let mut off_rate = 0usize;
        for (i, pair) in ep.frames.windows(2).enumerate() {
            let d = pair[1].timestamp as f64 - pair[0].timestamp as f64;
            if d < 0.0 {
                return bad(format!(
                    "timestamps go backwards at frame {}: {} then {}",
                    i + 1,
                    pair[0].timestamp,
                    pair[1].timestamp
                ));
            }
            if (d - dt).abs() > 1e-4 {
                off_rate += 1;
            }
        }
        if self.info.video.is_some() {
            // One video frame per 1/fps: a row whose timestamp is not i/fps would find no frame (LeRobot's
            // tolerance rule), so such an episode is refused rather than written unreadable.
            for (i, f) in ep.frames.iter().enumerate() {
                let want = i as f64 * dt;
                if (f.timestamp as f64 - want).abs() > crate::video::VIDEO_TOLERANCE_S {
                    return bad(format!(
                        "frame {i}: timestamp {} s, but a video dataset stores frame {i} at {want} s (i / fps,                          tolerance {} s)",
                        f.timestamp,
                        crate::video::VIDEO_TOLERANCE_S
                    ));
                }
            }
        }
        if off_rate > 0 {
            tracing::warn!(
                episode = n,
                frames = off_rate,
                fps = self.info.fps,
                "timestamp steps differ from 1/fps by more than 1e-4 s (LeRobot's sync tolerance)"
            );
        }
        Ok(())
    }

    /// One column of values per declared extra column, of its dtype, one value per frame.
    fn check_extras(&self, ep: &EpisodeData) -> Result<()> {
        let bad = |msg: String| self.refuse(msg);
        if ep.extras.len() != self.info.extra_columns.len() {
            return bad(format!(
                "has {} extra columns, the dataset declares {}",
                ep.extras.len(),
                self.info.extra_columns.len()
            ));
        }
        for spec in &self.info.extra_columns {
            match ep.extras.iter().find(|(name, _)| *name == spec.name) {
                None => return bad(format!("extra column {:?} is missing", spec.name)),
                Some((_, v)) if v.dtype() != spec.dtype => {
                    return bad(format!(
                        "extra column {:?} is {:?}, declared {:?}",
                        spec.name,
                        v.dtype(),
                        spec.dtype
                    ))
                }
                Some((_, v)) if v.len() != ep.frames.len() => {
                    return bad(format!(
                        "extra column {:?} has {} values for {} frames",
                        spec.name,
                        v.len(),
                        ep.frames.len()
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The stage annotation is well formed and uses the dataset's stage names.
    fn check_stages(&self, ep: &EpisodeData) -> Result<()> {
        let bad = |msg: String| self.refuse(msg);
        if let Some(st) = &ep.stages {
            st.check(ep.frames.len()).or_else(bad)?;
            if let Some(names) = &self.stage_names {
                if *names != st.names {
                    return bad(format!(
                        "stage names {:?} differ from the dataset's {:?}",
                        st.names, names
                    ));
                }
            }
        }
        Ok(())
    }

    /// The writer's refusal of the episode being added: `episode <n>: <msg>`.
    fn refuse<T>(&self, msg: String) -> Result<T> {
        let n = self.episodes.len();
        Err(DatasetError::Input(format!("episode {n}: {msg}")))
    }

    fn open_file(&mut self) -> Result<&mut OpenFile> {
        if self.open.is_none() {
            let (chunk, file) = self.next_chunk_file;
            let rel = format_template(
                DEFAULT_DATA_PATH,
                &[("chunk_index", "", chunk), ("file_index", "", file)],
            )
            .map_err(DatasetError::Input)?;
            let path = self.root.join(rel);
            // Written under a temporary name, renamed into place when closed (fsynced before, directory after).
            let (tmp, f) = durable::create_temp(&path)?;
            let props = WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .set_max_row_group_row_count(Some(self.info.frames_per_row_group))
                .build();
            let writer =
                ArrowWriter::try_new(f, self.schema.clone(), Some(props)).map_err(pq_err(&tmp))?;
            self.open = Some(OpenFile {
                writer,
                tmp,
                path,
                chunk,
                file,
            });
            self.data_files += 1;
            self.next_chunk_file = if file + 1 >= DEFAULT_CHUNK_SIZE {
                (chunk + 1, 0)
            } else {
                (chunk, file + 1)
            };
        }
        self.open
            .as_mut()
            .ok_or_else(|| DatasetError::Input("internal: no open data file".into()))
    }

    /// Appends one episode: validates it against the dataset's features, encodes its images as PNG (in
    /// parallel) and writes its frames, `frames_per_row_group` at a time.
    pub fn add_episode(&mut self, ep: &EpisodeData) -> Result<()> {
        self.validate(ep)?;
        let place = self.place_episode(ep)?;
        let len = ep.frames.len();
        // The episode's statistics of each numeric feature (cameras count into the dataset's directly).
        let mut stats: Vec<Option<FeatureStats>> =
            self.columns.iter().map(Column::episode_stats).collect();
        for start in (0..len).step_by(self.info.frames_per_row_group) {
            let rows = start..(start + self.info.frames_per_row_group).min(len);
            self.write_slice(ep, &place, rows, &mut stats)?;
        }
        self.end_row_group()?;
        for (all, this) in self.stats.iter_mut().zip(&stats) {
            if let (Some(all), Some(this)) = (all, this) {
                all.merge(this);
            }
        }
        let videos = self.place_in_videos(&place.video_from, len)?;
        self.episodes.push(EpisodeRecord {
            index: place.episode_index,
            length: len,
            task: ep.task.clone(),
            chunk: place.chunk,
            file: place.file,
            from: place.from,
            stages: ep.stages.clone(),
            success: ep.success,
            stats,
            videos,
        });
        self.total_frames += len as u64;
        Ok(())
    }

    /// Step 1 of [`Self::add_episode`]: the episode's index, task index (a new task is registered), first
    /// frame, data file and place in each camera's video file. The first annotated episode names the stages.
    fn place_episode(&mut self, ep: &EpisodeData) -> Result<EpisodePlace> {
        if self.stage_names.is_none() {
            if let Some(st) = &ep.stages {
                self.stage_names = Some(st.names.clone());
            }
        }
        let task_index = match self.task_index.get(&ep.task) {
            Some(&i) => i,
            None => {
                let i = self.tasks.len();
                self.tasks.push(ep.task.clone());
                self.task_index.insert(ep.task.clone(), i);
                i
            }
        };
        let (chunk, file) = {
            let f = self.open_file()?;
            (f.chunk, f.file)
        };
        // Where this episode starts in each camera's current video file (LeRobot's from_timestamp: the duration
        // of the file before it; one frame per 1/fps).
        let fps = f64::from(self.info.fps);
        let video_from = self
            .tracks
            .iter()
            .map(|t| t.open.as_ref().map_or(0.0, |e| e.frames as f64 / fps))
            .collect();
        Ok(EpisodePlace {
            episode_index: self.episodes.len(),
            task_index,
            from: self.total_frames,
            chunk,
            file,
            video_from,
        })
    }

    /// Step 2 of [`Self::add_episode`], once per slice of frames: encodes the cameras, then builds one record
    /// batch by walking the column table (each column's values, counted into `stats`) and writes it.
    fn write_slice(
        &mut self,
        ep: &EpisodeData,
        place: &EpisodePlace,
        rows: Range<usize>,
        stats: &mut [Option<FeatureStats>],
    ) -> Result<()> {
        let pngs = self.encode_views(ep, place.episode_index, rows.clone())?;
        let mut slice = Slice {
            ep,
            rows,
            episode_index: place.episode_index,
            task_index: place.task_index,
            from: place.from,
            pngs,
        };
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        for (col, st) in self.columns.iter().zip(stats.iter_mut()) {
            let Some(cells) = col.cells(&mut slice)? else {
                continue;
            };
            if let Some(st) = st {
                cells.push_stats(st);
            }
            arrays.push(cells.into_array(&self.root)?);
        }
        let batch =
            RecordBatch::try_new(self.schema.clone(), arrays).map_err(arrow_err(&self.root))?;
        let open = self.open_file()?;
        open.writer.write(&batch).map_err(pq_err(&open.tmp))
    }

    /// The cameras of frames `rows`: PNG bytes per view for image cameras (returned), or frames fed to each
    /// camera's video encoder. Sampled frames (at most [`IMAGE_STATS_FRAMES`] per episode) count into the
    /// cameras' statistics. Encoding runs in parallel, one task per frame.
    fn encode_views(
        &mut self,
        ep: &EpisodeData,
        episode_index: usize,
        rows: Range<usize>,
    ) -> Result<Vec<Vec<Vec<u8>>>> {
        let stride = ep.frames.len().div_ceil(IMAGE_STATS_FRAMES).max(1);
        let video = !self.tracks.is_empty();
        let frames = &ep.frames[rows.clone()];
        let views = &self.info.views;
        let encoded: Vec<Result<EncodedFrame>> = frames
            .par_iter()
            .enumerate()
            .map(|(j, f)| {
                let fi = rows.start + j;
                encode_frame(
                    f,
                    views,
                    video,
                    fi.is_multiple_of(stride),
                    episode_index,
                    fi,
                )
            })
            .collect();
        let mut per_view_png: Vec<Vec<Vec<u8>>> = if video {
            Vec::new()
        } else {
            vec![Vec::with_capacity(frames.len()); views.len()]
        };
        for (j, r) in encoded.into_iter().enumerate() {
            let (outs, stats) = r?;
            for (v, (out, st)) in outs.into_iter().zip(stats).enumerate() {
                if let (Some(st), Some(all)) = (st, &mut self.stats[self.view_columns[v]]) {
                    all.merge(&st);
                }
                match (out, &frames[j].views[v]) {
                    (ViewOut::Png(png), _) => per_view_png[v].push(png),
                    (ViewOut::Decoded(im), _) => self.track_encoder(v)?.write(&im)?,
                    (ViewOut::Same, FrameImage::Rgb(im)) => self.track_encoder(v)?.write(im)?,
                    (ViewOut::Same, FrameImage::Png(_)) => {
                        return Err(DatasetError::Input("internal: undecoded PNG".into()))
                    }
                }
            }
        }
        Ok(per_view_png)
    }

    /// Step 3 of [`Self::add_episode`]: ends the parquet row group with the episode, and rolls over to a new
    /// data file past `data_files_size_in_mb`.
    fn end_row_group(&mut self) -> Result<()> {
        let limit = self.info.data_files_size_in_mb as usize * 1024 * 1024;
        let open = self.open_file()?;
        open.writer.flush().map_err(pq_err(&open.tmp))?;
        if open.writer.bytes_written() >= limit {
            tracing::debug!(
                path = %open.path.display(),
                bytes = open.writer.bytes_written(),
                "data file reached data_files_size_in_mb; the next episode starts a new file"
            );
            self.close_file()?;
        }
        Ok(())
    }

    /// Step 4 of [`Self::add_episode`]: the episode's place in each camera's video file (chunk, file,
    /// from_timestamp, to_timestamp), and a new file once one passes `video_files_size_in_mb`.
    fn place_in_videos(
        &mut self,
        video_from: &[f64],
        len: usize,
    ) -> Result<Vec<(u64, u64, f64, f64)>> {
        let fps = f64::from(self.info.fps);
        let video_limit = self.info.video_files_size_in_mb.max(1) * 1024 * 1024;
        let mut videos = Vec::with_capacity(self.tracks.len());
        for (v, &from_ts) in video_from.iter().enumerate() {
            let enc = self.track_encoder(v)?;
            let big = enc.bytes_written() >= video_limit;
            let t = &mut self.tracks[v];
            videos.push((
                t.current.0,
                t.current.1,
                from_ts,
                from_ts + len as f64 / fps,
            ));
            if big {
                self.close_track(v)?;
            }
        }
        Ok(videos)
    }

    /// The running encoder of video camera `v`, started on first use.
    fn track_encoder(&mut self, v: usize) -> Result<&mut VideoEncoder> {
        let fps = self.info.fps;
        let t = self
            .tracks
            .get_mut(v)
            .ok_or_else(|| DatasetError::Input(format!("internal: no video camera {v}")))?;
        if t.open.is_none() {
            let (chunk, file) = t.current;
            let rel = format_template(
                DEFAULT_VIDEO_PATH,
                &[
                    ("video_key", &t.key, 0),
                    ("chunk_index", "", chunk),
                    ("file_index", "", file),
                ],
            )
            .map_err(DatasetError::Input)?;
            let path = self.root.join(rel);
            t.open = Some(VideoEncoder::start(
                &t.encoding,
                &t.key,
                &path,
                t.width,
                t.height,
                fps,
            )?);
        }
        t.open
            .as_mut()
            .ok_or_else(|| DatasetError::Input("internal: no video encoder".into()))
    }

    /// Finishes camera `v`'s current video file; the next frame starts the next file.
    fn close_track(&mut self, v: usize) -> Result<()> {
        let t = &mut self.tracks[v];
        if let Some(enc) = t.open.take() {
            tracing::debug!(path = %enc.path.display(), frames = enc.frames, "closing video file");
            enc.finish()?;
            let (chunk, file) = t.current;
            t.current = if file + 1 >= DEFAULT_CHUNK_SIZE {
                (chunk + 1, 0)
            } else {
                (chunk, file + 1)
            };
            if !t.chunks.contains(&t.current.0) {
                t.chunks.push(t.current.0);
            }
        }
        Ok(())
    }

    fn close_file(&mut self) -> Result<()> {
        if let Some(open) = self.open.take() {
            let f = open.writer.into_inner().map_err(pq_err(&open.tmp))?;
            durable::commit(&open.tmp, f, &open.path)?;
        }
        Ok(())
    }
}

/// Checks what a dataset is made of: fps, sizes, camera names and extra column names (unique, not a LeRobot
/// default feature).
fn check_info(info: &DatasetInfo) -> Result<()> {
    if info.fps == 0 {
        return Err(DatasetError::Input("fps must be > 0".into()));
    }
    if info.frames_per_row_group == 0 || info.data_files_size_in_mb == 0 {
        return Err(DatasetError::Input(
            "frames_per_row_group and data_files_size_in_mb must be > 0".into(),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for v in &info.views {
        if v.name.is_empty() || v.name.contains('/') || v.height == 0 || v.width == 0 {
            return Err(DatasetError::Input(format!(
                "view {:?} {}x{}: names must be non-empty without '/', sizes > 0",
                v.name, v.width, v.height
            )));
        }
        if !seen.insert(image_key(&v.name)) {
            return Err(DatasetError::Input(format!(
                "view {:?} is listed twice",
                v.name
            )));
        }
    }
    for e in &info.extra_columns {
        let reserved = e.name == STATE_KEY
            || e.name == ACTION_KEY
            || DEFAULT_FEATURES.iter().any(|(key, _)| *key == e.name);
        if e.name.is_empty() || e.name.contains('/') || reserved || !seen.insert(e.name.clone()) {
            return Err(DatasetError::Input(format!(
                "extra column {:?}: needs a unique name without '/' that is not a LeRobot default feature",
                e.name
            )));
        }
    }
    Ok(())
}

/// One frame's cameras: PNG bytes (image cameras) or RGB frames (video cameras), and the image statistics of
/// each view when the frame is `sample`d. Errors name episode, frame and view.
fn encode_frame(
    f: &FrameData,
    views: &[ViewSpec],
    video: bool,
    sample: bool,
    episode_index: usize,
    fi: usize,
) -> Result<EncodedFrame> {
    let mut outs = Vec::with_capacity(views.len());
    let mut stats = Vec::with_capacity(views.len());
    for (v, img) in f.views.iter().enumerate() {
        let ctx = |e: image::ImageError| {
            DatasetError::Input(format!(
                "episode {episode_index}, frame {fi}, view {}: {e}",
                views[v].name
            ))
        };
        let decode = |bytes: &[u8]| {
            image::load_from_memory_with_format(bytes, image::ImageFormat::Png)
                .map(|im| im.to_rgb8())
                .map_err(ctx)
        };
        let (out, st) = match (img, video) {
            (FrameImage::Rgb(im), false) => (
                ViewOut::Png(encode_png(im).map_err(ctx)?),
                sample.then(|| image_stats(im)),
            ),
            (FrameImage::Rgb(im), true) => (ViewOut::Same, sample.then(|| image_stats(im))),
            (FrameImage::Png(b), false) => (
                ViewOut::Png(b.clone()),
                if sample {
                    Some(image_stats(&decode(b)?))
                } else {
                    None
                },
            ),
            (FrameImage::Png(b), true) => {
                let im = decode(b)?;
                let st = sample.then(|| image_stats(&im));
                (ViewOut::Decoded(im), st)
            }
        };
        outs.push(out);
        stats.push(st);
    }
    Ok((outs, stats))
}

fn encode_png(im: &RgbImage) -> std::result::Result<Vec<u8>, image::ImageError> {
    let mut buf = Vec::with_capacity(im.as_raw().len() / 2 + 64);
    image::codecs::png::PngEncoder::new(&mut buf).write_image(
        im.as_raw(),
        im.width(),
        im.height(),
        image::ExtendedColorType::Rgb8,
    )?;
    Ok(buf)
}

/// Per-channel statistics of one image in [0, 1].
fn image_stats(im: &RgbImage) -> FeatureStats {
    let mut s = FeatureStats::new(3);
    for p in im.pixels() {
        s.push(&[
            p[0] as f64 / 255.0,
            p[1] as f64 / 255.0,
            p[2] as f64 / 255.0,
        ]);
    }
    s
}

/// Writes one parquet file durably ([`durable::write_atomic`]: temporary name, fsync, rename, directory fsync).
pub(crate) fn write_parquet(path: &Path, batch: RecordBatch) -> Result<()> {
    let tmp = durable::temp_path(path);
    durable::write_atomic(path, |f| {
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        let mut w = ArrowWriter::try_new(f, batch.schema(), Some(props)).map_err(pq_err(&tmp))?;
        w.write(&batch).map_err(pq_err(&tmp))?;
        w.into_inner().map_err(pq_err(&tmp))?;
        Ok(())
    })
}
