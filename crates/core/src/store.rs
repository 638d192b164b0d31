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

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::future::BoxFuture;
pub use crate::health::{Health, Part, Problem};
pub use crate::record::{
    AcquireKind, Claim, ClaimRequest, Journal, Record, RecordKey, RecordState, StoreError, StoredOutcome,
    TakeOver, journal_from_json, journal_to_json,
};

/// Where an async flow event stands (SPEC §4, `GET /v2/events/{id}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStatus {
    Processing,
    Succeeded,
    Failed,
    /// Cancelled while it ran (MCP `tasks/cancel`): its outcome is the `-32009 Cancelled`
    /// error, which a duplicate of the key gets, as any failed outcome.
    Cancelled,
}

impl EventStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Processing => "processing",
            EventStatus::Succeeded => "succeeded",
            EventStatus::Failed => "failed",
            EventStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<EventStatus> {
        match s {
            "processing" => Some(EventStatus::Processing),
            "succeeded" => Some(EventStatus::Succeeded),
            "failed" => Some(EventStatus::Failed),
            "cancelled" => Some(EventStatus::Cancelled),
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
    /// The fencing token of the execution that owns the event (the record's owner when it
    /// was written or last restarted; 0 when unknown, e.g. an event made for a record that
    /// a sync call holds). [`Store::finish_event`] only lands with this token.
    pub token: u64,
    /// The steps of a flow's execution as far as they went (a JSON array of
    /// `journal::StepView`, written by the executor with [`Store::put_event_steps`]); `None`
    /// before the first step.
    pub steps: Option<String>,
    /// Who submitted it: the caller's subject (a token's `sub`, a scoped key's `name`; never the
    /// credential), `None` for a plain API key. Later writes keep it, as `created_at_ms`.
    pub created_by: Option<String>,
}

/// `evt_` + 32 hex digits of SHA-256 over the record scope: stable across duplicates,
/// different across tenants, methods and keys, and not revealing the key.
pub fn event_id(record: &RecordKey) -> String {
    let mut h = Sha256::new();
    for part in [&*record.tenant, &*record.method, &*record.key] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    h.finalize()[..16].iter().fold(String::from("evt_"), |mut id, b| {
        let _ = std::fmt::Write::write_fmt(&mut id, format_args!("{b:02x}"));
        id
    })
}

/// A page of [`Store::pending_events`]: the events and the cursor of the next page.
pub type PendingPage = (Vec<Event>, Option<String>);

/// Which events [`Store::list_events`] returns: every given condition holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub status: Option<EventStatus>,
    /// The event's method (its flow).
    pub method: Option<String>,
    /// One of the event's tags.
    pub tag: Option<String>,
}

impl EventFilter {
    pub fn matches(&self, e: &Event) -> bool {
        self.status.is_none_or(|s| e.status == s)
            && self.method.as_deref().is_none_or(|m| &*e.record.method == m)
            && self.tag.as_ref().is_none_or(|t| e.tags.contains(t))
    }
}

/// The cursor of a listing page ([`Store::list_events`]) that ended with `last`: its
/// creation time, zero-padded so that cursors sort as the events do, and its id.
pub fn list_cursor(last: &Event) -> String {
    format!("{:020}:{}", last.created_at_ms, last.id)
}

/// Read a cursor made by [`list_cursor`]; `None` for a malformed one.
pub fn parse_list_cursor(cursor: &str) -> Option<(u64, &str)> {
    let (at, id) = cursor.split_once(':')?;
    (at.len() == 20).then_some(())?;
    Some((at.parse().ok()?, id))
}

/// Whether `e` comes after the cursor position `after` in a listing (newest first: older,
/// or as old with a smaller id).
pub fn listed_after(e: &Event, after: Option<(u64, &str)>) -> bool {
    after.is_none_or(|(at, id)| (e.created_at_ms, e.id.as_str()) < (at, id))
}

