//! `meta/info.json` (LeRobot v3 `create_empty_dataset_info`), path templates and small ordered-JSON helpers.

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{io_err, DatasetError, Result};

/// LeRobot's `CODEBASE_VERSION` for the layout this crate writes.
pub const CODEBASE_VERSION: &str = "v3.0";
/// LeRobot's `DEFAULT_FEATURES` `(key, dtype)`, in the order `LeRobotDatasetMetadata.create` appends them after
/// the user's features. Every dataset has them (info.json is refused without them).
pub(crate) const DEFAULT_FEATURES: [(&str, &str); 5] = [
    ("timestamp", "float32"),
    ("frame_index", "int64"),
    ("episode_index", "int64"),
    ("index", "int64"),
    ("task_index", "int64"),
];
/// LeRobot `DEFAULT_CHUNK_SIZE`: files per `chunk-NNN` folder.
pub const DEFAULT_CHUNK_SIZE: u64 = 1000;
/// LeRobot `DEFAULT_DATA_FILE_SIZE_IN_MB`.
pub const DEFAULT_DATA_FILE_SIZE_IN_MB: u64 = 100;
/// LeRobot `DEFAULT_VIDEO_FILE_SIZE_IN_MB`.
pub const DEFAULT_VIDEO_FILE_SIZE_IN_MB: u64 = 500;
/// LeRobot `DEFAULT_DATA_PATH`.
pub const DEFAULT_DATA_PATH: &str = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet";
/// LeRobot `DEFAULT_VIDEO_PATH`.
pub const DEFAULT_VIDEO_PATH: &str =
    "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4";
/// LeRobot `DEFAULT_EPISODES_PATH` (relative to the dataset root).
pub const EPISODES_PATH: &str =
    "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet";
pub const INFO_PATH: &str = "meta/info.json";
pub const STATS_PATH: &str = "meta/stats.json";
pub const TASKS_PATH: &str = "meta/tasks.parquet";
/// SARM's dataset-level stage priors (name -> proportion, in stage order).
pub const TEMPORAL_PROPORTIONS_SPARSE_PATH: &str = "meta/temporal_proportions_sparse.json";
/// Where LeRobot's `compute_rabc_weights.py` writes per-frame progress (dataset root).
pub const SARM_PROGRESS_FILE: &str = "sarm_progress.parquet";

/// A JSON object that keeps its key order (serde_json's own map sorts keys unless `preserve_order` is on, and
/// turning that on would change every crate of the workspace).
#[derive(Debug, Clone, PartialEq)]
pub struct OrderedMap<V>(pub Vec<(String, V)>);

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<V> OrderedMap<V> {
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V: Serialize> Serialize for OrderedMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V2<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for V2<V> {
            type Value = OrderedMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, V>()? {
                    out.push((k, v));
                }
                Ok(OrderedMap(out))
            }
        }
        d.deserialize_map(V2(PhantomData))
    }
}

/// One entry of `info.json`'s `features`: LeRobot's `{dtype, shape, names[, info]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Feature {
    /// `float32`, `int64`, `bool`, `string`, `image`, `video`, ...
    pub dtype: String,
    pub shape: Vec<usize>,
    /// A list of names, a dict (`{"motors": [...]}` in older datasets) or null.
    #[serde(default)]
    pub names: serde_json::Value,
    /// Video encoding details (`video.fps`, `video.codec`, ...) for `video` features.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<serde_json::Value>,
}

impl Feature {
    pub fn is_visual(&self) -> bool {
        self.dtype == "image" || self.dtype == "video"
    }

    /// `(height, width, channels)` of an image/video feature. LeRobot's shape is `[h, w, c]` with names
    /// `["height", "width", "channels"]`; `[c, h, w]` (names starting with "channel") is accepted too.
    pub fn image_hwc(&self) -> Option<(u32, u32, u32)> {
        if self.shape.len() != 3 {
            return None;
        }
        let first_is_channel = self
            .names
            .as_array()
            .and_then(|n| n.first())
            .and_then(|n| n.as_str())
            .is_some_and(|n| n.starts_with("channel"));
        let (h, w, c) = if first_is_channel {
            (self.shape[1], self.shape[2], self.shape[0])
        } else {
            (self.shape[0], self.shape[1], self.shape[2])
        };
        Some((
            u32::try_from(h).ok()?,
            u32::try_from(w).ok()?,
            u32::try_from(c).ok()?,
        ))
    }

    /// The names as strings when `names` is a list of strings (or a dict holding one such list).
    pub fn name_list(&self) -> Option<Vec<String>> {
        let list = match &self.names {
            serde_json::Value::Array(a) => a,
            serde_json::Value::Object(o) if o.len() == 1 => o.values().next()?.as_array()?,
            _ => return None,
        };
        list.iter().map(|v| v.as_str().map(str::to_owned)).collect()
    }
}

/// `meta/info.json` of a LeRobot v3 dataset. Field order matches LeRobot's `create_empty_dataset_info`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InfoJson {
    pub codebase_version: String,
    #[serde(default)]
    pub robot_type: Option<String>,
    pub total_episodes: u64,
    pub total_frames: u64,
    #[serde(default)]
    pub total_tasks: u64,
    #[serde(default = "default_chunks_size")]
    pub chunks_size: u64,
    #[serde(default = "default_data_mb")]
    pub data_files_size_in_mb: u64,
    #[serde(default = "default_video_mb")]
    pub video_files_size_in_mb: u64,
    pub fps: u32,
    #[serde(default)]
    pub splits: OrderedMap<String>,
    pub data_path: String,
    #[serde(default)]
    pub video_path: Option<String>,
    pub features: OrderedMap<Feature>,
}

