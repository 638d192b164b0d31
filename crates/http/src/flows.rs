//! The REST door (DESIGN §4): `POST /v2/flows/{flow}` and `GET /v2/events/{event_id}`.
//!
//! The body is the params. Errors are `{"code":"<http status>","message":"…"}` (plus
//! `rpc_code` and `data` when the JSON-RPC error had them), with the HTTP status of the
//! error-code table (`ErrorCode::http_status`).

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use oncerpc_core::store::{EventStatus, StoredOutcome};
use oncerpc_protocol::{ErrorCode, Outcome, RawValue, RpcError};
use serde_json::json;

use crate::{AppState, Door, idempotency_headers, json_response, query_param, read_body, request_meta};

/// A flows-door error body with its status.
pub(crate) fn error_response(err: &RpcError, cid: &str) -> Response {
    let status = StatusCode::from_u16(err.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = json!({ "code": status.as_u16().to_string(), "message": err.message });
    if let ErrorCode::Application(_) | ErrorCode::UpstreamFailed | ErrorCode::Timeout = err.code {
        body["rpc_code"] = json!(err.code.code());
    }
    if let Some(d) = &err.data {
        body["data"] = serde_json::from_str(d.get()).unwrap_or(serde_json::Value::Null);
    }
    json_response(status, body.to_string(), Some(cid))
}

fn plain_error(status: StatusCode, message: impl Into<String>, cid: &str) -> Response {
    let body = json!({ "code": status.as_u16().to_string(), "message": message.into() });
    json_response(status, body.to_string(), Some(cid))
}

pub(crate) async fn missing_flow(State(st): State<Arc<AppState>>, uri: Uri, headers: HeaderMap) -> Response {
    if let Err(resp) = st.authenticate(&headers, uri.query()) {
        return *resp;
    }
    plain_error(
        StatusCode::BAD_REQUEST,
        "missing flow name: POST /v2/flows/{flow}",
        &oncerpc_core::generated_id(),
    )
}

pub(crate) async fn flow(
    State(st): State<Arc<AppState>>,
    Path(flow): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The body first (bounded by max_body_bytes and body_timeout_ms): waiting for it holds no
    // in-flight permit (DESIGN §12).
    let body_cid = oncerpc_core::generated_id();
    let too_large = |limit: usize| {
        plain_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("body too large: the limit is {limit} bytes"),
            &body_cid,
        )
    };
    let timed_out = || {
        plain_error(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive in time (limits.body_timeout_ms)",
            &body_cid,
        )
    };
    let bytes = match read_body(&st, body, &headers, too_large, timed_out).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    // A signed method's signature first, over the raw bytes, before anything is parsed or
    // recorded (DESIGN §15). A verified method that names its tenant needs no API key.
    let verified = match st.config.webhooks.check(&flow, &headers, &bytes, &body_cid) {
        Ok(v) => v,
        Err(resp) => return *resp,
    };
    let preauth = verified.as_ref().and_then(|v| v.tenant.clone());
    let (_admitted, tenant) = match st.guard_as(Door::Flows, &headers, uri.query(), preauth) {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let mut meta = match request_meta(&st, &headers, tenant) {
        Ok(m) => m,
        Err(e) => return error_response(&e, &oncerpc_core::generated_id()),
    };
    meta.signature_verified = verified.is_some();
    let cid = meta.correlation_id.get_or_insert_with(oncerpc_core::generated_id).clone();
    let query = uri.query();
    if flow.starts_with("rpc.") || st.dispatcher.registry().spec(&flow).is_none() {
        return plain_error(StatusCode::NOT_FOUND, format!("unknown flow: {flow}"), &cid);
    }
    if let Some(step) = query_param(query, "return_step") {
        let known = st.config.flow_steps.get(&flow).is_some_and(|steps| steps.contains(&step));
        if !known {
            return plain_error(StatusCode::BAD_REQUEST, format!("unknown return_step: {step}"), &cid);
        }
        meta.return_step = Some(Arc::from(step));
    }
    let params: Option<&RawValue> = if bytes.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        match serde_json::from_slice::<&RawValue>(&bytes) {
            Ok(p) if matches!(p.get().as_bytes().first(), Some(b'{' | b'[')) => {
                // The nesting limit of `/rpc` (DESIGN §12), before anything runs or is forwarded:
                // the body is the params, which sit one level below a JSON-RPC request's root.
                if oncerpc_protocol::check_depth(p.get(), 1).is_err() {
                    let max = oncerpc_protocol::MAX_DEPTH - 1;
                    return plain_error(
                        StatusCode::BAD_REQUEST,
                        format!("Parse error: the body is nested deeper than {max} levels"),
                        &cid,
                    );
                }
                Some(p)
            }
            Ok(_) => {
                return plain_error(StatusCode::BAD_REQUEST, "the body must be a JSON object or array", &cid);
            }
            Err(e) => return plain_error(StatusCode::BAD_REQUEST, format!("Parse error: {e}"), &cid),
        }
    };
    let sync = query_param(query, "sync").is_some_and(|v| v == "true" || v == "1");
    if sync {
        let (outcome, info, cid) = st.dispatcher.call(&flow, params, &meta).await;
        let mut resp = match outcome {
            Outcome::Result(r) => json_response(StatusCode::OK, r.get().to_owned(), Some(&cid)),
            // Still running (DESIGN §4): 200 {} with status processing.
            Outcome::Error(e) if e.code == ErrorCode::RequestInProgress => {
                json_response(StatusCode::OK, "{}", Some(&cid))
            }
            Outcome::Error(e) => error_response(&e, &cid),
        };
        idempotency_headers(&mut resp, info.as_ref());
        return resp;
    }
    let tags: Vec<String> = query_param(query, "tags")
        .map(|t| t.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    match st.dispatcher.submit(&flow, params, &meta, tags).await {
        Ok(s) => {
            let mut resp =
                json_response(StatusCode::OK, json!({ "event_id": s.event_id }).to_string(), Some(&cid));
            let info = oncerpc_core::IdempotencyInfo {
                key: s.key,
                status: s.status,
                retry_after_ms: None,
                origin: s.key_origin,
            };
            idempotency_headers(&mut resp, Some(&info));
            if s.synthetic_key {
                // The key was made up for a keyless call: it is not the client's to reuse.
                resp.headers_mut().remove(crate::KEY_HEADER);
            }
            resp
        }
        Err(e) => error_response(&e, &cid),
    }
}

pub(crate) async fn event(
    State(st): State<Arc<AppState>>,
    Path(event_id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let (_admitted, tenant) = match st.guard(Door::Flows, &headers, uri.query()) {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let cid = oncerpc_core::generated_id();
    let event = match st.dispatcher.store().get_event(&event_id).await {
        Ok(Some(e)) if e.record.tenant == tenant => e,
        // Another tenant's event is as unknown as a missing one.
        Ok(_) => return plain_error(StatusCode::NOT_FOUND, format!("unknown event: {event_id}"), &cid),
        Err(e) => {
            tracing::error!(error = %e, "event store unavailable");
            return error_response(&RpcError::new(ErrorCode::StoreUnavailable), &cid);
        }
    };
    let mut body = json!({
        "event_id": event.id,
        "flow": &*event.record.method,
        "status": event.status.as_str(),
        "tags": event.tags,
        "created_at": rfc3339(event.created_at_ms),
        "updated_at": rfc3339(event.updated_at_ms),
    });
    match (&event.status, &event.outcome) {
        (EventStatus::Succeeded, Some(StoredOutcome::Succeeded(r))) => {
            body["result"] = serde_json::from_str(r).unwrap_or(serde_json::Value::Null);
        }
        (EventStatus::Failed, Some(StoredOutcome::Failed(e))) => {
            body["error"] = serde_json::from_str(e).unwrap_or(serde_json::Value::Null);
        }
        _ => {}
    }
    json_response(StatusCode::OK, body.to_string(), Some(&cid))
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}
