//! Schema-aware projection of one tool into the index's text fields.
//!
//! A tool is its name, its description and its input JSON schema. The schema is walked from the
//! root through `properties`, `items` (a schema or a list of schemas), `prefixItems`,
//! `additionalProperties`, `patternProperties`, `anyOf`, `oneOf`, `allOf` and local `$ref`s
//! (`#/$defs/X`, `#/definitions/X`, any local JSON pointer). Every `$ref` target is expanded at
//! most once per tool, which makes cycles harmless. Collected:
//!
//! * [`Field::ParamNames`]: every property name, at any depth;
//! * [`Field::ParamText`]: every non-root `description`, every `enum` value and `const` value.
//!
//! Titles are skipped (generators such as pydantic copy the property name into them) and so are
//! the root `description` and `title` (they repeat the tool's own). Unreferenced `$defs` are not
//! part of the tool's input and are not indexed.

use std::collections::HashSet;

use serde_json::Value;

/// Number of indexed fields.
pub const NUM_FIELDS: usize = 4;

/// The indexed fields of a tool, in storage order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Name = 0,
    Description = 1,
    ParamNames = 2,
    ParamText = 3,
}

impl Field {
    pub const ALL: [Field; NUM_FIELDS] = [
        Field::Name,
        Field::Description,
        Field::ParamNames,
        Field::ParamText,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Field::Name => "name",
            Field::Description => "description",
            Field::ParamNames => "param_names",
            Field::ParamText => "param_text",
        }
    }
}

/// Deepest schema nesting accepted (counting `$ref` expansions); deeper is an error.
pub const MAX_DEPTH: usize = 256;

/// The text of one tool, per field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Projection {
    pub fields: [Vec<String>; NUM_FIELDS],
}

/// Why a tool could not be projected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProjectError {
    /// The schema is neither an object, a boolean, nor null.
    NotAnObject(&'static str),
    /// The schema nests deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl std::fmt::Display for ProjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProjectError::NotAnObject(kind) => {
                write!(f, "input schema must be a JSON object, got {kind}")
            }
            ProjectError::TooDeep => write!(f, "input schema nests deeper than {MAX_DEPTH} levels"),
        }
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Project a tool. `schema` may be `None` (no parameters), `null`, a boolean schema, or an object.
pub fn project(
    name: &str,
    description: &str,
    schema: Option<&Value>,
) -> Result<Projection, ProjectError> {
    let mut p = Projection::default();
    p.fields[Field::Name as usize].push(name.to_owned());
    if !description.is_empty() {
        p.fields[Field::Description as usize].push(description.to_owned());
    }
    match schema {
        None | Some(Value::Null) | Some(Value::Bool(_)) => {}
        Some(root @ Value::Object(_)) => {
            let mut walker = Walker {
                root,
                seen_refs: HashSet::new(),
                out: &mut p,
            };
            walker.walk(root, 0, true)?;
        }
        Some(other) => return Err(ProjectError::NotAnObject(kind_of(other))),
    }
    Ok(p)
}

struct Walker<'a> {
    root: &'a Value,
    seen_refs: HashSet<&'a str>,
    out: &'a mut Projection,
}

