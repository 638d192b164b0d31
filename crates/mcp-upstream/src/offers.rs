//! An upstream's resources, resource templates and prompts, offered on oncerpc's door beside
//! its tools ([`oncerpc_mcp::offers`]): listed when it connects and again when it says
//! `notifications/resources/list_changed` or `…/prompts/list_changed`; `resources/read`,
//! `prompts/get` and `completion/complete` forwarded to it ([`Forwarder`]) under its own names
//! and oncerpc's credentials, within its `timeout_ms` and `max_in_flight`, as a tool call is.
//!
//! A prompt is exported as a tool is named (the prefix before it, model-safe unless
//! `tool_names = "method"`); a resource keeps its URI (see the door's module for why). The
//! upstream's `scopes` apply to all of it.

use std::sync::Arc;

use oncerpc_core::BoxFuture;
use oncerpc_mcp::External;
use oncerpc_mcp::offers::{Item, Offer, Source};
use oncerpc_protocol::{ErrorCode, RpcError};
use serde_json::{Value, json};

use crate::client::Connection;
use crate::errors::{failed, timed_out};
use crate::link::Link;
use crate::shared::{Era, Failure, Headers};

/// The longest text of an upstream's error passed on to the client (cut at a character).
const MAX_ERROR_TEXT: usize = 512;

/// Forwards requests to one upstream (its link).
pub(crate) struct Forwarder(pub(crate) Arc<Link>);

impl Source for Forwarder {
    fn forward<'a>(&'a self, method: &'a str, params: Value) -> BoxFuture<'a, Result<Value, RpcError>> {
        Box::pin(forward(&self.0, method, params))
    }
}

async fn forward(link: &Link, method: &str, params: Value) -> Result<Value, RpcError> {
    let name = &link.spec.name;
    let Some(connection) = link.connection() else {
        return Err(failed(name, "not connected"));
    };
    // The stateless revision's HTTP requests name the resource or prompt (`Mcp-Name`).
    let headers = match connection.era() {
        Era::Stateless => Headers {
            name: params.get("uri").or(params.get("name")).and_then(Value::as_str).map(str::to_owned),
            params: Vec::new(),
        },
        Era::Session(_) => Headers::default(),
    };
    let asking = async {
        let _permit = link.limit.acquire().await;
        connection.forward(method, params, headers).await
    };
    match tokio::time::timeout(link.spec.timeout, asking).await {
        Ok(Ok(result)) => Ok(result),
        // The upstream's own refusal (an unknown URI or prompt, a bad argument; servers use
        // -32602, -32002 or no code of the table): the client reads it as a refusal of its
        // request, never under one of oncerpc's own codes. An internal error is a failure.
        Ok(Err(Failure::Error { code, message })) if code != -32603 => {
            let said = shortened(&message);
            Err(RpcError::with_message(
                ErrorCode::InvalidParams,
                format!("MCP upstream {name:?} refused it: {said}"),
            ))
        }
        Ok(Err(e)) => {
            tracing::warn!(upstream = %name, mcp_method = %method, error = %oncerpc_core::LogSafe(&e.to_string()), "MCP upstream request failed");
            Err(failed(name, "the request did not complete"))
        }
        Err(_) => Err(timed_out(name, link.spec.timeout.as_millis())),
    }
}

/// What the upstream's error said, cut at [`MAX_ERROR_TEXT`] bytes (at a character).
fn shortened(message: &str) -> String {
    let cut =
        (0..=MAX_ERROR_TEXT.min(message.len())).rev().find(|&i| message.is_char_boundary(i)).unwrap_or(0);
    let more = if cut < message.len() { "…" } else { "" };
    format!("{}{more}", &message[..cut])
}

/// List the upstream's resources, templates and prompts (those its capabilities declare) and
/// offer them; a kind whose listing fails keeps what it offered.
pub(crate) async fn publish(link: &Arc<Link>, connection: &Connection, external: &External) {
    let spec = &link.spec;
    let offers = external.offers();
    let before = offers_of(external, &spec.name);
    let list = |method: &'static str, member: &'static str, capability: &'static str| async move {
        if !connection.offers(capability) {
            return Some(Vec::new());
        }
        match tokio::time::timeout(spec.timeout, connection.list(method, member)).await {
            Ok(Ok(items)) => Some(items),
            Ok(Err(e)) => {
                tracing::warn!(upstream = %spec.name, mcp_method = method, error = %oncerpc_core::LogSafe(&e.to_string()), "MCP upstream: listing failed");
                None
            }
            Err(_) => {
                tracing::warn!(upstream = %spec.name, mcp_method = method, "MCP upstream: listing timed out");
                None
            }
        }
    };
    let keyed = |items: Vec<Value>, key: &str| -> Vec<Item> {
        items
            .into_iter()
            .filter_map(|json| {
                let own = json[key].as_str()?.to_owned();
                Some(Item { json, own })
            })
            .collect()
    };
    let resources = list("resources/list", "resources", "resources").await;
    let templates = list("resources/templates/list", "resourceTemplates", "resources").await;
    let prompts = list("prompts/list", "prompts", "prompts").await;
    let offer = Offer {
        resources: resources.map_or(before.resources, |r| keyed(r, "uri")),
        templates: templates.map_or(before.templates, |t| keyed(t, "uriTemplate")),
        prompts: prompts.map_or(before.prompts, |p| exported_prompts(link, p)),
        completions: connection.offers("completions"),
        scopes: spec.scopes.clone(),
    };
    tracing::info!(
        upstream = %spec.name,
        resources = offer.resources.len(),
        templates = offer.templates.len(),
        prompts = offer.prompts.len(),
        "MCP upstream resources and prompts listed"
    );
    offers.set(&spec.name, offer, Arc::new(Forwarder(link.clone())));
}

/// What `source` offers now (kept while one kind cannot be listed again).
fn offers_of(external: &External, source: &str) -> Offer {
    external.offers().offer(source).unwrap_or_default()
}

/// The upstream's prompts under their exported names (a name model APIs would refuse is not
/// offered, logged).
fn exported_prompts(link: &Link, prompts: Vec<Value>) -> Vec<Item> {
    let spec = &link.spec;
    let mut out = Vec::new();
    for mut json in prompts {
        let Some(own) = json["name"].as_str().map(str::to_owned) else { continue };
        let prefixed = crate::names::method_name(spec, &own);
        match spec.tool_names.tool_name(&prefixed) {
            Ok(name) => {
                if name != prefixed && !json["title"].is_string() {
                    json["title"] = json!(prefixed);
                }
                json["name"] = json!(name);
                out.push(Item { json, own });
            }
            Err(e) => {
                tracing::warn!(upstream = %spec.name, prompt = %oncerpc_core::LogSafe(&own), error = %e, "MCP upstream prompt not offered")
            }
        }
    }
    out
}
