//! `/mcp`: the MCP door over Streamable HTTP (`oncerpc-mcp` answers the messages; this is the
//! transport). A POST without `Mcp-Session-Id` whose `_meta` or `MCP-Protocol-Version` names
//! the stateless revision `2026-07-28` goes to [`stateless`]; everything else is the session
//! era's, below.
//!
//! * `POST`: one JSON-RPC message (or, in `2025-03-26`, a batch). A request is answered
//!   `200` with `application/json`; notifications and responses `202` with no body; a body
//!   that is not JSON, or a batch the revision does not have, `400` with the error.
//!   `initialize` opens a session: the answer carries `Mcp-Session-Id`, a signed token bound
//!   to the tenant (any replica with the same `mcp.session_secret` accepts it). Every other
//!   message needs it: missing `400`; unknown, expired, ended or another tenant's `404`.
//!   `MCP-Protocol-Version`, when sent, must be a served revision (`400`).
//! * `DELETE` with the session id ends it (`204`). `GET` with the session id opens the
//!   session's event stream ([`stream`]: `notifications/tools/list_changed` when a reload
//!   changed the tools, and the re-exported resources' and prompts' list-changed
//!   notifications); without one it is `405` (answers come in the POST's response).
//! * `Origin`, when present, must be loopback or an allowed CORS origin, else `403` (DNS
//!   rebinding). The same limits as every door: body size and time, in-flight, the tenant's
//!   API key (`Authorization: Bearer`, `X-API-Key`, `?key=`), rate and in-flight.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use oncerpc_core::LogSafe;
use oncerpc_core::store::now_ms;
use oncerpc_mcp::{McpServer, SESSION_VERSIONS, Session, SessionError, SessionTokens, Sessions};
use oncerpc_protocol::{ErrorCode, RpcError};

use crate::{AppState, Door, read_body};

mod stateless;
mod stream;
pub(crate) use stream::Changes;

/// The session header (requests and the `initialize` answer).
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The revision header of requests after `initialize`.
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// The MCP door's own state.
pub(crate) struct McpDoor {
    pub server: McpServer,
    /// Shared with the doors of later configurations (a reload): sessions stay open.
    pub sessions: Arc<Sessions>,
    /// The open sessions' streams (`GET /mcp`), shared likewise.
    pub changes: Changes,
}

impl McpDoor {
    pub fn new(
        dispatcher: Arc<oncerpc_core::Dispatcher>,
        secret: Option<&[u8]>,
        idle: Duration,
        external: oncerpc_mcp::External,
        names: oncerpc_mcp::ToolNames,
    ) -> McpDoor {
        let sessions = Arc::new(Sessions::new(SessionTokens::new(secret), dispatcher.store().clone(), idle));
        // Names that clash (a registry the gateway's config check did not see): the methods'
        // own names, logged.
        let server = McpServer::with_names(dispatcher.clone(), external.clone(), names)
            .unwrap_or_else(|_| McpServer::with_external(dispatcher, external))
            .announcing_list_changes();
        McpDoor { server, sessions, changes: Changes::default() }
    }

    /// This door for a new configuration's dispatcher (a reload): its tools are the new
    /// registry's, its sessions and counters this door's.
    pub fn successor(
        &self,
        dispatcher: Arc<oncerpc_core::Dispatcher>,
        external: oncerpc_mcp::External,
        names: oncerpc_mcp::ToolNames,
    ) -> McpDoor {
        let server = self
            .server
            .successor(dispatcher.clone(), external.clone(), names)
            .unwrap_or_else(|_| McpServer::with_external(dispatcher, external).announcing_list_changes());
        McpDoor { server, sessions: self.sessions.clone(), changes: self.changes.clone() }
    }
}

