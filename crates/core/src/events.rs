//! Async executions (DESIGN §4, `POST /v2/flows/{flow}` without `sync=true`).
//!
//! An async execution is always guarded by an idempotency record (the client's key, or a
//! synthetic `evt-…` key), and its [`Event`] is written to the store *before* the caller is
//! answered. The event id is derived from the record's scope, so a duplicate gets the same
//! `event_id`. Any process sharing the store resumes events left `processing` by a process
//! that died: [`Dispatcher::resume_events`] claims the event's record, which only succeeds
//! once the dead owner's lease has expired, and only for one claimant.

use std::sync::Arc;
use std::time::Duration;

use oncerpc_protocol::{ErrorCode, Outcome, RawValue, RpcError};
use sha2::{Digest, Sha256};
use tracing::Instrument;

use crate::dispatch::{Dispatcher, RequestMeta, generated_id, record, replay, run_handler, stored_outcome};
use crate::method::{Context, IdempotencyStatus, Method};
use crate::store::{AcquireKind, Claim, Event, EventStatus, RecordKey, StoredOutcome, now_ms};

/// The answer to an async submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub event_id: String,
    pub key: Arc<str>,
    pub status: IdempotencyStatus,
    /// The client gave no key: `key` was generated for this call.
    pub synthetic_key: bool,
}

/// `evt_` + 32 hex digits of SHA-256 over the record scope: stable across duplicates,
/// different across tenants, methods and keys, and not revealing the key.
pub fn event_id(record: &RecordKey) -> String {
    let mut h = Sha256::new();
    for part in [&*record.tenant, &*record.method, &*record.key] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    let mut id = String::with_capacity(36);
    id.push_str("evt_");
    for b in &digest[..16] {
        use std::fmt::Write;
        let _ = write!(id, "{b:02x}");
    }
    id
}

impl Dispatcher {
    /// Accept an async execution of `method`: validate, claim, store the event, answer.
    /// The execution continues in a background task.
    pub async fn submit(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
        meta: &RequestMeta,
        tags: Vec<String>,
    ) -> Result<Submitted, RpcError> {
        let m = self.registry.get(method).ok_or_else(RpcError::method_not_found)?.clone();
        let cid = meta.correlation_id.clone().unwrap_or_else(generated_id);
        let prepared = self.prepare(&m, params, cid.clone(), meta, true)?;
        let keyed = prepared.keyed.expect("async executions are always keyed");
        let record_key = RecordKey::new(meta.tenant.clone(), m.name.clone(), keyed.key.clone());
        let id = event_id(&record_key);
        let submitted = |status| Submitted {
            event_id: id.clone(),
            key: keyed.key.clone(),
            status,
            synthetic_key: keyed.synthetic,
        };
        let status = match self.claim(&m, &record_key, &keyed.fingerprint, keyed.force_retry).await? {
            Claim::Acquired { token, kind } => {
                let now = now_ms();
                let event = Event {
                    id: id.clone(),
                    record: record_key.clone(),
                    fingerprint: keyed.fingerprint.clone(),
                    params: params.map(|p| p.get().to_owned()),
                    return_step: meta.return_step.as_deref().map(str::to_owned),
                    tags,
                    status: EventStatus::Processing,
                    outcome: None,
                    created_at_ms: now,
                    updated_at_ms: now,
                    expires_at_ms: now + self.config.idempotency.ttl.as_millis() as u64,
                };
                if kind == AcquireKind::ForceRetry {
                    tracing::info!(event_id = %id, "force retry of a failed event");
                }
                if let Err(e) = self.store.put_event(&event).await {
                    self.metrics.store_error(self.store.name());
                    tracing::error!(error = %e, "could not store the event: not accepted");
                    let _ = self.store.release(&record_key, token).await;
                    return Err(RpcError::new(ErrorCode::StoreUnavailable));
                }
                self.spawn_event(m.clone(), event, token, cid);
                IdempotencyStatus::New
            }
            Claim::InProgress { .. } => IdempotencyStatus::Processing,
            Claim::Done(outcome) => {
                // The record may have been made by a sync call: make the event readable.
                self.ensure_finished_event(
                    &id,
                    &record_key,
                    &keyed.fingerprint,
                    params,
                    meta,
                    tags,
                    &outcome,
                )
                .await;
                IdempotencyStatus::Duplicate
            }
            Claim::FingerprintMismatch => return Err(RpcError::new(ErrorCode::KeyReused)),
            Claim::ForceRetryRefused => return Err(RpcError::new(ErrorCode::ForceRetryRefused)),
        };
        self.metrics.idempotency(&m.name, status.as_str());
        Ok(submitted(status))
    }

