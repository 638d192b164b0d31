//! The session era's experimental tasks (`2025-11-25`) on the event store: the same tasks as
//! the `2026-07-28` extension's ([`super`]) — a task is an event, its id the event id, so the
//! same call with the same key is the same task on every door and replica — in the wire shapes
//! of that revision.
//!
//! * **Capability**: `initialize` of a `2025-11-25` session declares `tasks` (`list`, `cancel`,
//!   `requests.tools.call`); `tools/list` shows each tool's `execution.taskSupport`: a query
//!   `forbidden`, a command `optional`, or `required` (`tasks = "required"`). Older revisions
//!   have no tasks: their `params.task` is ignored (the call runs inline) and `tasks/*` are
//!   `-32601`.
//! * **`tools/call` with `params.task`** (`{"ttl": ms}`, the `ttl` a wish: a task lives as
//!   long as its record, `idempotency.ttl`): a command starts as an event and answers
//!   `CreateTaskResult` (`{"task": Task}`). A query with `params.task`, or a `required` tool
//!   without it, is `-32601` (the revision's answer); a `task` that is not an object, or a
//!   `ttl` that is not a non-negative number, is `-32602`. Nothing runs for any of them.
//! * **`Task`**: `taskId`, `status` (`working`, `completed`, `failed` — the tool's answer is an
//!   error result, as the revision counts it — or `cancelled`), `statusMessage` (the error's
//!   message, or why it was cancelled), `createdAt`, `lastUpdatedAt`, `ttl`, `pollInterval`.
//! * **`tasks/get`**, **`tasks/list`** (the tenant's tasks, newest first, cursor paginated),
//!   **`tasks/cancel`** (a finished task is `-32602`, as the revision says; a running one is
//!   cancelled and answered as it is now), **`tasks/result`** (waits until the task is
//!   finished, then answers what the call would have: the tool result from the stored
//!   outcome, with `_meta["io.modelcontextprotocol/related-task"]`). Another tenant's task
//!   is as unknown as a missing one (`-32602`).
//! * **Notifications**: a `tasks/result` that waited sends `notifications/tasks/status` with
//!   the finished task before its answer (over HTTP on its SSE stream, when the client takes
//!   one); a flow's steps reach the call's `progressToken` for the task's lifetime, as the
//!   revision says, where the transport still listens (stdio; over HTTP the call's answer has
//!   ended its stream), naming the task in `_meta`.

use std::sync::Arc;
use std::time::Duration;

use oncerpc_core::Dispatcher;
use oncerpc_core::events::Cancelled;
use oncerpc_core::store::{Event, EventFilter, StoredOutcome, parse_list_cursor};
use oncerpc_protocol::{ErrorCode, Outcome, RawValue, RpcError};
use serde_json::{Map, Value, json};

use super::{
    POLL_INTERVAL_MS, Started, State, iso8601, state, task_id, tenant_event, ttl_ms, unavailable, unknown,
};
use crate::{Outbox, Session, call};

/// The revision whose tasks these are.
pub const REVISION: &str = "2025-11-25";
/// Tasks in one `tasks/list` page.
pub const LIST_PAGE: usize = 50;
/// The longest pause between two reads of a task `tasks/result` waits for.
const WAIT_MAX: Duration = Duration::from_millis(500);

/// Whether the session's revision has tasks.
pub fn offered(session: &Session) -> bool {
    session.version == Some(REVISION)
}

/// The server's `tasks` capability.
pub fn capability() -> Value {
    json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } })
}

/// How a session-era `tools/call` runs.
pub(crate) enum Route {
    Sync,
    Task,
    Refused(RpcError),
}

