//! Tensors on the wire: `{dtype, shape, data}` with `data` the raw little-endian bytes (a msgpack `bin`), so
//! that Python reads them with `numpy.frombuffer(data, dtype).reshape(shape)`.

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use stagewise_core::{Frame, Observation, View};
use std::fmt;

/// Element type of a [`Tensor`]; on the wire its numpy name (`"uint8"`, `"float32"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    Uint8,
    Uint16,
    Int32,
    Int64,
    Float32,
    Float64,
}

impl DType {
    pub const ALL: [DType; 6] = [
        DType::Uint8,
        DType::Uint16,
        DType::Int32,
        DType::Int64,
        DType::Float32,
        DType::Float64,
    ];

    /// The numpy name used on the wire.
    pub fn name(self) -> &'static str {
        match self {
            DType::Uint8 => "uint8",
            DType::Uint16 => "uint16",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Uint8 => 1,
            DType::Uint16 => 2,
            DType::Int32 | DType::Float32 => 4,
            DType::Int64 | DType::Float64 => 8,
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A tensor that does not hold together, or is not what the caller asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    #[error("unknown dtype {0:?} (known: uint8, uint16, int32, int64, float32, float64)")]
    UnknownDType(String),
    #[error("shape {shape:?} of {dtype} needs {expected} bytes of data, got {got}")]
    SizeMismatch {
        dtype: DType,
        shape: Vec<u64>,
        expected: String,
        got: usize,
    },
    #[error("expected a {expected} tensor, got {dtype} with shape {shape:?}")]
    Unexpected {
        expected: String,
        dtype: DType,
        shape: Vec<u64>,
    },
}

/// An n-dimensional array: element type, shape (row-major, C order) and raw little-endian bytes.
/// Invariant (checked by [`Tensor::new`] and by decoding): `data.len() == product(shape) * dtype.size()`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

/// Bytes of data a `dtype` tensor of `shape` holds (None: more than `usize::MAX`).
pub(crate) fn expected_len(dtype: DType, shape: &[u64]) -> Option<usize> {
    let mut n: u64 = dtype.size() as u64;
    for &d in shape {
        n = n.checked_mul(d)?;
    }
    usize::try_from(n).ok()
}

impl Tensor {
    /// A tensor from raw little-endian bytes; fails when the byte count does not match the shape.
    pub fn new(dtype: DType, shape: Vec<u64>, data: Vec<u8>) -> Result<Self, TensorError> {
        match expected_len(dtype, &shape) {
            Some(n) if n == data.len() => Ok(Self { dtype, shape, data }),
            n => Err(TensorError::SizeMismatch {
                expected: n.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string()),
                dtype,
                shape,
                got: data.len(),
            }),
        }
    }

    /// A tensor from parts already checked to hold together (a decoded [`crate::TensorRef`]).
    pub(crate) fn from_checked(dtype: DType, shape: Vec<u64>, data: Vec<u8>) -> Self {
        debug_assert_eq!(expected_len(dtype, &shape), Some(data.len()));
        Self { dtype, shape, data }
    }

    /// A float32 tensor of shape `[values.len()]`.
    pub fn from_f32(values: &[f32]) -> Self {
        let mut data = Vec::with_capacity(values.len() * 4);
        for v in values {
            data.extend_from_slice(&v.to_le_bytes());
        }
        Self {
            dtype: DType::Float32,
            shape: vec![values.len() as u64],
            data,
        }
    }

    /// A float32 tensor of the given shape; fails when `values` does not fill it.
    pub fn from_f32_shaped(shape: Vec<u64>, values: &[f32]) -> Result<Self, TensorError> {
        let mut data = Vec::with_capacity(values.len() * 4);
        for v in values {
            data.extend_from_slice(&v.to_le_bytes());
        }
        Self::new(DType::Float32, shape, data)
    }

    /// An RGB frame as a uint8 tensor of shape `[height, width, 3]` (HWC).
    pub fn from_rgb(frame: &Frame) -> Self {
        Self {
            dtype: DType::Uint8,
            shape: vec![u64::from(frame.height()), u64::from(frame.width()), 3],
            data: frame.as_raw().clone(),
        }
    }

