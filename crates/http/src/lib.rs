//! # oncerpc-http
//!
//! The HTTP front door (SPEC §4), on axum/hyper:
//!
//! * `POST /rpc` — JSON-RPC over HTTP (module `rpc`). JSON-RPC errors travel in a `200` body;
//!   `204` when there is nothing to return; `413` with a JSON-RPC `-32600` body (`id: null`)
//!   over the body limit.
//! * `POST /v2/flows/{flow}`, `GET /v2/events/{event_id}` — the REST door (module `flows`).
//! * `GET /healthz` (module `health`), `GET /openrpc.json`, `GET /metrics` (module `ops`),
//!   `GET /openapi.json` (the REST doors as an OpenAPI document, module [`openapi`]).
//! * `/console` — the operator console ([`console`]), when enabled.
//! * Tenants ([`auth`]): once configured, `/rpc` and `/v2/*` need an API key
//!   (`X-API-Key` or `?key=`), else `401 {"code":"401","message":"unauthorized"}`.
//! * `limits.max_in_flight`: past it, `503` (`-32007`).
//! * Per tenant ([`TenantLimits`], SPEC §12): over its rate, `429` + `Retry-After` (`-32008`);
//!   over its own `max_in_flight`, `503` (`-32007`).
//! * [`serve`] with graceful shutdown: stop accepting, let in-flight requests finish.
//!   Connection limits ([`ServeConfig`], SPEC §12): header timeout (the first head read
//!   before hyper takes the connection; later ones, and the wait for them on a kept-alive
//!   connection, bounded by the connection's idle timer), idle timeout, `max_connections`
//!   (past it: `503`, `-32007`, then close); bodies are read within `body_timeout` (else
//!   `408`) before admission, so waiting for one holds no in-flight permit.
//!
//! * CORS (module `cors`, `[http] cors_allowed_origins`): off unless origins are configured.
//! * Webhooks ([`webhook`], SPEC §15): a signed method's deliveries on the flows door are
//!   verified over the raw body before anything else (`401` otherwise); the headers a
//!   method's `key_header` names are handed to the engine, which derives keys.
//!
//! Every answer of `/rpc` and `/v2/*` carries `X-Correlation-Id`.
//!
//! A service with its own method behind `POST /rpc`:
//!
//! ```
//! use std::sync::Arc;
//! use oncerpc_core::{Context, Dispatcher, DispatcherConfig, MethodSpec, Registry, typed};
//! use oncerpc_core::protocol::RpcError;
//! use oncerpc_http::{HttpConfig, router};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let mut registry = Registry::new();
//! let hello = typed(|_: Context, (name,): (String,)| async move { Ok::<_, RpcError>(format!("hello, {name}")) });
//! registry.register("hello", MethodSpec::query(), hello).unwrap();
//! let app = router(Arc::new(Dispatcher::new(registry, DispatcherConfig::default())), HttpConfig::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! let addr = listener.local_addr().unwrap();
//! tokio::spawn(async move { axum::serve(listener, app).await });
//!
//! // Any JSON-RPC client will do; here, HTTP/1.1 by hand.
//! let body = r#"{"jsonrpc":"2.0","method":"hello","params":["world"],"id":1}"#;
//! let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
//! let head = format!("POST /rpc HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
//! conn.write_all(format!("{head}{body}").as_bytes()).await.unwrap();
//! let mut answer = String::new();
//! conn.read_to_string(&mut answer).await.unwrap();
//! assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
//! assert!(answer.ends_with(r#"{"jsonrpc":"2.0","result":"hello, world","id":1}"#), "{answer}");
//! # });
//! ```

pub mod auth;
pub mod console;
mod cors;
mod door;
mod flows;
mod head;
mod headers;
mod health;
pub use health::ConfigReport;
mod mcp;
mod meta;
pub mod openapi;
mod ops;
mod peer;
mod resource;
mod rpc;
mod serve;
pub use door::{FrontDoor, front_door};
pub(crate) use meta::request_meta;
pub use serve::{Live, ServeConfig, serve, serve_live, shutdown_signal};
mod sse;
pub mod tls;
pub mod webhook;

