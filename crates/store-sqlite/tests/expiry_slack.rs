//! A finished record is kept for its TTL after its completion, and at most the slack longer
//! (1 % of the TTL, at most a minute): stored within the slack of its claim, it keeps the
//! claim's expiry (the completion then leaves the expiry index alone); stored later, its
//! expiry is written, `ttl` after the completion.
use std::time::Duration;

use oncerpc_core::Store;
use oncerpc_core::store::{Claim, ClaimRequest, RecordKey, StoredOutcome, now_ms};
use oncerpc_store_sqlite::SqliteStore;

const LEASE: Duration = Duration::from_secs(5);

/// Claim `key` with `ttl`, wait `after`, complete it; the finished record's expiry and the
/// clock just before and just after the completion.
async fn finish_after(
    store: &SqliteStore,
    key: &RecordKey,
    ttl: Duration,
    after: Duration,
) -> (u64, u64, u64) {
    let req = ClaimRequest { key, fingerprint: "fp", force_retry: false, lease: LEASE, ttl };
    let Claim::Acquired { token, .. } = store.claim(req).await.unwrap() else { panic!("a fresh key") };
    tokio::time::sleep(after).await;
    let before = now_ms();
    assert!(store.complete(key, token, &StoredOutcome::Succeeded("1".into()), ttl).await.unwrap());
    let done = now_ms();
    let record = store.get(key).await.unwrap().expect("the finished record");
    (record.expires_at_ms, before, done)
}

#[tokio::test]
async fn an_outcome_is_kept_its_ttl_and_at_most_the_slack_longer() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("slack.db")).unwrap();
    // A TTL of 20 s: a slack of 200 ms.
    let ttl = Duration::from_secs(20);
    let (ttl_ms, slack_ms) = (20_000, 200);

    // Stored at once: the claim's expiry is kept, the slack after `claim + ttl`.
    let claimed = now_ms();
    let (expires, _, done) =
        finish_after(&store, &RecordKey::new("t", "m", "soon"), ttl, Duration::ZERO).await;
    assert!(expires >= done + ttl_ms, "kept at least `ttl` after its completion: {expires} < {done} + ttl");
    assert!(expires <= done + ttl_ms + slack_ms, "and at most the slack longer: {expires}");
    assert!(
        expires >= claimed + ttl_ms + slack_ms,
        "the claim's expiry, with its slack ({expires} < {claimed} + ttl + slack): the completion kept it"
    );

    // Stored after the slack: its expiry is `ttl` after the completion.
    let (expires, before, done) =
        finish_after(&store, &RecordKey::new("t", "m", "late"), ttl, Duration::from_millis(400)).await;
    assert!(
        (before + ttl_ms..=done + ttl_ms).contains(&expires),
        "{expires}: not `ttl` after {before}..{done}"
    );
}
