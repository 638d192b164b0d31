//! A time bound on every store call (`store.op_timeout_ms`): a store that hangs is a store
//! that fails.
//!
//! A PostgreSQL primary whose commits wait for a synchronous standby that is gone, a Redis
//! node that stopped answering on an open connection: neither refuses anything, both just
//! never answer. [`Bounded`] wraps a [`Store`] so that each call answers within its bound or
//! fails with a [`StoreError`] — the gateway then answers `-32004` and runs nothing, exactly
//! as when the store is down. The dispatcher wraps every store but a local one
//! ([`Store::local`]); a call that is ready on its first poll arms no timer.
//!
//! Health: a write that ran out of time marks the store [`Health::Down`] until a later write
//! succeeds or [`TIMEOUT_REMEMBERED`] passes (a store whose reads answer but whose commits
//! hang would otherwise look healthy to `/healthz`); the inner store's own health check is
//! bounded too.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use crate::future::BoxFuture;
use crate::store::{
    Claim, ClaimRequest, Event, EventFilter, Health, PendingPage, Record, RecordKey, Store, StoreError,
    StoredOutcome, now_ms,
};

/// How long a write that ran out of time keeps the store unhealthy when no write succeeds
/// after it.
pub const TIMEOUT_REMEMBERED: Duration = Duration::from_secs(30);

/// A [`Store`] whose every call answers within `limit`.
pub struct Bounded {
    inner: Arc<dyn Store>,
    limit: Duration,
    /// When (ms since the epoch) a write last succeeded, and last ran out of time.
    last_ok: AtomicU64,
    last_timeout: AtomicU64,
}

impl Bounded {
    pub fn new(inner: Arc<dyn Store>, limit: Duration) -> Bounded {
        Bounded { inner, limit, last_ok: AtomicU64::new(0), last_timeout: AtomicU64::new(0) }
    }

    /// `store` bounded by `limit`, unless it is local (it never waits) or already bounded.
    pub fn wrap(store: Arc<dyn Store>, limit: Duration) -> Arc<dyn Store> {
        if store.local() || store.is_bounded() { store } else { Arc::new(Bounded::new(store, limit)) }
    }

    fn timed_out(&self, what: &str) -> StoreError {
        StoreError::new(format!(
            "{} store: {what} did not answer within {} ms (store.op_timeout_ms)",
            self.inner.name(),
            self.limit.as_millis()
        ))
    }

    /// `call` within the bound; a write's success or time-out is remembered for health.
    fn bound<'a, T: Send + 'a>(
        &'a self,
        what: &'static str,
        write: bool,
        call: impl Future<Output = Result<T, StoreError>> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        Box::pin(async move {
            let mut call = std::pin::pin!(call);
            // Most calls of a healthy store are still waiting here; one that is not needs
            // no timer.
            let result = match futures::poll!(call.as_mut()) {
                Poll::Ready(done) => done,
                Poll::Pending => match tokio::time::timeout(self.limit, call).await {
                    Ok(done) => done,
                    Err(_) => {
                        if write {
                            self.last_timeout.store(now_ms(), Ordering::Relaxed);
                        }
                        return Err(self.timed_out(what));
                    }
                },
            };
            if write && result.is_ok() {
                self.last_ok.store(now_ms(), Ordering::Relaxed);
            }
            result
        })
    }

    /// Whether a write ran out of time with no write succeeding since, recently.
    fn writes_hang(&self) -> bool {
        let (ok, timeout) = (self.last_ok.load(Ordering::Relaxed), self.last_timeout.load(Ordering::Relaxed));
        timeout > ok && now_ms().saturating_sub(timeout) < TIMEOUT_REMEMBERED.as_millis() as u64
    }
}

