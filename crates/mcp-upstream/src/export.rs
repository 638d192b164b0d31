//! An upstream's tools as oncerpc's: the allowlist, the prefixed name, the schema with
//! `idempotency_key` for commands, and the kind (`readOnlyHint: true` → query, unless the
//! config says otherwise).

use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};
use oncerpc_core::{Dispatcher, Kind, MethodSpec};
use oncerpc_mcp::ExternalTool;
use oncerpc_mcp::tools::Tool;
use serde_json::{Value, json};

use crate::UpstreamSpec;
use crate::call::UpstreamTool;
use crate::link::Link;

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

/// How the tool is listed on oncerpc's door: the upstream's JSON with the prefixed name, and
/// for a command the `idempotency_key` property.
pub fn listed(spec: &UpstreamSpec, tool: &Value, kind: Kind) -> Value {
    let mut out = tool.clone();
    out["name"] = json!(format!("{}{}", spec.prefix, tool["name"].as_str().unwrap_or_default()));
    if !out["inputSchema"].is_object() {
        out["inputSchema"] = json!({ "type": "object" });
    }
    if kind == Kind::Command {
        oncerpc_mcp::tools::add_key_properties(&mut out["inputSchema"]);
    }
    out
}

/// The upstream's tools (`tools/list`'s `tools`) as external tools of `dispatcher`: the
/// allowed ones with a name no registered method has (others are skipped with a warning).
pub fn export(link: &Arc<Link>, dispatcher: &Dispatcher, listed_tools: &[Value]) -> Vec<ExternalTool> {
    let spec = &link.spec;
    let mut out = Vec::new();
    for tool in listed_tools {
        let Some(name) = tool["name"].as_str() else { continue };
        if !link.allow.is_match(name) {
            continue;
        }
        let kind = kind(spec, tool);
        let json = listed(spec, tool, kind);
        // `x-mcp-header` arguments of the upstream's schema: over HTTP in the stateless
        // revision they come as `Mcp-Param-*` headers too, checked.
        let header_params = oncerpc_mcp::tools::header_params(&json["inputSchema"]);
        let exported = json["name"].as_str().unwrap_or_default().to_owned();
        let mut method = match kind {
            Kind::Query => MethodSpec::query(),
            Kind::Command => MethodSpec::command(),
        }
        .timeout(spec.method_timeout);
        method.transport_failures_unrecorded = true;
        method.description = tool["description"].as_str().map(str::to_owned);
        method.scopes = spec.tool_scopes.get(name).unwrap_or(&spec.scopes).clone();
        let scopes = method.scopes.clone();
        match (kind, spec.derive_key.get(name)) {
            (Kind::Command, Some(window)) => method.derive_key_window = Some(*window),
            (Kind::Query, Some(_)) => {
                tracing::warn!(upstream = %spec.name, tool = %oncerpc_core::LogSafe(name), "derive_key ignored: the tool is a query (readOnlyHint), which has no key")
            }
            _ => {}
        }
        let handler = UpstreamTool { link: link.clone(), tool: name.to_owned() };
        match dispatcher.external_method(&exported, method, Arc::new(handler)) {
            Ok(method) => out.push(ExternalTool {
                // A command may run as oncerpc's task (an event calling the upstream once);
                // a query answers inline. The upstream's own tasks are not used.
                tool: Tool {
                    name: exported,
                    kind,
                    json,
                    task_required: false,
                    execution: serde_json::json!({
                        "taskSupport": if kind == Kind::Command { "optional" } else { "forbidden" }
                    }),
                    header_params,
                    scopes,
                },
                method,
            }),
            Err(e) => {
                tracing::warn!(upstream = %spec.name, tool = %oncerpc_core::LogSafe(name), error = %e, "MCP upstream tool not offered")
            }
        }
    }
    out
}
