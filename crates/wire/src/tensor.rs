//! Tensors on the wire: `{dtype, shape, data}` with `data` the raw little-endian bytes (a msgpack `bin`), so
//! that Python reads them with `numpy.frombuffer(data, dtype).reshape(shape)`.
//!
//! A tensor's bytes live in its storage type `D` ([`TensorData`]): `Vec<u8>` (the default, owned), or
//! [`Borrowed`], a slice of the bytes being decoded. The messages that carry tensors ([`ObservationMsg`] and the
//! messages holding observations) take the same parameter, so that one decoder reads them either way:
//! `decode::<TransitionMsg>` copies the tensors' bytes out, `decode::<TransitionMsg<Borrowed>>` leaves them in
//! the received buffer, and `into_owned()` turns the second into the first.

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use stagewise_core::{Frame, Observation, View};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// Tensor bytes that borrow the decoded buffer: a slice of it for data written as msgpack `bin` (as docs/wire.md
/// prescribes and every Stagewise sender does), a copy for a foreign sender that wrote an array of integers.
pub type Borrowed<'a> = Cow<'a, [u8]>;

/// Where a tensor's bytes live: `Vec<u8>` (owned) or [`Borrowed`].
pub trait TensorData: AsRef<[u8]> {
    /// The bytes, owned (moved when they already are).
    fn into_vec(self) -> Vec<u8>;
}

impl TensorData for Vec<u8> {
    fn into_vec(self) -> Vec<u8> {
        self
    }
}

impl TensorData for Cow<'_, [u8]> {
    fn into_vec(self) -> Vec<u8> {
        self.into_owned()
    }
}

/// Reading a tensor's `data` (msgpack `bin`, `str`, or an array of integers) into its storage.
pub trait DecodeData<'de>: TensorData + Sized {
    fn deserialize_data<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

impl<'de> DecodeData<'de> for Vec<u8> {
    fn deserialize_data<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_byte_buf(DataVisitor).map(Cow::into_owned)
    }
}

impl<'de: 'a, 'a> DecodeData<'de> for Cow<'a, [u8]> {
    fn deserialize_data<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_byte_buf(DataVisitor)
    }
}

/// The one reading of a tensor's `data`, whatever it is stored in: the bytes of a `bin` or `str` as a slice of
/// the input where the deserializer lends them, else a copy; an array of integers collected (what
/// `serde_bytes::ByteBuf` accepts, with its error texts).
struct DataVisitor;

impl<'de> Visitor<'de> for DataVisitor {
    type Value = Cow<'de, [u8]>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("byte array")
    }
    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_vec()))
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v.as_bytes()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.as_bytes().to_vec()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.into_bytes()))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element::<u8>()? {
            out.push(b);
        }
        Ok(Cow::Owned(out))
    }
}

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

/// An n-dimensional array: element type, shape (row-major, C order) and raw little-endian bytes, held in `D`
/// (owned by default, see [`TensorData`]).
/// Invariant (checked by [`Tensor::new`] and by decoding): `data.len() == product(shape) * dtype.size()`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor<D = Vec<u8>> {
    dtype: DType,
    shape: Vec<u64>,
    data: D,
}

/// Bytes of data a `dtype` tensor of `shape` holds (None: more than `usize::MAX`).
fn expected_len(dtype: DType, shape: &[u64]) -> Option<usize> {
    let mut n: u64 = dtype.size() as u64;
    for &d in shape {
        n = n.checked_mul(d)?;
    }
    usize::try_from(n).ok()
}

impl<D: TensorData> Tensor<D> {
    /// A tensor of bytes held in `D`; fails when the byte count does not match the shape.
    fn checked(dtype: DType, shape: Vec<u64>, data: D) -> Result<Self, TensorError> {
        let got = data.as_ref().len();
        match expected_len(dtype, &shape) {
            Some(n) if n == got => Ok(Self { dtype, shape, data }),
            n => Err(TensorError::SizeMismatch {
                expected: n.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string()),
                dtype,
                shape,
                got,
            }),
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
        self.data.as_ref()
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data().len() / self.dtype.size()
    }
    /// The bytes in their storage (e.g. whether a [`Borrowed`] tensor borrows).
    pub fn storage(&self) -> &D {
        &self.data
    }
    /// The same tensor with its bytes owned (moved when they already are, copied when borrowed).
    pub fn into_owned(self) -> Tensor {
        Tensor {
            dtype: self.dtype,
            shape: self.shape,
            data: self.data.into_vec(),
        }
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
            .data()
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
        Frame::from_raw(w, h, self.data().to_vec())
            .ok_or_else(|| self.unexpected("uint8 [height, width, 3]"))
    }
}

impl Tensor {
    /// A tensor from raw little-endian bytes; fails when the byte count does not match the shape.
    pub fn new(dtype: DType, shape: Vec<u64>, data: Vec<u8>) -> Result<Self, TensorError> {
        Self::checked(dtype, shape, data)
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

    pub fn into_data(self) -> Vec<u8> {
        self.data
    }
    /// Moves the data out, leaving the tensor empty (and no longer consistent with its shape): only for
    /// encoders that consume the message it belongs to ([`crate::TransitionMsg::encode_parts`]).
    pub(crate) fn take_data(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.data)
    }
}

#[derive(Serialize)]
struct TensorSer<'a> {
    dtype: &'static str,
    shape: &'a [u64],
    data: &'a serde_bytes::Bytes,
}

impl<D: TensorData> Serialize for Tensor<D> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        TensorSer {
            dtype: self.dtype.name(),
            shape: &self.shape,
            data: serde_bytes::Bytes::new(self.data()),
        }
        .serialize(s)
    }
}