fn default_chunks_size() -> u64 {
    DEFAULT_CHUNK_SIZE
}
fn default_data_mb() -> u64 {
    DEFAULT_DATA_FILE_SIZE_IN_MB
}
fn default_video_mb() -> u64 {
    DEFAULT_VIDEO_FILE_SIZE_IN_MB
}

impl InfoJson {
    /// Reads and checks `meta/info.json` under `root`.
    pub fn read(root: &Path) -> Result<Self> {
        let path = root.join(INFO_PATH);
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        let info: InfoJson = serde_json::from_str(&text).map_err(|source| DatasetError::Json {
            path: path.clone(),
            source,
        })?;
        info.check(&path)?;
        Ok(info)
    }

    fn check(&self, path: &Path) -> Result<()> {
        let field = |field: &str, reason: String| DatasetError::Field {
            path: path.to_owned(),
            field: field.to_owned(),
            reason,
        };
        if !self.codebase_version.starts_with("v3.") {
            return Err(field(
                "codebase_version",
                format!(
                    "is {:?}; only LeRobot v3 datasets are read (convert v2.x with LeRobot's convert_dataset_v21_to_v30)",
                    self.codebase_version
                ),
            ));
        }
        if self.fps == 0 {
            return Err(field("fps", "must be > 0".into()));
        }
        for (name, ft) in self.features.iter() {
            let f = format!("features.{name}");
            if ft.is_visual() {
                match ft.image_hwc() {
                    Some((_, _, 3)) => {}
                    _ => {
                        return Err(field(
                            &f,
                            format!(
                                "{} feature needs shape [height, width, 3], got {:?}",
                                ft.dtype, ft.shape
                            ),
                        ))
                    }
                }
            } else if ft.shape.is_empty() {
                return Err(field(&f, "shape is empty".into()));
            }
        }
        for (required, _) in DEFAULT_FEATURES {
            if self.features.get(required).is_none() {
                return Err(field(
                    "features",
                    format!("lacks LeRobot's default feature `{required}`"),
                ));
            }
        }
        if self.features.iter().any(|(_, f)| f.dtype == "video") && self.video_path.is_none() {
            return Err(field(
                "video_path",
                "is null but some features have dtype \"video\"".into(),
            ));
        }
        Ok(())
    }
}

/// Fills a LeRobot path template: `{name}` and `{name:03d}` (zero padded) placeholders.
pub fn format_template(
    template: &str,
    vars: &[(&str, &str, u64)],
) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("unclosed `{{` in {template:?}"))?;
        let spec = &after[..close];
        let (name, fmt) = spec.split_once(':').unwrap_or((spec, ""));
        let (_, text, num) = vars
            .iter()
            .find(|(n, _, _)| *n == name)
            .ok_or_else(|| format!("unknown placeholder {{{spec}}} in {template:?}"))?;
        if fmt.is_empty() {
            if text.is_empty() {
                out.push_str(&num.to_string());
            } else {
                out.push_str(text);
            }
        } else {
            let width: usize = fmt
                .strip_prefix('0')
                .and_then(|f| f.strip_suffix('d'))
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| format!("unsupported format {{{spec}}} in {template:?}"))?;
            out.push_str(&format!("{num:0width$}"));
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Stage priors as LeRobot's `meta/temporal_proportions_sparse.json` stores them: `{name: proportion}` in stage
/// order.
pub fn write_proportions_json(path: &Path, names: &[String], proportions: &[f64]) -> Result<()> {
    let map = OrderedMap(
        names
            .iter()
            .cloned()
            .zip(proportions.iter().copied())
            .collect(),
    );
    let text = serde_json::to_string_pretty(&map).map_err(|source| DatasetError::Json {
        path: path.to_owned(),
        source,
    })?;
    crate::durable::write_bytes(path, (text + "\n").as_bytes())
}

/// Reads a `temporal_proportions_*.json` file, keeping the stage order of the file.
pub fn read_proportions_json(path: &Path) -> Result<Vec<(String, f64)>> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let map: OrderedMap<f64> =
        serde_json::from_str(&text).map_err(|source| DatasetError::Json {
            path: path.to_owned(),
            source,
        })?;
    for (name, p) in map.iter() {
        if !p.is_finite() || *p < 0.0 {
            return Err(DatasetError::Field {
                path: path.to_owned(),
                field: name.to_owned(),
                reason: format!("proportion {p} is not a finite value >= 0"),
            });
        }
    }
    Ok(map.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        let p = format_template(
            DEFAULT_DATA_PATH,
            &[("chunk_index", "", 1), ("file_index", "", 23)],
        )
        .unwrap();
        assert_eq!(p, "data/chunk-001/file-023.parquet");
        let v = format_template(
            DEFAULT_VIDEO_PATH,
            &[
                ("video_key", "observation.images.top", 0),
                ("chunk_index", "", 0),
                ("file_index", "", 0),
            ],
        )
        .unwrap();
        assert_eq!(v, "videos/observation.images.top/chunk-000/file-000.mp4");
        assert!(format_template("a/{nope}.x", &[]).is_err());
    }

    #[test]
    fn ordered_map_keeps_order() {
        let m: OrderedMap<f64> = serde_json::from_str(r#"{"z": 1.0, "a": 2.0}"#).unwrap();
        assert_eq!(m.keys().collect::<Vec<_>>(), ["z", "a"]);
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"z":1.0,"a":2.0}"#);
    }
}
