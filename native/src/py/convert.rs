//! Argument conversion: numbers shown as Python floats, vectors (numbers or raw `float32`
//! bytes), vector rows and keys, allow-lists, per-field settings.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyString};

use crate::project::{self, Field};

/// An `f32` setting as the `f64` Python shows for it (`1.2`, not `1.2000000476837158`).
pub(crate) fn as_py_float(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// A vector given as a sequence of numbers, as `bytes` of native-endian `float32`s, or as any
/// object exporting a `float32` buffer (a numpy `float32` array, `array("f")`, a memoryview).
pub(crate) fn floats(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<f32>> {
    if let Some(flat) = float32s(obj, what)? {
        return Ok(flat);
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a sequence of numbers, not a string"
        )));
    }
    let mut out = Vec::new();
    for (i, x) in obj
        .try_iter()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} must be a sequence of numbers, got {}",
                type_name(obj)
            ))
        })?
        .enumerate()
    {
        let x = x?;
        if x.is_instance_of::<PyBool>() {
            return Err(PyTypeError::new_err(format!(
                "{what}[{i}] must be a number, got bool"
            )));
        }
        let v: f64 = x.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "{what}[{i}] must be a number, got {}",
                type_name(&x)
            ))
        })?;
        out.push(v as f32);
    }
    Ok(out)
}

/// The `float32` values of `bytes` / `bytearray` (native-endian) or of an object exporting a
/// `float32` buffer, copied once; `None` for anything else.
pub(crate) fn float32s(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<Vec<f32>>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return f32s_of(b.as_bytes(), what).map(Some);
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return f32s_of(&b.to_vec(), what).map(Some);
    }
    if obj.is_instance_of::<PyString>() {
        return Ok(None);
    }
    match PyBuffer::<f32>::get(obj) {
        Ok(buf) => buf.to_vec(obj.py()).map(Some),
        Err(_) => Ok(None),
    }
}

pub(crate) fn f32s_of(bytes: &[u8], what: &str) -> PyResult<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(PyValueError::new_err(format!(
            "{what}: {} bytes is not a whole number of float32 values",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The vectors argument of `add`: one row per tool, as a sequence (rows may be None) or as
/// `bytes` or a `float32` buffer (a numpy array) holding `n_tools` rows.
pub(crate) enum VectorRows<'py> {
    Flat(Vec<f32>, usize),
    Rows(Bound<'py, PyAny>),
}

impl<'py> VectorRows<'py> {
    pub(crate) fn new(obj: &Bound<'py, PyAny>, n: usize) -> PyResult<Self> {
        if let Some(flat) = float32s(obj, "vectors")? {
            if n == 0 || flat.is_empty() || !flat.len().is_multiple_of(n) {
                return Err(PyValueError::new_err(format!(
                    "vectors: {} float32 values do not make one row for each of {n} tools",
                    flat.len()
                )));
            }
            let dim = flat.len() / n;
            return Ok(VectorRows::Flat(flat, dim));
        }
        let len = obj.len().map_err(|_| {
            PyTypeError::new_err(format!(
                "vectors must be a sequence (one vector or None per tool) or bytes, got {}",
                type_name(obj)
            ))
        })?;
        if len != n {
            return Err(PyValueError::new_err(format!(
                "vectors has {len} entries for {n} tools"
            )));
        }
        Ok(VectorRows::Rows(obj.clone()))
    }

    pub(crate) fn row(&self, i: usize) -> PyResult<Option<Vec<f32>>> {
        match self {
            VectorRows::Flat(flat, dim) => Ok(Some(flat[i * dim..(i + 1) * dim].to_vec())),
            VectorRows::Rows(obj) => {
                let item = obj.get_item(i)?;
                if item.is_none() {
                    Ok(None)
                } else {
                    floats(&item, &format!("vectors[{i}]")).map(Some)
                }
            }
        }
    }
}

pub(crate) fn optional_keys(
    obj: Option<&Bound<'_, PyAny>>,
    n: usize,
) -> PyResult<Option<Vec<Option<u64>>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    let mut keys = Vec::with_capacity(n);
    for item in obj.try_iter()? {
        let item = item?;
        keys.push(if item.is_none() {
            None
        } else {
            Some(item.extract::<u64>().map_err(|_| {
                PyTypeError::new_err("vector_keys must hold integers in 0..2**64 or None")
            })?)
        });
    }
    if keys.len() != n {
        return Err(PyValueError::new_err(format!(
            "vector_keys has {} entries for {n} tools",
            keys.len()
        )));
    }
    Ok(Some(keys))
}

pub(crate) fn allow_names(allow: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<String>>> {
    let Some(allow) = allow else { return Ok(None) };
    if allow.is_none() {
        return Ok(None);
    }
    if allow.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "allow must be a collection of tool names, not a string",
        ));
    }
    let mut names = Vec::new();
    for item in allow.try_iter()? {
        let item = item?;
        names.push(item.extract::<String>().map_err(|_| {
            PyTypeError::new_err(format!(
                "allow must hold tool names, got {}",
                type_name(&item)
            ))
        })?);
    }
    Ok(Some(names))
}

/// Per-field values as a `{field: value}` dict.
pub(crate) fn field_dict(
    py: Python<'_>,
    values: [f32; project::NUM_FIELDS],
) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for f in Field::ALL {
        d.set_item(f.key(), as_py_float(values[f as usize]))?;
    }
    Ok(d)
}

/// A per-field setting given as one number (every field), a `{field: value}` dict (the
/// fields it omits keep their default) or None (the defaults).
pub(crate) fn per_field(
    value: Option<&Bound<'_, PyAny>>,
    default: [f32; project::NUM_FIELDS],
    what: &str,
) -> PyResult<[f32; project::NUM_FIELDS]> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(default);
    };
    if let Ok(d) = value.cast::<PyDict>() {
        let mut out = default;
        for (k, v) in d.iter() {
            let key: String = k
                .extract()
                .map_err(|_| PyTypeError::new_err(format!("{what} keys must be field names")))?;
            let f = Field::ALL
                .iter()
                .find(|f| f.key() == key)
                .ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "{what}: unknown field {key:?} (fields: name, description, param_names, param_text)"
                    ))
                })?;
            out[*f as usize] = v
                .extract()
                .map_err(|_| PyTypeError::new_err(format!("{what}[{key:?}] must be a number")))?;
        }
        return Ok(out);
    }
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a number or a dict"
        )));
    }
    let v: f32 = value
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a number or a dict")))?;
    Ok([v; project::NUM_FIELDS])
}
