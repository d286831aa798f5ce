//! Typed access to arrow columns read from parquet, with errors that name the file and column.

use std::path::Path;

use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, FixedSizeListArray, Float32Array, Float64Array,
    Int32Array, Int64Array, LargeBinaryArray, LargeListArray, LargeStringArray, ListArray,
    RecordBatch, StringArray, StructArray,
};
use arrow_schema::DataType;

use crate::error::{DatasetError, Result};

pub(crate) fn column<'a>(batch: &'a RecordBatch, path: &Path, name: &str) -> Result<&'a ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| DatasetError::MissingColumn {
            path: path.to_owned(),
            column: name.to_owned(),
        })
}

fn type_err(path: &Path, name: &str, expected: &str, found: &DataType) -> DatasetError {
    DatasetError::ColumnType {
        path: path.to_owned(),
        column: name.to_owned(),
        expected: expected.to_owned(),
        found: found.to_string(),
    }
}

fn null_err(path: &Path, name: &str, row: usize) -> DatasetError {
    DatasetError::BadValue {
        path: path.to_owned(),
        column: name.to_owned(),
        row,
        reason: "is null".into(),
    }
}

/// An int64 column (LeRobot's `index`, `episode_index`, `frame_index`, `task_index`, ...). Nulls are errors.
pub(crate) fn i64_values(a: &ArrayRef, path: &Path, name: &str) -> Result<Vec<i64>> {
    let arr = a
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| type_err(path, name, "int64", a.data_type()))?;
    if let Some(row) = (0..arr.len()).find(|&i| arr.is_null(i)) {
        return Err(null_err(path, name, row));
    }
    Ok(arr.values().to_vec())
}

/// A float column stored as float32 (LeRobot) or float64. Nulls become NaN.
pub(crate) fn f32_values(a: &ArrayRef, path: &Path, name: &str) -> Result<Vec<f32>> {
    if let Some(arr) = a.as_any().downcast_ref::<Float32Array>() {
        return Ok((0..arr.len())
            .map(|i| {
                if arr.is_null(i) {
                    f32::NAN
                } else {
                    arr.value(i)
                }
            })
            .collect());
    }
    if let Some(arr) = a.as_any().downcast_ref::<Float64Array>() {
        return Ok((0..arr.len())
            .map(|i| {
                if arr.is_null(i) {
                    f32::NAN
                } else {
                    arr.value(i) as f32
                }
            })
            .collect());
    }
    Err(type_err(path, name, "float32", a.data_type()))
}

/// A scalar column of any numeric type, as f64 (for extra per-frame columns).
pub(crate) fn numeric_f64(a: &ArrayRef, path: &Path, name: &str) -> Result<Vec<f64>> {
    let any = a.as_any();
    let n = a.len();
    let get = |i: usize, v: f64| if a.is_null(i) { f64::NAN } else { v };
    if let Some(x) = any.downcast_ref::<Float32Array>() {
        return Ok((0..n).map(|i| get(i, x.value(i) as f64)).collect());
    }
    if let Some(x) = any.downcast_ref::<Float64Array>() {
        return Ok((0..n).map(|i| get(i, x.value(i))).collect());
    }
    if let Some(x) = any.downcast_ref::<Int64Array>() {
        return Ok((0..n).map(|i| get(i, x.value(i) as f64)).collect());
    }
    if let Some(x) = any.downcast_ref::<Int32Array>() {
        return Ok((0..n).map(|i| get(i, x.value(i) as f64)).collect());
    }
    if let Some(x) = any.downcast_ref::<BooleanArray>() {
        return Ok((0..n)
            .map(|i| get(i, if x.value(i) { 1.0 } else { 0.0 }))
            .collect());
    }
    Err(type_err(path, name, "a numeric scalar", a.data_type()))
}

/// A vector column (`observation.state`, `action`): fixed_size_list / list / large_list of float32 or float64,
/// every row of length `dim`. Returned flat, row-major.
pub(crate) fn f32_vectors(a: &ArrayRef, path: &Path, name: &str, dim: usize) -> Result<Vec<f32>> {
    let expected = "fixed_size_list<float32> or list<float32>";
    let (values, offsets): (ArrayRef, Vec<usize>) = match a.data_type() {
        DataType::FixedSizeList(_, size) => {
            let arr = a
                .as_any()
                .downcast_ref::<FixedSizeListArray>()
                .ok_or_else(|| type_err(path, name, expected, a.data_type()))?;
            let size = usize::try_from(*size).unwrap_or(0);
            let offs = (0..=arr.len()).map(|i| (i + arr.offset()) * size).collect();
            (arr.values().clone(), offs)
        }
        DataType::List(_) => {
            let arr = a
                .as_any()
                .downcast_ref::<ListArray>()
                .ok_or_else(|| type_err(path, name, expected, a.data_type()))?;
            let offs = arr
                .value_offsets()
                .iter()
                .map(|&o| usize::try_from(o).unwrap_or(0))
                .collect();
            (arr.values().clone(), offs)
        }
        DataType::LargeList(_) => {
            let arr = a
                .as_any()
                .downcast_ref::<LargeListArray>()
                .ok_or_else(|| type_err(path, name, expected, a.data_type()))?;
            let offs = arr
                .value_offsets()
                .iter()
                .map(|&o| usize::try_from(o).unwrap_or(0))
                .collect();
            (arr.values().clone(), offs)
        }
        other => return Err(type_err(path, name, expected, other)),
    };
    let flat = match values.data_type() {
        DataType::Float32 | DataType::Float64 => f32_values(&values, path, name)?,
        other => {
            return Err(type_err(
                path,
                name,
                expected,
                &DataType::List(arrow_field(other)),
            ))
        }
    };
    let mut out = Vec::with_capacity(a.len() * dim);
    for row in 0..a.len() {
        if a.is_null(row) {
            return Err(null_err(path, name, row));
        }
        let (s, e) = (offsets[row], offsets[row + 1]);
        if e - s != dim || e > flat.len() {
            return Err(DatasetError::BadValue {
                path: path.to_owned(),
                column: name.to_owned(),
                row,
                reason: format!(
                    "has {} values, info.json's shape says {dim}",
                    e.saturating_sub(s)
                ),
            });
        }
        out.extend_from_slice(&flat[s..e]);
    }
    Ok(out)
}

