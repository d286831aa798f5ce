//! What a dataset holds: its description ([`DatasetInfo`]: cameras, state and action names, extra columns) and
//! the data of one episode ([`EpisodeData`], [`FrameData`], [`StageAnnotation`]). Shared by the writer and the
//! column table (`features`); it uses neither, so both depend on it and not on each other.

use image::RgbImage;

use crate::info::{DEFAULT_DATA_FILE_SIZE_IN_MB, DEFAULT_VIDEO_FILE_SIZE_IN_MB};
use crate::video::VideoSettings;

/// Feature key of camera `name`: LeRobot's `observation.images.<name>`.
pub fn image_key(view: &str) -> String {
    format!("observation.images.{view}")
}
pub const STATE_KEY: &str = "observation.state";
pub const ACTION_KEY: &str = "action";

/// One camera of the dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewSpec {
    /// Camera name; the column is `observation.images.<name>`.
    pub name: String,
    pub height: u32,
    pub width: u32,
}

/// Type of an extra per-frame scalar column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtraDtype {
    Float32,
    Int64,
}

/// An extra per-frame scalar column (ground-truth progress, stage index, reward ...).
#[derive(Debug, Clone, PartialEq)]
pub struct ExtraColumnSpec {
    pub name: String,
    pub dtype: ExtraDtype,
}

/// What a dataset holds; fixed when it is created.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetInfo {
    pub fps: u32,
    pub robot_type: Option<String>,
    /// Names of `observation.state`'s dimensions (empty: no state column).
    pub state_names: Vec<String>,
    /// Names of `action`'s dimensions (empty: no action column).
    pub action_names: Vec<String>,
    pub views: Vec<ViewSpec>,
    /// Tasks registered up front (task_index in this order); episodes may add more.
    pub tasks: Vec<String>,
    pub extra_columns: Vec<ExtraColumnSpec>,
    /// Sparse stage names. `None`: taken from the first annotated episode. Every annotated episode must use
    /// these names in this order.
    pub stage_names: Option<Vec<String>>,
    /// A data file is closed once it holds this many MB (LeRobot's `data_files_size_in_mb`).
    pub data_files_size_in_mb: u64,
    /// A camera's video file is closed once it holds this many MB (LeRobot's `video_files_size_in_mb`, 500).
    pub video_files_size_in_mb: u64,
    /// Frames encoded and written at a time; also the largest parquet row group.
    pub frames_per_row_group: usize,
    /// `Some`: every camera is a LeRobot `video` feature (MP4 under `videos/`, encoded by ffmpeg), not an image
    /// column. Frame `i` of an episode must then have the timestamp `i / fps` (a video has one frame per `1/fps`).
    pub video: Option<VideoSettings>,
}

impl Default for DatasetInfo {
    fn default() -> Self {
        Self {
            fps: 30,
            robot_type: None,
            state_names: Vec::new(),
            action_names: Vec::new(),
            views: Vec::new(),
            tasks: Vec::new(),
            extra_columns: Vec::new(),
            stage_names: None,
            data_files_size_in_mb: DEFAULT_DATA_FILE_SIZE_IN_MB,
            video_files_size_in_mb: DEFAULT_VIDEO_FILE_SIZE_IN_MB,
            frames_per_row_group: 256,
            video: None,
        }
    }
}

/// One camera frame: raw RGB, or PNG bytes that are stored as they are (checked for size).
#[derive(Debug, Clone, PartialEq)]
pub enum FrameImage {
    Rgb(RgbImage),
    Png(Vec<u8>),
}

/// One control step.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameData {
    /// One image per [`DatasetInfo::views`], in that order.
    pub views: Vec<FrameImage>,
    pub state: Vec<f32>,
    pub action: Vec<f32>,
    /// Seconds since the episode started (LeRobot: `frame_index / fps` for recorded data).
    pub timestamp: f32,
}

/// SARM sparse stage annotation of one episode: stage `k` spans frames `start_frames[k] .. end_frames[k]`
/// (end exclusive, the next stage starts where this one ends, the last ends at the episode length), as in
/// LeRobot's `sparse_subtask_*` episode columns.
#[derive(Debug, Clone, PartialEq)]
pub struct StageAnnotation {
    pub names: Vec<String>,
    pub start_frames: Vec<i64>,
    pub end_frames: Vec<i64>,
}

impl StageAnnotation {
    /// Stage lengths in frames.
    pub fn durations(&self) -> Vec<f64> {
        self.start_frames
            .iter()
            .zip(&self.end_frames)
            .map(|(s, e)| (e - s) as f64)
            .collect()
    }

    /// The stage index of `frame`: the stage whose `start..end` holds it, if any.
    pub fn stage_at(&self, frame: i64) -> Option<usize> {
        (0..self
            .names
            .len()
            .min(self.start_frames.len())
            .min(self.end_frames.len()))
            .find(|&k| self.start_frames[k] <= frame && frame < self.end_frames[k])
    }

    pub(crate) fn check(&self, len: usize) -> std::result::Result<(), String> {
        let k = self.names.len();
        if k == 0 {
            return Err("stage annotation has no stages".into());
        }
        if self.start_frames.len() != k || self.end_frames.len() != k {
            return Err(format!(
                "stage annotation has {k} names, {} start frames and {} end frames",
                self.start_frames.len(),
                self.end_frames.len()
            ));
        }
        let mut prev_end = 0;
        for i in 0..k {
            let (s, e) = (self.start_frames[i], self.end_frames[i]);
            if s < 0 || e < s || e > len as i64 || s < prev_end {
                return Err(format!(
                    "stage {i} ({:?}) spans frames {s}..{e}: stages must be ordered, non-overlapping and within \
                     0..{len}",
                    self.names[i]
                ));
            }
            prev_end = e;
        }
        Ok(())
    }
}

/// Values of an extra per-frame column for one episode.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnValues {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

impl ColumnValues {
    pub fn len(&self) -> usize {
        match self {
            ColumnValues::F32(v) => v.len(),
            ColumnValues::I64(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub(crate) fn dtype(&self) -> ExtraDtype {
        match self {
            ColumnValues::F32(_) => ExtraDtype::Float32,
            ColumnValues::I64(_) => ExtraDtype::Int64,
        }
    }
}

/// One episode handed to [`crate::writer::DatasetWriter::add_episode`].
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeData {
    pub task: String,
    pub frames: Vec<FrameData>,
    pub stages: Option<StageAnnotation>,
    pub success: bool,
    /// `(column name, values)`, one value per frame, for every [`DatasetInfo::extra_columns`] entry.
    pub extras: Vec<(String, ColumnValues)>,
}
