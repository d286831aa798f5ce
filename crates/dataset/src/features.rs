//! The dataset's columns, described once.
//!
//! [`describe`] is the one place that says which features a [`DatasetInfo`] makes (LeRobot's order: cameras,
//! `observation.state`, `action`, the extra columns, then [`DEFAULT_FEATURES`]); it becomes info.json's
//! `features`. [`table`] reads any `features` map (ours, or a LeRobot dataset's) into [`Column`]s, each with its
//! [`Kind`], and every part of the crate iterates that table:
//!
//! | step | per column |
//! | --- | --- |
//! | parquet schema (writer) | [`Column::arrow_type`]: struct image, `fixed_size_list<float32>[n]`, float32/int64 scalar, none for video |
//! | write a slice of frames | [`Column::cells`] takes the values from the episode, [`Cells::into_array`] makes the arrow array |
//! | statistics | [`Column::stats`] starts them (per channel for cameras), [`Cells::push_stats`] adds a slice |
//! | read an episode | [`Column::reads`] (which columns a read needs), [`Column::read`] picks the episode's rows, [`Cells::permute`] puts them in frame order |
//!
//! [`Cells`] is the in-memory form of one column over some rows, shared by the writer and the reader.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, FixedSizeListArray, Float32Array, Float64Array, Int64Array, RecordBatch,
    StringArray, StructArray,
};
use arrow_schema::{DataType, Field, Fields};

use crate::columns::{column, f32_values, f32_vectors, i64_values, image_bytes, numeric_f64};
use crate::contents::{
    image_key, ColumnValues, DatasetInfo, EpisodeData, ExtraDtype, FrameData, ACTION_KEY, STATE_KEY,
};
use crate::error::{arrow_err, DatasetError, Result};
use crate::info::{Feature, OrderedMap, DEFAULT_FEATURES};
use crate::stats::FeatureStats;
use crate::video::VideoEncoding;

/// The [`Kind`] of each of LeRobot's default features, in [`DEFAULT_FEATURES`]' order (info.json's module owns the
/// keys and dtypes: it refuses an info.json without them).
const DEFAULT_KINDS: [Kind; DEFAULT_FEATURES.len()] = [
    Kind::Timestamp,
    Kind::FrameIndex,
    Kind::EpisodeIndex,
    Kind::Index,
    Kind::TaskIndex,
];

/// What a feature is, and so how it is written, counted and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A camera stored in the parquet: `struct<bytes: binary, path: string>` with embedded PNG bytes. `view` is
    /// the camera's position among the dataset's cameras ([`DatasetInfo::views`] for the writer).
    Image {
        view: usize,
    },
    /// A camera stored as MP4 under `videos/` (no parquet column).
    Video {
        view: usize,
    },
    /// `observation.state`: a float32 vector per frame.
    State,
    /// `action`: a float32 vector per frame.
    Action,
    /// Any other scalar (shape `[1]`) feature: ours are [`DatasetInfo::extra_columns`].
    Extra,
    Timestamp,
    FrameIndex,
    /// Selects an episode's rows; the reader reads it first, on its own.
    EpisodeIndex,
    Index,
    TaskIndex,
    /// A feature of another dataset that this crate does not read (a vector other than state/action, ...): its
    /// column must exist, nothing more.
    Other,
}

impl Kind {
    /// The kind of feature `key` of info.json.
    fn of(key: &str, ft: &Feature, cameras: &mut usize) -> Kind {
        let mut camera = |video: bool| {
            let view = *cameras;
            *cameras += 1;
            if video {
                Kind::Video { view }
            } else {
                Kind::Image { view }
            }
        };
        match ft.dtype.as_str() {
            "video" => return camera(true),
            "image" => return camera(false),
            _ => {}
        }
        if key == STATE_KEY {
            return Kind::State;
        }
        if key == ACTION_KEY {
            return Kind::Action;
        }
        if let Some(i) = DEFAULT_FEATURES.iter().position(|(k, _)| *k == key) {
            return DEFAULT_KINDS[i];
        }
        if ft.shape.iter().product::<usize>() == 1 {
            Kind::Extra
        } else {
            Kind::Other
        }
    }
}