fn arrow_field(dt: &DataType) -> std::sync::Arc<arrow_schema::Field> {
    std::sync::Arc::new(arrow_schema::Field::new("item", dt.clone(), true))
}

/// LeRobot / HF `datasets.Image()` column: `struct<bytes: binary, path: string>`. Returns the bytes of `rows`,
/// in that order (only those are copied: a batch can hold other episodes too).
pub(crate) fn image_bytes(
    a: &ArrayRef,
    rows: &[usize],
    path: &Path,
    name: &str,
) -> Result<Vec<Vec<u8>>> {
    let expected = "struct<bytes: binary, path: string> (HF datasets Image)";
    let st = a
        .as_any()
        .downcast_ref::<StructArray>()
        .ok_or_else(|| type_err(path, name, expected, a.data_type()))?;
    let bytes = st
        .column_by_name("bytes")
        .ok_or_else(|| type_err(path, name, expected, a.data_type()))?;
    let binary = bytes.as_any().downcast_ref::<BinaryArray>();
    let large = bytes.as_any().downcast_ref::<LargeBinaryArray>();
    if binary.is_none() && large.is_none() {
        return Err(type_err(path, name, expected, a.data_type()));
    }
    let mut out = Vec::with_capacity(rows.len());
    for &row in rows {
        if st.is_null(row) || bytes.is_null(row) {
            return Err(DatasetError::BadValue {
                path: path.to_owned(),
                column: name.to_owned(),
                row,
                reason: "image has no embedded bytes (only a path): images must be embedded in the parquet".into(),
            });
        }
        match (binary, large) {
            (Some(b), _) => out.push(b.value(row).to_vec()),
            (None, Some(b)) => out.push(b.value(row).to_vec()),
            (None, None) => return Err(type_err(path, name, expected, a.data_type())),
        }
    }
    Ok(out)
}

/// A string column (utf8 or large_utf8). Nulls are errors.
pub(crate) fn strings(a: &ArrayRef, path: &Path, name: &str) -> Result<Vec<String>> {
    let n = a.len();
    let vals: Vec<Option<String>> = if let Some(s) = a.as_any().downcast_ref::<StringArray>() {
        (0..n)
            .map(|i| (!s.is_null(i)).then(|| s.value(i).to_owned()))
            .collect()
    } else if let Some(s) = a.as_any().downcast_ref::<LargeStringArray>() {
        (0..n)
            .map(|i| (!s.is_null(i)).then(|| s.value(i).to_owned()))
            .collect()
    } else {
        return Err(type_err(path, name, "string", a.data_type()));
    };
    vals.into_iter()
        .enumerate()
        .map(|(row, v)| v.ok_or_else(|| null_err(path, name, row)))
        .collect()
}

/// A list column (list / large_list): per row, `None` for a null row, else the child array slice.
pub(crate) fn list_rows(a: &ArrayRef, path: &Path, name: &str) -> Result<Vec<Option<ArrayRef>>> {
    let n = a.len();
    if let Some(l) = a.as_any().downcast_ref::<ListArray>() {
        return Ok((0..n)
            .map(|i| (!l.is_null(i)).then(|| l.value(i)))
            .collect());
    }
    if let Some(l) = a.as_any().downcast_ref::<LargeListArray>() {
        return Ok((0..n)
            .map(|i| (!l.is_null(i)).then(|| l.value(i)))
            .collect());
    }
    if let Some(l) = a.as_any().downcast_ref::<FixedSizeListArray>() {
        return Ok((0..n)
            .map(|i| (!l.is_null(i)).then(|| l.value(i)))
            .collect());
    }
    Err(type_err(path, name, "list", a.data_type()))
}

/// Integers of any width in a list row (SARM frame indices), as i64.
pub(crate) fn ints_any(a: &ArrayRef, path: &Path, name: &str) -> Result<Vec<i64>> {
    if let Some(x) = a.as_any().downcast_ref::<Int64Array>() {
        return Ok(x.iter().map(|v| v.unwrap_or(-1)).collect());
    }
    if let Some(x) = a.as_any().downcast_ref::<Int32Array>() {
        return Ok(x.iter().map(|v| v.map(i64::from).unwrap_or(-1)).collect());
    }
    // pandas writes float lists when a column once held NaN/None.
    if let Some(x) = a.as_any().downcast_ref::<Float64Array>() {
        return Ok(x
            .iter()
            .map(|v| v.map(|f| f as i64).unwrap_or(-1))
            .collect());
    }
    Err(type_err(
        path,
        name,
        "list<int64>",
        &DataType::List(arrow_field(a.data_type())),
    ))
}
