//! `algenta_graph._native`: the Python binding of the BM25F tool index.
//!
//! The pure-Rust parts (`tokenize`, `project`, `index`) never touch Python. This module walks
//! Python schemas (through [`project::Json`]) into a [`index::Staged`] arena with the GIL held,
//! then tokenizes and indexes, and searches, with the GIL released; every failure (a Rust panic
//! included) becomes a `ValueError`.

pub mod index;
pub mod project;
pub mod table;
pub mod tokenize;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, PoisonError, RwLock};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};
use serde_json::Value;

use crate::index::fusion::{self, Fusion};
use crate::index::ties::Ties;
use crate::index::vectors::{Precision, QueryVec};
use crate::index::{analyze_query, Index, Params, Pass1, Staged, VectorSearch};
use crate::project::{project_schema, Field, Json, JsonKind, ProjectError};

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

/// Python values walked in place: dict, list, tuple, str, int, float, bool, None.
impl<'py> Json for Bound<'py, PyAny> {
    fn kind(&self) -> JsonKind {
        if self.is_none() {
            JsonKind::Null
        } else if self.is_instance_of::<PyDict>() {
            JsonKind::Object
        } else if self.is_instance_of::<PyString>() {
            JsonKind::String
        } else if self.is_instance_of::<PyBool>() {
            JsonKind::Bool
        } else if self.is_instance_of::<PyInt>() || self.is_instance_of::<PyFloat>() {
            JsonKind::Number
        } else if self.is_instance_of::<PyList>() || self.is_instance_of::<PyTuple>() {
            JsonKind::Array
        } else {
            JsonKind::Other(type_name(self))
        }
    }

    fn for_each_entry(
        &self,
        f: &mut dyn FnMut(&str, Self) -> Result<(), ProjectError>,
    ) -> Result<(), ProjectError> {
        if let Ok(d) = self.cast::<PyDict>() {
            for (k, v) in d.iter() {
                let key = k
                    .cast::<PyString>()
                    .map_err(|_| ProjectError::NonStringKey(type_name(&k)))?;
                let key = key
                    .to_str()
                    .map_err(|_| ProjectError::Unsupported("str with lone surrogates".into()))?;
                f(key, v)?;
            }
        }
        Ok(())
    }

    fn for_each_item(
        &self,
        f: &mut dyn FnMut(Self) -> Result<(), ProjectError>,
    ) -> Result<(), ProjectError> {
        if let Ok(l) = self.cast::<PyList>() {
            for v in l.iter() {
                f(v)?;
            }
        } else if let Ok(t) = self.cast::<PyTuple>() {
            for v in t.iter() {
                f(v)?;
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<Self> {
        self.cast::<PyDict>().ok()?.get_item(key).ok().flatten()
    }

    fn at(&self, i: usize) -> Option<Self> {
        if let Ok(l) = self.cast::<PyList>() {
            l.get_item(i).ok()
        } else {
            self.cast::<PyTuple>().ok()?.get_item(i).ok()
        }
    }

    fn with_text(&self, f: &mut dyn FnMut(&str)) -> Result<(), ProjectError> {
        if let Ok(s) = self.cast::<PyString>() {
            let s = s
                .to_str()
                .map_err(|_| ProjectError::Unsupported("str with lone surrogates".into()))?;
            f(s);
        } else if self.is_instance_of::<PyBool>() {
            f(if self.is_truthy().unwrap_or(false) {
                "true"
            } else {
                "false"
            });
        } else if self.is_instance_of::<PyInt>() || self.is_instance_of::<PyFloat>() {
            if let Ok(text) = self.str() {
                f(&text.to_string_lossy());
            }
        }
        Ok(())
    }
}

/// Project a Python schema: None, JSON text, or a JSON-like value.
fn project_py_schema(
    schema: Option<&Bound<'_, PyAny>>,
    sink: &mut dyn FnMut(Field, &str),
) -> Result<(), String> {
    let Some(schema) = schema.filter(|s| !s.is_none()) else {
        return Ok(());
    };
    if let Ok(text) = schema.cast::<PyString>() {
        let text = text.to_str().map_err(|e| e.to_string())?;
        let value: Value = serde_json::from_str(text)
            .map_err(|e| format!("input schema is not valid JSON: {e}"))?;
        return project_schema(Some(&&value), sink).map_err(|e| e.to_string());
    }
    project_schema(Some(schema), sink).map_err(|e| e.to_string())
}

fn check_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err(format!(
            "tool name must be a non-empty string, got {name:?}"
        ));
    }
    Ok(())
}

/// The name, description and schema objects of a `(name, description, schema)` tuple or of a
/// `{"name", "description", "input_schema" | "inputSchema" | "parameters"}` dict.
#[allow(clippy::type_complexity)]
fn tool_parts<'py>(
    item: &Bound<'py, PyAny>,
) -> Result<
    (
        Bound<'py, PyAny>,
        Option<Bound<'py, PyAny>>,
        Option<Bound<'py, PyAny>>,
    ),
    String,
