//! # oncerpc-http
//!
//! The HTTP front door (DESIGN §4), on axum/hyper:
//!
//! * `POST /rpc` — JSON-RPC over HTTP ([`rpc`]). JSON-RPC errors travel in a `200` body;
//!   `204` when there is nothing to return; `413` with a JSON-RPC `-32600` body (`id: null`)
//!   over the body limit.
//! * `POST /v2/flows/{flow}`, `GET /v2/events/{event_id}` — the REST door ([`flows`]).
//! * `GET /healthz`, `GET /openrpc.json`, `GET /metrics`.
//! * Tenants ([`auth`]): once configured, `/rpc` and `/v2/*` need an API key
//!   (`X-API-Key` or `?key=`), else `401 {"code":"401","message":"unauthorized"}`.
//! * `limits.max_in_flight`: past it, `503` (`-32007`).
//! * [`serve`] with graceful shutdown: stop accepting, let in-flight requests finish.
//!
//! Every answer of `/rpc` and `/v2/*` carries `X-Correlation-Id`.

pub mod auth;
mod flows;
mod rpc;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use oncerpc_core::{Dispatcher, RequestMeta, generated_id};
use oncerpc_protocol::{ErrorCode, RpcError};
use tokio::sync::Semaphore;

pub use auth::Tenants;
pub use axum::Router;

/// Response header carrying the request's correlation id (DESIGN §7).
pub const CORRELATION_HEADER: &str = "x-correlation-id";
/// Request/response header with the idempotency key (DESIGN §3, §4).
pub const KEY_HEADER: &str = "x-idempotency-key";
/// The IETF draft's spelling, accepted on requests.
pub const IETF_KEY_HEADER: &str = "idempotency-key";
/// Response header with `new | processing | duplicate`.
pub const STATUS_HEADER: &str = "x-idempotency-status";
/// Request header asking to re-execute a failed command.
pub const FORCE_RETRY_HEADER: &str = "x-force-retry";
/// Request header with a tenant's API key (or `?key=`).
pub const API_KEY_HEADER: &str = "x-api-key";

/// Front-door settings.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Largest accepted request body; larger ones get `413`.
    pub max_body_bytes: usize,
    /// Requests served at once on `/rpc` and `/v2/*`; more get `503` (`-32007`).
    pub max_in_flight: usize,
    /// Configured tenants; empty = one open default tenant.
    pub tenants: Tenants,
    /// The step names of each flow, for `?return_step=`.
    pub flow_steps: HashMap<String, Vec<String>>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_body_bytes: 1024 * 1024,
            max_in_flight: 1024,
            tenants: Tenants::default(),
            flow_steps: HashMap::new(),
        }
    }
}

pub(crate) struct AppState {
    pub dispatcher: Arc<Dispatcher>,
    pub config: HttpConfig,
    in_flight: Semaphore,
    default_tenant: Arc<str>,
}

/// The router with every route of the front door.
pub fn router(dispatcher: Arc<Dispatcher>, config: HttpConfig) -> Router {
    let in_flight = Semaphore::new(config.max_in_flight.max(1));
    let state = Arc::new(AppState {
        dispatcher,
        config,
        in_flight,
        default_tenant: Arc::from(oncerpc_core::DEFAULT_TENANT),
    });
    // Admission (max_in_flight) and authentication are plain calls at the top of each guarded
    // handler ([`AppState::admit`], [`AppState::authenticate`]) rather than middleware layers:
    // the profile showed the boxed layers' per-request cost.
    Router::new()
        .route("/rpc", post(rpc::rpc))
        .route("/v2/flows", post(flows::missing_flow))
        .route("/v2/flows/", post(flows::missing_flow))
        .route("/v2/flows/{flow}", post(flows::flow))
        .route("/v2/events/{event_id}", get(flows::event))
        .route("/healthz", get(healthz))
        .route("/openrpc.json", get(openrpc))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// A request admitted under `limits.max_in_flight`; dropping it frees the slot.
pub(crate) struct Admitted<'a> {
    _permit: tokio::sync::SemaphorePermit<'a>,
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
}

