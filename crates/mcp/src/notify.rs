//! Notifications of a running `tools/call`: a flow's finished steps as
//! `notifications/progress` (when the call carries `_meta.progressToken`) and as
//! `notifications/message` log lines (at or above the level the session set with
//! `logging/setLevel`). They go to the transport's [`Outbox`] as they happen; a call
//! without steps sends none, and neither does one whose client asked for neither.

use std::sync::{Arc, OnceLock};

use oncerpc_core::{Progress, StepProgress};
use serde_json::{Value, json};

use crate::Outbox;

/// The levels of `logging/setLevel`, least severe first.
pub const LEVELS: [&str; 8] =
    ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

fn rank(level: &str) -> Option<usize> {
    LEVELS.iter().position(|l| *l == level)
}

/// The task a call became, once it is one (`2025-11-25`): its notifications then name it in
/// `_meta["io.modelcontextprotocol/related-task"]`.
pub type RelatedTask = Arc<OnceLock<String>>;

/// The progress sink of one call, or `None` when nobody would be told anything.
pub fn progress(
    outbox: Option<&Outbox>,
    token: Option<Value>,
    log_level: Option<&str>,
    tool: &str,
    related: Option<RelatedTask>,
) -> Option<Progress> {
    let outbox = outbox?.clone();
    let floor = log_level.and_then(rank);
    if token.is_none() && floor.is_none() {
        return None;
    }
    let tool = tool.to_owned();
    Some(Progress::new(move |step: &StepProgress<'_>| {
        let what = match (step.ok, step.resumed) {
            (true, false) => "done",
            (true, true) => "done earlier (kept in the journal, not run again)",
            (false, _) => "failed",
        };
        let message = format!("step {} of {}: {} {what}", step.done, step.total, step.step);
        let task = related.as_ref().and_then(|r| r.get());
        let meta = |params: &mut Value| {
            if let Some(id) = task {
                params["_meta"] = json!({ crate::call::META_RELATED_TASK: { "taskId": id } });
            }
        };
        if let Some(token) = &token {
            let mut params = json!({ "progressToken": token, "progress": step.done, "total": step.total, "message": message });
            meta(&mut params);
            let n = json!({ "jsonrpc": "2.0", "method": "notifications/progress", "params": params });
            // A client that left: the call runs on, its outcome is stored for the retry.
            let _ = outbox.send(n.to_string().into_bytes());
        }
        let level = if step.ok { "info" } else { "warning" };
        if floor.is_some_and(|floor| rank(level).is_some_and(|r| r >= floor)) {
            let mut params = json!({
                "level": level,
                "logger": "oncerpc",
                "data": { "tool": tool, "step": step.step, "done": step.done, "total": step.total, "message": message },
            });
            meta(&mut params);
            let n = json!({ "jsonrpc": "2.0", "method": "notifications/message", "params": params });
            let _ = outbox.send(n.to_string().into_bytes());
        }
    }))
}
