//! What a listed tool must be for a model API to take it (OpenAI's and Anthropic's tool
//! definitions): a name of `^[a-zA-Z0-9_-]{1,64}$`; an `inputSchema` that is a JSON Schema
//! 2020-12 (valid under the meta-schema) and in the subset those APIs accept: `type: "object"`
//! with `properties` at the top, no `oneOf`, `anyOf`, `allOf`, `enum` or `not` at the top, and
//! property names of `^[a-zA-Z0-9_.-]{1,64}$`.

use serde_json::Value;

fn name_ok(name: &str, extra: &[u8]) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b) || extra.contains(&b))
}

/// Why `tool` would be refused by a model API; `None`: it would not.
pub fn model_refusal(tool: &Value) -> Option<String> {
    let name = tool["name"].as_str().unwrap_or_default();
    if !name_ok(name, b"") {
        return Some(format!("tool name {name:?} is not ^[a-zA-Z0-9_-]{{1,64}}$"));
    }
    let schema = &tool["inputSchema"];
    if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
        return Some(format!("{name}: inputSchema is not a JSON Schema 2020-12: {e}"));
    }
    if schema["type"] != "object" {
        return Some(format!("{name}: inputSchema's type is not \"object\": {schema}"));
    }
    let Some(props) = schema["properties"].as_object() else {
        return Some(format!("{name}: inputSchema has no properties: {schema}"));
    };
    if let Some(k) = ["oneOf", "anyOf", "allOf", "enum", "not"].iter().find(|k| schema.get(**k).is_some()) {
        return Some(format!("{name}: inputSchema has {k} at the top: {schema}"));
    }
    if let Some(p) = props.keys().find(|p| !name_ok(p, b".")) {
        return Some(format!("{name}: property name {p:?} is not ^[a-zA-Z0-9_.-]{{1,64}}$"));
    }
    None
}

/// Every tool of `tools` as a model API takes it (the reason of the first that is not).
pub fn assert_model_ready(tools: &[Value]) {
    for tool in tools {
        if let Some(why) = model_refusal(tool) {
            panic!("{why}\n{tool}");
        }
    }
}
