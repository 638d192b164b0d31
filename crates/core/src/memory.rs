//! The in-memory store: for tests and ephemeral development. Bounded, with TTL eviction;
//! when it is full of live records it refuses new claims (fail closed) rather than evict a
//! record that still guards an execution.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use foldhash::fast::RandomState;

use crate::future::BoxFuture;
use crate::store::{
    Claim, ClaimRequest, Event, EventStatus, Record, RecordKey, Release, Store, StoreError, StoredOutcome,
    decide, decide_complete, decide_release, decide_renew, decide_step, now_ms, parse_pending_cursor,
    pending_cursor, status_of,
};

/// Most shards: claims on different keys rarely wait for each other, and a shard that grows
/// rehashes only its own share of the records (a pause for the keys of that shard only).
const MAX_SHARDS: usize = 64;
/// Fewest records per shard: a small store is one map, so its capacity is exact.
const MIN_SHARD_CAPACITY: usize = 1024;

/// foldhash, seeded per process: SipHash (std's default) was ~1% of the server's CPU on the
/// command benchmarks, and the keys are scoped per tenant, so flooding one map only slows the
/// tenant that does it (and the seed is random).
type Shard = Mutex<HashMap<RecordKey, Record, RandomState>>;

pub struct MemoryStore {
    shards: Vec<Shard>,
    hasher: RandomState,
    per_shard_capacity: usize,
    events: Mutex<HashMap<String, Event>>,
    /// One counter for every key: tokens never repeat, whatever was deleted or evicted.
    tokens: AtomicU64,
}

