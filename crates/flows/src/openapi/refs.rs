//! `$ref`s within a document: followed for parameters and request bodies, inlined in schemas
//! (a method's params schema stands alone: MCP clients and models read it as it is). A cycle
//! is cut where it closes, with a note in the schema saying so; a schema that would grow past
//! a bound is cut the same way. OpenAPI 3.0's schema dialect becomes JSON Schema 2020-12 on
//! the way (`nullable`, boolean `exclusiveMinimum`/`exclusiveMaximum`).

use serde_json::{Map, Value, json};

use super::document::{Document, Version};
use super::error::{OpenApiError, escape};

/// Most `$ref`s inlined into one operation's params schema.
const MAX_INLINED: usize = 2_000;
/// Most `$ref`s open at once (one inside another).
const MAX_NESTED: usize = 32;
/// Members whose values are data, not schemas.
const DATA: [&str; 5] = ["example", "examples", "default", "enum", "const"];
/// Members whose values map names to schemas.
const NAMED: [&str; 5] = ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];

/// Resolves the `$ref`s of one document.
pub struct Resolver<'d> {
    doc: &'d Document,
    inlined: usize,
}

impl<'d> Resolver<'d> {
    pub fn new(doc: &'d Document) -> Resolver<'d> {
        Resolver { doc, inlined: 0 }
    }

    /// The document's name, for errors.
    pub fn doc_name(&self) -> String {
        self.doc.name.clone()
    }

    /// A fresh bound, for the next operation.
    pub fn reset(&mut self) {
        self.inlined = 0;
    }

    /// `value` (found at `at`), its own `$ref` followed until there is none: a parameter, a
    /// request body. Returns the object and where it is.
    pub fn follow(&self, mut value: &'d Value, at: &str) -> Result<(&'d Value, String), OpenApiError> {
        let mut at = at.to_owned();
        for _ in 0..MAX_NESTED {
            let Some(r) = value.get("$ref").and_then(Value::as_str) else { return Ok((value, at)) };
            let (target, pointer) = self.lookup(r, &at)?;
            value = target;
            at = pointer;
        }
        Err(OpenApiError::at(&self.doc.name, &at, "a chain of $refs too long (or a loop)"))
    }

    /// `schema` (found at `at`) with every `$ref` inlined.
    pub fn schema(&mut self, schema: &Value, at: &str) -> Result<Value, OpenApiError> {
        let mut open = Vec::new();
        self.inline(schema, at, &mut open)
    }

    fn lookup(&self, r: &str, at: &str) -> Result<(&'d Value, String), OpenApiError> {
        let name = &self.doc.name;
        let Some(fragment) = r.strip_prefix('#') else {
            return Err(OpenApiError::at(
                name,
                at,
                format!("$ref {r:?} points outside the document; only local refs (\"#/...\") are supported"),
            ));
        };
        let pointer = percent_decode(fragment);
        match self.doc.root.pointer(&pointer) {
            Some(v) => Ok((v, pointer)),
            None => {
                Err(OpenApiError::at(name, at, format!("unknown $ref {r:?}: nothing in the document there")))
            }
        }
    }

    fn inline(&mut self, v: &Value, at: &str, open: &mut Vec<String>) -> Result<Value, OpenApiError> {
        let Value::Object(obj) = v else { return Ok(v.clone()) };
        if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
            if open.iter().any(|o| o == r) {
                return Ok(cut(
                    r,
                    "it contains itself (a recursive schema); it is cut here and any value is accepted",
                ));
            }
            if open.len() >= MAX_NESTED || self.inlined >= MAX_INLINED {
                return Ok(cut(
                    r,
                    "the schema is too large to expand; it is cut here and any value is accepted",
                ));
            }
            self.inlined += 1;
            let (target, pointer) = self.lookup(r, at)?;
            open.push(r.to_owned());
            let mut resolved = self.inline(target, &pointer, open)?;
            open.pop();
            // Members beside a `$ref` (3.1: `description`, …) win over the target's.
            if let Value::Object(out) = &mut resolved {
                for (k, sibling) in obj.iter().filter(|(k, _)| *k != "$ref") {
                    out.insert(k.clone(), self.inline(sibling, &format!("{at}/{}", escape(k)), open)?);
                }
            }
            return Ok(resolved);
        }
        let mut out = Map::new();
        for (k, child) in obj {
            let value = if DATA.contains(&k.as_str()) {
                child.clone()
            } else if NAMED.contains(&k.as_str())
                && let Value::Object(named) = child
            {
                // Names (of properties, …) to schemas: a name is never a keyword.
                let mut schemas = Map::new();
                for (name, schema) in named {
                    let at = format!("{at}/{}/{}", escape(k), escape(name));
                    schemas.insert(name.clone(), self.inline(schema, &at, open)?);
                }
                Value::Object(schemas)
            } else if let Value::Array(items) = child {
                let mut list = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    list.push(self.inline(item, &format!("{at}/{}/{i}", escape(k)), open)?);
                }
                Value::Array(list)
            } else {
                self.inline(child, &format!("{at}/{}", escape(k)), open)?
            };
            out.insert(k.clone(), value);
        }
        if self.doc.version == Version::V30 {
            from_30(&mut out);
        }
        Ok(Value::Object(out))
    }
}

