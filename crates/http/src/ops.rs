//! What an operator's tooling reads: `GET /healthz` (the store's health), `GET /openrpc.json`
//! and `GET /metrics` (Prometheus text: the dispatcher's metrics, then the door's own).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::{AppState, json_response};

pub(crate) async fn healthz(State(st): State<Arc<AppState>>) -> Response {
    let store = st.dispatcher.store();
    match store.ping().await {
        Ok(()) => json_response(
            StatusCode::OK,
            serde_json::json!({"status": "ok", "store": store.name()}).to_string(),
            None,
        ),
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

pub(crate) async fn openrpc(State(st): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, st.dispatcher.openrpc().get().as_bytes().to_vec(), None)
}

pub(crate) async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let (background, capacity) = st.dispatcher.background();
    st.dispatcher.metrics().set_background(background, capacity);
    let mut text = st.dispatcher.metrics().render();
    let mut door = Vec::new();
    let _ =
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &st.door_metrics.gather(), &mut door);
    text.push_str(&String::from_utf8_lossy(&door));
    let mut resp = (StatusCode::OK, text).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    resp
}
