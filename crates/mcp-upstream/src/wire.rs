//! How the client's messages travel: one POST per message (Streamable HTTP, [`http`]) or
//! lines on a child process's stdin and stdout ([`stdio`]). Both hand every message they
//! receive to `Shared::route` (`shared.rs`) and send back what it answers.

use std::sync::Arc;

use serde_json::Value;

use crate::shared::{Era, Failure, Headers};

pub(crate) mod http;
pub(crate) mod stdio;

#[derive(Clone)]
pub(crate) enum Wire {
    Http(Arc<http::HttpWire>),
    Stdio(stdio::StdioWire),
}

impl Wire {
    /// Send request `id`. Over HTTP its answer (and what comes before it) is read here, from
    /// the POST's response; over stdio it arrives on the reader.
    pub(crate) async fn request(
        &self,
        id: i64,
        method: &str,
        message: Value,
        era: &Era,
        headers: Headers,
    ) -> Result<(), Failure> {
        match self {
            Wire::Http(h) => h.request(id, method, &message, era, &headers).await,
            Wire::Stdio(s) => s.send(&message),
        }
    }

    /// Send a notification, or the answer to the upstream's own request (`era`: `None` for
    /// the connection's current one).
    pub(crate) async fn notify(&self, message: Value, era: Option<&Era>) -> Result<(), Failure> {
        match self {
            Wire::Http(h) => h.notify(&message, era).await,
            Wire::Stdio(s) => s.send(&message),
        }
    }

    /// After `initialize`: listen for what the upstream sends outside any request (HTTP's
    /// GET stream; stdio's reader already does).
    pub(crate) fn listen(&self, era: &Era) {
        if let Wire::Http(h) = self {
            h.clone().listen(era.clone());
        }
    }

    /// End it: a session deleted; a command's process is stopped by its watcher once the
    /// connection is closed.
    pub(crate) fn close(&self, era: &Era) {
        if let Wire::Http(h) = self {
            h.delete_session(era);
        }
    }
}
