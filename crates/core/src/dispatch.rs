//! The dispatcher: one body in, one body (or nothing) out.
//!
//! body → [`oncerpc_protocol::parse`] → batch rules → for each entry: policy (DESIGN §2) →
//! params schema → handler (deadline, panic guard) → response bytes, in request order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use oncerpc_protocol::{Entry, ErrorCode, Id, Message, Outcome, RawValue, Request, RpcError};
use tracing::Instrument;

use crate::cache::DoneCache;
use crate::execution::{Acquired, Executions, Settled, in_progress, lease_for};
use crate::idempotency::{self, IdempotencyConfig, Mode};
use crate::memory::MemoryStore;
use crate::method::{Context, IdempotencyStatus, Kind, Method};
use crate::metrics::{CLIENT_CLOSED, MethodMetrics, Metrics};
use crate::openrpc;
use crate::registry::Registry;
use crate::store::{Claim, RecordKey, Store, StoredOutcome};

/// Batch rules (DESIGN §1, "Batches").
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
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            batch: BatchConfig::default(),
            idempotency: IdempotencyConfig::default(),
            max_background: 1024,
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
}

impl Default for RequestMeta {
    fn default() -> Self {
        RequestMeta {
            tenant: Arc::from(DEFAULT_TENANT),
            idempotency_key: None,
            force_retry: false,
            correlation_id: None,
            return_step: None,
        }
    }
}

/// A request that passed validation, ready to execute.
pub(crate) struct Prepared {
    pub ctx: Context,
    /// Set when the execution is guarded by an idempotency record.
    pub keyed: Option<Keyed>,
}

pub(crate) struct Keyed {
    /// Generated for a keyless async call, not given by the client.
    pub synthetic: bool,
    pub key: Arc<str>,
    pub fingerprint: String,
    pub force_retry: bool,
}

/// The idempotency key and status of a single command, for response headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyInfo {
    pub key: Arc<str>,
    pub status: IdempotencyStatus,
    /// With `processing`: when to try again (DESIGN §3), for HTTP's `Retry-After`.
    pub retry_after_ms: Option<u64>,
}

impl IdempotencyInfo {
    fn of(key: Arc<str>, status: IdempotencyStatus, outcome: &Outcome) -> Self {
        let retry_after_ms = match status {
            IdempotencyStatus::Processing => crate::execution::in_progress_hint(outcome),
            _ => None,
        };
        IdempotencyInfo { key, status, retry_after_ms }
    }
}

/// One answered entry.
struct Answer<'a> {
    id: Option<Id<'a>>,
    outcome: Outcome,
    idempotency: Option<IdempotencyInfo>,
}

impl<'a> Answer<'a> {
    fn plain(id: Option<Id<'a>>, outcome: Outcome) -> Self {
        Answer { id, outcome, idempotency: None }
    }
}

/// Per (method, key) of a batch: the one execution its entries share.
type SharedByKey = HashMap<(Arc<str>, Arc<str>), Arc<tokio::sync::OnceCell<Shared>>>;

/// A request's access-log line (DESIGN §7): at `info` for a single request or stdio message,
/// at `debug` for an entry of a batch (the batch writes one `info` line of its own).
macro_rules! access_line {
    ($batch:expr, $($arg:tt)+) => {
        if $batch.is_some() {
            tracing::debug!($($arg)+)
        } else {
            tracing::info!($($arg)+)
        }
    };
}

/// What the entries of one batch share.
#[derive(Default)]
struct BatchLocal {
    /// Commands of one batch that share a key execute once (DESIGN §1, "Batches"): the first
    /// entry runs, the others wait for its outcome.
    keyed: Mutex<SharedByKey>,
    /// The `ok` count and latencies of the batch's successful entries, per method, added to
    /// the shared metrics once when the batch ends (or is dropped). Observing the shared
    /// histogram per entry was ~5 % of the server's CPU on batches of 50: its atomics bounce
    /// between the worker threads.
    ok: Mutex<Vec<LocalOk>>,
    /// The batch's own copy of each called method's name, for the entries' contexts: a clone
    /// of the registry's `Arc` per entry is an atomic both workers fight over.
    names: Mutex<Vec<Arc<str>>>,
}

/// One method's successes within a batch; flushed into the shared metrics on drop.
struct LocalOk {
    method: Arc<Method>,
    count: u64,
    ok: prometheus::IntCounter,
    latency: prometheus::local::LocalHistogram,
}

