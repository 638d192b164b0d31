//! `/mcp` in the stateless revision (`2026-07-28`): one POST is one request, answered on its
//! own — no session, nothing kept between two requests, so any replica answers any of them.
//!
//! The headers `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and the tool's `Mcp-Param-*`
//! are checked against the body by `oncerpc-mcp` ([`oncerpc_mcp::RequestHeaders`]). A request
//! is answered `200` with `application/json` (or, when a call sends notifications while it
//! runs and the client accepts them, `text/event-stream`, as in the session era); a
//! notification `202`; a method this revision does not have `404` with `-32601`; a message
//! refused whole (not JSON, a batch, `_meta` without the protocol version or client
//! capabilities, a header that disagrees with the body, a version not served) `400` with its
//! JSON-RPC error, counted in
//! `oncerpc_mcp_refusals_total{reason}`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use oncerpc_mcp::stateless::Status;
use oncerpc_mcp::{RequestHeaders, Session};

use super::{VERSION_HEADER, refused};
use crate::AppState;

/// The method header.
pub const METHOD_HEADER: &str = "mcp-method";
/// The name header (`tools/call`'s tool, `resources/read`'s URI).
pub const NAME_HEADER: &str = "mcp-name";
/// The prefix of the headers that mirror tool arguments (`x-mcp-header`).
pub const PARAM_PREFIX: &str = "mcp-param-";

pub(crate) async fn post(
    st: Arc<AppState>,
    headers: &HeaderMap,
    bytes: Bytes,
    caller: crate::Caller,
) -> Response {
    // The headers the request is checked against, kept by the answer (a HeaderValue is a
    // shared buffer: no copy of the request's headers).
    let owned = Owned::from(headers);
    let Some(door) = &st.mcp else { return StatusCode::NOT_FOUND.into_response() };
    let restricted = caller.grant != oncerpc_core::Grant::All;
    // The key, key_header and trace headers, read as in the session era (and on /rpc): both
    // eras take a key from the same places and refuse the same conflicts.
    let carried = match crate::request_meta(&st, headers, caller) {
        Ok(request) => Session::carrying(request),
        Err(e) => return super::refuse(door, "key_header", StatusCode::BAD_REQUEST, e.message.to_string()),
    };
    // A request that asks for neither progress nor log messages gets no notification: it is
    // answered without the event-stream machinery (a channel and a boxed future per call).
    let answer = if may_notify(&bytes) {
        let state = st.clone();
        let answering = |outbox| async move {
            let door = state.mcp.as_ref().expect("the MCP door is on");
            let checked = owned.borrowed();
            door.server.stateless_with(&bytes, carried, Some(&checked), outbox).await
        };
        match crate::sse::respond(headers, answering, |a| a.body).await {
            Ok(done) => done,
            Err(events) => return events,
        }
    } else {
        door.server.stateless_with(&bytes, carried, Some(&owned.borrowed()), None).await
    };
    match (answer.status, answer.body) {
        (Status::Refused(why), Some(body)) => {
            let message = answer.message.unwrap_or_default();
            refused(door, why.reason(), StatusCode::BAD_REQUEST, &message, body)
        }
        (Status::MethodNotFound, Some(body)) => crate::json_response(StatusCode::NOT_FOUND, body, None),
        (_, Some(body)) => super::step_up(&st, restricted, body),
        (_, None) => StatusCode::ACCEPTED.into_response(),
    }
}

/// Whether a stateless request may send notifications while it is answered: only a call whose
/// `_meta` has a `progressToken` or `io.modelcontextprotocol/logLevel` does. Read as bytes (a
/// member name spelt with escapes is not seen, and its call then answers without them); a
/// false positive only costs the event-stream set-up.
fn may_notify(body: &[u8]) -> bool {
    use std::sync::LazyLock;
    // Built once: building a searcher costs more than the search (~1.8k instructions each).
    static PROGRESS: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new(b"\"progressToken\""));
    static LOG_LEVEL: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new(b"\"io.modelcontextprotocol/logLevel\""));
    PROGRESS.find(body).is_some() || LOG_LEVEL.find(body).is_some()
}

/// The MCP headers of a request, owned (checked against the body, as received).
struct Owned {
    protocol_version: Option<HeaderValue>,
    method: Option<HeaderValue>,
    name: Option<HeaderValue>,
    params: Vec<(String, HeaderValue)>,
}

impl Owned {
    /// One pass over the headers (a name lookup hashes and parses the name each time). The
    /// first value of a repeated header counts, as `HeaderMap::get` would have it.
    fn from(headers: &HeaderMap) -> Owned {
        let mut owned = Owned { protocol_version: None, method: None, name: None, params: Vec::new() };
        for (name, value) in headers {
            // Header names are lowercase here: matched case-insensitively.
            let slot = match name.as_str() {
                VERSION_HEADER => &mut owned.protocol_version,
                METHOD_HEADER => &mut owned.method,
                NAME_HEADER => &mut owned.name,
                other => {
                    if let Some(param) = other.strip_prefix(PARAM_PREFIX) {
                        owned.params.push((param.to_owned(), value.clone()));
                    }
                    continue;
                }
            };
            if slot.is_none() {
                *slot = Some(value.clone());
            }
        }
        owned
    }

    fn borrowed(&self) -> RequestHeaders<'_> {
        RequestHeaders {
            protocol_version: self.protocol_version.as_ref().map(HeaderValue::as_bytes),
            method: self.method.as_ref().map(HeaderValue::as_bytes),
            name: self.name.as_ref().map(HeaderValue::as_bytes),
            params: self.params.iter().map(|(n, v)| (n.clone(), v.as_bytes())).collect(),
        }
    }
}
