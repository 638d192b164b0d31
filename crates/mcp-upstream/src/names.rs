//! What an upstream's tool is called on oncerpc's door and what it is: the allowlist, the
//! prefixed (model-safe) name, the kind, and the tool as listed.

use globset::{Glob, GlobSet, GlobSetBuilder};
use oncerpc_core::Kind;
use oncerpc_mcp::ToolNameError;
use oncerpc_mcp::names::META_METHOD;
use serde_json::{Value, json};

use crate::UpstreamSpec;

/// The allowlist of an upstream's tool names (`tools = [...]`; empty: all).
pub fn allowlist(patterns: &[String]) -> Result<GlobSet, String> {
    let mut set = GlobSetBuilder::new();
    for p in patterns {
        set.add(Glob::new(p).map_err(|e| format!("tools: {p:?} is not a glob pattern: {e}"))?);
    }
    if patterns.is_empty() {
        set.add(Glob::new("*").expect("a valid glob"));
    }
    set.build().map_err(|e| format!("tools: {e}"))
}

/// The kind of the upstream tool `tool` (its JSON as listed).
pub fn kind(spec: &UpstreamSpec, tool: &Value) -> Kind {
    let name = tool["name"].as_str().unwrap_or_default();
    if let Some(k) = spec.kinds.get(name) {
        return *k;
    }
    match tool["annotations"]["readOnlyHint"] {
        Value::Bool(true) => Kind::Query,
        _ => Kind::Command,
    }
}

/// The method an upstream tool is on oncerpc's side: its name with the prefix (the name of
/// its records, metrics and logs, whatever its tool is called).
pub fn method_name(spec: &UpstreamSpec, tool: &str) -> String {
    format!("{}{tool}", spec.prefix)
}

/// How the tool is listed on oncerpc's door: the upstream's JSON with the exported name (the
/// prefixed name, model-safe unless `tool_names` keeps it; its `title` when it has none of its
/// own, and `_meta["io.oncerpc/method"]`), `properties` always, and for a command the
/// `idempotency_key` and `force_retry` properties. A name too long for model APIs is the error.
pub fn listed(spec: &UpstreamSpec, tool: &Value, kind: Kind) -> Result<Value, ToolNameError> {
    let method = method_name(spec, tool["name"].as_str().unwrap_or_default());
    let name = spec.tool_names.tool_name(&method)?;
    let mut out = tool.clone();
    if name != method && !out["title"].is_string() {
        out["title"] = json!(method);
    }
    out["name"] = json!(name);
    if !out["_meta"].is_object() {
        out["_meta"] = json!({});
    }
    out["_meta"][META_METHOD] = json!(method);
    if !out["inputSchema"].is_object() {
        out["inputSchema"] = json!({ "type": "object" });
    }
    if let Some(schema) = out["inputSchema"].as_object_mut() {
        schema.entry("properties").or_insert_with(|| json!({}));
    }
    if kind == Kind::Command {
        oncerpc_mcp::tools::add_key_properties(&mut out["inputSchema"]);
    }
    Ok(out)
}