/// One feature of the dataset: its info.json key, kind, dtype and values per frame.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Column {
    pub key: String,
    pub kind: Kind,
    /// info.json's dtype (`float32`, `int64`, `image`, `video`, ...).
    pub dtype: String,
    /// Values per frame: the product of info.json's shape.
    pub dim: usize,
}

/// The columns of a dataset, in info.json order.
pub(crate) fn table(features: &OrderedMap<Feature>) -> Vec<Column> {
    let mut cameras = 0;
    features
        .iter()
        .map(|(key, ft)| Column {
            key: key.to_owned(),
            kind: Kind::of(key, ft, &mut cameras),
            dtype: ft.dtype.clone(),
            dim: ft.shape.iter().product(),
        })
        .collect()
}

/// info.json's `features` for a dataset made from `info`: cameras (`image`, or `video` with the encoding's info
/// block when `encodings` has one per view), `observation.state` and `action` when they have names, the extra
/// columns, then LeRobot's defaults.
pub(crate) fn describe(info: &DatasetInfo, encodings: &[VideoEncoding]) -> Vec<(String, Feature)> {
    let mut features = Vec::new();
    for (v, view) in info.views.iter().enumerate() {
        let (dtype, block) = match encodings.get(v) {
            Some(enc) => ("video", Some(enc.info(view.width, view.height, info.fps))),
            None => ("image", None),
        };
        features.push((
            image_key(&view.name),
            Feature {
                dtype: dtype.into(),
                shape: vec![view.height as usize, view.width as usize, 3],
                names: names_json(&["height", "width", "channels"]),
                info: block,
            },
        ));
    }
    for (key, names) in [
        (STATE_KEY, &info.state_names),
        (ACTION_KEY, &info.action_names),
    ] {
        if !names.is_empty() {
            features.push((
                key.to_owned(),
                Feature {
                    dtype: "float32".into(),
                    shape: vec![names.len()],
                    names: names_json(names),
                    info: None,
                },
            ));
        }
    }
    for e in &info.extra_columns {
        features.push((e.name.clone(), scalar_feature(extra_dtype(e.dtype))));
    }
    for (key, dtype) in DEFAULT_FEATURES {
        features.push((key.to_owned(), scalar_feature(dtype)));
    }
    features
}

/// LeRobot's dtype of an extra column.
fn extra_dtype(dtype: ExtraDtype) -> &'static str {
    match dtype {
        ExtraDtype::Float32 => "float32",
        ExtraDtype::Int64 => "int64",
    }
}

fn names_json<S: AsRef<str>>(names: &[S]) -> serde_json::Value {
    serde_json::Value::Array(
        names
            .iter()
            .map(|n| serde_json::Value::String(n.as_ref().to_owned()))
            .collect(),
    )
}

fn scalar_feature(dtype: &str) -> Feature {
    Feature {
        dtype: dtype.into(),
        shape: vec![1],
        names: serde_json::Value::Null,
        info: None,
    }
}

/// HF `datasets.Image()` as arrow: `struct<bytes: binary, path: string>`.
fn image_struct_fields() -> Fields {
    Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ])
}

fn vector_item() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::Float32, true))
}

/// The rows of one episode that the writer turns into one record batch.
pub(crate) struct Slice<'a> {
    pub ep: &'a EpisodeData,
    /// Frame indices within the episode.
    pub rows: Range<usize>,
    pub episode_index: usize,
    pub task_index: usize,
    /// Dataset-wide index of the episode's first frame.
    pub from: u64,
    /// PNG bytes per view (image cameras), taken by the image columns.
    pub pngs: Vec<Vec<Vec<u8>>>,
}

impl Column {
    /// The parquet column's arrow type; `None` for features that have no column (video).
    pub fn arrow_type(&self) -> Option<DataType> {
        match self.kind {
            Kind::Image { .. } => Some(DataType::Struct(image_struct_fields())),
            Kind::Video { .. } | Kind::Other => None,
            Kind::State | Kind::Action => {
                Some(DataType::FixedSizeList(vector_item(), self.dim as i32))
            }
            _ => match self.dtype.as_str() {
                "float32" => Some(DataType::Float32),
                "int64" => Some(DataType::Int64),
                _ => None,
            },
        }
    }

