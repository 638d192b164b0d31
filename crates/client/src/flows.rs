//! The flows door (`POST /v2/flows/{flow}`) and the events API (`/v2/events`), SPEC §4, §14.

use std::time::Duration;

use oncerpc_protocol::ErrorCode;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::Instrument;

use crate::client::Client;
use crate::engine;
use crate::error::{Error, RpcFailure};
use crate::http::HttpTransport;
use crate::key::KeyChoice;
use crate::outcome::{IdempotencyStatus, Outcome};
use crate::retry::{Cause, RetryPolicy, Safety};
use crate::transport::{Failed, Reply};
use crate::wire;

/// A flows-door call being built.
///
/// ```no_run
/// # async fn demo(client: oncerpc_client::Client) -> Result<(), oncerpc_client::Error> {
/// use serde_json::json;
/// let submitted = client.flow("orders.create", json!({"sku": "A-1"})).key("order-1001").submit().await?;
/// let event = client.wait(&submitted.event_id).await?; // polls with backoff until it is done
/// println!("{:?}: {:?}", event.status, event.result);
/// # Ok(()) }
/// ```
#[must_use = "a flow call does nothing until it is submitted or called"]
pub struct Flow {
    client: Client,
    name: String,
    params: Result<Option<Value>, String>,
    key: KeyChoice,
    force: bool,
    tags: Vec<String>,
    return_step: Option<String>,
    policy: RetryPolicy,
}

/// What `POST /v2/flows/{flow}` answered to a submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    /// The event's id: the same for every submission with this key.
    pub event_id: String,
    /// The key it was submitted with (`None` when sent without one).
    pub key: Option<String>,
    /// `new` or `duplicate` (`processing` when another submission with the key is running).
    pub status: Option<IdempotencyStatus>,
    pub correlation_id: Option<String>,
    pub attempts: u32,
}

/// An event's state (`GET /v2/events/{id}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventStatus {
    Processing,
    Succeeded,
    Failed,
    /// Cancelled while it ran (MCP `tasks/cancel`); its `error` is `-32009 Cancelled`.
    Cancelled,
}

/// An event, as `GET /v2/events/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Event {
    pub event_id: String,
    pub flow: String,
    pub status: EventStatus,
    #[serde(default)]
    pub tags: Vec<String>,
    /// The result, once succeeded.
    #[serde(default)]
    pub result: Option<Value>,
    /// The error object, once failed.
    #[serde(default)]
    pub error: Option<Value>,
    #[serde(default)]
    pub created_at: String,
    #[serde(default)]
    pub updated_at: String,
    /// Each step's name, status, attempts and times.
    #[serde(default)]
    pub steps: Option<Value>,
}

/// One page of `GET /v2/events`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct EventPage {
    pub events: Vec<Event>,
    /// Pass it to [`EventsQuery::cursor`] for the next page; `None` after the last.
    pub next_cursor: Option<String>,
}

impl Flow {
    pub(crate) fn new(client: Client, name: &str, params: Result<Option<Value>, String>) -> Flow {
        let policy = client.policy;
        Flow {
            client,
            name: name.to_owned(),
            params,
            key: KeyChoice::Auto,
            force: false,
            tags: Vec::new(),
            return_step: None,
            policy,
        }
    }