impl MemoryStore {
    /// A store holding at most `capacity` live records (up to 63 more when `capacity` is over
    /// 1,024: it is split evenly between the shards, rounded up). A store may refuse a new key
    /// a little before it is full, when that key's shard is.
    pub fn new(capacity: usize) -> Self {
        let shards = (capacity / MIN_SHARD_CAPACITY).clamp(1, MAX_SHARDS);
        MemoryStore {
            shards: (0..shards).map(|_| Mutex::new(HashMap::with_hasher(RandomState::default()))).collect(),
            hasher: RandomState::default(),
            per_shard_capacity: capacity.div_ceil(shards).max(1),
            events: Mutex::new(HashMap::new()),
            tokens: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &RecordKey) -> &Shard {
        // The top bits: the maps use the low ones (with another seed) to place entries.
        &self.shards[(self.hasher.hash_one(key) >> 32) as usize % self.shards.len()]
    }

    fn events_lock(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, Event>>, StoreError> {
        self.events.lock().map_err(|_| StoreError::new("memory store poisoned"))
    }

    /// Live records (for tests and metrics).
    pub fn len(&self) -> usize {
        let now = now_ms();
        self.shards
            .iter()
            .map(|s| s.lock().expect("shard").values().filter(|r| r.expires_at_ms > now).count())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new(100_000)
    }
}

impl Store for MemoryStore {
    fn settled(&self, req: &ClaimRequest<'_>) -> Option<Claim> {
        let map = self.shard(req.key).lock().ok()?;
        let existing = map.get(req.key)?;
        // `decide` without writing: a claim that would acquire (and draw a token, never used
        // here) is left to `claim`.
        match decide(Some(existing), req, now_ms(), || 0) {
            (claim @ (Claim::Done(..) | Claim::FingerprintMismatch | Claim::ForceRetryRefused), None) => {
                Some(claim)
            }
            _ => None,
        }
    }

    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let result = (|| {
            let now = now_ms();
            let mut map = self.shard(req.key).lock().map_err(|_| StoreError::new("memory store poisoned"))?;
            // A full shard first drops its expired records; if it is still full, a new key is
            // refused (evicting a live record would let its key execute again).
            if map.len() >= self.per_shard_capacity && !map.contains_key(req.key) {
                map.retain(|_, r| r.expires_at_ms > now);
                if map.len() >= self.per_shard_capacity {
                    tracing::error!(
                        capacity = self.per_shard_capacity * self.shards.len(),
                        "memory store full of live records: refusing new keys (raise memory://?capacity=N or use sqlite://)"
                    );
                    return Err(StoreError::new("memory store is full of live records"));
                }
            }
            // One probe of the table (it is large and mostly out of cache) for the decision
            // and the write.
            let slot = map.entry(req.key.clone());
            let existing = match &slot {
                Entry::Occupied(o) => Some(o.get()),
                Entry::Vacant(_) => None,
            };
            let (claim, new) =
                decide(existing, &req, now, || self.tokens.fetch_add(1, Ordering::Relaxed) + 1);
            if let Some(rec) = new {
                slot.insert_entry(rec);
            }
            Ok(claim)
        })();
        Box::pin(std::future::ready(result))
    }

    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let result = (|| {
            let mut map = self.shard(key).lock().map_err(|_| StoreError::new("memory store poisoned"))?;
            let Some(slot) = map.get_mut(key) else { return Ok(false) };
            match decide_renew(Some(&*slot), token, lease, now_ms()) {
                Some(rec) => {
                    *slot = rec;
                    Ok(true)
                }
                None => Ok(false),
            }
        })();
        Box::pin(std::future::ready(result))
    }

    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        outcome: &'a StoredOutcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let result = (|| {
            let mut map = self.shard(key).lock().map_err(|_| StoreError::new("memory store poisoned"))?;
            let Some(slot) = map.get_mut(key) else { return Ok(false) };
            match decide_complete(Some(&*slot), token, outcome, ttl, now_ms()) {
                Some(Some(rec)) => {
                    *slot = rec;
                    Ok(true)
                }
                Some(None) => Ok(true),
                None => Ok(false),
            }
        })();
        Box::pin(std::future::ready(result))
    }

    fn put_step<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        step: u32,
        output: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let result = (|| {
            let mut map = self.shard(key).lock().map_err(|_| StoreError::new("memory store poisoned"))?;
            let Some(slot) = map.get_mut(key) else { return Ok(false) };
            match decide_step(Some(&*slot), token, step, output, lease, now_ms()) {
                Some(rec) => {
                    *slot = rec;
                    Ok(true)
                }
                None => Ok(false),
            }
        })();
        Box::pin(std::future::ready(result))
    }

    fn release<'a>(&'a self, key: &'a RecordKey, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        let result = (|| {
            let mut map = self.shard(key).lock().map_err(|_| StoreError::new("memory store poisoned"))?;
            match decide_release(map.get(key), token) {
                Release::Delete => {
                    map.remove(key);
                    Ok(true)
                }
                Release::Withdraw(rec) => {
                    map.insert(key.clone(), rec);
                    Ok(true)
                }
                Release::Refused => Ok(false),
            }
        })();
        Box::pin(std::future::ready(result))
    }

    fn get<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        let result = (|| {
            let map = self.shard(key).lock().map_err(|_| StoreError::new("memory store poisoned"))?;
            Ok(map.get(key).filter(|r| r.expires_at_ms > now_ms()).cloned())
        })();
        Box::pin(std::future::ready(result))
    }

    fn put_event<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<bool, StoreError>> {
        let result = self.events_lock().map(|mut events| {
            let now = now_ms();
            events.retain(|_, e| e.expires_at_ms > now);
            // A live event keeps its creation: when and by whom.
            let (created_at_ms, created_by) = match events.get(&event.id) {
                Some(stored) if stored.token >= event.token => return false,
                Some(stored) => (stored.created_at_ms, stored.created_by.clone()),
                None => (event.created_at_ms, event.created_by.clone()),
            };
            events.insert(event.id.clone(), Event { created_at_ms, created_by, ..event.clone() });
            true
        });
        Box::pin(std::future::ready(result))
    }

    fn get_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>> {
        let result =
            self.events_lock().map(|events| events.get(id).filter(|e| e.expires_at_ms > now_ms()).cloned());
        Box::pin(std::future::ready(result))
    }

    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        outcome: &'a StoredOutcome,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let result = self.events_lock().map(|mut events| match events.get_mut(id) {
            Some(e) if e.token == token => {
                e.status = status_of(outcome);
                e.outcome = Some(outcome.clone());
                e.updated_at_ms = now_ms();
                true
            }
            _ => false,
        });
        Box::pin(std::future::ready(result))
    }

    fn put_event_steps<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        steps: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let result = self.events_lock().map(|mut events| match events.get_mut(id) {
            Some(e) if e.token == token => {
                e.steps = Some(steps.to_owned());
                e.updated_at_ms = now_ms();
                true
            }
            _ => false,
        });
        Box::pin(std::future::ready(result))
    }

    fn restart_event<'a>(&'a self, id: &'a str, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        let result = self.events_lock().map(|mut events| match events.get_mut(id) {
            Some(e) if token > e.token => {
                e.status = EventStatus::Processing;
                e.outcome = None;
                e.token = token;
                e.updated_at_ms = now_ms();
                true
            }
            _ => false,
        });
        Box::pin(std::future::ready(result))
    }

    fn pending_events<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<crate::store::PendingPage, StoreError>> {
        let after = cursor.and_then(parse_pending_cursor);
        let result = self.events_lock().map(|events| {
            let now = now_ms();
            let mut v: Vec<&Event> = events
                .values()
                .filter(|e| e.status == EventStatus::Processing && e.expires_at_ms > now)
                .filter(|e| after.is_none_or(|(at, id)| (e.created_at_ms, e.id.as_str()) > (at, id)))
                .collect();
            v.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
            v.truncate(limit);
            let page: Vec<Event> = v.into_iter().cloned().collect();
            let next = (page.len() == limit).then(|| page.last().map(pending_cursor)).flatten();
            (page, next)
        });
        Box::pin(std::future::ready(result))
    }

    fn list_events<'a>(
        &'a self,
        tenant: &'a str,
        filter: &'a crate::store::EventFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<crate::store::PendingPage, StoreError>> {
        let after = cursor.and_then(crate::store::parse_list_cursor);
        let result = self.events_lock().map(|events| {
            let now = now_ms();
            let mut v: Vec<&Event> = events
                .values()
                .filter(|e| &*e.record.tenant == tenant && e.expires_at_ms > now && filter.matches(e))
                .filter(|e| crate::store::listed_after(e, after))
                .collect();
            v.sort_by(|a, b| (b.created_at_ms, &b.id).cmp(&(a.created_at_ms, &a.id)));
            let more = v.len() > limit;
            v.truncate(limit);
            let page: Vec<Event> = v.into_iter().cloned().collect();
            let next = if more { page.last().map(crate::store::list_cursor) } else { None };
            (page, next)
        });
        Box::pin(std::future::ready(result))
    }

    fn name(&self) -> &'static str {
        "memory"
    }

    fn cache_successes(&self) -> bool {
        false
    }

    fn local(&self) -> bool {
        true
    }
}