    /// Empty running statistics: per channel for cameras, per dimension for numeric features, `None` for
    /// features without statistics.
    pub fn stats(&self) -> Option<FeatureStats> {
        match self.kind {
            Kind::Image { .. } | Kind::Video { .. } => Some(FeatureStats::new(3)),
            Kind::Other => None,
            _ => Some(FeatureStats::new(self.dim)),
        }
    }

    /// Empty statistics of one episode, for the episodes parquet's `stats/<key>/*` columns: numeric features
    /// only (cameras have dataset-wide statistics only).
    pub fn episode_stats(&self) -> Option<FeatureStats> {
        if self.is_camera() {
            None
        } else {
            self.stats()
        }
    }

    /// Whether the statistics are per channel of a camera (stats.json's `(3, 1, 1)` shape, and no
    /// `stats/<key>/*` episode columns).
    pub fn is_camera(&self) -> bool {
        matches!(self.kind, Kind::Image { .. } | Kind::Video { .. })
    }

    /// This column's values for the frames of `s`; `None` when the feature has no parquet column.
    pub fn cells(&self, s: &mut Slice) -> Result<Option<Cells>> {
        let frames = &s.ep.frames[s.rows.clone()];
        let rows = s.rows.clone();
        let n = frames.len();
        let vectors = |get: fn(&FrameData) -> &[f32]| Cells::Vectors {
            dim: self.dim,
            values: frames.iter().flat_map(|f| get(f).iter().copied()).collect(),
        };
        Ok(Some(match self.kind {
            Kind::Image { view } => {
                let pngs = s.pngs.get_mut(view).ok_or_else(|| {
                    DatasetError::Input(format!("internal: no PNG frames for view {view}"))
                })?;
                Cells::Png(std::mem::take(pngs))
            }
            Kind::Video { .. } | Kind::Other => return Ok(None),
            Kind::State => vectors(|f| &f.state),
            Kind::Action => vectors(|f| &f.action),
            Kind::Extra => {
                let values =
                    s.ep.extras
                        .iter()
                        .find(|(n, _)| *n == self.key)
                        .map(|(_, v)| v)
                        .ok_or_else(|| {
                            DatasetError::Input(format!("extra column {:?} is missing", self.key))
                        })?;
                match values {
                    ColumnValues::F32(v) => Cells::F32(v[rows].to_vec()),
                    ColumnValues::I64(v) => Cells::I64(v[rows].to_vec()),
                }
            }
            Kind::Timestamp => Cells::F32(frames.iter().map(|f| f.timestamp).collect()),
            Kind::FrameIndex => Cells::I64(rows.map(|i| i as i64).collect()),
            Kind::EpisodeIndex => Cells::I64(vec![s.episode_index as i64; n]),
            Kind::Index => Cells::I64(rows.map(|i| (s.from + i as u64) as i64).collect()),
            Kind::TaskIndex => Cells::I64(vec![s.task_index as i64; n]),
        }))
    }

    /// Whether reading an episode reads this column (video comes from its MP4 files, images only when they
    /// are decoded). Every column read must exist in the data file.
    pub fn reads(&self, images: bool) -> bool {
        match self.kind {
            Kind::Video { .. } => false,
            Kind::Image { .. } => images,
            _ => true,
        }
    }

    /// Empty values of the form [`Self::read`] returns; `None` for columns whose values are not kept.
    pub fn empty(&self) -> Option<Cells> {
        match self.kind {
            Kind::Image { .. } => Some(Cells::Png(Vec::new())),
            Kind::State | Kind::Action if self.dim > 0 => Some(Cells::Vectors {
                dim: self.dim,
                values: Vec::new(),
            }),
            Kind::Extra => Some(Cells::F64(Vec::new())),
            Kind::Timestamp => Some(Cells::F32(Vec::new())),
            Kind::FrameIndex | Kind::Index | Kind::TaskIndex => Some(Cells::I64(Vec::new())),
            _ => None,
        }
    }

