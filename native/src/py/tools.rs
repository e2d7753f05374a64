//! Tools given to `add` and `project_tool`: a `(name, description, schema)` tuple or a dict,
//! validated and staged.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::convert::type_name;
use super::json::project_py_schema;
use crate::index::Staged;
use crate::project::Field;

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
pub(crate) fn tool_parts<'py>(
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
pub(crate) fn stage_tool(item: &Bound<'_, PyAny>, staged: &mut Staged) -> Result<(), String> {
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

/// The name of a staged item, for messages.
pub(crate) fn staged_name(item: &Bound<'_, PyAny>) -> String {
    tool_parts(item)
        .ok()
        .and_then(|(n, _, _)| n.extract::<String>().ok())
        .unwrap_or_default()
}
