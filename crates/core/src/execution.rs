//! A keyed execution from its claim to its stored outcome (SPEC §3), shared by the sync
//! doors (`/rpc`, `?sync=true`, stdio) and async events.
//!
//! What holds while the process lives:
//! * **A claim is either run or given back.** The claim and everything after it run in a
//!   task of their own once they have to wait ([`Executions::run_or_spawn`]), so a client
//!   that hangs up cannot leave a claim that nobody runs. A claim that comes back after the
//!   caller's deadline (the store stalled) is released, never turned into a recorded failure
//!   of a command that did not run.
//! * **A take-over is confirmed before it runs.** The store answers an expired lease with an
//!   unconfirmed take-over ([`AcquireKind::TakeOver`]); the claimant runs only once
//!   [`Store::renew`] confirms it. A previous owner that is alive after all (its heartbeat or
//!   its outcome landed first) keeps the record, and the claimant asks again.
//! * **The owner keeps its lease** by renewing it every third of the lease while it executes
//!   and while its outcome is not stored (a heartbeat fenced by its token).
//! * **An outcome is never given up.** Its write is retried with capped backoff until it lands
//!   (or the record is found owned by someone else); meanwhile a retry reaching this process
//!   is answered from the unrecorded outcome, not run again.
//! * **Shutdown waits** for every tracked execution up to the grace, then names each record it
//!   had to leave `processing` ([`Executions::shutdown`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use foldhash::fast::RandomState;
use oncerpc_protocol::{ErrorCode, Outcome, RpcError};
use tokio_util::task::TaskTracker;

use crate::budget::{Budget, Permit};
use crate::cache::DoneCache;
use crate::metrics::Metrics;
use crate::store::{
    AcquireKind, Claim, ClaimRequest, RecordKey, RecordState, Store, StoredOutcome, event_id,
};

/// Longest pause between two attempts to store an outcome.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The lease an execution waiting for its client's answer is left with: over at once, so the
/// retry that brings the answer takes it over.
const PAUSED_LEASE: Duration = Duration::from_millis(1);
/// Take-over claims that found the previous owner alive are asked again this many times.
const CLAIM_ROUNDS: usize = 3;

/// The answer to [`Executions::acquire`].
#[derive(Debug)]
pub(crate) enum Acquired {
    /// This process owns the record under `token` and must execute (or [`Executions::give_back`]
    /// the claim). `previous`: for a force retry, the failure the claim replaced.
    Owner { token: u64, kind: AcquireKind, previous: Option<StoredOutcome> },
    /// Not ours: in progress elsewhere, done before, or refused.
    Not(Claim),
}

/// How an owned execution ended for its record.
#[derive(Debug)]
pub(crate) enum Settled {
    /// The outcome is stored under the owner's token.
    Stored,
    /// The handler refused its params: the record was released (SPEC §3, no record).
    Released,
    /// The handler waits for its client's answer (`-32013`, an `ask` step): no outcome is
    /// stored and the lease is ended, so the retry that brings the answer takes the record
    /// over at once and resumes from its journal.
    Paused,
    /// Another execution owns the record now; its stored outcome, when it has one.
    Fenced(Option<StoredOutcome>),
    /// The first write failed; it is retried in the background (the request is answered
    /// meanwhile, and retries reaching this process get the unrecorded outcome).
    Storing,
}

/// An outcome executed here whose write has not landed yet.
struct Unrecorded {
    fingerprint: String,
    outcome: StoredOutcome,
}

/// The keyed executions of one dispatcher.
pub(crate) struct Executions {
    pub store: Arc<dyn Store>,
    pub cache: Option<Arc<DoneCache>>,
    pub metrics: Metrics,
    pub ttl: Duration,
    tracker: TaskTracker,
    /// The `max_background` budget: one permit per keyed execution or async event in flight.
    budget: Budget,
    unrecorded: Mutex<HashMap<RecordKey, Unrecorded, RandomState>>,
    /// Records this process owns right now (executing or storing): their token and since
    /// when, for the retry hint and the shutdown report.
    owned: Mutex<HashMap<RecordKey, (u64, Instant), RandomState>>,
}

impl Executions {
    /// Background places taken now, and `limits.max_background`.
    pub fn background_usage(&self) -> (usize, usize) {
        self.budget.usage()
    }

