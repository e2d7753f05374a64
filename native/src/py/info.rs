//! What `Bm25Index` tells about itself: its sizes and the fusion's constants.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::convert::as_py_float;
use super::index::PyIndex;

/// `Bm25Index.stats` (documented on the method in `index.rs`).
pub(crate) fn stats<'py>(this: &PyIndex, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let index = this.read_py()?;
    let d = PyDict::new(py);
    d.set_item("tools", index.len())?;
    d.set_item("terms", index.num_terms())?;
    d.set_item("postings", index.num_postings())?;
    d.set_item("heap_bytes", index.heap_bytes())?;
    d.set_item("vectors", index.vectors().len())?;
    d.set_item("vector_dim", index.vectors().dim())?;
    Ok(d)
}

/// `Bm25Index.fusion` (documented on the method in `index.rs`).
pub(crate) fn fusion<'py>(this: &PyIndex, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("bm25_weight", as_py_float(this.fusion.bm25_weight))?;
    d.set_item("cosine_floor", as_py_float(this.fusion.cosine_floor))?;
    d.set_item("depth", this.fusion.depth)?;
    d.set_item("approx_from", this.how.approx_from)?;
    d.set_item("rescore", this.how.rescore)?;
    d.set_item("ann_from", this.read_py()?.vectors().ann_from())?;
    d.set_item("expansion", this.how.expansion)?;
    Ok(d)
}
