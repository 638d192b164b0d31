//! The idempotency store: the `Store` trait every backend implements, the record model, and
//! the claim state machine ([`decide`]) that the in-process stores share.
//!
//! ```text
//!                 claim (no record / expired)
//!   (none) ───────────────────────────────────▶ processing{token, lease}
//!                                                 │  │  │
//!            complete(token, ok) ◀────────────────┘  │  └── lease expired + claim ──▶ processing{token+1}
//!   succeeded ◀──┘        complete(token, err) ──────┘                                 (take-over)
//!       │                        │
//!       │ force retry → -32003   ▼
//!       │                     failed ── force retry + claim ──▶ processing{token+1}
//!       ▼
//!   (expired after ttl: as if absent)
//! ```
//!
//! The *fencing token* grows by one at every claim of a key. `complete` only lands when the
//! caller's token is the record's current one, so a slow original owner whose lease was taken
//! over cannot overwrite the new owner's outcome.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::method::BoxFuture;

/// The scope of a record: `(tenant, method, key)` (DESIGN §3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecordKey {
    pub tenant: Arc<str>,
    pub method: Arc<str>,
    pub key: Arc<str>,
}

impl RecordKey {
    pub fn new(tenant: impl Into<Arc<str>>, method: impl Into<Arc<str>>, key: impl Into<Arc<str>>) -> Self {
        RecordKey { tenant: tenant.into(), method: method.into(), key: key.into() }
    }
}

/// A finished execution's outcome as stored: the exact JSON text of `result` or `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredOutcome {
    Succeeded(String),
    Failed(String),
}

impl StoredOutcome {
    pub fn json(&self) -> &str {
        match self {
            StoredOutcome::Succeeded(s) | StoredOutcome::Failed(s) => s,
        }
    }
}

/// The state of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// Owned by the holder of `token` until `lease_until_ms`.
    Processing {
        lease_until_ms: u64,
    },
    Done(StoredOutcome),
}

/// One stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub fingerprint: String,
    pub state: RecordState,
    /// Fencing token of the current (or last) owner.
    pub token: u64,
    pub expires_at_ms: u64,
}

/// What a claim asks for.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    pub key: &'a RecordKey,
    pub fingerprint: &'a str,
    pub force_retry: bool,
    pub lease: Duration,
    pub ttl: Duration,
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The caller owns the record and must execute, then `complete` with `token`.
    Acquired { token: u64, kind: AcquireKind },
    /// Someone else is executing; their lease ends in `retry_after_ms`.
    InProgress { retry_after_ms: u64 },
    /// The execution finished before: replay this.
    Done(StoredOutcome),
    /// The key was used with other params.
    FingerprintMismatch,
    /// Force retry of a success: refused, nothing runs.
    ForceRetryRefused,
}

/// Why a claim was acquired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireKind {
    /// No live record existed.
    Fresh,
    /// The previous owner's lease had expired.
    TakeOver,
    /// Force retry of a failed execution.
    ForceRetry,
}

/// The store could not be used; commands fail closed (`-32004`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("idempotency store error: {0}")]
pub struct StoreError(pub String);

impl StoreError {
    pub fn new(msg: impl std::fmt::Display) -> Self {
        StoreError(msg.to_string())
    }
}

/// Where an async flow event stands (DESIGN §4, `GET /v2/events/{id}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStatus {
    Processing,
    Succeeded,
    Failed,
}

impl EventStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Processing => "processing",
            EventStatus::Succeeded => "succeeded",
            EventStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<EventStatus> {
        match s {
            "processing" => Some(EventStatus::Processing),
            "succeeded" => Some(EventStatus::Succeeded),
            "failed" => Some(EventStatus::Failed),
            _ => None,
        }
    }
}

/// An accepted async execution: enough to answer `GET /v2/events/{id}` and to resume it
/// after a crash (the params, the record it is guarded by).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub id: String,
    /// The idempotency record guarding the execution (a synthetic key when the client gave
    /// none), so that exactly one process resumes it.
    pub record: RecordKey,
    pub fingerprint: String,
    /// The params as received (JSON text), `None` when absent.
    pub params: Option<String>,
    pub return_step: Option<String>,
    pub tags: Vec<String>,
    pub status: EventStatus,
    /// The outcome once finished.
    pub outcome: Option<StoredOutcome>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub expires_at_ms: u64,
}

