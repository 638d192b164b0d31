//! The store behaviour suite: one set of checks every [`Store`] must pass, written once.
//!
//! A store crate instantiates it in its tests with
//! `oncerpc_core::store_suite!(make_store);` where `async fn make_store() -> Arc<dyn Store>`
//! returns a ready store. Each check uses a fresh random tenant, so stores shared between
//! tests (a Redis or PostgreSQL server) need no cleanup.
//!
//! Why one file of about 730 lines: it is the behaviour contract every store must meet (the
//! `store_suite!` macro and the test functions it instantiates), read as one list by whoever
//! writes a store; the event, journal and listing parts already live in `testkit/`.

use std::sync::Arc;
use std::time::Duration;

use crate::store::{
    AcquireKind, Claim, ClaimRequest, Event, RecordKey, RecordState, Store, StoredOutcome, now_ms,
};

const LONG: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_secs(3600);

mod events;
mod journal;
mod listing;
pub use events::*;
use events::{all_pending, event};
pub use journal::*;
pub use listing::*;

/// A key in a tenant no other check uses.
pub fn fresh_key(method: &str, key: &str) -> RecordKey {
    RecordKey::new(format!("t-{}", uuid::Uuid::new_v4().simple()), method, key)
}

fn req<'a>(key: &'a RecordKey, fp: &'a str, force: bool, lease: Duration, ttl: Duration) -> ClaimRequest<'a> {
    ClaimRequest { key, fingerprint: fp, force_retry: force, lease, ttl }
}

