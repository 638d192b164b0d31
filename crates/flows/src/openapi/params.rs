//! An operation's parameters and request body: the [`Param`]s its request is built with, and
//! the params schema a caller (and a model) sees — an object of its path, query, header and
//! cookie parameters plus `body`.

use serde_json::{Map, Value, json};

use super::call::{Body, In, Param};
use super::error::{OpenApiError, escape};
use super::refs::Resolver;

/// What an operation takes.
pub struct Takes {
    pub params: Vec<Param>,
    pub body: Body,
    pub schema: Value,
}

/// Header parameters OpenAPI says are ignored (the request sets them itself).
const IGNORED_HEADERS: [&str; 3] = ["accept", "content-type", "authorization"];

/// The parameters of an operation (`path_params` from its path item, `op_params` its own,
/// which win) and its request body. A header parameter named `key_header` is left out: the
/// step key goes there. `Ok(Err(note))`: the operation cannot be imported.
pub fn takes(
    r: &mut Resolver<'_>,
    key_header: &str,
    path_params: Option<(&Value, String)>,
    op_params: Option<(&Value, String)>,
    body: Option<(&Value, String)>,
) -> Result<Result<Takes, String>, OpenApiError> {
    // (name, in) → (parameter, where), the operation's own last so they win.
    let mut found: Vec<(String, String, Value, String)> = Vec::new();
    for (list, at) in [path_params, op_params].into_iter().flatten() {
        let Some(items) = list.as_array() else { continue };
        for (i, item) in items.iter().enumerate() {
            let (p, at) = r.follow(item, &format!("{at}/{i}"))?;
            let name = p.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let location = p.get("in").and_then(Value::as_str).unwrap_or_default().to_owned();
            found.retain(|(n, l, _, _)| !(n == &name && l == &location));
            found.push((name, location, p.clone(), at));
        }
    }
    let mut params = Vec::new();
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, location, p, at) in found {
        let location = match location.as_str() {
            "path" => In::Path,
            "query" => In::Query,
            "header"
                if IGNORED_HEADERS.contains(&name.to_ascii_lowercase().as_str())
                    || name.eq_ignore_ascii_case(key_header) =>
            {
                continue;
            }
            "header" => In::Header,
            "cookie" => In::Cookie,
            other => {
                return Err(OpenApiError::at(
                    &r.doc_name(),
                    &at,
                    format!("parameter {name:?}: unknown \"in\": {other:?}"),
                ));
            }
        };
        if name.is_empty() {
            return Err(OpenApiError::at(&r.doc_name(), &at, "a parameter without a name"));
        }
        let (schema, json) = match (p.get("schema"), p.pointer("/content")) {
            (Some(s), _) => (r.schema(s, &format!("{at}/schema"))?, false),
            (None, Some(Value::Object(c))) => match c.iter().next() {
                Some((mt, m)) => {
                    let s = m.get("schema").cloned().unwrap_or(json!({}));
                    (r.schema(&s, &format!("{at}/content/{}/schema", escape(mt)))?, true)
                }
                None => (json!({}), true),
            },
            _ => (json!({}), false),
        };
        let mut schema = schema;
        if let (Some(d), Value::Object(s)) = (p.get("description"), &mut schema) {
            s.entry("description").or_insert(d.clone());
        }
        let prop = if properties.contains_key(&name) || name == "body" {
            format!("{}_{name}", where_name(location))
        } else {
            name.clone()
        };
        if location == In::Path || p.get("required") == Some(&Value::Bool(true)) {
            required.push(Value::String(prop.clone()));
        }
        let default_style = if matches!(location, In::Query | In::Cookie) { "form" } else { "simple" };
        let style = p.get("style").and_then(Value::as_str).unwrap_or(default_style).to_owned();
        let explode = p.get("explode").and_then(Value::as_bool).unwrap_or(style == "form");
        properties.insert(prop.clone(), schema);
        params.push(Param { name, prop, location, style, explode, json });
    }
    let mut kind = Body::None;
    if let Some((b, at)) = body {
        let (b, at) = r.follow(b, &at)?;
        let content = b.get("content").and_then(Value::as_object).cloned().unwrap_or_default();
        let json_type = content.keys().find(|t| {
            let t = t.split(';').next().unwrap_or_default().trim();
            t == "application/json" || t.ends_with("+json") || t == "*/*"
        });
        let form_type = content.keys().find(|t| t.starts_with("application/x-www-form-urlencoded"));
        let Some(mt) = json_type.or(form_type).cloned() else {
            let types: Vec<&String> = content.keys().collect();
            return Ok(Err(format!(
                "its request body is {types:?}; only JSON and application/x-www-form-urlencoded bodies are sent"
            )));
        };
        kind = if json_type.is_some() { Body::Json } else { Body::Form };
        let s = content[&mt].get("schema").cloned().unwrap_or(json!({}));
        let mut schema = r.schema(&s, &format!("{at}/content/{}/schema", escape(&mt)))?;
        if let (Some(d), Value::Object(s)) = (b.get("description"), &mut schema) {
            s.entry("description").or_insert(d.clone());
        }
        properties.insert("body".into(), schema);
        if b.get("required") == Some(&Value::Bool(true)) {
            required.push(json!("body"));
        }
    }
    let mut schema = json!({ "type": "object", "properties": properties });
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    Ok(Ok(Takes { params, body: kind, schema }))
}

fn where_name(location: In) -> &'static str {
    match location {
        In::Path => "path",
        In::Query => "query",
        In::Header => "header",
        In::Cookie => "cookie",
    }
}