impl Drop for LocalOk {
    fn drop(&mut self) {
        self.ok.inc_by(self.count);
        // `LocalHistogram` flushes itself on drop.
    }
}

impl BatchLocal {
    fn name_of(&self, method: &Method) -> Arc<str> {
        let mut names = self.names.lock().expect("batch-local lock");
        if let Some(name) = names.iter().find(|n| ***n == *method.name) {
            return name.clone();
        }
        let name: Arc<str> = Arc::from(&*method.name);
        names.push(name.clone());
        name
    }

    /// Record a successful entry of `method`, whose metric handles are `h`.
    fn ok(&self, method: &Arc<Method>, h: &MethodMetrics, elapsed: Duration) {
        let mut ok = self.ok.lock().expect("batch-local lock");
        let i = match ok.iter().position(|o| Arc::ptr_eq(&o.method, method)) {
            Some(i) => i,
            None => {
                let local = LocalOk {
                    method: method.clone(),
                    count: 0,
                    ok: h.ok.clone(),
                    latency: h.latency.local(),
                };
                ok.push(local);
                ok.len() - 1
            }
        };
        ok[i].count += 1;
        ok[i].latency.observe(elapsed.as_secs_f64());
    }
}

#[derive(Clone)]
struct Shared {
    fingerprint: String,
    outcome: Outcome,
    status: Option<IdempotencyStatus>,
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
    /// Async events executing in this process (not to be resumed by its own scanner).
    pub(crate) running_events: Mutex<std::collections::HashSet<String>>,
    /// Keyed executions: claims, leases, outcomes, and the tasks shutdown waits for.
    pub(crate) exec: Arc<Executions>,
}

impl Dispatcher {
    /// A dispatcher whose idempotency records live in a fresh [`MemoryStore`].
    pub fn new(registry: Registry, config: DispatcherConfig) -> Self {
        Self::with_store(registry, config, Arc::new(MemoryStore::default()))
    }