    /// The idempotency key (default: a new UUIDv7).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = KeyChoice::Given(key.into());
        self
    }

    /// No key: sent once, never retried.
    pub fn without_key(mut self) -> Self {
        self.key = KeyChoice::None;
        self
    }

    /// `X-Force-Retry: true`: run a failed execution of this key again.
    pub fn force_retry(mut self) -> Self {
        self.force = true;
        self
    }

    /// Tags of the event (`?tags=`), for listing.
    pub fn tags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tags: I) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// The step whose output is the result (`?return_step=`).
    pub fn return_step(mut self, step: impl Into<String>) -> Self {
        self.return_step = Some(step.into());
        self
    }

    /// This call's total deadline (default: the client's).
    pub fn deadline(mut self, d: Duration) -> Self {
        self.policy.deadline = d;
        self
    }

    fn path(&self, sync: bool) -> String {
        let mut path = format!("/v2/flows/{}", encode(&self.name));
        let mut query = Vec::new();
        if sync {
            query.push("sync=true".to_owned());
        }
        if !self.tags.is_empty() {
            query.push(format!("tags={}", encode(&self.tags.join(","))));
        }
        if let Some(step) = &self.return_step {
            query.push(format!("return_step={}", encode(step)));
        }
        if !query.is_empty() {
            path.push('?');
            path.push_str(&query.join("&"));
        }
        path
    }

    /// Submit: the event's id at once, the flow runs in the background. A retry with the
    /// same key gets the same id and runs nothing.
    pub async fn submit(self) -> Result<Submitted, Error> {
        let path = self.path(false);
        let (reply, key, attempts) = self.send(path).await?;
        #[derive(Deserialize)]
        struct Body {
            event_id: String,
        }
        let body: Body = serde_json::from_slice(&reply.body).map_err(|_| reply.unexpected())?;
        Ok(Submitted {
            event_id: body.event_id,
            key,
            status: reply.idempotency_status,
            correlation_id: reply.correlation_id,
            attempts,
        })
    }

    /// Call synchronously (`?sync=true`): the result. While another request with the key is
    /// running (`200 {}`, `processing`), it is asked again, with backoff, within the deadline.
    pub async fn call<T: DeserializeOwned>(self) -> Result<Outcome<T>, Error> {
        let path = self.path(true);
        let (reply, key, attempts) = self.send(path).await?;
        let result = serde_json::from_slice::<T>(&reply.body)
            .map_err(|source| Error::Decode { key: key.clone(), source })?;
        Ok(Outcome {
            result,
            status: reply.idempotency_status,
            key,
            correlation_id: reply.correlation_id,
            attempts,
        })
    }

    async fn send(self, path: String) -> Result<(Reply, Option<String>, u32), Error> {
        let http = self.client.http_transport()?;
        let params = self.params.map_err(Error::InvalidCall)?;
        let key = self.key.resolve()?;
        if self.force && key.is_none() {
            return Err(Error::InvalidCall("force retry needs an idempotency key".into()));
        }
        let safety = if key.is_some() { Safety::KeyedCommand } else { Safety::KeylessCommand };
        let body = params.map(|p| p.to_string().into_bytes()).unwrap_or_default();
        // One correlation id for every attempt (the door takes it from this header), as the
        // JSON-RPC id is on `/rpc`.
        let mut headers = vec![("x-correlation-id", crate::key::new_key())];
        if let Some(k) = &key {
            headers.push(("x-idempotency-key", k.clone()));
        }
        if self.force {
            headers.push(("x-force-retry", "true".to_owned()));
        }
        let span = tracing::info_span!("oncerpc.flow", flow = %self.name, key = key.as_deref().unwrap_or(""));
        let (headers, body, key_ref, path) = (&headers, &body, key.as_deref(), path.as_str());
        let attempt = |_n: u32, timeout: Duration| async move {
            let reply = http.post(path, body.clone(), headers, timeout).await?;
            flow_answer(reply, key_ref)
        };
        let (reply, attempts) = engine::run(&self.policy, safety, attempt).instrument(span).await?;
        Ok((reply, key, attempts))
    }
}

/// A flows-door answer: `200` (not `processing`) is the answer; anything else a failure.
fn flow_answer(reply: Reply, key: Option<&str>) -> Result<Reply, Failed> {
    match reply.http_status {
        Some(200) if reply.idempotency_status == Some(IdempotencyStatus::Processing) => {
            let failure = RpcFailure {
                code: ErrorCode::RequestInProgress,
                message: ErrorCode::RequestInProgress.message().to_owned(),
                data: None,
                key: key.map(str::to_owned),
                status: reply.idempotency_status,
                correlation_id: reply.correlation_id.clone(),
                http_status: reply.http_status,
            };
            Err(Failed {
                cause: Some(Cause::Code(ErrorCode::RequestInProgress)),
                hint: reply.retry_after,
                error: Error::rpc_failure(failure),
            })
        }
        Some(200..=299) => Ok(reply),
        _ => Err(rest_failed(&reply, key)),
    }
}

