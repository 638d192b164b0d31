//! A batch entry that is a query, answered without `run_entry`'s layers: the policy, the
//! params and the handler's first poll, here, in the batch's own poll. Most handlers answer in
//! that poll; one that has to wait goes on in a future of its own (the rest of the entry).
//!
//! `run_entry`'s future is ~1,900 bytes: copied into a box per entry, then polled through five
//! nested state machines (the entry, its span, the request, the observed and plain execution,
//! the handler) for an answer that was ready at once.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use futures::FutureExt;
use oncerpc_protocol::{Entry, Id, Outcome};
use tracing::Instrument;

use super::entry::{Answer, batch_entry_span, traced_meta};
use super::handler::{deadline, handler_outcome};
use super::local::BatchLocal;
use super::observe::Unanswered;
use super::{Dispatcher, RequestMeta};
use crate::method::{Kind, Method};

/// The rest of an entry whose handler has to wait: its index in the batch and its answer.
pub(super) type Rest<'x, 'a> = Pin<Box<dyn Future<Output = (usize, Option<Answer<'a>>)> + Send + 'x>>;

pub(super) enum Quick<'x, 'a> {
    Done(Answer<'a>),
    Waiting(Rest<'x, 'a>),
    /// Not a query with an id of a registered method, or spans are exported: `run_entry`'s
    /// path, which takes the entry as it came.
    Not(Entry<'a>),
}

/// What a query entry's answer is logged and counted with.
#[derive(Clone, Copy)]
struct Query<'x> {
    method: &'x Arc<Method>,
    local: &'x BatchLocal,
    started: Instant,
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
        // `rpc.discover` is never in the registry (`rpc.` names are the protocol's): `Not`.
        let (req, method) = match entry {
            Entry::Valid(req) if req.id.is_some() && crate::trace::export().is_none() => {
                match self.registry.get(&req.method) {
                    Some(m) if m.spec.kind == Kind::Query => (req, m),
                    _ => return Quick::Not(Entry::Valid(req)),
                }
            }
            other => return Quick::Not(other),
        };
        let q = Query { method, local, started };
        let traced = traced_meta(meta, req.params);
        let span = batch_entry_span(cid, &req.method, traced.as_ref().unwrap_or(meta));
        let entered = span.enter();
        let meta_now = traced.as_ref().unwrap_or(meta);
        let call = match self.prepare(method, local.name_of(method), req.params, cid.clone(), meta_now, false)
        {
            Ok(prepared) => method.handler.call(prepared.ctx, req.params),
            Err(e) => return Quick::Done(self.answer_query(q, cid, meta_now, req.id, Outcome::Error(e))),
        };
        let mut call = std::panic::AssertUnwindSafe(call).catch_unwind();
        if let Poll::Ready(done) = Pin::new(&mut call).poll(cx) {
            let outcome = handler_outcome(method, cid, Ok(done));
            return Quick::Done(self.answer_query(q, cid, meta_now, req.id, outcome));
        }
        drop(entered);
        // Armed now: a batch dropped before this entry's answer counts it as closed.
        let mut unanswered = Unanswered::new(&self.metrics, method, Cow::Owned(cid.to_string()), started);
        let deadline = deadline(method, started);
        let cid = cid.clone();
        let rest = async move {
            let finished = tokio::time::timeout_at(deadline, call).await;
            unanswered.disarm();
            let outcome = handler_outcome(method, &cid, finished);
            let meta = traced.as_ref().unwrap_or(meta);
            (index, Some(self.answer_query(q, &cid, meta, req.id, outcome)))
        };
        Quick::Waiting(Box::pin(rest.instrument(span)))
    }

    /// A query entry's answer, logged and counted as `run_entry`'s would be.
    fn answer_query<'a>(
        &self,
        q: Query<'_>,
        cid: &str,
        meta: &RequestMeta,
        id: Option<Id<'a>>,
        outcome: Outcome,
    ) -> Answer<'a> {
        let elapsed = q.started.elapsed();
        self.observe(&q.method.name, cid, Some(q.method), meta, &outcome, None, elapsed, Some(q.local));
        Answer { id, outcome, idempotency: None }
    }
}
