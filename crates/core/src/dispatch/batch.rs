//! Batches: their rules, the oversized refusal, entries run in order under a concurrency
//! limit (what they share is `local.rs`'s).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::Either;
use futures::{FutureExt, StreamExt};
use oncerpc_protocol::{Entry, ErrorCode, Outcome, RpcError};

use super::ids::{correlation_id, generated_id};
use super::local::BatchLocal;
use super::quick::Quick;
use super::{Dispatcher, Reply, RequestMeta};

impl Dispatcher {
    pub(super) async fn handle_batch<'a>(
        &self,
        entries: Vec<Entry<'a>>,
        meta: &RequestMeta,
        started: Instant,
    ) -> Reply {
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
        // Each entry is run as it is reached, at most `batch.max_concurrency` of them waiting
        // at once, their answers in entry order. A query is answered in this poll without
        // `run_entry`'s future (`quick.rs`). Any other entry's future is made and polled once;
        // one that answers at once never enters the concurrent set, whose per-future task and
        // waker were ~5 % of the server's CPU on batches of 50, and leaves its box to the next
        // entry: only an entry that waits keeps one (a box per entry, each over 1 KiB, was
        // ~570 of an entry's ~7,500 instructions).
        let limit = cfg.max_concurrency.max(1);
        let mut done: Vec<Option<Option<super::entry::Answer<'a>>>> = Vec::with_capacity(entries.len());
        let mut waiting = futures::stream::FuturesUnordered::new();
        let mut spare = None;
        for (i, entry) in entries.into_iter().enumerate() {
            if waiting.len() >= limit
                && let Some((j, out)) = waiting.next().await
            {
                done[j] = Some(out);
            }
            let cid = correlation_id(&entry);
            let mut entry = Some(entry);
            let quick = std::future::poll_fn(|cx| {
                let entry = entry.take().expect("polled once: it is ready at once");
                std::task::Poll::Ready(self.quick_entry(i, entry, &cid, meta, &local, started, cx))
            })
            .await;
            let entry = match quick {
                Quick::Done(answer) => {
                    done.push(Some(Some(answer)));
                    continue;
                }
                Quick::Waiting(rest) => {
                    done.push(None);
                    waiting.push(Either::Right(rest));
                    continue;
                }
                Quick::Not(entry) => entry,
            };
            let call = self.run_entry(entry, cid, meta, Some(&local), started);
            let mut call = match spare.take() {
                Some(mut boxed) => {
                    std::pin::Pin::set(&mut boxed, call);
                    boxed
                }
                None => Box::pin(call),
            };
            match futures::poll!(&mut call) {
                std::task::Poll::Ready(out) => {
                    done.push(Some(out));
                    spare = Some(call);
                }
                std::task::Poll::Pending => {
                    done.push(None);
                    waiting.push(Either::Left(call.map(move |out| (i, out))));
                }
            }
        }
        drop(spare);
        while let Some((j, out)) = waiting.next().await {
            done[j] = Some(out);
        }
        let results: Vec<_> =
            done.into_iter().map(|out| out.expect("every entry of a batch ran to its end")).collect();
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

    /// A batch over `batch.max_size` (SPEC §1): nothing runs; every entry with a readable
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
}
