//! # oncerpc (gateway)
//!
//! The `oncerpc` binary as a library: configuration ([`config`]), the demo methods
//! ([`demo`]), and [`App`], which turns a [`Config`] into a running server. The binary in
//! `main.rs` is only the CLI around it; tests start the same [`App`] on a loopback port.

pub mod auth;
pub mod bounds;
pub mod config;
pub mod console;
pub mod console_oidc;
pub mod demo;
mod limits;
pub mod log_level;
mod log_text;
pub mod logging;
pub mod mcp;
pub mod mcp_upstreams;
pub mod openapi;
pub mod reload;
mod restart;
pub mod secrets;
pub mod telemetry;
pub mod webhooks;

// The flow engine is the library crate oncerpc-flows; its modules keep their old paths here.
pub use oncerpc_flows::{flow, retry, upstream};

use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Duration;

use oncerpc_core::{
    BatchConfig, Dispatcher, DispatcherConfig, IdempotencyConfig, MemoryStore, Registry, Store,
};
use oncerpc_http::HttpConfig;

pub use config::{Config, ConfigError, Mode};

/// A configured server, ready to be bound.
pub struct App {
    pub config: Config,
    pub dispatcher: Arc<Dispatcher>,
    pub demo: Arc<demo::DemoState>,
    /// The listener's TLS (`[tls]`), loaded when the app is built.
    tls: Option<Arc<oncerpc_http::tls::ListenerTls>>,
    /// Other MCP servers' tools offered on the MCP door (`[[mcp.upstreams]]`).
    pub external: oncerpc_mcp::External,
    /// The supervisors of those upstreams (`None`: none configured).
    pub upstreams: Option<Arc<oncerpc_mcp_upstream::Upstreams>>,
    /// The identity providers whose tokens are accepted (`[[auth.issuers]]`), their keys
    /// fetched in the background from [`App::new`] on.
    pub issuers: Option<Arc<oncerpc_http::Issuers>>,
    /// The flows' step attempts, counted across reloads.
    attempts: flow::StepAttempts,
    /// Where the configuration is read again on `SIGHUP` ([`App::reload_from`]); `None`:
    /// a reload re-reads nothing and only the TLS certificate is reloaded.
    source: Option<config::Source>,
    /// What the app was built from (its hash is shown on `/healthz`).
    loaded: Option<config::Loaded>,
    /// What `/healthz` says about the configuration.
    report: oncerpc_http::ConfigReport,
}

/// The `[[openapi]]` documents' operations added to `config.methods`, checked like the
/// configured ones (at start and on every reload).
pub(crate) async fn expand_openapi(config: &mut Config) -> Result<(), ConfigError> {
    if config.openapi.is_empty() {
        return Ok(());
    }
    let client = upstream::client(&config.upstream).map_err(ConfigError::Invalid)?;
    openapi::expand(config, &client).await?;
    config.validate()
}

impl App {
    /// Build the registry, store and dispatcher a config describes (connecting to the store;
    /// run inside a tokio runtime).
    pub async fn new(mut config: Config) -> Result<App, ConfigError> {
        config.validate()?;
        expand_openapi(&mut config).await?;
        let demo_state = Arc::new(demo::DemoState::default());
        let attempts = flow::StepAttempts::new();
        let mcp = mcp_upstreams::upstreams(&config)?;
        let client = upstream::client(&config.upstream).map_err(ConfigError::Invalid)?;
        let registry = build_registry(&config, &demo_state, &client, &attempts, mcp.as_ref())?;
        let store = open_store(&config.store, config.mode).await?;
        let mut app = App::with_store(config, registry, demo_state, store)?;
        app.attempts = attempts.clone();
        app.issuers = start_issuers(&app.config, &client);
        app.dispatcher.metrics().register(attempts.collector()).map_err(ConfigError::Invalid)?;
        if let Some(upstreams) = mcp {
            for c in upstreams.metrics().collectors() {
                app.dispatcher.metrics().register(c).map_err(ConfigError::Invalid)?;
            }
            upstreams.start(app.dispatcher.clone(), app.external.clone(), client);
            app.upstreams = Some(upstreams);
        }
        Ok(app)
    }

    /// Reload from `source` on `SIGHUP` ([`reload`]); `loaded` is what the app was built
    /// from (its hash is shown on `/healthz`).
    pub fn reload_from(mut self, source: config::Source, loaded: config::Loaded) -> App {
        self.source = Some(source);
        self.loaded = Some(loaded);
        self
    }

