//! The dispatcher: one body in, one body (or nothing) out.
//!
//! body → [`oncerpc_protocol::parse`] → batch rules → for each entry: policy (SPEC §2) →
//! params schema → handler (deadline, panic guard) → response bytes, in request order.
//!
//! One file per job: one entry's policy and execution (`entry`), batches (`batch`),
//! validation (`prepare`) and what it found for retries (`memo`), keyed executions
//! (`keyed`), the handler call (`handler`), the access line and metrics (`observe`),
//! correlation ids (`ids`).

mod batch;
mod entry;
mod external;
mod handler;
mod ids;
mod info;
mod keyed;
mod local;
mod memo;
mod observe;
mod prepare;
mod quick;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncerpc_protocol::{Message, Outcome, RawValue, RpcError};

pub use external::{ExternalMethod, ExternalResolver};
pub(crate) use handler::run_handler;
use ids::correlation_id;
pub use ids::generated_id;
pub use info::IdempotencyInfo;
pub use prepare::RESERVED_PARAMS;

use crate::cache::DoneCache;
use crate::execution::Executions;
use crate::idempotency::IdempotencyConfig;
use crate::memory::MemoryStore;
use crate::metrics::Metrics;
use crate::openrpc;
use crate::registry::Registry;
use crate::store::Store;

/// Batch rules (SPEC §1, "Batches").
#[derive(Debug, Clone)]
pub struct BatchConfig {
    pub enabled: bool,
    pub max_size: usize,
    /// How many entries of one batch may execute at the same time.
    pub max_concurrency: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig { enabled: true, max_size: 50, max_concurrency: 16 }
    }
}

/// Dispatcher settings.
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    pub batch: BatchConfig,
    pub idempotency: IdempotencyConfig,
    /// Keyed executions (and async events) running at once, including those whose client
    /// left: past it, new ones are refused with `-32007` before anything is claimed.
    pub max_background: usize,
    /// Tenants' own shares of `max_background`: a tenant named here holds at most that many
    /// places (the pool stays the ceiling); a tenant not named has only the pool.
    pub tenant_background: std::collections::HashMap<Arc<str>, usize>,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            batch: BatchConfig::default(),
            idempotency: IdempotencyConfig::default(),
            max_background: 1024,
            tenant_background: Default::default(),
        }
    }
}

/// Who is asking and what the transport said about idempotency, as established by the
/// front door.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    pub tenant: Arc<str>,
    /// A key from the transport (`X-Idempotency-Key` / `Idempotency-Key`).
    pub idempotency_key: Option<Arc<str>>,
    /// Force retry requested by the transport (`X-Force-Retry: true`).
    pub force_retry: bool,
    /// A correlation id given by the caller (flows door: `X-Correlation-Id`).
    pub correlation_id: Option<Arc<str>>,
    /// The flow step whose output is the result (flows door: `?return_step=`).
    pub return_step: Option<Arc<str>>,
    /// Request headers a method's `key_header` names: (lower-case name, value). Only those
    /// are collected, so this is empty unless a method derives its key from a header.
    pub key_headers: Vec<(Arc<str>, Arc<str>)>,
    /// The front door verified this request's webhook signature for the method it calls
    /// (SPEC §15). A method registered as `signed` is refused without it.
    pub signature_verified: bool,
    /// Where the handler reports its steps while it runs (the MCP door's progress and log
    /// notifications); `None`: nobody listens.
    pub progress: Option<crate::Progress>,
    /// The caller's W3C trace context (`traceparent`/`tracestate`, or MCP's `_meta`), handed
    /// on to upstream steps and written on the request's log lines.
    pub trace: Option<crate::TraceContext>,
    /// What the caller may call (SPEC §20): every method (a tenant's plain API key, no
    /// tenants, stdio), or those whose scopes its token or scoped key holds.
    pub grant: crate::Grant,
    /// Who the caller is, for the audit trail (a token's `sub`, a scoped key's `name`); `None`
    /// for a tenant's plain API key. Never a credential.
    pub subject: Option<Arc<str>>,
    /// Fires when the caller cancels the call (MCP's `notifications/cancelled`), for a handler
    /// whose work is another server's to stop ([`Context::cancel`](crate::Context)); `None`:
    /// the call cannot be cancelled.
    pub cancel: Option<tokio_util::sync::CancellationToken>,
    /// Where the call's questions to its client go (the MCP door, for a client that answers
    /// elicitation); `None`: this door cannot ask, and a method that asks is refused.
    pub ask: Option<crate::ask::Ask>,
}

