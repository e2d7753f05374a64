//! `algenta_graph._native`: the Python binding of the BM25F tool index.
//!
//! The pure-Rust parts (`tokenize`, `project`, `index`) never touch Python; this module converts
//! arguments, releases the GIL around tokenization and search, and turns every failure (a Rust
//! panic included) into a `ValueError`.

pub mod index;
pub mod project;
pub mod tokenize;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{PoisonError, RwLock};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use rayon::prelude::*;
use serde_json::{Map, Number, Value};

use crate::index::{analyze, analyze_query, AnalyzedTool, Index, Params};
use crate::project::{project, Field, MAX_DEPTH};
use crate::tokenize::Analyzer;

/// Batches at least this large are tokenized on the rayon pool.
const PARALLEL_BATCH: usize = 256;

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

/// Run `f`, turning a panic into a `ValueError` instead of letting it reach Python.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(msg)) => Err(PyValueError::new_err(msg)),
        Err(payload) => Err(PyValueError::new_err(format!(
            "internal error in the native tool index: {}",
            panic_message(payload)
        ))),
    }
}

/// An `f32` setting as the `f64` Python shows for it (`1.2`, not `1.2000000476837158`).
fn as_py_float(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// Convert a JSON-like Python value (dict, list, tuple, str, int, float, bool, None) to JSON.
fn to_json(obj: &Bound<'_, PyAny>, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("input schema nests deeper than {MAX_DEPTH} levels"));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return s
            .to_str()
            .map(|s| Value::String(s.to_owned()))
            .map_err(|e| e.to_string());
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.cast::<PyInt>().is_ok() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::Number(u.into()));
        }
        let f: f64 = obj.extract().map_err(|e: PyErr| e.to_string())?;
        return Ok(Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or(Value::Null));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Number::from_f64(f.value())
            .map(Value::Number)
            .unwrap_or(Value::Null));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let key = k
                .cast::<PyString>()
                .map_err(|_| format!("input schema keys must be strings, got {}", type_name(&k)))?;
            let key = key.to_str().map_err(|e| e.to_string())?.to_owned();
            map.insert(key, to_json(&v, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return l
            .iter()
            .map(|v| to_json(&v, depth + 1))
            .collect::<Result<_, _>>()
            .map(Value::Array);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return t
            .iter()
            .map(|v| to_json(&v, depth + 1))
            .collect::<Result<_, _>>()
            .map(Value::Array);
    }
    Err(format!(
        "input schema holds a value of unsupported type {}",
        type_name(obj)
    ))
}

/// One tool as handed over by Python, before tokenization.
struct RawTool {
    name: String,
    description: String,
    schema: Option<Value>,
}

fn check_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err(format!(
            "tool name must be a non-empty string, got {name:?}"
        ));
    }
    Ok(())
}

fn raw_tool(item: &Bound<'_, PyAny>) -> Result<RawTool, String> {
    let (name, description, schema): (Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>) =
        item.extract().map_err(|_| {
            format!(
                "each tool must be a (name, description, schema) tuple, got {}",
                type_name(item)
            )
        })?;
    let name: String = name
        .extract()
        .map_err(|_| format!("tool name must be a string, got {}", type_name(&name)))?;
    check_name(&name)?;
    let with_name = |msg: String| format!("tool '{name}': {msg}");
    let description: String = if description.is_none() {
        String::new()
    } else {
        description.extract().map_err(|_| {
            with_name(format!(
                "description must be a string, got {}",
                type_name(&description)
            ))
        })?
    };
    let schema = if schema.is_none() {
        None
    } else if let Ok(text) = schema.cast::<PyString>() {
        let text = text.to_str().map_err(|e| with_name(e.to_string()))?;
        Some(
            serde_json::from_str(text)
                .map_err(|e| with_name(format!("input schema is not valid JSON: {e}")))?,
        )
    } else {
        Some(to_json(&schema, 0).map_err(with_name)?)
    };
    Ok(RawTool {
        name,
        description,
        schema,
    })
}

