//! `GET /mcp` with a session id (the session era): the session's own server stream, which
//! carries what the server says outside any request — `notifications/tools/list_changed` when
//! a reload changed the tools ([`Changes`]), and the `notifications/resources/list_changed` and
//! `notifications/prompts/list_changed` of the upstream servers whose resources and prompts
//! are re-exported. It ends when the session does (checked every [`RECHECK`]; an open stream
//! does not keep an idle session alive), when the server shuts down, or when the client leaves.
//! Without a session id `GET` stays `405`: the stateless revision has no server stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use oncerpc_core::store::now_ms;
use oncerpc_mcp::SessionError;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use super::{
    SESSION_NAME, header_str, origin_allowed, session_not_found, session_owner, sessions_unavailable,
};
use crate::{AppState, Door};

/// How often an open stream checks that its session still is.
const RECHECK: Duration = Duration::from_secs(30);

/// What the streams of open sessions are told by the server itself.
#[derive(Clone, Copy, Debug)]
enum Change {
    Tools,
    Closing,
}

/// The streams of open sessions: shared by the MCP doors of every configuration (a reload's
/// door tells the streams opened under the one before).
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

const TOOLS_CHANGED: &[u8] = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;

pub(crate) async fn get(st: Arc<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    let door = st.mcp.as_ref().expect("the MCP door is on");
    if let Err(resp) = origin_allowed(&st, &headers) {
        return *resp;
    }
    let owner = match st.authenticate(Door::Mcp, &headers, uri.query()).await {
        Ok(c) => session_owner(&c),
        Err(resp) => return *resp,
    };
    let Some(token) = header_str(&headers, &SESSION_NAME).map(str::to_owned) else {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    };
    if !crate::sse::accepted(&headers) {
        let message = "GET /mcp opens the session's event stream: Accept must name text/event-stream";
        return super::refuse(door, "not_acceptable", StatusCode::NOT_ACCEPTABLE, message.to_owned());
    }
    match door.sessions.check(&token, now_ms()).await {
        Ok(id) if *id.tenant == *owner => {}
        Err(SessionError::Unavailable) => return sessions_unavailable(door),
        Ok(_) | Err(_) => return session_not_found(door),
    }
    let offers = door.server.tools().external().offers().clone();
    let changes = offers.subscribe();
    let ours = door.changes.0.subscribe();
    tracing::info!("MCP session stream opened");
    struct Open {
        st: Arc<AppState>,
        token: String,
        owner: Arc<str>,
        offers: oncerpc_mcp::offers::Offers,
        changes: tokio::sync::broadcast::Receiver<Arc<str>>,
        ours: broadcast::Receiver<Change>,
        greeted: bool,
    }
    let open = Open { st: st.clone(), token, owner, offers, changes, ours, greeted: false };
    let stream = futures::stream::unfold(open, |mut open| async move {
        if !open.greeted {
            // A comment first: the client knows the stream is open.
            open.greeted = true;
            return Some((Bytes::from_static(b": open\n\n"), open));
        }
        loop {
            tokio::select! {
                change = open.changes.recv() => match change {
                    Ok(message) => return Some((crate::sse::event(message.as_bytes()), open)),
                    // Fell behind: the next change tells the same (a list changed).
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return None,
                },
                change = open.ours.recv() => match change {
                    // Several missed at once are still one change to hear of.
                    Ok(Change::Tools) | Err(RecvError::Lagged(_)) => {
                        return Some((crate::sse::event(TOOLS_CHANGED), open));
                    }
                    Ok(Change::Closing) | Err(RecvError::Closed) => return None,
                },
                () = open.offers.closed() => return None,
                () = tokio::time::sleep(RECHECK) => {
                    let door = open.st.mcp.as_ref().expect("the MCP door is on");
                    match door.sessions.alive(&open.token, now_ms()).await {
                        Ok(id) if *id.tenant == *open.owner => {}
                        // The store did not answer: keep the stream, check again later.
                        Err(SessionError::Unavailable) => {}
                        Ok(_) | Err(_) => return None,
                    }
                }
            }
        }
    });
    crate::sse::response(Body::from_stream(futures::StreamExt::map(stream, Ok::<_, Infallible>)))
}
