//! [`FrontDoor`]: the router and the state behind it, built for one configuration; and its
//! [successor](FrontDoor::successor) for the next one (a reload), which shares what belongs
//! to the process rather than to a configuration.

use std::sync::Arc;

use axum::routing::{get, post};
use oncerpc_core::Dispatcher;
use tokio::sync::Semaphore;

use crate::{AppState, HttpConfig, Router, console, cors, flows, health, mcp, ops, resource, rpc};

/// The front door as [`serve`](crate::serve) runs it: the [`router`](crate::router), and
/// `POST /rpc` answered straight from the connection (no routing table, no extractors, no
/// boxed route future: ~4,700 instructions of a call's ~35,000 went there). The handler and
/// every rule are the router's own; only the way to it is shorter. With CORS configured the
/// layer wraps the router, so every request goes through it.
#[derive(Clone)]
pub struct FrontDoor {
    pub(crate) router: Router,
    /// `Some`: `POST /rpc` goes straight to [`rpc::handle`].
    pub(crate) rpc: Option<Arc<AppState>>,
    /// The state behind the router (`None`: a router given as it is).
    state: Option<Arc<AppState>>,
}

impl FrontDoor {
    /// The router with every route, `POST /rpc` included.
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// Tell the MCP sessions' open streams (`GET /mcp`) that the tools changed
    /// (`notifications/tools/list_changed`): after a reload swapped in other tools.
    pub fn tools_changed(&self) {
        if let Some(door) = self.state.as_ref().and_then(|s| s.mcp.as_ref()) {
            door.changes.tools();
        }
    }

    /// End the MCP sessions' open streams: the server is shutting down, and a stream that
    /// stayed open would hold the graceful shutdown to its grace.
    pub fn close_streams(&self) {
        if let Some(door) = self.state.as_ref().and_then(|s| s.mcp.as_ref()) {
            door.changes.closing();
        }
    }

    /// The front door of a new configuration (a reload): `dispatcher` and `config` are the
    /// new ones; what belongs to the process rather than to one configuration is this door's
    /// and stays shared — the `limits.max_in_flight` pool (its size stays), the door's
    /// counters, each tenant's limiter whose limits are the same (its rate bucket and
    /// in-flight count go on), the MCP sessions (`mcp.enabled`, `mcp.session_secret` and
    /// `mcp.session_idle_secs` stay) and the calls a cancellation may stop, and the console
    /// (its settings and sessions stay). Requests that began on this door finish on it. A
    /// door built from a bare router has nothing to share: the new one is built as
    /// [`front_door`] builds it.
    pub fn successor(&self, dispatcher: Arc<Dispatcher>, mut config: HttpConfig) -> FrontDoor {
        if let Some(p) = &self.state {
            config.tenants.keep_limiters(&p.config.tenants);
        }
        let lasting = match &self.state {
            Some(p) => Lasting::of(p),
            None => Lasting::first(&config),
        };
        build(dispatcher, config, lasting)
    }
}

/// Any router, served as it is (no direct path).
impl From<Router> for FrontDoor {
    fn from(router: Router) -> Self {
        FrontDoor { router, rpc: None, state: None }
    }
}

/// [`router`](crate::router), with the direct path for `POST /rpc` that
/// [`serve`](crate::serve) takes.
pub fn front_door(dispatcher: Arc<Dispatcher>, config: HttpConfig) -> FrontDoor {
    let lasting = Lasting::first(&config);
    build(dispatcher, config, lasting)
}

/// What outlives one configuration of the front door.
struct Lasting {
    in_flight: Arc<Semaphore>,
    body_timeout_logged: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
    door_metrics: prometheus::Registry,
    event_api: prometheus::IntCounterVec,
    auth_refusals: prometheus::IntCounterVec,
    /// The webhook refusals' counter, as the first door's webhooks registered it.
    webhooks: crate::Webhooks,
    /// The MCP door of the previous configuration (`None`: off, or a first door).
    mcp: Option<Arc<mcp::McpDoor>>,
    /// The console the previous configuration made, served or not (`[console]` turned off
    /// by a reload keeps it, so that turning it on again keeps its sessions and counters).
    console: Option<Arc<console::Console>>,
    /// The first door: the MCP door and the console are to be made.
    first: bool,
}