    /// Like [`Tensor::from_rgb`] but takes the frame's buffer without copying.
    pub fn from_rgb_owned(frame: Frame) -> Self {
        let shape = vec![u64::from(frame.height()), u64::from(frame.width()), 3];
        Self {
            dtype: DType::Uint8,
            shape,
            data: frame.into_raw(),
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }
    /// The raw little-endian bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }
    pub fn into_data(self) -> Vec<u8> {
        self.data
    }
    /// Moves the data out, leaving the tensor empty (and no longer consistent with its shape): only for
    /// encoders that consume the message it belongs to ([`crate::TransitionMsg::encode_parts`]).
    pub(crate) fn take_data(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.data)
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len() / self.dtype.size()
    }

    fn unexpected(&self, expected: &str) -> TensorError {
        TensorError::Unexpected {
            expected: expected.to_string(),
            dtype: self.dtype,
            shape: self.shape.clone(),
        }
    }

    /// The elements of a float32 tensor (any shape), in row-major order.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, TensorError> {
        if self.dtype != DType::Float32 {
            return Err(self.unexpected("float32"));
        }
        Ok(self
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// A uint8 `[height, width, 3]` tensor as an RGB frame.
    pub fn to_rgb(&self) -> Result<Frame, TensorError> {
        let hwc = match self.shape.as_slice() {
            [h, w, 3] if self.dtype == DType::Uint8 => Some((*h, *w)),
            _ => None,
        };
        let (h, w) = hwc.ok_or_else(|| self.unexpected("uint8 [height, width, 3]"))?;
        let (Ok(h), Ok(w)) = (u32::try_from(h), u32::try_from(w)) else {
            return Err(self.unexpected("uint8 [height, width, 3] with sides below 2^32"));
        };
        Frame::from_raw(w, h, self.data.clone())
            .ok_or_else(|| self.unexpected("uint8 [height, width, 3]"))
    }
}

#[derive(Serialize)]
struct TensorSer<'a> {
    dtype: &'static str,
    shape: &'a [u64],
    data: &'a serde_bytes::Bytes,
}

impl Serialize for Tensor {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        TensorSer {
            dtype: self.dtype.name(),
            shape: &self.shape,
            data: serde_bytes::Bytes::new(&self.data),
        }
        .serialize(s)
    }
}

#[derive(Deserialize)]
struct TensorWire {
    dtype: String,
    shape: Vec<u64>,
    data: serde_bytes::ByteBuf,
}

impl<'de> Deserialize<'de> for Tensor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = TensorWire::deserialize(d)?;
        let dtype = DType::from_name(&w.dtype)
            .ok_or_else(|| de::Error::custom(TensorError::UnknownDType(w.dtype.clone())))?;
        Tensor::new(dtype, w.shape, w.data.into_vec()).map_err(de::Error::custom)
    }
}

/// Tensors by name, in a fixed order (the environment's view order). On the wire: a msgpack map
/// `{name: tensor}` whose entries are written in this order; names are unique.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TensorMap {
    entries: Vec<(String, Tensor)>,
}

impl TensorMap {
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds (or replaces) `name`, keeping first-insertion order.
    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor) {
        let name = name.into();
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = tensor,
            None => self.entries.push((name, tensor)),
        }
    }
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.entries.iter().map(|(n, t)| (n.as_str(), t))
    }
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn into_entries(self) -> Vec<(String, Tensor)> {
        self.entries
    }
    pub(crate) fn tensors_mut(&mut self) -> impl Iterator<Item = &mut Tensor> {
        self.entries.iter_mut().map(|(_, t)| t)
    }
}

impl FromIterator<(String, Tensor)> for TensorMap {
    fn from_iter<I: IntoIterator<Item = (String, Tensor)>>(iter: I) -> Self {
        let mut m = TensorMap::new();
        for (n, t) in iter {
            m.insert(n, t);
        }
        m
    }
}

impl Serialize for TensorMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.entries.len()))?;
        for (n, t) in &self.entries {
            map.serialize_entry(n, t)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for TensorMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TensorMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map from names to tensors")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<TensorMap, A::Error> {
                let mut entries: Vec<(String, Tensor)> = Vec::new();
                while let Some((name, t)) = a.next_entry::<String, Tensor>()? {
                    if entries.iter().any(|(n, _)| *n == name) {
                        return Err(de::Error::custom(format!(
                            "tensor name {name:?} appears twice"
                        )));
                    }
                    entries.push((name, t));
                }
                Ok(TensorMap { entries })
            }
        }
        d.deserialize_map(V)
    }
}

