//! `GET /healthz`: whether the store can serve (`200`, or `503` when it cannot serve any key),
//! which of its parts cannot (`"status": "degraded"` with `shards`, still `200`: most keys are
//! served, so a load balancer keeps the gateway), each MCP upstream's state, and what
//! [`ConfigReport`] says about the loaded configuration (`"config"`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use oncerpc_core::store::Health;

use crate::{AppState, json_response};

/// What `/healthz` shows as `"config"` (the loaded configuration's hash and load time, the
/// last reload's outcome), kept up to date by whoever loads it; empty: not shown. Shared by
/// the doors of every configuration.
#[derive(Clone, Default)]
pub struct ConfigReport(Arc<arc_swap::ArcSwapOption<serde_json::Value>>);

impl ConfigReport {
    /// Show `report` from now on. It is public: no secrets, no error text.
    pub fn set(&self, report: serde_json::Value) {
        self.0.store(Some(Arc::new(report)));
    }

    /// What is shown now.
    pub fn get(&self) -> Option<Arc<serde_json::Value>> {
        self.0.load_full()
    }
}

impl std::fmt::Debug for ConfigReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ConfigReport").field(&self.get()).finish()
    }
}

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
    if let Some(report) = st.config.config_report.get() {
        body["config"] = (*report).clone();
    }
    json_response(status, body.to_string(), None)
}