/// A durable (or not) home for idempotency records and async events. Every operation is
/// atomic per key.
///
/// Tokens: every store hands out fencing tokens that grow strictly per key, also across the
/// deletion of its record (release, expiry, sweep, eviction), so a stale owner can never hold
/// a token that a later owner also holds.
pub trait Store: Send + Sync + 'static {
    /// Atomically claim `key` (see [`decide`] for the rules).
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// Keep or take ownership (see [`decide_renew`]): for the owner's token, extend the lease
    /// to `now + lease` (and the record's expiry past it) and cancel an unconfirmed
    /// take-over — the heartbeat of a live execution; for an unconfirmed take-over's token,
    /// become the owner with a lease of `now + lease` — the confirmation. `Ok(false)`: the
    /// token is neither (the record finished, was released, or another owner holds it).
    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Store the outcome of the execution that holds `token`. `Ok(false)`: the token is no
    /// longer current (fenced out by a take-over); nothing was written. Idempotent: `Ok(true)`
    /// again when the same outcome already landed under this token (a retried write whose
    /// first attempt landed but timed out).
    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        outcome: &'a StoredOutcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Store the output of step `step` (0-based) of the execution that holds `token`, before
    /// the next step starts, and extend its lease to `now + lease` as [`Store::renew`] does
    /// (cancelling an unconfirmed take-over). Writing a step again replaces its output.
    /// `Ok(false)`: `token` is not the owner's (a take-over fenced it out, the record
    /// finished or is gone); nothing was written. Read the journal with [`Store::get`].
    fn put_step<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        step: u32,
        output: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Drop the processing record held by `token` (an execution that turned out to be a
    /// validation failure leaves no record); with an unconfirmed take-over's token, cancel
    /// that take-over (the record stays). `Ok(false)` when the token is neither.
    fn release<'a>(&'a self, key: &'a RecordKey, token: u64) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Read a record (expired records read as absent).
    fn get<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>>;

    /// Write an event for the execution that holds `event.token`: created when no live event
    /// has its id, replaced when the stored one belongs to an older execution (its token is
    /// below `event.token`: a force retry or a take-over). A replaced event keeps its creation
    /// time, so it stays where it was in every listing. `Ok(false)`: a live event with a token
    /// of at least `event.token` exists; nothing was written. So a writer that owns nothing
    /// (token 0: an event made for a record another request holds) only ever creates, and
    /// never overwrites the owner's event.
    fn put_event<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Read an event (expired events read as absent).
    fn get_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>>;

    /// Mark an event finished with its outcome (status follows the outcome), if `token` is
    /// the event's token. `Ok(false)`: fenced out (another execution owns the event now) or
    /// no such event; nothing was written.
    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        outcome: &'a StoredOutcome,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Replace the event's step views (`steps`, JSON text) if `token` is the event's token.
    /// `Ok(false)`: fenced out or no such event; nothing was written.
    fn put_event_steps<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        steps: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Mark an event as running under `token` (a take-over resuming it, or a force retry of a
    /// failed event): status processing, no outcome, the event's token set to `token` — only
    /// if `token` is greater than the event's token. `Ok(false)`: not written.
    fn restart_event<'a>(&'a self, id: &'a str, token: u64) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Events still `processing`, oldest first, a page of up to `limit` after `cursor` (an
    /// opaque value from the previous page; `None` for the first). Returns the page and the
    /// cursor of the next one (`None`: that was the last page). Every pending event is
    /// reached by following the cursors, however many there are.
    fn pending_events<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<PendingPage, StoreError>>;

    /// One tenant's events that match `filter`, newest first (by creation time, then id), a
    /// page of up to `limit` after `cursor` (from [`list_cursor`] of the previous page's
    /// last event; `None` for the first). Returns the page and the next page's cursor,
    /// `None` after the last page. A store may end a page early (fewer than `limit`) with a
    /// cursor when it read many events that did not match, and a full page's cursor may lead
    /// to an empty last page; following the cursors reaches every matching event once.
    /// Expired events are not listed.
    fn list_events<'a>(
        &'a self,
        tenant: &'a str,
        filter: &'a EventFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<PendingPage, StoreError>>;

    /// A short name for logs and metrics (`memory`, `sqlite`, …).
    fn name(&self) -> &'static str;

    /// Whether the dispatcher may keep a process-local cache of succeeded records in front
    /// of this store (see `cache.rs`). The memory store already is one.
    fn cache_successes(&self) -> bool {
        true
    }

    /// The answer a claim would give right now, when the store can tell it without waiting
    /// and the claim would change nothing: a finished record's outcome, a fingerprint
    /// mismatch, a refused force retry. `None`: claim as usual. Only a store whose reads are
    /// local and synchronous (the memory store) answers; it spares duplicates the execution
    /// task.
    fn settled(&self, _req: &ClaimRequest<'_>) -> Option<Claim> {
        None
    }

    /// Whether the store answers right now.
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    /// Whether the store can serve right now, part by part (for `/healthz`): by default,
    /// whether it answers a [`ping`](Store::ping). A store of several parts (a Redis Cluster)
    /// tells which parts cannot serve, so a gateway stays routable while most keys can be.
    fn health(&self) -> BoxFuture<'_, Health> {
        Box::pin(async {
            match self.ping().await {
                Ok(()) => Health::Ok,
                Err(e) => Health::Down(e.to_string()),
            }
        })
    }

    /// Whether every call answers without waiting on anything outside this process (the
    /// memory store): such a store is not wrapped in a time bound ([`Bounded`](crate::Bounded)).
    fn local(&self) -> bool {
        false
    }

    /// Whether this store is already a [`Bounded`](crate::Bounded) one.
    #[doc(hidden)]
    fn is_bounded(&self) -> bool {
        false
    }
}