    /// A dispatcher over the given idempotency store.
    pub fn with_store(registry: Registry, config: DispatcherConfig, store: Arc<dyn Store>) -> Self {
        let doc = openrpc::document(&registry, "oncerpc", env!("CARGO_PKG_VERSION"));
        let discover = serde_json::value::to_raw_value(&doc).expect("a Value always serialises");
        let done_cache = store.cache_successes().then(|| Arc::new(DoneCache::new(100_000)));
        let metrics = Metrics::new();
        let exec = Arc::new(Executions::new(
            store.clone(),
            done_cache,
            metrics.clone(),
            config.idempotency.ttl,
            config.max_background,
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
            running_events: Mutex::new(Default::default()),
            exec,
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
        // The request's context for every line logged while it runs; its own details are on
        // its one access line (`observe`).
        let span = tracing::info_span!("call", correlation_id = %cid);
        let started = Instant::now();
        let run = async {
            let Some(m) = self.registry.get(method) else {
                let outcome = Outcome::Error(RpcError::method_not_found());
                self.observe(method, &cid, None, meta, &outcome, None, started.elapsed(), None);
                return (outcome, None);
            };
            self.execute_observed(m, params, cid.clone(), meta, None, started).await
        };
        let (outcome, info) = run.instrument(span).await;
        (outcome, info, cid)
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

    async fn handle_batch<'a>(&self, entries: Vec<Entry<'a>>, meta: &RequestMeta, started: Instant) -> Reply {
        let batch_cid = generated_id();
        let cfg = &self.config.batch;
        let reject = |e: RpcError| Reply {
            body: Some(oncerpc_protocol::error_body(&e)),
            correlation_id: batch_cid.clone(),
            idempotency: None,
        };
        if !cfg.enabled {
            return reject(RpcError::with_message(ErrorCode::InvalidRequest, "Batch requests not supported"));
        }
        if entries.is_empty() {
            return reject(RpcError::invalid_request("empty batch"));
        }
        if entries.len() > cfg.max_size {
            return self.refuse_oversized(&entries, cfg.max_size, batch_cid);
        }
        self.metrics.batch(entries.len());
        let local = BatchLocal::default();
        // The batch's own copy of the tenant's name: each entry's context clones it, and a
        // clone of the name every request shares is an atomic both workers fight over.
        let meta = &RequestMeta { tenant: Arc::from(&*meta.tenant), ..meta.clone() };
        // The futures are built first (they are lazy) so that no closure lives across the
        // awaits below, which would defeat the `Send` proof.
        let calls: Vec<_> = entries
            .into_iter()
            .map(|entry| {
                let cid = correlation_id(&entry);
                Box::pin(self.run_entry(entry, cid, meta, Some(&local), started))
            })
            .collect();
        let results = run_in_order(calls, cfg.max_concurrency.max(1)).await;
        let mut out = Vec::with_capacity(64 * results.len());
        let mut errors = 0usize;
        out.push(b'[');
        for a in results.iter().flatten() {
            if out.len() > 1 {
                out.push(b',');
            }
            errors += usize::from(matches!(a.outcome, Outcome::Error(_)));
            oncerpc_protocol::write_outcome(&mut out, a.id, &a.outcome);
        }
        out.push(b']');
        // The batch's one access-log line (its entries' lines are at `debug`).
        tracing::info!(
            correlation_id = %batch_cid,
            tenant = %meta.tenant,
            size = results.len(),
            errors,
            duration_us = started.elapsed().as_micros() as u64,
            "batch"
        );
        let body = (out.len() > 2).then_some(out);
        Reply { body, correlation_id: batch_cid, idempotency: None }
    }

    /// A batch over `batch.max_size` (DESIGN §1): nothing runs; every entry with a readable
    /// id gets its own `-32600` so that clients waiting for their ids are answered; with no
    /// readable id at all, one error with `id: null`.
    fn refuse_oversized(&self, entries: &[Entry<'_>], max_size: usize, batch_cid: Arc<str>) -> Reply {
        let err = RpcError::with_message(
            ErrorCode::InvalidRequest,
            format!("Batch too large: {} entries, the limit is {max_size} (batch.max_size)", entries.len()),
        );
        let ids = entries.iter().filter_map(|e| match e {
            Entry::Valid(r) => r.id,
            Entry::Invalid { id, .. } => *id,
        });
        let mut out = Vec::with_capacity(128);
        out.push(b'[');
        let mut answered = 0usize;
        for id in ids {
            if answered > 0 {
                out.push(b',');
            }
            oncerpc_protocol::write_error(&mut out, Some(id), &err);
            answered += 1;
        }
        out.push(b']');
        let body = if answered == 0 { oncerpc_protocol::error_body(&err) } else { out };
        self.metrics.request("unknown", "batch", "-32600", Duration::ZERO);
        tracing::info!(
            correlation_id = %batch_cid,
            size = entries.len(),
            errors = answered.max(1),
            "batch refused: over batch.max_size"
        );
        Reply { body: Some(body), correlation_id: batch_cid, idempotency: None }
    }

    /// Policy and execution of one entry. `None`: nothing to answer (a notification).
    async fn run_entry<'a>(
        &self,
        entry: Entry<'a>,
        cid: Arc<str>,
        meta: &RequestMeta,
        local: Option<&BatchLocal>,
        started: Instant,
    ) -> Option<Answer<'a>> {
        let req = match entry {
            Entry::Invalid { id, error } => {
                access_line!(local, correlation_id = %cid, error = %error, "invalid request");
                return Some(Answer::plain(id, Outcome::Error(error)));
            }
            Entry::Valid(req) => req,
        };
        // A command's span carries its correlation id to every line logged while it runs
        // (store, lease, upstream lines, in its spawned tasks too). A query needs none: the
        // lines it can cause (its access line, a panic, a failed upstream step) carry the id
        // themselves, and a span per query cost ~10 % of a query's throughput. A batch entry's
        // span is at `debug`, like its access line (the batch logs one line).
        // The method is looked up once, here, for the span and for `run_request`.
        let method = self.registry.get(&req.method);
        let span = if local.is_some() {
            tracing::debug_span!("rpc", correlation_id = %cid, method = %crate::LogSafe(&req.method))
        } else if method.is_some_and(|m| m.spec.kind == Kind::Command) {
            tracing::info_span!("rpc", correlation_id = %cid)
        } else {
            tracing::debug_span!("rpc", correlation_id = %cid)
        };
        self.run_request(req, method, cid, meta, local, started).instrument(span).await
    }

    /// `method`: the registered method of `req.method`, when there is one.
    #[allow(clippy::too_many_arguments)]
    async fn run_request<'a>(
        &self,
        req: Request<'a>,
        method: Option<&Arc<Method>>,
        cid: Arc<str>,
        meta: &RequestMeta,
        local: Option<&BatchLocal>,
        started: Instant,
    ) -> Option<Answer<'a>> {
        if req.method == "rpc.discover" {
            // A query like any other: a notification to it is refused (DESIGN §2.3).
            let Some(id) = req.id else {
                let msg = "method \"rpc.discover\" does not accept notifications: send an id";
                let err = RpcError::with_message(ErrorCode::InvalidRequest, msg);
                return Some(Answer::plain(None, Outcome::Error(err)));
            };
            return Some(Answer::plain(Some(id), Outcome::Result(self.discover.clone())));
        }
        let Some(method) = method else {
            if req.is_notification() {
                // LSP's `$/` notifications (`$/cancelRequest`, `$/setTrace`, …) may be ignored
                // by a server that does not implement them, without a warning.
                if req.method.starts_with("$/") {
                    tracing::debug!(correlation_id = %cid, "protocol notification ignored");
                } else {
                    let method = crate::LogSafe(&req.method);
                    tracing::warn!(correlation_id = %cid, %method, "notification to unknown method dropped");
                }
                return None;
            }
            let outcome = Outcome::Error(RpcError::method_not_found());
            self.observe(&req.method, &cid, None, meta, &outcome, None, started.elapsed(), local);
            return Some(Answer::plain(req.id, outcome));
        };