    /// An app serving a registry built by the caller (embedding, tests), with a memory store.
    pub fn with_registry(config: Config, registry: Registry, demo: Arc<demo::DemoState>) -> App {
        App::with_store(config, registry, demo, Arc::new(MemoryStore::default())).expect("valid config")
    }

    /// An app over a registry and an idempotency store built by the caller.
    pub fn with_store(
        config: Config,
        registry: Registry,
        demo: Arc<demo::DemoState>,
        store: Arc<dyn Store>,
    ) -> Result<App, ConfigError> {
        check_app(&config, &registry)?;
        let dispatcher = Arc::new(Dispatcher::with_store(registry, dispatcher_config(&config), store));
        let tls = match &config.tls {
            None => None,
            Some(t) => Some(
                oncerpc_http::tls::ListenerTls::load(
                    &t.cert_file,
                    &t.key_file,
                    Some(dispatcher.metrics().clone()),
                )
                .map_err(|e| ConfigError::Invalid(e.to_string()))?,
            ),
        };
        Ok(App {
            config,
            dispatcher,
            demo,
            tls,
            external: Default::default(),
            upstreams: None,
            issuers: None,
            attempts: flow::StepAttempts::new(),
            source: None,
            loaded: None,
            report: Default::default(),
        })
    }

    /// The HTTP router of this app.
    pub fn router(&self) -> axum_router::Router {
        self.front_door().router()
    }

    /// The router, with the direct path for `POST /rpc` that [`oncerpc_http::serve`] takes.
    pub fn front_door(&self) -> oncerpc_http::FrontDoor {
        let http =
            http_config(&self.config, self.issuers.clone(), self.external.clone(), self.report.clone());
        oncerpc_http::front_door(self.dispatcher.clone(), http)
    }

    /// Bind the configured address.
    pub async fn bind(&self) -> std::io::Result<tokio::net::TcpListener> {
        let addr: SocketAddr = self.config.listen_addr().map_err(std::io::Error::other)?;
        tokio::net::TcpListener::bind(addr).await
    }

    /// Serve on `listener` until `shutdown` resolves, then shut down gracefully within
    /// `limits.shutdown_grace_ms`: stop accepting (and stop resuming events), let in-flight
    /// requests finish, then wait for detached executions (async events, commands whose
    /// client left, outcomes still being written). Each record that had to be left
    /// `processing` is logged.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.serve_ready(listener, shutdown, || {}).await
    }

    /// [`serve`](Self::serve), calling `ready` once the signal handlers are in place and
    /// connections are about to be accepted: what says "listening" must come after them, or
    /// a `SIGHUP` sent on seeing it could find no handler (and end the process).
    pub async fn serve_ready(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
        ready: impl FnOnce(),
    ) -> std::io::Result<()> {
        let live = oncerpc_http::Live::new(self.front_door());
        let reloader = reload::Reloader::new(&self, live.clone());
        let grace = Duration::from_millis(self.config.limits.shutdown_grace_ms);
        // Async events left unfinished (by a crash, or by another replica) are resumed, by
        // the configuration current at each pass.
        let interval = Duration::from_millis(self.config.store.resume_interval_ms);
        let resumer = tokio::spawn(reloader.clone().resume_events(interval));
        // SIGHUP reloads the configuration (and the certificate); it never ends the process.
        let hup = reloader.clone().on_sighup();
        let (began_tx, mut began_rx) = tokio::sync::oneshot::channel();
        let streams = live.clone();
        let offers = self.external.offers().clone();
        let shutdown = async move {
            shutdown.await;
            resumer.abort();
            hup.abort();
            // The MCP sessions' open streams end, so that none holds the shutdown up.
            streams.current().close_streams();
            offers.close();
            let _ = began_tx.send(tokio::time::Instant::now());
        };
        let limits = &self.config.limits;
        let serve_config = oncerpc_http::ServeConfig {
            header_timeout: Duration::from_millis(limits.header_timeout_ms),
            idle_timeout: Duration::from_millis(limits.idle_timeout_ms),
            max_connections: limits.max_connections,
            metrics: Some(self.dispatcher.metrics().clone()),
            tls: self.tls.clone(),
        };
        ready();
        let server = oncerpc_http::serve_live(listener, live, serve_config, shutdown);
        tokio::pin!(server);
        // The server's own graceful wait for open connections counts against the grace.
        let (served, began) = tokio::select! {
            served = &mut server => (served, began_rx.try_recv().ok()),
            Ok(at) = &mut began_rx => match tokio::time::timeout_at(at + grace, &mut server).await {
                Ok(served) => (served, Some(at)),
                Err(_) => {
                    tracing::warn!("shutdown grace over: closing the connections still open");
                    (Ok(()), Some(at))
                }
            },
        };
        let left =
            began.map_or(grace, |at| (at + grace).saturating_duration_since(tokio::time::Instant::now()));
        let abandoned = self.dispatcher.shutdown(left).await;
        if abandoned > 0 {
            tracing::error!(records = abandoned, "shutdown left records processing");
        }
        served
    }
}

