//! Events in the store behaviour suite: their lifecycle, expiry, and who may write them.
use std::sync::Arc;
use std::time::Duration;

use super::{TTL, fresh_key};
use crate::store::{Event, EventStatus, RecordKey, Store, StoredOutcome, now_ms};

pub(super) fn event(key: &RecordKey, ttl: Duration) -> Event {
    let now = now_ms();
    Event {
        id: format!("evt_{}", uuid::Uuid::new_v4().simple()),
        record: key.clone(),
        fingerprint: "fp".into(),
        params: Some(r#"{"sku":"A-1","n":1.0}"#.into()),
        return_step: Some("reserve".into()),
        tags: vec!["a".into(), "b c".into()],
        status: EventStatus::Processing,
        outcome: None,
        created_at_ms: now,
        updated_at_ms: now,
        expires_at_ms: now + ttl.as_millis() as u64,
        token: 7,
        steps: None,
        created_by: None,
    }
}

/// Events round-trip whole, finish with their outcome, restart, and are listed while pending.
pub async fn events_lifecycle(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "evt-1");
    let ev = event(&key, TTL);
    store.put_event(&ev).await.unwrap();
    assert_eq!(store.get_event(&ev.id).await.unwrap().as_ref(), Some(&ev), "stored whole");
    assert_eq!(store.get_event("evt_missing").await.unwrap(), None);
    assert!(all_pending(&*store).await.iter().any(|e| e.id == ev.id), "a processing event is pending");

    let failed = StoredOutcome::Failed(r#"{"code":-32006,"message":"Upstream failed"}"#.into());
    assert!(!store.finish_event(&ev.id, 6, &failed).await.unwrap(), "another token is fenced out");
    assert!(!store.finish_event("evt_missing", 7, &failed).await.unwrap());
    assert_eq!(store.get_event(&ev.id).await.unwrap().unwrap().status, EventStatus::Processing);
    assert!(store.finish_event(&ev.id, 7, &failed).await.unwrap());
    let got = store.get_event(&ev.id).await.unwrap().unwrap();
    assert_eq!((got.status, got.outcome.as_ref()), (EventStatus::Failed, Some(&failed)));
    assert!(!all_pending(&*store).await.iter().any(|e| e.id == ev.id));

    assert!(!store.restart_event(&ev.id, 7).await.unwrap(), "a restart needs a newer token");
    assert!(store.restart_event(&ev.id, 9).await.unwrap());
    let got = store.get_event(&ev.id).await.unwrap().unwrap();
    assert_eq!((got.status, got.outcome, got.token), (EventStatus::Processing, None, 9));
    assert!(all_pending(&*store).await.iter().any(|e| e.id == ev.id), "pending again");

    let ok = StoredOutcome::Succeeded(r#"{"ok":true}"#.into());
    assert!(!store.finish_event(&ev.id, 7, &ok).await.unwrap(), "the old owner is fenced out");
    assert!(store.finish_event(&ev.id, 9, &ok).await.unwrap());
    let got = store.get_event(&ev.id).await.unwrap().unwrap();
    assert_eq!((got.status, got.outcome.as_ref()), (EventStatus::Succeeded, Some(&ok)));
    assert_eq!(got.tags, ev.tags);
    assert_eq!(got.created_at_ms, ev.created_at_ms);

    // A cancellation (-32009) is a failed outcome whose event reads `cancelled`, found by that
    // status only; its record keeps the plain failure (a duplicate gets the stored error).
    let cancelled = crate::events::cancelled_outcome();
    let other = event(&fresh_key("flow", "evt-cancel"), TTL);
    store.put_event(&other).await.unwrap();
    assert!(store.finish_event(&other.id, other.token, &cancelled).await.unwrap());
    let got = store.get_event(&other.id).await.unwrap().unwrap();
    assert_eq!((got.status, got.outcome.as_ref()), (EventStatus::Cancelled, Some(&cancelled)));
    assert!(!all_pending(&*store).await.iter().any(|e| e.id == other.id));
    let tenant = &other.record.tenant;
    for (status, listed) in [(EventStatus::Cancelled, true), (EventStatus::Failed, false)] {
        let filter = crate::store::EventFilter { status: Some(status), ..Default::default() };
        let all = super::listing::list_all(&*store, tenant, &filter, 10).await;
        assert_eq!(all.iter().any(|e| e.id == other.id), listed, "filtered by {status:?}");
    }
    let record = fresh_key("flow", "rec-cancel");
    let token = super::acquire(&*store, &record, "fp", TTL).await;
    assert!(store.complete(&record, token, &cancelled, TTL).await.unwrap());
    let state = store.get(&record).await.unwrap().map(|r| r.state);
    assert_eq!(state, Some(crate::store::RecordState::Done(cancelled)), "the record keeps the failure");
}

/// Events expire with their TTL.
pub async fn events_expire(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "evt-ttl");
    let ev = event(&key, Duration::from_millis(300));
    store.put_event(&ev).await.unwrap();
    assert!(store.get_event(&ev.id).await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(store.get_event(&ev.id).await.unwrap(), None);
    assert!(!all_pending(&*store).await.iter().any(|e| e.id == ev.id));
}

/// Every pending event, following the page cursors.
pub(super) async fn all_pending(store: &dyn Store) -> Vec<Event> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100_000 {
        let (page, next) = store.pending_events(cursor.as_deref(), 37).await.expect("pending_events");
        assert!(page.len() <= 37, "a page holds at most `limit` events");
        out.extend(page);
        match next {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
    panic!("pending_events never reached its last page");
}

/// `put_event` writes for the execution that holds the event's token: a writer that owns
/// nothing (token 0) only creates, an older token never replaces a newer one, a newer token
/// replaces the event (keeping its creation time), and an expired event is as if absent.
pub async fn event_writes_never_overwrite_a_newer_owner(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "evt-owner");
    let owner = event(&key, TTL);
    assert!(store.put_event(&owner).await.unwrap(), "created");
    let blank = Event { token: 0, steps: None, params: None, ..event(&key, TTL) };
    let blank = Event { id: owner.id.clone(), ..blank };
    assert!(!store.put_event(&blank).await.unwrap(), "token 0 never overwrites an owner's event");
    let older = Event { token: 6, ..owner.clone() };
    assert!(!store.put_event(&older).await.unwrap(), "an older execution never overwrites");
    let same = Event { tags: vec!["other".into()], ..owner.clone() };
    assert!(!store.put_event(&same).await.unwrap(), "nor does the same token twice");
    assert_eq!(store.get_event(&owner.id).await.unwrap().as_ref(), Some(&owner), "unchanged");

    // A blank made first (a loser ahead of the owner) is replaced by the owner's write.
    let key2 = fresh_key("flow", "evt-blank-first");
    let blank = Event { token: 0, ..event(&key2, TTL) };
    assert!(store.put_event(&blank).await.unwrap(), "token 0 creates when there is none");
    let winner = Event {
        id: blank.id.clone(),
        token: 11,
        created_at_ms: blank.created_at_ms + 5,
        ..event(&key2, TTL)
    };
    assert!(store.put_event(&winner).await.unwrap(), "the owner replaces the blank");
    let got = store.get_event(&winner.id).await.unwrap().unwrap();
    assert_eq!(got.token, 11);
    assert_eq!(got.created_at_ms, blank.created_at_ms, "a replaced event keeps its creation time");
    assert!(store.put_event_steps(&winner.id, 11, "[]").await.unwrap(), "the owner's updates land");

    // An expired event is as if absent: anyone creates, with its own creation time.
    let key3 = fresh_key("flow", "evt-expired");
    let short = Event { token: 20, ..event(&key3, Duration::from_millis(200)) };
    assert!(store.put_event(&short).await.unwrap());
    tokio::time::sleep(Duration::from_millis(350)).await;
    let later = Event {
        id: short.id.clone(),
        token: 0,
        created_at_ms: short.created_at_ms + 1000,
        ..event(&key3, TTL)
    };
    assert!(store.put_event(&later).await.unwrap(), "an expired event does not block");
    assert_eq!(store.get_event(&short.id).await.unwrap().unwrap().created_at_ms, later.created_at_ms);
}

/// Many writers that own nothing race the owner's write of the same events (concurrent
/// duplicate async submissions): every event ends as the owner wrote it, and the owner's
/// updates land.
pub async fn concurrent_event_writes_leave_the_owner_event(store: Arc<dyn Store>) {
    let mut tasks = Vec::new();
    let mut owners = Vec::new();
    for i in 0..20 {
        let key = fresh_key("flow", &format!("evt-race-{i}"));
        let owner = Event { token: 100 + i, ..event(&key, TTL) };
        for n in 0..6 {
            let store = store.clone();
            let blank = Event { id: owner.id.clone(), token: 0, steps: None, ..event(&key, TTL) };
            let write = if n == 3 { owner.clone() } else { blank };
            tasks.push(tokio::spawn(async move { store.put_event(&write).await.expect("put_event") }));
        }
        owners.push(owner);
    }
    for t in tasks {
        t.await.expect("writer");
    }
    for owner in &owners {
        let got = store.get_event(&owner.id).await.unwrap().expect("the event exists");
        assert_eq!(got.token, owner.token, "the owner's event stands");
        assert!(store.put_event_steps(&owner.id, owner.token, "[]").await.unwrap(), "its step views land");
        let ok = StoredOutcome::Succeeded("1".into());
        assert!(store.finish_event(&owner.id, owner.token, &ok).await.unwrap(), "its finish lands");
    }
}

/// An event written again by a newer execution (a force retry from the flows door) keeps its
/// creation time: it stays where it was, and every listing shows it once, in any page size
/// and under the status it has now.
pub async fn a_replaced_event_keeps_its_place_and_is_listed_once(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "evt-again");
    let base = now_ms();
    let mut ids = Vec::new();
    for i in 0..3u64 {
        let k = RecordKey::new(key.tenant.clone(), "flow", format!("k-{i}"));
        let e = Event { created_at_ms: base + i, ..event(&k, TTL) };
        assert!(store.put_event(&e).await.unwrap());
        ids.push(e);
    }
    let middle = &ids[1];
    let failed = StoredOutcome::Failed(r#"{"code":-32006,"message":"Upstream failed"}"#.into());
    assert!(store.finish_event(&middle.id, middle.token, &failed).await.unwrap());
    // The force retry: a newer token, its own (later) creation time, processing again.
    let again = Event { token: middle.token + 1, created_at_ms: base + 50, ..middle.clone() };
    assert!(store.put_event(&again).await.unwrap());
    assert_eq!(store.get_event(&middle.id).await.unwrap().unwrap().created_at_ms, base + 1);
    for limit in [1, 2, 10] {
        let all =
            super::listing::list_all(&*store, &key.tenant, &crate::store::EventFilter::default(), limit)
                .await;
        let listed: Vec<&str> = all.iter().map(|e| e.id.as_str()).collect();
        let expected: Vec<&str> = ids.iter().rev().map(|e| e.id.as_str()).collect();
        assert_eq!(listed, expected, "limit {limit}: each event once, in its place");
    }
    let failed_filter = crate::store::EventFilter { status: Some(EventStatus::Failed), ..Default::default() };
    let listed = super::listing::list_all(&*store, &key.tenant, &failed_filter, 1).await;
    assert!(listed.is_empty(), "no longer listed as failed: {listed:?}");
    let pending = all_pending(&*store).await;
    assert_eq!(pending.iter().filter(|e| e.id == middle.id).count(), 1, "pending once");
}

/// Who created an event round-trips on every read (get, pending, listing), survives its
/// finish and restart, and is kept, with its creation time, when a newer execution writes the
/// event again; an event without one reads `None`; an expired event's successor has its own.
pub async fn event_creator_round_trips_and_is_kept(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "evt-by");
    let by = Some("svc:billing-job \u{e9}\"x\"".to_owned());
    let ev = Event { created_by: by.clone(), ..event(&key, TTL) };
    assert!(store.put_event(&ev).await.unwrap());
    assert_eq!(store.get_event(&ev.id).await.unwrap().as_ref(), Some(&ev), "stored whole");
    let pending = all_pending(&*store).await;
    assert_eq!(pending.iter().find(|e| e.id == ev.id).map(|e| &e.created_by), Some(&by), "pending");
    let listed = super::listing::list_all(&*store, &key.tenant, &Default::default(), 10).await;
    assert_eq!(listed.iter().find(|e| e.id == ev.id).map(|e| &e.created_by), Some(&by), "listed");

    let failed = StoredOutcome::Failed(r#"{"code":-32006,"message":"Upstream failed"}"#.into());
    assert!(store.finish_event(&ev.id, ev.token, &failed).await.unwrap());
    assert!(store.restart_event(&ev.id, ev.token + 1).await.unwrap());
    assert!(store.put_event_steps(&ev.id, ev.token + 1, "[]").await.unwrap());
    assert_eq!(
        store.get_event(&ev.id).await.unwrap().unwrap().created_by,
        by,
        "finish, restart, steps keep it"
    );
    let again = Event { token: ev.token + 2, created_by: Some("someone-else".into()), ..ev.clone() };
    assert!(store.put_event(&again).await.unwrap());
    let got = store.get_event(&ev.id).await.unwrap().unwrap();
    assert_eq!((got.token, got.created_by), (ev.token + 2, by), "a newer write keeps the creator");

    let anonymous = event(&fresh_key("flow", "evt-by-none"), TTL);
    assert!(store.put_event(&anonymous).await.unwrap());
    assert_eq!(store.get_event(&anonymous.id).await.unwrap().unwrap().created_by, None);

    let short_key = fresh_key("flow", "evt-by-expired");
    let short = Event { created_by: Some("first".into()), ..event(&short_key, Duration::from_millis(200)) };
    assert!(store.put_event(&short).await.unwrap());
    tokio::time::sleep(Duration::from_millis(350)).await;
    let later = Event { id: short.id.clone(), created_by: Some("second".into()), ..event(&short_key, TTL) };
    assert!(store.put_event(&later).await.unwrap());
    let got = store.get_event(&short.id).await.unwrap().unwrap().created_by;
    assert_eq!(got.as_deref(), Some("second"), "an expired event's successor has its own creator");
}
