//! The crate's error type: every variant names the file and the field or column it is about.

use std::path::PathBuf;

/// What to do when ffmpeg is missing (here, not in `video`, so that errors depend on nothing of the crate).
pub const FFMPEG_INSTALL_HINT: &str = "scripts/setup.sh installs it from the distribution's packages \
                                       (Debian/Ubuntu: `apt-get install ffmpeg`); set STAGEWISE_FFMPEG to use \
                                       another ffmpeg";

/// Result alias of this crate.
pub type Result<T, E = DatasetError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("{}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: renaming {} to it", path.display(), from.display())]
    Rename {
        from: PathBuf,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: malformed JSON", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: field `{field}`: {reason}", path.display())]
    Field {
        path: PathBuf,
        field: String,
        reason: String,
    },
    #[error("{}: parquet", path.display())]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("{}: arrow", path.display())]
    Arrow {
        path: PathBuf,
        #[source]
        source: arrow_schema::ArrowError,
    },
    #[error("{}: missing column `{column}`", path.display())]
    MissingColumn { path: PathBuf, column: String },
    #[error("{}: column `{column}` has type {found}, expected {expected}", path.display())]
    ColumnType {
        path: PathBuf,
        column: String,
        expected: String,
        found: String,
    },
    #[error("{}: column `{column}`, row {row}: {reason}", path.display())]
    BadValue {
        path: PathBuf,
        column: String,
        row: usize,
        reason: String,
    },
    #[error("{}: column `{column}`, episode {episode}, frame {frame}: corrupt image", path.display())]
    Image {
        path: PathBuf,
        column: String,
        episode: usize,
        frame: usize,
        #[source]
        source: Box<image::ImageError>,
    },
    /// The ffmpeg program that video features need is missing or broken.
    #[error("video features need ffmpeg: `{}` {reason}", program.display())]
    VideoTool { program: PathBuf, reason: String },
    /// The ffmpeg program could not be started at all.
    #[error("video features need ffmpeg: `{}` cannot run; {}", program.display(), FFMPEG_INSTALL_HINT)]
    VideoToolSpawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: video column `{column}`: {reason}", path.display())]
    Video {
        path: PathBuf,
        column: String,
        reason: String,
    },
    /// A row whose video frame is missing or too far from its timestamp (LeRobot's tolerance rule).
    #[error(
        "{}: video column `{column}`, episode {episode}, frame {frame}: no frame at {timestamp:.6} s: {reason}",
        path.display()
    )]
    VideoFrame {
        path: PathBuf,
        column: String,
        episode: usize,
        frame: usize,
        /// Seconds in the video file (`from_timestamp` + the row's `timestamp`).
        timestamp: f64,
        reason: String,
    },
    #[error("{}: episode {episode}: {reason}", path.display())]
    Episode {
        path: PathBuf,
        episode: usize,
        reason: String,
    },
    /// Input handed to the writer that does not match the dataset's declared features.
    #[error("invalid input: {0}")]
    Input(String),
    /// A PNG frame handed to the writer whose header does not decode.
    #[error("invalid input: episode {episode}, frame {frame}, view {view:?}: not a PNG image")]
    InputImage {
        episode: usize,
        frame: usize,
        view: String,
        #[source]
        source: image::ImageError,
    },
    /// Stage annotations handed in for an episode that they do not fit.
    #[error("invalid input: episode {episode}: {reason}")]
    InputAnnotation { episode: usize, reason: String },
    /// `meta/episodes` holds no `chunk-*/file-*.parquet`.
    #[error("{}: no episode metadata parquet files (expected chunk-*/file-*.parquet)", path.display())]
    NoEpisodeFiles { path: PathBuf },
    /// The episodes' metadata rows are not episodes 0, 1, 2, ... in order.
    #[error("{}: episode indices must be 0..{expected}, found {found} at position {position}", path.display())]
    EpisodeIndices {
        path: PathBuf,
        expected: usize,
        found: usize,
        position: usize,
    },
    /// A column with another row count than the file's `index` column.
    #[error("{}: column `{column}` has {rows} rows, `index` has {expected}", path.display())]
    ColumnLength {
        path: PathBuf,
        column: String,
        rows: usize,
        expected: usize,
    },
    /// Creating a dataset in a directory that already holds files.
    #[error("{}: dataset directory exists and is not empty; refusing to overwrite", path.display())]
    NotEmpty { path: PathBuf },
    #[error("stage proportions")]
    Proportions(#[from] stagewise_core::ProgressError),
}

pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> DatasetError {
    let path = path.into();
    move |source| DatasetError::Io { path, source }
}

pub(crate) fn pq_err(
    path: impl Into<PathBuf>,
) -> impl FnOnce(parquet::errors::ParquetError) -> DatasetError {
    let path = path.into();
    move |source| DatasetError::Parquet { path, source }
}

pub(crate) fn arrow_err(
    path: impl Into<PathBuf>,
) -> impl FnOnce(arrow_schema::ArrowError) -> DatasetError {
    let path = path.into();
    move |source| DatasetError::Arrow { path, source }
}