use std::collections::HashMap;
use std::sync::Arc;

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use oncerpc_core::{Dispatcher, generated_id};
use oncerpc_protocol::{ErrorCode, RpcError};
use tokio::sync::Semaphore;

pub use auth::tokens::Introspection;
pub use auth::tokens::{self, IssuerSpec, Issuers, TenantFrom};
pub use auth::{Caller, TenantLimits, Tenants};
pub(crate) use auth::{challenge_of, insufficient_scope};
pub use axum::Router;
pub use headers::*;
pub use webhook::{Scheme, Verifier, Webhooks};

/// Front-door settings.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Largest accepted request body; larger ones get `413`.
    pub max_body_bytes: usize,
    /// Requests served at once on `/rpc` and `/v2/*`; more get `503` (`-32007`).
    pub max_in_flight: usize,
    /// Configured tenants; empty = one open default tenant.
    pub tenants: Tenants,
    /// The issuers whose access tokens are accepted (`[[auth.issuers]]`); `None`: API keys only.
    pub issuers: Option<Arc<Issuers>>,
    /// The URL clients reach this gateway at (`[http] public_url`): the `resource` of the
    /// protected resource metadata; `None`: `http://` and the request's `Host`.
    pub public_url: Option<String>,
    /// The step names of each flow, for `?return_step=`.
    pub flow_steps: HashMap<String, Vec<String>>,
    /// The whole request body must arrive within this, else `408`.
    pub body_timeout: Duration,
    /// Browser origins allowed by CORS (`"*"`: any); empty: CORS off.
    pub cors_allowed_origins: Vec<String>,
    /// Signed methods and their verifiers (SPEC §15).
    pub webhooks: Webhooks,
    /// The MCP door at `/mcp` (`mcp.enabled`).
    pub mcp_enabled: bool,
    /// The secret that signs MCP session ids (`mcp.session_secret`); `None`: a random one of
    /// this process (sessions then stay on the replica that opened them).
    pub mcp_session_secret: Option<String>,
    /// How long an MCP session may go unused before it ends (`mcp.session_idle_secs`).
    pub mcp_session_idle: Duration,
    /// Other MCP servers' tools offered on `/mcp` (`[[mcp.upstreams]]`), and their state for
    /// `/healthz`.
    pub mcp_external: oncerpc_mcp::External,
    /// How the MCP door names its tools (`mcp.tool_names`): model-safe by default.
    pub mcp_tool_names: oncerpc_mcp::ToolNames,
    /// The operator console at `/console` (`[console]`); `None`: off.
    pub console: Option<console::ConsoleConfig>,
    /// What `/healthz` says about the loaded configuration (empty: nothing).
    pub config_report: ConfigReport,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_body_bytes: 1024 * 1024,
            max_in_flight: 1024,
            tenants: Tenants::default(),
            issuers: None,
            public_url: None,
            flow_steps: HashMap::new(),
            body_timeout: Duration::from_secs(30),
            cors_allowed_origins: Vec::new(),
            webhooks: Webhooks::default(),
            mcp_enabled: true,
            mcp_session_secret: None,
            mcp_session_idle: oncerpc_mcp::sessions::DEFAULT_IDLE,
            mcp_external: oncerpc_mcp::External::default(),
            mcp_tool_names: oncerpc_mcp::ToolNames::default(),
            console: None,
            config_report: ConfigReport::default(),
        }
    }
}

