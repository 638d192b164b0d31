//! MCP tasks (`2026-07-28`, the `io.modelcontextprotocol/tasks` extension, SEP-2663) on the
//! event store.
//!
//! A task is an **event** (SPEC §14): a `tools/call` of a command from a request whose
//! `_meta` client capabilities declare the extension is submitted as an async execution
//! ([`Dispatcher::submit`]) and answered at once with a `CreateTaskResult` whose `taskId` is
//! the event id. The event id is derived from `(tenant, tool, key)`, so the same call with the
//! same key gets the same task, never a second execution — whichever door (`/v2/flows`,
//! `/rpc`, MCP) or replica started it, and after a restart (the step journal resumes it).
//!
//! * **Which calls become tasks**: commands (every configured flow is one), when the request
//!   declares the extension; queries always answer inline. Without the extension a command
//!   runs synchronously as before, unless it is `tasks = "required"` (`-32021`).
//! * **`tasks/get`**: the event, tenant-scoped (another tenant's id is unknown: `-32602`).
//!   `working` while it runs; `completed` with the tool result inlined (the stored outcome
//!   through [`call::tool_result`], the same bytes for every reader); `failed` with the
//!   JSON-RPC `error` when oncerpc itself could not produce the tool's answer (see
//!   [`FAILED`]); `cancelled` after `tasks/cancel`. Every other error is the tool's own:
//!   `completed` with an `isError` result, as the synchronous call answers it.
//! * **`tasks/cancel`**: [`Dispatcher::cancel_event`]; the empty ack, also for a finished task.
//! * **`tasks/update`**: no tool here asks for input, so there is nothing to resume: the
//!   empty ack for a known task (responses are ignored), `-32602` for an unknown one.
//! * `tasks/list` and `tasks/result` are not in the revision (`-32601`).
//!
//! The session era's experimental tasks (`2025-11-25`) are the same events in that revision's
//! shapes: [`session`].

use std::sync::Arc;

use oncerpc_core::events::Cancelled;
use oncerpc_core::store::{Event, EventStatus, StoredOutcome};
use oncerpc_core::{Dispatcher, Kind, LogSafe};
use oncerpc_protocol::{ErrorCode, Id, Outcome, RawValue, Request, RpcError};
use serde_json::{Map, Value, json};

pub use crate::meta::EXTENSION;
use crate::meta::META_CLIENT_CAPABILITIES;
use crate::{Session, Tools, call};

pub mod session;

/// How often a client is asked to poll `tasks/get`.
pub const POLL_INTERVAL_MS: u64 = 1000;
/// The errors that make a task `failed`: oncerpc could not produce the tool's answer (an
/// internal failure or a panic, the store out of reach, the deadline passed, no room to run
/// it). Every other error is the tool's answer, and its task `completed` with `isError`.
pub const FAILED: [ErrorCode; 4] =
    [ErrorCode::InternalError, ErrorCode::StoreUnavailable, ErrorCode::Timeout, ErrorCode::Overloaded];

/// Whether a request's `_meta` client capabilities declare the extension.
pub fn declared(params: &Map<String, Value>) -> bool {
    params.get("_meta").and_then(|m| m.get(META_CLIENT_CAPABILITIES)).is_some_and(declared_capabilities)
}

/// Whether client capabilities (`_meta["io.modelcontextprotocol/clientCapabilities"]`)
/// declare the extension.
pub fn declared_capabilities(capabilities: &Value) -> bool {
    capabilities.get("extensions").and_then(|e| e.get(EXTENSION)).is_some_and(Value::is_object)
}

/// `-32021`: the request needs the extension, and names it in `data.requiredCapabilities`.
pub fn missing_capability() -> RpcError {
    RpcError::with_message(
        ErrorCode::MissingRequiredClientCapability,
        format!(
            "Missing required client capability: declare the {EXTENSION} extension in \
             _meta[\"{META_CLIENT_CAPABILITIES}\"].extensions"
        ),
    )
    .data(json!({ "requiredCapabilities": { "extensions": { EXTENSION: {} } } }))
}

