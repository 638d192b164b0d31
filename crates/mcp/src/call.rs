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
use oncerpc_protocol::{ErrorCode, Id, Outcome, RawValue, Request, RpcError};
use serde_json::Value;

use crate::cancel::Inflight;
use crate::{Outbox, Session, Tools};

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

/// The members of `tools/call` params this door reads, as raw JSON: one pass over the
/// params, and the arguments passed on byte for byte (no tree built and printed again).
#[derive(serde::Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(rename = "_meta", borrow)]
    meta: Option<&'a RawValue>,
}

/// The members of a call's `_meta` this door reads.
#[derive(serde::Deserialize)]
struct CallMeta<'a> {
    #[serde(rename = "io.oncerpc/idempotency-key", borrow)]
    key: Option<&'a RawValue>,
    #[serde(rename = "io.oncerpc/force-retry", borrow)]
    force_retry: Option<&'a RawValue>,
    #[serde(rename = "progressToken", borrow)]
    progress_token: Option<&'a RawValue>,
    /// W3C Trace Context, where the transport has no headers (stdio) or to override them.
    #[serde(borrow)]
    traceparent: Option<&'a RawValue>,
    #[serde(borrow)]
    tracestate: Option<&'a RawValue>,
}

fn starts_with(raw: &RawValue, c: char) -> bool {
    raw.get().trim_start().starts_with(c)
}

/// Read a `tools/call` request (see the module's notes on keys).
pub(crate) fn prepare<'t>(
    tools: &'t Tools,
    req: &Request<'_>,
    id: Id<'_>,
    session: &Session,
    outbox: Option<&Outbox>,
) -> Result<Prepared<'t>, RpcError> {
    let not_object = || RpcError::new(ErrorCode::InvalidParams).reason("params must be an object");
    let params: CallParams<'_> = match req.params {
        None => CallParams { name: None, arguments: None, meta: None },
        Some(raw) if starts_with(raw, '{') => serde_json::from_str(raw.get())
            .map_err(|e| RpcError::invalid_params(format!("invalid tools/call params: {e}")))?,
        Some(_) => return Err(not_object()),
    };
    let name: String = match params.name.filter(|n| starts_with(n, '"')) {
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|_| RpcError::invalid_params("tools/call needs the tool's name"))?,
        None => return Err(RpcError::invalid_params("tools/call needs the tool's name")),
    };
    let Some(tool) = tools.get(&name) else {
        return Err(RpcError::invalid_params(format!("Unknown tool: {}", oncerpc_core::LogSafe(&name))));
    };
    let arguments = match params.arguments {
        None => RawValue::from_string("{}".to_owned()).map_err(RpcError::internal)?,
        Some(a) if a.get().trim() == "null" => {
            RawValue::from_string("{}".to_owned()).map_err(RpcError::internal)?
        }
        Some(a) if starts_with(a, '{') => a.to_owned(),
        Some(_) => return Err(RpcError::invalid_params("arguments must be an object")),
    };
    let meta: Option<CallMeta<'_>> = match params.meta.filter(|m| starts_with(m, '{')) {
        Some(raw) => Some(
            serde_json::from_str(raw.get())
                .map_err(|e| RpcError::invalid_params(format!("invalid _meta: {e}")))?,
        ),
        None => None,
    };
    let meta_key = match meta.as_ref().and_then(|m| m.key) {
        None => None,
        Some(raw) if raw.get().trim() == "null" => None,
        Some(raw) if starts_with(raw, '"') => Some(
            serde_json::from_str::<String>(raw.get())
                .map_err(|_| RpcError::invalid_params(format!("_meta[\"{META_KEY}\"] must be a string")))?,
        ),
        Some(_) => return Err(RpcError::invalid_params(format!("_meta[\"{META_KEY}\"] must be a string"))),
    };
    let key = match meta_key {
        None => session.key_header.clone(),
        Some(k) if session.key_header.as_deref().is_some_and(|h| h != k) => {
            return Err(RpcError::invalid_params(format!(
                "invalid idempotency key: _meta[\"{META_KEY}\"] and the Idempotency-Key header differ"
            )));
        }
        Some(k) => Some(Arc::from(k)),
    };
    let force_retry = meta.as_ref().and_then(|m| m.force_retry).is_some_and(|f| f.get().trim() == "true");
    let token = meta
        .as_ref()
        .and_then(|m| m.progress_token)
        .and_then(|t| serde_json::from_str::<Value>(t.get()).ok())
        .filter(|t| t.is_string() || t.is_number());
    let progress = crate::notify::progress(outbox, token, session.log_level.as_deref(), &name);
    // A string that is not a valid `traceparent` is ignored, like a malformed header.
    let text = |raw: Option<&RawValue>| raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok());
    let trace = match meta.as_ref().and_then(|m| text(m.traceparent)) {
        Some(tp) => {
            oncerpc_core::TraceContext::parse(&tp, text(meta.as_ref().and_then(|m| m.tracestate)).as_deref())
        }
        None => session.trace.clone(),
    };
    let meta = RequestMeta {
        tenant: session.tenant.clone(),
        trace,
        idempotency_key: key,
        force_retry,
        correlation_id: id.text().map(|t| Arc::from(&*t)),
        progress,
        key_headers: session.key_headers.clone(),
        ..RequestMeta::default()
    };
    Ok(Prepared { name, tool, arguments, meta })
}

/// A tool result: the method's result as one text item and as `structuredContent` (itself
/// when an object, else `{"result": …}`); an error as `isError: true` with its message as the
/// text and `{code, message, data}` as `structuredContent`. The result's bytes are kept: a
/// duplicate's content is the stored result, byte for byte.
pub fn tool_result(outcome: &Outcome, info: Option<&IdempotencyInfo>, cid: &str) -> String {
    // Written straight into one buffer: this is every call's answer.
    let mut out = Vec::with_capacity(256);
    let text = |out: &mut Vec<u8>, s: &str| {
        // Writing a str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    };
    out.extend_from_slice(br#"{"content":[{"type":"text","text":"#);
    match outcome {
        Outcome::Result(raw) => {
            let result = raw.get();
            text(&mut out, result);
            out.extend_from_slice(br#"}],"structuredContent":"#);
            if result.trim_start().starts_with('{') {
                out.extend_from_slice(result.as_bytes());
            } else {
                out.extend_from_slice(br#"{"result":"#);
                out.extend_from_slice(result.as_bytes());
                out.push(b'}');
            }
            out.extend_from_slice(br#","isError":false"#);
        }
        Outcome::Error(e) => {
            text(&mut out, &e.message);
            out.extend_from_slice(br#"}],"structuredContent":"#);
            out.extend_from_slice(e.to_json().get().as_bytes());
            out.extend_from_slice(br#","isError":true"#);
        }
    }
    // `_meta`, its members in name order.
    out.extend_from_slice(br#","_meta":{""#);
    out.extend_from_slice(META_CORRELATION.as_bytes());
    out.extend_from_slice(br#"":"#);
    text(&mut out, cid);
    if let Some(info) = info {
        out.extend_from_slice(br#",""#);
        out.extend_from_slice(META_KEY.as_bytes());
        out.extend_from_slice(br#"":"#);
        text(&mut out, &info.key);
        out.extend_from_slice(br#",""#);
        out.extend_from_slice(META_STATUS.as_bytes());
        out.extend_from_slice(br#"":""#);
        out.extend_from_slice(info.status.as_str().as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b"}}");
    // Only JSON text and valid UTF-8 went in.
    String::from_utf8(out).unwrap_or_default()
}