    /// The values of rows `sel` of `batch` (read from data file `path`); `None` for columns whose values are not
    /// kept (see [`Self::empty`]). Accepted types: see [`crate::columns`].
    pub fn read(&self, batch: &RecordBatch, path: &Path, sel: &[usize]) -> Result<Option<Cells>> {
        let key = self.key.as_str();
        let Some(empty) = self.empty() else {
            return Ok(None);
        };
        let a = column(batch, path, key)?;
        Ok(Some(match empty {
            Cells::Png(_) => Cells::Png(image_bytes(a, sel, path, key)?),
            Cells::Vectors { dim, .. } => {
                let v = f32_vectors(a, path, key, dim)?;
                let mut values = Vec::with_capacity(sel.len() * dim);
                for &i in sel {
                    values.extend_from_slice(&v[i * dim..(i + 1) * dim]);
                }
                Cells::Vectors { dim, values }
            }
            Cells::F64(_) => Cells::F64(pick(&numeric_f64(a, path, key)?, sel)),
            Cells::F32(_) => Cells::F32(pick(&f32_values(a, path, key)?, sel)),
            Cells::I64(_) => Cells::I64(pick(&i64_values(a, path, key)?, sel)),
        }))
    }
}

fn pick<T: Copy>(v: &[T], sel: &[usize]) -> Vec<T> {
    sel.iter().map(|&i| v[i]).collect()
}

/// One column's values over some rows, in memory.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cells {
    F32(Vec<f32>),
    I64(Vec<i64>),
    /// Scalars of any numeric type, as the reader returns extra columns (NaN for nulls).
    F64(Vec<f64>),
    /// `dim` float32 values per row, row-major.
    Vectors {
        dim: usize,
        values: Vec<f32>,
    },
    /// Encoded image bytes per row.
    Png(Vec<Vec<u8>>),
}

impl Cells {
    /// Adds each row as one sample. Images add nothing: their statistics come from decoded pixels, gathered
    /// when the frames are encoded.
    pub fn push_stats(&self, st: &mut FeatureStats) {
        match self {
            Cells::F32(v) => v.iter().for_each(|&x| st.push(&[x as f64])),
            Cells::I64(v) => v.iter().for_each(|&x| st.push(&[x as f64])),
            Cells::F64(v) => v.iter().for_each(|&x| st.push(&[x])),
            Cells::Vectors { dim, values } if *dim > 0 => {
                for row in values.chunks_exact(*dim) {
                    st.push(&row.iter().map(|&x| x as f64).collect::<Vec<_>>());
                }
            }
            Cells::Vectors { .. } | Cells::Png(_) => {}
        }
    }

    /// The arrow array the writer stores (errors name `root`).
    pub fn into_array(self, root: &Path) -> Result<ArrayRef> {
        Ok(match self {
            Cells::F32(v) => Arc::new(Float32Array::from(v)),
            Cells::I64(v) => Arc::new(Int64Array::from(v)),
            Cells::F64(v) => Arc::new(Float64Array::from(v)),
            Cells::Vectors { dim, values } => Arc::new(
                FixedSizeListArray::try_new(
                    vector_item(),
                    dim as i32,
                    Arc::new(Float32Array::from(values)),
                    None,
                )
                .map_err(arrow_err(root))?,
            ),
            Cells::Png(pngs) => {
                let bytes = BinaryArray::from_iter_values(pngs.iter());
                let paths = StringArray::new_null(pngs.len());
                Arc::new(
                    StructArray::try_new(
                        image_struct_fields(),
                        vec![Arc::new(bytes) as ArrayRef, Arc::new(paths) as ArrayRef],
                        None,
                    )
                    .map_err(arrow_err(root))?,
                )
            }
        })
    }

    /// Appends `more` (values of the same column).
    pub fn append(&mut self, more: Cells) {
        match (self, more) {
            (Cells::F32(a), Cells::F32(b)) => a.extend(b),
            (Cells::I64(a), Cells::I64(b)) => a.extend(b),
            (Cells::F64(a), Cells::F64(b)) => a.extend(b),
            (Cells::Vectors { values: a, .. }, Cells::Vectors { values: b, .. }) => a.extend(b),
            (Cells::Png(a), Cells::Png(b)) => a.extend(b),
            _ => debug_assert!(false, "appending cells of another column"),
        }
    }