impl Lasting {
    /// A first door's: everything new, its counters registered once, here.
    fn first(config: &HttpConfig) -> Lasting {
        let door_metrics = prometheus::Registry::new();
        let mut webhooks = crate::Webhooks::default();
        webhooks.register_metrics(&door_metrics);
        let event_api = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "oncerpc_event_api_total",
                "Answers of the events API by operation (list, retry) and HTTP status (4xx: refused)",
            ),
            &["op", "status"],
        )
        .expect("valid metric");
        let _ = door_metrics.register(Box::new(event_api.clone()));
        let auth_refusals = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "oncerpc_auth_refusals_total",
                "Callers refused for their credentials, by reason (missing, invalid_key, a token's failed check, token_in_url: 401; identity_unavailable: 503)",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let _ = door_metrics.register(Box::new(auth_refusals.clone()));
        Lasting {
            in_flight: Arc::new(Semaphore::new(config.max_in_flight.max(1))),
            body_timeout_logged: Arc::default(),
            door_metrics,
            event_api,
            auth_refusals,
            webhooks,
            mcp: None,
            console: None,
            first: true,
        }
    }

    /// The previous door's.
    fn of(p: &AppState) -> Lasting {
        Lasting {
            in_flight: p.in_flight.clone(),
            body_timeout_logged: p.body_timeout_logged.clone(),
            door_metrics: p.door_metrics.clone(),
            event_api: p.event_api.clone(),
            auth_refusals: p.auth_refusals.clone(),
            webhooks: p.config.webhooks.clone(),
            mcp: p.mcp.clone(),
            console: p.console_made.clone(),
            first: false,
        }
    }
}

/// The front door over `dispatcher` and `config`, with the process-wide parts `lasting`.
fn build(dispatcher: Arc<Dispatcher>, mut config: HttpConfig, lasting: Lasting) -> FrontDoor {
    let cors = cors::layer(&config.cors_allowed_origins);
    let registry = dispatcher.registry();
    let mut key_headers: Vec<Arc<str>> = registry
        .names()
        .into_iter()
        .filter_map(|n| match &registry.spec(n)?.key_from {
            Some(oncerpc_core::KeySource::Header(h)) => Some(Arc::from(h.as_str())),
            _ => None,
        })
        .collect();
    key_headers.sort_unstable();
    key_headers.dedup();
    config.webhooks.share_metrics(&lasting.webhooks);
    let door_metrics = lasting.door_metrics;
    let external = config.mcp_external.clone();
    let names = config.mcp_tool_names;
    let mcp = match (lasting.mcp, config.mcp_enabled) {
        (Some(previous), true) => Some(Arc::new(previous.successor(dispatcher.clone(), external, names))),
        (None, true) if lasting.first => {
            let secret = config.mcp_session_secret.as_deref().map(str::as_bytes);
            let door =
                mcp::McpDoor::new(dispatcher.clone(), secret, config.mcp_session_idle, external, names);
            door.server.metrics().register(&door_metrics);
            let _ = door_metrics.register(Box::new(door.sessions.active_gauge()));
            Some(Arc::new(door))
        }
        _ => None,
    };
    let console_made = match (lasting.console, config.console.clone()) {
        (Some(previous), Some(next)) => Some(Arc::new(previous.successor(next))),
        (None, Some(first)) => Some(Arc::new(console::Console::new(first, &door_metrics))),
        (previous, None) => previous,
    };
    let console = console_made.clone().filter(|_| config.console.is_some());
    let console_routes = console.is_some().then(console::routes);
    let state = Arc::new(AppState {
        console,
        console_made,
        mcp,
        dispatcher,
        config,
        in_flight: lasting.in_flight,
        default_tenant: Arc::from(oncerpc_core::DEFAULT_TENANT),
        body_timeout_logged: lasting.body_timeout_logged,
        key_headers,
        door_metrics,
        event_api: lasting.event_api,
        auth_refusals: lasting.auth_refusals,
        openapi: std::sync::OnceLock::new(),
    });
    // Admission (max_in_flight) and authentication are plain calls at the top of each guarded
    // handler ([`AppState::admit`], [`AppState::authenticate`]) rather than middleware layers:
    // the profile showed the boxed layers' per-request cost.
    let router = Router::new()
        .route("/rpc", post(rpc::rpc))
        .route("/mcp", post(mcp::post).get(mcp::get).delete(mcp::delete))
        .route("/v2/flows", post(flows::missing_flow))
        .route("/v2/flows/", post(flows::missing_flow))
        .route("/v2/flows/{flow}", post(flows::flow))
        .route("/v2/events", get(flows::list_events))
        .route("/v2/events/{event_id}", get(flows::event))
        .route("/v2/events/{event_id}/retry", post(flows::retry_event))
        .route("/healthz", get(health::healthz))
        .route("/.well-known/oauth-protected-resource", get(resource::metadata))
        .route(resource::MCP_METADATA_PATH, get(resource::metadata))
        .route("/openrpc.json", get(ops::openrpc))
        .route("/openapi.json", get(ops::openapi))
        .route("/metrics", get(ops::metrics));
    let router = match console_routes {
        Some(routes) => router.merge(routes),
        None => router,
    };
    let router = router.with_state(state.clone());
    match cors {
        Some(cors) => FrontDoor { router: router.layer(cors), rpc: None, state: Some(state) },
        None => FrontDoor { router, rpc: Some(state.clone()), state: Some(state) },
    }
}