    #[allow(clippy::too_many_arguments)]
    async fn ensure_finished_event(
        &self,
        id: &str,
        record_key: &RecordKey,
        fingerprint: &str,
        params: Option<&RawValue>,
        meta: &RequestMeta,
        tags: Vec<String>,
        outcome: &StoredOutcome,
    ) {
        match self.store.get_event(id).await {
            Ok(Some(e)) if e.status != EventStatus::Processing => {}
            Ok(Some(_)) => {
                // Finished record, event still marked running: the process died in between.
                let _ = self.store.finish_event(id, outcome).await;
            }
            Ok(None) => {
                let now = now_ms();
                let event = Event {
                    id: id.to_owned(),
                    record: record_key.clone(),
                    fingerprint: fingerprint.to_owned(),
                    params: params.map(|p| p.get().to_owned()),
                    return_step: meta.return_step.as_deref().map(str::to_owned),
                    tags,
                    status: crate::store::status_of(outcome),
                    outcome: Some(outcome.clone()),
                    created_at_ms: now,
                    updated_at_ms: now,
                    expires_at_ms: now + self.config.idempotency.ttl.as_millis() as u64,
                };
                let _ = self.store.put_event(&event).await;
            }
            Err(e) => tracing::warn!(error = %e, "could not read the event"),
        }
    }

    /// Run an event's execution in the background, then record its outcome on the record
    /// and on the event.
    fn spawn_event(self: &Arc<Self>, method: Arc<Method>, event: Event, token: u64, cid: Arc<str>) {
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
        );
        tokio::spawn(
            async move {
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
                };
                let started = std::time::Instant::now();
                let outcome = run_handler(&method, ctx, params.as_deref(), started).await;
                let stored = stored_outcome(&outcome);
                if matches!(&outcome, Outcome::Error(e) if e.code == ErrorCode::InvalidParams) {
                    // Rejected by the handler's params check: no record, a failed event.
                    let _ = this.store.release(&event.record, token).await;
                } else {
                    record(&*this.store, &event.record, token, &stored, this.config.idempotency.ttl).await;
                }
                if let Err(e) = this.store.finish_event(&event.id, &stored).await {
                    this.metrics.store_error(this.store.name());
                    tracing::error!(error = %e, "could not finish the event (it will be finished on resume)");
                }
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
                if let Ok(mut running) = this.running_events.lock() {
                    running.remove(&event.id);
                }
            }
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

    /// One pass over the pending events. Returns how many were (re)started.
    pub async fn resume_once(self: &Arc<Self>) -> Result<usize, crate::store::StoreError> {
        let pending = self.store.pending_events(100).await?;
        let mut started = 0;
        for event in pending {
            if self.running_events.lock().map(|r| r.contains(&event.id)).unwrap_or(true) {
                continue;
            }
            let Some(method) = self.registry.get(&event.record.method).cloned() else {
                // Another replica (or deployment) sharing the store serves this method: its
                // event is not ours to run, nor to fail.
                tracing::debug!(event_id = %event.id, method = %event.record.method, "pending event for a method not served here");
                continue;
            };
            match self.claim(&method, &event.record, &event.fingerprint, false).await {
                Ok(Claim::Acquired { token, kind }) => {
                    tracing::warn!(event_id = %event.id, ?kind, "resuming an event whose owner is gone");
                    let cid = Arc::from(event.id.as_str());
                    self.spawn_event(method, event, token, cid);
                    started += 1;
                }
                Ok(Claim::Done(outcome)) => {
                    // The execution finished; only the event was not updated.
                    let _ = replay(&outcome);
                    self.store.finish_event(&event.id, &outcome).await?;
                }
                Ok(Claim::InProgress { .. }) => {}
                Ok(Claim::FingerprintMismatch) | Ok(Claim::ForceRetryRefused) => {
                    let err =
                        StoredOutcome::Failed(RpcError::new(ErrorCode::KeyReused).to_json().get().to_owned());
                    self.store.finish_event(&event.id, &err).await?;
                }
                Err(_) => break,
            }
        }
        Ok(started)
    }
}