> {
    let py = item.py();
    if let Ok(d) = item.cast::<PyDict>() {
        let get = |key: &Bound<'py, PyString>| d.get_item(key).ok().flatten();
        let name = get(intern!(py, "name"))
            .ok_or_else(|| "tool dict needs a string 'name', got a dict without one".to_owned())?;
        let description = get(intern!(py, "description"));
        let schema = [
            intern!(py, "input_schema"),
            intern!(py, "inputSchema"),
            intern!(py, "parameters"),
            intern!(py, "args_schema"),
        ]
        .into_iter()
        .find_map(get);
        return Ok((name, description, schema));
    }
    match item.cast::<PyTuple>() {
        Ok(t) if t.len() == 3 => Ok((
            t.get_item(0).map_err(|e| e.to_string())?,
            t.get_item(1).ok(),
            t.get_item(2).ok(),
        )),
        _ => Err(format!(
            "each tool must be a (name, description, schema) tuple or a dict, got {}",
            type_name(item)
        )),
    }
}

/// Validate one tool and append its texts to `staged`; the error names the tool.
fn stage_tool(item: &Bound<'_, PyAny>, staged: &mut Staged) -> Result<(), String> {
    let (name, description, schema) = tool_parts(item)?;
    let name = name
        .cast::<PyString>()
        .map_err(|_| format!("tool name must be a string, got {}", type_name(&name)))?;
    let name = name.to_str().map_err(|e| e.to_string())?;
    check_name(name)?;
    let with_name = |msg: String| format!("tool '{name}': {msg}");
    staged.begin(name);
    if let Some(d) = description.filter(|d| !d.is_none()) {
        let d = d.cast::<PyString>().map_err(|_| {
            with_name(format!(
                "description must be a string, got {}",
                type_name(&d)
            ))
        })?;
        let d = d.to_str().map_err(|e| with_name(e.to_string()))?;
        if !d.is_empty() {
            staged.text(Field::Description, d);
        }
    }
    project_py_schema(schema.as_ref(), &mut |f, t| staged.text(f, t)).map_err(with_name)
}

