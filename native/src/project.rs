//! Schema-aware projection of one tool into the index's text fields.
//!
//! A tool is its name, its description and its input JSON schema. The schema is walked from the
//! root through `properties`, `items` (a schema or a list of schemas), `prefixItems`,
//! `additionalProperties`, `patternProperties`, `anyOf`, `oneOf`, `allOf` and local `$ref`s
//! (`#`, `#/$defs/X`, `#/definitions/X`, any local JSON pointer). Every `$ref` target is expanded
//! at most once per tool, which makes cycles harmless. Collected:
//!
//! * [`Field::ParamNames`]: every property name, at any depth;
//! * [`Field::ParamText`]: every non-root `description`, every `enum` value and `const` value.
//!
//! Titles are skipped (generators such as pydantic copy the property name into them) and so are
//! the root `description` and `title` (they repeat the tool's own). Unreferenced `$defs` are not
//! part of the tool's input and are not indexed.
//!
//! The walk is generic over [`Json`], implemented here for `serde_json::Value` and in `lib.rs`
//! for Python objects, so a Python schema is projected without first being copied into a tree.

use rustc_hash::FxHashSet;
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

/// Why a tool could not be projected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProjectError {
    /// The schema is neither an object, a boolean, nor null.
    NotAnObject(String),
    /// The schema nests deeper than [`MAX_DEPTH`] (or contains itself).
    TooDeep,
    /// A value that JSON has no counterpart for (a Python set, a custom object, ...).
    Unsupported(String),
    /// An object key that is not a string.
    NonStringKey(String),
}

impl std::fmt::Display for ProjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProjectError::NotAnObject(kind) => {
                write!(f, "input schema must be a JSON object, got {kind}")
            }
            ProjectError::TooDeep => write!(f, "input schema nests deeper than {MAX_DEPTH} levels"),
            ProjectError::Unsupported(kind) => {
                write!(f, "input schema holds a value of unsupported type {kind}")
            }
            ProjectError::NonStringKey(kind) => {
                write!(f, "input schema keys must be strings, got {kind}")
            }
        }
    }
}

/// The shape of a JSON-like value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JsonKind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
    /// Not JSON; the type's name.
    Other(String),
}

impl JsonKind {
    /// "an object", "a string", ... for messages.
    pub fn describe(&self) -> String {
        match self {
            JsonKind::Null => "null".into(),
            JsonKind::Bool => "a boolean".into(),
            JsonKind::Number => "a number".into(),
            JsonKind::String => "a string".into(),
            JsonKind::Array => "an array".into(),
            JsonKind::Object => "an object".into(),
            JsonKind::Other(t) => t.clone(),
        }
    }
}

type Step = Result<(), ProjectError>;

/// A JSON-like value the projection can walk.
pub trait Json: Sized + Clone {
    fn kind(&self) -> JsonKind;
    /// Every (key, value) of an object (nothing for other kinds).
    fn for_each_entry(&self, f: &mut dyn FnMut(&str, Self) -> Step) -> Step;
    /// Every item of an array (nothing for other kinds).
    fn for_each_item(&self, f: &mut dyn FnMut(Self) -> Step) -> Step;
    /// `self[key]` of an object.
    fn get(&self, key: &str) -> Option<Self>;
    /// `self[i]` of an array.
    fn at(&self, i: usize) -> Option<Self>;
    /// The text of a string, number or boolean, passed to `f`.
    fn with_text(&self, f: &mut dyn FnMut(&str)) -> Step;
}

impl Json for &Value {
    fn kind(&self) -> JsonKind {
        match self {
            Value::Null => JsonKind::Null,
            Value::Bool(_) => JsonKind::Bool,
            Value::Number(_) => JsonKind::Number,
            Value::String(_) => JsonKind::String,
            Value::Array(_) => JsonKind::Array,
            Value::Object(_) => JsonKind::Object,
        }
    }

    fn for_each_entry(&self, f: &mut dyn FnMut(&str, Self) -> Step) -> Step {
        if let Value::Object(map) = self {
            for (k, v) in map {
                f(k, v)?;
            }
        }
        Ok(())
    }