pub(crate) async fn post(
    State(st): State<Arc<AppState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(door) = &st.mcp else { return StatusCode::NOT_FOUND.into_response() };
    if let Err(resp) = origin_allowed(&st, &headers) {
        return *resp;
    }
    let bytes = match read_body(&st, body, &headers, crate::rpc::too_large, crate::rpc::timed_out).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let (_admitted, caller) = match st.guard(Door::Mcp, &headers, uri.query()).await {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let tenant = caller.tenant.clone();
    // A session belongs to the tenant and, where the credential names one, the subject that
    // opened it: to every other caller it is unknown (404).
    let owner = session_owner(&caller);
    let restricted = caller.grant != oncerpc_core::Grant::All;
    // The stateless revision (2026-07-28), chosen per request: no session, and _meta or the
    // version header names a revision of that era.
    if header_str(&headers, &SESSION_NAME).is_none()
        && oncerpc_mcp::stateless::is_stateless(&bytes, header_str(&headers, &VERSION_NAME))
    {
        return stateless::post(st.clone(), &headers, bytes, caller).await;
    }
    if let Some(v) = header_str(&headers, &VERSION_NAME)
        && !SESSION_VERSIONS.contains(&v)
    {
        let served = SESSION_VERSIONS.join(", ");
        let message = format!("unsupported MCP-Protocol-Version {:?}: served are {served}", LogSafe(v));
        return refuse(door, "version", StatusCode::BAD_REQUEST, message);
    }
    // The key and key_header values a call may take from the headers, as on /rpc.
    let request = match crate::request_meta(&st, &headers, caller) {
        Ok(r) => r,
        Err(e) => return refuse(door, "key_header", StatusCode::BAD_REQUEST, e.message.to_string()),
    };
    let token = header_str(&headers, &SESSION_NAME).map(str::to_owned);
    let (mut session, opening): (Session, bool) = match token.as_deref() {
        Some(token) => match door.sessions.check(token, now_ms()).await {
            Ok(id) if *id.tenant == *owner => {
                let mut s = Session::new(tenant.clone());
                s.version = Some(id.version);
                s.elicitation = id.elicitation;
                s.log_level = door.sessions.tokens().log_level(token);
                s.id = Some(token.into());
                (s, false)
            }
            Err(SessionError::Unavailable) => return sessions_unavailable(door),
            // Another tenant's (or subject's) session is as unknown as a forged one.
            Ok(_) | Err(_) => return session_not_found(door),
        },
        None if oncerpc_mcp::is_initialize(&bytes) => (Session::new(tenant.clone()), true),
        None => {
            let message = "Mcp-Session-Id is required: send initialize first".to_owned();
            return refuse(door, "no_session", StatusCode::BAD_REQUEST, message);
        }
    };
    session.carry(request);
    let state = st.clone();
    let level = session.log_level.clone();
    let answering = |outbox| async move {
        let door = state.mcp.as_ref().expect("the MCP door is on");
        let answer = door.server.answer_with(&bytes, &mut session, outbox).await;
        if let (Some(token), Some(set)) = (&token, &session.log_level)
            && session.log_level != level
        {
            door.sessions.tokens().set_log_level(token, set);
        }
        (answer, session)
    };
    let (answer, session) = match crate::sse::respond(&headers, answering, |(a, _)| a.body).await {
        Ok(done) => done,
        Err(events) => return events,
    };
    let mut resp = match answer.body {
        Some(body) if answer.refused => crate::json_response(StatusCode::BAD_REQUEST, body, None),
        Some(body) => step_up(&st, restricted, body),
        None => StatusCode::ACCEPTED.into_response(),
    };
    if opening && let Some(version) = session.version {
        // The token says whether the client answers questions (elicitation): every POST of
        // the session, on any replica, knows it.
        let flag = if session.elicitation { oncerpc_mcp::session::ELICITATION_FLAG } else { "" };
        let token = match door.sessions.open(&owner, &format!("{version}{flag}"), now_ms()).await {
            Ok(token) => token,
            Err(_) => return sessions_unavailable(door),
        };
        door.server.metrics().session("opened");
        if let Ok(v) = HeaderValue::from_str(&token) {
            resp.headers_mut().insert(SESSION_HEADER, v);
        }
    }
    resp
}

pub(crate) async fn delete(State(st): State<Arc<AppState>>, uri: Uri, headers: HeaderMap) -> Response {
    let Some(door) = &st.mcp else { return StatusCode::NOT_FOUND.into_response() };
    if let Err(resp) = origin_allowed(&st, &headers) {
        return *resp;
    }
    let owner = match st.authenticate(Door::Mcp, &headers, uri.query()).await {
        Ok(c) => session_owner(&c),
        Err(resp) => return *resp,
    };
    let Some(token) = header_str(&headers, &SESSION_NAME) else {
        return refuse(door, "no_session", StatusCode::BAD_REQUEST, "Mcp-Session-Id is required".into());
    };
    match door.sessions.tokens().verify(token, now_ms()) {
        Ok(id) if *id.tenant == *owner => match door.sessions.end(token, now_ms()).await {
            Ok(_) => {
                door.server.metrics().session("ended");
                tracing::info!("MCP session ended");
                StatusCode::NO_CONTENT.into_response()
            }
            Err(SessionError::Unavailable) => sessions_unavailable(door),
            Err(_) => session_not_found(door),
        },
        _ => session_not_found(door),
    }
}

pub(crate) async fn get(State(st): State<Arc<AppState>>, uri: Uri, headers: HeaderMap) -> Response {
    if st.mcp.is_none() {
        return StatusCode::NOT_FOUND.into_response();
    }
    if headers.contains_key(SESSION_NAME) {
        return stream::get(st.clone(), uri, headers).await;
    }
    let mut resp = StatusCode::METHOD_NOT_ALLOWED.into_response();
    resp.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    resp
}

/// Whose a session is: the tenant, and the credential's subject when it names one (a token's
/// `sub`, a scoped key's `name`), after a unit separator no tenant name has.
fn session_owner(caller: &crate::Caller) -> Arc<str> {
    match &caller.subject {
        None => caller.tenant.clone(),
        Some(subject) => Arc::from(format!("{}\u{1f}{subject}", caller.tenant)),
    }
}

/// A `200` answer, or — for a caller whose token or key holds only some scopes, refused a tool
/// for one it lacks — `403` with `WWW-Authenticate: Bearer error="insufficient_scope",
/// scope="…"`, the MCP authorization spec's step-up: the host may ask for a token with more.
pub(crate) fn step_up(st: &AppState, restricted: bool, body: Vec<u8>) -> Response {
    let challenge = restricted
        .then(|| crate::insufficient_scope(&body, |a| a.get("result")?.get("structuredContent")))
        .flatten();
    match challenge {
        Some(c) => {
            st.auth_refused("insufficient_scope");
            let mut resp = crate::json_response(StatusCode::FORBIDDEN, body, None);
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, c);
            resp
        }
        None => crate::json_response(StatusCode::OK, body, None),
    }
}

