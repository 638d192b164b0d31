//! The shared store behaviour suite against a real Redis server (`ONCERPC_TEST_REDIS_URL`).
use std::sync::Arc;

use oncerpc_core::Store;
use oncerpc_store_redis::RedisStore;

async fn make_store() -> Option<Arc<dyn Store>> {
    let url = oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_URL", "Redis")?;
    // A fresh namespace per test: the suite also uses fresh tenants, this keeps the token
    // counter and the pending-event index of each test apart too.
    let prefix = format!("oncerpc-test-{}-{}", std::process::id(), uuid_like());
    Some(Arc::new(RedisStore::connect(&url, &prefix).await.expect("connect to Redis")))
}

fn uuid_like() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

oncerpc_core::store_suite!(make_store);

#[tokio::test]
async fn namespacing_cannot_be_fooled_by_separators_in_names() {
    use oncerpc_core::store::{Claim, ClaimRequest, RecordKey};
    use std::time::Duration;
    let Some(store) = make_store().await else { return };
    // Without length prefixes these two would map to the same Redis key.
    let a = RecordKey::new("t:1", "m", "key-1");
    let b = RecordKey::new("t", ":1m", "key-1");
    for k in [&a, &b] {
        let r = store
            .claim(ClaimRequest {
                key: k,
                fingerprint: "fp",
                force_retry: false,
                lease: Duration::from_secs(60),
                ttl: Duration::from_secs(60),
            })
            .await
            .unwrap();
        assert!(matches!(r, Claim::Acquired { .. }), "{k:?}: {r:?}");
    }
}
