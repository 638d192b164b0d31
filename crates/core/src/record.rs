//! The record model every store keeps: a record's key, state and stored outcome, its step
//! journal, and what a claim asks and answers. (The `Store` trait and the claim state machine
//! are in `store.rs`, which re-exports all of this.)

use std::sync::Arc;
use std::time::Duration;

/// The scope of a record: `(tenant, method, key)` (SPEC §3).
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
    /// An unconfirmed take-over of a processing record (see [`Claim::Acquired`]).
    pub takeover: Option<TakeOver>,
    /// The step journal of a processing execution ([`Store::put_step`](crate::Store::put_step)): the output of each
    /// finished step, by step index. It survives a take-over (the new owner resumes after
    /// the last stored step); a fresh or force-retried execution starts with none, and a
    /// finished record keeps none.
    pub steps: Journal,
}

/// Step outputs (JSON text, byte for byte as the step answered) by step index.
pub type Journal = std::collections::BTreeMap<u32, String>;

/// A journal as the SQL stores keep it in a text column: a JSON object of step index →
/// output, the outputs as JSON strings (so their bytes are kept exactly). `None` when empty.
pub fn journal_to_json(steps: &Journal) -> Option<String> {
    if steps.is_empty() {
        return None;
    }
    let map: serde_json::Map<String, serde_json::Value> =
        steps.iter().map(|(n, out)| (n.to_string(), serde_json::Value::String(out.clone()))).collect();
    Some(serde_json::Value::Object(map).to_string())
}

/// The inverse of [`journal_to_json`]; an unreadable column reads as an empty journal (the
/// steps then run again, each with its step key: the upstream's deduplication still holds).
pub fn journal_from_json(text: Option<&str>) -> Journal {
    let Some(text) = text else { return Journal::new() };
    match serde_json::from_str::<std::collections::BTreeMap<String, String>>(text) {
        Ok(map) => map.into_iter().filter_map(|(n, out)| Some((n.parse().ok()?, out))).collect(),
        Err(_) => Journal::new(),
    }
}

/// A claimant that found a processing record with an expired lease and asked to take it
/// over. Until it [`Store::renew`](crate::Store::renew)s with `token`, the previous owner keeps its rights: its
/// `complete` still lands (and cancels the take-over), its `renew` cancels the take-over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakeOver {
    pub token: u64,
    /// Until then, other claimants see the record in progress; after it, another claimant
    /// may ask for a take-over in its turn.
    pub until_ms: u64,
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
    ///
    /// With `kind: TakeOver` the caller does **not** own it yet: it must first
    /// [`Store::renew`](crate::Store::renew) with `token` (which fails if the previous owner turned out to be
    /// alive and completed or renewed meanwhile), and only then execute. A take-over claim
    /// whose claimant gave up (its store call timed out, its deadline passed) therefore
    /// never fences out a live owner's outcome.
    Acquired { token: u64, kind: AcquireKind },
    /// Someone else is executing; their lease ends in `retry_after_ms`.
    InProgress { retry_after_ms: u64 },
    /// The execution finished before: replay this. `ttl_left_ms`: how long the record
    /// still lives (by the store's clock), at most a TTL, which bounds any cache of it.
    Done(StoredOutcome, u64),
    /// The key was used with other params.
    FingerprintMismatch,
    /// Force retry of a success: refused, nothing runs.
    ForceRetryRefused,
    /// The claim was written (as `Acquired { token, kind }` would be) but not confirmed: it
    /// reached fewer replicas than the store must wait for (`store.redis_wait_replicas`), so
    /// a failover could undo it. The caller does not run the command: it gives the claim
    /// back at once (so a retry runs without waiting for a lease to end) and answers that
    /// the store is unavailable. `error` says why, for the log.
    Unconfirmed { token: u64, kind: AcquireKind, error: String },
}

/// Why a claim was acquired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireKind {
    /// No live record existed.
    Fresh,
    /// The previous owner's lease had expired. Unconfirmed: [`Store::renew`](crate::Store::renew) first.
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