/// The status an outcome gives an event: a failure that is the cancellation
/// (`-32009`) is `cancelled`.
pub fn status_of(outcome: &StoredOutcome) -> EventStatus {
    match outcome {
        StoredOutcome::Succeeded(_) => EventStatus::Succeeded,
        StoredOutcome::Failed(json) if is_cancellation(json) => EventStatus::Cancelled,
        StoredOutcome::Failed(_) => EventStatus::Failed,
    }
}

/// Whether a stored error (JSON text) is the cancellation, `-32009`.
fn is_cancellation(json: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Code {
        code: i64,
    }
    serde_json::from_str::<Code>(json)
        .is_ok_and(|c| c.code == oncerpc_protocol::ErrorCode::Cancelled.code() as i64)
}

/// Milliseconds since the Unix epoch (records survive restarts, so wall-clock time).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// How long an unconfirmed take-over keeps other claimants out: long enough for its
/// claimant to confirm, short enough that a claimant that gave up delays nobody for long.
pub fn takeover_window(lease: Duration) -> Duration {
    lease.min(Duration::from_secs(5))
}

/// When a record must expire: its TTL from now, but never before its lease ends (a processing
/// record that expired would read as absent and let a second execution start beside the
/// first).
pub fn expiry(now: u64, lease_until_ms: u64, ttl: Duration) -> u64 {
    (now + ms(ttl)).max(lease_until_ms)
}

/// The claim state machine, for stores that read-modify-write a record under a lock or a
/// transaction. `next_token` hands out the store's next fencing token (strictly growing per
/// key, across deletions); it is called only when a token is needed. Returns the answer and,
/// when the record changes, its new value.
pub fn decide(
    existing: Option<&Record>,
    req: &ClaimRequest<'_>,
    now: u64,
    next_token: impl FnOnce() -> u64,
) -> (Claim, Option<Record>) {
    let owned = |token: u64, kind: AcquireKind| {
        let lease_until_ms = now + ms(req.lease);
        let record = Record {
            fingerprint: req.fingerprint.to_owned(),
            state: RecordState::Processing { lease_until_ms },
            token,
            expires_at_ms: expiry(now, lease_until_ms, req.ttl),
            takeover: None,
            steps: Journal::new(),
        };
        (Claim::Acquired { token, kind }, Some(record))
    };
    let Some(rec) = existing.filter(|r| r.expires_at_ms > now) else {
        return owned(next_token(), AcquireKind::Fresh);
    };
    if rec.fingerprint != req.fingerprint {
        return (Claim::FingerprintMismatch, None);
    }
    match &rec.state {
        RecordState::Processing { lease_until_ms } if *lease_until_ms > now => {
            (Claim::InProgress { retry_after_ms: lease_until_ms - now }, None)
        }
        RecordState::Processing { .. } => match rec.takeover {
            // Someone asked to take over and may still confirm.
            Some(t) if t.until_ms > now => (Claim::InProgress { retry_after_ms: t.until_ms - now }, None),
            _ => {
                let token = next_token();
                let until_ms = now + ms(takeover_window(req.lease));
                let record = Record {
                    takeover: Some(TakeOver { token, until_ms }),
                    expires_at_ms: rec.expires_at_ms.max(until_ms),
                    ..rec.clone()
                };
                (Claim::Acquired { token, kind: AcquireKind::TakeOver }, Some(record))
            }
        },
        RecordState::Done(StoredOutcome::Succeeded(_)) if req.force_retry => (Claim::ForceRetryRefused, None),
        RecordState::Done(StoredOutcome::Failed(_)) if req.force_retry => {
            owned(next_token(), AcquireKind::ForceRetry)
        }
        // What is left of the TTL, never more than a TTL: a store may keep an outcome a little
        // longer (SQLite's expiry slack), and a process-local cache need not.
        RecordState::Done(outcome) => {
            (Claim::Done(outcome.clone(), (rec.expires_at_ms - now).min(ms(req.ttl))), None)
        }
    }
}

