//! The REST door (SPEC §4, §14): `POST /v2/flows/{flow}`, `GET /v2/events/{event_id}`,
//! `GET /v2/events` (the tenant's events, filtered, a page at a time) and
//! `POST /v2/events/{event_id}/retry` (re-drive a failed event).
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
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use oncerpc_core::IdempotencyStatus;
use oncerpc_core::journal::StepView;
use oncerpc_core::store::{Event, EventFilter, EventStatus, StoreError, StoredOutcome, parse_list_cursor};
use oncerpc_protocol::{ErrorCode, Outcome, RawValue, RpcError};
use serde_json::json;

use crate::{
    AppState, CORRELATION_HEADER, Door, idempotency_headers, json_response, query_param, read_body,
    request_meta,
};

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
    // A scope the caller lacks (SPEC §20): the challenge names what the method requires.
    let challenge = (err.code == ErrorCode::Forbidden)
        .then(|| crate::challenge_of(&json!({ "code": err.code.code(), "data": body["data"] })))
        .flatten();
    let mut resp = json_response(status, body.to_string(), Some(cid));
    if let Some(c) = challenge {
        resp.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, c);
    }
    resp
}

fn plain_error(status: StatusCode, message: impl Into<String>, cid: &str) -> Response {
    let body = json!({ "code": status.as_u16().to_string(), "message": message.into() });
    json_response(status, body.to_string(), Some(cid))
}