/// The checks every app passes, at start and on a reload, beyond [`Config::validate`]: the
/// tenants (an embedder may set them without `validate`), the webhook verifiers (schemes,
/// secrets, tenants), the MCP tools' names (two methods with one name, or a name too long),
/// and that a lease outlives every method's timeout, with a margin (SPEC §3).
fn check_app(config: &Config, registry: &Registry) -> Result<(), ConfigError> {
    http_tenants(config).map_err(ConfigError::Invalid)?;
    webhooks::webhooks(config)?;
    mcp::check_tool_names(config, registry)?;
    let lease = Duration::from_millis(config.store.lease_ms);
    if let Some(max) = registry.max_timeout()
        && lease < max + oncerpc_core::lease_margin(max)
    {
        return Err(ConfigError::Invalid(format!(
            "store.lease_ms ({}) must exceed every method timeout by at least {} ms (the longest is {} ms)",
            config.store.lease_ms,
            oncerpc_core::lease_margin(max).as_millis(),
            max.as_millis()
        )));
    }
    Ok(())
}

/// The dispatcher's settings of a config.
fn dispatcher_config(config: &Config) -> DispatcherConfig {
    DispatcherConfig {
        batch: BatchConfig {
            enabled: config.batch.enabled,
            max_size: config.batch.max_size,
            max_concurrency: config.batch.max_concurrency,
        },
        idempotency: IdempotencyConfig {
            mode: config.mode,
            lease: Duration::from_millis(config.store.lease_ms),
            ttl: Duration::from_secs(config.store.ttl_secs),
            store_timeout: config.store.op_timeout(),
        },
        max_background: config.limits.max_background,
        tenant_background: tenant_background(config),
    }
}

/// The front door's settings of a config (checked by [`check_app`] before).
fn http_config(
    cfg: &Config,
    issuers: Option<Arc<oncerpc_http::Issuers>>,
    external: oncerpc_mcp::External,
    config_report: oncerpc_http::ConfigReport,
) -> HttpConfig {
    // The tenants' own limiters (SPEC §12) are built here, once per configuration.
    let tenants = http_tenants(cfg).expect("tenants were checked when the app was built");
    let flow_steps = cfg
        .methods
        .iter()
        .map(|m| (m.name.clone(), m.steps.iter().map(|s| s.name.clone()).collect()))
        .collect();
    HttpConfig {
        max_body_bytes: cfg.limits.max_body_bytes,
        max_in_flight: cfg.limits.max_in_flight,
        tenants,
        issuers,
        flow_steps,
        body_timeout: Duration::from_millis(cfg.limits.body_timeout_ms),
        cors_allowed_origins: cfg.http.cors_allowed_origins.clone(),
        public_url: cfg.http.public_url.clone(),
        webhooks: webhooks::webhooks(cfg).expect("webhooks were checked when the app was built"),
        mcp_enabled: cfg.mcp.enabled,
        mcp_session_secret: cfg.mcp.session_secret.clone(),
        mcp_session_idle: Duration::from_secs(cfg.mcp.session_idle_secs),
        mcp_external: external,
        mcp_tool_names: cfg.mcp.tool_names.mcp(),
        console: cfg.console.http(cfg.mode, cfg.tls.is_some(), console_oidc(cfg)),
        config_report,
    }
}

/// The registry a config describes: the demo methods where they are on, then its flows.
fn build_registry(
    config: &Config,
    demo_state: &Arc<demo::DemoState>,
    client: &reqwest::Client,
    attempts: &flow::StepAttempts,
    mcp: Option<&Arc<oncerpc_mcp_upstream::Upstreams>>,
) -> Result<Registry, ConfigError> {
    let mut registry = Registry::new();
    if config.demo_enabled() {
        let timeout = Duration::from_millis(config.limits.default_timeout_ms);
        demo::register(&mut registry, demo_state.clone(), timeout)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    }
    register_flows(&mut registry, config, client, attempts, mcp)?;
    Ok(registry)
}