fn analyze_raw(raw: &RawTool, analyzer: &mut Analyzer) -> Result<AnalyzedTool, String> {
    let projection = project(&raw.name, &raw.description, raw.schema.as_ref())
        .map_err(|e| format!("tool '{}': {e}", raw.name))?;
    Ok(analyze(&raw.name, &projection, analyzer))
}

fn analyze_all(raws: &[RawTool]) -> Result<Vec<AnalyzedTool>, String> {
    let results: Vec<Result<AnalyzedTool, String>> = if raws.len() >= PARALLEL_BATCH {
        raws.par_iter()
            .map_init(Analyzer::new, |a, raw| analyze_raw(raw, a))
            .collect()
    } else {
        let mut a = Analyzer::new();
        raws.iter().map(|raw| analyze_raw(raw, &mut a)).collect()
    };
    results.into_iter().collect()
}

fn allow_names(allow: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<String>>> {
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

/// A BM25F index over tools, keyed by tool name. Safe to share between threads: searches run
/// concurrently without the GIL; adds and removes wait for running searches.
#[pyclass(frozen, module = "algenta_graph._native", name = "Bm25Index")]
struct PyIndex {
    inner: RwLock<Index>,
}

impl PyIndex {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl PyIndex {
    #[new]
    #[pyo3(signature = (
        *,
        k1 = index::DEFAULT_K1,
        b = index::DEFAULT_B,
        name_weight = index::DEFAULT_WEIGHTS[0],
        description_weight = index::DEFAULT_WEIGHTS[1],
        param_name_weight = index::DEFAULT_WEIGHTS[2],
        param_text_weight = index::DEFAULT_WEIGHTS[3],
    ))]
    fn new(
        k1: f32,
        b: f32,
        name_weight: f32,
        description_weight: f32,
        param_name_weight: f32,
        param_text_weight: f32,
    ) -> PyResult<Self> {
        let params = Params {
            k1,
            b,
            weights: [
                name_weight,
                description_weight,
                param_name_weight,
                param_text_weight,
            ],
        };
        let index = Index::new(params).map_err(PyValueError::new_err)?;
        Ok(PyIndex {
            inner: RwLock::new(index),
        })
    }

    /// Add or replace tools given as `(name, description, schema)` tuples; `schema` is a JSON
    /// object as a dict or as JSON text, or None. All or nothing: on a bad tool nothing changes.
    fn add(&self, py: Python<'_>, tools: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut raws = Vec::new();
        for item in tools.try_iter()? {
            raws.push(raw_tool(&item?).map_err(PyValueError::new_err)?);
        }
        py.detach(|| {
            guarded(|| {
                let analyzed = analyze_all(&raws)?;
                let mut index = self.write();
                for tool in analyzed {
                    index.insert(tool);
                }
                Ok(())
            })
        })
    }

    /// Remove a tool by name; returns whether it was present.
    fn remove(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        py.detach(|| guarded(|| Ok(self.write().remove(name))))
    }

    fn __len__(&self) -> usize {
        self.read().len()
    }

    fn __contains__(&self, name: &Bound<'_, PyAny>) -> bool {
        match name.extract::<&str>() {
            Ok(n) => self.read().contains(n),
            Err(_) => false,
        }
    }

    /// Tool names (in internal slot order).
    fn names(&self) -> Vec<String> {
        self.read().names()
    }

    /// The `k` best tools for `query` as `(name, score)`, best first; ties by name.
    #[pyo3(signature = (query, k = 5, allow = None))]
    fn search(
        &self,
        py: Python<'_>,
        query: &str,
        k: usize,
        allow: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(String, f32)>> {
        let allow = allow_names(allow)?;
        py.detach(|| {
            guarded(|| {
                let tokens = analyze_query(query);
                let index = self.read();
                let mask = allow
                    .as_ref()
                    .map(|a| index.allow_mask(a.iter().map(String::as_str)));
                Ok(index.search_tokens(&tokens, k, mask.as_deref()))
            })
        })
    }

    /// `search` for many queries in one call (one GIL release, one lock).
    #[pyo3(signature = (queries, k = 5, allow = None))]
    fn search_many(
        &self,
        py: Python<'_>,
        queries: &Bound<'_, PyAny>,
        k: usize,
        allow: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<Vec<(String, f32)>>> {
        if queries.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(
                "queries must be a sequence of strings, not a string",
            ));
        }
        let mut qs: Vec<String> = Vec::new();
        for q in queries.try_iter()? {
            let q = q?;
            qs.push(q.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "each query must be a string, got {}",
                    type_name(&q)
                ))
            })?);
        }
        let allow = allow_names(allow)?;
        py.detach(|| {
            guarded(|| {
                let index = self.read();
                let mask = allow
                    .as_ref()
                    .map(|a| index.allow_mask(a.iter().map(String::as_str)));
                Ok(qs
                    .iter()
                    .map(|q| index.search_tokens(&analyze_query(q), k, mask.as_deref()))
                    .collect())
            })
        })
    }

    /// Sizes: tools, terms, postings, and the index's own heap bytes (an estimate).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let index = self.read();
        let d = PyDict::new(py);
        d.set_item("tools", index.len())?;
        d.set_item("terms", index.num_terms())?;
        d.set_item("postings", index.num_postings())?;
        d.set_item("heap_bytes", index.heap_bytes())?;
        Ok(d)
    }

    #[getter]
    fn k1(&self) -> f64 {
        as_py_float(self.read().params().k1)
    }

    #[getter]
    fn b(&self) -> f64 {
        as_py_float(self.read().params().b)
    }

    /// Field weights as a dict: name, description, param_names, param_text.
    #[getter]
    fn weights<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let params = self.read().params();
        let d = PyDict::new(py);
        for f in Field::ALL {
            d.set_item(f.key(), as_py_float(params.weights[f as usize]))?;
        }
        Ok(d)
    }
}

