//! `POST /rpc`: JSON-RPC 2.0 over HTTP.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use oncerpc_core::generated_id;
use oncerpc_protocol::{ErrorCode, RpcError};

use crate::{
    AppState, CORRELATION, Door, FORCE_RETRY_HEADER, idempotency_headers, json_response, read_body,
    request_meta,
};

pub(crate) async fn rpc(State(st): State<Arc<AppState>>, req: Request) -> Response {
    handle(&st, req).await
}

/// `POST /rpc`, from the router or straight from the connection ([`crate::FrontDoor`]). The
/// request is taken whole: axum's `HeaderMap` and `Uri` extractors clone them.
pub(crate) async fn handle(st: &AppState, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let (uri, headers) = (parts.uri, parts.headers);
    // The body first (bounded by max_body_bytes and body_timeout_ms): waiting for it holds no
    // in-flight permit (SPEC §12).
    let bytes = match read_body(st, body, &headers, too_large, timed_out).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let (_admitted, caller) = match st.guard(Door::Rpc, &headers, uri.query()).await {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let meta = match request_meta(st, &headers, caller) {
        Ok(m) => m,
        Err(e) => return bad_request(&e),
    };
    if meta.idempotency_key.is_some() && is_batch(&bytes) {
        // One key for many commands is ambiguous (SPEC §3): keys go in each entry's params.
        return bad_request(&RpcError::with_message(
            ErrorCode::InvalidRequest,
            "an idempotency key header cannot apply to a batch: put params.idempotency_key in each entry",
        ));
    }
    if is_batch(&bytes) && headers.contains_key(FORCE_RETRY_HEADER) {
        // Like the key header: which entries would it force? (SPEC §12)
        return bad_request(&RpcError::with_message(
            ErrorCode::InvalidRequest,
            "the X-Force-Retry header cannot apply to a batch: put params.force_retry in each entry",
        ));
    }
    // Boxed: the dispatch's state machine is large, and the handler's future is moved into
    // hyper's slot for it; a box moves as a pointer.
    let reply = Box::pin(st.dispatcher.handle(&bytes, &meta)).await;
    let mut resp = match reply.body {
        // A single call refused for a scope its caller lacks (SPEC §20): HTTP 403 with the
        // challenge naming what it needs. Only a caller with some scopes can be refused.
        Some(body) if meta.grant != oncerpc_core::Grant::All && !is_batch(&bytes) => {
            match crate::insufficient_scope(&body, |a| a.get("error")) {
                Some(challenge) => {
                    let mut resp = json_response(StatusCode::FORBIDDEN, body, Some(&reply.correlation_id));
                    resp.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, challenge);
                    st.auth_refused("insufficient_scope");
                    resp
                }
                None => json_response(StatusCode::OK, body, Some(&reply.correlation_id)),
            }
        }
        Some(body) => json_response(StatusCode::OK, body, Some(&reply.correlation_id)),
        None => {
            let mut resp = StatusCode::NO_CONTENT.into_response();
            if let Ok(v) = reply.correlation_id.parse() {
                resp.headers_mut().insert(CORRELATION, v);
            }
            resp
        }
    };
    idempotency_headers(&mut resp, reply.idempotency.as_ref());
    resp
}

pub(crate) fn too_large(limit: usize) -> Response {
    let err = RpcError::with_message(
        ErrorCode::InvalidRequest,
        format!("Request body too large: the limit is {limit} bytes (limits.max_body_bytes)"),
    );
    json_response(StatusCode::PAYLOAD_TOO_LARGE, oncerpc_protocol::error_body(&err), Some(&generated_id()))
}

pub(crate) fn timed_out() -> Response {
    let err = RpcError::with_message(
        ErrorCode::InvalidRequest,
        "Request body did not arrive in time (limits.body_timeout_ms)",
    );
    json_response(StatusCode::REQUEST_TIMEOUT, oncerpc_protocol::error_body(&err), Some(&generated_id()))
}

fn is_batch(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

fn bad_request(err: &RpcError) -> Response {
    json_response(StatusCode::BAD_REQUEST, oncerpc_protocol::error_body(err), Some(&generated_id()))
}
