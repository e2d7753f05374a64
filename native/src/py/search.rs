//! The searches of `Bm25Index`: BM25F (pruned or exhaustive), hybrid, vector, and many
//! queries at once; arguments converted with the GIL, the search run without it.

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use super::build::not_building;
use super::convert::{allow_names, floats, type_name, VectorRows};
use super::errors::guarded;
use super::index::PyIndex;
use crate::index::analyze_query;
use crate::index::ties::Ties;
use crate::index::vectors::QueryVec;

/// `Bm25Index.search` (documented on the method in `index.rs`).
pub(crate) fn search(
    this: &PyIndex,
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
            let index = this.read()?;
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
                        &this.fusion,
                        this.how,
                    ))
                }
            })
        })
    })
}

/// `Bm25Index.search_exhaustive` (documented on the method in `index.rs`).
pub(crate) fn search_exhaustive(
    this: &PyIndex,
    py: Python<'_>,
    query: &str,
    k: usize,
    allow: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(String, f32)>> {
    not_building().map_err(PyRuntimeError::new_err)?;
    let allow = allow_names(allow)?;
    py.detach(|| {
        guarded(|| {
            let index = this.read()?;
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

/// `Bm25Index.search_many` (documented on the method in `index.rs`).
pub(crate) fn search_many(
    this: &PyIndex,
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
                    PyValueError::new_err(format!("vectors[{i}] is None: every query needs one"))
                })?);
            }
            Some(out)
        }
    };
    py.detach(|| {
        guarded(|| {
            let index = this.read()?;
            let mask = allow
                .as_ref()
                .map(|a| index.allow_mask(a.iter().map(String::as_str)));
            let mut out = Vec::with_capacity(qs.len());
            for (i, q) in qs.iter().enumerate() {
                out.push(match &vectors {
                    None => index.named(index.search_query(q, k, mask.as_deref())),
                    Some(vs) => {
                        let qv: QueryVec = index.vectors().prepare(&vs[i])?;
                        let hits =
                            index.search_hybrid(q, &qv, k, mask.as_deref(), &this.fusion, this.how);
                        index.named(hits)
                    }
                });
            }
            Ok(out)
        })
    })
}

/// `Bm25Index.search_vector` (documented on the method in `index.rs`).
pub(crate) fn search_vector(
    this: &PyIndex,
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
            let index = this.read()?;
            let q = index.vectors().prepare(&v)?;
            let mask = allow
                .as_ref()
                .map(|a| index.allow_mask(a.iter().map(String::as_str)));
            Ok(index.named(index.search_vector_with(&q, k, mask.as_deref(), this.how, exact)))
        })
    })
}
