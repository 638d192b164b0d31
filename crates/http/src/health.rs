//! `GET /healthz`: whether the store answers (`200` or `503`), and each MCP upstream's state.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use crate::{AppState, json_response};

pub(crate) async fn healthz(State(st): State<Arc<AppState>>) -> Response {
    let store = st.dispatcher.store();
    match store.ping().await {
        Ok(()) => {
            let mut body = serde_json::json!({"status": "ok", "store": store.name()});
            // Each MCP upstream's state: shown, not part of the status (a gateway whose
            // upstream is down still serves everything else; its tools answer -32006).
            if let Some(upstreams) = st.config.mcp_external.health() {
                body["mcp_upstreams"] = upstreams;
            }
            json_response(StatusCode::OK, body.to_string(), None)
        }
        // SPEC §12: the error text (addresses, OS errors) goes to the log, never to a client.
        Err(e) => {
            tracing::warn!(store = store.name(), error = %e, "healthz: store unavailable");
            json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"status": "degraded", "store": store.name()}).to_string(),
                None,
            )
        }
    }
}
