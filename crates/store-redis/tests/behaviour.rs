//! The shared store behaviour suite against a real Redis server (`ONCERPC_TEST_REDIS_URL`).
use std::sync::Arc;
use std::time::Duration;

use oncerpc_core::Store;
use oncerpc_core::store::{Claim, ClaimRequest, RecordKey, StoredOutcome};
use oncerpc_store_redis::{RedisOptions, RedisStore};

fn url() -> Option<String> {
    oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_URL", "Redis")
}

/// A fresh namespace per store: the suite also uses fresh tenants, this keeps the pending-event
/// index of each test apart too.
fn prefix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "oncerpc-test-{}-{}-{}",
        std::process::id(),
        oncerpc_core::store::now_ms(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn make_store() -> Option<Arc<dyn Store>> {
    let url = url()?;
    let store = RedisStore::connect(&url, &prefix()).await.expect("connect to Redis");
    assert!(!store.is_cluster(), "ONCERPC_TEST_REDIS_URL must be a standalone server");
    Some(Arc::new(store))
}

oncerpc_core::store_suite!(make_store);

fn claim_req(key: &RecordKey) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        fingerprint: "fp",
        force_retry: false,
        lease: Duration::from_secs(60),
        ttl: Duration::from_secs(60),
    }
}

#[tokio::test]
async fn namespacing_cannot_be_fooled_by_separators_in_names() {
    let Some(store) = make_store().await else { return };
    // Without length prefixes the first two would map to the same Redis key; braces in names
    // cannot move a record out of its hash tag.
    let keys = [
        RecordKey::new("t:1", "m", "key-1"),
        RecordKey::new("t", ":1m", "key-1"),
        RecordKey::new("{t", "}m", "key-1"),
        RecordKey::new("t}", "{m}", "{key-1}"),
    ];
    for k in &keys {
        let r = store.claim(claim_req(k)).await.unwrap();
        assert!(matches!(r, Claim::Acquired { .. }), "{k:?}: {r:?}");
    }
}

/// `wait_replicas = 1` against a server without replicas: the claim is `Unconfirmed`, naming
/// the replicas; a completion is refused; without `WAIT` the same calls work.
#[tokio::test]
async fn wait_replicas_without_replicas_fails_closed() {
    let Some(url) = url() else { return };
    let opts = RedisOptions { wait_replicas: 1, ..RedisOptions::new(prefix()) };
    let waiting = RedisStore::connect_with(&url, opts.clone()).await.expect("connect");
    let key = oncerpc_core::testkit::fresh_key("m", "wait");
    let started = std::time::Instant::now();
    // Written but not confirmed: the caller must give it back (the gateway does, at once).
    let token = match waiting.claim(claim_req(&key)).await.expect("a claim") {
        Claim::Unconfirmed { token, error, .. } => {
            assert!(error.contains("written to 0 of 1 replicas"), "{error}");
            token
        }
        c => panic!("no replica can acknowledge the claim: {c:?}"),
    };
    assert!(started.elapsed() >= Duration::from_millis(900), "WAIT waited for the replicas");
    // A claim that did not write is not waited for.
    assert!(matches!(waiting.claim(claim_req(&key)).await.unwrap(), Claim::InProgress { .. }));
    assert!(waiting.release(&key, token).await.unwrap(), "given back");
    // A completion that lands is waited for too.
    let plain =
        RedisStore::connect_with(&url, RedisOptions { wait_replicas: 0, ..opts }).await.expect("connect");
    let other = oncerpc_core::testkit::fresh_key("m", "no-wait");
    let token = match plain.claim(claim_req(&other)).await.unwrap() {
        Claim::Acquired { token, .. } => token,
        c => panic!("{c:?}"),
    };
    let ok = StoredOutcome::Succeeded("1".into());
    let e = waiting.complete(&other, token, &ok, Duration::from_secs(60)).await.expect_err("not replicated");
    assert!(e.to_string().contains("replicas"), "{e}");
    assert!(
        plain.complete(&other, token, &ok, Duration::from_secs(60)).await.unwrap(),
        "already landed: idempotent"
    );
}

/// Paging over an index with stale entries interleaved (expired events, entries whose event
/// was never written): every live pending event is listed once, in order; stale entries are
/// dropped on the way, except a young one (its event may be being created right now).
#[tokio::test]
async fn pending_pages_skip_and_drop_stale_index_entries() {
    use oncerpc_core::store::{Event, EventStatus, now_ms};
    let Some(url) = url() else { return };
    let prefix = prefix();
    let store = RedisStore::connect(&url, &prefix).await.expect("connect");
    let event = |i: u64, ttl_ms: u64| {
        let now = now_ms();
        Event {
            id: format!("evt_{i:04}"),
            record: RecordKey::new("t", "flow", format!("k-{i}")),
            fingerprint: "fp".into(),
            params: None,
            return_step: None,
            tags: vec![],
            status: EventStatus::Processing,
            outcome: None,
            created_at_ms: 1_000_000 + i / 4,
            updated_at_ms: now,
            expires_at_ms: now + ttl_ms,
            token: 1,
            steps: None,
            created_by: None,
        }
    };
    let mut live = Vec::new();
    for i in 0..120 {
        // Every other event expires before the listing.
        let ev = event(i, if i % 2 == 0 { 3_600_000 } else { 150 });
        store.put_event(&ev).await.unwrap();
        if i % 2 == 0 {
            live.push(ev.id);
        }
    }
    let mut conn =
        redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let pending = format!("{prefix}:pending");
    for i in 0..5 {
        // Index entries without an event: old ones are dropped, young ones kept.
        let _: () = redis::cmd("ZADD")
            .arg(&pending)
            .arg(1_000_010 + i)
            .arg(format!("evt_old_{i}"))
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("ZADD")
            .arg(&pending)
            .arg(now_ms())
            .arg(format!("evt_new_{i}"))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut got = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let (page, next) = store.pending_events(cursor.as_deref(), 7).await.unwrap();
        assert!(page.len() <= 7);
        got.extend(page.into_iter().map(|e| e.id));
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(got, live, "every live event once, oldest first");
    let left: usize = redis::cmd("ZCARD").arg(&pending).query_async(&mut conn).await.unwrap();
    assert_eq!(left, live.len() + 5, "expired and old orphan entries dropped, young orphans kept");
}
