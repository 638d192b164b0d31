//! A batch entry that is a query, answered without `run_entry`'s layers: the policy, the
//! params and the handler's first poll, here, in the batch's own poll. Most handlers answer in
//! that poll; one that has to wait goes on in a future of its own (the rest of the entry).
//!
//! `run_entry`'s future is ~1,900 bytes: copied into a box per entry, then polled through five
//! nested state machines (the entry, its span, the request, the observed and plain execution,
//! the handler) for an answer that was ready at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use futures::FutureExt;
use oncerpc_protocol::{Entry, Outcome};
use tracing::Instrument;

use super::entry::{Answer, batch_entry_span, traced_meta};
use super::handler::handler_outcome;
use super::local::BatchLocal;
use super::observe::Unanswered;
use super::{Dispatcher, RequestMeta};
use crate::method::Kind;

/// The rest of an entry whose handler has to wait: its index in the batch and its answer.
pub(super) type Rest<'x, 'a> = Pin<Box<dyn Future<Output = (usize, Option<Answer<'a>>)> + Send + 'x>>;

pub(super) enum Quick<'x, 'a> {
    Done(Answer<'a>),
    Waiting(Rest<'x, 'a>),
    /// Not a query with an id of a registered method, or spans are exported: `run_entry`'s
    /// path, which takes the entry as it came.
    Not(Entry<'a>),
}

impl Dispatcher {
    /// Entry `index` of a batch, as [`run_entry`](Self::run_entry) would answer it when it is a
    /// query: the same span, trace context, validation, handler deadline and panic guard,
    /// access line and metrics. `cx`: the batch's own poll, in which the handler is polled once.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn quick_entry<'x, 'a: 'x>(
        &'x self,
        index: usize,
        entry: Entry<'a>,
        cid: &Arc<str>,
        meta: &'x RequestMeta,
        local: &'x BatchLocal,
        started: Instant,
        cx: &mut TaskContext<'_>,
    ) -> Quick<'x, 'a> {
        let req = match entry {
            Entry::Valid(req) if req.id.is_some() && req.method != "rpc.discover" => req,
            other => return Quick::Not(other),
        };
        let method = match self.registry.get(&req.method) {
            Some(m) if m.spec.kind == Kind::Query && crate::trace::export().is_none() => m,
            _ => return Quick::Not(Entry::Valid(req)),
        };
        let traced = traced_meta(meta, req.params);
        let span = batch_entry_span(cid, &req.method, traced.as_ref().unwrap_or(meta));
        let entered = span.enter();
        let meta_now = traced.as_ref().unwrap_or(meta);
        let answered = |outcome: Outcome, meta: &RequestMeta| {
            let elapsed = started.elapsed();
            self.observe(&method.name, cid, Some(method), meta, &outcome, None, elapsed, Some(local));
            Answer { id: req.id, outcome, idempotency: None }
        };
        let call = match self.prepare(method, local.name_of(method), req.params, cid.clone(), meta_now, false)
        {
            Ok(prepared) => method.handler.call(prepared.ctx, req.params),
            Err(e) => return Quick::Done(answered(Outcome::Error(e), meta_now)),
        };
        let mut call = std::panic::AssertUnwindSafe(call).catch_unwind();
        match Pin::new(&mut call).poll(cx) {
            Poll::Ready(done) => Quick::Done(answered(handler_outcome(method, cid, Ok(done)), meta_now)),
            Poll::Pending => {
                drop(entered);
                // Armed now: a batch dropped before this entry's answer counts it as closed.
                let mut unanswered = Unanswered::new(&self.metrics, method, cid.clone(), started);
                let deadline = tokio::time::Instant::from_std(started + method.spec.timeout);
                let cid = cid.clone();
                let rest = async move {
                    let finished = tokio::time::timeout_at(deadline, call).await;
                    unanswered.disarm();
                    let outcome = handler_outcome(method, &cid, finished);
                    let meta = traced.as_ref().unwrap_or(meta);
                    let elapsed = started.elapsed();
                    self.observe(
                        &method.name,
                        &cid,
                        Some(method),
                        meta,
                        &outcome,
                        None,
                        elapsed,
                        Some(local),
                    );
                    (index, Some(Answer { id: req.id, outcome, idempotency: None }))
                };
                Quick::Waiting(Box::pin(rest.instrument(span)))
            }
        }
    }
}