/// DNS rebinding: a browser page of another origin must not reach a local server. No
/// `Origin` (not a browser) is allowed; loopback origins and the CORS allowlist are.
fn origin_allowed(st: &AppState, headers: &HeaderMap) -> Result<(), Box<Response>> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let origin = origin.to_str().unwrap_or("");
    let host = origin.split_once("://").map_or("", |(_, rest)| rest);
    let host = host.strip_suffix('/').unwrap_or(host);
    let name = if host.starts_with('[') {
        host.split_once(']').map_or(host, |(h, _)| h).trim_start_matches('[')
    } else {
        host.rsplit_once(':')
            .map_or(host, |(h, port)| if port.bytes().all(|b| b.is_ascii_digit()) { h } else { host })
    };
    let loopback = matches!(name, "localhost" | "127.0.0.1" | "::1");
    let listed = st.config.cors_allowed_origins.iter().any(|o| o == "*" || o == origin);
    if loopback || listed {
        return Ok(());
    }
    if let Some(door) = &st.mcp {
        door.server.metrics().refused("origin");
    }
    tracing::info!(origin = %LogSafe(origin), "MCP request refused: a foreign origin");
    Err(Box::new(crate::json_response(
        StatusCode::FORBIDDEN,
        r#"{"code":"403","message":"origin not allowed: only loopback and the CORS allowlist reach /mcp"}"#,
        None,
    )))
}

/// A header's value as text. The name is a `HeaderName` constant: a `&str` would be parsed and
/// checked again on every lookup.
fn header_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

const SESSION_NAME: HeaderName = HeaderName::from_static(SESSION_HEADER);
const VERSION_NAME: HeaderName = HeaderName::from_static(VERSION_HEADER);

fn session_not_found(door: &McpDoor) -> Response {
    let message = "unknown or ended MCP session: initialize a new one".to_owned();
    refuse(door, "unknown_session", StatusCode::NOT_FOUND, message)
}

/// The store that keeps sessions did not answer: `503` with `Retry-After`, try again.
fn sessions_unavailable(door: &McpDoor) -> Response {
    let message = "the session store is unavailable: retry shortly".to_owned();
    refuse(door, "store_unavailable", StatusCode::SERVICE_UNAVAILABLE, message)
}

/// A refusal of the transport (session, revision): counted in
/// `oncerpc_mcp_refusals_total{reason}`, logged once, answered with a JSON-RPC error body.
fn refuse(door: &McpDoor, reason: &'static str, status: StatusCode, message: String) -> Response {
    let err = RpcError::with_message(ErrorCode::InvalidRequest, message);
    refused(door, reason, status, &err.message, oncerpc_protocol::error_body(&err))
}

/// [`refuse`] with the answer's body already made (the stateless revision's own errors).
fn refused(
    door: &McpDoor,
    reason: &'static str,
    status: StatusCode,
    message: &str,
    body: Vec<u8>,
) -> Response {
    door.server.metrics().refused(reason);
    tracing::info!(reason, status = status.as_u16(), "MCP request refused: {message}");
    crate::json_response(status, body, None)
}
