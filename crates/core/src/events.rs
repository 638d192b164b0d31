//! Async executions (SPEC §4, `POST /v2/flows/{flow}` without `sync=true`).
//!
//! An async execution is always guarded by an idempotency record (the client's key, or a
//! synthetic `evt-…` key), and its [`Event`] is written to the store *before* the caller is
//! answered. The event id is derived from the record's scope, so a duplicate gets the same
//! `event_id`. Any process sharing the store resumes events left `processing` by a process
//! that died: [`Dispatcher::resume_events`] claims the event's record, which only succeeds
//! once the dead owner's lease has expired, and only for one claimant.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oncerpc_protocol::{ErrorCode, Outcome, RawValue, RpcError};
use tracing::Instrument;

use crate::dispatch::{Dispatcher, RequestMeta, generated_id, run_handler};
use crate::execution::Acquired;
use crate::method::{Context, IdempotencyStatus, Method};
use crate::store::{Claim, Event, EventStatus, RecordKey, StoreError, StoredOutcome, now_ms};

mod cancel;
mod redrive;

pub use cancel::{Cancelled, cancelled_outcome};

pub use crate::store::event_id;

/// Pending events read per page by the resume scanner.
const RESUME_PAGE: usize = 100;

/// Attempts to write the event of a claimed execution before the submission is refused.
const EVENT_WRITE_ATTEMPTS: u32 = 4;

/// The answer to an async submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub event_id: String,
    pub key: Arc<str>,
    pub status: IdempotencyStatus,
    /// The client gave no key: `key` was generated for this call.
    pub synthetic_key: bool,
    /// Where the key came from (SPEC §15).
    pub key_origin: crate::KeyOrigin,
}

/// What an accepted submission needs to become an event.
struct Submission {
    method: Arc<Method>,
    record: RecordKey,
    fingerprint: String,
    force_retry: bool,
    params: Option<String>,
    return_step: Option<String>,
    tags: Vec<String>,
    cid: Arc<str>,
    /// When the request arrived: the execution's deadline counts from here, like its lease.
    started: Instant,
    /// The event's creation time when it already has one (a re-drive keeps it).
    created_at_ms: Option<u64>,
    /// Who submitted the event: the caller's subject (a re-drive keeps the original).
    created_by: Option<String>,
    /// Where the steps' progress goes (the MCP task's `progressToken`); `None` for a re-drive.
    progress: Option<crate::Progress>,
    /// The caller's trace context (not stored: a resumed or re-driven execution has none).
    trace: Option<crate::TraceContext>,
}

/// Where an event's execution comes from and who it reports to: its correlation id, when its
/// deadline started, the caller's trace context, and where its steps' progress goes (the call
/// that started it, in this process; none for a resumed execution).
struct Origin {
    cid: Arc<str>,
    started: Instant,
    trace: Option<crate::TraceContext>,
    progress: Option<crate::Progress>,
}

impl Submission {
    fn event(
        &self,
        id: &str,
        token: u64,
        status: EventStatus,
        outcome: Option<StoredOutcome>,
        ttl: Duration,
    ) -> Event {
        let now = now_ms();
        Event {
            id: id.to_owned(),
            record: self.record.clone(),
            fingerprint: self.fingerprint.clone(),
            params: self.params.clone(),
            return_step: self.return_step.clone(),
            tags: self.tags.clone(),
            status,
            outcome,
            created_at_ms: self.created_at_ms.unwrap_or(now),
            updated_at_ms: now,
            expires_at_ms: now + ttl.as_millis() as u64,
            token,
            steps: None,
            created_by: self.created_by.clone(),
        }
    }
}

