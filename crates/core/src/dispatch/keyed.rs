//! Keyed executions (SPEC §3): the claim, the task that runs and records the handler,
//! keys shared within a batch, and the answers of claims and stored outcomes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oncerpc_protocol::{ErrorCode, Outcome, RawValue, RpcError};
use tracing::Instrument;

use super::Dispatcher;
use super::handler::run_handler;
use super::info::IdempotencyInfo;
use super::local::{BatchLocal, Shared};
use super::memo::KeyFrom;
use super::prepare::Keyed;
use crate::execution::{Acquired, Settled, in_progress, lease_for};
use crate::method::{Context, IdempotencyStatus, Method};
use crate::store::{AcquireKind, Claim, RecordKey, StoredOutcome};

impl Dispatcher {
    pub(super) async fn execute_keyed(
        &self,
        method: &Arc<Method>,
        params: Option<&RawValue>,
        mut ctx: Context,
        mut keyed: Keyed,
        local: Option<&BatchLocal>,
    ) -> (Outcome, Option<IdempotencyInfo>) {
        if let Some(previous) = keyed.previous.take() {
            // derive_key: the same call in the previous window is this one's original.
            let earlier =
                RecordKey { tenant: ctx.tenant.clone(), method: method.name.clone(), key: previous };
            if let Ok(Some(r)) = self.store.get(&earlier).await
                && *r.fingerprint == *keyed.fingerprint
            {
                ctx.idempotency_key = Some(earlier.key.clone());
                keyed.key = earlier.key;
            }
        }
        let key = keyed.key.clone();
        let Some(local) = local else {
            let (outcome, status) = self.claim_and_run(method, params, ctx, &keyed).await;
            let info = status.map(|status| IdempotencyInfo::of(key, keyed.origin, status, &outcome));
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
                let (outcome, status) = self.claim_and_run(method, params, ctx, keyed_ref).await;
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
        let info = status.map(|status| IdempotencyInfo::of(key, keyed.origin, status, &shared.outcome));
        (shared.outcome, info)
    }

    /// The lease of `method`'s executions.
    pub(crate) fn lease(&self, method: &Method) -> Duration {
        lease_for(self.config.idempotency.lease, method.spec.timeout)
    }

    /// Claim the record of a keyed command and act on the answer (SPEC §3 "Outcomes").
    /// From the claim on, everything runs in a task of its own once it has to wait (polled here
    /// first, spawned before this request's task can be dropped): a client that hangs up cannot
    /// leave a claim that nobody runs, nor cut an execution or its record short.
    async fn claim_and_run(
        &self,
        method: &Arc<Method>,
        params: Option<&RawValue>,
        mut ctx: Context,
        keyed: &Keyed,
    ) -> (Outcome, Option<IdempotencyStatus>) {
        let record_key =
            RecordKey { tenant: ctx.tenant.clone(), method: method.name.clone(), key: keyed.key.clone() };
        if let Some(known) = self.exec.known(&record_key, &keyed.fingerprint, keyed.force_retry) {
            if let Some(from) = keyed.memo
                && matches!(known, Claim::Done(..))
                && let Some(text) = params
            {
                // A retry: the next one with these bytes skips `prepare`'s walk and schema.
                let own = (from == KeyFrom::Params).then_some(&keyed.key);
                self.memo.insert(&record_key.tenant, method, text.get(), own, &keyed.fingerprint);
            }
            return answer(known);
        }
        // Refused before anything is claimed when the execution budget is spent.
        let permit = match self.exec.permit(&ctx.tenant) {
            Ok(p) => p,
            Err(e) => return (Outcome::Error(e), None),
        };
        let exec = self.exec.clone();
        let method = method.clone();
        let params: Option<Box<RawValue>> = params.map(|p| p.to_owned());
        let (fingerprint, force_retry) = (keyed.fingerprint.clone(), keyed.force_retry);
        let lease = self.lease(&method);
        let claim_budget = self.config.idempotency.store_timeout;
        // The task answers through `reply` as soon as it can (after the first write of the
        // outcome), and goes on storing it if that write failed.
        let (reply, answered) = tokio::sync::oneshot::channel();
        let span = super::entry::execution_span(&ctx.correlation_id, ctx.trace.as_ref());
        // The request's exported span (`[telemetry]`) goes along into the task: entered there
        // under the logged one, it stays the parent of the claim's and the steps' spans.
        let exported = crate::trace::exported_current();
        // Boxed before it is wrapped and spawned: the state machine is large, and each wrapper
        // and the task's cell would otherwise move it by value (memcpy), as would the task's
        // stage changes when it ends. Polled here until it first waits, spawned from there on;
        // `started_run` is awaited at once, so nothing can drop it before it has done either.
        let started_run = self.exec.run_or_spawn(
            Box::pin(async move {
                // Held until the outcome is stored, not only until the client is answered.
                let _permit = permit;
                // The claim has a budget of its own (`store.op_timeout_ms`): a store that is
                // slow to answer costs `-32004` with nothing run, never the upstream's time.
                let claim_deadline = Instant::now() + claim_budget;
                let mut event = None;
                let claiming = exec.acquire(&record_key, &fingerprint, force_retry, lease, claim_deadline);
                let claim = crate::trace::claim_span();
                let claimed =
                    if claim.is_disabled() { claiming.await } else { claiming.instrument(claim).await };
                let token = match claimed {
                    Err(e) => return drop(reply.send((Outcome::Error(e), None))),
                    Ok(Acquired::Not(claim)) => return drop(reply.send(answer(claim))),
                    Ok(Acquired::Owner { token, kind, .. }) => {
                        let journal = exec.journal(&record_key, token, kind, lease).await;
                        // A force retry or take-over of a key that has an async event: the
                        // event follows this execution.
                        if kind != AcquireKind::Fresh {
                            event = exec.adopt_event(&record_key, token, kind).await;
                        }
                        ctx.journal = Some(match &event {
                            Some((id, steps)) => journal.with_event(id, steps.as_deref()),
                            None => journal,
                        });
                        token
                    }
                };
                ctx.idempotency_status = Some(IdempotencyStatus::New);
                // The method's `timeout` starts once the execution is ours.
                let work = run_handler(&method, ctx, params.as_deref(), Instant::now());
                let early = |outcome: &Outcome, settled: &Settled| {
                    let _ = reply.send(owner_answer(outcome, settled));
                };
                let release = method.spec.transport_failures_unrecorded;
                let (outcome, settled) =
                    exec.run_owned(&record_key, token, &fingerprint, lease, release, work, early).await;
                if let Some((id, _)) = &event {
                    exec.settle_event(id, token, &outcome, &settled).await;
                }
            })
            .instrument(exported)
            .instrument(span),
        );
        started_run.await;
        match answered.await {
            Ok(answered) => answered,
            Err(_) => {
                (Outcome::Error(RpcError::internal("the execution task ended without an answer")), None)
            }
        }
    }
}

/// The answer of the request whose execution owned the record.
fn owner_answer(outcome: &Outcome, settled: &Settled) -> (Outcome, Option<IdempotencyStatus>) {
    match settled {
        Settled::Stored | Settled::Released | Settled::Storing | Settled::Paused => {
            (outcome.clone(), Some(IdempotencyStatus::New))
        }
        // Fenced out: this execution's result is not the key's outcome.
        Settled::Fenced(Some(current)) => (replay(current.clone()), Some(IdempotencyStatus::Duplicate)),
        Settled::Fenced(None) => (Outcome::Error(in_progress(1000)), Some(IdempotencyStatus::Processing)),
    }
}

/// The answer to a claim this request did not acquire.
fn answer(claim: Claim) -> (Outcome, Option<IdempotencyStatus>) {
    match claim {
        Claim::InProgress { retry_after_ms } => {
            (Outcome::Error(in_progress(retry_after_ms)), Some(IdempotencyStatus::Processing))
        }
        Claim::Done(stored, _) => (replay(stored), Some(IdempotencyStatus::Duplicate)),
        Claim::FingerprintMismatch => (Outcome::Error(RpcError::new(ErrorCode::KeyReused)), None),
        Claim::ForceRetryRefused => (Outcome::Error(RpcError::new(ErrorCode::ForceRetryRefused)), None),
        Claim::Acquired { .. } | Claim::Unconfirmed { .. } => {
            (Outcome::Error(RpcError::internal("an acquired claim was not run")), None)
        }
    }
}

/// A stored outcome as it is answered again, byte for byte (taken by value: a result's text
/// becomes the answer without another copy).
pub(crate) fn replay(stored: StoredOutcome) -> Outcome {
    match stored {
        StoredOutcome::Succeeded(json) => match RawValue::from_string(json) {
            Ok(raw) => Outcome::Result(raw),
            Err(e) => Outcome::Error(RpcError::internal(format_args!("stored result is not JSON: {e}"))),
        },
        StoredOutcome::Failed(json) => match RpcError::from_json(&json) {
            Ok(err) => Outcome::Error(err),
            Err(e) => Outcome::Error(RpcError::internal(format_args!("stored error is not JSON: {e}"))),
        },
    }
}
