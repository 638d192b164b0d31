//! Notifications of a running `tools/call`: a flow's finished steps as
//! `notifications/progress` (when the call carries `_meta.progressToken`) and as
//! `notifications/message` log lines (at or above the level the session set with
//! `logging/setLevel`); an upstream MCP server's own progress for the call as
//! `notifications/progress` under the client's token. They go to the transport's [`Outbox`]
//! as they happen; a call without steps sends none, and neither does one whose client asked
//! for neither.

use std::sync::{Arc, OnceLock};

use oncerpc_core::{Progress, Report, ToolProgress};
use serde_json::{Value, json};

use crate::Outbox;

fn rank(level: &str) -> Option<usize> {
    LEVELS.iter().position(|l| *l == level)
}
pub use crate::meta::LEVELS;

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
    Some(Progress::new(move |report: &Report<'_>| {
        let task = related.as_ref().and_then(|r| r.get());
        let meta = |params: &mut Value| {
            if let Some(id) = task {
                params["_meta"] = json!({ crate::meta::META_RELATED_TASK: { "taskId": id } });
            }
        };
        let step = match report {
            Report::Step(step) => step,
            Report::Tool(p) => {
                if let Some(token) = &token {
                    let mut params = forwarded(token, p);
                    meta(&mut params);
                    let n = json!({ "jsonrpc": "2.0", "method": "notifications/progress", "params": params });
                    outbox.send(n.to_string().into_bytes());
                }
                return;
            }
        };
        let what = match (step.ok, step.resumed) {
            (true, false) => "done",
            (true, true) => "done earlier (kept in the journal, not run again)",
            (false, _) => "failed",
        };
        let message = format!("step {} of {}: {} {what}", step.done, step.total, step.step);
        if let Some(token) = &token {
            let mut params = json!({ "progressToken": token, "progress": step.done, "total": step.total, "message": message });
            meta(&mut params);
            let n = json!({ "jsonrpc": "2.0", "method": "notifications/progress", "params": params });
            // A client that left: the call runs on, its outcome is stored for the retry.
            outbox.send(n.to_string().into_bytes());
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
            outbox.send(n.to_string().into_bytes());
        }
    }))
}

/// The most of an upstream's progress message passed on, in bytes: a server that sends
/// 64 KiB of "progress" gets its first 1 KiB through (cut at a character, ending in `…`).
pub const MAX_FORWARDED_MESSAGE: usize = 1024;

/// The params of a forwarded `notifications/progress`: the upstream's figures under the
/// client's token (a total or message only when the upstream sent one; the message cut at
/// [`MAX_FORWARDED_MESSAGE`]).
fn forwarded(token: &Value, p: &ToolProgress<'_>) -> Value {
    let mut params = json!({ "progressToken": token, "progress": p.progress });
    if let Some(total) = p.total {
        params["total"] = json!(total);
    }
    if let Some(message) = p.message {
        params["message"] = match message.len() <= MAX_FORWARDED_MESSAGE {
            true => json!(message),
            false => {
                let cut =
                    (0..=MAX_FORWARDED_MESSAGE).rev().find(|&i| message.is_char_boundary(i)).unwrap_or(0);
                json!(format!("{}…", &message[..cut]))
            }
        };
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncerpc_core::StepProgress;

    #[test]
    fn an_upstreams_progress_goes_out_under_the_clients_token_and_steps_as_before() {
        let (outbox, mut rx) = Outbox::channel();
        let p = progress(Some(&outbox), Some(json!("tok-1")), None, "pay.charge", None).expect("a sink");
        p.forward(&ToolProgress { progress: 0.5, total: Some(2.0), message: Some("half") });
        p.forward(&ToolProgress { progress: 1.0, total: None, message: None });
        p.report(&StepProgress { step: "send", done: 1, total: 1, ok: true, resumed: false });
        let sent: Vec<Value> =
            std::iter::from_fn(|| rx.try_recv().ok()).map(|b| serde_json::from_slice(&b).unwrap()).collect();
        assert_eq!(
            sent[0]["params"],
            json!({ "progressToken": "tok-1", "progress": 0.5, "total": 2.0, "message": "half" })
        );
        assert_eq!(sent[1]["params"], json!({ "progressToken": "tok-1", "progress": 1.0 }));
        assert_eq!(
            (sent[2]["params"]["progress"].as_u64(), sent[2]["params"]["total"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(sent.len(), 3);
        // No token: an upstream's progress has nowhere to go.
        let quiet = progress(Some(&outbox), None, Some("info"), "pay.charge", None).expect("a log sink");
        quiet.forward(&ToolProgress { progress: 0.5, total: None, message: None });
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_flood_of_progress_is_bounded_in_number_and_in_size() {
        let (outbox, mut rx) = Outbox::channel();
        let p = progress(Some(&outbox), Some(json!(7)), None, "mail.send", None).expect("a sink");
        let huge = "é".repeat(32 * 1024);
        for i in 0..3_000 {
            p.forward(&ToolProgress { progress: f64::from(i), total: None, message: Some(&huge) });
        }
        let sent: Vec<Value> =
            std::iter::from_fn(|| rx.try_recv().ok()).map(|b| serde_json::from_slice(&b).unwrap()).collect();
        // The first ones the client has not read yet are kept; the rest are dropped.
        assert_eq!(sent.len(), oncerpc_stdio::OUTBOX_CAPACITY);
        assert_eq!(sent[0]["params"]["progress"], 0.0);
        let message = sent[0]["params"]["message"].as_str().unwrap();
        assert!(message.len() <= MAX_FORWARDED_MESSAGE + '…'.len_utf8(), "{}", message.len());
        assert!(message.ends_with('…') && message.starts_with("éé"), "cut at a character");
        // A short message goes through whole.
        p.forward(&ToolProgress { progress: 1.0, total: None, message: Some("half") });
        assert_eq!(
            serde_json::from_slice::<Value>(&rx.try_recv().unwrap()).unwrap()["params"]["message"],
            "half"
        );
    }
}