/// How a `tools/call` of the stateless revision runs.
pub enum Route {
    /// Inline, as the session era's (queries; commands without the extension; unknown tools,
    /// which the call refuses).
    Sync,
    /// As a task.
    Task,
    /// Refused before anything runs.
    Refused(RpcError),
}

/// The route of a `tools/call` of the tool `name`, from a client that has `declared` the
/// extension or not.
pub fn route(tools: &Tools, name: Option<&str>, declared: bool) -> Route {
    let external = |n: &str| tools.external().get(n).map(|t| (t.tool.kind, t.tool.task_required));
    let Some((kind, task_required)) =
        name.and_then(|n| tools.get(n).map(|t| (t.kind, t.task_required)).or_else(|| external(n)))
    else {
        return Route::Sync;
    };
    // A tool that asks its client questions needs the client there: it answers inline.
    if name.and_then(|n| tools.get(n)).is_some_and(|t| t.asks) {
        return Route::Sync;
    }
    match (kind, declared) {
        (Kind::Command, true) => Route::Task,
        (Kind::Command, false) if task_required => Route::Refused(missing_capability()),
        _ => Route::Sync,
    }
}

/// Start a `tools/call` as a task: the `CreateTaskResult` (and `false`), or the tool's error
/// result when the call is refused before it becomes an event (invalid arguments, a key
/// reused with other arguments, the store out of reach…), as the synchronous call answers it
/// (and `true`).
pub async fn create(
    dispatcher: &Arc<Dispatcher>,
    tools: &Tools,
    req: &Request<'_>,
    id: Id<'_>,
    session: &Session,
) -> Result<(String, bool), RpcError> {
    let prepared = call::prepare(tools, req, id, session, None)?;
    Ok(match start(dispatcher, prepared).await {
        Started::Task { id, event, meta } => {
            let mut task = envelope(dispatcher, &id, event.as_deref(), "task");
            task.insert("_meta".into(), Value::Object(meta));
            (Value::Object(task).to_string(), false)
        }
        Started::Refused(result) => (crate::meta::complete(&result), true),
    })
}

/// What [`start`] did with a call.
pub(crate) enum Started {
    /// An event runs it (or ran it: the same key): its id, the event as written, and the
    /// result's `_meta` (the key unless it was made up, `new|duplicate|processing`).
    Task { id: String, event: Option<Box<Event>>, meta: Map<String, Value> },
    /// Refused before it became an event: the tool's error result (JSON text).
    Refused(String),
}

/// Submit a prepared `tools/call` as an event (both eras' task creation).
pub(crate) async fn start(dispatcher: &Arc<Dispatcher>, prepared: call::Prepared<'_>) -> Started {
    if let Some(e) = &prepared.refused {
        let cid = prepared.meta.correlation_id.as_deref().unwrap_or("");
        return Started::Refused(call::tool_result(&Outcome::Error(e.clone()), None, cid));
    }
    let submitted = dispatcher.submit(&prepared.name, Some(&prepared.arguments), &prepared.meta, Vec::new());
    match submitted.await {
        Ok(sub) => {
            // Written before `submit` answered: a tasks/get right after this answer finds it.
            let event = dispatcher.store().get_event(&sub.event_id).await.ok().flatten().map(Box::new);
            let mut meta = Map::new();
            if !sub.synthetic_key {
                meta.insert(call::META_KEY.into(), json!(&*sub.key));
            }
            meta.insert(call::META_STATUS.into(), json!(sub.status.as_str()));
            tracing::info!(tool = %LogSafe(&prepared.name), event_id = %sub.event_id, status = sub.status.as_str(), "MCP task");
            Started::Task { id: sub.event_id, event, meta }
        }
        Err(e) => {
            let cid = prepared.meta.correlation_id.as_deref().unwrap_or("");
            Started::Refused(call::tool_result(&Outcome::Error(e), None, cid))
        }
    }
}

/// `tasks/get`: the task as it stands, with its result or error once it has one.
pub async fn get(
    dispatcher: &Dispatcher,
    tenant: &str,
    params: &Map<String, Value>,
) -> Result<String, RpcError> {
    Ok(detailed(dispatcher, &named_event(dispatcher, tenant, params, "tasks/get").await?))
}

