//! Errors: every failure of the binding (a Rust panic included) becomes a `ValueError`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

/// Run `f`, turning a panic into a `ValueError` instead of letting it reach Python.
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(msg)) => Err(PyValueError::new_err(msg)),
        Err(payload) => Err(PyValueError::new_err(format!(
            "internal error in the native tool index: {}",
            panic_message(payload)
        ))),
    }
}
