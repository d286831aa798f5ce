//! stagewise-dataset: LeRobot v3-layout datasets on disk.
//!
//! - [`DatasetWriter`] records episodes (camera frames as PNG image columns or MP4 video features, state, action, extra per-frame
//!   columns, SARM sparse stage annotations) and writes `meta/info.json`, `meta/stats.json`,
//!   `meta/tasks.parquet`, `meta/episodes/chunk-000/file-000.parquet` and `meta/temporal_proportions_sparse.json`.
//! - [`Dataset`] reads LeRobot v3 datasets (ours or LeRobot's), episode by episode, image columns (PNG) and video
//!   features (MP4, AV1 or H.264, decoded by an `ffmpeg` subprocess with LeRobot's timestamp rule: [`video`]).
//! - [`write_annotations`] sets the SARM stage annotations of an existing dataset's episodes.
//! - [`arrays::TrainingArrays`] writes the numpy arrays a progress model is trained on (`stagewise train`).
//! - [`SarmProgress`] reads and writes `sarm_progress.parquet`, the per-frame progress file LeRobot's RA-BC loads.
//! - Every file is written under a temporary name, fsynced, renamed into place and its directory fsynced
//!   ([`durable`]): a crash or a power cut leaves the previous file or the whole new one, never half a file.
//! - The columns are described once (`features.rs`): one table of features, each with its kind, that info.json,
//!   the parquet schema, the written arrays, the statistics and the reader all iterate (README.md, "Columns: one
//!   table").
//!
//! Depends on `stagewise-core` only among the workspace crates: never on model, sim, stream or runtime (the CLI
//! wires episodes from those into the writer's plain input types). See README.md for the layout and its sources.

pub mod annotations;
pub mod arrays;
mod columns;
mod contents;
pub mod durable;
pub mod error;
mod features;
pub mod info;
pub mod reader;
pub mod sarm_progress;
pub mod stats;
pub mod video;
pub mod writer;

pub use annotations::{write_annotations, write_success, AnnotationSummary};
pub use error::{DatasetError, Result};
pub use info::{Feature, InfoJson, OrderedMap, CODEBASE_VERSION, SARM_PROGRESS_FILE};
pub use reader::{Dataset, Episode, EpisodeMeta, Images, VideoRef};
pub use sarm_progress::{interpolate_linear, strided_frames, SarmProgress, REWARD_MODEL_PATH_KEY};
pub use video::{VideoCodec, VideoSettings, VIDEO_TOLERANCE_S};
pub use writer::{
    image_key, ColumnValues, DatasetInfo, DatasetSummary, DatasetWriter, EpisodeData,
    ExtraColumnSpec, ExtraDtype, FrameData, FrameImage, StageAnnotation, ViewSpec, ACTION_KEY,
    STATE_KEY,
};