impl Dispatcher {
    /// Accept an async execution of `method`: validate, claim, store the event, answer.
    /// The execution continues in a background task. From the claim on, the work runs in a
    /// task of its own, so a client hanging up cannot leave a claim without its event.
    pub async fn submit(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
        meta: &RequestMeta,
        tags: Vec<String>,
    ) -> Result<Submitted, RpcError> {
        let started = Instant::now();
        let m = self.method(method).ok_or_else(RpcError::method_not_found)?;
        let cid = meta.correlation_id.clone().unwrap_or_else(generated_id);
        let prepared = self.prepare(&m, m.name.clone(), params, cid.clone(), meta, true)?;
        let keyed = prepared.keyed.expect("async executions are always keyed");
        let record = RecordKey::new(meta.tenant.clone(), m.name.clone(), keyed.key.clone());
        let id = event_id(&record);
        let sub = Submission {
            method: m.clone(),
            record,
            fingerprint: keyed.fingerprint.to_string(),
            force_retry: keyed.force_retry,
            params: params.map(|p| p.get().to_owned()),
            return_step: meta.return_step.as_deref().map(str::to_owned),
            tags,
            cid,
            started,
            created_at_ms: None,
            created_by: meta.subject.as_deref().map(str::to_owned),
            progress: meta.progress.clone(),
            trace: meta.trace.clone(),
        };
        // The budget place travels with the event's execution; refused before any claim.
        let permit = self.exec.permit(&meta.tenant)?;
        let this = self.clone();
        let event_id = id.clone();
        let status = self
            .exec
            .spawn(async move { this.accept(event_id, sub, permit).await })
            .await
            .map_err(|e| RpcError::internal(format_args!("submission task failed: {e}")))??;
        self.metrics.idempotency(&m.name, status.as_str());
        Ok(Submitted {
            event_id: id,
            key: keyed.key,
            status,
            synthetic_key: keyed.synthetic,
            key_origin: keyed.origin,
        })
    }

    async fn accept(
        self: Arc<Self>,
        id: String,
        sub: Submission,
        permit: crate::Permit,
    ) -> Result<IdempotencyStatus, RpcError> {
        let ttl = self.config.idempotency.ttl;
        let lease = self.lease(&sub.method);
        // The claim's own budget (`store.op_timeout_ms`), not the method's.
        let deadline = Instant::now() + self.config.idempotency.store_timeout;
        let claim = match self.exec.known(&sub.record, &sub.fingerprint, sub.force_retry) {
            Some(known) => Acquired::Not(known),
            None => {
                self.exec.acquire(&sub.record, &sub.fingerprint, sub.force_retry, lease, deadline).await?
            }
        };
        match claim {
            Acquired::Owner { token, kind, previous } => {
                if kind == crate::store::AcquireKind::ForceRetry {
                    tracing::info!(event_id = %id, "force retry of a failed event");
                }
                let event = sub.event(&id, token, EventStatus::Processing, None, ttl);
                let event = match self.own_event(event, kind).await {
                    Ok(event) => event,
                    Err(e) => {
                        self.metrics.store_error(self.store.name());
                        tracing::error!(error = %e, "could not store the event: not accepted");
                        self.exec.give_back(&sub.record, token, kind, previous.as_ref()).await;
                        return Err(RpcError::new(ErrorCode::StoreUnavailable));
                    }
                };
                let journal = self.exec.journal(&sub.record, token, kind, lease).await;
                let origin = Origin {
                    cid: sub.cid.clone(),
                    started: sub.started,
                    trace: sub.trace.clone(),
                    progress: sub.progress.clone(),
                };
                self.spawn_event(sub.method.clone(), event, journal, origin, permit);
                Ok(IdempotencyStatus::New)
            }
            Acquired::Not(Claim::InProgress { .. }) => {
                // The record may be held by a sync call, which writes no event: make one if
                // there is none, so that the event id answered exists and is settled by the
                // resume scanner once the record is done. Its token, 0, is below every
                // owner's: it only ever creates, never overwrites the owner's event, and the
                // owner's own write replaces it. Looked up first: a storm of duplicates of a
                // running event then costs reads, not writes.
                if let Ok(None) = self.store.get_event(&id).await {
                    let event = sub.event(&id, 0, EventStatus::Processing, None, ttl);
                    if let Err(e) = self.store.put_event(&event).await {
                        tracing::warn!(error = %e, "could not make the event of a key in progress");
                    }
                }
                Ok(IdempotencyStatus::Processing)
            }
            Acquired::Not(Claim::Done(outcome, _)) => {
                // The record may have been made by a sync call: make the event readable.
                match self.store.get_event(&id).await {
                    Ok(Some(e)) if e.status != EventStatus::Processing => {}
                    // Finished record, event still marked running: settle it, with what the
                    // record holds now and only when the event is that execution's (or the
                    // placeholder of token 0). The outcome this claim read may be older than
                    // the event: a force retry or re-drive that restarted it since is running,
                    // and its own to finish (settling it with the old failure would show
                    // `failed` while its key succeeds).
                    Ok(Some(e)) => {
                        if let Ok(Some(r)) = self.store.get(&sub.record).await
                            && let crate::store::RecordState::Done(current) = &r.state
                            && (e.token == 0 || e.token == r.token)
                        {
                            let _ = self.store.finish_event(&id, e.token, current).await;
                        }
                    }
                    // Created only (token 0): never over an owner's event.
                    Ok(None) => {
                        let status = crate::store::status_of(&outcome);
                        let _ = self.store.put_event(&sub.event(&id, 0, status, Some(outcome), ttl)).await;
                    }
                    Err(e) => tracing::warn!(error = %e, "could not read the event"),
                }
                Ok(IdempotencyStatus::Duplicate)
            }
            Acquired::Not(Claim::FingerprintMismatch) => Err(RpcError::new(ErrorCode::KeyReused)),
            Acquired::Not(Claim::ForceRetryRefused) => Err(RpcError::new(ErrorCode::ForceRetryRefused)),
            Acquired::Not(Claim::Acquired { .. } | Claim::Unconfirmed { .. }) => {
                Err(RpcError::internal("an acquired claim was not run"))
            }
        }
    }