pub(crate) async fn missing_flow(State(st): State<Arc<AppState>>, uri: Uri, headers: HeaderMap) -> Response {
    if let Err(resp) = st.authenticate(Door::Flows, &headers, uri.query()).await {
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
    // in-flight permit (SPEC §12).
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
    // recorded (SPEC §15). A verified method that names its tenant needs no API key.
    let verified = match st.config.webhooks.check(&flow, &headers, &bytes, &body_cid) {
        Ok(v) => v,
        Err(resp) => return *resp,
    };
    let preauth = verified.as_ref().and_then(|v| v.tenant.clone());
    let (_admitted, caller) = match st.guard_as(Door::Flows, &headers, uri.query(), preauth).await {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let mut meta = match request_meta(&st, &headers, caller) {
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
                // The nesting limit of `/rpc` (SPEC §12), before anything runs or is forwarded:
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
            // Still running (SPEC §4): 200 {} with status processing.
            Outcome::Error(e) if e.code == ErrorCode::RequestInProgress => {
                json_response(StatusCode::OK, "{}", Some(&cid))
            }
            Outcome::Error(e) => call_error(&st, &e, &cid),
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
        Err(e) => call_error(&st, &e, &cid),
    }
}

/// A flow call's error, a scope the caller lacks counted as such (SPEC §20).
fn call_error(st: &AppState, e: &RpcError, cid: &str) -> Response {
    if e.code == ErrorCode::Forbidden {
        st.auth_refused("insufficient_scope");
    }
    error_response(e, cid)
}

pub(crate) async fn event(
    State(st): State<Arc<AppState>>,
    Path(event_id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let (_admitted, caller) = match st.guard(Door::Flows, &headers, uri.query()).await {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let tenant = caller.tenant;
    let cid = oncerpc_core::generated_id();
    match tenant_event(&st, &tenant, &event_id, &cid).await {
        Ok(event) => json_response(StatusCode::OK, event_view(&event).to_string(), Some(&cid)),
        Err(resp) => resp,
    }
}

/// The one JSON view of an event: `GET /v2/events/{id}` and every item of `GET /v2/events`.
fn event_view(event: &Event) -> serde_json::Value {
    let mut body = json!({
        "event_id": event.id,
        "flow": &*event.record.method,
        "status": event.status.as_str(),
        "tags": event.tags,
        "created_at": rfc3339(event.created_at_ms),
        "updated_at": rfc3339(event.updated_at_ms),
        // Who submitted it (a token's `sub`, a scoped key's `name`); null for a plain API key.
        "created_by": event.created_by,
        "steps": step_views(event),
    });
    match (&event.status, &event.outcome) {
        (EventStatus::Succeeded, Some(StoredOutcome::Succeeded(r))) => {
            body["result"] = serde_json::from_str(r).unwrap_or(serde_json::Value::Null);
        }
        (EventStatus::Failed | EventStatus::Cancelled, Some(StoredOutcome::Failed(e))) => {
            body["error"] = serde_json::from_str(e).unwrap_or(serde_json::Value::Null);
        }
        _ => {}
    }
    body
}

/// Each step the execution reached: `name`, `status` (running, succeeded, failed),
/// `attempts`, `started_at` and, once it ended, `finished_at`; `[]` before the first step.
fn step_views(event: &Event) -> serde_json::Value {
    let views: Vec<StepView> =
        event.steps.as_deref().and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
    views
        .iter()
        .map(|v| {
            let mut step = json!({
                "name": v.name,
                "status": v.status,
                "attempts": v.attempts,
                "started_at": rfc3339(v.started_at_ms),
            });
            if let Some(done) = v.finished_at_ms {
                step["finished_at"] = json!(rfc3339(done));
            }
            step
        })
        .collect()
}

/// The event `event_id` if it is `tenant`'s; otherwise the answer: `404` (another tenant's
/// event is as unknown as a missing one) or the store's `503`.
async fn tenant_event(st: &AppState, tenant: &str, event_id: &str, cid: &str) -> Result<Event, Response> {
    match st.dispatcher.store().get_event(event_id).await {
        Ok(Some(e)) if &*e.record.tenant == tenant => Ok(e),
        Ok(_) => Err(plain_error(StatusCode::NOT_FOUND, format!("unknown event: {event_id}"), cid)),
        Err(e) => Err(store_unavailable(&e, cid)),
    }
}

fn store_unavailable(e: &StoreError, cid: &str) -> Response {
    tracing::error!(error = %e, "event store unavailable");
    error_response(&RpcError::new(ErrorCode::StoreUnavailable), cid)
}

/// Events per page of `GET /v2/events` unless `limit` says otherwise, and the most it may say.
const DEFAULT_LIST_LIMIT: usize = 50;
pub(crate) const MAX_LIST_LIMIT: usize = 200;

/// `GET /v2/events?status=&flow=&tag=&limit=&cursor=` (SPEC §14): the tenant's events,
/// newest first, `{"events": [...], "next_cursor": "…" | null}`. The cursor is the store's
/// listing cursor in unpadded base64url: opaque to clients, checked when it comes back. An
/// empty parameter counts as absent; unknown parameters are ignored.
pub(crate) async fn list_events(State(st): State<Arc<AppState>>, uri: Uri, headers: HeaderMap) -> Response {
    let resp = list_events_answer(&st, &uri, &headers).await;
    observed(&st, "list", resp)
}

/// Count an events API answer in `oncerpc_event_api_total{op,status}`; this API's own
/// refusals (400, 404, 409) are also logged, once, with the correlation id and status (the
/// body says why to the client; `guard` logs and counts its own 401/429/503).
fn observed(st: &AppState, op: &'static str, resp: Response) -> Response {
    let status = resp.status();
    st.event_api.with_label_values(&[op, status.as_str()]).inc();
    if matches!(status.as_u16(), 400 | 404 | 409) {
        let cid = resp.headers().get(CORRELATION_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("-");
        tracing::info!(correlation_id = %cid, op, status = status.as_u16(), "events API request refused");
    }
    resp
}

async fn list_events_answer(st: &AppState, uri: &Uri, headers: &HeaderMap) -> Response {
    let (_admitted, caller) = match st.guard(Door::Flows, headers, uri.query()).await {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let tenant = caller.tenant;
    let cid = oncerpc_core::generated_id();
    let query = uri.query();
    let param = |name: &str| query_param(query, name).filter(|v| !v.is_empty());
    let bad = |message: String| plain_error(StatusCode::BAD_REQUEST, message, &cid);
    let status = match param("status") {
        None => None,
        Some(s) => match EventStatus::parse(&s) {
            Some(s) => Some(s),
            None => return bad(format!("unknown status: {s} (processing, succeeded, failed or cancelled)")),
        },
    };
    let limit = match param("limit") {
        None => DEFAULT_LIST_LIMIT,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=MAX_LIST_LIMIT).contains(&n) => n,
            _ => return bad(format!("invalid limit: {l} (an integer from 1 to {MAX_LIST_LIMIT})")),
        },
    };
    let cursor = match param("cursor") {
        None => None,
        Some(c) => match decode_cursor(&c) {
            Some(c) => Some(c),
            None => return bad("invalid cursor: pass next_cursor of the previous page as it is".to_owned()),
        },
    };
    let filter = EventFilter { status, method: param("flow"), tag: param("tag") };
    let (page, next) =
        match st.dispatcher.store().list_events(&tenant, &filter, cursor.as_deref(), limit).await {
            Ok(p) => p,
            Err(e) => return store_unavailable(&e, &cid),
        };
    let body = json!({
        "events": page.iter().map(event_view).collect::<Vec<_>>(),
        "next_cursor": next.as_deref().map(encode_cursor),
    });
    json_response(StatusCode::OK, body.to_string(), Some(&cid))
}

fn encode_cursor(cursor: &str) -> String {
    URL_SAFE_NO_PAD.encode(cursor)
}

/// The store's cursor inside an HTTP cursor; `None` for anything the listing did not make.
fn decode_cursor(cursor: &str) -> Option<String> {
    let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    parse_list_cursor(&raw)?;
    Some(raw)
}

/// `POST /v2/events/{id}/retry` (SPEC §14): re-drive a failed event under the same id, as a
/// force retry of its record. `202 {"event_id", "status": "processing"}` once it runs again;
/// `404` for an unknown event or another tenant's; `409` for a succeeded one, one still
/// processing, or one whose flow this gateway does not serve.
pub(crate) async fn retry_event(
    State(st): State<Arc<AppState>>,
    Path(event_id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let resp = retry_event_answer(&st, event_id, &uri, &headers).await;
    observed(&st, "retry", resp)
}

async fn retry_event_answer(st: &AppState, event_id: String, uri: &Uri, headers: &HeaderMap) -> Response {
    let (_admitted, caller) = match st.guard(Door::Flows, headers, uri.query()).await {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let tenant = caller.tenant;
    let cid = oncerpc_core::generated_id();
    let event = match tenant_event(st, &tenant, &event_id, &cid).await {
        Ok(e) => e,
        Err(resp) => return resp,
    };
    let flow = event.record.method.clone();
    // A re-drive runs the method again: the caller must hold its scopes (SPEC §20).
    if let Some(spec) = st.dispatcher.registry().spec(&flow)
        && let Some(missing) = caller.grant.lacks(&spec.scopes)
    {
        st.auth_refused("insufficient_scope");
        return error_response(&oncerpc_core::grant::forbidden(&flow, &spec.scopes, missing), &cid);
    }
    // `status`: what the event is, when the refusal says (read the event for the rest).
    let conflict = |status: Option<&str>, message: String| {
        let mut body = json!({ "code": "409", "message": message, "event_id": event_id });
        if let Some(s) = status {
            body["status"] = json!(s);
        }
        json_response(StatusCode::CONFLICT, body.to_string(), Some(&cid))
    };
    match st.dispatcher.redrive(event, cid.clone(), caller.subject.as_deref()).await {
        Ok(IdempotencyStatus::New) => {
            let body = json!({ "event_id": event_id, "status": "processing" });
            json_response(StatusCode::ACCEPTED, body.to_string(), Some(&cid))
        }
        Ok(IdempotencyStatus::Processing) => conflict(
            Some("processing"),
            "the event is still processing: only a failed event can be retried".into(),
        ),
        Ok(IdempotencyStatus::Duplicate) => {
            conflict(None, "the event's record holds a finished outcome that a retry does not re-run".into())
        }
        Err(e) if e.code == ErrorCode::ForceRetryRefused => {
            conflict(Some("succeeded"), "the event succeeded: only a failed event can be retried".into())
        }
        Err(e) if e.code == ErrorCode::MethodNotFound => {
            conflict(Some("failed"), format!("the event's flow is not served by this gateway: {flow}"))
        }
        Err(e) => error_response(&e, &cid),
    }
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}
