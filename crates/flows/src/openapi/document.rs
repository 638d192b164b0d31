//! A document's text as JSON (YAML turned into the same `serde_json::Value`), and which
//! OpenAPI it is: 3.0 and 3.1 are imported, Swagger 2.0 and anything else refused.

use serde_json::Value;

use super::error::OpenApiError;

/// Which OpenAPI a document is: 3.0 schemas are a dialect of their own (`nullable`, boolean
/// `exclusiveMinimum`), turned into JSON Schema 2020-12 as they are used (`refs.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V30,
    V31,
}

/// A parsed document.
#[derive(Debug)]
pub struct Document {
    pub name: String,
    pub root: Value,
    pub version: Version,
}

/// Parse `text` (JSON or YAML) as the document named `name`.
pub fn parse(name: &str, text: &str) -> Result<Document, OpenApiError> {
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    let root = if trimmed.starts_with('{') {
        serde_json::from_str::<Value>(trimmed)
            .map_err(|e| OpenApiError::at(name, "", format!("not valid JSON: {e}")))?
    } else {
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(trimmed)
            .map_err(|e| OpenApiError::at(name, "", format!("neither JSON nor valid YAML: {e}")))?;
        from_yaml(yaml)
    };
    if !root.is_object() {
        return Err(OpenApiError::at(name, "", "not an OpenAPI document (not an object)"));
    }
    if root.get("swagger").is_some() {
        return Err(OpenApiError::at(
            name,
            "/swagger",
            "is a Swagger 2.0 document; oncerpc imports OpenAPI 3.0 and 3.1: convert it first \
             (for example with swagger2openapi)",
        ));
    }
    let version = match root.get("openapi").and_then(Value::as_str) {
        Some(v) if v.starts_with("3.0") => Version::V30,
        Some(v) if v.starts_with("3.1") => Version::V31,
        Some(v) => {
            return Err(OpenApiError::at(
                name,
                "/openapi",
                format!("OpenAPI {v} is not supported (3.0 and 3.1 are)"),
            ));
        }
        None => {
            return Err(OpenApiError::at(
                name,
                "/openapi",
                "not an OpenAPI document: no \"openapi\" version",
            ));
        }
    };
    Ok(Document { name: name.to_owned(), root, version })
}

/// YAML as JSON: keys that are not strings (`200:`) become their text.
fn from_yaml(v: serde_yaml_ng::Value) -> Value {
    use serde_yaml_ng::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                n.as_f64().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(from_yaml).collect()),
        Y::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Y::String(s) => s,
                        other => serde_yaml_ng::to_string(&other).unwrap_or_default().trim_end().to_owned(),
                    };
                    (key, from_yaml(v))
                })
                .collect(),
        ),
        Y::Tagged(t) => from_yaml(t.value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_are_one_document_and_yaml_keys_become_text() {
        let yaml = "openapi: 3.0.3\npaths:\n  /a:\n    get:\n      responses:\n        200:\n          description: ok\n";
        let d = parse("y", yaml).unwrap();
        assert_eq!(d.version, Version::V30);
        assert!(d.root.pointer("/paths/~1a/get/responses/200").is_some());
        let d = parse("j", r#"{"openapi":"3.1.0","paths":{}}"#).unwrap();
        assert_eq!(d.version, Version::V31);
    }

    #[test]
    fn swagger_2_and_other_things_are_refused_with_a_reason() {
        let e = parse("old", "swagger: '2.0'\npaths: {}\n").unwrap_err();
        assert!(e.to_string().contains("Swagger 2.0") && e.pointer == "/swagger", "{e}");
        let e = parse("x", "openapi: 4.0.0\n").unwrap_err();
        assert!(e.to_string().contains("4.0.0"), "{e}");
        let e = parse("x", "{not json").unwrap_err();
        assert!(e.to_string().contains("not valid JSON"), "{e}");
        let e = parse("x", "- a\n- b\n").unwrap_err();
        assert!(e.to_string().contains("not an OpenAPI document"), "{e}");
        assert!(parse("x", ": : :\n\t- [").is_err());
    }
}