/// A REST error body (`{"code":"<status>","message",…,"rpc_code"?,"data"?}`) as a failure.
/// The code is `rpc_code` when the door gave one, else the table's code for the status and
/// message (SPEC §8); it is retried by its HTTP status unless an `rpc_code` says it is an
/// outcome (`-32005`, `-32006`, an application's).
fn rest_failed(reply: &Reply, key: Option<&str>) -> Failed {
    #[derive(Deserialize)]
    struct Body {
        message: String,
        #[serde(default)]
        rpc_code: Option<i32>,
        #[serde(default)]
        data: Option<Value>,
    }
    let status = reply.http_status.unwrap_or(0);
    if status == 401 {
        return Failed::fatal(Error::Unauthorized);
    }
    let Ok(body) = serde_json::from_slice::<Body>(&reply.body) else {
        return wire::not_an_answer(reply);
    };
    let code = match body.rpc_code {
        Some(c) => ErrorCode::from_code(c),
        None => code_for_status(status, &body.message),
    };
    let cause = if body.rpc_code.is_some() { Cause::Code(code) } else { Cause::Status(status) };
    let failure = RpcFailure {
        code,
        message: body.message,
        data: body.data,
        key: key.map(str::to_owned),
        status: reply.idempotency_status,
        correlation_id: reply.correlation_id.clone(),
        http_status: reply.http_status,
    };
    Failed { cause: Some(cause), hint: reply.retry_after, error: Error::rpc_failure(failure) }
}

/// The code of SPEC §8's table behind an HTTP status: the one whose message the door sent,
/// else the first with that status.
fn code_for_status(status: u16, message: &str) -> ErrorCode {
    let table = ErrorCode::TABLE.iter().copied().filter(|c| c.http_status() == status);
    let mut first = None;
    for c in table {
        if c.message() == message {
            return c;
        }
        first.get_or_insert(c);
    }
    match (first, status) {
        (Some(c), _) if status != 200 => c,
        (_, 400..=499) => ErrorCode::InvalidRequest,
        _ => ErrorCode::InternalError,
    }
}

/// Percent-encode a path segment or query value (everything but RFC 3986's unreserved).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `GET /v2/events` being built.
#[must_use = "a listing does nothing until it is sent"]
pub struct EventsQuery {
    client: Client,
    params: Vec<(&'static str, String)>,
}

impl EventsQuery {
    fn with(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.params.push((name, value.into()));
        self
    }
    /// Only events in this state.
    pub fn status(self, status: EventStatus) -> Self {
        let s = match status {
            EventStatus::Processing => "processing",
            EventStatus::Succeeded => "succeeded",
            EventStatus::Failed => "failed",
            EventStatus::Cancelled => "cancelled",
        };
        self.with("status", s)
    }
    /// Only events of this flow.
    pub fn flow(self, flow: impl Into<String>) -> Self {
        self.with("flow", flow)
    }
    /// Only events with this tag.
    pub fn tag(self, tag: impl Into<String>) -> Self {
        self.with("tag", tag)
    }
    /// Events per page (1–200, default 50).
    pub fn limit(self, limit: u32) -> Self {
        self.with("limit", limit.to_string())
    }
    /// The page after the one whose `next_cursor` this is.
    pub fn cursor(self, cursor: impl Into<String>) -> Self {
        self.with("cursor", cursor)
    }

    /// One page, newest first.
    pub async fn send(self) -> Result<EventPage, Error> {
        let query: Vec<String> = self.params.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
        let path = if query.is_empty() {
            "/v2/events".to_owned()
        } else {
            format!("/v2/events?{}", query.join("&"))
        };
        get_json(&self.client, &path, self.client.policy).await
    }
}

async fn get_json<T: DeserializeOwned>(client: &Client, path: &str, policy: RetryPolicy) -> Result<T, Error> {
    let http: &HttpTransport = client.http_transport()?;
    let attempt = |_n: u32, timeout: Duration| async move {
        let reply = http.get(path, timeout).await?;
        let reply = flow_answer(reply, None)?;
        serde_json::from_slice::<T>(&reply.body).map_err(|_| Failed::fatal(reply.unexpected()))
    };
    let (value, _) = engine::run(&policy, Safety::Query, attempt).await?;
    Ok(value)
}

impl Client {
    /// A call of the flows door (`POST /v2/flows/{name}`): [`Flow::submit`] for an event,
    /// [`Flow::call`] for the result.
    pub fn flow(&self, name: &str, params: impl serde::Serialize) -> Flow {
        Flow::new(self.clone(), name, crate::client::to_params(params))
    }

    /// An event (`GET /v2/events/{id}`), retried like a query.
    pub async fn event(&self, event_id: &str) -> Result<Event, Error> {
        get_json(self, &format!("/v2/events/{}", encode(event_id)), self.policy).await
    }