/// The route of a prepared call (see the module's notes).
pub(crate) fn route(prepared: &call::Prepared<'_>, session: &Session) -> Route {
    if !offered(session) {
        return Route::Sync;
    }
    let requested = match prepared.task.as_deref().map(|t| serde_json::from_str::<Value>(t.get())) {
        None | Some(Ok(Value::Null)) => false,
        Some(Ok(Value::Object(task))) => match task.get("ttl") {
            None | Some(Value::Null) => true,
            Some(Value::Number(n)) if n.as_f64().is_some_and(|t| t >= 0.0) => true,
            Some(_) => {
                return Route::Refused(RpcError::invalid_params("task.ttl must be a number of milliseconds"));
            }
        },
        Some(_) => return Route::Refused(RpcError::invalid_params("task must be an object: {\"ttl\": ms}")),
    };
    let tool = prepared.tool.tool();
    // Queries answer inline (taskSupport "forbidden"); commands, other MCP servers' too, may
    // run as tasks.
    let inline_only = tool.kind == oncerpc_core::Kind::Query || tool.asks;
    match (requested, inline_only) {
        (true, true) => Route::Refused(RpcError::with_message(
            ErrorCode::MethodNotFound,
            format!(
                "tool {} does not run as a task (execution.taskSupport is \"forbidden\"): call it without params.task",
                tool.name
            ),
        )),
        (true, _) => Route::Task,
        (false, _) if tool.task_required => Route::Refused(RpcError::with_message(
            ErrorCode::MethodNotFound,
            format!(
                "tool {} runs only as a task (execution.taskSupport is \"required\"): call it with params.task",
                tool.name
            ),
        )),
        (false, _) => Route::Sync,
    }
}

/// Start a prepared call as a task: the `CreateTaskResult` (and `false`), or the tool's error
/// result when the call is refused before it becomes an event (and `true`), as
/// [`super::create`].
pub(crate) async fn create(dispatcher: &Arc<Dispatcher>, prepared: call::Prepared<'_>) -> (String, bool) {
    let related = prepared.related.clone();
    match super::start(dispatcher, prepared).await {
        Started::Task { id, event, meta } => {
            // The steps' progress names the task from now on (the revision's rule).
            if let Some(r) = related {
                let _ = r.set(id.clone());
            }
            let task = task(dispatcher, &id, event.as_deref());
            (json!({ "task": task, "_meta": meta }).to_string(), false)
        }
        Started::Refused(result) => (result, true),
    }
}

/// `tasks/get`: the task as it stands.
pub async fn get(
    dispatcher: &Dispatcher,
    tenant: &str,
    params: &Map<String, Value>,
) -> Result<String, RpcError> {
    let event = super::named_event(dispatcher, tenant, params, "tasks/get").await?;
    Ok(Value::Object(task(dispatcher, &event.id, Some(&event))).to_string())
}

/// `tasks/list`: a page of the tenant's tasks, newest first.
pub async fn list(dispatcher: &Dispatcher, tenant: &str, cursor: Option<&str>) -> Result<String, RpcError> {
    if cursor.is_some_and(|c| parse_list_cursor(c).is_none()) {
        return Err(RpcError::invalid_params("invalid cursor: pass nextCursor as it came"));
    }
    let filter = EventFilter::default();
    let (events, next) = dispatcher
        .store()
        .list_events(tenant, &filter, cursor, LIST_PAGE)
        .await
        .map_err(|e| unavailable(&e, "list tasks"))?;
    let tasks: Vec<Value> = events.iter().map(|e| Value::Object(task(dispatcher, &e.id, Some(e)))).collect();
    let mut page = json!({ "tasks": tasks });
    if let Some(next) = next {
        page["nextCursor"] = json!(next);
    }
    Ok(page.to_string())
}

/// `tasks/cancel`: a running task is cancelled and answered as it is now; a finished one is
/// refused (`-32602`), as the revision says.
pub async fn cancel(
    dispatcher: &Dispatcher,
    tenant: &str,
    params: &Map<String, Value>,
) -> Result<String, RpcError> {
    let id = task_id(params, "tasks/cancel")?;
    let cancelled =
        dispatcher.cancel_event(tenant, id).await.map_err(|e| unavailable(&e, "cancel a task"))?;
    let now = match cancelled {
        Cancelled::NotFound => return Err(unknown(id)),
        Cancelled::Now(_) | Cancelled::AlreadyDone(_) => tenant_event(dispatcher, tenant, id).await?,
    };
    if matches!(cancelled, Cancelled::AlreadyDone(_)) {
        let (status, _) = status(dispatcher, &now);
        return Err(RpcError::invalid_params(format!(
            "Cannot cancel task: already in terminal status '{status}'"
        )));
    }
    Ok(Value::Object(task(dispatcher, id, Some(&now))).to_string())
}

