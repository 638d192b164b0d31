//! The shared store behaviour suite against the memory store.
use std::sync::Arc;

use oncerpc_core::{MemoryStore, Store};

async fn make_store() -> Option<Arc<dyn Store>> {
    Some(Arc::new(MemoryStore::new(10_000)))
}

oncerpc_core::store_suite!(make_store);

#[tokio::test]
async fn full_memory_store_fails_closed_instead_of_evicting_live_records() {
    use oncerpc_core::store::{Claim, ClaimRequest, RecordKey};
    use std::time::Duration;
    let store = MemoryStore::new(16); // a small store is one shard: its capacity is exact
    let mut refused = 0;
    for i in 0..64 {
        let key = RecordKey::new("t", "m", format!("k{i}"));
        let r = store
            .claim(ClaimRequest {
                key: &key,
                fingerprint: "fp",
                force_retry: false,
                lease: Duration::from_secs(60),
                ttl: Duration::from_secs(60),
            })
            .await;
        match r {
            Ok(Claim::Acquired { .. }) => {}
            Err(_) => refused += 1,
            Ok(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(refused, 48, "a bounded store must refuse when full");
    assert_eq!(store.len(), 16);
}