        if req.is_notification() {
            // Fail fast (DESIGN §2.2, §2.3): a notification the method does not accept is
            // answered, with `id: null`, rather than silently dropped.
            let refusal = if method.spec.kind == Kind::Command {
                Some(format!("method \"{}\" is a command and requires an id", method.name))
            } else if !method.spec.notification_allowed {
                Some(format!("method \"{}\" does not accept notifications: send an id", method.name))
            } else {
                None
            };
            if let Some(msg) = refusal {
                tracing::info!(correlation_id = %cid, outcome = "error", code = -32600, "{msg}");
                let err = RpcError::with_message(ErrorCode::InvalidRequest, msg);
                return Some(Answer::plain(None, Outcome::Error(err)));
            }
            let (outcome, _) = self.execute(method, req.params, cid.clone(), meta, None, started).await;
            match &outcome {
                Outcome::Error(e) => {
                    tracing::error!(correlation_id = %cid, error = %e, "notification failed")
                }
                Outcome::Result(_) => {
                    let duration_us = started.elapsed().as_micros() as u64;
                    let method = crate::LogSafe(&req.method);
                    access_line!(local, correlation_id = %cid, %method, duration_us, outcome = "ok", "notification");
                }
            }
            return None;
        }

        let (outcome, idempotency) =
            self.execute_observed(method, req.params, cid, meta, local, started).await;
        Some(Answer { id: req.id, outcome, idempotency })
    }

    /// [`execute`](Self::execute), then the log line and metrics of the answer. When the
    /// future is dropped first (the client hung up: hyper drops the request's future), the
    /// request is logged and counted with outcome `client_closed` instead, so every request
    /// shows up once. A command that was claimed still runs to the end in its own task and
    /// its outcome is stored (`run_recorded`).
    async fn execute_observed(
        &self,
        method: &Arc<Method>,
        params: Option<&RawValue>,
        cid: Arc<str>,
        meta: &RequestMeta,
        local: Option<&BatchLocal>,
        started: Instant,
    ) -> (Outcome, Option<IdempotencyInfo>) {
        let mut unanswered = Unanswered { metrics: &self.metrics, method, cid: &cid, started, armed: true };
        let (outcome, idempotency) = self.execute(method, params, cid.clone(), meta, local, started).await;
        unanswered.armed = false;
        let elapsed = started.elapsed();
        self.observe(&method.name, &cid, Some(method), meta, &outcome, idempotency.as_ref(), elapsed, local);
        (outcome, idempotency)
    }

    /// The one access-log line and the metrics of an answered request (DESIGN §7).
    /// `requested`: the method name as sent (logged escaped and cut); `method`: the
    /// registered method, when there is one.
    #[allow(clippy::too_many_arguments)]
    fn observe(
        &self,
        requested: &str,
        cid: &str,
        method: Option<&Arc<Method>>,
        meta: &RequestMeta,
        outcome: &Outcome,
        idempotency: Option<&IdempotencyInfo>,
        elapsed: Duration,
        batch: Option<&BatchLocal>,
    ) {
        let duration_us = elapsed.as_micros() as u64;
        let (name, kind) = method.map_or(("unknown", "unknown"), |m| (&*m.name, m.spec.kind.as_str()));
        let code = match outcome {
            Outcome::Result(_) => None,
            Outcome::Error(e) => Some(e.code.code()),
        };
        access_line!(
            batch,
            // The span's when the request has one; a query has none (see `run_entry`), so its
            // line carries the id itself. Evaluated only when the line is written.
            correlation_id = tracing::Span::current().is_disabled().then_some(tracing::field::display(cid)),
            method = %crate::LogSafe(requested),
            kind = %kind,
            tenant = %meta.tenant,
            idempotency_status = idempotency.map(|i| tracing::field::display(i.status.as_str())),
            duration_us,
            outcome = %if code.is_none() { "ok" } else { "error" },
            code,
            "request"
        );
        let handles = method.and_then(|m| m.metrics.get());
        if let Some(info) = idempotency {
            match handles {
                Some(h) => h.statuses[info.status as usize].inc(),
                None => self.metrics.idempotency(name, info.status.as_str()),
            }
        }
        match (code, handles) {
            (None, Some(h)) => match (batch, method) {
                (Some(batch), Some(m)) => batch.ok(m, h, elapsed),
                _ => {
                    h.ok.inc();
                    h.latency.observe(elapsed.as_secs_f64());
                }
            },
            (None, None) => self.metrics.request(name, kind, "ok", elapsed),
            (Some(code), _) => self.metrics.request(name, kind, &code.to_string(), elapsed),
        }
    }

    /// Validation shared by every door: params parsed when needed, reserved members read
    /// and removed, the JSON Schema, the key rules of DESIGN §3. `async_event`: the
    /// execution will be an async event, which is always guarded by a record (a synthetic
    /// key when the client gave none). `name`: the method's name for the context.
    pub(crate) fn prepare(
        &self,
        method: &Method,
        name: Arc<str>,
        params: Option<&RawValue>,
        cid: Arc<str>,
        meta: &RequestMeta,
        async_event: bool,
    ) -> Result<Prepared, RpcError> {
        let guarded = method.spec.kind == Kind::Command || async_event;
        let mut ctx = Context {
            correlation_id: cid,
            method: name,
            tenant: meta.tenant.clone(),
            idempotency_key: None,
            idempotency_status: None,
            return_step: meta.return_step.clone(),
        };
        // Params are only read when a schema or the engine needs them.
        if method.validator.is_none() && !guarded {
            return Ok(Prepared { ctx, keyed: None });
        }
        // The engine reads the raw text (a Value has lost big and decimal numbers' exact
        // value): reserved members, the fingerprint, duplicate members refused (-32600).
        let command = if guarded { Some(idempotency::command_params(params)?) } else { None };
        if let Some(validator) = &method.validator {
            let mut value = parse_value(params)?;
            if guarded {
                // The schema never sees the reserved members.
                idempotency::remove_reserved(&mut value);
            }
            validate_schema(validator, &value)?;
        }
        let Some(command) = command else { return Ok(Prepared { ctx, keyed: None }) };
        let mut synthetic = false;
        let key = match idempotency::resolve_key(command.key, meta.idempotency_key.as_ref())? {
            Some(key) => {
                idempotency::validate_key(&key)?;
                key
            }
            None if method.spec.kind == Kind::Command && self.config.idempotency.mode == Mode::Production => {
                return Err(RpcError::invalid_params(idempotency::MSG_KEY_REQUIRED));
            }
            None if async_event => {
                synthetic = true;
                Arc::from(format!("evt-{}", uuid::Uuid::new_v4().simple()))
            }
            // dev mode: a keyless command runs, without deduplication.
            None => return Ok(Prepared { ctx, keyed: None }),
        };
        let mut fingerprint = command.fingerprint;
        if let Some(step) = &meta.return_step {
            // Another return_step is another request: it must not replay this one's result.
            fingerprint = idempotency::fingerprint(&serde_json::json!([fingerprint, &**step]));
        }
        ctx.idempotency_key = Some(key.clone());
        let force_retry = command.force_retry || meta.force_retry;
        Ok(Prepared { ctx, keyed: Some(Keyed { synthetic, key, fingerprint, force_retry }) })
    }

    /// Validation, idempotency (commands), then the handler under its deadline and a
    /// panic guard.
    async fn execute(
        &self,
        method: &Arc<Method>,
        params: Option<&RawValue>,
        cid: Arc<str>,
        meta: &RequestMeta,
        local: Option<&BatchLocal>,
        started: Instant,
    ) -> (Outcome, Option<IdempotencyInfo>) {
        let name = local.map_or_else(|| method.name.clone(), |l| l.name_of(method));
        let Prepared { ctx, keyed } = match self.prepare(method, name, params, cid, meta, false) {
            Ok(p) => p,
            Err(e) => return (Outcome::Error(e), None),
        };
        match keyed {
            None => (run_handler(method, ctx, params, started).await, None),
            // The keyed path (claim, spawn, record) is boxed: it keeps the common query
            // future small, which matters when a batch holds 50 of them.
            Some(keyed) => Box::pin(self.execute_keyed(method, params, ctx, keyed, local, started)).await,
        }
    }

    async fn execute_keyed(
        &self,
        method: &Arc<Method>,
        params: Option<&RawValue>,
        ctx: Context,
        keyed: Keyed,
        local: Option<&BatchLocal>,
        started: Instant,
    ) -> (Outcome, Option<IdempotencyInfo>) {
        let key = keyed.key.clone();
        let Some(local) = local else {
            let (outcome, status) = self.claim_and_run(method, params, ctx, &keyed, started).await;
            let info = status.map(|status| IdempotencyInfo::of(key, status, &outcome));
            return (outcome, info);
        };
        // Inside a batch: the first entry with this (method, key) runs, the others share it.
        let cell = {
            let mut map = local.keyed.lock().expect("batch-local lock");
            map.entry((method.name.clone(), key.clone())).or_default().clone()
        };
        let mut ran = false;
        let ran_ref = &mut ran;
        let keyed_ref = &keyed;
        let shared = cell
            .get_or_init(move || async move {
                *ran_ref = true;
                let (outcome, status) = self.claim_and_run(method, params, ctx, keyed_ref, started).await;
                Shared { fingerprint: keyed_ref.fingerprint.clone(), outcome, status }
            })
            .await
            .clone();
        let status = if ran {
            shared.status
        } else {
            // A later entry of the batch with the same key: the same rules as a retry.
            if keyed.fingerprint != shared.fingerprint {
                return (Outcome::Error(RpcError::new(ErrorCode::KeyReused)), None);
            }
            match shared.status {
                Some(IdempotencyStatus::New) => Some(IdempotencyStatus::Duplicate),
                other => other,
            }
        };
        let info = status.map(|status| IdempotencyInfo::of(key, status, &shared.outcome));
        (shared.outcome, info)
    }

    /// The lease of `method`'s executions.
    pub(crate) fn lease(&self, method: &Method) -> Duration {
        lease_for(self.config.idempotency.lease, method.spec.timeout)
    }

    /// Claim the record of a keyed command and act on the answer (DESIGN §3 "Outcomes").
    /// From the claim on, everything runs in a task of its own (spawned first): a client that
    /// hangs up cannot leave a claim that nobody runs, nor cut an execution or its record short.
    async fn claim_and_run(
        &self,
        method: &Arc<Method>,
        params: Option<&RawValue>,
        mut ctx: Context,
        keyed: &Keyed,
        started: Instant,
    ) -> (Outcome, Option<IdempotencyStatus>) {
        let record_key =
            RecordKey { tenant: ctx.tenant.clone(), method: method.name.clone(), key: keyed.key.clone() };
        if let Some(known) = self.exec.known(&record_key, &keyed.fingerprint, keyed.force_retry) {
            return answer(known);
        }
        // Refused before anything is claimed when the execution budget is spent.
        let permit = match self.exec.permit() {
            Ok(p) => p,
            Err(e) => return (Outcome::Error(e), None),
        };
        let exec = self.exec.clone();
        let method = method.clone();
        let params: Option<Box<RawValue>> = params.map(|p| p.to_owned());
        let (fingerprint, force_retry) = (keyed.fingerprint.clone(), keyed.force_retry);
        let lease = self.lease(&method);
        // The task answers through `reply` as soon as it can (after the first write of the
        // outcome), and goes on storing it if that write failed.
        let (reply, answered) = tokio::sync::oneshot::channel();
        self.exec.spawn(
            async move {
                // Held until the outcome is stored, not only until the client is answered.
                let _permit = permit;
                let deadline = started + method.spec.timeout;
                let token = match exec.acquire(&record_key, &fingerprint, force_retry, lease, deadline).await
                {
                    Err(e) => return drop(reply.send((Outcome::Error(e), None))),
                    Ok(Acquired::Not(claim)) => return drop(reply.send(answer(claim))),
                    Ok(Acquired::Owner { token, .. }) => token,
                };
                ctx.idempotency_status = Some(IdempotencyStatus::New);
                let work = run_handler(&method, ctx, params.as_deref(), started);
                let early = |outcome: &Outcome, settled: &Settled| {
                    let _ = reply.send(owner_answer(outcome, settled));
                };
                exec.run_owned(&record_key, token, &fingerprint, lease, work, early).await;
            }
            .in_current_span(),
        );
        match answered.await {
            Ok(answered) => answered,
            Err(_) => {
                (Outcome::Error(RpcError::internal("the execution task ended without an answer")), None)
            }
        }
    }
}