    /// Write the event of an execution this process owns, and hand back the event to run
    /// with. A take-over resumes the event an earlier owner wrote (its creation time and step
    /// views kept); a fresh claim writes it, and a force retry writes it anew in its place
    /// (same id, same creation time). A store that fails is tried again a few times before
    /// the submission is refused: the claim is already made.
    async fn own_event(
        &self,
        mut event: Event,
        kind: crate::store::AcquireKind,
    ) -> Result<Event, StoreError> {
        let mut backoff = Duration::from_millis(50);
        for attempt in 1.. {
            let written = if kind == crate::store::AcquireKind::TakeOver {
                self.resume_event(&mut event).await
            } else {
                self.store.put_event(&event).await
            };
            match written {
                Ok(true) => return Ok(event),
                // Owned by a newer execution already: the record decides whose outcome counts.
                Ok(false) => {
                    tracing::warn!(event_id = %event.id, "the event has a newer owner; running under the record's token");
                    return Ok(event);
                }
                Err(e) if attempt >= EVENT_WRITE_ATTEMPTS => return Err(e),
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "could not store the event yet; trying again");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
            }
        }
        unreachable!("the loop returns by its last attempt")
    }

    /// A take-over's event: the stored one restarted under the new token, its steps so far
    /// shown again; written whole when there is none.
    async fn resume_event(&self, event: &mut Event) -> Result<bool, StoreError> {
        match self.store.get_event(&event.id).await? {
            Some(stored) => {
                let restarted = self.store.restart_event(&event.id, event.token).await?;
                event.created_at_ms = stored.created_at_ms;
                event.created_by = stored.created_by;
                event.steps = stored.steps;
                Ok(restarted)
            }
            None => self.store.put_event(event).await,
        }
    }

    /// Run an event's execution in the background (a tracked task: shutdown waits for it),
    /// then record its outcome on the record and, if that landed, on the event.
    fn spawn_event(
        self: &Arc<Self>,
        method: Arc<Method>,
        event: Event,
        journal: crate::journal::StepJournal,
        origin: Origin,
        permit: crate::Permit,
    ) {
        let Origin { cid, started, trace, progress } = origin;
        let token = journal.token();
        let this = self.clone();
        if let Ok(mut running) = self.running_events.lock() {
            running.insert(event.id.clone());
        }
        let span = tracing::info_span!(
            "event",
            event_id = %event.id,
            correlation_id = %cid,
            method = %method.name,
            tenant = %event.record.tenant,
            trace_id = trace.as_ref().map(|t| tracing::field::display(&t.trace_id)),
        );
        // Exported (`[telemetry]`): the run's own span in the caller's trace, inside the logged one.
        let exported = crate::trace::event_span(&method.name, &event.id, trace.as_ref());
        let marked = exported.clone();
        self.exec.spawn(
            async move {
                let _permit = permit;
                let params = match event.params.as_deref().map(|p| RawValue::from_string(p.to_owned())) {
                    None => None,
                    Some(Ok(p)) => Some(p),
                    Some(Err(e)) => {
                        tracing::error!(error = %e, "stored params are not JSON");
                        None
                    }
                };
                let ctx = Context {
                    correlation_id: cid,
                    method: method.name.clone(),
                    tenant: event.record.tenant.clone(),
                    idempotency_key: Some(event.record.key.clone()),
                    idempotency_status: Some(IdempotencyStatus::New),
                    return_step: event.return_step.as_deref().map(Arc::from),
                    journal: Some(journal.with_event(&event.id, event.steps.as_deref())),
                    progress,
                    trace,
                    cancel: None,
                    ask: None,
                };
                let lease = this.lease(&method);
                // The method's `timeout` starts once the execution is ours.
                let work = run_handler(&method, ctx, params.as_deref(), Instant::now());
                // As for a synchronous call: a method whose transport failures are not
                // outcomes releases its record on one (the event reads failed; a retry with
                // the key runs again).
                let release = method.spec.transport_failures_unrecorded;
                let (outcome, settled) = this
                    .exec
                    .run_owned(&event.record, token, &event.fingerprint, lease, release, work, |_, _| {})
                    .await;
                this.exec.settle_event(&event.id, token, &outcome, &settled).await;
                let code = match &outcome {
                    Outcome::Result(_) => "ok".to_string(),
                    Outcome::Error(e) => e.code.code().to_string(),
                };
                this.metrics.request(&method.name, method.spec.kind.as_str(), &code, started.elapsed());
                tracing::info!(
                    duration_us = started.elapsed().as_micros() as u64,
                    outcome = if outcome.is_error() { "error" } else { "ok" },
                    "event finished"
                );
                if outcome.is_error() {
                    crate::trace::set_error(&marked);
                }
                if let Ok(mut running) = this.running_events.lock() {
                    running.remove(&event.id);
                }
            }
            .instrument(exported)
            .instrument(span),
        );
    }

    /// Resume events left `processing` (by a process that died, or by another replica),
    /// forever, every `interval`. Spawn it once per process.
    pub async fn resume_events(self: Arc<Self>, interval: Duration) {
        loop {
            if let Err(e) = self.resume_once().await {
                tracing::warn!(error = %e, "resuming events failed; will try again");
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// One pass over every pending event, page by page. Returns how many were (re)started.
    pub async fn resume_once(self: &Arc<Self>) -> Result<usize, StoreError> {
        let mut started = 0;
        let mut cursor: Option<String> = None;
        loop {
            let (page, next) = self.store.pending_events(cursor.as_deref(), RESUME_PAGE).await?;
            for event in page {
                started += usize::from(self.resume(event).await?);
            }
            match next {
                Some(c) => cursor = Some(c),
                None => return Ok(started),
            }
        }
    }

    /// Resume one pending event if its owner is gone; settle it if its record is done.
    async fn resume(self: &Arc<Self>, event: Event) -> Result<bool, StoreError> {
        if self.running_events.lock().map(|r| r.contains(&event.id)).unwrap_or(true) {
            return Ok(false);
        }
        let Some(method) = self.method(&event.record.method) else {
            // Another replica (or deployment) sharing the store serves this method, or it is
            // an external one not offered yet (its server not connected): its event is not
            // ours to run now, nor to fail.
            tracing::debug!(event_id = %event.id, method = %crate::LogSafe(&event.record.method), "pending event for a method not served here");
            return Ok(false);
        };
        // No place in the budget: leave the event for a later pass (nothing was claimed).
        let Ok(permit) = self.exec.permit(&event.record.tenant) else { return Ok(false) };
        let started = Instant::now();
        let lease = self.lease(&method);
        let deadline = started + self.config.idempotency.store_timeout;
        match self.exec.acquire(&event.record, &event.fingerprint, false, lease, deadline).await {
            Ok(Acquired::Owner { token, kind, .. }) => {
                tracing::warn!(event_id = %event.id, ?kind, "resuming an event whose owner is gone");
                if !self.store.restart_event(&event.id, token).await? {
                    tracing::warn!(event_id = %event.id, "the event has a newer owner; running under the record's token");
                }
                let cid = Arc::from(event.id.as_str());
                let journal = self.exec.journal(&event.record, token, kind, lease).await;
                let origin = Origin { cid, started, trace: None, progress: None };
                self.spawn_event(method, event, journal, origin, permit);
                Ok(true)
            }
            Ok(Acquired::Not(Claim::Done(outcome, _))) => {
                // The execution finished; only the event was not updated.
                self.store.finish_event(&event.id, event.token, &outcome).await?;
                Ok(false)
            }
            Ok(Acquired::Not(Claim::FingerprintMismatch | Claim::ForceRetryRefused)) => {
                let err =
                    StoredOutcome::Failed(RpcError::new(ErrorCode::KeyReused).to_json().get().to_owned());
                self.store.finish_event(&event.id, event.token, &err).await?;
                Ok(false)
            }
            Ok(Acquired::Not(_)) => Ok(false),
            Err(_) => Err(StoreError::new("the store did not answer a resume claim")),
        }
    }
}