/// The identity providers of `[[auth.issuers]]`, their keys fetched from now on in the
/// background (not awaited: a gateway starts while its identity provider is down).
fn start_issuers(config: &Config, client: &reqwest::Client) -> Option<Arc<oncerpc_http::Issuers>> {
    if config.auth.issuers.is_empty() {
        return None;
    }
    let names = config.tenants.iter().map(|t| t.name.clone()).collect();
    let issuers = Arc::new(oncerpc_http::Issuers::new(config.auth.specs(), names, client.clone()));
    issuers.start();
    Some(issuers)
}

/// The console's sign-in with the identity provider (`[console.oidc]`), when configured.
fn console_oidc(cfg: &Config) -> Option<oncerpc_http::console::OidcConfig> {
    let oidc = cfg.console.oidc.as_ref().filter(|_| cfg.console.enabled(cfg.mode))?;
    let client = upstream::client(&cfg.upstream).expect("the upstream client was built with the app");
    let tenants = cfg.tenants.iter().map(|t| t.name.clone()).collect();
    Some(oidc.http(&cfg.auth, tenants, client))
}

/// Each tenant's share of `limits.max_background` (SPEC §12: one tenant cannot starve the
/// others): its own `max_background`, else an equal share of the pool, rounded up. Without
/// tenants, the one open tenant has the whole pool.
fn tenant_background(cfg: &Config) -> std::collections::HashMap<Arc<str>, usize> {
    let pool = cfg.limits.max_background;
    let equal = pool.div_ceil(cfg.tenants.len().max(1));
    cfg.tenants
        .iter()
        .map(|t| (Arc::from(t.name.as_str()), t.max_background.unwrap_or(equal).min(pool)))
        .collect()
}

/// The front door's tenants: keys (scoped ones too), and each tenant's own limits.
fn http_tenants(cfg: &Config) -> Result<oncerpc_http::Tenants, String> {
    let mut tenants =
        oncerpc_http::Tenants::new(cfg.tenants.iter().map(|t| (t.name.as_str(), t.api_keys.as_slice())))?;
    for t in &cfg.tenants {
        for k in &t.keys {
            tenants.add_scoped_key(&t.name, &k.key, &k.name, &k.scopes)?;
        }
        let limits = oncerpc_http::TenantLimits {
            rate_per_sec: t.rate_per_sec,
            burst: t.burst,
            max_in_flight: t.max_in_flight,
        };
        tenants.limit(&t.name, limits)?;
    }
    Ok(tenants)
}

/// Live records a `memory://` store holds unless `?capacity=` says otherwise.
pub const DEFAULT_MEMORY_CAPACITY: usize = 100_000;

/// Open the idempotency store a `[store]` section names. `mode`: production refuses a Redis
/// whose `maxmemory-policy` may evict records.
pub async fn open_store(cfg: &config::StoreConfig, mode: Mode) -> Result<Arc<dyn Store>, ConfigError> {
    use config::StoreKind;
    let rest = cfg.url.split_once("://").map_or("", |(_, r)| r);
    match config::store_scheme(&cfg.url)? {
        StoreKind::Memory => {
            // memory:// or memory://?capacity=N (live records; full → -32004, never eviction).
            let capacity = match rest.strip_prefix('?').and_then(|q| q.strip_prefix("capacity=")) {
                None if rest.is_empty() => DEFAULT_MEMORY_CAPACITY,
                Some(n) => n.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "store.url {}: capacity must be a positive number",
                        oncerpc_core::redact_url(&cfg.url)
                    ))
                })?,
                None => {
                    return Err(ConfigError::Invalid(format!(
                        "store.url {}: use memory:// or memory://?capacity=N",
                        oncerpc_core::redact_url(&cfg.url)
                    )));
                }
            };
            Ok(Arc::new(MemoryStore::new(capacity)))
        }
        StoreKind::Sqlite => {
            if rest.is_empty() {
                return Err(ConfigError::Invalid(
                    "store.url: sqlite:// needs a path, e.g. sqlite://oncerpc.db".into(),
                ));
            }
            let store = oncerpc_store_sqlite::SqliteStore::open(rest).map_err(|e| {
                ConfigError::Invalid(format!("store.url {}: {e}", oncerpc_core::redact_url(&cfg.url)))
            })?;
            Ok(Arc::new(store))
        }
        StoreKind::Redis => {
            let options = oncerpc_store_redis::RedisOptions {
                prefix: cfg.redis_prefix.clone(),
                wait_replicas: cfg.redis_wait_replicas,
                ca_file: cfg.ca_file.clone(),
                production: mode == Mode::Production,
            };
            let store = oncerpc_store_redis::RedisStore::connect_with(&cfg.url, options)
                .await
                .map_err(|e| ConfigError::Invalid(format!("store.url: {e}")))?;
            Ok(Arc::new(store))
        }
        StoreKind::Postgres => {
            let store = oncerpc_store_postgres::PgStore::connect(&cfg.url)
                .await
                .map_err(|e| ConfigError::Invalid(format!("store.url: {e}")))?;
            Ok(Arc::new(store))
        }
    }
}

