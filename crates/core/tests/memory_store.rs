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

/// `settled` answers exactly what a claim would, for the claims that write nothing (a
/// finished record's outcome, a fingerprint mismatch, a refused force retry), and nothing
/// else: an absent key, a processing record, a force retry of a failure are claimed as usual.
#[tokio::test]
async fn settled_answers_only_claims_that_write_nothing() {
    use oncerpc_core::store::{Claim, ClaimRequest, RecordKey, StoredOutcome};
    use std::time::Duration;
    let store = MemoryStore::new(1000);
    let req = |key, fingerprint, force_retry| ClaimRequest {
        key,
        fingerprint,
        force_retry,
        lease: Duration::from_secs(60),
        ttl: Duration::from_secs(60),
    };
    let (ok, failed) = (RecordKey::new("t", "m", "ok"), RecordKey::new("t", "m", "failed"));
    assert_eq!(store.settled(&req(&ok, "fp", false)), None, "absent");
    let Claim::Acquired { token, .. } = store.claim(req(&ok, "fp", false)).await.unwrap() else { panic!() };
    assert_eq!(store.settled(&req(&ok, "fp", false)), None, "processing");
    let outcome = StoredOutcome::Succeeded(r#"{"a": 1.50}"#.into());
    assert!(store.complete(&ok, token, &outcome, Duration::from_secs(60)).await.unwrap());
    for (fp, force) in [("fp", false), ("other", false), ("fp", true)] {
        let settled = store.settled(&req(&ok, fp, force)).expect("answered without a claim");
        let claimed = store.claim(req(&ok, fp, force)).await.unwrap();
        match (&settled, &claimed) {
            (Claim::Done(a, _), Claim::Done(b, _)) => assert_eq!(a, b),
            _ => assert_eq!(settled, claimed),
        }
    }
    let Claim::Acquired { token, .. } = store.claim(req(&failed, "fp", false)).await.unwrap() else {
        panic!()
    };
    let outcome = StoredOutcome::Failed(r#"{"code":-32000,"message":"declined"}"#.into());
    assert!(store.complete(&failed, token, &outcome, Duration::from_secs(60)).await.unwrap());
    assert!(matches!(
        store.settled(&req(&failed, "fp", false)),
        Some(Claim::Done(StoredOutcome::Failed(_), _))
    ));
    assert_eq!(store.settled(&req(&failed, "fp", true)), None, "a force retry of a failure acquires");
    assert!(matches!(store.claim(req(&failed, "fp", true)).await.unwrap(), Claim::Acquired { .. }));
}
