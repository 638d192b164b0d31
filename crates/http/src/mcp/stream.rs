//! `GET /mcp` with a session: the server's stream to the client (Streamable HTTP; without a
//! session `405`, as the stateless revision has no stream), on which
//! open sessions are told `notifications/tools/list_changed` when a reload changed the tools.
//! The stream ends when the server shuts down ([`Changes::closing`]), so it never holds a
//! graceful shutdown to its grace.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use oncerpc_core::store::now_ms;
use oncerpc_mcp::SessionError;
use tokio::sync::broadcast;

use super::{SESSION_NAME, header_str, refuse, session_not_found, session_owner, sessions_unavailable};
use crate::{AppState, Door};

/// What the streams of open sessions are told.
#[derive(Clone, Copy, Debug)]
enum Change {
    Tools,
    Closing,
}

/// The streams of open sessions: shared by the MCP doors of every configuration.
#[derive(Clone)]
pub(crate) struct Changes(Arc<broadcast::Sender<Change>>);

impl Default for Changes {
    fn default() -> Self {
        Changes(Arc::new(broadcast::channel(16).0))
    }
}

impl Changes {
    /// Tell every open stream that the tools changed.
    pub fn tools(&self) {
        let _ = self.0.send(Change::Tools);
    }

    /// End every open stream (shutdown).
    pub fn closing(&self) {
        let _ = self.0.send(Change::Closing);
    }
}

const LIST_CHANGED: &[u8] =
    b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n";

pub(crate) async fn get(State(st): State<Arc<AppState>>, uri: Uri, headers: HeaderMap) -> Response {
    let Some(door) = &st.mcp else { return StatusCode::NOT_FOUND.into_response() };
    if let Err(resp) = super::origin_allowed(&st, &headers) {
        return *resp;
    }
    // Without a session there is no stream to offer (the stateless revision has none).
    let Some(token) = header_str(&headers, &SESSION_NAME) else {
        let mut resp = StatusCode::METHOD_NOT_ALLOWED.into_response();
        resp.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
        return resp;
    };
    if !crate::sse::accepted(&headers) {
        let message = "GET /mcp is the server's event stream: Accept must name text/event-stream".into();
        return refuse(door, "accept", StatusCode::NOT_ACCEPTABLE, message);
    }
    let owner = match st.authenticate(Door::Mcp, &headers, uri.query()).await {
        Ok(c) => session_owner(&c),
        Err(resp) => return *resp,
    };
    match door.sessions.check(token, now_ms()).await {
        Ok(id) if *id.tenant == *owner => {}
        Err(SessionError::Unavailable) => return sessions_unavailable(door),
        Ok(_) | Err(_) => return session_not_found(door),
    }
    let rx = door.changes.0.subscribe();
    // Several changes missed at once (lagged) are still one change to hear of.
    let events = futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(Change::Tools) | Err(broadcast::error::RecvError::Lagged(_)) => {
                Some((Ok::<_, Infallible>(Bytes::from_static(LIST_CHANGED)), rx))
            }
            Ok(Change::Closing) | Err(broadcast::error::RecvError::Closed) => None,
        }
    });
    let mut resp = (StatusCode::OK, Body::from_stream(events)).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}