    /// Reorders the rows: row `k` becomes old row `order[k]`.
    pub fn permute(&mut self, order: &[usize]) {
        fn re<T: Clone>(v: &[T], order: &[usize], dim: usize) -> Vec<T> {
            order
                .iter()
                .flat_map(|&i| v[i * dim..(i + 1) * dim].iter().cloned())
                .collect()
        }
        match self {
            Cells::F32(v) => *v = re(v, order, 1),
            Cells::I64(v) => *v = re(v, order, 1),
            Cells::F64(v) => *v = re(v, order, 1),
            Cells::Vectors { dim, values } => {
                if *dim > 0 && !values.is_empty() {
                    *values = re(values, order, *dim)
                }
            }
            Cells::Png(v) => {
                if !v.is_empty() {
                    *v = re(v, order, 1)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contents::{ExtraColumnSpec, FrameData, ViewSpec};

    fn info() -> DatasetInfo {
        let view = |name: &str| ViewSpec {
            name: name.into(),
            height: 4,
            width: 6,
        };
        DatasetInfo {
            state_names: vec!["x".into(), "y".into()],
            action_names: vec!["u".into()],
            views: vec![view("top"), view("wrist")],
            extra_columns: vec![
                ExtraColumnSpec {
                    name: "progress".into(),
                    dtype: ExtraDtype::Float32,
                },
                ExtraColumnSpec {
                    name: "stage".into(),
                    dtype: ExtraDtype::Int64,
                },
            ],
            ..DatasetInfo::default()
        }
    }

    fn episode(len: usize) -> EpisodeData {
        EpisodeData {
            task: "t".into(),
            frames: (0..len)
                .map(|f| FrameData {
                    views: Vec::new(),
                    state: vec![f as f32, -(f as f32)],
                    action: vec![0.5 * f as f32],
                    timestamp: f as f32 / 30.0,
                })
                .collect(),
            stages: None,
            success: true,
            extras: vec![
                (
                    "progress".into(),
                    ColumnValues::F32((0..len).map(|f| f as f32 / 10.0).collect()),
                ),
                (
                    "stage".into(),
                    ColumnValues::I64((0..len as i64).map(|f| f / 3).collect()),
                ),
            ],
        }
    }

    #[test]
    fn describe_then_table_gives_lerobots_order_kinds_and_types() {
        let features = OrderedMap(describe(&info(), &[]));
        let cols = table(&features);
        let got: Vec<(&str, Kind, usize)> = cols
            .iter()
            .map(|c| (c.key.as_str(), c.kind, c.dim))
            .collect();
        assert_eq!(
            got,
            [
                ("observation.images.top", Kind::Image { view: 0 }, 72),
                ("observation.images.wrist", Kind::Image { view: 1 }, 72),
                (STATE_KEY, Kind::State, 2),
                (ACTION_KEY, Kind::Action, 1),
                ("progress", Kind::Extra, 1),
                ("stage", Kind::Extra, 1),
                ("timestamp", Kind::Timestamp, 1),
                ("frame_index", Kind::FrameIndex, 1),
                ("episode_index", Kind::EpisodeIndex, 1),
                ("index", Kind::Index, 1),
                ("task_index", Kind::TaskIndex, 1),
            ]
        );
        let types: Vec<Option<DataType>> = cols.iter().map(Column::arrow_type).collect();
        let image = Some(DataType::Struct(image_struct_fields()));
        let vector = |n| Some(DataType::FixedSizeList(vector_item(), n));
        let (f32, i64) = (Some(DataType::Float32), Some(DataType::Int64));
        assert_eq!(
            types,
            [
                image.clone(),
                image,
                vector(2),
                vector(1),
                f32.clone(),
                i64.clone(),
                f32,
                i64.clone(),
                i64.clone(),
                i64.clone(),
                i64
            ]
        );
        let dims: Vec<Option<usize>> = cols.iter().map(|c| c.stats().map(|s| s.dim())).collect();
        assert_eq!(&dims[..4], [Some(3), Some(3), Some(2), Some(1)]);
        assert!(cols[0].episode_stats().is_none() && cols[2].episode_stats().is_some());
    }

    #[test]
    fn table_reads_other_datasets_features() {
        let ft = |dtype: &str, shape: Vec<usize>| Feature {
            dtype: dtype.into(),
            shape,
            names: serde_json::Value::Null,
            info: None,
        };
        let features = OrderedMap(vec![
            ("observation.images.cam".into(), ft("video", vec![8, 8, 3])),
            ("observation.velocity".into(), ft("float32", vec![6])),
            ("observation.images.hand".into(), ft("image", vec![8, 8, 3])),
            ("note".into(), ft("string", vec![1])),
            ("index".into(), ft("int64", vec![1])),
        ]);
        let kinds: Vec<Kind> = table(&features).iter().map(|c| c.kind).collect();
        assert_eq!(
            kinds,
            [
                Kind::Video { view: 0 },
                Kind::Other,
                Kind::Image { view: 1 },
                Kind::Extra,
                Kind::Index
            ]
        );
        let cols = table(&features);
        assert!(!cols[0].reads(true) && cols[2].reads(true) && !cols[2].reads(false));
        assert!(cols[1].reads(true) && cols[1].empty().is_none() && cols[1].arrow_type().is_none());
    }

    /// What the writer builds for a slice is what the reader takes back, for the rows it asks for.
    #[test]
    fn written_cells_read_back() {
        let cols = table(&OrderedMap(describe(&info(), &[])));
        let ep = episode(7);
        let pngs: Vec<Vec<Vec<u8>>> = (0..2)
            .map(|v| (2..6).map(|f| vec![v as u8, f as u8]).collect())
            .collect();
        let mut slice = Slice {
            ep: &ep,
            rows: 2..6,
            episode_index: 3,
            task_index: 1,
            from: 100,
            pngs,
        };
        let mut written = Vec::new();
        let mut fields = Vec::new();
        let mut arrays = Vec::new();
        for c in &cols {
            let cells = c
                .cells(&mut slice)
                .unwrap()
                .expect("every column is in the parquet");
            fields.push(Field::new(c.key.clone(), c.arrow_type().unwrap(), true));
            written.push(cells.clone());
            arrays.push(cells.into_array(Path::new("x")).unwrap());
        }
        assert_eq!(
            written[9],
            Cells::I64(vec![102, 103, 104, 105]),
            "index = from + frame"
        );
        assert_eq!(written[7], Cells::I64(vec![2, 3, 4, 5]), "frame_index");
        assert_eq!(written[8], Cells::I64(vec![3; 4]), "episode_index");
        let batch =
            RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), arrays).unwrap();
        let sel = [3, 1];
        for (c, w) in cols.iter().zip(&written) {
            let Some(mut got) = c.read(&batch, Path::new("x"), &sel).unwrap() else {
                assert_eq!(c.kind, Kind::EpisodeIndex, "only episode_index is not kept");
                continue;
            };
            let mut want = w.clone();
            want.permute(&sel);
            if let (Cells::F64(g), Cells::F32(v)) = (&got, &want) {
                assert_eq!(
                    *g,
                    v.iter().map(|&x| x as f64).collect::<Vec<_>>(),
                    "{}",
                    c.key
                );
            } else if let (Cells::F64(g), Cells::I64(v)) = (&got, &want) {
                assert_eq!(
                    *g,
                    v.iter().map(|&x| x as f64).collect::<Vec<_>>(),
                    "{}",
                    c.key
                );
            } else {
                assert_eq!(got, want, "{}", c.key);
            }
            got.append(got.clone());
            assert_eq!(
                got.push_stats_count(),
                2 * sel.len() as u64 * u64::from(!c.is_camera()),
                "{}",
                c.key
            );
        }
    }

    impl Cells {
        fn push_stats_count(&self) -> u64 {
            let dim = match self {
                Cells::Vectors { dim, .. } => *dim,
                _ => 1,
            };
            let mut st = FeatureStats::new(dim);
            self.push_stats(&mut st);
            st.count
        }
    }
}