/// One configuration of the front door. Each request reads the state current when it began
/// and keeps it to its end; a reload ([`FrontDoor::successor`]) builds a new one whose
/// process-wide parts (the in-flight limit, the door's metrics, MCP sessions, the console)
/// are this one's, shared.
pub(crate) struct AppState {
    pub dispatcher: Arc<Dispatcher>,
    pub config: HttpConfig,
    in_flight: Arc<Semaphore>,
    default_tenant: Arc<str>,
    /// When a body timeout was last logged (at most once a second).
    body_timeout_logged: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
    /// The headers some method's `key_header` names (lower case); usually none.
    key_headers: Vec<Arc<str>>,
    /// Metrics of the front door's own (webhook refusals, the events API), rendered after the
    /// dispatcher's.
    door_metrics: prometheus::Registry,
    /// `oncerpc_auth_refusals_total{reason}`: callers refused for their credentials.
    auth_refusals: prometheus::IntCounterVec,
    /// `oncerpc_event_api_total{op,status}`: answers of `GET /v2/events` and
    /// `POST /v2/events/{id}/retry` (`flows::observed`).
    event_api: prometheus::IntCounterVec,
    /// `/mcp`, when enabled.
    mcp: Option<Arc<mcp::McpDoor>>,
    /// `/console`, when enabled.
    console: Option<Arc<console::Console>>,
    /// The console made by this or an earlier configuration, kept while `[console]` is off.
    console_made: Option<Arc<console::Console>>,
    /// `GET /openapi.json`, made on its first request (the registry never changes under a
    /// router): an open route must not rebuild a document of every method on each request.
    openapi: std::sync::OnceLock<axum::body::Bytes>,
}

/// The router with every route of the front door.
pub fn router(dispatcher: Arc<Dispatcher>, config: HttpConfig) -> Router {
    front_door(dispatcher, config).router
}

/// A request admitted under `limits.max_in_flight`; dropping it frees the slot.
pub(crate) struct Admitted<'a> {
    _permit: tokio::sync::SemaphorePermit<'a>,
    /// The tenant's own `max_in_flight` slot, when it has one.
    _tenant_permit: Option<tokio::sync::SemaphorePermit<'a>>,
    gauge: &'a prometheus::IntGauge,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Which door a refusal is answered in.
#[derive(Clone, Copy)]
pub(crate) enum Door {
    Rpc,
    Flows,
    /// `/mcp`: refusals are JSON-RPC error bodies, as on `/rpc`.
    Mcp,
}