/// Run `calls` with at most `limit` of them waiting at once; their outputs in call order.
/// Each is polled once as it is reached: an entry that answers at once (a query whose
/// handler cannot block) never enters the concurrent set, whose per-future task and waker
/// were ~5 % of the server's CPU on batches of 50 (as `futures`' `buffered`).
async fn run_in_order<F: std::future::Future + Unpin>(calls: Vec<F>, limit: usize) -> Vec<F::Output> {
    let mut done: Vec<Option<F::Output>> = Vec::with_capacity(calls.len());
    let mut waiting = futures::stream::FuturesUnordered::new();
    for (i, mut call) in calls.into_iter().enumerate() {
        if waiting.len() >= limit
            && let Some((j, out)) = waiting.next().await
        {
            done[j] = Some(out);
        }
        match futures::poll!(&mut call) {
            std::task::Poll::Ready(out) => done.push(Some(out)),
            std::task::Poll::Pending => {
                done.push(None);
                waiting.push(call.map(move |out| (i, out)));
            }
        }
    }
    while let Some((j, out)) = waiting.next().await {
        done[j] = Some(out);
    }
    done.into_iter().map(|out| out.expect("every call of a batch ran to its end")).collect()
}

/// The answer of the request whose execution owned the record.
fn owner_answer(outcome: &Outcome, settled: &Settled) -> (Outcome, Option<IdempotencyStatus>) {
    match settled {
        Settled::Stored | Settled::Released | Settled::Storing => {
            (outcome.clone(), Some(IdempotencyStatus::New))
        }
        // Fenced out: this execution's result is not the key's outcome.
        Settled::Fenced(Some(current)) => (replay(current), Some(IdempotencyStatus::Duplicate)),
        Settled::Fenced(None) => (Outcome::Error(in_progress(1000)), Some(IdempotencyStatus::Processing)),
    }
}

