//! What the request's headers say about it, for the dispatcher: the idempotency key
//! (`X-Idempotency-Key` / `Idempotency-Key`), force retry, the correlation id, the W3C trace
//! context (`traceparent`, `tracestate`), and the values
//! of the headers a method's `key_header` names. Every door that takes HTTP reads them here.

use std::sync::Arc;

use axum::http::HeaderMap;
use oncerpc_core::RequestMeta;
use oncerpc_protocol::RpcError;

use crate::{AppState, CORRELATION_HEADER, FORCE_RETRY_HEADER, IETF_KEY_HEADER, KEY_HEADER};

/// Idempotency key, force retry and correlation id from the headers, and the values of the
/// headers a method's `key_header` names; the tenant as authenticated.
pub(crate) fn request_meta(
    st: &AppState,
    headers: &HeaderMap,
    tenant: Arc<str>,
) -> Result<RequestMeta, RpcError> {
    let mut meta = RequestMeta { tenant, ..RequestMeta::default() };
    for name in &st.key_headers {
        if let Some(v) = headers.get(&**name) {
            // A value that is not visible ASCII breaks the key format: the engine hashes it.
            let v = String::from_utf8_lossy(v.as_bytes());
            meta.key_headers.push((name.clone(), Arc::from(v.as_ref())));
        }
    }
    let mut key: Option<&str> = None;
    for name in [KEY_HEADER, IETF_KEY_HEADER] {
        if let Some(v) = headers.get(name) {
            let v = v
                .to_str()
                .map_err(|_| RpcError::invalid_params(oncerpc_core::idempotency::MSG_INVALID_CHARS))?;
            if key.is_some_and(|k| k != v) {
                return Err(RpcError::invalid_params(
                    "invalid idempotency key: X-Idempotency-Key and Idempotency-Key differ",
                ));
            }
            key = Some(v);
        }
    }
    meta.idempotency_key = key.map(Arc::from);
    if let Some(v) = headers.get(FORCE_RETRY_HEADER) {
        meta.force_retry = match v.to_str().map(str::trim) {
            Ok(v) if v.eq_ignore_ascii_case("true") => true,
            Ok(v) if v.eq_ignore_ascii_case("false") => false,
            _ => return Err(RpcError::invalid_params("invalid X-Force-Retry header: use true or false")),
        };
    }
    // W3C Trace Context: a malformed `traceparent` is ignored (the request starts no trace).
    if let Some(tp) = headers.get("traceparent").and_then(|v| v.to_str().ok()) {
        let state = headers.get("tracestate").and_then(|v| v.to_str().ok());
        meta.trace = oncerpc_core::TraceContext::parse(tp, state);
    }
    meta.correlation_id = headers
        .get(CORRELATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 200)
        .map(Arc::from);
    Ok(meta)
}
