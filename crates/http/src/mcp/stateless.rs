//! `/mcp` in the stateless revision (`2026-07-28`): one POST is one request, answered on its
//! own — no session, nothing kept between two requests, so any replica answers any of them.
//!
//! The headers `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and the tool's `Mcp-Param-*`
//! are checked against the body by `oncerpc-mcp` ([`oncerpc_mcp::RequestHeaders`]). A request
//! is answered `200` with `application/json`; a notification `202`; a method this revision
//! does not have `404` with `-32601`; a message refused whole (not JSON, a batch, `_meta`
//! without the protocol version or client capabilities, a header that disagrees with the body,
//! a version not served) `400` with its JSON-RPC error, counted in
//! `oncerpc_mcp_refusals_total{reason}`.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use oncerpc_mcp::RequestHeaders;
use oncerpc_mcp::stateless::Status;

use super::{McpDoor, VERSION_HEADER, refused};

/// The method header.
pub const METHOD_HEADER: &str = "mcp-method";
/// The name header (`tools/call`'s tool, `resources/read`'s URI).
pub const NAME_HEADER: &str = "mcp-name";
/// The prefix of the headers that mirror tool arguments (`x-mcp-header`).
pub const PARAM_PREFIX: &str = "mcp-param-";

pub(crate) async fn post(door: &McpDoor, headers: &HeaderMap, bytes: &[u8], tenant: Arc<str>) -> Response {
    let raw = |name: &str| headers.get(name).map(|v| v.as_bytes());
    let request_headers = RequestHeaders {
        protocol_version: raw(VERSION_HEADER),
        method: raw(METHOD_HEADER),
        name: raw(NAME_HEADER),
        params: headers
            .iter()
            .filter_map(|(name, value)| {
                // Header names are lowercase here: matched case-insensitively.
                let param = name.as_str().strip_prefix(PARAM_PREFIX)?;
                Some((param.to_owned(), value.as_bytes()))
            })
            .collect(),
    };
    let answer = door.server.stateless(bytes, tenant, Some(&request_headers)).await;
    match (answer.status, answer.body) {
        (Status::Refused(why), Some(body)) => {
            let message = answer.message.unwrap_or_default();
            refused(door, why.reason(), StatusCode::BAD_REQUEST, &message, body)
        }
        (Status::MethodNotFound, Some(body)) => crate::json_response(StatusCode::NOT_FOUND, body, None),
        (_, Some(body)) => crate::json_response(StatusCode::OK, body, None),
        (_, None) => StatusCode::ACCEPTED.into_response(),
    }
}