/// Read every certificate and key file a config names (`[tls]`, `[upstream]`,
/// `store.ca_file`) the way serving will, without connecting anywhere.
pub fn check_tls_files(config: &Config) -> Result<(), ConfigError> {
    upstream::client(&config.upstream).map_err(ConfigError::Invalid)?;
    if let Some(t) = &config.tls {
        oncerpc_http::tls::ListenerTls::load(&t.cert_file, &t.key_file, None)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    }
    if let Some(ca) = &config.store.ca_file {
        std::fs::read(ca)
            .map_err(|e| ConfigError::Invalid(format!("store.ca_file {}: {e}", ca.display())))?;
    }
    Ok(())
}

/// Check the `[[methods]]` of a config the way the registry will: name rules, kind and
/// notification rules, that each `params_schema` compiles, and that the MCP tools' names (the
/// demo methods' too, where they are on) can be given as `[mcp] tool_names` says.
pub fn check_methods(config: &Config) -> Result<(), ConfigError> {
    struct Unused;
    impl oncerpc_core::Handler for Unused {
        fn call<'a>(
            &'a self,
            _: oncerpc_core::Context,
            _: Option<&'a oncerpc_protocol::RawValue>,
        ) -> oncerpc_core::BoxFuture<'a, oncerpc_core::HandlerResult> {
            Box::pin(async { Err(oncerpc_protocol::RpcError::internal("not served")) })
        }
    }
    // The registry as serving builds it: the demo methods first, where they are on.
    let mut registry = Registry::new();
    if config.demo_enabled() {
        let timeout = Duration::from_millis(config.limits.default_timeout_ms);
        demo::register(&mut registry, Arc::default(), timeout)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    }
    for m in &config.methods {
        registry
            .register(&m.name, method_spec(config, m), Unused)
            .map_err(|e| ConfigError::Invalid(format!("methods.{}: {e}", m.name)))?;
    }
    mcp::check_tool_names(config, &registry)
}

/// The registry spec of a configured method.
pub fn method_spec(config: &Config, m: &config::MethodConfig) -> oncerpc_core::MethodSpec {
    let mut spec = match m.kind {
        oncerpc_core::Kind::Query => oncerpc_core::MethodSpec::query(),
        oncerpc_core::Kind::Command => oncerpc_core::MethodSpec::command(),
    }
    .notification_allowed(m.notification_allowed)
    .timeout(Duration::from_millis(config.method_timeout_ms(m)));
    if let Some(s) = &m.params_schema {
        spec = spec.params_schema(s.clone());
    }
    if let Some(d) = &m.description {
        spec = spec.description(d.clone());
    }
    spec.scopes = m.scopes.clone();
    spec.asks = m.steps.iter().any(|s| s.ask.is_some());
    mcp::apply(m, &mut spec);
    webhooks::apply(m, spec)
}

/// Register every `[[methods]]` flow of `config`; their attempts are counted in `attempts`.
pub fn register_flows(
    registry: &mut Registry,
    config: &Config,
    client: &reqwest::Client,
    attempts: &flow::StepAttempts,
    mcp: Option<&Arc<oncerpc_mcp_upstream::Upstreams>>,
) -> Result<(), ConfigError> {
    let policy = flow::UpstreamPolicy {
        max_response_bytes: config.upstream.max_response_bytes,
        production: config.mode == Mode::Production,
    };
    // One token source per OAuth client for every flow: a token is fetched once for all the
    // steps that use that client (`[upstream.oauth]`, or all the operations of a document).
    let pool = oncerpc_flows::TokenPool::new();
    let tokens = config.upstream.oauth.as_ref().map(|o| pool.source(o, client));
    for m in &config.methods {
        let timeout = Duration::from_millis(config.method_timeout_ms(m));
        let flow =
            flow::Flow::new(&m.name, m.steps.clone(), client.clone(), policy, timeout, attempts.clone())
                .with_mcp(mcp.cloned())
                .with_tokens(tokens.clone())
                .with_token_pool(&pool);
        registry
            .register_arc(&m.name, method_spec(config, m), Arc::new(flow))
            .map_err(|e| ConfigError::Invalid(format!("methods.{}: {e}", m.name)))?;
    }
    Ok(())
}

/// Re-export of the router type so embedders need not depend on axum directly.
pub mod axum_router {
    pub use oncerpc_http::Router;
}
