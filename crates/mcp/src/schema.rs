//! A method's params schema as its tool's `inputSchema`: an object schema listing every
//! argument the method takes (MCP arguments are always an object, and a model sends only the
//! arguments a schema lists — strict clients add `additionalProperties: false`).
//!
//! * none: `{"type": "object", "properties": {}}` (the method reads no arguments, or says
//!   nothing of them);
//! * an object schema: itself, with `properties` (`{}` when it has none);
//! * a schema of several types, one of them `object` (`{"type": ["object", "null"], …}`:
//!   params optional): its object form, `type: "object"`, keywords of the other types left out;
//! * `oneOf`/`anyOf` whose branches include one object schema (params by position or by name):
//!   that branch, with the top level's other keywords (`$defs`, `description`, …);
//! * positional only (an array) with [`ToolOptions::array_argument`](oncerpc_core::ToolOptions)
//!   set: an object whose one property, that argument, holds the array
//!   ([`Derived::array_argument`]);
//! * positional only without it: no object form; the method is not a tool ([`NoObjectForm`]).

use serde_json::{Map, Value, json};

/// A tool's `inputSchema`, and where its arguments go.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    pub schema: Value,
    /// The argument holding the method's positional params, when the tool takes them so.
    pub array_argument: Option<String>,
}

/// Why a method is not a tool: its params cannot be an object, and it has no object form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "its params are positional (its params_schema takes no object) and MCP arguments are an object: \
     give it an object form (ToolOptions::array_argument, or a params_schema that also takes an object)"
)]
pub struct NoObjectForm;

/// Keywords that say something only of arrays, strings or numbers: left out of an object form.
const OTHER_TYPES_KEYWORDS: [&str; 18] = [
    "items",
    "prefixItems",
    "additionalItems",
    "contains",
    "minContains",
    "maxContains",
    "minItems",
    "maxItems",
    "uniqueItems",
    "unevaluatedItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];

/// Keywords that stay at the top of the schema when its array is nested under one argument
/// (references such as `#/$defs/x` resolve from the root).
const ROOT_KEYWORDS: [&str; 5] = ["$schema", "$id", "$defs", "definitions", "$anchor"];

/// The `inputSchema` of a method with params schema `params` (see the module's notes).
pub fn input_schema(params: Option<&Value>, array_argument: Option<&str>) -> Result<Derived, NoObjectForm> {
    let array = json!({ "type": "array" });
    let params = match (params, array_argument) {
        (Some(p), _) => p,
        // Positional, by its own account: an array of anything.
        (None, Some(_)) => &array,
        (None, None) => {
            return Ok(Derived {
                schema: json!({ "type": "object", "properties": {} }),
                array_argument: None,
            });
        }
    };
    if let Some(mut schema) = object_form(params, 0) {
        if let Some(o) = schema.as_object_mut() {
            o.entry("properties").or_insert_with(|| json!({}));
        }
        return Ok(Derived { schema, array_argument: None });
    }
    let Some(argument) = array_argument else { return Err(NoObjectForm) };
    let mut inner = params.as_object().cloned().unwrap_or_default();
    let mut outer = Map::new();
    for k in ROOT_KEYWORDS {
        if let Some(v) = inner.remove(k) {
            outer.insert(k.to_owned(), v);
        }
    }
    outer.insert("type".into(), json!("object"));
    outer.insert("properties".into(), json!({ argument: inner }));
    outer.insert("required".into(), json!([argument]));
    Ok(Derived { schema: Value::Object(outer), array_argument: Some(argument.to_owned()) })
}

/// The types a schema's `type` names (`None`: it names none, any type).
fn types(schema: &Value) -> Option<Vec<&str>> {
    match schema.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => Some(Vec::new()),
    }
}

