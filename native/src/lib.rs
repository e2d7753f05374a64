//! `algenta_graph._native`: the Python binding of the BM25F tool index.
//!
//! The pure-Rust parts (`tokenize`, `project`, `index`) never touch Python. This module walks
//! Python schemas (through [`project::Json`]) into a [`index::Staged`] arena with the GIL held,
//! then tokenizes and indexes, and searches, with the GIL released; every failure (a Rust panic
//! included) becomes a `ValueError`.

pub mod index;
pub mod intents;
mod prefetch;
pub mod project;
pub mod table;
pub mod tokenize;

mod py;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::index::fusion;
use crate::project::Field;
use crate::py::convert::{as_py_float, field_dict};
use crate::py::functions::{project_tool, py_tokenize, split_intents};
use crate::py::index::PyIndex;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyIndex>()?;
    m.add_function(wrap_pyfunction!(py_tokenize, m)?)?;
    m.add_function(wrap_pyfunction!(project_tool, m)?)?;
    m.add_function(wrap_pyfunction!(split_intents, m)?)?;
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
    m.add(
        "INTENT_PART_WEIGHT",
        as_py_float(index::intents::PART_WEIGHT),
    )?;
    m.add("INTENT_MIN_TERMS", index::intents::MIN_PART_TERMS)?;
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