    pub fn new(
        store: Arc<dyn Store>,
        cache: Option<Arc<DoneCache>>,
        metrics: Metrics,
        ttl: Duration,
        budget: Budget,
    ) -> Self {
        Executions {
            store,
            cache,
            metrics,
            ttl,
            tracker: TaskTracker::new(),
            budget,
            // foldhash, like the memory store: every new key writes both maps, every
            // duplicate reads one.
            unrecorded: Mutex::new(HashMap::with_hasher(RandomState::default())),
            owned: Mutex::new(HashMap::with_hasher(RandomState::default())),
        }
    }

    /// Spawn work that must finish even when its caller goes away; shutdown waits for it.
    pub fn spawn<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(fut)
    }

    /// Poll `work` here, in the caller's task, and spawn it (tracked, like [`Self::spawn`]) only
    /// if it has to wait. The poll and the spawn are one step of the caller: nothing can drop
    /// `work` between them, so it is as safe from a client that hangs up as a spawned task. On
    /// a store that answers at once (the memory store) a keyed command finishes in that first
    /// poll, and saves the task, its scheduling, and the wake-up and second poll of the
    /// request's own task. A panic in that poll is caught, as a spawned task's is: `work` is
    /// dropped and the caller's own task lives on.
    pub async fn run_or_spawn<F>(&self, work: F)
    where
        F: Future<Output = ()> + Send + Unpin + 'static,
    {
        let mut work = Some(work);
        std::future::poll_fn(|cx| {
            let Some(mut w) = work.take() else { return std::task::Poll::Ready(()) };
            let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                std::pin::Pin::new(&mut w).poll(cx)
            }));
            match polled {
                Ok(std::task::Poll::Ready(())) => {}
                Ok(std::task::Poll::Pending) => drop(self.tracker.spawn(w)),
                Err(_) => tracing::error!("an execution panicked"),
            }
            std::task::Poll::Ready(())
        })
        .await
    }

    /// A place in the execution budget for work of `tenant`, or `-32007 Overloaded` at once
    /// (no queueing): taken before the claim, so a refused request leaves nothing behind.
    pub fn permit(&self, tenant: &str) -> Result<Permit, RpcError> {
        self.budget.permit(tenant)
    }

    /// What this process can answer without waiting for the store: a success it has cached,
    /// an outcome it executed and is still storing, or what a local store tells at once
    /// ([`Store::settled`]).
    pub fn known(&self, key: &RecordKey, fingerprint: &str, force_retry: bool) -> Option<Claim> {
        if let Some(hit) = self.cache.as_ref().and_then(|c| c.claim(key, fingerprint, force_retry)) {
            return Some(hit);
        }
        let unrecorded = self.unrecorded.lock().ok()?;
        let Some(u) = unrecorded.get(key) else {
            drop(unrecorded);
            // Lease and TTL play no part in an answer that writes nothing.
            let req = ClaimRequest { key, fingerprint, force_retry, lease: Duration::ZERO, ttl: self.ttl };
            return self.store.settled(&req);
        };
        Some(if u.fingerprint != fingerprint {
            Claim::FingerprintMismatch
        } else if force_retry {
            match u.outcome {
                StoredOutcome::Succeeded(_) => Claim::ForceRetryRefused,
                // A failure being stored: force it once it is.
                StoredOutcome::Failed(_) => Claim::InProgress { retry_after_ms: 1000 },
            }
        } else {
            Claim::Done(u.outcome.clone(), 0)
        })
    }

    fn unavailable(&self, e: &crate::StoreError, what: &str) -> RpcError {
        self.metrics.store_error(self.store.name());
        tracing::error!(store = self.store.name(), error = %e, "idempotency store unavailable: {what}");
        RpcError::new(ErrorCode::StoreUnavailable)
    }

    /// The step journal of the execution that acquired `key` under `token`. Only a take-over
    /// reads the record (a fresh or force-retried execution has no stored steps); if that
    /// read fails, the execution starts from its first step, each step with its step key.
    pub async fn journal(
        &self,
        key: &RecordKey,
        token: u64,
        kind: AcquireKind,
        lease: Duration,
    ) -> crate::journal::StepJournal {
        let stored = if kind == AcquireKind::TakeOver {
            match self.store.get(key).await {
                Ok(Some(rec)) if rec.token == token => rec.steps,
                Ok(_) => crate::store::Journal::new(),
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the step journal: resuming from the first step");
                    crate::store::Journal::new()
                }
            }
        } else {
            crate::store::Journal::new()
        };
        if !stored.is_empty() {
            tracing::info!(token, steps = stored.len(), "resuming after the steps an earlier owner finished");
        }
        crate::journal::StepJournal::new(self.store.clone(), key.clone(), token, lease, stored)
    }

    /// Run `work` as the owner of `token`: renew the lease while it runs and until its
    /// outcome is stored, then store it (or release the record when the handler refused its
    /// params, or when `release_transport` and it failed in transport: `-32005`/`-32006`,
    /// see [`MethodSpec::transport_failures_unrecorded`](crate::MethodSpec)). `early` is called once, after the first write attempt (with `Settled::Storing`
    /// when it failed), so a waiting client is answered without waiting for a store that is
    /// down; the returned value is the final one.
    #[allow(clippy::too_many_arguments)]
    pub async fn run_owned(
        &self,
        key: &RecordKey,
        token: u64,
        fingerprint: &str,
        lease: Duration,
        release_transport: bool,
        work: impl Future<Output = Outcome>,
        early: impl FnOnce(&Outcome, &Settled),
    ) -> (Outcome, Settled) {
        if let Ok(mut owned) = self.owned.lock() {
            owned.insert(key.clone(), (token, Instant::now()));
        }
        let run = async {
            let outcome = work.await;
            let settled = self.settle(key, token, fingerprint, &outcome, release_transport, early).await;
            (outcome, settled)
        };
        let result = with_heartbeat(run, self.heartbeat(key, token, lease)).await;
        if let Ok(mut owned) = self.owned.lock()
            && owned.get(key).is_some_and(|(t, _)| *t == token)
        {
            owned.remove(key);
        }
        result
    }

    /// Renew the lease every third of it; returns only when the record is no longer ours.
    async fn heartbeat(&self, key: &RecordKey, token: u64, lease: Duration) {
        let every = (lease / 3).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            match self.store.renew(key, token, lease).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(token, "lease lost: another execution owns the record now");
                    return;
                }
                Err(e) => {
                    self.metrics.store_error(self.store.name());
                    tracing::warn!(error = %e, "could not renew the lease; trying again");
                }
            }
        }
    }

    async fn settle(
        &self,
        key: &RecordKey,
        token: u64,
        fingerprint: &str,
        outcome: &Outcome,
        release_transport: bool,
        early: impl FnOnce(&Outcome, &Settled),
    ) -> Settled {
        let transport = |c: ErrorCode| matches!(c, ErrorCode::Timeout | ErrorCode::UpstreamFailed);
        if matches!(outcome, Outcome::Error(e) if e.code == ErrorCode::InvalidParams
            || (release_transport && transport(e.code)))
        {
            // Rejected by the handler's own params check: no record (SPEC §3). Or a transport
            // failure the method does not record (SPEC §16b): the retry runs again.
            if let Err(e) = self.store.release(key, token).await {
                tracing::error!(error = %e, "could not release the claim of a rejected command (it lapses with its lease)");
            }
            early(outcome, &Settled::Released);
            return Settled::Released;
        }
        if matches!(outcome, Outcome::Error(e) if e.code == ErrorCode::InputRequired) {
            // Waiting for the client's answer (SPEC §16): the journal stays, the lease ends.
            if let Err(e) = self.store.renew(key, token, PAUSED_LEASE).await {
                tracing::warn!(error = %e, "could not end the lease of an execution waiting for its client (the retry waits for the lease)");
            }
            early(outcome, &Settled::Paused);
            return Settled::Paused;
        }
        let stored = stored_outcome(outcome);
        let mut early = Some(early);
        let mut unrecorded = false;
        let settled = self
            .store_outcome(key, token, fingerprint, &stored, &mut unrecorded, |settled| {
                if let Some(early) = early.take() {
                    early(outcome, settled);
                }
            })
            .await;
        if unrecorded && let Ok(mut u) = self.unrecorded.lock() {
            u.remove(key);
        }
        settled
    }

    /// Keep `stored` for retries reaching this process while its write has not landed (once:
    /// `kept` says it is).
    fn keep_unrecorded(&self, kept: &mut bool, key: &RecordKey, fingerprint: &str, stored: &StoredOutcome) {
        if std::mem::replace(kept, true) {
            return;
        }
        if let Ok(mut u) = self.unrecorded.lock() {
            u.insert(
                key.clone(),
                Unrecorded { fingerprint: fingerprint.to_owned(), outcome: stored.clone() },
            );
        }
    }

    /// Write an outcome until it lands or the record turns out to be someone else's. From the
    /// moment a write has to wait or fails, the outcome is kept for retries (`unrecorded` set):
    /// a store that answers at once (the memory store) never needs it.
    async fn store_outcome(
        &self,
        key: &RecordKey,
        token: u64,
        fingerprint: &str,
        stored: &StoredOutcome,
        unrecorded: &mut bool,
        mut after_attempt: impl FnMut(&Settled),
    ) -> Settled {
        let mut backoff = Duration::from_millis(50);
        let mut attempt = 0u64;
        let settled = loop {
            {
                let mut write = self.store.complete(key, token, stored, self.ttl);
                let written = match futures::poll!(write.as_mut()) {
                    std::task::Poll::Ready(written) => written,
                    std::task::Poll::Pending => {
                        self.keep_unrecorded(unrecorded, key, fingerprint, stored);
                        write.await
                    }
                };
                match written {
                    Ok(true) => {
                        if attempt > 0 {
                            tracing::info!(attempt, "outcome recorded after the store came back");
                        }
                        if let Some(cache) = &self.cache {
                            cache.insert(key, fingerprint, stored, self.ttl);
                        }
                        break Settled::Stored;
                    }
                    Ok(false) => {
                        tracing::warn!(token, "outcome not recorded: another execution took the record over");
                        let current = match self.store.get(key).await {
                            Ok(Some(rec)) => match rec.state {
                                RecordState::Done(outcome) => Some(outcome),
                                RecordState::Processing { .. } => None,
                            },
                            _ => None,
                        };
                        break Settled::Fenced(current);
                    }
                    Err(e) => {
                        self.keep_unrecorded(unrecorded, key, fingerprint, stored);
                        after_attempt(&Settled::Storing);
                        self.metrics.store_error(self.store.name());
                        // Logged on the first attempts, then every tenth: the store may be down
                        // for long, and each attempt would be a line.
                        if attempt < 3 || attempt.is_multiple_of(10) {
                            tracing::error!(attempt, error = %e, "could not record the outcome yet; retrying while the lease is renewed");
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        attempt += 1;
                    }
                }
            }
        };
        after_attempt(&settled);
        settled
    }

    /// The event of `key`'s record, if it has one, made the execution's that holds `token`: an
    /// execution that a sync door force-retried or took over (not a fresh one: a fresh record has
    /// no live event) shows its steps in it and settles it, so the event says what the key holds,
    /// whatever door ran it. Returns the event's id and, for a take-over, its step views so far.
    pub(crate) async fn adopt_event(
        &self,
        key: &RecordKey,
        token: u64,
        kind: AcquireKind,
    ) -> Option<(String, Option<String>)> {
        let id = event_id(key);
        let stored = match self.store.get_event(&id).await {
            Ok(stored) => stored?,
            Err(e) => {
                tracing::warn!(event_id = %id, error = %e, "could not read the key's event: it is settled later");
                return None;
            }
        };
        match self.store.restart_event(&id, token).await {
            Ok(true) => {
                let steps = (kind == AcquireKind::TakeOver).then_some(stored.steps).flatten();
                Some((id, steps))
            }
            Ok(false) => None,
            Err(e) => {
                tracing::warn!(event_id = %id, error = %e, "could not restart the key's event: it is settled later");
                None
            }
        }
    }

    /// Record an owned execution's outcome on its event, once the record holds it.
    pub(crate) async fn settle_event(&self, id: &str, token: u64, outcome: &Outcome, settled: &Settled) {
        match settled {
            // Released: the handler refused its params; no record, a failed event.
            Settled::Stored | Settled::Released => {
                match self.store.finish_event(id, token, &stored_outcome(outcome)).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(event_id = %id, "event not finished: a newer execution owns it")
                    }
                    Err(e) => {
                        self.metrics.store_error(self.store.name());
                        tracing::error!(event_id = %id, error = %e, "could not finish the event (the resume scanner will)");
                    }
                }
            }
            // The record is another execution's now: so is the event. (`Storing` is only ever an
            // early answer, never the final one.) Paused: the execution resumes on the retry.
            Settled::Fenced(_) | Settled::Storing | Settled::Paused => {}
        }
    }

    /// Wait up to `grace` for every tracked execution, then log each record still owned here
    /// (it stays `processing` and is taken over after its lease). Returns how many.
    pub async fn shutdown(&self, grace: Duration) -> usize {
        self.tracker.close();
        let waiting = self.tracker.len();
        if waiting > 0 {
            tracing::info!(
                executions = waiting,
                grace_ms = grace.as_millis() as u64,
                "waiting for executions to finish"
            );
        }
        if tokio::time::timeout(grace, self.tracker.wait()).await.is_err() {
            tracing::error!(
                executions = self.tracker.len(),
                "shutdown grace over: executions still running are abandoned"
            );
        }
        let owned = self.owned.lock().map(|o| o.clone()).unwrap_or_default();
        for (key, (token, _)) in &owned {
            tracing::error!(
                tenant = %key.tenant,
                method = %key.method,
                key = %key.key,
                token,
                "left processing at shutdown: after its lease, a retry will execute it again"
            );
        }
        owned.len()
    }
}