/// The answer to a claim this request did not acquire.
fn answer(claim: Claim) -> (Outcome, Option<IdempotencyStatus>) {
    match claim {
        Claim::InProgress { retry_after_ms } => {
            (Outcome::Error(in_progress(retry_after_ms)), Some(IdempotencyStatus::Processing))
        }
        Claim::Done(stored, _) => (replay(&stored), Some(IdempotencyStatus::Duplicate)),
        Claim::FingerprintMismatch => (Outcome::Error(RpcError::new(ErrorCode::KeyReused)), None),
        Claim::ForceRetryRefused => (Outcome::Error(RpcError::new(ErrorCode::ForceRetryRefused)), None),
        Claim::Acquired { .. } => (Outcome::Error(RpcError::internal("an acquired claim was not run")), None),
    }
}

/// Logs and counts a request whose future was dropped before it had an answer (see
/// [`Dispatcher::execute_observed`]). Dropped inside the request's span, so the log line
/// carries its correlation id.
struct Unanswered<'a> {
    metrics: &'a Metrics,
    method: &'a Method,
    cid: &'a str,
    started: Instant,
    armed: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.armed {
            let elapsed = self.started.elapsed();
            tracing::info!(
                correlation_id = %self.cid,
                method = %crate::LogSafe(&self.method.name),
                duration_us = elapsed.as_micros() as u64,
                outcome = CLIENT_CLOSED,
                "request"
            );
            self.metrics.client_closed(&self.method.name, self.method.spec.kind.as_str());
        }
    }
}