/// `tasks/cancel`: the empty ack; a running task is cancelled, a finished one left as it is.
pub async fn cancel(
    dispatcher: &Dispatcher,
    tenant: &str,
    params: &Map<String, Value>,
) -> Result<String, RpcError> {
    let id = task_id(params, "tasks/cancel")?;
    match dispatcher.cancel_event(tenant, id).await {
        Ok(Cancelled::NotFound) => Err(unknown(id)),
        Ok(_) => Ok(ACK.to_owned()),
        Err(e) => Err(unavailable(&e, "cancel a task")),
    }
}

/// `tasks/update`: nothing here waits for input, so a known task gets the empty ack.
pub async fn update(
    dispatcher: &Dispatcher,
    tenant: &str,
    params: &Map<String, Value>,
) -> Result<String, RpcError> {
    let id = task_id(params, "tasks/update")?;
    if params.get("inputResponses").is_some_and(|r| !r.is_object()) {
        return Err(RpcError::invalid_params("tasks/update: inputResponses must be an object"));
    }
    tenant_event(dispatcher, tenant, id).await?;
    Ok(ACK.to_owned())
}

const ACK: &str = r#"{"resultType":"complete"}"#;

pub(crate) fn task_id<'p>(params: &'p Map<String, Value>, method: &str) -> Result<&'p str, RpcError> {
    params
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("{method} needs taskId (a string)")))
}

pub(crate) fn unknown(id: &str) -> RpcError {
    RpcError::invalid_params(format!("Unknown task: {}", LogSafe(id)))
}

/// `-32004` for a store that did not answer, logged once.
pub(crate) fn unavailable(e: &oncerpc_core::store::StoreError, what: &str) -> RpcError {
    tracing::error!(error = %e, "could not {what}: the store did not answer");
    RpcError::new(ErrorCode::StoreUnavailable)
}

/// The event `params.taskId` names, if it is `tenant`'s (for `method`'s errors).
pub(crate) async fn named_event(
    dispatcher: &Dispatcher,
    tenant: &str,
    params: &Map<String, Value>,
    method: &str,
) -> Result<Event, RpcError> {
    tenant_event(dispatcher, tenant, task_id(params, method)?).await
}

/// The event `id` if it is `tenant`'s (another tenant's is as unknown as a missing one).
pub(crate) async fn tenant_event(dispatcher: &Dispatcher, tenant: &str, id: &str) -> Result<Event, RpcError> {
    match dispatcher.store().get_event(id).await {
        Ok(Some(e)) if &*e.record.tenant == tenant => Ok(e),
        Ok(_) => Err(unknown(id)),
        Err(e) => Err(unavailable(&e, "read a task")),
    }
}

/// What a task's status is, and what it carries.
pub(crate) enum State {
    Working,
    /// The tool result (JSON text), and whether it is an error result (`isError`).
    Completed(String, bool),
    /// The JSON-RPC error (JSON text, as stored).
    Failed(String),
    Cancelled,
}

/// Whether an event is of another MCP server's tool (not the registry's): its stored result is
/// that server's whole `CallToolResult`, answered as it came ([`crate::external::result`]).
pub(crate) fn is_external(dispatcher: &Dispatcher, event: &Event) -> bool {
    dispatcher.registry().spec(&event.record.method).is_none()
}

/// The task an event is, as every revision reads it (`dispatcher` tells an upstream tool's).
pub(crate) fn state(dispatcher: &Dispatcher, event: &Event) -> State {
    match (&event.status, &event.outcome) {
        (EventStatus::Processing, _) => State::Working,
        (_, Some(StoredOutcome::Succeeded(json))) if is_external(dispatcher, event) => {
            let (result, is_error) = crate::external::result(json, None, &event.id);
            State::Completed(result, is_error)
        }
        (_, Some(StoredOutcome::Succeeded(json))) => match RawValue::from_string(json.clone()) {
            Ok(raw) => State::Completed(call::tool_result(&Outcome::Result(raw), None, &event.id), false),
            Err(_) => {
                State::Failed(RpcError::internal("stored result is not JSON").to_json().get().to_owned())
            }
        },
        (_, Some(StoredOutcome::Failed(json))) => match RpcError::from_json(json) {
            Ok(e) if e.code == ErrorCode::Cancelled => State::Cancelled,
            Ok(e) if FAILED.contains(&e.code) => State::Failed(json.clone()),
            Ok(e) => State::Completed(call::tool_result(&Outcome::Error(e), None, &event.id), true),
            Err(_) => {
                State::Failed(RpcError::internal("stored error is not JSON").to_json().get().to_owned())
            }
        },
        (_, None) => State::Failed(RpcError::internal("the event has no outcome").to_json().get().to_owned()),
    }
}

