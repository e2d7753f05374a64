//! The `Bm25Index` class: its state (the index behind a lock, the fusion's and the vector
//! search's settings), its constructor, and its methods, each a call into the module of its
//! concept (`build`, `search`, `info`).

use std::sync::{PoisonError, RwLock};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::build::{self, not_building};
use super::convert::{as_py_float, field_dict, per_field};
use super::errors::guarded;
use super::{info, search};
use crate::index::fusion::{self, Fusion};
use crate::index::vectors::Precision;
use crate::index::{self, Index, Params, VectorSearch};

/// A BM25F index over tools, keyed by tool name. Safe to share between threads: searches run
/// concurrently without the GIL; adds and removes wait for running searches.
#[pyclass(frozen, module = "algenta_graph._native", name = "Bm25Index")]
pub(crate) struct PyIndex {
    pub(crate) inner: RwLock<Index>,
    pub(crate) fusion: Fusion,
    pub(crate) how: VectorSearch,
    /// Whether a message's requests are ranked on their own too (`index/intents.rs`).
    pub(crate) intents: bool,
}

impl PyIndex {
    /// The index for reading; an error inside a progress callback of `add` (the index is
    /// write-locked by this very thread: waiting would never end).
    pub(crate) fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, Index>, String> {
        not_building()?;
        Ok(self.inner.read().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn write(&self) -> Result<std::sync::RwLockWriteGuard<'_, Index>, String> {
        not_building()?;
        Ok(self.inner.write().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn read_py(&self) -> PyResult<std::sync::RwLockReadGuard<'_, Index>> {
        self.read().map_err(PyRuntimeError::new_err)
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
        vector_precision = "int8",
        bm25_weight = fusion::DEFAULT_BM25_WEIGHT,
        cosine_floor = fusion::DEFAULT_COSINE_FLOOR,
        fusion_depth = fusion::DEFAULT_DEPTH,
        approx_from = index::vectors::DEFAULT_APPROX_FROM,
        rescore = index::vectors::DEFAULT_RESCORE,
        ann_from = index::vectors::DEFAULT_ANN_FROM,
        expansion = index::vectors::DEFAULT_EXPANSION,
        multi_intent = true,
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
        multi_intent: bool,
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
            intents: multi_intent,
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
    ///
    /// `convert(item)`, if given, is called with every item that is not a dict holding a
    /// `"name"` and returns its `(name, description, schema)` (what it raises aborts the add):
    /// a caller's own tool objects are read in the same pass as the dicts.
    #[pyo3(signature = (tools, progress = None, every = 50_000, vectors = None, vector_keys = None, convert = None))]
    #[allow(clippy::too_many_arguments)]
    fn add(
        &self,
        py: Python<'_>,
        tools: &Bound<'_, PyAny>,
        progress: Option<Py<PyAny>>,
        every: usize,
        vectors: Option<&Bound<'_, PyAny>>,
        vector_keys: Option<&Bound<'_, PyAny>>,
        convert: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let convert = convert.filter(|c| !c.is_none());
        build::add(
            self,
            py,
            tools,
            progress,
            every,
            vectors,
            vector_keys,
            convert,
        )
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

    /// The `k` best tools for `query` as `(name, score)`, best first; ties by name. With
    /// `multi_intent`, a message of several requests has each ranked too (`intent_vectors`:
    /// one vector, or None, per part of `split_intents(query)`).
    #[pyo3(signature = (query, k = 5, allow = None, vector = None, intent_vectors = None))]
    fn search(
        &self,
        py: Python<'_>,
        query: &str,
        k: usize,
        allow: Option<&Bound<'_, PyAny>>,
        vector: Option<&Bound<'_, PyAny>>,
        intent_vectors: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(String, f32)>> {
        search::search(self, py, query, k, allow, vector, intent_vectors)
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
        search::search_exhaustive(self, py, query, k, allow)
    }

    /// `search` for many queries in one call (one GIL release, one lock).
    #[pyo3(signature = (queries, k = 5, allow = None, vectors = None, intent_vectors = None))]
    fn search_many(
        &self,
        py: Python<'_>,
        queries: &Bound<'_, PyAny>,
        k: usize,
        allow: Option<&Bound<'_, PyAny>>,
        vectors: Option<&Bound<'_, PyAny>>,
        intent_vectors: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<Vec<(String, f32)>>> {
        search::search_many(self, py, queries, k, allow, vectors, intent_vectors)
    }

    /// Whether a message's requests are ranked on their own too.
    #[getter]
    fn multi_intent(&self) -> bool {
        self.intents
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
        search::search_vector(self, py, vector, k, allow, exact)
    }

    /// Sizes: tools, terms, postings, and the index's own heap bytes (an estimate).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        info::stats(self, py)
    }

    /// The fusion's constants: `bm25_weight`, `cosine_floor`, `depth`.
    #[getter]
    fn fusion<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        info::fusion(self, py)
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