/// A stored outcome as it is answered again, byte for byte.
pub(crate) fn replay(stored: &StoredOutcome) -> Outcome {
    match stored {
        StoredOutcome::Succeeded(json) => match RawValue::from_string(json.clone()) {
            Ok(raw) => Outcome::Result(raw),
            Err(e) => Outcome::Error(RpcError::internal(format_args!("stored result is not JSON: {e}"))),
        },
        StoredOutcome::Failed(json) => match RpcError::from_json(json) {
            Ok(err) => Outcome::Error(err),
            Err(e) => Outcome::Error(RpcError::internal(format_args!("stored error is not JSON: {e}"))),
        },
    }
}

fn parse_value(params: Option<&RawValue>) -> Result<serde_json::Value, RpcError> {
    match params {
        None => Ok(serde_json::Value::Null),
        Some(p) => serde_json::from_str(p.get())
            .map_err(|e| RpcError::invalid_params(format!("invalid params: {e}"))),
    }
}

/// Run a handler with its deadline; a panic becomes `-32603` and the server carries on.
/// The deadline is `started + timeout`: no clock read here.
pub(crate) async fn run_handler(
    method: &Method,
    ctx: Context,
    params: Option<&RawValue>,
    started: Instant,
) -> Outcome {
    let cid = ctx.correlation_id.clone();
    let mut call =
        std::pin::pin!(std::panic::AssertUnwindSafe(method.handler.call(ctx, params)).catch_unwind());
    // A handler that answers on its first poll (every handler that cannot block) needs no
    // timer: the deadline is only armed for one that has to wait. Building and dropping a
    // `Sleep` per call was ~5 % of the server's CPU on batches of 50.
    let finished = match futures::poll!(call.as_mut()) {
        std::task::Poll::Ready(done) => Ok(done),
        std::task::Poll::Pending => {
            let deadline = tokio::time::Instant::from_std(started + method.spec.timeout);
            // Boxed: the timer is then not part of every call's future (it would be moved with
            // each entry of a batch).
            Box::pin(tokio::time::timeout_at(deadline, call)).await
        }
    };
    match finished {
        Ok(Ok(Ok(result))) => Outcome::Result(result),
        Ok(Ok(Err(e))) => Outcome::Error(e),
        Ok(Err(panic)) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(correlation_id = %cid, panic = %what, "handler panicked");
            Outcome::Error(RpcError::internal("the handler panicked"))
        }
        Err(_) => Outcome::Error(
            RpcError::new(ErrorCode::Timeout)
                .data(serde_json::json!({ "timeout_ms": method.spec.timeout.as_millis() as u64 })),
        ),
    }
}

