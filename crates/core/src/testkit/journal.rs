//! The step journal's checks in the store behaviour suite ([`Store::put_step`]).
use std::sync::Arc;
use std::time::Duration;

use super::{LONG, TTL, acquire, fresh_key, req, take_over};
use crate::store::{AcquireKind, Claim, Journal, Store, StoredOutcome};

async fn journal(store: &dyn Store, key: &crate::store::RecordKey) -> Journal {
    store.get(key).await.expect("get").expect("the record exists").steps
}

fn steps(pairs: &[(u32, &str)]) -> Journal {
    pairs.iter().map(|(n, s)| (*n, (*s).to_owned())).collect()
}

/// The owner's stored steps are there for the execution that takes over after its lease ran
/// out; the new owner adds to them.
pub async fn journal_survives_a_takeover(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "journal-takeover");
    let lease = Duration::from_millis(300);
    let owner = acquire(&*store, &key, "fp", lease).await;
    assert!(journal(&*store, &key).await.is_empty(), "a fresh execution has no journal");
    assert!(store.put_step(&key, owner, 0, r#"{"a":1}"#, lease).await.unwrap());
    assert!(store.put_step(&key, owner, 1, r#"{"b":2}"#, lease).await.unwrap());
    tokio::time::sleep(Duration::from_millis(450)).await;
    let taker = take_over(&*store, &key, LONG).await;
    assert!(store.renew(&key, taker, LONG).await.unwrap(), "the take-over confirms");
    assert_eq!(journal(&*store, &key).await, steps(&[(0, r#"{"a":1}"#), (1, r#"{"b":2}"#)]));
    assert!(store.put_step(&key, taker, 2, r#"{"c":3}"#, LONG).await.unwrap());
    assert_eq!(journal(&*store, &key).await.len(), 3);
}

/// A stale owner (taken over, then confirmed) can no longer write a step, and its write
/// changes nothing; a stranger's token neither.
pub async fn journal_write_by_a_stale_owner_is_refused(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "journal-stale");
    let lease = Duration::from_millis(200);
    let owner = acquire(&*store, &key, "fp", lease).await;
    assert!(store.put_step(&key, owner, 0, "1", lease).await.unwrap());
    tokio::time::sleep(Duration::from_millis(350)).await;
    let taker = take_over(&*store, &key, LONG).await;
    assert!(
        !store.put_step(&key, taker, 1, "2", LONG).await.unwrap(),
        "an unconfirmed take-over must confirm before it writes steps"
    );
    assert!(store.renew(&key, taker, LONG).await.unwrap());
    assert!(!store.put_step(&key, owner, 1, "stale", LONG).await.unwrap(), "the stale owner is fenced out");
    assert!(!store.put_step(&key, owner, 0, "stale", LONG).await.unwrap());
    assert!(!store.put_step(&key, taker + 1_000_000, 1, "x", LONG).await.unwrap(), "a stranger is refused");
    assert_eq!(journal(&*store, &key).await, steps(&[(0, "1")]));
}

/// Each stored step extends the lease: a flow of short steps outlives a short lease.
pub async fn journal_write_extends_the_lease(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "journal-lease");
    let lease = Duration::from_millis(300);
    let owner = acquire(&*store, &key, "fp", lease).await;
    for step in 0..4 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(store.put_step(&key, owner, step, "{}", lease).await.unwrap());
    }
    // 600 ms after the claim, twice its lease: still the owner's.
    assert!(matches!(
        store.claim(req(&key, "fp", false, LONG, TTL)).await.unwrap(),
        Claim::InProgress { .. }
    ));
}

/// A step write by the live owner cancels an unconfirmed take-over, as its heartbeat does.
pub async fn journal_write_cancels_an_unconfirmed_takeover(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "journal-cancel");
    let lease = Duration::from_millis(200);
    let owner = acquire(&*store, &key, "fp", lease).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    let taker = take_over(&*store, &key, LONG).await;
    assert!(store.put_step(&key, owner, 0, r#""late but alive""#, LONG).await.unwrap());
    assert!(!store.renew(&key, taker, LONG).await.unwrap(), "the take-over was cancelled");
    assert_eq!(journal(&*store, &key).await, steps(&[(0, r#""late but alive""#)]));
}

/// The journal belongs to one execution: none once it finished, none for a force retry of
/// a failure, none after a release and a fresh claim; no step lands on a finished record.
pub async fn journal_ends_with_the_execution(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "journal-end");
    let t1 = acquire(&*store, &key, "fp", LONG).await;
    assert!(store.put_step(&key, t1, 0, "1", LONG).await.unwrap());
    let failed = StoredOutcome::Failed(r#"{"code":-32006,"message":"Upstream failed"}"#.into());
    assert!(store.complete(&key, t1, &failed, TTL).await.unwrap());
    assert!(journal(&*store, &key).await.is_empty(), "a finished record keeps no journal");
    assert!(!store.put_step(&key, t1, 1, "2", LONG).await.unwrap(), "no step lands on a finished record");
    let t2 = match store.claim(req(&key, "fp", true, LONG, TTL)).await.unwrap() {
        Claim::Acquired { token, kind: AcquireKind::ForceRetry } => token,
        other => panic!("expected a forced claim, got {other:?}"),
    };
    assert!(journal(&*store, &key).await.is_empty(), "a force retry starts from the first step");
    assert!(store.put_step(&key, t2, 0, "again", LONG).await.unwrap());
    assert!(store.release(&key, t2).await.unwrap());
    let t3 = acquire(&*store, &key, "fp", LONG).await;
    assert!(journal(&*store, &key).await.is_empty(), "a released key's next execution starts afresh");
    assert!(!store.put_step(&key, t2, 1, "x", LONG).await.unwrap());
    assert!(store.put_step(&key, t3, 0, "3", LONG).await.unwrap());
}

/// Outputs come back byte for byte (escapes, number spellings, member order, non-ASCII), and
/// writing a step again replaces it.
pub async fn journal_keeps_outputs_byte_for_byte(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "journal-bytes");
    let owner = acquire(&*store, &key, "fp", LONG).await;
    let odd = r#"{"z":1.0e3,"a":"\u00e9\n\"q\"","big":12345678901234567890123,"s":"ünï 💳"}"#;
    assert!(store.put_step(&key, owner, 7, odd, LONG).await.unwrap());
    assert!(store.put_step(&key, owner, 10, "[1, 2]", LONG).await.unwrap());
    assert!(store.put_step(&key, owner, 10, "[3]", LONG).await.unwrap());
    assert_eq!(journal(&*store, &key).await, steps(&[(7, odd), (10, "[3]")]));
}
