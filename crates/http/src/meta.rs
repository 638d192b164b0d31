//! What the request's headers say about it, for the dispatcher: the idempotency key
//! (`X-Idempotency-Key` / `Idempotency-Key`), force retry, the correlation id, the W3C trace
//! context (`traceparent`, `tracestate`), and the values
//! of the headers a method's `key_header` names. Every door that takes HTTP reads them here.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue};
use oncerpc_core::RequestMeta;
use oncerpc_protocol::RpcError;

use crate::{AppState, CORRELATION_HEADER, FORCE_RETRY_HEADER, IETF_KEY_HEADER, KEY_HEADER};

/// Idempotency key, force retry and correlation id from the headers, and the values of the
/// headers a method's `key_header` names; the tenant and grant as authenticated.
pub(crate) fn request_meta(
    st: &AppState,
    headers: &HeaderMap,
    caller: crate::Caller,
) -> Result<RequestMeta, RpcError> {
    let mut meta = RequestMeta::of_tenant(caller.tenant);
    meta.grant = caller.grant;
    meta.subject = caller.subject;
    for name in &st.key_headers {
        if let Some(v) = headers.get(&**name) {
            // A value that is not visible ASCII breaks the key format: the engine hashes it.
            let v = String::from_utf8_lossy(v.as_bytes());
            meta.key_headers.push((name.clone(), Arc::from(v.as_ref())));
        }
    }
    let seen = Seen::scan(headers);
    let mut key: Option<&str> = None;
    for v in [seen.key, seen.ietf_key].into_iter().flatten() {
        let v =
            v.to_str().map_err(|_| RpcError::invalid_params(oncerpc_core::idempotency::MSG_INVALID_CHARS))?;
        if key.is_some_and(|k| k != v) {
            return Err(RpcError::invalid_params(
                "invalid idempotency key: X-Idempotency-Key and Idempotency-Key differ",
            ));
        }
        key = Some(v);
    }
    meta.idempotency_key = key.map(Arc::from);
    if let Some(v) = seen.force_retry {
        meta.force_retry = match v.to_str().map(str::trim) {
            Ok(v) if v.eq_ignore_ascii_case("true") => true,
            Ok(v) if v.eq_ignore_ascii_case("false") => false,
            _ => return Err(RpcError::invalid_params("invalid X-Force-Retry header: use true or false")),
        };
    }
    // W3C Trace Context: a malformed `traceparent` is ignored (the request starts no trace).
    if let Some(tp) = seen.traceparent.and_then(|v| v.to_str().ok()) {
        let state = seen.tracestate.and_then(|v| v.to_str().ok());
        meta.trace = oncerpc_core::TraceContext::parse(tp, state);
    }
    meta.correlation_id = seen
        .correlation
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 200)
        .map(Arc::from);
    Ok(meta)
}

/// The first value of each header [`request_meta`] reads, found in one pass over the map: a
/// lookup by name hashes the name and probes the map (~360 instructions each, six of them per
/// request), where a pass compares the few names a request carries.
#[derive(Default)]
struct Seen<'a> {
    key: Option<&'a HeaderValue>,
    ietf_key: Option<&'a HeaderValue>,
    force_retry: Option<&'a HeaderValue>,
    traceparent: Option<&'a HeaderValue>,
    tracestate: Option<&'a HeaderValue>,
    correlation: Option<&'a HeaderValue>,
}

impl<'a> Seen<'a> {
    fn scan(headers: &'a HeaderMap) -> Self {
        let mut seen = Seen::default();
        for (name, value) in headers {
            // `HeaderMap::get` answers a name's first value; so does this.
            let slot = match name.as_str() {
                KEY_HEADER => &mut seen.key,
                IETF_KEY_HEADER => &mut seen.ietf_key,
                FORCE_RETRY_HEADER => &mut seen.force_retry,
                "traceparent" => &mut seen.traceparent,
                "tracestate" => &mut seen.tracestate,
                CORRELATION_HEADER => &mut seen.correlation,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderName;

    #[test]
    fn one_pass_finds_what_a_lookup_by_name_finds() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("example"));
        h.append(KEY_HEADER, HeaderValue::from_static("first"));
        h.append(KEY_HEADER, HeaderValue::from_static("second"));
        h.insert(IETF_KEY_HEADER, HeaderValue::from_static("ietf"));
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.append("traceparent", HeaderValue::from_static("tp-1"));
        h.append("traceparent", HeaderValue::from_static("tp-2"));
        h.insert(HeaderName::from_static(CORRELATION_HEADER), HeaderValue::from_static("cid"));
        let seen = Seen::scan(&h);
        for (name, got) in [
            (KEY_HEADER, seen.key),
            (IETF_KEY_HEADER, seen.ietf_key),
            (FORCE_RETRY_HEADER, seen.force_retry),
            ("traceparent", seen.traceparent),
            ("tracestate", seen.tracestate),
            (CORRELATION_HEADER, seen.correlation),
        ] {
            assert_eq!(got, h.get(name), "{name}");
        }
        assert_eq!(seen.key.unwrap(), "first");
        assert_eq!(seen.traceparent.unwrap(), "tp-1");
        assert!(seen.force_retry.is_none());
    }
}
