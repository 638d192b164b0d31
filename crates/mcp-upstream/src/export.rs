//! An upstream's tools as oncerpc's: the allowlist, the prefixed name (model-safe by default,
//! as the registry's tools: `mail.send` → `mail_send`, the prefixed name in `title` and
//! `_meta["io.oncerpc/method"]`), the schema with `idempotency_key` for commands, and the kind
//! (`readOnlyHint: true` → query, unless the config says otherwise).

use std::collections::HashSet;
use std::sync::Arc;

use oncerpc_core::{Dispatcher, Kind, MethodSpec};
use oncerpc_mcp::ExternalTool;
use oncerpc_mcp::Tools;
use oncerpc_mcp::tools::Tool;
use serde_json::Value;

use crate::call::UpstreamTool;
use crate::link::Link;
pub use crate::names::{allowlist, kind, listed, method_name};

/// The upstream's tools (`tools/list`'s `tools`) as external tools of `dispatcher`: the
/// allowed ones with a name no registered method has (others are skipped with a warning).
pub fn export(link: &Arc<Link>, dispatcher: &Dispatcher, listed_tools: &[Value]) -> Vec<ExternalTool> {
    let spec = &link.spec;
    // The registry's tools keep their names: one of ours is never shadowed, nor listed twice.
    let taken: HashSet<String> =
        Tools::names_of(dispatcher.registry(), spec.tool_names).into_iter().collect();
    let production = dispatcher.config().idempotency.mode == oncerpc_core::Mode::Production;
    let mut out = Vec::new();
    for tool in listed_tools {
        let Some(name) = tool["name"].as_str() else { continue };
        if !link.allow.is_match(name) {
            continue;
        }
        let kind = kind(spec, tool);
        let mut json = match listed(spec, tool, kind) {
            Ok(json) => json,
            Err(e) => {
                tracing::warn!(upstream = %spec.name, tool = %oncerpc_core::LogSafe(name), error = %e, "MCP upstream tool not offered");
                continue;
            }
        };
        // `x-mcp-header` arguments of the upstream's schema: over HTTP in the stateless
        // revision they come as `Mcp-Param-*` headers too, checked.
        let header_params = oncerpc_mcp::tools::header_params(&json["inputSchema"]);
        let exported = json["name"].as_str().unwrap_or_default().to_owned();
        let own = method_name(spec, name);
        if taken.contains(&exported) {
            tracing::warn!(upstream = %spec.name, tool = %oncerpc_core::LogSafe(name), exported = %oncerpc_core::LogSafe(&exported), "MCP upstream tool not offered: one of oncerpc's own tools has its name (give the upstream a prefix)");
            continue;
        }
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
        // In production a command without a key is refused: its schema says the key is required
        // (unless the tool derives its key from the call), as the registry's commands' do.
        if kind == Kind::Command && production && method.derive_key_window.is_none() {
            oncerpc_mcp::tools::require_key(&mut json["inputSchema"]);
        }
        let handler = UpstreamTool { link: link.clone(), tool: name.to_owned() };
        match dispatcher.external_method(&own, method, Arc::new(handler)) {
            Ok(method) => out.push(ExternalTool {
                // A command may run as oncerpc's task (an event calling the upstream once);
                // a query answers inline. The upstream's own tasks are not used.
                tool: Tool {
                    name: exported,
                    method: own,
                    array_argument: None,
                    kind,
                    json,
                    task_required: false,
                    execution: serde_json::json!({
                        "taskSupport": if kind == Kind::Command { "optional" } else { "forbidden" }
                    }),
                    header_params,
                    scopes,
                    asks: false,
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