/// The renew rule ([`Store::renew`]): the new record, or `None` when `token` is neither the
/// owner's nor an unconfirmed take-over's.
pub fn decide_renew(existing: Option<&Record>, token: u64, lease: Duration, now: u64) -> Option<Record> {
    let rec = existing.filter(|r| r.expires_at_ms > now)?;
    if !matches!(rec.state, RecordState::Processing { .. }) {
        return None;
    }
    let is_owner = rec.token == token;
    let is_taker = rec.takeover.is_some_and(|t| t.token == token);
    if !is_owner && !is_taker {
        return None;
    }
    let lease_until_ms = now + ms(lease);
    Some(Record {
        fingerprint: rec.fingerprint.clone(),
        state: RecordState::Processing { lease_until_ms },
        token,
        expires_at_ms: rec.expires_at_ms.max(lease_until_ms),
        takeover: None,
        steps: rec.steps.clone(),
    })
}

/// The step rule ([`Store::put_step`]): the owner (not an unconfirmed take-over, which
/// must confirm first) of a live processing record stores the output of step `step` and
/// renews its lease as [`decide_renew`] does, cancelling an unconfirmed take-over. `None`:
/// fenced out, nothing written.
pub fn decide_step(
    existing: Option<&Record>,
    token: u64,
    step: u32,
    output: &str,
    lease: Duration,
    now: u64,
) -> Option<Record> {
    let rec = existing.filter(|r| r.token == token)?;
    let mut renewed = decide_renew(Some(rec), token, lease, now)?;
    renewed.steps.insert(step, output.to_owned());
    Some(renewed)
}

/// The completion rule shared by in-process stores: `Some(Some(record))` to write,
/// `Some(None)` when the same outcome already landed under this token (nothing to write,
/// answer `true`), `None` when fenced out.
pub fn decide_complete(
    existing: Option<&Record>,
    token: u64,
    outcome: &StoredOutcome,
    ttl: Duration,
    now: u64,
) -> Option<Option<Record>> {
    let rec = existing?;
    if rec.token != token {
        return None;
    }
    match &rec.state {
        RecordState::Processing { .. } => Some(Some(Record {
            fingerprint: rec.fingerprint.clone(),
            state: RecordState::Done(outcome.clone()),
            token,
            expires_at_ms: now + ms(ttl),
            takeover: None,
            steps: Journal::new(),
        })),
        RecordState::Done(done) if done == outcome => Some(None),
        RecordState::Done(_) => None,
    }
}

/// What `release` does to a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// The owner releases: delete the record.
    Delete,
    /// An unconfirmed take-over is withdrawn: write this record (the take-over cleared).
    Withdraw(Record),
    /// Neither: nothing changes, answer `false`.
    Refused,
}

/// The release rule shared by in-process stores.
pub fn decide_release(existing: Option<&Record>, token: u64) -> Release {
    let Some(rec) = existing.filter(|r| matches!(r.state, RecordState::Processing { .. })) else {
        return Release::Refused;
    };
    if rec.token == token {
        Release::Delete
    } else if rec.takeover.is_some_and(|t| t.token == token) {
        Release::Withdraw(Record { takeover: None, ..rec.clone() })
    } else {
        Release::Refused
    }
}

/// The `(created_at_ms, id)` page cursor of [`Store::pending_events`] for stores that order
/// pending events that way: the last event of a page.
pub fn pending_cursor(last: &Event) -> String {
    format!("{}:{}", last.created_at_ms, last.id)
}

/// Read a cursor made by [`pending_cursor`]; `None` for a malformed one (start over).
pub fn parse_pending_cursor(cursor: &str) -> Option<(u64, &str)> {
    let (at, id) = cursor.split_once(':')?;
    Some((at.parse().ok()?, id))
}
