//! Plain `2026-07-28` requests to oncerpc's `/mcp`, as a client of the stateless revision
//! sends them: the revision's `_meta`, a keyed `tools/call`, and the POST with the headers the
//! revision asks for (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`).
#![allow(dead_code)]

use serde_json::{Value, json};

use super::Answer;
use super::process::Http;

/// The `_meta` every request of the revision carries.
pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// `tools/call` of `tool` with `key` in `_meta`.
pub fn call(id: u64, tool: &str, arguments: Value, key: &str) -> Value {
    let mut meta = meta();
    meta["io.oncerpc/idempotency-key"] = json!(key);
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments,"_meta":meta}})
}

/// POST `body` to `/mcp` with the revision's headers (its `Mcp-Name` from `params.name` or
/// `params.taskId`) and `extra` ones.
pub async fn post(http: &Http, body: &Value, extra: &[(&str, &str)]) -> Answer {
    let params = &body["params"];
    let name = params["name"].as_str().or(params["taskId"].as_str()).unwrap_or_default().to_owned();
    let method = body["method"].as_str().unwrap_or_default().to_owned();
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method.as_str()),
        ("Mcp-Name", name.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    headers.extend_from_slice(extra);
    http.post("/mcp", body.to_string(), &headers).await
}