    fn for_each_item(&self, f: &mut dyn FnMut(Self) -> Step) -> Step {
        if let Value::Array(items) = self {
            for v in items {
                f(v)?;
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<Self> {
        self.as_object()?.get(key)
    }

    fn at(&self, i: usize) -> Option<Self> {
        self.as_array()?.get(i)
    }

    fn with_text(&self, f: &mut dyn FnMut(&str)) -> Step {
        match self {
            Value::String(s) => f(s),
            Value::Number(n) => f(&n.to_string()),
            Value::Bool(b) => f(if *b { "true" } else { "false" }),
            _ => {}
        }
        Ok(())
    }
}

/// Project a tool's schema, calling `sink` with each text and its field. `schema` may be
/// `None` (no parameters), null, a boolean schema, or an object. The name and description are
/// the caller's to emit.
pub fn project_schema<J: Json>(schema: Option<&J>, sink: &mut dyn FnMut(Field, &str)) -> Step {
    let Some(root) = schema else { return Ok(()) };
    match root.kind() {
        JsonKind::Null | JsonKind::Bool => Ok(()),
        JsonKind::Object => {
            let mut walker = Walker {
                root: root.clone(),
                seen_refs: FxHashSet::default(),
                sink,
            };
            walker.walk(root.clone(), 0, true)
        }
        JsonKind::Other(t) => Err(ProjectError::Unsupported(t)),
        other => Err(ProjectError::NotAnObject(other.describe())),
    }
}

/// The text of one tool, per field (for inspection and tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Projection {
    pub fields: [Vec<String>; NUM_FIELDS],
}

/// Project a whole tool into a [`Projection`].
pub fn project<J: Json>(
    name: &str,
    description: &str,
    schema: Option<&J>,
) -> Result<Projection, ProjectError> {
    let mut p = Projection::default();
    p.fields[Field::Name as usize].push(name.to_owned());
    if !description.is_empty() {
        p.fields[Field::Description as usize].push(description.to_owned());
    }
    project_schema(schema, &mut |f, text| {
        p.fields[f as usize].push(text.to_owned())
    })?;
    Ok(p)
}

struct Walker<'s, J> {
    root: J,
    seen_refs: FxHashSet<String>,
    sink: &'s mut dyn FnMut(Field, &str),
}

impl<J: Json> Walker<'_, J> {
    fn resolve(&self, reference: &str) -> Option<J> {
        let pointer = reference.strip_prefix('#')?;
        let mut node = self.root.clone();
        if pointer.is_empty() {
            return Some(node);
        }
        for token in pointer.strip_prefix('/')?.split('/') {
            let token = token.replace("~1", "/").replace("~0", "~");
            node = match node.kind() {
                JsonKind::Object => node.get(&token)?,
                JsonKind::Array => node.at(token.parse().ok()?)?,
                _ => return None,
            };
        }
        Some(node)
    }

    fn walk_sub(&mut self, sub: J, depth: usize) -> Step {
        match sub.kind() {
            JsonKind::Array => sub.for_each_item(&mut |s| self.walk(s, depth + 1, false)),
            _ => self.walk(sub, depth + 1, false),
        }
    }

    fn walk(&mut self, node: J, depth: usize, is_root: bool) -> Step {
        if depth > MAX_DEPTH {
            return Err(ProjectError::TooDeep);
        }
        match node.kind() {
            JsonKind::Object => {}
            JsonKind::Other(t) => return Err(ProjectError::Unsupported(t)),
            _ => return Ok(()), // boolean sub-schemas and stray values carry no text
        }
        node.for_each_entry(&mut |key, value| match key {
            "$ref" => {
                let mut reference = None;
                value.with_text(&mut |r| reference = Some(r.to_owned()))?;
                if let Some(r) = reference {
                    if let Some(target) = self.resolve(&r) {
                        if self.seen_refs.insert(r) {
                            self.walk(target, depth + 1, false)?;
                        }
                    }
                }
                Ok(())
            }
            "description" if !is_root && value.kind() == JsonKind::String => {
                value.with_text(&mut |d| {
                    if !d.is_empty() {
                        (self.sink)(Field::ParamText, d);
                    }
                })
            }
            "enum" => value.for_each_item(&mut |v| match v.kind() {
                JsonKind::Other(t) => Err(ProjectError::Unsupported(t)),
                _ => v.with_text(&mut |t| (self.sink)(Field::ParamText, t)),
            }),
            "const" => value.with_text(&mut |t| (self.sink)(Field::ParamText, t)),
            "properties" => value.for_each_entry(&mut |prop, sub| {
                (self.sink)(Field::ParamNames, prop);
                self.walk(sub, depth + 1, false)
            }),
            "patternProperties" => {
                value.for_each_entry(&mut |_, sub| self.walk(sub, depth + 1, false))
            }
            "items" | "additionalProperties" | "prefixItems" | "anyOf" | "oneOf" | "allOf" => {
                self.walk_sub(value, depth)
            }
            _ => Ok(()),
        })
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
        let p = project("get_weather", "Weather now", Some(&&schema)).unwrap();
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
        let p = project("tree", "", Some(&&schema)).unwrap();
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
        let p = project("t", "", Some(&&schema)).unwrap();
        assert_eq!(field(&p, Field::ParamNames), ["again", "again"]);
    }

    #[test]
    fn bad_schemas() {
        assert_eq!(
            project("t", "", Some(&&json!([1, 2]))).unwrap_err(),
            ProjectError::NotAnObject("an array".into())
        );
        assert_eq!(
            project("t", "", Some(&&json!("x"))).unwrap_err(),
            ProjectError::NotAnObject("a string".into())
        );
        assert!(project("t", "", Some(&&json!(true))).is_ok());
        assert!(project::<&Value>("t", "", None).is_ok());
    }

    #[test]
    fn too_deep() {
        let mut v = json!({"type": "string"});
        for _ in 0..(MAX_DEPTH + 2) {
            v = json!({"items": v});
        }
        assert_eq!(
            project("t", "", Some(&&v)).unwrap_err(),
            ProjectError::TooDeep
        );
    }
}
