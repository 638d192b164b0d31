//! Prometheus metrics (SPEC §7), one registry per dispatcher so that several servers in one
//! process (tests, embedders) never mix their counts.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};

/// One method's pre-resolved metric handles.
pub(crate) struct MethodMetrics {
    pub ok: IntCounter,
    pub latency: Histogram,
    /// new, processing, duplicate
    pub statuses: [IntCounter; 3],
}

/// Where `oncerpc_log_lines_dropped_total` is read from: the process's log writer (one per
/// process, like the global tracing subscriber), set by whoever installs it.
static LOG_LINES_DROPPED: OnceLock<Box<dyn Fn() -> u64 + Send + Sync>> = OnceLock::new();

/// Name the source of `oncerpc_log_lines_dropped_total` (log lines the non-blocking writer
/// dropped because its sink could not keep up). The first call wins.
pub fn set_log_lines_dropped_source(read: impl Fn() -> u64 + Send + Sync + 'static) {
    let _ = LOG_LINES_DROPPED.set(Box::new(read));
}

/// The `outcome` of a request whose client went away before the answer (nginx's 499).
pub(crate) const CLIENT_CLOSED: &str = "client_closed";

/// The metric families oncerpc exports (a clone shares the same metrics).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    idempotency: IntCounterVec,
    latency: HistogramVec,
    batch_size: Histogram,
    store_errors: IntCounterVec,
    /// Requests being served right now (maintained by the front doors).
    pub in_flight: IntGauge,
    /// Background executions running and `limits.max_background`, set when scraped.
    background: IntGauge,
    background_capacity: IntGauge,
    overloaded: IntCounterVec,
    tenant_refusals: IntCounterVec,
    log_lines_dropped: IntCounter,
    tls_handshakes_failed: IntCounterVec,
    tls_reloads: IntCounterVec,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "oncerpc_requests_total",
                "Requests answered, by method, kind and outcome (ok, the error code, or client_closed: the client went away first)",
            ),
            &["method", "kind", "outcome"],
        )
        .expect("valid metric");
        let idempotency = IntCounterVec::new(
            Opts::new(
                "oncerpc_idempotency_total",
                "Idempotent commands by status (new, processing, duplicate)",
            ),
            &["method", "status"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new("oncerpc_request_duration_seconds", "Time to answer one request, by method")
                .buckets(vec![0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0]),
            &["method"],
        )
        .expect("valid metric");
        let batch_size = Histogram::with_opts(
            HistogramOpts::new("oncerpc_batch_size", "Entries per batch request")
                .buckets(vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]),
        )
        .expect("valid metric");
        let store_errors = IntCounterVec::new(
            Opts::new("oncerpc_store_errors_total", "Idempotency store operations that failed"),
            &["store"],
        )
        .expect("valid metric");
        let in_flight =
            IntGauge::new("oncerpc_in_flight_requests", "Requests being served").expect("valid metric");
        let background = IntGauge::new(
            "oncerpc_background_executions",
            "Keyed executions and async events running (places of limits.max_background in use)",
        )
        .expect("valid metric");
        let background_capacity = IntGauge::new(
            "oncerpc_background_capacity",
            "limits.max_background: background executions at most; past it new work is refused",
        )
        .expect("valid metric");
        let overloaded = IntCounterVec::new(
            Opts::new(
                "oncerpc_overloaded_total",
                "Requests and connections refused by a limit: door=rpc|flows (limits.max_in_flight), connections (limits.max_connections), body_timeout (limits.body_timeout_ms), background (limits.max_background)",
            ),
            &["door"],
        )
        .expect("valid metric");
        let tenant_refusals = IntCounterVec::new(
            Opts::new(
                "oncerpc_tenant_refusals_total",
                "Requests refused by a tenant's own limits, by tenant and reason (rate_limited, overloaded)",
            ),
            &["tenant", "reason"],
        )
        .expect("valid metric");
        let log_lines_dropped = IntCounter::new(
            "oncerpc_log_lines_dropped_total",
            "Log lines dropped because the log sink could not keep up (the writer never blocks a request)",
        )
        .expect("valid metric");
        let tls_handshakes_failed = IntCounterVec::new(
            Opts::new(
                "oncerpc_tls_handshakes_failed_total",
                "Connections closed because their TLS handshake failed (reason=error) or did not finish within limits.header_timeout_ms (reason=timeout)",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let tls_reloads = IntCounterVec::new(
            Opts::new(
                "oncerpc_tls_reloads_total",
                "Listener certificate reloads on SIGHUP, by outcome (ok; failed: the previous certificate stays)",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(idempotency.clone()),
            Box::new(latency.clone()),
            Box::new(batch_size.clone()),
            Box::new(store_errors.clone()),
            Box::new(in_flight.clone()),
            Box::new(background.clone()),
            Box::new(background_capacity.clone()),
            Box::new(overloaded.clone()),
            Box::new(tenant_refusals.clone()),
            Box::new(log_lines_dropped.clone()),
            Box::new(tls_handshakes_failed.clone()),
            Box::new(tls_reloads.clone()),
        ] {
            registry.register(c).expect("metric registered once");
        }
        Metrics {
            registry,
            requests,
            idempotency,
            latency,
            batch_size,
            store_errors,
            in_flight,
            background,
            background_capacity,
            overloaded,
            tenant_refusals,
            log_lines_dropped,
            tls_handshakes_failed,
            tls_reloads,
        }
    }

    pub(crate) fn request(&self, method: &str, kind: &str, outcome: &str, elapsed: Duration) {
        self.requests.with_label_values(&[method, kind, outcome]).inc();
        self.latency.with_label_values(&[method]).observe(elapsed.as_secs_f64());
    }

    /// A request whose client went away before the answer: counted, no latency sample.
    pub(crate) fn client_closed(&self, method: &str, kind: &str) {
        self.requests.with_label_values(&[method, kind, CLIENT_CLOSED]).inc();
    }

    pub(crate) fn idempotency(&self, method: &str, status: &str) {
        self.idempotency.with_label_values(&[method, status]).inc();
    }

    pub(crate) fn batch(&self, size: usize) {
        self.batch_size.observe(size as f64);
    }

    pub(crate) fn store_error(&self, store: &str) {
        self.store_errors.with_label_values(&[store]).inc();
    }

    /// Handles of one method's hot-path metrics, resolved once (no label lookup per request).
    pub(crate) fn for_method(&self, method: &str, kind: &str) -> MethodMetrics {
        MethodMetrics {
            ok: self.requests.with_label_values(&[method, kind, "ok"]),
            latency: self.latency.with_label_values(&[method]),
            statuses: ["new", "processing", "duplicate"]
                .map(|s| self.idempotency.with_label_values(&[method, s])),
        }
    }

    /// A request refused by the in-flight limit.
    pub fn overloaded(&self, door: &str) {
        self.overloaded.with_label_values(&[door]).inc();
    }

    /// A request refused by its tenant's own limits (`reason`: `rate_limited`, `overloaded`).
    /// Tenants are configured, so the label is bounded.
    pub fn tenant_refused(&self, tenant: &str, reason: &str) {
        self.tenant_refusals.with_label_values(&[tenant, reason]).inc();
    }

    /// A listener TLS handshake that failed (`reason`: `error`, `timeout`).
    pub fn tls_handshake_failed(&self, reason: &str) {
        self.tls_handshakes_failed.with_label_values(&[reason]).inc();
    }

    /// A listener certificate reload (`outcome`: `ok`, `failed`).
    pub fn tls_reload(&self, outcome: &str) {
        self.tls_reloads.with_label_values(&[outcome]).inc();
    }

    /// Add a metric family kept elsewhere (e.g. by the gateway's flows) to this registry's
    /// exposition. Registering a family twice is an error.
    pub fn register(&self, collector: Box<dyn prometheus::core::Collector>) -> Result<(), String> {
        self.registry.register(collector).map_err(|e| e.to_string())
    }

    /// The background budget as it stands: places in use, and its size.
    pub fn set_background(&self, in_use: usize, capacity: usize) {
        self.background.set(in_use as i64);
        self.background_capacity.set(capacity as i64);
    }

    /// Every metric family as it stands now (the console's status page reads its totals).
    pub fn families(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.registry.gather()
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        if let Some(read) = LOG_LINES_DROPPED.get() {
            let (now, seen) = (read(), self.log_lines_dropped.get());
            self.log_lines_dropped.inc_by(now.saturating_sub(seen));
        }
        let mut buf = Vec::new();
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
