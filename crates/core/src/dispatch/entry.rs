//! One entry of a body: its span, the policy of SPEC §2 (notifications, unknown methods,
//! `rpc.discover`), then validation and execution.

use std::sync::Arc;
use std::time::Instant;

use oncerpc_protocol::{Entry, ErrorCode, Id, Outcome, RawValue, Request, RpcError};
use tracing::Instrument;

use super::handler::run_handler;
use super::info::IdempotencyInfo;
use super::local::BatchLocal;
use super::observe::access_line;
use super::prepare::Prepared;
use super::{Dispatcher, RequestMeta};
use crate::method::{Kind, Method};

/// One answered entry.
pub(super) struct Answer<'a> {
    pub(super) id: Option<Id<'a>>,
    pub(super) outcome: Outcome,
    pub(super) idempotency: Option<IdempotencyInfo>,
}

impl<'a> Answer<'a> {
    fn plain(id: Option<Id<'a>>, outcome: Outcome) -> Self {
        Answer { id, outcome, idempotency: None }
    }
}

impl Dispatcher {
    /// Policy and execution of one entry. `None`: nothing to answer (a notification).
    pub(super) async fn run_entry<'a>(
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
        let traced = traced_meta(meta, req.params);
        let meta = traced.as_ref().unwrap_or(meta);
        // A batch entry's span (at `debug`, like its access line: the batch logs one line)
        // names its method. A single request needs no span here: its access line carries the
        // correlation id itself, and the lines an execution can log (store, lease, upstream)
        // get theirs from the span `execution_span` opens where the execution starts, after
        // the duplicates answered from what this process knows (a span per request cost
        // ~10 % of a query's throughput).
        // The method is looked up once, here, for the span and for `run_request`.
        let method = self.registry.get(&req.method);
        let span =
            if local.is_some() { batch_entry_span(&cid, &req.method, meta) } else { tracing::Span::none() };
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
            // A query like any other: a notification to it is refused (SPEC §2.3).
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
            // Fail fast (SPEC §2.2, §2.3): a notification the method does not accept is
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

    /// Validation, idempotency (commands), then the handler under its deadline and a
    /// panic guard.
    pub(super) async fn execute(
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
            None if method.spec.kind == Kind::Command => {
                let span = execution_span(&ctx.correlation_id, ctx.trace.as_ref());
                (run_handler(method, ctx, params, started).instrument(span).await, None)
            }
            None => (run_handler(method, ctx, params, started).await, None),
            // The keyed path (claim, spawn, record) is boxed: it keeps the common query
            // future small, which matters when a batch holds 50 of them.
            Some(keyed) => Box::pin(self.execute_keyed(method, params, ctx, keyed, local)).await,
        }
    }
}

/// `meta` with the trace context of the request's own `params._meta`, when the headers brought
/// none (stdio has no headers; each batch entry may have its own); `None`: `meta` as it is.
pub(super) fn traced_meta(meta: &RequestMeta, params: Option<&RawValue>) -> Option<RequestMeta> {
    if meta.trace.is_some() {
        return None;
    }
    let trace = crate::trace::from_params(params)?;
    Some(RequestMeta { trace: Some(trace), ..meta.clone() })
}

/// A batch entry's span: at `debug`, like its access line (the batch logs one line).
pub(super) fn batch_entry_span(cid: &str, method: &str, meta: &RequestMeta) -> tracing::Span {
    tracing::debug_span!(
        "rpc",
        correlation_id = %cid,
        method = %crate::LogSafe(method),
        trace_id = meta.trace.as_ref().map(|t| tracing::field::display(&t.trace_id)),
    )
}

/// The span of an execution that runs (a command's handler, its claim and record): every line
/// logged while it runs, in its spawned tasks too, carries the correlation id. Inside a span
/// already (a batch entry's, the flows door's), that one serves and none is opened.
pub(super) fn execution_span(cid: &str, trace: Option<&crate::TraceContext>) -> tracing::Span {
    let current = tracing::Span::current();
    // An exported request span (`trace::SPAN_TARGET`) is not logged: the execution gets its
    // own, a child of it, for the log lines.
    let exported = current.metadata().is_some_and(|m| m.target() == crate::trace::SPAN_TARGET);
    if !current.is_disabled() && !exported {
        return current;
    }
    match trace {
        None => tracing::info_span!("rpc", correlation_id = %cid),
        Some(t) => tracing::info_span!("rpc", correlation_id = %cid, trace_id = %t.trace_id),
    }
}