impl<'a> Walker<'a> {
    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        let pointer = reference.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(self.root);
        }
        self.root.pointer(pointer)
    }

    fn push(&mut self, field: Field, text: String) {
        self.out.fields[field as usize].push(text);
    }

    fn walk(&mut self, node: &'a Value, depth: usize, is_root: bool) -> Result<(), ProjectError> {
        if depth > MAX_DEPTH {
            return Err(ProjectError::TooDeep);
        }
        let Value::Object(obj) = node else {
            return Ok(()); // boolean sub-schemas and stray values carry no text
        };
        if let Some(Value::String(reference)) = obj.get("$ref") {
            if self.seen_refs.insert(reference.as_str()) {
                if let Some(target) = self.resolve(reference) {
                    self.walk(target, depth + 1, false)?;
                }
            }
        }
        if !is_root {
            if let Some(Value::String(d)) = obj.get("description") {
                if !d.is_empty() {
                    self.push(Field::ParamText, d.clone());
                }
            }
        }
        if let Some(Value::Array(values)) = obj.get("enum") {
            for v in values {
                self.push_value(v);
            }
        }
        if let Some(v) = obj.get("const") {
            self.push_value(v);
        }
        if let Some(Value::Object(props)) = obj.get("properties") {
            for (key, sub) in props {
                self.push(Field::ParamNames, key.clone());
                self.walk(sub, depth + 1, false)?;
            }
        }
        if let Some(Value::Object(props)) = obj.get("patternProperties") {
            for sub in props.values() {
                self.walk(sub, depth + 1, false)?;
            }
        }
        for key in [
            "items",
            "additionalProperties",
            "prefixItems",
            "anyOf",
            "oneOf",
            "allOf",
        ] {
            match obj.get(key) {
                Some(Value::Array(subs)) => {
                    for sub in subs {
                        self.walk(sub, depth + 1, false)?;
                    }
                }
                Some(sub @ Value::Object(_)) => self.walk(sub, depth + 1, false)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn push_value(&mut self, v: &Value) {
        match v {
            Value::String(s) => self.push(Field::ParamText, s.clone()),
            Value::Number(n) => self.push(Field::ParamText, n.to_string()),
            Value::Bool(b) => self.push(Field::ParamText, b.to_string()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(p: &Projection, f: Field) -> Vec<&str> {
        p.fields[f as usize].iter().map(String::as_str).collect()
    }

    #[test]
    fn nested_properties_items_and_enums() {
        let schema = json!({
            "type": "object",
            "description": "root text is skipped",
            "properties": {
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit"},
                "points": {"type": "array", "items": {"type": "object", "properties": {
                    "lat": {"type": "number", "description": "Latitude"}
                }}}
            }
        });
        let p = project("get_weather", "Weather now", Some(&schema)).unwrap();
        assert_eq!(field(&p, Field::Name), ["get_weather"]);
        assert_eq!(field(&p, Field::Description), ["Weather now"]);
        // serde_json objects iterate in key order.
        assert_eq!(field(&p, Field::ParamNames), ["points", "lat", "unit"]);
        assert_eq!(
            field(&p, Field::ParamText),
            ["Latitude", "Unit", "celsius", "fahrenheit"]
        );
    }

    #[test]
    fn refs_and_cycles() {
        let schema = json!({
            "type": "object",
            "properties": {"node": {"$ref": "#/$defs/Node"}, "other": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "description": "A tree node", "properties": {
                "child": {"$ref": "#/$defs/Node"},
                "label": {"anyOf": [{"enum": ["red", "green"]}, {"type": "null"}]}
            }},
            "Unused": {"properties": {"ghost": {}}}}
        });
        let p = project("tree", "", Some(&schema)).unwrap();
        // Node is expanded once, however often and however cyclically it is referenced.
        assert_eq!(
            field(&p, Field::ParamNames),
            ["node", "child", "label", "other"]
        );
        assert_eq!(field(&p, Field::ParamText), ["A tree node", "red", "green"]);
        assert!(field(&p, Field::Description).is_empty());
    }

    #[test]
    fn self_reference_to_root() {
        let schema = json!({"properties": {"again": {"$ref": "#"}}});
        let p = project("t", "", Some(&schema)).unwrap();
        assert_eq!(field(&p, Field::ParamNames), ["again", "again"]);
    }

    #[test]
    fn bad_schemas() {
        assert_eq!(
            project("t", "", Some(&json!([1, 2]))).unwrap_err(),
            ProjectError::NotAnObject("an array")
        );
        assert_eq!(
            project("t", "", Some(&json!("x"))).unwrap_err(),
            ProjectError::NotAnObject("a string")
        );
        assert!(project("t", "", Some(&json!(true))).is_ok());
        assert!(project("t", "", None).is_ok());
    }

    #[test]
    fn too_deep() {
        let mut v = json!({"type": "string"});
        for _ in 0..(MAX_DEPTH + 2) {
            v = json!({"items": v});
        }
        assert_eq!(
            project("t", "", Some(&v)).unwrap_err(),
            ProjectError::TooDeep
        );
    }
}