/// `tasks/result`: wait until the task is finished, then what the call would have answered
/// (the tool result made from the stored outcome), naming the task in `_meta`. A wait that
/// saw the task working tells `outbox` the finished task (`notifications/tasks/status`).
pub async fn result(
    dispatcher: &Dispatcher,
    tenant: &str,
    params: &Map<String, Value>,
    outbox: Option<&Outbox>,
) -> Result<String, RpcError> {
    let id = task_id(params, "tasks/result")?;
    let mut pause = Duration::from_millis(20);
    let mut waited = false;
    loop {
        // Read again each time: the task may run on another replica, or be resumed there.
        let event = tenant_event(dispatcher, tenant, id).await?;
        let outcome = match &event.outcome {
            _ if matches!(state(dispatcher, &event), State::Working) => None,
            // Another server's tool: its whole result, as it came, naming the task.
            Some(StoredOutcome::Succeeded(json)) if super::is_external(dispatcher, &event) => {
                let (result, _) = crate::external::result(json, None, id);
                let mut result: Value = serde_json::from_str(&result).map_err(RpcError::internal)?;
                result["_meta"][call::META_RELATED_TASK] = json!({ "taskId": id });
                return Ok(result.to_string());
            }
            Some(StoredOutcome::Succeeded(json)) => Some(match RawValue::from_string(json.clone()) {
                Ok(raw) => Outcome::Result(raw),
                Err(_) => Outcome::Error(RpcError::internal("stored result is not JSON")),
            }),
            Some(StoredOutcome::Failed(json)) => Some(Outcome::Error(
                RpcError::from_json(json).unwrap_or_else(|_| RpcError::internal("stored error is not JSON")),
            )),
            None => Some(Outcome::Error(RpcError::internal("the task has no outcome"))),
        };
        if let Some(outcome) = outcome {
            if waited && let Some(outbox) = outbox {
                let note = json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/tasks/status",
                    "params": task(dispatcher, id, Some(&event)),
                });
                // A client that left: nothing to tell.
                let _ = outbox.send(note.to_string().into_bytes());
            }
            return Ok(call::task_tool_result(&outcome, id));
        }
        waited = true;
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(WAIT_MAX);
    }
}

/// A task's status in this revision, and its message.
fn status(dispatcher: &Dispatcher, event: &Event) -> (&'static str, Option<String>) {
    let message = || match &event.outcome {
        Some(StoredOutcome::Failed(json)) => RpcError::from_json(json).ok().map(|e| e.message.into_owned()),
        _ => None,
    };
    match state(dispatcher, event) {
        State::Working => ("working", None),
        State::Completed(_, false) => ("completed", None),
        // An error result is a failed task here (the 2025-11-25 revision's rule).
        State::Completed(_, true) | State::Failed(_) => ("failed", message()),
        State::Cancelled => ("cancelled", Some("The task was cancelled by tasks/cancel.".into())),
    }
}

/// The `Task` of event `id` (`None`: just accepted, not readable yet: working).
fn task(dispatcher: &Dispatcher, id: &str, event: Option<&Event>) -> Map<String, Value> {
    let now = oncerpc_core::store::now_ms();
    let (status, message) = event.map_or(("working", None), |e| status(dispatcher, e));
    let mut task = Map::new();
    task.insert("taskId".into(), json!(id));
    task.insert("status".into(), json!(status));
    if let Some(m) = message {
        task.insert("statusMessage".into(), json!(m));
    }
    task.insert("createdAt".into(), json!(iso8601(event.map_or(now, |e| e.created_at_ms))));
    task.insert("lastUpdatedAt".into(), json!(iso8601(event.map_or(now, |e| e.updated_at_ms))));
    task.insert("ttl".into(), json!(ttl_ms(dispatcher, event)));
    task.insert("pollInterval".into(), json!(POLL_INTERVAL_MS));
    task
}
