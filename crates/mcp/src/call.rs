//! `tools/call`: one call through the dispatcher, and its answer as an MCP tool result.
//!
//! The arguments are the method's params. The key: `_meta["io.oncerpc/idempotency-key"]`,
//! else `arguments.idempotency_key` (a reserved member, as on `/rpc`: not part of the
//! fingerprint), else the transport's key header, else the method's own key rule; two given
//! and different is an invalid call.
//! So a command sent over `/rpc` and retried over MCP with the same key, tenant and arguments
//! is a duplicate. `_meta["io.oncerpc/force-retry"]: true` re-runs a failed one.

use std::sync::Arc;

use oncerpc_core::{Dispatcher, IdempotencyInfo, Kind, RequestMeta};
use oncerpc_protocol::{Id, Outcome, RawValue, Request, RpcError};
use serde_json::{Map, Value, json};

use crate::cancel::Inflight;
use crate::{Outbox, Session, Tools, params_object};

/// `_meta` member carrying the idempotency key, on calls and on results.
pub const META_KEY: &str = "io.oncerpc/idempotency-key";
/// `_meta` member of a result: `new`, `duplicate` or `processing`.
pub const META_STATUS: &str = "io.oncerpc/idempotency-status";
/// `_meta` member of a result: the correlation id of the call (in the logs too).
pub const META_CORRELATION: &str = "io.oncerpc/correlation-id";
/// `_meta` member of a call: force-retry a failed execution.
pub const META_FORCE: &str = "io.oncerpc/force-retry";

/// Run a `tools/call` request; the JSON text of its result, and whether it is an error
/// result (`isError: true`). `None`: the client cancelled it (a query; a command runs on).
pub async fn call(
    dispatcher: &Dispatcher,
    tools: &Tools,
    req: &Request<'_>,
    id: Id<'_>,
    session: &Session,
    outbox: Option<&Outbox>,
    inflight: &Inflight,
) -> Result<Option<(String, bool)>, RpcError> {
    let Prepared { name, tool, arguments, meta: request } = prepare(tools, req, id, session, outbox)?;
    let calling = dispatcher.call(&name, Some(&arguments), &request);
    // A query may be cancelled: it stops. A command runs on and stores its outcome.
    let registered = match tool.kind {
        Kind::Query => inflight.register(&session.tenant, session.id.as_deref().unwrap_or(""), id.raw()),
        Kind::Command => None,
    };
    let (outcome, info, cid) = match registered {
        None => calling.await,
        Some(mut r) => tokio::select! {
            done = calling => done,
            Ok(()) = &mut r.cancelled => return Ok(None),
        },
    };
    Ok(Some((tool_result(&outcome, info.as_ref(), &cid), outcome.is_error())))
}

/// A `tools/call` request read: the tool, its arguments (the method's params) and the
/// dispatcher's request (tenant, key, force retry, correlation id, progress).
pub(crate) struct Prepared<'t> {
    pub name: String,
    pub tool: &'t crate::tools::Tool,
    pub arguments: Box<RawValue>,
    pub meta: RequestMeta,
}

/// Read a `tools/call` request (see the module's notes on keys).
pub(crate) fn prepare<'t>(
    tools: &'t Tools,
    req: &Request<'_>,
    id: Id<'_>,
    session: &Session,
    outbox: Option<&Outbox>,
) -> Result<Prepared<'t>, RpcError> {
    let mut params = params_object(req)?;
    let name = match params.get("name") {
        Some(Value::String(n)) => n.clone(),
        _ => return Err(RpcError::invalid_params("tools/call needs the tool's name")),
    };
    let Some(tool) = tools.get(&name) else {
        return Err(RpcError::invalid_params(format!("Unknown tool: {}", oncerpc_core::LogSafe(&name))));
    };
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(a @ Value::Object(_)) => a,
        Some(_) => return Err(RpcError::invalid_params("arguments must be an object")),
    };
    let meta = params.get("_meta").and_then(Value::as_object);
    let key = match meta.and_then(|m| m.get(META_KEY)) {
        None | Some(Value::Null) => session.key_header.clone(),
        Some(Value::String(k)) if session.key_header.as_deref().is_some_and(|h| h != k) => {
            return Err(RpcError::invalid_params(format!(
                "invalid idempotency key: _meta[\"{META_KEY}\"] and the Idempotency-Key header differ"
            )));
        }
        Some(Value::String(k)) => Some(Arc::from(k.as_str())),
        Some(_) => return Err(RpcError::invalid_params(format!("_meta[\"{META_KEY}\"] must be a string"))),
    };
    let force_retry = meta.and_then(|m| m.get(META_FORCE)).and_then(Value::as_bool).unwrap_or(false);
    let token = meta.and_then(|m| m.get("progressToken")).filter(|t| t.is_string() || t.is_number()).cloned();
    let progress = crate::notify::progress(outbox, token, session.log_level.as_deref(), &name);
    let meta = RequestMeta {
        tenant: session.tenant.clone(),
        idempotency_key: key,
        force_retry,
        correlation_id: id.text().map(|t| Arc::from(&*t)),
        progress,
        key_headers: session.key_headers.clone(),
        ..RequestMeta::default()
    };
    let arguments = RawValue::from_string(arguments.to_string()).map_err(RpcError::internal)?;
    Ok(Prepared { name, tool, arguments, meta })
}

/// A tool result: the method's result as one text item and as `structuredContent` (itself
/// when an object, else `{"result": …}`); an error as `isError: true` with its message as the
/// text and `{code, message, data}` as `structuredContent`. The result's bytes are kept: a
/// duplicate's content is the stored result, byte for byte.
pub fn tool_result(outcome: &Outcome, info: Option<&IdempotencyInfo>, cid: &str) -> String {
    let mut meta = Map::new();
    if let Some(info) = info {
        meta.insert(META_KEY.into(), json!(&*info.key));
        meta.insert(META_STATUS.into(), json!(info.status.as_str()));
    }
    meta.insert(META_CORRELATION.into(), json!(cid));
    let meta = Value::Object(meta).to_string();
    match outcome {
        Outcome::Result(raw) => {
            let text = raw.get();
            let quoted = serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into());
            let structured = if text.trim_start().starts_with('{') {
                text.to_owned()
            } else {
                format!(r#"{{"result":{text}}}"#)
            };
            format!(
                r#"{{"content":[{{"type":"text","text":{quoted}}}],"structuredContent":{structured},"isError":false,"_meta":{meta}}}"#
            )
        }
        Outcome::Error(e) => {
            let error = e.to_json();
            let text = serde_json::to_string(&e.message).unwrap_or_else(|_| "\"\"".into());
            format!(
                r#"{{"content":[{{"type":"text","text":{text}}}],"structuredContent":{},"isError":true,"_meta":{meta}}}"#,
                error.get()
            )
        }
    }
}