/// The members every task shape has, `resultType` first.
fn envelope(
    dispatcher: &Dispatcher,
    id: &str,
    event: Option<&Event>,
    result_type: &str,
) -> Map<String, Value> {
    let ttl_ms = ttl_ms(dispatcher, event);
    let now = oncerpc_core::store::now_ms();
    let status = match event.map(|e| state(dispatcher, e)) {
        None | Some(State::Working) => "working",
        Some(State::Completed(..)) => "completed",
        Some(State::Failed(_)) => "failed",
        Some(State::Cancelled) => "cancelled",
    };
    let mut task = Map::new();
    task.insert("resultType".into(), json!(result_type));
    task.insert("taskId".into(), json!(id));
    task.insert("status".into(), json!(status));
    task.insert("createdAt".into(), json!(iso8601(event.map_or(now, |e| e.created_at_ms))));
    task.insert("lastUpdatedAt".into(), json!(iso8601(event.map_or(now, |e| e.updated_at_ms))));
    task.insert("ttlMs".into(), json!(ttl_ms));
    task.insert("pollIntervalMs".into(), json!(POLL_INTERVAL_MS));
    task
}

/// A task's lifetime: the record's (its event expires with it), from its creation.
pub(crate) fn ttl_ms(dispatcher: &Dispatcher, event: Option<&Event>) -> u64 {
    match event {
        Some(e) => e.expires_at_ms.saturating_sub(e.created_at_ms),
        None => dispatcher.config().idempotency.ttl.as_millis() as u64,
    }
    .max(1)
}

/// A `tasks/get` result: the envelope, and the inlined `result` (its bytes as made from the
/// stored outcome) or `error` (as stored).
fn detailed(dispatcher: &Dispatcher, event: &Event) -> String {
    let mut task = envelope(dispatcher, &event.id, Some(event), "complete");
    let (member, raw) = match state(dispatcher, event) {
        State::Working => (None, String::new()),
        // The inlined `CallToolResult` is the revision's, `resultType` and all (the tasks
        // extension's schema requires it; the official ext-tasks client refuses it without).
        State::Completed(result, _) => (Some("result"), crate::meta::complete(&result)),
        State::Failed(error) => (Some("error"), error),
        State::Cancelled => {
            task.insert("statusMessage".into(), json!("cancelled by tasks/cancel"));
            (None, String::new())
        }
    };
    let text = Value::Object(task).to_string();
    match member {
        // Appended as text: the result's bytes are kept as they are.
        Some(name) => format!(r#"{},"{name}":{raw}}}"#, &text[..text.len() - 1]),
        None => text,
    }
}

/// `2026-07-28T10:30:00.123Z` for milliseconds since the Unix epoch.
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_iso_8601() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(iso8601(1_785_233_400_000), "2026-07-28T10:10:00.000Z");
    }

    #[test]
    fn the_extension_is_read_from_the_request_capabilities() {
        let with =
            |caps: Value| json!({ "_meta": { META_CLIENT_CAPABILITIES: caps } }).as_object().unwrap().clone();
        assert!(declared(&with(json!({ "extensions": { EXTENSION: {} } }))));
        assert!(!declared(&with(json!({ "extensions": { EXTENSION: true } }))));
        assert!(!declared(&with(json!({}))));
        assert!(!declared(&Map::new()));
        let e = missing_capability();
        assert_eq!(e.code.code(), -32021);
        let data: Value = serde_json::from_str(e.data.unwrap().get()).unwrap();
        assert!(data["requiredCapabilities"]["extensions"][EXTENSION].is_object());
    }
}