impl Default for RequestMeta {
    fn default() -> Self {
        RequestMeta::of_tenant(Arc::from(DEFAULT_TENANT))
    }
}

impl RequestMeta {
    /// A request of `tenant` that the transport says nothing else about (what
    /// `..RequestMeta::default()` gives, without allocating a default tenant only to drop it).
    pub fn of_tenant(tenant: Arc<str>) -> Self {
        RequestMeta {
            tenant,
            idempotency_key: None,
            force_retry: false,
            correlation_id: None,
            return_step: None,
            key_headers: Vec::new(),
            signature_verified: false,
            progress: None,
            trace: None,
            grant: crate::Grant::All,
            subject: None,
            cancel: None,
            ask: None,
        }
    }
}

/// The tenant of every request when no tenants are configured.
pub const DEFAULT_TENANT: &str = "default";

/// What the front door sends back.
#[derive(Debug)]
pub struct Reply {
    /// The response body; `None` when there is nothing to return (HTTP `204`).
    pub body: Option<Vec<u8>>,
    /// For `X-Correlation-Id`: a single request's id text, else a generated id.
    pub correlation_id: Arc<str>,
    /// A single command's idempotency key and status (not set for batches).
    pub idempotency: Option<IdempotencyInfo>,
}

/// Answers JSON-RPC bodies against a [`Registry`].
pub struct Dispatcher {
    pub(crate) registry: Registry,
    pub(crate) config: DispatcherConfig,
    discover: Box<RawValue>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) metrics: Metrics,
    /// Async events executing in this process (not to be resumed by its own scanner); shared
    /// with this dispatcher's successors ([`Dispatcher::successor`]).
    pub(crate) running_events: Arc<Mutex<std::collections::HashSet<String>>>,
    /// Keyed executions: claims, leases, outcomes, and the tasks shutdown waits for.
    pub(crate) exec: Arc<Executions>,
    /// Finds methods that are not in the registry (a door's external tools), for their events.
    pub(crate) external: std::sync::OnceLock<external::ExternalResolver>,
    /// What `prepare` found for the params of commands answered as duplicates.
    pub(crate) memo: memo::PreparedMemo,
}

impl Dispatcher {
    /// A dispatcher whose idempotency records live in a fresh [`MemoryStore`].
    pub fn new(registry: Registry, config: DispatcherConfig) -> Self {
        Self::with_store(registry, config, Arc::new(MemoryStore::default()))
    }

    /// A dispatcher over the given idempotency store.
    pub fn with_store(registry: Registry, config: DispatcherConfig, store: Arc<dyn Store>) -> Self {
        // Every call of a store that can hang answers within its bound (`store.op_timeout_ms`).
        let store = crate::Bounded::wrap(store, config.idempotency.store_timeout);
        let doc = openrpc::document(&registry, "oncerpc", env!("CARGO_PKG_VERSION"));
        let discover = serde_json::value::to_raw_value(&doc).expect("a Value always serialises");
        let done_cache = store.cache_successes().then(|| Arc::new(DoneCache::new(100_000)));
        let metrics = Metrics::new();
        let exec = Arc::new(Executions::new(
            store.clone(),
            done_cache,
            metrics.clone(),
            config.idempotency.ttl,
            crate::budget::Budget::new(config.max_background, &config.tenant_background, metrics.clone()),
        ));
        for m in registry.iter() {
            let _ = m.metrics.set(metrics.for_method(&m.name, m.spec.kind.as_str()));
        }
        Dispatcher {
            registry,
            config,
            discover,
            store,
            metrics,
            running_events: Default::default(),
            exec,
            external: std::sync::OnceLock::new(),
            memo: memo::PreparedMemo::default(),
        }
    }