/// A vector given as a sequence of numbers or as `bytes` of native-endian `float32`s.
fn floats(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<f32>> {
    if let Some(bytes) = raw_bytes(obj) {
        return f32s_of(&bytes, what);
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

fn raw_bytes(obj: &Bound<'_, PyAny>) -> Option<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Some(b.as_bytes().to_vec());
    }
    obj.cast::<PyByteArray>().ok().map(|b| b.to_vec())
}

fn f32s_of(bytes: &[u8], what: &str) -> PyResult<Vec<f32>> {
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
/// `bytes` holding `n_tools` rows of float32.
enum VectorRows<'py> {
    Flat(Vec<f32>, usize),
    Rows(Bound<'py, PyAny>),
}

impl<'py> VectorRows<'py> {
    fn new(obj: &Bound<'py, PyAny>, n: usize) -> PyResult<Self> {
        if let Some(bytes) = raw_bytes(obj) {
            let flat = f32s_of(&bytes, "vectors")?;
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

    fn row(&self, i: usize) -> PyResult<Option<Vec<f32>>> {
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

fn optional_keys(obj: Option<&Bound<'_, PyAny>>, n: usize) -> PyResult<Option<Vec<Option<u64>>>> {
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

/// The name of a staged item, for messages.
fn staged_name(item: &Bound<'_, PyAny>) -> String {
    tool_parts(item)
        .ok()
        .and_then(|(n, _, _)| n.extract::<String>().ok())
        .unwrap_or_default()
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
    fusion: Fusion,
    how: VectorSearch,
}

impl PyIndex {
    /// The index for reading; an error inside a progress callback of `add` (the index is
    /// write-locked by this very thread: waiting would never end).
    fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, Index>, String> {
        not_building()?;
        Ok(self.inner.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn write(&self) -> Result<std::sync::RwLockWriteGuard<'_, Index>, String> {
        not_building()?;
        Ok(self.inner.write().unwrap_or_else(PoisonError::into_inner))
    }

    fn read_py(&self) -> PyResult<std::sync::RwLockReadGuard<'_, Index>> {
        self.read().map_err(PyRuntimeError::new_err)
    }
}

thread_local! {
    /// Set while this thread builds an index (and may call a progress callback).
    static BUILDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn not_building() -> Result<(), String> {
    if BUILDING.with(|b| b.get()) {
        return Err("the tool index is being built: a progress callback must not use it".into());
    }
    Ok(())
}

/// Give the allocator's free memory back to the system (glibc keeps freed blocks of the size
/// of a chunk in its arenas, where they would count in the process's RSS after a large add).
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: glibc's malloc_trim only returns free pages to the system.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Tools per chunk of an add; an add of more tokenizes on a worker thread while it projects.
const PIPELINE_CHUNK: usize = 16_384;
/// Chunks projected ahead of the tokenizing worker at most.
const PIPELINE_DEPTH: usize = 4;

/// The tokenizing worker of an add: pass 1 over every chunk it is sent, in order, sending back
/// the count of tools tokenized every `every` tools; returns the chunks and pass 1, or what
/// a panic said.
fn tokenize_chunks(
    rx: mpsc::Receiver<Staged>,
    every: usize,
    done: mpsc::Sender<usize>,
) -> Result<(Vec<Staged>, Pass1), String> {
    catch_unwind(AssertUnwindSafe(|| {
        let mut pass1 = Pass1::new();
        let mut chunks = Vec::new();
        for staged in rx {
            pass1.tokenize(&staged, every, &mut |d| {
                let _ = done.send(d);
            });
            chunks.push(staged);
        }
        (chunks, pass1)
    }))
    .map_err(|p| {
        format!(
            "internal error in the native tool index: {}",
            panic_message(p)
        )
    })
}

/// Calls a Python `progress(phase, done, total)` from the build (re-taking the GIL); the
/// first exception it raises stops further calls and is raised once the add is complete.
struct Reporter<'a> {
    callback: Option<&'a Py<PyAny>>,
    total: usize,
    error: Option<PyErr>,
}

impl Reporter<'_> {
    fn report(&mut self, phase: &str, done: usize) {
        let Some(callback) = self.callback else {
            return;
        };
        if self.error.is_some() {
            return;
        }
        Python::attach(|py| {
            if let Err(e) = callback.call1(py, (phase, done, self.total)) {
                self.error = Some(e);
            }
        });
    }
}

#[pymethods]
impl PyIndex {
    #[new]
    #[pyo3(signature = (
        *,
        k1 = index::DEFAULT_K1,
        b = None,
        length_exponent = None,
        name_weight = index::DEFAULT_WEIGHTS[0],
        description_weight = index::DEFAULT_WEIGHTS[1],
        param_name_weight = index::DEFAULT_WEIGHTS[2],
        param_text_weight = index::DEFAULT_WEIGHTS[3],
        vector_precision = "f32",
        bm25_weight = fusion::DEFAULT_BM25_WEIGHT,
        cosine_floor = fusion::DEFAULT_COSINE_FLOOR,
        fusion_depth = fusion::DEFAULT_DEPTH,
        approx_from = index::vectors::DEFAULT_APPROX_FROM,
        rescore = index::vectors::DEFAULT_RESCORE,
        ann_from = index::vectors::DEFAULT_ANN_FROM,
        expansion = index::vectors::DEFAULT_EXPANSION,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        k1: f32,
        b: Option<&Bound<'_, PyAny>>,
        length_exponent: Option<&Bound<'_, PyAny>>,
        name_weight: f32,
        description_weight: f32,
        param_name_weight: f32,
        param_text_weight: f32,
        vector_precision: &str,
        bm25_weight: f32,
        cosine_floor: f32,
        fusion_depth: usize,
        approx_from: usize,
        rescore: usize,
        ann_from: usize,
        expansion: usize,
    ) -> PyResult<Self> {
        if rescore == 0 {
            return Err(PyValueError::new_err("rescore must be >= 1"));
        }
        if expansion == 0 {
            return Err(PyValueError::new_err("expansion must be >= 1"));
        }
        let fusion = Fusion {
            bm25_weight,
            cosine_floor,
            depth: fusion_depth,
        };
        fusion.validate().map_err(PyValueError::new_err)?;
        let params = Params {
            k1,
            b: per_field(b, index::DEFAULT_B, "b")?,
            length_exponent: per_field(
                length_exponent,
                index::DEFAULT_LENGTH_EXPONENT,
                "length_exponent",
            )?,
            weights: [
                name_weight,
                description_weight,
                param_name_weight,
                param_text_weight,
            ],
        };
        let precision = Precision::parse(vector_precision).map_err(PyValueError::new_err)?;
        let mut index = Index::with_precision(params, precision).map_err(PyValueError::new_err)?;
        index.set_ann_from(ann_from);
        Ok(PyIndex {
            inner: RwLock::new(index),
            fusion,
            how: VectorSearch {
                approx_from,
                rescore,
                expansion,
            },
        })
    }

    /// Add or replace tools given as `(name, description, schema)` tuples; `schema` is a JSON
    /// object as a dict or as JSON text, or None. All or nothing: on a bad tool nothing changes.
    ///
    /// `progress(phase, done, total)`, if given, is called every `every` tools and at the end
    /// of each phase: `"project"` (validating and projecting, with the GIL) and `"tokenize"`
    /// (on a worker thread while the projection goes on: the two phases' calls interleave),
    /// then `"index"` (the index is locked: the callback must not use it). An exception the
    /// callback raises before `"index"` aborts the add (nothing changed); one raised during
    /// `"index"` is raised after the add.
    #[pyo3(signature = (tools, progress = None, every = 50_000, vectors = None, vector_keys = None))]
    fn add(
        &self,
        py: Python<'_>,
        tools: &Bound<'_, PyAny>,
        progress: Option<Py<PyAny>>,
        every: usize,
        vectors: Option<&Bound<'_, PyAny>>,
        vector_keys: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        not_building().map_err(PyRuntimeError::new_err)?;
        let every = every.max(1);
        let vectors = vectors.filter(|v| !v.is_none());
        let n_tools = if progress.is_some() || vectors.is_some() || vector_keys.is_some() {
            tools.len().unwrap_or(0)
        } else {
            0
        };
        let total = if progress.is_some() { n_tools } else { 0 };
        let rows = vectors.map(|v| VectorRows::new(v, n_tools)).transpose()?;
        let keys = optional_keys(vector_keys, n_tools)?;
        let report = |phase: &str, done: usize| -> PyResult<()> {
            match &progress {
                Some(callback) => callback.call1(py, (phase, done, total)).map(|_| ()),
                None => Ok(()),
            }
        };
        // Pass 1 (tokenizing) needs nothing of the index: past the first chunk it runs on a
        // worker thread, chunk by chunk, while this thread (holding the GIL) projects the next
        // tools. It reports back how many tools it has tokenized.
        let (chunks, pass1) = std::thread::scope(|scope| -> PyResult<(Vec<Staged>, Pass1)> {
            let (done_tx, done_rx) = mpsc::channel::<usize>();
            let mut feed: Option<mpsc::SyncSender<Staged>> = None;
            let mut worker = None;
            let mut staged = Staged::default();
            let mut projected = 0usize;
            for (i, item) in tools.try_iter()?.enumerate() {
                let item = item?;
                guarded(|| stage_tool(&item, &mut staged))?;
                if rows.is_some() || keys.is_some() {
                    let row = match &rows {
                        Some(r) => r.row(i)?,
                        None => None,
                    };
                    let key = keys.as_ref().and_then(|k| k[i]);
                    let name = staged_name(&item);
                    guarded(|| {
                        staged
                            .vector(row.as_deref(), key)
                            .map_err(|e| format!("tool '{name}': {e}"))
                    })?;
                }
                projected += 1;
                if staged.len() == PIPELINE_CHUNK {
                    let next = staged.next_chunk();
                    let full = std::mem::replace(&mut staged, next);
                    let tx = feed.get_or_insert_with(|| {
                        let (tx, rx) = mpsc::sync_channel::<Staged>(PIPELINE_DEPTH);
                        let done_tx = done_tx.clone();
                        worker = Some(scope.spawn(move || tokenize_chunks(rx, every, done_tx)));
                        tx
                    });
                    // Ahead of the worker by PIPELINE_DEPTH chunks: wait for it without the
                    // GIL. Fails only if the worker is gone (it panicked): its join says why.
                    let sent = match tx.try_send(full) {
                        Ok(()) => true,
                        Err(mpsc::TrySendError::Full(full)) => py.detach(|| tx.send(full).is_ok()),
                        Err(mpsc::TrySendError::Disconnected(_)) => false,
                    };
                    if !sent {
                        break;
                    }
                }
                if progress.is_some() {
                    if projected.is_multiple_of(every) {
                        report("project", projected)?;
                    }
                    for done in done_rx.try_iter() {
                        report("tokenize", done)?;
                    }
                }
            }
            if !projected.is_multiple_of(every) || projected == 0 {
                report("project", projected)?;
            }
            drop(done_tx);
            let Some(worker) = worker else {
                // A small add: tokenized here, in one go, with the GIL released.
                let mut pass1 = Pass1::new();
                let mut done = Vec::new();
                py.detach(|| {
                    guarded(|| {
                        catch_unwind(AssertUnwindSafe(|| {
                            pass1.tokenize(&staged, every, &mut |d| done.push(d))
                        }))
                        .map_err(|p| format!("internal error: {}", panic_message(p)))
                    })
                })?;
                if progress.is_some() {
                    for d in done {
                        report("tokenize", d)?;
                    }
                }
                return Ok((vec![staged], pass1));
            };
            if let Some(tx) = feed.take() {
                if !staged.is_empty() {
                    let _ = tx.send(staged);
                }
            }
            // Wait for the worker without the GIL, reporting what it has done as it goes.
            let mut done_rx = done_rx;
            loop {
                let rx = &mut done_rx; // `&mut` is `Send` where `&` is not
                match py.detach(move || rx.recv()) {
                    Ok(done) => report("tokenize", done)?,
                    Err(_) => break, // the worker is done
                }
            }
            let joined = py.detach(|| worker.join());
            joined
                .unwrap_or_else(|p| Err(panic_message(p)))
                .map_err(PyValueError::new_err)
        })?;
        if progress.is_some() && !pass1.len().is_multiple_of(every) {
            report("tokenize", pass1.len())?;
        }
        let pipelined = chunks.len() > 1;
        let mut reporter = Reporter {
            callback: progress.as_ref(),
            total,
            error: None,
        };
        py.detach(|| {
            guarded(|| {
                let mut index = self.write()?;
                for staged in &chunks {
                    index.check_staged(staged)?;
                }
                let chunks: Vec<&Staged> = chunks.iter().collect();
                BUILDING.with(|b| b.set(true));
                let result = catch_unwind(AssertUnwindSafe(|| {
                    index.insert_pass1(&chunks, pass1, every, &mut |done| {
                        reporter.report("index", done)
                    })
                }));
                BUILDING.with(|b| b.set(false));
                result.map_err(|p| format!("internal error: {}", panic_message(p)))
            })?;
            if pipelined {
                drop(chunks);
                release_free_memory();
            }
            Ok::<(), PyErr>(())
        })?;
        reporter.error.map_or(Ok(()), Err)
    }

    /// Remove a tool by name; returns whether it was present.
    fn remove(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        not_building().map_err(PyRuntimeError::new_err)?;
        py.detach(|| guarded(|| Ok(self.write()?.remove(name))))
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.read_py()?.len())
    }

    fn __contains__(&self, name: &Bound<'_, PyAny>) -> bool {
        match name.extract::<&str>() {
            Ok(n) => self.read_py().is_ok_and(|ix| ix.contains(n)),
            Err(_) => false,
        }
    }

    /// Tool names (in internal slot order).
    fn names(&self) -> PyResult<Vec<String>> {
        self.read_py().map(|ix| ix.names())
    }

    /// The `k` best tools for `query` as `(name, score)`, best first; ties by name.
    #[pyo3(signature = (query, k = 5, allow = None, vector = None))]
    fn search(
        &self,
        py: Python<'_>,
        query: &str,
        k: usize,
        allow: Option<&Bound<'_, PyAny>>,
        vector: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(String, f32)>> {
        not_building().map_err(PyRuntimeError::new_err)?;
        let allow = allow_names(allow)?;
        let vector = match vector.filter(|v| !v.is_none()) {
            Some(v) => Some(floats(v, "vector")?),
            None => None,
        };
        py.detach(|| {
            guarded(|| {
                let index = self.read()?;
                let mask = allow
                    .as_ref()
                    .map(|a| index.allow_mask(a.iter().map(String::as_str)));
                Ok(match &vector {
                    None => index.named(index.search_query(query, k, mask.as_deref())),
                    Some(v) => {
                        let q = index.vectors().prepare(v)?;
                        index.named(index.search_hybrid(
                            query,
                            &q,
                            k,
                            mask.as_deref(),
                            &self.fusion,
                            self.how,
                        ))
                    }
                })
            })
        })
    }

    /// BM25F top `k` for `query` with every posting of every query term scored, no pruning:
    /// what `search` must return without a vector, computed the slow way (for tests and
    /// benchmarks of the pruning).
    #[pyo3(signature = (query, k = 5, allow = None))]
    fn search_exhaustive(
        &self,
        py: Python<'_>,
        query: &str,
        k: usize,
        allow: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(String, f32)>> {
        not_building().map_err(PyRuntimeError::new_err)?;
        let allow = allow_names(allow)?;
        py.detach(|| {
            guarded(|| {
                let index = self.read()?;
                let mask = allow
                    .as_ref()
                    .map(|a| index.allow_mask(a.iter().map(String::as_str)));
                let ties = Ties::new(query);
                let hits =
                    index.search_exhaustive(&analyze_query(query), k, mask.as_deref(), Some(&ties));
                Ok(index.named(hits))
            })
        })
    }

    /// `search` for many queries in one call (one GIL release, one lock).
    #[pyo3(signature = (queries, k = 5, allow = None, vectors = None))]
    fn search_many(
        &self,
        py: Python<'_>,
        queries: &Bound<'_, PyAny>,
        k: usize,
        allow: Option<&Bound<'_, PyAny>>,
        vectors: Option<&Bound<'_, PyAny>>,
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
        not_building().map_err(PyRuntimeError::new_err)?;
        let allow = allow_names(allow)?;
        let vectors = match vectors.filter(|v| !v.is_none()) {
            None => None,
            Some(v) => {
                let rows = VectorRows::new(v, qs.len())?;
                let mut out = Vec::with_capacity(qs.len());
                for i in 0..qs.len() {
                    out.push(rows.row(i)?.ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "vectors[{i}] is None: every query needs one"
                        ))
                    })?);
                }
                Some(out)
            }
        };
        py.detach(|| {
            guarded(|| {
                let index = self.read()?;
                let mask = allow
                    .as_ref()
                    .map(|a| index.allow_mask(a.iter().map(String::as_str)));
                let mut out = Vec::with_capacity(qs.len());
                for (i, q) in qs.iter().enumerate() {
                    out.push(match &vectors {
                        None => index.named(index.search_query(q, k, mask.as_deref())),
                        Some(vs) => {
                            let qv: QueryVec = index.vectors().prepare(&vs[i])?;
                            let hits = index.search_hybrid(
                                q,
                                &qv,
                                k,
                                mask.as_deref(),
                                &self.fusion,
                                self.how,
                            );
                            index.named(hits)
                        }
                    });
                }
                Ok(out)
            })
        })
    }

    /// The keys given with the stored vectors of `names` (None: no vector).
    fn vector_keys(&self, names: Vec<String>) -> PyResult<Vec<Option<u64>>> {
        let index = self.read_py()?;
        Ok(names.iter().map(|n| index.vector_key(n)).collect())
    }

    /// The `k` tools whose vectors are nearest `vector` (cosine), best first; ties by name.
    #[pyo3(signature = (vector, k = 5, allow = None, exact = false))]
    fn search_vector(
        &self,
        py: Python<'_>,
        vector: &Bound<'_, PyAny>,
        k: usize,
        allow: Option<&Bound<'_, PyAny>>,
        exact: bool,
    ) -> PyResult<Vec<(String, f32)>> {
        not_building().map_err(PyRuntimeError::new_err)?;
        let v = floats(vector, "vector")?;
        let allow = allow_names(allow)?;
        py.detach(|| {
            guarded(|| {
                let index = self.read()?;
                let q = index.vectors().prepare(&v)?;
                let mask = allow
                    .as_ref()
                    .map(|a| index.allow_mask(a.iter().map(String::as_str)));
                Ok(index.named(index.search_vector_with(&q, k, mask.as_deref(), self.how, exact)))
            })
        })
    }

    /// Sizes: tools, terms, postings, and the index's own heap bytes (an estimate).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let index = self.read_py()?;
        let d = PyDict::new(py);
        d.set_item("tools", index.len())?;
        d.set_item("terms", index.num_terms())?;
        d.set_item("postings", index.num_postings())?;
        d.set_item("heap_bytes", index.heap_bytes())?;
        d.set_item("vectors", index.vectors().len())?;
        d.set_item("vector_dim", index.vectors().dim())?;
        Ok(d)
    }

    /// The fusion's constants: `bm25_weight`, `cosine_floor`, `depth`.
    #[getter]
    fn fusion<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("bm25_weight", as_py_float(self.fusion.bm25_weight))?;
        d.set_item("cosine_floor", as_py_float(self.fusion.cosine_floor))?;
        d.set_item("depth", self.fusion.depth)?;
        d.set_item("approx_from", self.how.approx_from)?;
        d.set_item("rescore", self.how.rescore)?;
        d.set_item("ann_from", self.read_py()?.vectors().ann_from())?;
        d.set_item("expansion", self.how.expansion)?;
        Ok(d)
    }

    /// How vectors are stored: `"f32"` or `"int8"`.
    #[getter]
    fn vector_precision(&self) -> PyResult<&'static str> {
        Ok(self.read_py()?.vectors().precision().key())
    }

    #[getter]
    fn k1(&self) -> PyResult<f64> {
        self.read_py().map(|ix| as_py_float(ix.params().k1))
    }

    /// Length normalisation per field, as a dict.
    #[getter]
    fn b<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        field_dict(py, self.read_py()?.params().b)
    }

    /// Exponent of the relative length per field, as a dict.
    #[getter]
    fn length_exponent<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        field_dict(py, self.read_py()?.params().length_exponent)
    }

    /// Field weights as a dict: name, description, param_names, param_text.
    #[getter]
    fn weights<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        field_dict(py, self.read_py()?.params().weights)
    }
}