impl AppState {
    /// `limits.max_in_flight`: admit, or refuse at once (no queueing) with `503`.
    pub(crate) fn admit(&self, door: Door) -> Result<Admitted<'_>, Box<Response>> {
        let metrics = self.dispatcher.metrics();
        match self.in_flight.try_acquire() {
            Ok(permit) => {
                metrics.in_flight.inc();
                Ok(Admitted { _permit: permit, _tenant_permit: None, gauge: &metrics.in_flight })
            }
            Err(_) => {
                let err = RpcError::new(ErrorCode::Overloaded);
                Err(Box::new(match door {
                    Door::Rpc | Door::Mcp => {
                        metrics.overloaded(if matches!(door, Door::Mcp) { "mcp" } else { "rpc" });
                        json_response(
                            StatusCode::SERVICE_UNAVAILABLE,
                            oncerpc_protocol::error_body(&err),
                            Some(&generated_id()),
                        )
                    }
                    Door::Flows => {
                        metrics.overloaded("flows");
                        flows::error_response(&err, &generated_id())
                    }
                }))
            }
        }
    }

    /// Admission, authentication, then the tenant's own limits: the prologue of every guarded
    /// handler.
    pub(crate) async fn guard(
        &self,
        door: Door,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<(Admitted<'_>, Caller), Box<Response>> {
        self.guard_as(door, headers, query, None).await
    }

    /// [`guard`](Self::guard), with the tenant already established (a verified webhook
    /// delivery to a method that names its tenant): no API key is needed then.
    pub(crate) async fn guard_as(
        &self,
        door: Door,
        headers: &HeaderMap,
        query: Option<&str>,
        tenant: Option<Arc<str>>,
    ) -> Result<(Admitted<'_>, Caller), Box<Response>> {
        let mut admitted = self.admit(door)?;
        let caller = match tenant {
            Some(t) => Caller::of(t),
            None => self.authenticate(door, headers, query).await?,
        };
        admitted._tenant_permit = self.admit_tenant(door, &caller.tenant)?;
        Ok((admitted, caller))
    }

    /// A tenant's `rate_per_sec`/`burst` (`429` + `Retry-After`, `-32008`) and `max_in_flight`
    /// (`503`, `-32007`), checked at once (no queueing) — SPEC §12.
    fn admit_tenant(
        &self,
        door: Door,
        tenant: &str,
    ) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, Box<Response>> {
        let Some(limiter) = self.config.tenants.limiter(tenant) else {
            return Ok(None);
        };
        let refusal = match limiter.admit() {
            Ok(permit) => return Ok(permit),
            Err(refusal) => refusal,
        };
        let metrics = self.dispatcher.metrics();
        let cid = generated_id();
        let (err, retry_after) = match refusal {
            auth::TenantRefusal::RateLimited(wait) => {
                let secs = retry_after_secs(wait);
                metrics.tenant_refused(tenant, "rate_limited");
                tracing::info!(tenant, correlation_id = %cid, retry_after = secs, "tenant over its rate");
                (RpcError::new(ErrorCode::RateLimited), Some(secs))
            }
            auth::TenantRefusal::Overloaded => {
                metrics.tenant_refused(tenant, "overloaded");
                tracing::info!(tenant, correlation_id = %cid, "tenant over its max_in_flight");
                (RpcError::new(ErrorCode::Overloaded), None)
            }
        };
        let mut resp = match door {
            Door::Rpc | Door::Mcp => {
                let status =
                    StatusCode::from_u16(err.http_status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
                json_response(status, oncerpc_protocol::error_body(&err), Some(&cid))
            }
            Door::Flows if err.code == ErrorCode::RateLimited => {
                flows::error_response(&RpcError::with_message(ErrorCode::RateLimited, "rate limited"), &cid)
            }
            Door::Flows => flows::error_response(&err, &cid),
        };
        if let Some(secs) = retry_after {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        Err(Box::new(resp))
    }
}

/// One query parameter, percent-decoded.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    let query = query?;
    form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

/// Read a body up to the limit, within `limits.body_timeout_ms`. `Err` is the response to send
/// (`413`, `408`, `400`). Call it before admission: waiting for a body holds no permit.
pub(crate) async fn read_body(
    st: &AppState,
    body: Body,
    headers: &HeaderMap,
    too_large: impl Fn(usize) -> Response,
    timed_out: impl Fn() -> Response,
) -> Result<axum::body::Bytes, Response> {
    let limit = st.config.max_body_bytes;
    let announced =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    let Ok(collected) =
        tokio::time::timeout(st.config.body_timeout, collect(Limited::new(body, limit))).await
    else {
        let metrics = st.dispatcher.metrics();
        metrics.overloaded("body_timeout");
        let now = tokio::time::Instant::now();
        let mut last = st.body_timeout_logged.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
            *last = Some(now);
            tracing::warn!(
                timeout_ms = st.config.body_timeout.as_millis() as u64,
                "request body did not arrive in time (limits.body_timeout_ms): 408"
            );
        }
        return Err(timed_out());
    };
    match collected {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large(limit)),
        Err(e) => {
            tracing::info!(error = %e, "request body could not be read");
            let err = RpcError::parse_error(format_args!("request body could not be read: {e}"));
            Err(json_response(
                StatusCode::BAD_REQUEST,
                oncerpc_protocol::error_body(&err),
                Some(&generated_id()),
            ))
        }
    }
}

