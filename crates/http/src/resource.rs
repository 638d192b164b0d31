//! RFC 9728 Protected Resource Metadata (SPEC §20, the MCP authorization spec's resource-server
//! side): `GET /.well-known/oauth-protected-resource/mcp` (and without the path) says which
//! resource this gateway is, which authorization servers issue its tokens and which scopes its
//! methods and tools use, so an MCP host that got a `401` can find where to get a token. Served
//! only when `[[auth.issuers]]` are configured (`404` otherwise); always open.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::AppState;

/// The metadata's path for the MCP door.
pub const MCP_METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

/// Where clients reach this gateway: `[http] public_url`, else `http://` and the request's
/// `Host` (set `public_url` behind a proxy or with TLS).
pub(crate) fn base_url(st: &AppState, headers: &HeaderMap) -> String {
    match &st.config.public_url {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => {
            let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
            format!("http://{host}")
        }
    }
}

/// The metadata's URL, for `WWW-Authenticate: Bearer resource_metadata="…"`.
pub(crate) fn metadata_url(st: &AppState, headers: &HeaderMap) -> String {
    format!("{}{MCP_METADATA_PATH}", base_url(st, headers))
}

pub(crate) async fn metadata(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let Some(issuers) = &st.config.issuers else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let registry = st.dispatcher.registry();
    let mut scopes: BTreeSet<String> = registry
        .names()
        .into_iter()
        .filter_map(|n| registry.spec(n))
        .flat_map(|s| s.scopes.iter().cloned())
        .collect();
    for t in st.config.mcp_external.snapshot().tools() {
        scopes.extend(t.tool.scopes.iter().cloned());
    }
    let body = json!({
        "resource": format!("{}/mcp", base_url(&st, &headers)),
        "authorization_servers": issuers.issuer_urls(),
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": "oncerpc",
    });
    let mut resp = crate::json_response(StatusCode::OK, body.to_string(), None);
    resp.headers_mut().insert(header::CACHE_CONTROL, axum::http::HeaderValue::from_static("max-age=300"));
    resp
}