/// The part of `schema` that an object satisfies, as an object schema; `None`: no object
/// satisfies it (as far as `type` and `oneOf`/`anyOf` tell).
fn object_form(schema: &Value, depth: usize) -> Option<Value> {
    let o = match schema {
        Value::Bool(true) => return Some(json!({ "type": "object" })),
        Value::Object(o) => o,
        _ => return None,
    };
    match types(schema) {
        Some(ts) if !ts.contains(&"object") => None,
        Some(ts) => {
            let mut out = o.clone();
            out.insert("type".into(), json!("object"));
            if ts.len() > 1 {
                for k in OTHER_TYPES_KEYWORDS {
                    out.remove(k);
                }
            }
            Some(Value::Object(out))
        }
        None => {
            let branches = ["oneOf", "anyOf"].into_iter().find_map(|k| Some((k, o.get(k)?.as_array()?)));
            let Some((keyword, branches)) = branches.filter(|_| depth < 8) else {
                let mut out = o.clone();
                out.insert("type".into(), json!("object"));
                return Some(Value::Object(out));
            };
            let objects: Vec<Value> = branches.iter().filter_map(|b| object_form(b, depth + 1)).collect();
            match objects.as_slice() {
                [] => None,
                [one] => {
                    let mut out = o.clone();
                    out.remove(keyword);
                    if let Value::Object(branch) = one {
                        out.extend(branch.clone());
                    }
                    Some(Value::Object(out))
                }
                // Several object branches: kept as written, an object.
                _ => {
                    let mut out = o.clone();
                    out.insert("type".into(), json!("object"));
                    Some(Value::Object(out))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derived(params: Value) -> Value {
        input_schema(Some(&params), None).unwrap().schema
    }

    #[test]
    fn none_is_an_object_with_no_properties_and_an_object_schema_is_kept() {
        assert_eq!(input_schema(None, None).unwrap().schema, json!({ "type": "object", "properties": {} }));
        let pay =
            json!({ "type": "object", "required": ["sku"], "properties": { "sku": { "type": "string" } } });
        assert_eq!(derived(pay.clone()), pay);
        assert_eq!(derived(json!({ "type": "object" })), json!({ "type": "object", "properties": {} }));
    }

    #[test]
    fn nullable_params_become_the_object_form_with_every_property() {
        let increment = json!({ "type": ["object", "null"], "properties": { "by": { "type": "integer" } } });
        assert_eq!(
            derived(increment),
            json!({ "type": "object", "properties": { "by": { "type": "integer" } } })
        );
        let either = json!({ "type": ["array", "object"], "minItems": 2, "required": ["a"],
                             "properties": { "a": {} } });
        assert_eq!(
            derived(either),
            json!({ "type": "object", "required": ["a"], "properties": { "a": {} } })
        );
    }

    #[test]
    fn the_object_branch_of_a_one_of_is_the_tool_schema() {
        let subtract = json!({
            "description": "by position or by name",
            "oneOf": [
                { "type": "array", "prefixItems": [{ "type": "number" }, { "type": "number" }] },
                { "type": "object", "required": ["minuend", "subtrahend"],
                  "properties": { "minuend": { "type": "number" }, "subtrahend": { "type": "number" } } }
            ]
        });
        let schema = derived(subtract);
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["minuend", "subtrahend"]));
        assert_eq!(schema["description"], "by position or by name");
        assert!(schema.get("oneOf").is_none(), "{schema}");
    }

    #[test]
    fn positional_params_take_an_array_argument_or_are_no_tool() {
        let sum = json!({ "$defs": { "n": { "type": "number" } }, "type": "array", "items": { "$ref": "#/$defs/n" } });
        assert_eq!(input_schema(Some(&sum), None), Err(NoObjectForm));
        let d = input_schema(Some(&sum), Some("values")).unwrap();
        assert_eq!(d.array_argument.as_deref(), Some("values"));
        assert_eq!(
            d.schema,
            json!({ "$defs": { "n": { "type": "number" } }, "type": "object", "required": ["values"],
                    "properties": { "values": { "type": "array", "items": { "$ref": "#/$defs/n" } } } })
        );
        let untyped = input_schema(None, Some("values")).unwrap().schema;
        assert_eq!(untyped["properties"]["values"], json!({ "type": "array" }));
        assert_eq!(input_schema(Some(&json!(false)), None), Err(NoObjectForm));
    }
}