/// A body's bytes: its one data frame as it came (a small request's body is one), else the
/// frames joined. `BodyExt::collect` queued even a lone frame in a list and copied it out
/// (~400 instructions of a query's).
async fn collect<B>(mut body: B) -> Result<axum::body::Bytes, B::Error>
where
    B: hyper::body::Body<Data = axum::body::Bytes> + Unpin,
{
    let mut first: Option<axum::body::Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else { continue };
        match &first {
            None if joined.is_empty() => first = Some(data),
            _ => {
                if let Some(head) = first.take() {
                    joined.extend_from_slice(&head);
                }
                joined.extend_from_slice(&data);
            }
        }
    }
    Ok(first.unwrap_or_else(|| joined.into()))
}

// The names of the headers every answer may carry, made at compile time: a `&str` name is
// parsed again on every insert (~130 instructions each).
pub(crate) const CORRELATION: HeaderName = HeaderName::from_static(CORRELATION_HEADER);
const KEY: HeaderName = HeaderName::from_static(KEY_HEADER);
const STATUS: HeaderName = HeaderName::from_static(STATUS_HEADER);
const KEY_SOURCE: HeaderName = HeaderName::from_static(KEY_SOURCE_HEADER);

/// A JSON answer. Every `503` (overloaded, store unavailable, degraded) says when to come
/// back: `Retry-After: 1` (SPEC §3); a `429` sets its own.
pub(crate) fn json_response(status: StatusCode, body: impl Into<Body>, cid: Option<&str>) -> Response {
    let mut resp = (status, body.into()).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if let Some(v) = cid.and_then(|c| HeaderValue::from_str(c).ok()) {
        h.insert(CORRELATION, v);
    }
    resp
}

/// `X-Idempotency-Key` / `X-Idempotency-Status` on a response.
pub(crate) fn idempotency_headers(resp: &mut Response, info: Option<&oncerpc_core::IdempotencyInfo>) {
    if let Some(info) = info {
        let h = resp.headers_mut();
        // A validated key is plain ASCII, so it is always a valid header value.
        if let Ok(v) = HeaderValue::from_str(&info.key) {
            h.insert(KEY, v);
        }
        h.insert(STATUS, HeaderValue::from_static(info.status.as_str()));
        if matches!(info.origin, oncerpc_core::KeyOrigin::Derived | oncerpc_core::KeyOrigin::Hashed) {
            h.insert(KEY_SOURCE, HeaderValue::from_static(info.origin.as_str()));
        }
        if let Some(ms) = info.retry_after_ms {
            h.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(Duration::from_millis(ms))));
        }
    }
}

/// `Retry-After` is whole seconds: rounded up, at least 1.
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use axum::body::Bytes;
    use http_body_util::{BodyExt, Full, StreamBody};
    use hyper::body::Frame;

    /// A body of data frames, with trailers after the first.
    type Frames =
        StreamBody<futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, std::convert::Infallible>>>>;

    fn frames(parts: &[&'static str]) -> Frames {
        let mut frames: Vec<_> =
            parts.iter().map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes())))).collect();
        frames.insert(1.min(frames.len()), Ok(Frame::trailers(Default::default())));
        StreamBody::new(futures::stream::iter(frames))
    }

    /// A lone frame comes back as it is (no copy); several are joined in order; trailers and
    /// empty bodies are what `BodyExt::collect` makes of them.
    #[tokio::test]
    async fn collect_keeps_a_lone_frame_and_joins_several() {
        let one = Bytes::from_static(b"{\"jsonrpc\":\"2.0\"}");
        let got = super::collect(Full::new(one.clone())).await.unwrap();
        assert_eq!(got.as_ptr(), one.as_ptr(), "the frame itself, not a copy");
        for parts in [vec![], vec!["a"], vec!["", "b"], vec!["ab", "cd", "", "ef"], vec!["[", "1,", "2", "]"]]
        {
            let ours = super::collect(frames(&parts)).await.unwrap();
            let theirs = frames(&parts).collect().await.unwrap().to_bytes();
            assert_eq!(ours, theirs, "{parts:?}");
            assert_eq!(ours, parts.concat().as_bytes(), "{parts:?}");
        }
    }
}