    /// A dispatcher for a new configuration (a reload): `registry` and `config` are the new
    /// ones, and everything that outlives one configuration is this one's — the store, the
    /// metrics, the keyed executions (their claims, unrecorded outcomes, background budget and
    /// the tasks shutdown waits for), the async events running here, and the resolver of
    /// external methods. Requests that hold this dispatcher finish on it; shutting down either
    /// waits for the executions of both. The background budget stays as it is
    /// (`config.max_background` and `tenant_background` are not applied).
    pub fn successor(&self, registry: Registry, config: DispatcherConfig) -> Dispatcher {
        let doc = openrpc::document(&registry, "oncerpc", env!("CARGO_PKG_VERSION"));
        let discover = serde_json::value::to_raw_value(&doc).expect("a Value always serialises");
        for m in registry.iter() {
            let _ = m.metrics.set(self.metrics.for_method(&m.name, m.spec.kind.as_str()));
        }
        let external = std::sync::OnceLock::new();
        if let Some(resolver) = self.external.get() {
            let _ = external.set(resolver.clone());
        }
        Dispatcher {
            registry,
            config,
            discover,
            store: self.store.clone(),
            metrics: self.metrics.clone(),
            running_events: self.running_events.clone(),
            exec: self.exec.clone(),
            external,
            // What was found for the old registry's schemas is not carried over.
            memo: memo::PreparedMemo::default(),
        }
    }

    /// This dispatcher's Prometheus metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Call one method directly, as the flows door does (no JSON-RPC envelope): policy,
    /// schema, idempotency, handler. Returns the outcome, the idempotency key and status,
    /// and the correlation id used.
    pub async fn call(
        &self,
        method: &str,
        params: Option<&RawValue>,
        meta: &RequestMeta,
    ) -> (Outcome, Option<IdempotencyInfo>, Arc<str>) {
        let cid = meta.correlation_id.clone().unwrap_or_else(generated_id);
        let started = Instant::now();
        let Some(m) = self.registry.get(method) else {
            let outcome = Outcome::Error(RpcError::method_not_found());
            self.observe(method, &cid, None, meta, &outcome, None, started.elapsed(), None);
            return (outcome, None, cid);
        };
        // No span of its own, as on /rpc: an execution that starts has one (with the
        // correlation id, in its spawned tasks too), and a query's or a duplicate's details are
        // on its one access line.
        let (outcome, info) = self.execute_observed(m, params, cid.clone(), meta, None, started).await;
        (outcome, info, cid)
    }

    /// Background executions (keyed commands, async events) running now, and
    /// `limits.max_background`.
    pub fn background(&self) -> (usize, usize) {
        self.exec.background_usage()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Graceful shutdown of the executions (call after the front door stopped accepting):
    /// wait up to `grace` for every execution this dispatcher started — commands whose client
    /// left, async events, outcomes still being written — then log each record left
    /// `processing`. Returns how many were left.
    pub async fn shutdown(&self, grace: Duration) -> usize {
        self.exec.shutdown(grace).await
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn config(&self) -> &DispatcherConfig {
        &self.config
    }

    /// The OpenRPC document (`rpc.discover`, `GET /openrpc.json`).
    pub fn openrpc(&self) -> &RawValue {
        &self.discover
    }

    /// Answer one body: a single request or a batch.
    pub async fn handle(&self, body: &[u8], meta: &RequestMeta) -> Reply {
        // One clock read per body: deadlines and latencies of every entry start here.
        let started = Instant::now();
        let message = match oncerpc_protocol::parse(body) {
            Ok(m) => m,
            Err(e) => {
                tracing::info!(error = %e, "parse error");
                return Reply {
                    body: Some(oncerpc_protocol::error_body(&e)),
                    correlation_id: generated_id(),
                    idempotency: None,
                };
            }
        };
        match message {
            Message::Single(entry) => {
                let cid = correlation_id(&entry);
                let mut idempotency = None;
                let body = self.run_entry(entry, cid.clone(), meta, None, started).await.map(|a| {
                    idempotency = a.idempotency;
                    let mut out = Vec::with_capacity(128);
                    oncerpc_protocol::write_outcome(&mut out, a.id, &a.outcome);
                    out
                });
                Reply { body, correlation_id: cid, idempotency }
            }
            Message::Batch(entries) => self.handle_batch(entries, meta, started).await,
        }
    }
}