/// The schema put where `$ref` `r` is not expanded, saying why.
fn cut(r: &str, why: &str) -> Value {
    json!({ "description": format!("({r} is not expanded here: {why}.)") })
}

/// An OpenAPI 3.0 schema object as JSON Schema 2020-12.
fn from_30(s: &mut Map<String, Value>) {
    let nullable = match s.get("nullable") {
        Some(Value::Bool(on)) => *on,
        _ => return bounds_from_30(s),
    };
    s.remove("nullable");
    if nullable {
        match s.get("type").cloned() {
            Some(Value::String(t)) => {
                s.insert("type".into(), json!([t, "null"]));
            }
            _ if !s.is_empty() => {
                let inner = Value::Object(std::mem::take(s));
                s.insert("anyOf".into(), json!([inner, {"type": "null"}]));
            }
            _ => {}
        }
        if let Some(Value::Array(e)) = s.get_mut("enum")
            && !e.contains(&Value::Null)
        {
            e.push(Value::Null);
        }
    }
    bounds_from_30(s);
}

/// 3.0's boolean `exclusiveMinimum`/`exclusiveMaximum` beside `minimum`/`maximum`, as 2020-12's
/// numbers.
fn bounds_from_30(s: &mut Map<String, Value>) {
    for (exclusive, bound) in [("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")] {
        if let Some(Value::Bool(on)) = s.get(exclusive).cloned() {
            s.remove(exclusive);
            if on && let Some(b) = s.remove(bound) {
                s.insert(exclusive.into(), b);
            }
        }
    }
}

/// A URI fragment's `%XX` escapes decoded (a JSON pointer in a `$ref`).
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openapi::document::parse;

    fn doc(v: Value) -> Document {
        parse("t", &v.to_string()).unwrap()
    }

    #[test]
    fn refs_are_inlined_and_a_cycle_is_cut_with_a_note() {
        let d = doc(json!({"openapi":"3.1.0","components":{"schemas":{
            "Node":{"type":"object","properties":{"name":{"type":"string"},"next":{"$ref":"#/components/schemas/Node"}}},
            "Pet":{"$ref":"#/components/schemas/Node","description":"a pet"}}}}));
        let s = Resolver::new(&d).schema(&json!({"$ref":"#/components/schemas/Pet"}), "/x").unwrap();
        assert_eq!(s["description"], "a pet");
        assert_eq!(s["properties"]["name"]["type"], "string");
        let note = s["properties"]["next"]["description"].as_str().unwrap();
        assert!(note.contains("#/components/schemas/Node") && note.contains("recursive"), "{note}");
    }

    #[test]
    fn an_unknown_or_external_ref_names_the_pointer() {
        let d = doc(json!({"openapi":"3.1.0"}));
        let e =
            Resolver::new(&d).schema(&json!({"$ref":"#/components/schemas/Gone"}), "/paths/~1a").unwrap_err();
        assert!(e.message.contains("unknown $ref") && e.pointer == "/paths/~1a", "{e}");
        let e = Resolver::new(&d).schema(&json!({"$ref":"other.yaml#/X"}), "/p").unwrap_err();
        assert!(e.message.contains("outside the document"), "{e}");
    }

    #[test]
    fn openapi_30_nullable_and_exclusive_bounds_become_json_schema() {
        let d = doc(json!({"openapi":"3.0.3"}));
        let s = Resolver::new(&d)
            .schema(&json!({"type":"integer","nullable":true,"minimum":0,"exclusiveMinimum":true}), "")
            .unwrap();
        assert_eq!(s, json!({"type":["integer","null"],"exclusiveMinimum":0}));
        // Properties named like keywords are properties, their $refs followed.
        let d = doc(json!({"openapi":"3.0.3","components":{"schemas":{"S":{"type":"string"}}}}));
        let s = Resolver::new(&d)
            .schema(&json!({"properties":{"nullable":{"$ref":"#/components/schemas/S"},"default":{"$ref":"#/components/schemas/S"}}}), "")
            .unwrap();
        assert_eq!(s, json!({"properties":{"nullable":{"type":"string"},"default":{"type":"string"}}}));
    }
}