impl AppState {
    /// `limits.max_in_flight`: admit, or refuse at once (no queueing) with `503`.
    pub(crate) fn admit(&self, door: Door) -> Result<Admitted<'_>, Box<Response>> {
        let metrics = self.dispatcher.metrics();
        match self.in_flight.try_acquire() {
            Ok(permit) => {
                metrics.in_flight.inc();
                Ok(Admitted { _permit: permit, gauge: &metrics.in_flight })
            }
            Err(_) => {
                let err = RpcError::new(ErrorCode::Overloaded);
                Err(Box::new(match door {
                    Door::Rpc => {
                        metrics.overloaded("rpc");
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

    /// Admission then authentication: the prologue of every guarded handler.
    pub(crate) fn guard(
        &self,
        door: Door,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<(Admitted<'_>, Arc<str>), Box<Response>> {
        let admitted = self.admit(door)?;
        let tenant = self.authenticate(headers, query)?;
        Ok((admitted, tenant))
    }

    /// The tenant, from `X-API-Key` or `?key=`; `401` when tenants are configured and the key
    /// is missing or wrong. The key is never logged.
    pub(crate) fn authenticate(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<Arc<str>, Box<Response>> {
        let tenants = &self.config.tenants;
        if tenants.is_empty() {
            return Ok(self.default_tenant.clone());
        }
        let presented = headers
            .get(API_KEY_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| query_param(query, "key"));
        match presented.and_then(|k| tenants.authenticate(&k)) {
            Some(t) => Ok(t),
            None => {
                tracing::info!("unauthorized");
                let mut resp =
                    (StatusCode::UNAUTHORIZED, r#"{"code":"401","message":"unauthorized"}"#).into_response();
                resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                Err(Box::new(resp))
            }
        }
    }
}

/// One query parameter, percent-decoded.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    let query = query?;
    form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

/// Read a body up to the limit. `Err` is the response to send (`413`, `400`).
pub(crate) async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
    too_large: impl Fn(usize) -> Response,
) -> Result<axum::body::Bytes, Response> {
    let announced =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
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

/// Idempotency key, force retry and correlation id from the headers; the tenant from the
/// authentication extension.
pub(crate) fn request_meta(headers: &HeaderMap, tenant: Arc<str>) -> Result<RequestMeta, RpcError> {
    let mut meta = RequestMeta { tenant, ..RequestMeta::default() };
    let mut key: Option<&str> = None;
    for name in [KEY_HEADER, IETF_KEY_HEADER] {
        if let Some(v) = headers.get(name) {
            let v = v
                .to_str()
                .map_err(|_| RpcError::invalid_params(oncerpc_core::idempotency::MSG_INVALID_CHARS))?;
            if key.is_some_and(|k| k != v) {
                return Err(RpcError::invalid_params(
                    "invalid idempotency key: X-Idempotency-Key and Idempotency-Key differ",
                ));
            }
            key = Some(v);
        }
    }
    meta.idempotency_key = key.map(Arc::from);
    if let Some(v) = headers.get(FORCE_RETRY_HEADER) {
        meta.force_retry = match v.to_str().map(str::trim) {
            Ok(v) if v.eq_ignore_ascii_case("true") => true,
            Ok(v) if v.eq_ignore_ascii_case("false") => false,
            _ => return Err(RpcError::invalid_params("invalid X-Force-Retry header: use true or false")),
        };
    }
    meta.correlation_id = headers
        .get(CORRELATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 200)
        .map(Arc::from);
    Ok(meta)
}

/// A JSON answer with its correlation id.
pub(crate) fn json_response(status: StatusCode, body: impl Into<Body>, cid: Option<&str>) -> Response {
    let mut resp = (status, body.into()).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(v) = cid.and_then(|c| HeaderValue::from_str(c).ok()) {
        h.insert(CORRELATION_HEADER, v);
    }
    resp
}

/// `X-Idempotency-Key` / `X-Idempotency-Status` on a response.
pub(crate) fn idempotency_headers(resp: &mut Response, info: Option<&oncerpc_core::IdempotencyInfo>) {
    if let Some(info) = info {
        let h = resp.headers_mut();
        // A validated key is plain ASCII, so it is always a valid header value.
        if let Ok(v) = HeaderValue::from_str(&info.key) {
            h.insert(KEY_HEADER, v);
        }
        h.insert(STATUS_HEADER, HeaderValue::from_static(info.status.as_str()));
    }
}

async fn healthz(State(st): State<Arc<AppState>>) -> Response {
    let store = st.dispatcher.store();
    match store.ping().await {
        Ok(()) => json_response(
            StatusCode::OK,
            serde_json::json!({"status": "ok", "store": store.name()}).to_string(),
            None,
        ),
        // DESIGN §12: the error text (addresses, OS errors) goes to the log, never to a client.
        Err(e) => {
            tracing::warn!(store = store.name(), error = %e, "healthz: store unavailable");
            json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"status": "degraded", "store": store.name()}).to_string(),
                None,
            )
        }
    }
}

async fn openrpc(State(st): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, st.dispatcher.openrpc().get().as_bytes().to_vec(), None)
}

async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let mut resp = (StatusCode::OK, st.dispatcher.metrics().render()).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    resp
}

/// Serve `router` on `listener` until `shutdown` resolves, then stop accepting and wait for
/// in-flight requests to finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(shutdown)
        .await
}

/// Resolves on the first SIGTERM or SIGINT (Ctrl-C).
///
/// The handlers are installed when this function is called, not when the future is first
/// polled: a signal that arrives while the first request is being handled (before anything
/// awaits the future) is then caught rather than killing the process with the default action.
/// Call it inside the runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        let install = |kind: SignalKind, name: &'static str| {
            signal(kind).inspect_err(|e| tracing::warn!(error = %e, "cannot install the {name} handler")).ok()
        };
        let term = install(SignalKind::terminate(), "SIGTERM");
        let int = install(SignalKind::interrupt(), "SIGINT");
        async move {
            async fn received(signal: Option<Signal>) {
                match signal {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                () = received(int) => tracing::info!("SIGINT received, shutting down"),
                () = received(term) => tracing::info!("SIGTERM received, shutting down"),
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("Ctrl-C received, shutting down");
    }
}
