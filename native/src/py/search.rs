//! The searches of `Bm25Index`: BM25F (pruned or exhaustive), hybrid, vector, and many
//! queries at once; arguments converted with the GIL, the search run without it.

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use super::build::not_building;
use super::convert::{allow_names, floats, type_name, VectorRows};
use super::errors::guarded;
use super::index::PyIndex;
use crate::index::intents::{Query, QueryVectors};
use crate::index::ties::Ties;
use crate::index::vectors::QueryVec;
use crate::index::Index;

/// The query vectors of one search, converted with the GIL: the whole message's, and the
/// `intent_vectors` of its parts (one per part of `split_intents`; `None` entries allowed).
struct Vectors {
    whole: Option<Vec<f32>>,
    parts: Vec<Option<Vec<f32>>>,
}

impl Vectors {
    fn new(
        vector: Option<&Bound<'_, PyAny>>,
        intent_vectors: Option<&Bound<'_, PyAny>>,
        what: &str,
    ) -> PyResult<Self> {
        let whole = match vector.filter(|v| !v.is_none()) {
            Some(v) => Some(floats(v, what)?),
            None => None,
        };
        let parts = match intent_vectors.filter(|v| !v.is_none()) {
            None => Vec::new(),
            Some(rows) => {
                if whole.is_none() {
                    return Err(PyValueError::new_err(format!(
                        "intent vectors need the query's {what} too"
                    )));
                }
                Self::parts_of(rows)?
            }
        };
        Ok(Vectors { whole, parts })
    }

    /// Intent vectors: one vector (or `None`) per part.
    fn parts_of(rows: &Bound<'_, PyAny>) -> PyResult<Vec<Option<Vec<f32>>>> {
        if rows.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(
                "intent_vectors must be a sequence of vectors, not a string",
            ));
        }
        let mut out = Vec::new();
        for (i, row) in rows.try_iter()?.enumerate() {
            let row = row?;
            out.push(if row.is_none() {
                None
            } else {
                Some(floats(&row, &format!("intent_vectors[{i}]"))?)
            });
        }
        Ok(out)
    }

    /// The `k` best tools for `query`: its requests ranked too when `this.intents`, each
    /// ranking BM25F alone or fused with its vector.
    fn search(
        &self,
        this: &PyIndex,
        index: &Index,
        query: &str,
        k: usize,
        mask: Option<&[u64]>,
    ) -> Result<Vec<(f32, u32)>, String> {
        let q = Query::new(query, this.intents);
        let rank = |tokens: &[String], ties: &Ties, v: Option<&QueryVec>, k: usize| {
            index.search_hybrid_tokens(tokens, ties, v, k, mask, &this.fusion, this.how)
        };
        let Some(whole) = &self.whole else {
            return index.search_intents(&q, k, None, rank);
        };
        let whole = index.vectors().prepare(whole)?;
        let parts = self
            .parts
            .iter()
            .map(|v| v.as_ref().map(|v| index.vectors().prepare(v)).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let vectors = QueryVectors {
            whole: &whole,
            parts: &parts,
        };
        index.search_intents(&q, k, Some(&vectors), rank)
    }
}

/// `Bm25Index.search` (documented on the method in `index.rs`).
pub(crate) fn search(
    this: &PyIndex,
    py: Python<'_>,
    query: &str,
    k: usize,
    allow: Option<&Bound<'_, PyAny>>,
    vector: Option<&Bound<'_, PyAny>>,
    intent_vectors: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(String, f32)>> {
    not_building().map_err(PyRuntimeError::new_err)?;
    let allow = allow_names(allow)?;
    let vectors = Vectors::new(vector, intent_vectors, "vector")?;
    py.detach(|| {
        guarded(|| {
            let index = this.read()?;
            let mask = allow
                .as_ref()
                .map(|a| index.allow_mask(a.iter().map(String::as_str)));
            Ok(index.named(vectors.search(this, &index, query, k, mask.as_deref())?))
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
            let q = Query::new(query, this.intents);
            let hits = index.search_intents(&q, k, None, |tokens, ties, _, k| {
                index.search_exhaustive(tokens, k, mask.as_deref(), Some(ties))
            })?;
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
    intent_vectors: Option<&Bound<'_, PyAny>>,
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
    let intent_rows: Vec<Option<Bound<'_, PyAny>>> = match intent_vectors.filter(|v| !v.is_none()) {
        None => vec![None; qs.len()],
        Some(rows) => {
            let rows: Vec<Bound<'_, PyAny>> = rows.try_iter()?.collect::<PyResult<_>>()?;
            if rows.len() != qs.len() {
                return Err(PyValueError::new_err(format!(
                    "intent_vectors has {} entries for {} queries",
                    rows.len(),
                    qs.len()
                )));
            }
            rows.into_iter().map(Some).collect()
        }
    };
    let per_query: Vec<Vectors> = match vectors.filter(|v| !v.is_none()) {
        None => {
            if intent_rows.iter().flatten().any(|r| !r.is_none()) {
                return Err(PyValueError::new_err(
                    "intent vectors need the queries' vectors too",
                ));
            }
            qs.iter()
                .map(|_| Vectors {
                    whole: None,
                    parts: Vec::new(),
                })
                .collect()
        }
        Some(v) => {
            let rows = VectorRows::new(v, qs.len())?;
            let mut out = Vec::with_capacity(qs.len());
            for (i, parts) in intent_rows.iter().enumerate() {
                let whole = rows.row(i)?.ok_or_else(|| {
                    PyValueError::new_err(format!("vectors[{i}] is None: every query needs one"))
                })?;
                let parts = match parts.as_ref().filter(|p| !p.is_none()) {
                    Some(p) => Vectors::parts_of(p)?,
                    None => Vec::new(),
                };
                out.push(Vectors {
                    whole: Some(whole),
                    parts,
                });
            }
            out
        }
    };
    py.detach(|| {
        guarded(|| {
            let index = this.read()?;
            let mask = allow
                .as_ref()
                .map(|a| index.allow_mask(a.iter().map(String::as_str)));
            let mut out = Vec::with_capacity(qs.len());
            for (q, v) in qs.iter().zip(&per_query) {
                out.push(index.named(v.search(this, &index, q, k, mask.as_deref())?));
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