/// An [`Observation`] on the wire: images as uint8 `[H, W, 3]` tensors by view name, depth (when the source
/// has it) as float32 `[H, W]` tensors by view name, state as a float32 `[n]` tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservationMsg {
    /// Step index within the episode (0 at reset).
    pub step: u64,
    /// Seconds since the episode started.
    pub time: f64,
    /// uint8 `[height, width, 3]` RGB per view, in the environment's view order.
    pub images: TensorMap,
    /// float32 `[height, width]` depth in metres per view that has depth (`inf` where nothing was hit).
    #[serde(default)]
    pub depth: TensorMap,
    /// float32 `[n]` proprioceptive state.
    pub state: Tensor,
}

impl ObservationMsg {
    /// Bytes of tensor data it carries, plus room for the names and headers (an encoding-size estimate).
    pub fn data_len(&self) -> usize {
        let map = |m: &TensorMap| {
            m.iter()
                .map(|(k, t)| k.len() + 64 + t.data().len())
                .sum::<usize>()
        };
        128 + map(&self.images) + map(&self.depth) + self.state.data().len()
    }

    /// Copies an observation into wire tensors.
    pub fn from_observation(obs: &Observation) -> Self {
        let mut images = TensorMap::new();
        let mut depth = TensorMap::new();
        for v in &obs.views {
            images.insert(v.name.clone(), Tensor::from_rgb(&v.rgb));
            if let Some(d) = &v.depth {
                let shape = vec![u64::from(v.rgb.height()), u64::from(v.rgb.width())];
                // A depth buffer of the wrong size is sent flat rather than dropped.
                let t = Tensor::from_f32_shaped(shape, d).unwrap_or_else(|_| Tensor::from_f32(d));
                depth.insert(v.name.clone(), t);
            }
        }
        Self {
            step: obs.step,
            time: obs.time,
            images,
            depth,
            state: Tensor::from_f32(&obs.state),
        }
    }

    /// Moves an observation into wire tensors (no copy of the frames).
    pub fn from_observation_owned(obs: Observation) -> Self {
        let mut images = TensorMap::new();
        let mut depth = TensorMap::new();
        for v in obs.views {
            let (h, w) = (u64::from(v.rgb.height()), u64::from(v.rgb.width()));
            if let Some(d) = &v.depth {
                let t =
                    Tensor::from_f32_shaped(vec![h, w], d).unwrap_or_else(|_| Tensor::from_f32(d));
                depth.insert(v.name.clone(), t);
            }
            images.insert(v.name, Tensor::from_rgb_owned(v.rgb));
        }
        Self {
            step: obs.step,
            time: obs.time,
            images,
            depth,
            state: Tensor::from_f32(&obs.state),
        }
    }

    /// Back to a core [`Observation`] (views in wire order).
    pub fn to_observation(&self) -> Result<Observation, TensorError> {
        let mut views = Vec::with_capacity(self.images.len());
        for (name, t) in self.images.iter() {
            let mut view = View::new(name, t.to_rgb()?);
            if let Some(d) = self.depth.get(name) {
                view.depth = Some(d.to_f32_vec()?);
            }
            views.push(view);
        }
        Ok(Observation {
            step: self.step,
            time: self.time,
            views,
            state: self.state.to_f32_vec()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_checked() {
        assert!(Tensor::new(DType::Float32, vec![2, 3], vec![0; 24]).is_ok());
        let err = Tensor::new(DType::Float32, vec![2, 3], vec![0; 23]).expect_err("short");
        assert!(err.to_string().contains("needs 24 bytes"), "{err}");
        let err = Tensor::new(DType::Uint8, vec![u64::MAX, 4], vec![]).expect_err("overflow");
        assert!(err.to_string().contains("more than usize::MAX"), "{err}");
        assert!(
            Tensor::new(DType::Float64, vec![], vec![0; 8]).is_ok(),
            "a scalar"
        );
    }

    #[test]
    fn rgb_and_f32_round_trip() {
        let frame = Frame::from_fn(5, 4, |x, y| image::Rgb([x as u8, y as u8, 7]));
        let t = Tensor::from_rgb(&frame);
        assert_eq!(t.shape(), &[4, 5, 3]);
        assert_eq!(t.to_rgb().expect("rgb"), frame);
        let v = [1.5f32, -2.0, f32::INFINITY];
        assert_eq!(Tensor::from_f32(&v).to_f32_vec().expect("f32"), v);
        assert!(Tensor::from_f32(&v).to_rgb().is_err());
        assert!(t.to_f32_vec().is_err());
        assert_eq!(&Tensor::from_f32(&[1.0]).data(), &1.0f32.to_le_bytes());
    }

    #[test]
    fn dtype_names() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("float16"), None);
    }
}