/// Members of `params` that belong to oncerpc, not to the method (DESIGN §3).
pub const RESERVED_PARAMS: [&str; 2] = ["idempotency_key", "force_retry"];

/// Validate params (reserved members already removed) against the method's JSON Schema.
fn validate_schema(validator: &jsonschema::Validator, value: &serde_json::Value) -> Result<(), RpcError> {
    match validator.iter_errors(value).next() {
        None => Ok(()),
        Some(err) => {
            let path = err.instance_path().to_string();
            let path = if path.is_empty() { "/".to_string() } else { path };
            Err(RpcError::invalid_params(format!("invalid params: {path}: {err}"))
                .data(serde_json::json!({ "path": path, "schema_path": err.schema_path().to_string() })))
        }
    }
}

/// DESIGN §7: the id's text when there is one that can travel in a header, else generated.
fn correlation_id(entry: &Entry<'_>) -> Arc<str> {
    let id = match entry {
        Entry::Valid(r) => r.id,
        Entry::Invalid { id, .. } => *id,
    };
    id.and_then(|id| id.text())
        .filter(|t| !t.is_empty() && t.len() <= 200 && t.bytes().all(|b| (0x20..0x7f).contains(&b)))
        .map(|t| Arc::from(t.as_ref()))
        .unwrap_or_else(generated_id)
}

/// A fresh correlation id for notifications, batches and unreadable requests.
pub fn generated_id() -> Arc<str> {
    Arc::from(uuid::Uuid::new_v4().simple().to_string())
}
