//! `GET /healthz`: whether the store can serve (`200`, or `503` when it cannot serve any key),
//! which of its parts cannot (`"status": "degraded"` with `shards`, still `200`: most keys are
//! served, so a load balancer keeps the gateway), and each MCP upstream's state.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use oncerpc_core::store::Health;

use crate::{AppState, json_response};

pub(crate) async fn healthz(State(st): State<Arc<AppState>>) -> Response {
    let store = st.dispatcher.store();
    let (status, mut body) = match store.health().await {
        Health::Ok => (StatusCode::OK, serde_json::json!({"status": "ok", "store": store.name()})),
        Health::Degraded(parts) => {
            // The addresses and errors go to the log; a client sees which keys and why.
            for p in &parts {
                tracing::warn!(store = store.name(), keys = %p.keys, problem = p.problem.as_str(), detail = %p.detail, "healthz: part of the store cannot serve");
            }
            let shards: Vec<_> = parts
                .iter()
                .map(|p| serde_json::json!({"keys": p.keys, "problem": p.problem.as_str()}))
                .collect();
            (
                StatusCode::OK,
                serde_json::json!({"status": "degraded", "store": store.name(), "shards": shards}),
            )
        }
        // SPEC §12: the error text (addresses, OS errors) goes to the log, never to a client.
        Health::Down(why) => {
            tracing::warn!(store = store.name(), error = %why, "healthz: store unavailable");
            return json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"status": "degraded", "store": store.name()}).to_string(),
                None,
            );
        }
    };
    // Each MCP upstream's state: shown, not part of the status (a gateway whose upstream is
    // down still serves everything else; its tools answer -32006).
    if let Some(upstreams) = st.config.mcp_external.health() {
        body["mcp_upstreams"] = upstreams;
    }
    json_response(status, body.to_string(), None)
}
