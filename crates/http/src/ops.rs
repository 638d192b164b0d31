//! `GET /openrpc.json`, `GET /openapi.json` and `GET /metrics` (Prometheus text: the dispatcher's metrics, then the
//! door's own).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::{AppState, json_response};

pub(crate) async fn openrpc(State(st): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, st.dispatcher.openrpc().get().as_bytes().to_vec(), None)
}

/// The REST doors as an OpenAPI 3.1 document, from the registry ([`crate::openapi`]).
pub(crate) async fn openapi(State(st): State<Arc<AppState>>) -> Response {
    let doc = st.openapi.get_or_init(|| {
        let registry = st.dispatcher.registry();
        let doc = crate::openapi::document(registry, &st.config.flow_steps, env!("CARGO_PKG_VERSION"));
        axum::body::Bytes::from(doc.to_string())
    });
    json_response(StatusCode::OK, doc.clone(), None)
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