impl Store for Bounded {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        self.bound("a claim", true, self.inner.claim(req))
    }

    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.bound("a lease renewal", true, self.inner.renew(key, token, lease))
    }

    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        outcome: &'a StoredOutcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.bound("a completion", true, self.inner.complete(key, token, outcome, ttl))
    }

    fn put_step<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        step: u32,
        output: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.bound("a step's output", true, self.inner.put_step(key, token, step, output, lease))
    }

    fn release<'a>(&'a self, key: &'a RecordKey, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.bound("a release", true, self.inner.release(key, token))
    }

    fn get<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        self.bound("a read", false, self.inner.get(key))
    }

    fn put_event<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.bound("an event", true, self.inner.put_event(event))
    }

    fn get_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>> {
        self.bound("an event read", false, self.inner.get_event(id))
    }

    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        outcome: &'a StoredOutcome,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.bound("an event's outcome", true, self.inner.finish_event(id, token, outcome))
    }

    fn put_event_steps<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        steps: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.bound("an event's steps", true, self.inner.put_event_steps(id, token, steps))
    }

    fn restart_event<'a>(&'a self, id: &'a str, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.bound("an event's restart", true, self.inner.restart_event(id, token))
    }

    fn pending_events<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<PendingPage, StoreError>> {
        self.bound("a pending-events listing", false, self.inner.pending_events(cursor, limit))
    }

    fn list_events<'a>(
        &'a self,
        tenant: &'a str,
        filter: &'a EventFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<PendingPage, StoreError>> {
        self.bound("an events listing", false, self.inner.list_events(tenant, filter, cursor, limit))
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn is_bounded(&self) -> bool {
        true
    }

    fn cache_successes(&self) -> bool {
        self.inner.cache_successes()
    }

    fn settled(&self, req: &ClaimRequest<'_>) -> Option<Claim> {
        self.inner.settled(req)
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.bound("a ping", false, self.inner.ping())
    }

    fn health(&self) -> BoxFuture<'_, Health> {
        Box::pin(async move {
            let health = match tokio::time::timeout(self.limit, self.inner.health()).await {
                Ok(health) => health,
                Err(_) => return Health::Down(self.timed_out("the health check").to_string()),
            };
            match health {
                Health::Ok if self.writes_hang() => Health::Down(
                    self.timed_out("a write").to_string() + " (recently, and none succeeded since)",
                ),
                other => other,
            }
        })
    }

    fn local(&self) -> bool {
        self.inner.local()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ClaimRequest;

    /// A store whose every call hangs (a PostgreSQL commit waiting for a standby that is gone).
    struct Hanging;

    impl Store for Hanging {
        fn claim<'a>(&'a self, _: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
            Box::pin(std::future::pending())
        }
        fn renew<'a>(
            &'a self,
            _: &'a RecordKey,
            _: u64,
            _: Duration,
        ) -> BoxFuture<'a, Result<bool, StoreError>> {
            Box::pin(std::future::pending())
        }
        fn complete<'a>(
            &'a self,
            _: &'a RecordKey,
            _: u64,
            _: &'a StoredOutcome,
            _: Duration,
        ) -> BoxFuture<'a, Result<bool, StoreError>> {
            Box::pin(std::future::pending())
        }
        fn put_step<'a>(
            &'a self,
            _: &'a RecordKey,
            _: u64,
            _: u32,
            _: &'a str,
            _: Duration,
        ) -> BoxFuture<'a, Result<bool, StoreError>> {
            Box::pin(std::future::pending())
        }
        fn release<'a>(&'a self, _: &'a RecordKey, _: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
            Box::pin(std::future::pending())
        }
        fn get<'a>(&'a self, _: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
            Box::pin(async { Ok(None) })
        }
        fn put_event<'a>(&'a self, _: &'a Event) -> BoxFuture<'a, Result<bool, StoreError>> {
            Box::pin(std::future::pending())
        }
        fn get_event<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>> {
            Box::pin(async { Ok(None) })
        }
        fn finish_event<'a>(
            &'a self,
            _: &'a str,
            _: u64,
            _: &'a StoredOutcome,
        ) -> BoxFuture<'a, Result<bool, StoreError>> {
            Box::pin(std::future::pending())
        }
        fn put_event_steps<'a>(
            &'a self,
            _: &'a str,
            _: u64,
            _: &'a str,
        ) -> BoxFuture<'a, Result<bool, StoreError>> {
            Box::pin(std::future::pending())
        }
        fn restart_event<'a>(&'a self, _: &'a str, _: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
            Box::pin(std::future::pending())
        }
        fn pending_events<'a>(
            &'a self,
            _: Option<&'a str>,
            _: usize,
        ) -> BoxFuture<'a, Result<PendingPage, StoreError>> {
            Box::pin(async { Ok((Vec::new(), None)) })
        }
        fn list_events<'a>(
            &'a self,
            _: &'a str,
            _: &'a EventFilter,
            _: Option<&'a str>,
            _: usize,
        ) -> BoxFuture<'a, Result<PendingPage, StoreError>> {
            Box::pin(async { Ok((Vec::new(), None)) })
        }
        fn name(&self) -> &'static str {
            "hanging"
        }
    }

    fn key() -> RecordKey {
        RecordKey { tenant: "t".into(), method: "m".into(), key: "k-1".into() }
    }

    /// Writes that hang fail within the bound, and make health `Down` although the store's
    /// reads (and its ping) still answer; a local store is not wrapped.
    #[tokio::test(start_paused = true)]
    async fn a_hanging_write_fails_in_time_and_marks_the_store_down() {
        let store = Bounded::new(Arc::new(Hanging), Duration::from_millis(300));
        assert_eq!(store.health().await, Health::Ok);
        let key = key();
        let req = ClaimRequest {
            key: &key,
            fingerprint: "fp",
            force_retry: false,
            lease: Duration::from_secs(60),
            ttl: Duration::from_secs(600),
        };
        let started = tokio::time::Instant::now();
        let e = store.claim(req).await.expect_err("a hanging claim fails");
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        assert!(e.to_string().contains("a claim did not answer within 300 ms (store.op_timeout_ms)"), "{e}");
        assert!(store.get(&key).await.expect("reads still answer").is_none());
        match store.health().await {
            Health::Down(why) => assert!(why.contains("a write did not answer within 300 ms"), "{why}"),
            other => panic!("health after a hanging write: {other:?}"),
        }
        let memory: Arc<dyn Store> = Arc::new(crate::MemoryStore::new(16));
        assert!(!Bounded::wrap(memory, Duration::from_millis(1)).is_bounded());
    }
}