    /// Wait for an event to finish (succeeded or failed), polling with backoff within the
    /// client's deadline; see [`Client::wait_for`].
    pub async fn wait(&self, event_id: &str) -> Result<Event, Error> {
        self.wait_for(event_id, self.policy.deadline).await
    }

    /// Wait at most `deadline` for an event to finish. Still processing then:
    /// [`Error::GaveUp`] whose last error is `-32001`.
    pub async fn wait_for(&self, event_id: &str, deadline: Duration) -> Result<Event, Error> {
        let policy = RetryPolicy { deadline, ..self.policy };
        let path = format!("/v2/events/{}", encode(event_id));
        let path = &path;
        let span = tracing::info_span!("oncerpc.wait", event_id);
        let attempt = |_n: u32, timeout: Duration| async move {
            let event: Event = get_json(self, path, RetryPolicy { deadline: timeout, ..self.policy })
                .await
                .map_err(|e| Failed { cause: None, hint: None, error: e })?;
            if event.status != EventStatus::Processing {
                return Ok(event);
            }
            let failure = RpcFailure {
                code: ErrorCode::RequestInProgress,
                message: format!("event {} is still processing", event.event_id),
                data: None,
                key: None,
                status: Some(IdempotencyStatus::Processing),
                correlation_id: None,
                http_status: Some(200),
            };
            Err(Failed {
                cause: Some(Cause::Code(ErrorCode::RequestInProgress)),
                hint: None,
                error: Error::rpc_failure(failure),
            })
        };
        let (event, _) = engine::run(&policy, Safety::Query, attempt).instrument(span).await?;
        Ok(event)
    }

    /// `GET /v2/events`: the tenant's events, newest first.
    pub fn events(&self) -> EventsQuery {
        EventsQuery { client: self.clone(), params: Vec::new() }
    }

    /// Re-drive a failed event (`POST /v2/events/{id}/retry`), sent once: `409` (it
    /// succeeded, or is still processing) and `404` are errors.
    pub async fn retry_event(&self, event_id: &str) -> Result<(), Error> {
        let http = self.http_transport()?;
        let path = format!("/v2/events/{}/retry", encode(event_id));
        let path = &path;
        let attempt = |_n: u32, timeout: Duration| async move {
            let reply = http.post(path, Vec::new(), &[], timeout).await?;
            flow_answer(reply, None).map(|_| ())
        };
        engine::run(&self.policy, Safety::KeylessCommand, attempt).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: &str) -> Reply {
        Reply { http_status: Some(status), body: body.as_bytes().to_vec(), ..Reply::default() }
    }

    #[test]
    fn rest_errors_map_to_the_table() {
        let f = rest_failed(
            &reply(422, r#"{"code":"422","message":"Idempotency key reused with different params"}"#),
            None,
        );
        assert_eq!(f.error.code(), Some(ErrorCode::KeyReused));
        assert_eq!(f.cause, Some(Cause::Status(422)));
        let f = rest_failed(&reply(503, r#"{"code":"503","message":"Overloaded"}"#), None);
        assert_eq!(f.error.code(), Some(ErrorCode::Overloaded));
        let f = rest_failed(&reply(503, r#"{"code":"503","message":"Idempotency store unavailable"}"#), None);
        assert_eq!(f.error.code(), Some(ErrorCode::StoreUnavailable));
        // An outcome behind a 502: not a gateway hiccup, so not retried.
        let f =
            rest_failed(&reply(502, r#"{"code":"502","message":"Upstream failed","rpc_code":-32006}"#), None);
        assert_eq!(f.cause, Some(Cause::Code(ErrorCode::UpstreamFailed)));
        let f = rest_failed(&reply(404, r#"{"code":"404","message":"unknown flow: x"}"#), None);
        assert_eq!(f.error.code(), Some(ErrorCode::MethodNotFound));
        let f = rest_failed(&reply(502, "<html>"), None);
        assert!(matches!(f.error, Error::Unexpected { status: 502, .. }));
    }

    #[test]
    fn names_and_values_are_percent_encoded() {
        assert_eq!(encode("orders.create"), "orders.create");
        assert_eq!(encode("a b/c?d"), "a%20b%2Fc%3Fd");
        assert_eq!(encode("é"), "%C3%A9");
    }
}