async fn acquire(store: &dyn Store, key: &RecordKey, fp: &str, lease: Duration) -> u64 {
    match store.claim(req(key, fp, false, lease, TTL)).await.expect("claim") {
        Claim::Acquired { token, .. } => token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// The outcome a claim replays; panics on any other answer.
async fn done(store: &dyn Store, key: &RecordKey, fp: &str) -> StoredOutcome {
    match store.claim(req(key, fp, false, LONG, TTL)).await.expect("claim") {
        Claim::Done(outcome, _) => outcome,
        other => panic!("expected Done, got {other:?}"),
    }
}

/// A take-over claim (the lease of the owner ran out); returns the unconfirmed token.
async fn take_over(store: &dyn Store, key: &RecordKey, lease: Duration) -> u64 {
    match store.claim(req(key, "fp", false, lease, TTL)).await.expect("claim") {
        Claim::Acquired { token, kind: AcquireKind::TakeOver } => token,
        other => panic!("expected an unconfirmed take-over, got {other:?}"),
    }
}

/// no record → acquired; completed → the outcome is answered again.
pub async fn claim_complete_then_duplicate(store: Arc<dyn Store>) {
    let key = fresh_key("m", "k-1");
    let token = acquire(&*store, &key, "fp", LONG).await;
    let outcome = StoredOutcome::Succeeded(r#"{"total":1}"#.into());
    assert!(store.complete(&key, token, &outcome, TTL).await.unwrap());
    for _ in 0..3 {
        assert!(matches!(
            store.claim(req(&key, "fp", false, LONG, TTL)).await.unwrap(),
            Claim::Done(o, left) if o == outcome && left > 0 && left <= TTL.as_millis() as u64
        ));
    }
    let rec = store.get(&key).await.unwrap().expect("record");
    assert_eq!(rec.state, RecordState::Done(outcome));
}

/// Many tasks claim one key at once: exactly one wins, the rest see it in progress.
pub async fn claim_race_has_one_winner(store: Arc<dyn Store>) {
    let key = Arc::new(fresh_key("m", "race"));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (store, key) = (store.clone(), key.clone());
        tasks
            .push(tokio::spawn(async move { store.claim(req(&key, "fp", false, LONG, TTL)).await.unwrap() }));
    }
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Claim::Acquired { kind: AcquireKind::Fresh, .. } => won += 1,
            Claim::InProgress { retry_after_ms } => assert!(retry_after_ms > 0 && retry_after_ms <= 60_000),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(won, 1, "exactly one claimant must win");
}

/// Many keys claimed and completed at once, each by several tasks (stores that batch writes
/// of concurrent requests put many of these in one statement): every key has exactly one
/// winner, every completion (and its concurrent retry) lands, and every key then replays
/// its own outcome.
pub async fn many_keys_at_once_each_claimed_and_completed_once(store: Arc<dyn Store>) {
    let tenant = format!("t-{}", uuid::Uuid::new_v4().simple());
    let keys: Vec<Arc<RecordKey>> =
        (0..40).map(|i| Arc::new(RecordKey::new(tenant.as_str(), "m", format!("k-{i}")))).collect();
    let mut tasks = Vec::new();
    for round in 0..5 {
        for (i, key) in keys.iter().enumerate() {
            let (store, key) = (store.clone(), key.clone());
            let fp = format!("fp-{i}");
            tasks.push(tokio::spawn(async move {
                let claim = store.claim(req(&key, &fp, false, LONG, TTL)).await.unwrap();
                (i, round, claim)
            }));
        }
    }
    let mut winners = vec![Vec::new(); keys.len()];
    for t in tasks {
        match t.await.unwrap() {
            (i, _, Claim::Acquired { token, kind: AcquireKind::Fresh }) => winners[i].push(token),
            (_, _, Claim::InProgress { .. }) => {}
            (i, round, other) => panic!("key {i}, round {round}: unexpected {other:?}"),
        }
    }
    let tokens: Vec<u64> = winners
        .iter()
        .enumerate()
        .map(|(i, w)| {
            assert_eq!(w.len(), 1, "key {i}: exactly one winner, got {w:?}");
            w[0]
        })
        .collect();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        for (i, key) in keys.iter().enumerate() {
            let (store, key, token) = (store.clone(), key.clone(), tokens[i]);
            tasks.push(tokio::spawn(async move {
                let outcome = StoredOutcome::Succeeded(format!(r#"{{"key":{i}}}"#));
                store.complete(&key, token, &outcome, TTL).await.unwrap()
            }));
        }
    }
    for t in tasks {
        assert!(t.await.unwrap(), "a completion (or its concurrent retry) did not land");
    }
    for (i, key) in keys.iter().enumerate() {
        let want = StoredOutcome::Succeeded(format!(r#"{{"key":{i}}}"#));
        assert_eq!(done(&*store, key, &format!("fp-{i}")).await, want);
    }
}

/// The owner died: after its lease, exactly one of many claimants takes over.
pub async fn takeover_race_has_one_winner(store: Arc<dyn Store>) {
    let key = Arc::new(fresh_key("m", "takeover"));
    let first = acquire(&*store, &key, "fp", Duration::from_millis(150)).await;
    // Still leased: not taken.
    assert!(matches!(
        store.claim(req(&key, "fp", false, LONG, TTL)).await.unwrap(),
        Claim::InProgress { .. }
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (store, key) = (store.clone(), key.clone());
        tasks
            .push(tokio::spawn(async move { store.claim(req(&key, "fp", false, LONG, TTL)).await.unwrap() }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Claim::Acquired { token, kind } => {
                assert_eq!(kind, AcquireKind::TakeOver);
                winners.push(token)
            }
            Claim::InProgress { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one take-over");
    assert!(winners[0] > first, "the new owner holds a newer fencing token");
    // Unconfirmed, the take-over keeps the others out; confirmed, it owns the record.
    assert!(matches!(
        store.claim(req(&key, "fp", false, LONG, TTL)).await.unwrap(),
        Claim::InProgress { .. }
    ));
    assert!(store.renew(&key, winners[0], LONG).await.unwrap());
    let ok = StoredOutcome::Succeeded("1".into());
    assert!(!store.complete(&key, first, &ok, TTL).await.unwrap(), "the old owner is fenced out");
    assert!(store.complete(&key, winners[0], &ok, TTL).await.unwrap());
}

/// A late original owner cannot overwrite the outcome of the owner that took over.
pub async fn fencing_rejects_stale_owner(store: Arc<dyn Store>) {
    let key = fresh_key("m", "fence");
    let old = acquire(&*store, &key, "fp", Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    let new = take_over(&*store, &key, LONG).await;
    assert!(store.renew(&key, new, LONG).await.unwrap(), "the take-over is confirmed");
    assert!(new > old);
    let stale = StoredOutcome::Succeeded(r#""stale""#.into());
    let fresh = StoredOutcome::Succeeded(r#""fresh""#.into());
    assert!(!store.complete(&key, old, &stale, TTL).await.unwrap(), "stale token must be fenced out");
    assert!(!store.release(&key, old).await.unwrap(), "stale token cannot release");
    assert!(store.complete(&key, new, &fresh, TTL).await.unwrap());
    assert!(!store.complete(&key, old, &stale, TTL).await.unwrap());
    assert_eq!(done(&*store, &key, "fp").await, fresh);
}

/// Records disappear after their TTL; the key can then be used afresh.
pub async fn ttl_expiry(store: Arc<dyn Store>) {
    let key = fresh_key("m", "ttl");
    let ttl = Duration::from_millis(300);
    let token = match store.claim(req(&key, "fp", false, LONG, ttl)).await.unwrap() {
        Claim::Acquired { token, .. } => token,
        other => panic!("{other:?}"),
    };
    let outcome = StoredOutcome::Succeeded("1".into());
    assert!(store.complete(&key, token, &outcome, ttl).await.unwrap());
    let finished = store.get(&key).await.unwrap().expect("the finished record").expires_at_ms;
    assert!(finished <= now_ms() + 300, "expires {finished}: `ttl` after its completion, not with its lease");
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(store.get(&key).await.unwrap(), None, "expired record must read as absent");
    // Expired: even other params may use the key now.
    match store.claim(req(&key, "other-fp", false, LONG, TTL)).await.unwrap() {
        Claim::Acquired { kind: AcquireKind::Fresh, token: t } => assert!(t > token),
        other => panic!("expected a fresh claim after expiry, got {other:?}"),
    }
}

/// Same key, other params → mismatch, whether the first is running or finished.
pub async fn fingerprint_mismatch(store: Arc<dyn Store>) {
    let key = fresh_key("m", "fp");
    let token = acquire(&*store, &key, "fp-a", LONG).await;
    assert_eq!(store.claim(req(&key, "fp-b", false, LONG, TTL)).await.unwrap(), Claim::FingerprintMismatch);
    let outcome = StoredOutcome::Succeeded("true".into());
    assert!(store.complete(&key, token, &outcome, TTL).await.unwrap());
    assert_eq!(store.claim(req(&key, "fp-b", false, LONG, TTL)).await.unwrap(), Claim::FingerprintMismatch);
    assert_eq!(store.claim(req(&key, "fp-b", true, LONG, TTL)).await.unwrap(), Claim::FingerprintMismatch);
    assert_eq!(done(&*store, &key, "fp-a").await, outcome);
}

/// failed → replayed; force retry → re-executed; success + force retry → refused.
pub async fn force_retry(store: Arc<dyn Store>) {
    let key = fresh_key("m", "force");
    let t1 = acquire(&*store, &key, "fp", LONG).await;
    let failed = StoredOutcome::Failed(r#"{"code":-32006,"message":"Upstream failed"}"#.into());
    assert!(store.complete(&key, t1, &failed, TTL).await.unwrap());
    assert_eq!(done(&*store, &key, "fp").await, failed);
    let t2 = match store.claim(req(&key, "fp", true, LONG, TTL)).await.unwrap() {
        Claim::Acquired { token, kind: AcquireKind::ForceRetry } => token,
        other => panic!("expected a forced claim, got {other:?}"),
    };
    assert!(t2 > t1);
    // While the forced retry runs, others see it in progress.
    assert!(matches!(store.claim(req(&key, "fp", true, LONG, TTL)).await.unwrap(), Claim::InProgress { .. }));
    let ok = StoredOutcome::Succeeded(r#"{"ok":true}"#.into());
    assert!(store.complete(&key, t2, &ok, TTL).await.unwrap());
    assert_eq!(store.claim(req(&key, "fp", true, LONG, TTL)).await.unwrap(), Claim::ForceRetryRefused);
    assert_eq!(done(&*store, &key, "fp").await, ok);
}

/// Outcomes come back byte for byte: escapes, number spellings, member order.
pub async fn outcome_byte_identity(store: Arc<dyn Store>) {
    let texts = [
        StoredOutcome::Succeeded(
            r#"{"b":1,"a":[1.0,-0,1e3,12345678901234567890123],"s":"\u00e9\n","e":"é"}"#.into(),
        ),
        StoredOutcome::Failed(
            r#"{"code":-32006,"message":"Upstream failed","data":{"z":1,"a":"x\"y"}}"#.into(),
        ),
        StoredOutcome::Succeeded("null".into()),
    ];
    for (i, outcome) in texts.into_iter().enumerate() {
        let key = fresh_key("m", &format!("bytes-{i}"));
        let token = acquire(&*store, &key, "fp", LONG).await;
        assert!(store.complete(&key, token, &outcome, TTL).await.unwrap());
        match store.claim(req(&key, "fp", false, LONG, TTL)).await.unwrap() {
            Claim::Done(back, _) => assert_eq!(back.json().as_bytes(), outcome.json().as_bytes()),
            other => panic!("{other:?}"),
        }
    }
}

/// A released claim leaves no record; only the current owner may release.
pub async fn release_leaves_no_record(store: Arc<dyn Store>) {
    let key = fresh_key("m", "release");
    let token = acquire(&*store, &key, "fp", LONG).await;
    assert!(!store.release(&key, token + 7).await.unwrap());
    assert!(matches!(store.get(&key).await.unwrap().map(|r| r.state), Some(RecordState::Processing { .. })));
    assert!(store.release(&key, token).await.unwrap());
    assert_eq!(store.get(&key).await.unwrap(), None);
    assert!(matches!(
        store.claim(req(&key, "other", false, LONG, TTL)).await.unwrap(),
        Claim::Acquired { kind: AcquireKind::Fresh, .. }
    ));
}

/// `(tenant, method, key)` is the scope: change any part and the records are unrelated.
pub async fn scope_is_tenant_method_key(store: Arc<dyn Store>) {
    let a = fresh_key("m", "scope");
    let other_tenant = RecordKey::new(format!("{}-b", a.tenant), "m", "scope");
    let other_method = RecordKey::new(a.tenant.clone(), "m2", "scope");
    let other_key = RecordKey::new(a.tenant.clone(), "m", "scope2");
    acquire(&*store, &a, "fp", LONG).await;
    for k in [&other_tenant, &other_method, &other_key] {
        // A different fingerprint too: no mismatch, because no relation.
        acquire(&*store, k, "different", LONG).await;
    }
}

/// An unconfirmed take-over never fences out a live owner: the owner's `complete` still
/// lands, and the take-over's confirmation then fails.
pub async fn unconfirmed_takeover_leaves_the_owner_its_outcome(store: Arc<dyn Store>) {
    let key = fresh_key("m", "late-claim");
    let owner = acquire(&*store, &key, "fp", Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let taker = take_over(&*store, &key, LONG).await;
    assert!(taker > owner);
    let ok = StoredOutcome::Succeeded(r#""owner""#.into());
    assert!(store.complete(&key, owner, &ok, TTL).await.unwrap(), "the live owner's outcome lands");
    assert!(!store.renew(&key, taker, LONG).await.unwrap(), "the take-over can no longer be confirmed");
    assert!(!store.complete(&key, taker, &ok, TTL).await.unwrap());
    assert_eq!(done(&*store, &key, "fp").await, ok);
    let rec = store.get(&key).await.unwrap().expect("the finished record");
    assert_eq!(rec.takeover, None, "the completion cleared the unconfirmed take-over");
}

/// A heartbeat of the live owner cancels an unconfirmed take-over and extends its lease.
pub async fn owner_renew_cancels_a_takeover(store: Arc<dyn Store>) {
    let key = fresh_key("m", "heartbeat");
    let owner = acquire(&*store, &key, "fp", Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let taker = take_over(&*store, &key, LONG).await;
    assert!(store.renew(&key, owner, Duration::from_millis(800)).await.unwrap());
    assert!(!store.renew(&key, taker, LONG).await.unwrap(), "the take-over was cancelled");
    assert!(!store.release(&key, taker).await.unwrap());
    assert!(matches!(
        store.claim(req(&key, "fp", false, LONG, TTL)).await.unwrap(),
        Claim::InProgress { .. }
    ));
    let rec = store.get(&key).await.unwrap().expect("record");
    assert_eq!((rec.token, rec.takeover), (owner, None));
    // The extended lease runs out in its turn (nothing renews it).
    tokio::time::sleep(Duration::from_millis(900)).await;
    let again = take_over(&*store, &key, LONG).await;
    assert!(again > taker, "tokens keep growing");
}

/// A claimant that gives up on its take-over withdraws it; one that never confirms blocks
/// the others only for the take-over window.
pub async fn abandoned_takeover_is_withdrawn_or_lapses(store: Arc<dyn Store>) {
    let key = fresh_key("m", "abandon");
    let owner = acquire(&*store, &key, "fp", Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first = take_over(&*store, &key, LONG).await;
    assert!(store.release(&key, first).await.unwrap(), "withdrawn");
    let rec = store.get(&key).await.unwrap().expect("the record stays");
    assert_eq!(rec.token, owner);
    // A short take-over window: its claimant asks for a short lease.
    let second = take_over(&*store, &key, Duration::from_millis(150)).await;
    assert!(second > first);
    assert!(matches!(
        store.claim(req(&key, "fp", false, LONG, TTL)).await.unwrap(),
        Claim::InProgress { .. }
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let third = take_over(&*store, &key, LONG).await;
    assert!(third > second);
    assert!(!store.renew(&key, second, LONG).await.unwrap(), "the lapsed take-over is gone");
    assert!(store.renew(&key, third, LONG).await.unwrap());
    assert!(!store.complete(&key, owner, &StoredOutcome::Succeeded("0".into()), TTL).await.unwrap());
}

/// The owner's heartbeat keeps its record past the original lease.
pub async fn renew_extends_the_lease(store: Arc<dyn Store>) {
    let key = fresh_key("m", "renew");
    let token = acquire(&*store, &key, "fp", Duration::from_millis(300)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(store.renew(&key, token, Duration::from_millis(1000)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(matches!(
        store.claim(req(&key, "fp", false, LONG, TTL)).await.unwrap(),
        Claim::InProgress { .. }
    ));
    assert!(!store.renew(&key, token + 1_000_000, LONG).await.unwrap(), "a stranger cannot renew");
}

/// A released (or expired) key claimed again gets a newer token: a stale owner holding the old
/// one is refused by `complete`, `renew` and `finish_event`.
pub async fn tokens_grow_across_deletion(store: Arc<dyn Store>) {
    let key = fresh_key("m", "reuse");
    let stale = acquire(&*store, &key, "fp", LONG).await;
    let mut ev = event(&key, TTL);
    ev.token = stale;
    store.put_event(&ev).await.unwrap();
    assert!(store.release(&key, stale).await.unwrap());
    assert_eq!(store.get(&key).await.unwrap(), None);
    let fresh = acquire(&*store, &key, "fp", LONG).await;
    assert!(fresh > stale, "token {fresh} after release must exceed {stale}");
    assert!(store.restart_event(&ev.id, fresh).await.unwrap());
    let out = StoredOutcome::Succeeded(r#""stale""#.into());
    assert!(!store.complete(&key, stale, &out, TTL).await.unwrap());
    assert!(!store.renew(&key, stale, LONG).await.unwrap());
    assert!(!store.finish_event(&ev.id, stale, &out).await.unwrap());
    let ok = StoredOutcome::Succeeded(r#""fresh""#.into());
    assert!(store.complete(&key, fresh, &ok, Duration::from_millis(200)).await.unwrap());
    assert!(store.finish_event(&ev.id, fresh, &ok).await.unwrap());
    // Expired in its turn: the next claim's token is newer still.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let third = acquire(&*store, &key, "fp", LONG).await;
    assert!(third > fresh);
}

/// `complete` is idempotent: a retried write whose first attempt landed is answered `true`;
/// another outcome under the same token is refused.
pub async fn complete_is_idempotent(store: Arc<dyn Store>) {
    let key = fresh_key("m", "twice");
    let token = acquire(&*store, &key, "fp", LONG).await;
    let ok = StoredOutcome::Succeeded(r#"{"n":1}"#.into());
    assert!(store.complete(&key, token, &ok, TTL).await.unwrap());
    assert!(store.complete(&key, token, &ok, TTL).await.unwrap(), "the same write again is true");
    let other = StoredOutcome::Failed(r#"{"code":-32005,"message":"Timeout"}"#.into());
    assert!(!store.complete(&key, token, &other, TTL).await.unwrap());
    assert_eq!(done(&*store, &key, "fp").await, ok);
}

/// A processing record never expires before its lease, whatever its TTL.
pub async fn processing_outlives_a_short_ttl(store: Arc<dyn Store>) {
    let key = fresh_key("m", "short-ttl");
    match store.claim(req(&key, "fp", false, Duration::from_millis(1500), Duration::from_millis(100))).await {
        Ok(Claim::Acquired { kind: AcquireKind::Fresh, .. }) => {}
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(matches!(store.get(&key).await.unwrap().map(|r| r.state), Some(RecordState::Processing { .. })));
    assert!(matches!(
        store.claim(req(&key, "other", false, LONG, TTL)).await.unwrap(),
        Claim::FingerprintMismatch
    ));
}

/// 150 pending events are all reached through the pages, oldest first.
pub async fn pending_events_pages_reach_every_event(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "many");
    let mut ids = Vec::new();
    for i in 0..150u64 {
        let mut ev = event(&RecordKey::new(key.tenant.clone(), "flow", format!("k-{i}")), TTL);
        ev.created_at_ms = 1_000_000 + i / 3; // ties, as events created in one millisecond have
        store.put_event(&ev).await.unwrap();
        ids.push(ev.id);
    }
    let ours: Vec<Event> =
        all_pending(&*store).await.into_iter().filter(|e| e.record.tenant == key.tenant).collect();
    assert_eq!(ours.len(), 150, "every pending event is reached");
    assert!(ours.windows(2).all(|w| w[0].created_at_ms <= w[1].created_at_ms), "oldest first");
    let mut got: Vec<&str> = ours.iter().map(|e| e.id.as_str()).collect();
    got.sort_unstable();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(got, want);
}

/// The URL of an external service for tests, from the environment variable `var`.
/// Unset: a failure in CI (`CI=true`), else `None` with the reason printed (the test skips).
pub fn service_url(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(
                !ci,
                "{what} is required in CI: set {var} (scripts/test.sh starts the server and sets it)"
            );
            eprintln!(
                "SKIPPED: {what} tests: {var} is not set (scripts/test.sh starts the server and sets it)"
            );
            None
        }
    }
}

/// Instantiate the behaviour suite for a store: `store_suite!(make_store);` with
/// `async fn make_store() -> Option<Arc<dyn Store>>` in scope (`None`: skip).
#[macro_export]
macro_rules! store_suite {
    ($make:ident) => {
        mod store_suite {
            $crate::store_suite!(@tests $make;
                claim_complete_then_duplicate,
                claim_race_has_one_winner,
                many_keys_at_once_each_claimed_and_completed_once,
                takeover_race_has_one_winner,
                fencing_rejects_stale_owner,
                ttl_expiry,
                fingerprint_mismatch,
                force_retry,
                outcome_byte_identity,
                release_leaves_no_record,
                scope_is_tenant_method_key,
                events_lifecycle,
                events_expire,
                event_writes_never_overwrite_a_newer_owner,
                concurrent_event_writes_leave_the_owner_event,
                a_replaced_event_keeps_its_place_and_is_listed_once,
                unconfirmed_takeover_leaves_the_owner_its_outcome,
                owner_renew_cancels_a_takeover,
                abandoned_takeover_is_withdrawn_or_lapses,
                renew_extends_the_lease,
                tokens_grow_across_deletion,
                complete_is_idempotent,
                processing_outlives_a_short_ttl,
                pending_events_pages_reach_every_event,
                journal_survives_a_takeover,
                journal_write_by_a_stale_owner_is_refused,
                journal_write_extends_the_lease,
                journal_write_cancels_an_unconfirmed_takeover,
                journal_ends_with_the_execution,
                journal_keeps_outputs_byte_for_byte,
                listing_is_per_tenant_newest_first_and_filtered,
                listing_pages_reach_every_event_once,
                event_steps_are_fenced_and_kept, event_creator_round_trips_and_is_kept,
            );
        }
    };
    (@tests $make:ident; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let Some(store) = super::$make().await else { return };
                $crate::testkit::$name(store).await;
            }
        )*
    };
}

/// A store wrapper that can be switched "down": every operation then fails as an
/// unreachable database would. For fail-closed and recovery tests of front doors. The answers
/// to its claims can also be slowed down, as a distant or busy store's are.
pub struct SwitchableStore {
    inner: Arc<dyn Store>,
    down: std::sync::atomic::AtomicBool,
    claim_delay_ms: std::sync::atomic::AtomicU64,
    complete_delay_ms: std::sync::atomic::AtomicU64,
    /// `put_event` of an owner (token > 0) and of a writer that owns nothing (token 0) reach
    /// the inner store only after these delays; `put_event` fails while `event_writes_down`.
    event_delay_ms: [std::sync::atomic::AtomicU64; 2],
    event_writes_down: std::sync::atomic::AtomicBool,
}

impl SwitchableStore {
    pub fn new(inner: Arc<dyn Store>) -> SwitchableStore {
        SwitchableStore {
            inner,
            down: std::sync::atomic::AtomicBool::new(false),
            claim_delay_ms: std::sync::atomic::AtomicU64::new(0),
            complete_delay_ms: std::sync::atomic::AtomicU64::new(0),
            event_delay_ms: Default::default(),
            event_writes_down: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Make `put_event` reach the inner store only after `owner` (events of token > 0) or
    /// `blank` (token 0) — to order an owner's write and a duplicate's as a race would.
    pub fn set_event_write_delays(&self, owner: Duration, blank: Duration) {
        for (slot, d) in self.event_delay_ms.iter().zip([owner, blank]) {
            slot.store(d.as_millis() as u64, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Make `put_event` alone fail, as a store that fails one write would.
    pub fn set_event_writes_down(&self, down: bool) {
        self.event_writes_down.store(down, std::sync::atomic::Ordering::SeqCst);
    }

    /// Make every claim's answer take `delay` to come back (the claim itself lands at once).
    pub fn set_claim_delay(&self, delay: Duration) {
        self.claim_delay_ms.store(delay.as_millis() as u64, std::sync::atomic::Ordering::SeqCst);
    }

    /// Make every `complete` reach the inner store only after `delay` (a slow outcome write).
    pub fn set_complete_delay(&self, delay: Duration) {
        self.complete_delay_ms.store(delay.as_millis() as u64, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn set_down(&self, down: bool) {
        self.down.store(down, std::sync::atomic::Ordering::SeqCst);
    }

    fn check(&self) -> Result<(), crate::StoreError> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            Err(crate::StoreError::new("connection refused (store switched down by the test)"))
        } else {
            Ok(())
        }
    }
}

macro_rules! switchable {
    ($self:ident, $call:expr) => {
        Box::pin(async move {
            $self.check()?;
            $call.await
        })
    };
}

impl Store for SwitchableStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> crate::BoxFuture<'a, Result<Claim, crate::StoreError>> {
        let delay = self.claim_delay_ms.load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            self.check()?;
            // The claim lands at once; its answer is what takes long to come back.
            let claim = self.inner.claim(req).await;
            tokio::time::sleep(Duration::from_millis(delay)).await;
            claim
        })
    }
    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        lease: Duration,
    ) -> crate::BoxFuture<'a, Result<bool, crate::StoreError>> {
        switchable!(self, self.inner.renew(key, token, lease))
    }
    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        outcome: &'a StoredOutcome,
        ttl: Duration,
    ) -> crate::BoxFuture<'a, Result<bool, crate::StoreError>> {
        let delay = self.complete_delay_ms.load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            // Without a delay it answers on its first poll, as the memory store does (a store
            // that is down then fails at once).
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            self.check()?;
            self.inner.complete(key, token, outcome, ttl).await
        })
    }
    fn list_events<'a>(
        &'a self,
        tenant: &'a str,
        filter: &'a crate::store::EventFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> crate::BoxFuture<'a, Result<crate::store::PendingPage, crate::StoreError>> {
        switchable!(self, self.inner.list_events(tenant, filter, cursor, limit))
    }
    fn put_step<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        step: u32,
        output: &'a str,
        lease: Duration,
    ) -> crate::BoxFuture<'a, Result<bool, crate::StoreError>> {
        switchable!(self, self.inner.put_step(key, token, step, output, lease))
    }
    fn release<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
    ) -> crate::BoxFuture<'a, Result<bool, crate::StoreError>> {
        switchable!(self, self.inner.release(key, token))
    }
    fn get<'a>(
        &'a self,
        key: &'a RecordKey,
    ) -> crate::BoxFuture<'a, Result<Option<crate::store::Record>, crate::StoreError>> {
        switchable!(self, self.inner.get(key))
    }
    fn put_event<'a>(&'a self, event: &'a Event) -> crate::BoxFuture<'a, Result<bool, crate::StoreError>> {
        let delay =
            self.event_delay_ms[usize::from(event.token == 0)].load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            self.check()?;
            if self.event_writes_down.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(crate::StoreError::new("event write failed (switched down by the test)"));
            }
            self.inner.put_event(event).await
        })
    }
    fn get_event<'a>(
        &'a self,
        id: &'a str,
    ) -> crate::BoxFuture<'a, Result<Option<Event>, crate::StoreError>> {
        switchable!(self, self.inner.get_event(id))
    }
    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        outcome: &'a StoredOutcome,
    ) -> crate::BoxFuture<'a, Result<bool, crate::StoreError>> {
        switchable!(self, self.inner.finish_event(id, token, outcome))
    }
    fn put_event_steps<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        steps: &'a str,
    ) -> crate::BoxFuture<'a, Result<bool, crate::StoreError>> {
        switchable!(self, self.inner.put_event_steps(id, token, steps))
    }
    fn restart_event<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> crate::BoxFuture<'a, Result<bool, crate::StoreError>> {
        switchable!(self, self.inner.restart_event(id, token))
    }
    fn pending_events<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> crate::BoxFuture<'a, Result<crate::store::PendingPage, crate::StoreError>> {
        switchable!(self, self.inner.pending_events(cursor, limit))
    }
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn cache_successes(&self) -> bool {
        // Outage tests must see every call reach the (switchable) store.
        false
    }
    fn ping(&self) -> crate::BoxFuture<'_, Result<(), crate::StoreError>> {
        switchable!(self, self.inner.ping())
    }
}