/// Per-field values as a `{field: value}` dict.
fn field_dict(py: Python<'_>, values: [f32; project::NUM_FIELDS]) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for f in Field::ALL {
        d.set_item(f.key(), as_py_float(values[f as usize]))?;
    }
    Ok(d)
}

/// A per-field setting given as one number (every field), a `{field: value}` dict (the
/// fields it omits keep their default) or None (the defaults).
fn per_field(
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
    let mut staged = Staged::default();
    guarded(|| stage_tool(item.as_any(), &mut staged))?;
    let mut fields: [Vec<&str>; project::NUM_FIELDS] = Default::default();
    for (field, text) in staged.texts() {
        fields[field as usize].push(text);
    }
    let d = PyDict::new(py);
    for f in Field::ALL {
        d.set_item(f.key(), &fields[f as usize])?;
    }
    Ok(d)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyIndex>()?;
    m.add_function(wrap_pyfunction!(py_tokenize, m)?)?;
    m.add_function(wrap_pyfunction!(project_tool, m)?)?;
    m.add("DEFAULT_K1", as_py_float(index::DEFAULT_K1))?;
    m.add(
        "DEFAULT_BM25_WEIGHT",
        as_py_float(fusion::DEFAULT_BM25_WEIGHT),
    )?;
    m.add(
        "DEFAULT_COSINE_FLOOR",
        as_py_float(fusion::DEFAULT_COSINE_FLOOR),
    )?;
    m.add("DEFAULT_FUSION_DEPTH", fusion::DEFAULT_DEPTH)?;
    m.add("DEFAULT_APPROX_FROM", index::vectors::DEFAULT_APPROX_FROM)?;
    m.add("DEFAULT_RESCORE", index::vectors::DEFAULT_RESCORE)?;
    m.add("DEFAULT_ANN_FROM", index::vectors::DEFAULT_ANN_FROM)?;
    m.add("DEFAULT_EXPANSION", index::vectors::DEFAULT_EXPANSION)?;
    m.add("DEFAULT_B", field_dict(m.py(), index::DEFAULT_B)?)?;
    m.add(
        "DEFAULT_LENGTH_EXPONENT",
        field_dict(m.py(), index::DEFAULT_LENGTH_EXPONENT)?,
    )?;
    let fields: Vec<&str> = Field::ALL.iter().map(|f| f.key()).collect();
    m.add("FIELDS", PyTuple::new(m.py(), fields)?)?;
    m.add(
        "DEFAULT_WEIGHTS",
        field_dict(m.py(), index::DEFAULT_WEIGHTS)?,
    )?;
    Ok(())
}