/// A durable (or not) home for idempotency records and async events. Every operation is
/// atomic per key.
pub trait Store: Send + Sync + 'static {
    /// Atomically claim `key` (see [`decide`] for the rules).
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// Store the outcome of the execution that holds `token`. `Ok(false)`: the token is no
    /// longer current (fenced out by a take-over); nothing was written.
    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        outcome: &'a StoredOutcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Drop the processing record held by `token` (an execution that turned out to be a
    /// validation failure leaves no record). `Ok(false)` when the token is not current.
    fn release<'a>(&'a self, key: &'a RecordKey, token: u64) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Read a record (expired records read as absent).
    fn get<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>>;

    /// Insert or replace an event.
    fn put_event<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Read an event (expired events read as absent).
    fn get_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>>;

    /// Mark an event finished with its outcome (status follows the outcome).
    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        outcome: &'a StoredOutcome,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Mark a finished event as running again (force retry of a failed event).
    fn restart_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Up to `limit` events still `processing` (oldest first), for resumption.
    fn pending_events(&self, limit: usize) -> BoxFuture<'_, Result<Vec<Event>, StoreError>>;

    /// A short name for logs and metrics (`memory`, `sqlite`, …).
    fn name(&self) -> &'static str;

    /// Whether the dispatcher may keep a process-local cache of succeeded records in front
    /// of this store (see `cache.rs`). The memory store already is one.
    fn cache_successes(&self) -> bool {
        true
    }

    /// Whether the store answers right now (for `/healthz`).
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The status an outcome gives an event.
pub fn status_of(outcome: &StoredOutcome) -> EventStatus {
    match outcome {
        StoredOutcome::Succeeded(_) => EventStatus::Succeeded,
        StoredOutcome::Failed(_) => EventStatus::Failed,
    }
}

/// Milliseconds since the Unix epoch (records survive restarts, so wall-clock time).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// The claim state machine, for stores that read-modify-write a record under a lock or a
/// transaction. Returns the answer and, when the record changes, its new value.
pub fn decide(existing: Option<&Record>, req: &ClaimRequest<'_>, now: u64) -> (Claim, Option<Record>) {
    let acquire = |token: u64, kind: AcquireKind| {
        let record = Record {
            fingerprint: req.fingerprint.to_owned(),
            state: RecordState::Processing { lease_until_ms: now + ms(req.lease) },
            token,
            expires_at_ms: now + ms(req.ttl),
        };
        (Claim::Acquired { token, kind }, Some(record))
    };
    let Some(rec) = existing.filter(|r| r.expires_at_ms > now) else {
        // Tokens keep growing across expiry so a stale owner stays fenced out.
        let token = existing.map_or(1, |r| r.token + 1);
        return acquire(token, AcquireKind::Fresh);
    };
    if rec.fingerprint != req.fingerprint {
        return (Claim::FingerprintMismatch, None);
    }
    match &rec.state {
        RecordState::Processing { lease_until_ms } if *lease_until_ms > now => {
            (Claim::InProgress { retry_after_ms: lease_until_ms - now }, None)
        }
        RecordState::Processing { .. } => acquire(rec.token + 1, AcquireKind::TakeOver),
        RecordState::Done(StoredOutcome::Succeeded(_)) if req.force_retry => (Claim::ForceRetryRefused, None),
        RecordState::Done(StoredOutcome::Failed(_)) if req.force_retry => {
            acquire(rec.token + 1, AcquireKind::ForceRetry)
        }
        RecordState::Done(outcome) => (Claim::Done(outcome.clone()), None),
    }
}

/// The completion rule shared by in-process stores: the new record, or `None` when fenced.
pub fn decide_complete(
    existing: Option<&Record>,
    token: u64,
    outcome: &StoredOutcome,
    ttl: Duration,
    now: u64,
) -> Option<Record> {
    let rec = existing?;
    if rec.token != token || !matches!(rec.state, RecordState::Processing { .. }) {
        return None;
    }
    Some(Record {
        fingerprint: rec.fingerprint.clone(),
        state: RecordState::Done(outcome.clone()),
        token,
        expires_at_ms: now + ms(ttl),
    })
}

/// Whether `release` may drop the record.
pub fn may_release(existing: Option<&Record>, token: u64) -> bool {
    existing.is_some_and(|r| r.token == token && matches!(r.state, RecordState::Processing { .. }))
}
