//! `rpc.discover`: an OpenRPC 1.3 document generated from the registry (SPEC §2.5).

use serde_json::{Value, json};

use crate::registry::Registry;

/// Build the OpenRPC document. Methods are sorted by name so the document is stable.
pub fn document(registry: &Registry, title: &str, version: &str) -> Value {
    let mut methods: Vec<_> = registry.iter().collect();
    methods.sort_by(|a, b| a.name.cmp(&b.name));
    let methods: Vec<Value> = methods
        .into_iter()
        .map(|m| {
            let mut params = Vec::new();
            let mut structure = "either";
            if let Some(schema) = &m.spec.params_schema
                && let Some(props) = schema.get("properties").and_then(Value::as_object)
            {
                structure = "by-name";
                let required: Vec<&str> = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                for (name, s) in props {
                    params.push(json!({
                        "name": name,
                        "required": required.contains(&name.as_str()),
                        "schema": s,
                    }));
                }
            }
            let mut obj = json!({
                "name": m.name.as_ref(),
                "params": params,
                "paramStructure": structure,
                "result": { "name": "result", "schema": {} },
                "x-kind": m.spec.kind.as_str(),
                "x-notification-allowed": m.spec.notification_allowed,
                "x-timeout-ms": m.spec.timeout.as_millis() as u64,
            });
            if let Some(d) = &m.spec.description {
                obj["description"] = json!(d);
            }
            if let Some(s) = &m.spec.params_schema {
                obj["x-params-schema"] = s.clone();
            }
            obj
        })
        .collect();
    json!({
        "openrpc": "1.3.2",
        "info": { "title": title, "version": version },
        "methods": methods,
    })
}