/// Drive `work` to its end while `beat` runs beside it; `beat` ending early (the lease was
/// lost) does not stop `work`. `work` is polled first: one that finishes at once (a handler
/// that cannot block, on a store that answers at once) never starts `beat`, whose timer costs
/// a clock read, a place in the timer wheel and its removal. An unbiased `select!` polled
/// `beat` first on every other call.
async fn with_heartbeat<T>(work: impl Future<Output = T>, beat: impl Future<Output = ()>) -> T {
    tokio::pin!(work);
    tokio::pin!(beat);
    let mut beating = true;
    loop {
        tokio::select! {
            biased;
            out = &mut work => return out,
            () = &mut beat, if beating => beating = false,
        }
    }
}

/// An outcome as it is stored.
pub(crate) fn stored_outcome(outcome: &Outcome) -> StoredOutcome {
    match outcome {
        Outcome::Result(r) => StoredOutcome::Succeeded(r.get().to_owned()),
        Outcome::Error(e) => StoredOutcome::Failed(e.to_json().get().to_owned()),
    }
}

/// The lease of a method's executions: the configured one, stretched (for embedders that did
/// not check) so that it outlives the handler's deadline with a margin.
pub(crate) fn lease_for(configured: Duration, timeout: Duration) -> Duration {
    configured.max(timeout + lease_margin(timeout))
}

