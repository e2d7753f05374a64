//! Python values walked in place by the schema projection ([`Json`] over `Bound<PyAny>`), and
//! the projection of a Python schema (None, JSON text or a JSON-like value).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;

use super::convert::type_name;
use crate::project::{project_schema, Field, Json, JsonKind, ProjectError};

/// `value` as a `T`: an exact `T` found by comparing type pointers first (no call into the
/// interpreter: most of a schema's values are exact dicts and strs), a subclass as before.
#[inline]
fn as_a<'a, 'py, T: pyo3::type_object::PyTypeCheck + pyo3::type_object::PyTypeInfo>(
    value: &'a Bound<'py, PyAny>,
) -> Option<&'a Bound<'py, T>> {
    value
        .cast_exact::<T>()
        .ok()
        .or_else(|| value.cast::<T>().ok())
}

/// Python values walked in place: dict, list, tuple, str, int, float, bool, None.
impl<'py> Json for Bound<'py, PyAny> {
    fn kind(&self) -> JsonKind {
        if self.is_exact_instance_of::<PyString>() {
            JsonKind::String
        } else if self.is_exact_instance_of::<PyDict>() {
            JsonKind::Object
        } else if self.is_none() {
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
        if let Some(d) = as_a::<PyDict>(self) {
            for (k, v) in d.iter() {
                let key = as_a::<PyString>(&k)
                    .ok_or_else(|| ProjectError::NonStringKey(type_name(&k)))?;
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
        if let Some(s) = as_a::<PyString>(self) {
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
pub(crate) fn project_py_schema(
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
