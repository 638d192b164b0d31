//! [`Store::list_events`] in the store behaviour suite.
use std::collections::HashSet;
use std::sync::Arc;

use super::{TTL, event, fresh_key};
use crate::store::{Event, EventFilter, EventStatus, Store, StoredOutcome};

/// Every page of a listing, following the cursors (at most 1,000 pages).
pub(super) async fn list_all(
    store: &dyn Store,
    tenant: &str,
    filter: &EventFilter,
    limit: usize,
) -> Vec<Event> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let (page, next) = store.list_events(tenant, filter, cursor.as_deref(), limit).await.expect("list");
        assert!(page.len() <= limit, "a page holds at most `limit` events");
        out.extend(page);
        match next {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
    panic!("the listing never ended");
}

/// Events of two tenants, made one per millisecond so that their order is known: tenant A's
/// method `orders` (tags `eu` and, every third, `vip`), some failed; tenant B's the same
/// method and tags. Returns A's tenant and its events, oldest first, and B's tenant.
async fn two_tenants(store: &dyn Store, n: usize) -> (String, Vec<Event>, String) {
    let a = fresh_key("orders", "x");
    let b = fresh_key("orders", "x");
    let mut mine = Vec::new();
    let base = crate::store::now_ms();
    for i in 0..n {
        for (tenant_key, keep) in [(&a, true), (&b, false)] {
            let key = crate::store::RecordKey::new(
                tenant_key.tenant.clone(),
                if i % 2 == 0 { "orders" } else { "refunds" },
                format!("k-{i}"),
            );
            let mut e = event(&key, TTL);
            e.created_at_ms = base + i as u64;
            e.tags = if i % 3 == 0 { vec!["eu".into(), "vip".into()] } else { vec!["eu".into()] };
            if i % 4 == 1 {
                e.status = EventStatus::Failed;
                e.outcome =
                    Some(StoredOutcome::Failed(r#"{"code":-32006,"message":"Upstream failed"}"#.into()));
            }
            store.put_event(&e).await.expect("put_event");
            if keep {
                mine.push(e);
            }
        }
    }
    (a.tenant.to_string(), mine, b.tenant.to_string())
}

/// A tenant sees its own events only, newest first, and each filter (status, method, tag, all
/// three) keeps exactly the events it names.
pub async fn listing_is_per_tenant_newest_first_and_filtered(store: Arc<dyn Store>) {
    let (tenant, mine, other) = two_tenants(&*store, 24).await;
    let all = list_all(&*store, &tenant, &EventFilter::default(), 100).await;
    let want: Vec<&str> = mine.iter().rev().map(|e| e.id.as_str()).collect();
    assert_eq!(
        all.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        want,
        "newest first, the tenant's only"
    );
    assert_eq!(all.first(), mine.last(), "events are listed whole");
    let theirs = list_all(&*store, &other, &EventFilter::default(), 100).await;
    assert_eq!(theirs.len(), 24);
    assert!(theirs.iter().all(|e| *e.record.tenant == *other));
    assert!(list_all(&*store, "t-nobody", &EventFilter::default(), 100).await.is_empty());

    let filters = [
        EventFilter { status: Some(EventStatus::Failed), ..Default::default() },
        EventFilter { status: Some(EventStatus::Processing), ..Default::default() },
        EventFilter { method: Some("refunds".into()), ..Default::default() },
        EventFilter { tag: Some("vip".into()), ..Default::default() },
        EventFilter { tag: Some("nope".into()), ..Default::default() },
        EventFilter {
            status: Some(EventStatus::Failed),
            method: Some("refunds".into()),
            tag: Some("vip".into()),
        },
    ];
    for f in &filters {
        let got: Vec<String> = list_all(&*store, &tenant, f, 5).await.into_iter().map(|e| e.id).collect();
        let want: Vec<String> = mine.iter().rev().filter(|e| f.matches(e)).map(|e| e.id.clone()).collect();
        assert_eq!(got, want, "filter {f:?}");
    }
    let failed_vip_refunds = filters[5].clone();
    assert!(mine.iter().any(|e| failed_vip_refunds.matches(e)), "the combined filter matches some events");
}

/// Pages of every size reach each event exactly once; a malformed cursor is not an error.
pub async fn listing_pages_reach_every_event_once(store: Arc<dyn Store>) {
    let (tenant, mine, _) = two_tenants(&*store, 25).await;
    for limit in [1, 7, 25, 26] {
        let got = list_all(&*store, &tenant, &EventFilter::default(), limit).await;
        let ids: HashSet<&str> = got.iter().map(|e| e.id.as_str()).collect();
        assert_eq!((got.len(), ids.len()), (25, 25), "limit {limit}: each event once");
        assert!(mine.iter().all(|e| ids.contains(e.id.as_str())));
    }
    let (page, _) = store.list_events(&tenant, &EventFilter::default(), Some("garbage"), 3).await.unwrap();
    assert!(page.len() <= 3);
}

/// An event's step views are written by its owner only (fenced by the event's token), come
/// back byte for byte, survive a restart under a newer token and its finish, and are stored
/// whole by `put_event`.
pub async fn event_steps_are_fenced_and_kept(store: Arc<dyn Store>) {
    let key = fresh_key("flow", "evt-steps");
    let mut ev = event(&key, TTL);
    store.put_event(&ev).await.unwrap();
    assert_eq!(store.get_event(&ev.id).await.unwrap().unwrap().steps, None);
    let one = r#"[{"name":"reserve","status":"running","attempts":0,"started_at_ms":1}]"#;
    assert!(!store.put_event_steps(&ev.id, 6, one).await.unwrap(), "another token is fenced out");
    assert!(!store.put_event_steps("evt_missing", 7, one).await.unwrap());
    assert_eq!(store.get_event(&ev.id).await.unwrap().unwrap().steps, None);
    assert!(store.put_event_steps(&ev.id, 7, one).await.unwrap());
    assert_eq!(store.get_event(&ev.id).await.unwrap().unwrap().steps.as_deref(), Some(one));
    assert!(store.restart_event(&ev.id, 9).await.unwrap());
    assert_eq!(
        store.get_event(&ev.id).await.unwrap().unwrap().steps.as_deref(),
        Some(one),
        "kept by a restart"
    );
    assert!(!store.put_event_steps(&ev.id, 7, "[]").await.unwrap(), "the old owner is fenced out");
    let two =
        r#"[{"name":"reserve","status":"succeeded","attempts":2,"started_at_ms":1,"finished_at_ms":5}]"#;
    assert!(store.put_event_steps(&ev.id, 9, two).await.unwrap());
    let ok = StoredOutcome::Succeeded(r#"{"ok":true}"#.into());
    assert!(store.finish_event(&ev.id, 9, &ok).await.unwrap());
    assert_eq!(
        store.get_event(&ev.id).await.unwrap().unwrap().steps.as_deref(),
        Some(two),
        "kept by a finish"
    );
    ev.id = format!("{}-whole", ev.id);
    ev.steps = Some(two.to_owned());
    store.put_event(&ev).await.unwrap();
    assert_eq!(store.get_event(&ev.id).await.unwrap().as_ref(), Some(&ev), "put_event stores the steps");
}
