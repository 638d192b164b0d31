//! How a call that did not reach its upstream's answer fails: `-32006` naming the upstream
//! (down, gone mid-call, garbage) and `-32005` (no answer in time). Neither is stored.

use oncerpc_protocol::{ErrorCode, RpcError};

/// `-32006` naming the upstream and, in a few words, why (the details go to the log only).
pub fn failed(upstream: &str, why: &str) -> RpcError {
    RpcError::with_message(ErrorCode::UpstreamFailed, format!("MCP upstream {upstream:?} failed: {why}"))
}

/// `-32005`: the upstream did not answer within its `timeout_ms`.
pub fn timed_out(upstream: &str, timeout_ms: u128) -> RpcError {
    RpcError::with_message(
        ErrorCode::Timeout,
        format!("MCP upstream {upstream:?} did not answer within {timeout_ms} ms"),
    )
    .data(serde_json::json!({ "timeout_ms": timeout_ms as u64 }))
}