/// The least a lease must exceed a timeout by: a tenth of it, at least a second.
pub fn lease_margin(timeout: Duration) -> Duration {
    (timeout / 10).max(Duration::from_secs(1))
}

/// The error a request gets when the record belongs to another running execution.
/// The retry hint of a concurrent duplicate (SPEC §3): as long as the running execution has
/// been running so far — known exactly when it runs in this process, else estimated from the
/// store's lease as the time since the owner's claim or last heartbeat — at least 50 ms and at
/// most the lease left. A client that honours it retries about when a job like this one ends,
/// not when a long lease would.
pub(crate) fn retry_hint(lease_left_ms: u64, lease: Duration, running: Option<Duration>) -> u64 {
    let running_ms = match running {
        Some(r) => r.as_millis() as u64,
        None => (lease.as_millis() as u64).saturating_sub(lease_left_ms),
    };
    running_ms.min(lease_left_ms).max(50)
}

/// The hint of a `-32001 Request in progress` answer, for the HTTP `Retry-After` header.
pub fn in_progress_hint(outcome: &Outcome) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Hint {
        retry_after_ms: u64,
    }
    match outcome {
        Outcome::Error(e) if e.code == ErrorCode::RequestInProgress => {
            serde_json::from_str::<Hint>(e.data.as_deref()?.get()).ok().map(|h| h.retry_after_ms)
        }
        _ => None,
    }
}

pub(crate) fn in_progress(retry_after_ms: u64) -> RpcError {
    RpcError::new(ErrorCode::RequestInProgress).data(serde_json::json!({ "retry_after_ms": retry_after_ms }))
}

mod claim;
#[cfg(test)]
mod tests;
