//! The errors a flow answers that a client (or a model) reads: a step that failed, a step not
//! started for lack of time, a journal that no longer fits the flow.

use std::time::Instant;

use oncerpc_core::journal::ResumeError;
use oncerpc_protocol::{ErrorCode, RpcError};
use serde_json::json;

use crate::config::StepConfig;

/// The answer of a step that was not started: less than its `timeout_ms` was left before
/// the method's deadline, so nothing was sent (`step_in_flight: false`).
pub(crate) fn not_started(step: &StepConfig, deadline: Instant) -> RpcError {
    let left = deadline.saturating_duration_since(Instant::now()).as_millis() as u64;
    RpcError::new(ErrorCode::Timeout).data(serde_json::json!({
        "step": step.name,
        "step_in_flight": false,
        "reason": format!(
            "step {:?} not started: {left} ms of the method's timeout left, less than its timeout_ms ({})",
            step.name,
            step.timeout_ms.unwrap_or(0)
        ),
    }))
}

/// The outcome of an execution whose journal no longer fits the flow's definition (or was
/// written before steps were recorded by name).
pub(crate) fn flow_changed(e: &ResumeError) -> RpcError {
    RpcError::with_message(
        ErrorCode::InternalError,
        format!(
            "this execution cannot resume from its step journal (the flow changed since it \
             started): {e}; no step was skipped or given another step's output; force_retry \
             starts it over"
        ),
    )
}

pub(crate) fn upstream_failed(step: &str, mut data: serde_json::Value) -> RpcError {
    data["step"] = json!(step);
    RpcError::new(ErrorCode::UpstreamFailed).data(data)
}
