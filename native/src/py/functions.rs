//! The module's functions: `tokenize` and `project_tool`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::errors::guarded;
use super::tools::stage_tool;
use crate::index::{analyze_query, Staged};
use crate::project::{self, Field};

/// The index's tokens for `text` (the recipe in native/README.md).
#[pyfunction(name = "tokenize")]
pub(crate) fn py_tokenize(py: Python<'_>, text: &str) -> PyResult<Vec<String>> {
    py.detach(|| guarded(|| Ok(analyze_query(text))))
}

/// The text the index takes from a tool, per field (before tokenization).
#[pyfunction]
#[pyo3(signature = (name, description, schema = None))]
pub(crate) fn project_tool<'py>(
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

/// The requests of a message that a search ranks on their own, in order: none when it holds
/// fewer than two (`src/intents.rs`, `src/index/intents.rs`).
#[pyfunction]
pub(crate) fn split_intents(py: Python<'_>, text: &str) -> PyResult<Vec<String>> {
    let spans = py.detach(|| guarded(|| Ok(crate::index::intents::parts_of(text))))?;
    Ok(spans
        .into_iter()
        .map(|(a, b)| text[a..b].to_owned())
        .collect())
}
