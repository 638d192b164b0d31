//! A call's outcome as an MCP tool result (`CallToolResult`), written straight into one
//! buffer: every call's answer goes through here.

use oncerpc_core::IdempotencyInfo;
use oncerpc_protocol::Outcome;

use crate::meta::{META_CORRELATION, META_KEY, META_RELATED_TASK, META_STATUS};

/// A tool result: the method's result as one text item and as `structuredContent` (itself
/// when an object, else `{"result": …}`); an error as `isError: true` with its message as the
/// text and `{code, message, data}` as `structuredContent`. The result's bytes are kept: a
/// duplicate's content is the stored result, byte for byte.
pub fn tool_result(outcome: &Outcome, info: Option<&IdempotencyInfo>, cid: &str) -> String {
    write_tool_result(outcome, info, cid, false, None)
}

/// A task's tool result (`tasks/result`, `2025-11-25`): [`tool_result`] whose `_meta` names the
/// task (`io.modelcontextprotocol/related-task`), as the revision asks.
pub fn task_tool_result(outcome: &Outcome, task_id: &str) -> String {
    write_tool_result(outcome, None, task_id, false, Some(task_id))
}

/// [`tool_result`], beginning with `resultType: "complete"` when `complete` (`2026-07-28`),
/// its `_meta` naming `related_task` when given.
/// The text of a failure answered again from the store: its message, then what it is and
/// what to do.
pub fn replayed_failure(message: &str, key: &str) -> String {
    format!("{message}\n\n{}", replay_hint(key))
}

/// What a replayed failure is and how to get past it: after its message in the text, and as
/// `hint` in its `structuredContent` (some frameworks show a model only that).
pub fn replay_hint(key: &str) -> String {
    format!(
        "This is the stored outcome of an earlier attempt with idempotency_key \"{key}\": \
         the action did not run again. To run it again, call the tool with the same arguments, the \
         same idempotency_key and force_retry: true."
    )
}

pub(crate) fn write_tool_result(
    outcome: &Outcome,
    info: Option<&IdempotencyInfo>,
    cid: &str,
    complete: bool,
    related_task: Option<&str>,
) -> String {
    // Written straight into one buffer: this is every call's answer.
    let mut out = Vec::with_capacity(256);
    let text = |out: &mut Vec<u8>, s: &str| {
        // Writing a str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    };
    if complete {
        out.extend_from_slice(br#"{"resultType":"complete","content":[{"type":"text","text":"#);
    } else {
        out.extend_from_slice(br#"{"content":[{"type":"text","text":"#);
    }
    match outcome {
        Outcome::Result(raw) => {
            let result = raw.get();
            text(&mut out, result);
            out.extend_from_slice(br#"}],"structuredContent":"#);
            if result.trim_start().starts_with('{') {
                out.extend_from_slice(result.as_bytes());
            } else {
                out.extend_from_slice(br#"{"result":"#);
                out.extend_from_slice(result.as_bytes());
                out.push(b'}');
            }
            out.extend_from_slice(br#","isError":false"#);
        }
        Outcome::Error(e) => {
            // A replayed failure says that it is one, and how to get past it (the model that
            // retries with the same key would otherwise get it forever).
            let replayed = info.filter(|i| i.status == oncerpc_core::IdempotencyStatus::Duplicate);
            match replayed {
                Some(i) => text(&mut out, &replayed_failure(&e.message, &i.key)),
                None => text(&mut out, &e.message),
            }
            out.extend_from_slice(br#"}],"structuredContent":"#);
            let error = e.to_json();
            match (replayed, error.get().strip_suffix('}')) {
                // The stored error's members, then the hint.
                (Some(i), Some(open)) => {
                    out.extend_from_slice(open.as_bytes());
                    out.extend_from_slice(br#","hint":"#);
                    text(&mut out, &replay_hint(&i.key));
                    out.push(b'}');
                }
                _ => out.extend_from_slice(error.get().as_bytes()),
            }
            out.extend_from_slice(br#","isError":true"#);
        }
    }
    // `_meta`, its members in name order.
    out.extend_from_slice(br#","_meta":{"#);
    if let Some(task) = related_task {
        out.push(b'"');
        out.extend_from_slice(META_RELATED_TASK.as_bytes());
        out.extend_from_slice(br#"":{"taskId":"#);
        text(&mut out, task);
        out.extend_from_slice(b"},");
    }
    out.push(b'"');
    out.extend_from_slice(META_CORRELATION.as_bytes());
    out.extend_from_slice(br#"":"#);
    text(&mut out, cid);
    if let Some(info) = info {
        out.extend_from_slice(br#",""#);
        out.extend_from_slice(META_KEY.as_bytes());
        out.extend_from_slice(br#"":"#);
        text(&mut out, &info.key);
        out.extend_from_slice(br#",""#);
        out.extend_from_slice(META_STATUS.as_bytes());
        out.extend_from_slice(br#"":""#);
        out.extend_from_slice(info.status.as_str().as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b"}}");
    // Only JSON text and valid UTF-8 went in.
    String::from_utf8(out).unwrap_or_default()
}
