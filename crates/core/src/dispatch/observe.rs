//! What is logged and counted of each request: the access line, the metrics, and a
//! request dropped before its answer.

use std::borrow::Cow;
use std::sync::Arc;

use std::time::{Duration, Instant};
use tracing::Instrument;

use oncerpc_protocol::{Outcome, RawValue};

use super::info::IdempotencyInfo;
use super::local::BatchLocal;
use super::{Dispatcher, RequestMeta};
use crate::method::Method;
use crate::metrics::{CLIENT_CLOSED, Metrics};

/// A request's access-log line (SPEC §7): at `info` for a single request or stdio message,
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
pub(super) use access_line;

impl Dispatcher {
    /// [`execute`](Self::execute), then the log line and metrics of the answer. When the
    /// future is dropped first (the client hung up: hyper drops the request's future), the
    /// request is logged and counted with outcome `client_closed` instead, so every request
    /// shows up once. A command that was claimed still runs to the end in its own task and
    /// its outcome is stored (`run_recorded`).
    pub(super) async fn execute_observed(
        &self,
        method: &Arc<Method>,
        params: Option<&RawValue>,
        cid: Arc<str>,
        meta: &RequestMeta,
        local: Option<&BatchLocal>,
        started: Instant,
    ) -> (Outcome, Option<IdempotencyInfo>) {
        let mut unanswered = Unanswered::new(&self.metrics, method, Cow::Borrowed(&cid), started);
        // The request's exported span, when spans are exported (`[telemetry]`).
        let span = crate::trace::request_span(
            &method.name,
            &cid,
            &meta.tenant,
            meta.subject.as_deref(),
            meta.trace.as_ref(),
        );
        let executing = self.execute(method, params, cid.clone(), meta, local, started);
        let (outcome, idempotency) =
            if span.is_disabled() { executing.await } else { executing.instrument(span.clone()).await };
        if outcome.is_error() {
            crate::trace::set_error(&span);
        }
        unanswered.disarm();
        let elapsed = started.elapsed();
        self.observe(&method.name, &cid, Some(method), meta, &outcome, idempotency.as_ref(), elapsed, local);
        (outcome, idempotency)
    }

    /// The one access-log line and the metrics of an answered request (SPEC §7).
    /// `requested`: the method name as sent (logged escaped and cut); `method`: the
    /// registered method, when there is one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn observe(
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
        if let Some(log) = batch.is_none().then(crate::access_log::direct).flatten() {
            debug_assert_eq!(crate::access_log::TARGET, module_path!());
            log.write(&crate::access_log::AccessLine {
                correlation_id: cid,
                method: requested,
                kind,
                tenant: &meta.tenant,
                subject: meta.subject.as_deref(),
                trace_id: meta.trace.as_ref().map(|t| t.trace_id.as_str()),
                idempotency_status: idempotency.map(|i| i.status.as_str()),
                duration_us,
                outcome: if code.is_none() { "ok" } else { "error" },
                code: code.map(i64::from),
            });
        } else {
            access_line!(
                batch,
                // The span's when the request has one; a query has none (see `run_entry`), so its
                // line carries the id itself. Evaluated only when the line is written.
                correlation_id = tracing::Span::current().is_disabled().then_some(tracing::field::display(cid)),
                method = %crate::LogSafe(requested),
                kind = %kind,
                tenant = %meta.tenant,
                subject = meta.subject.as_deref().map(|s| tracing::field::display(crate::LogSafe(s))),
                trace_id = meta
                    .trace
                    .as_ref()
                    .filter(|_| tracing::Span::current().is_disabled())
                    .map(|t| tracing::field::display(&t.trace_id)),
                idempotency_status = idempotency.map(|i| tracing::field::display(i.status.as_str())),
                duration_us,
                outcome = %if code.is_none() { "ok" } else { "error" },
                code,
                "request"
            );
        }
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
}

/// Logs and counts a request whose future was dropped before it had an answer (see
/// [`Dispatcher::execute_observed`]). Dropped inside the request's span, so the log line
/// carries its correlation id.
pub(super) struct Unanswered<'a> {
    metrics: &'a Metrics,
    method: &'a Method,
    /// Borrowed on the common path; owned by a batch query's rest (`quick.rs`), which outlives
    /// the id's owner.
    cid: Cow<'a, str>,
    started: Instant,
    armed: bool,
}

impl<'a> Unanswered<'a> {
    pub(super) fn new(metrics: &'a Metrics, method: &'a Method, cid: Cow<'a, str>, started: Instant) -> Self {
        Unanswered { metrics, method, cid, started, armed: true }
    }

    /// The request has its answer: nothing to log when this is dropped.
    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }
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