/// The index's tokens for `text` (the recipe in native/README.md).
#[pyfunction(name = "tokenize")]
fn py_tokenize(py: Python<'_>, text: &str) -> PyResult<Vec<String>> {
    py.detach(|| guarded(|| Ok(analyze_query(text))))
}

/// The text the index takes from a tool, per field (before tokenization).
#[pyfunction]
#[pyo3(signature = (name, description, schema = None))]
fn project_tool<'py>(
    py: Python<'py>,
    name: &Bound<'py, PyAny>,
    description: &Bound<'py, PyAny>,
    schema: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let none = py.None().into_bound(py);
    let item = PyTuple::new(py, [name, description, schema.unwrap_or(&none)])?;
    let raw = raw_tool(item.as_any()).map_err(PyValueError::new_err)?;
    let projection = guarded(|| {
        project(&raw.name, &raw.description, raw.schema.as_ref())
            .map_err(|e| format!("tool '{}': {e}", raw.name))
    })?;
    let d = PyDict::new(py);
    for f in Field::ALL {
        d.set_item(f.key(), &projection.fields[f as usize])?;
    }
    Ok(d)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyIndex>()?;
    m.add_function(wrap_pyfunction!(py_tokenize, m)?)?;
    m.add_function(wrap_pyfunction!(project_tool, m)?)?;
    m.add("DEFAULT_K1", as_py_float(index::DEFAULT_K1))?;
    m.add("DEFAULT_B", as_py_float(index::DEFAULT_B))?;
    let fields: Vec<&str> = Field::ALL.iter().map(|f| f.key()).collect();
    m.add("FIELDS", PyTuple::new(m.py(), fields)?)?;
    let weights = PyDict::new(m.py());
    for f in Field::ALL {
        weights.set_item(f.key(), as_py_float(index::DEFAULT_WEIGHTS[f as usize]))?;
    }
    m.add("DEFAULT_WEIGHTS", weights)?;
    Ok(())
}
