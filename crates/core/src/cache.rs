//! A process-local cache of *succeeded* records, so duplicates are answered without a store
//! round trip (for SQLite that is a trip through the writer thread; for Redis and PostgreSQL
//! a network round trip).
//!
//! Why it is safe, for every store and across replicas: a succeeded record never changes
//! until it expires — force retry of a success is refused (`-32003`), the fingerprint is
//! fixed, only a processing record can be released, and take-over applies to processing
//! records only. So a cached success answers exactly what the store would: the outcome
//! (`Done`), `FingerprintMismatch` for other params, `ForceRetryRefused` for a force retry.
//! Failed records are not cached: another process may force-retry them. Entries live at
//! most [`MAX_AGE`] (and never past the record's own expiry as this process knows it), so
//! a record that expired in the store is at most that stale here — which errs on the side
//! of not executing again.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use foldhash::fast::RandomState;

use crate::store::{Claim, RecordKey, StoredOutcome, now_ms};

/// The longest an entry is trusted.
pub const MAX_AGE: Duration = Duration::from_secs(60);
const SHARDS: usize = 16;

struct Entry {
    fingerprint: String,
    result: Arc<str>,
    valid_until_ms: u64,
}

/// Bounded, sharded; a full shard is simply cleared (an eviction only costs a store trip).
pub(crate) struct DoneCache {
    shards: Vec<Mutex<HashMap<RecordKey, Entry, RandomState>>>,
    per_shard: usize,
    /// foldhash, seeded per process (SipHash was a visible share of a duplicate's CPU).
    hasher: RandomState,
}

impl DoneCache {
    pub fn new(capacity: usize) -> Self {
        DoneCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::with_hasher(RandomState::default()))).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: RandomState::default(),
        }
    }

    fn shard(&self, key: &RecordKey) -> &Mutex<HashMap<RecordKey, Entry, RandomState>> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// What the store would answer to this claim, if the record is a known success.
    pub fn claim(&self, key: &RecordKey, fingerprint: &str, force_retry: bool) -> Option<Claim> {
        let map = self.shard(key).lock().ok()?;
        let e = map.get(key)?;
        let now = now_ms();
        if e.valid_until_ms <= now {
            return None;
        }
        Some(if e.fingerprint != fingerprint {
            Claim::FingerprintMismatch
        } else if force_retry {
            Claim::ForceRetryRefused
        } else {
            Claim::Done(StoredOutcome::Succeeded(e.result.to_string()), e.valid_until_ms - now)
        })
    }

    /// Remember a success that lives `ttl` from now (at most [`MAX_AGE`]).
    pub fn insert(&self, key: &RecordKey, fingerprint: &str, outcome: &StoredOutcome, ttl: Duration) {
        let StoredOutcome::Succeeded(result) = outcome else { return };
        let Ok(mut map) = self.shard(key).lock() else { return };
        if map.len() >= self.per_shard && !map.contains_key(key) {
            map.clear();
        }
        let valid_until_ms = now_ms() + ttl.min(MAX_AGE).as_millis() as u64;
        map.insert(
            key.clone(),
            Entry { fingerprint: fingerprint.to_owned(), result: Arc::from(result.as_str()), valid_until_ms },
        );
    }
}