#[derive(Deserialize)]
#[serde(bound(deserialize = "B: DecodeData<'de>, 'de: 'a"))]
struct TensorWire<'a, B> {
    #[serde(borrow)]
    dtype: Cow<'a, str>,
    shape: Vec<u64>,
    #[serde(deserialize_with = "B::deserialize_data")]
    data: B,
}

impl<'de, B: DecodeData<'de>> Deserialize<'de> for Tensor<B> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = TensorWire::<'de, B>::deserialize(d)?;
        let dtype = DType::from_name(&w.dtype)
            .ok_or_else(|| de::Error::custom(TensorError::UnknownDType(w.dtype.to_string())))?;
        Tensor::checked(dtype, w.shape, w.data).map_err(de::Error::custom)
    }
}

/// Tensors by name, in a fixed order (the environment's view order). On the wire: a msgpack map
/// `{name: tensor}` whose entries are written in this order; names are unique.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorMap<D = Vec<u8>> {
    entries: Vec<(String, Tensor<D>)>,
}

impl<D> Default for TensorMap<D> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

impl TensorMap {
    pub fn new() -> Self {
        Self::default()
    }
    pub(crate) fn tensors_mut(&mut self) -> impl Iterator<Item = &mut Tensor> {
        self.entries.iter_mut().map(|(_, t)| t)
    }
}

impl<D: TensorData> TensorMap<D> {
    /// Adds (or replaces) `name`, keeping first-insertion order.
    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor<D>) {
        let name = name.into();
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = tensor,
            None => self.entries.push((name, tensor)),
        }
    }
    pub fn get(&self, name: &str) -> Option<&Tensor<D>> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor<D>)> {
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
    pub fn into_entries(self) -> Vec<(String, Tensor<D>)> {
        self.entries
    }
    /// The same map with every tensor's bytes owned.
    pub fn into_owned(self) -> TensorMap {
        TensorMap {
            entries: self
                .entries
                .into_iter()
                .map(|(n, t)| (n, t.into_owned()))
                .collect(),
        }
    }
}

impl<D: TensorData> FromIterator<(String, Tensor<D>)> for TensorMap<D> {
    fn from_iter<I: IntoIterator<Item = (String, Tensor<D>)>>(iter: I) -> Self {
        let mut m = TensorMap::default();
        for (n, t) in iter {
            m.insert(n, t);
        }
        m
    }
}

impl<D: TensorData> Serialize for TensorMap<D> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.entries.len()))?;
        for (n, t) in &self.entries {
            map.serialize_entry(n, t)?;
        }
        map.end()
    }
}

impl<'de, B: DecodeData<'de>> Deserialize<'de> for TensorMap<B> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<B>(PhantomData<B>);
        impl<'de, B: DecodeData<'de>> Visitor<'de> for V<B> {
            type Value = TensorMap<B>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map from names to tensors")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<TensorMap<B>, A::Error> {
                let mut entries: Vec<(String, Tensor<B>)> = Vec::new();
                while let Some((name, t)) = a.next_entry::<String, Tensor<B>>()? {
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
        d.deserialize_map(V(PhantomData))
    }
}

/// An [`Observation`] on the wire: images as uint8 `[H, W, 3]` tensors by view name, depth (when the source
/// has it) as float32 `[H, W]` tensors by view name, state as a float32 `[n]` tensor.
/// Tensors held in `D` like [`Tensor`]'s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "D: TensorData", deserialize = "D: DecodeData<'de>"))]
pub struct ObservationMsg<D = Vec<u8>> {
    /// Step index within the episode (0 at reset).
    pub step: u64,
    /// Seconds since the episode started.
    pub time: f64,
    /// uint8 `[height, width, 3]` RGB per view, in the environment's view order.
    pub images: TensorMap<D>,
    /// float32 `[height, width]` depth in metres per view that has depth (`inf` where nothing was hit).
    #[serde(default)]
    pub depth: TensorMap<D>,
    /// float32 `[n]` proprioceptive state.
    pub state: Tensor<D>,
}

impl<D: TensorData> ObservationMsg<D> {
    /// Bytes of tensor data it carries, plus room for the names and headers (an encoding-size estimate).
    pub fn data_len(&self) -> usize {
        let map = |m: &TensorMap<D>| {
            m.iter()
                .map(|(k, t)| k.len() + 64 + t.data().len())
                .sum::<usize>()
        };
        128 + map(&self.images) + map(&self.depth) + self.state.data().len()
    }

    /// The same observation with every tensor's bytes owned.
    pub fn into_owned(self) -> ObservationMsg {
        ObservationMsg {
            step: self.step,
            time: self.time,
            images: self.images.into_owned(),
            depth: self.depth.into_owned(),
            state: self.state.into_owned(),
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

impl ObservationMsg {
    /// Copies an observation into wire tensors.
    pub fn from_observation(obs: &Observation) -> Self {
        Self::from_observation_views(obs, true)
    }

    /// The observation's RGB frames and state without depth (a viewer's frames: a third of the bytes).
    pub fn from_observation_rgb(obs: &Observation) -> Self {
        Self::from_observation_views(obs, false)
    }

    fn from_observation_views(obs: &Observation, with_depth: bool) -> Self {
        let mut images = TensorMap::new();
        let mut depth = TensorMap::new();
        for v in &obs.views {
            images.insert(v.name.clone(), Tensor::from_rgb(&v.rgb));
            if let Some(d) = v.depth.as_ref().filter(|_| with_depth) {
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
