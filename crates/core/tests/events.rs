//! The async-event resumer, on a real dispatcher and store.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use oncerpc_core::store::{Event, EventStatus, RecordKey, StoredOutcome, now_ms};
use oncerpc_core::{Context, Dispatcher, DispatcherConfig, MemoryStore, MethodSpec, Registry, Store, typed};
use oncerpc_protocol::RpcError;

fn pending(id: &str, method: &str, key: &str) -> Event {
    let now = now_ms();
    Event {
        id: id.into(),
        record: RecordKey::new("default", method, key),
        fingerprint: "fp".into(),
        params: Some(r#"{"n":2}"#.into()),
        return_step: None,
        tags: vec![],
        status: EventStatus::Processing,
        outcome: None,
        created_at_ms: now,
        updated_at_ms: now,
        expires_at_ms: now + 60_000,
        token: 0,
        steps: None,
        created_by: None,
    }
}

fn dispatcher(store: Arc<dyn Store>, runs: Arc<AtomicUsize>) -> Arc<Dispatcher> {
    let mut registry = Registry::new();
    registry
        .register(
            "known",
            MethodSpec::command(),
            typed(move |_ctx: Context, p: serde_json::Value| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, RpcError>(p["n"].as_i64().unwrap_or(0) * 10) }
            }),
        )
        .unwrap();
    Arc::new(Dispatcher::with_store(registry, DispatcherConfig::default(), store))
}

#[tokio::test]
async fn events_of_methods_not_served_here_are_left_for_another_replica() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(store.clone(), runs.clone());
    store.put_event(&pending("evt_other", "served.elsewhere", "k-1")).await.unwrap();
    assert_eq!(d.resume_once().await.unwrap(), 0);
    let e = store.get_event("evt_other").await.unwrap().unwrap();
    assert_eq!((e.status, e.outcome), (EventStatus::Processing, None), "untouched");
}

#[tokio::test]
async fn an_orphaned_event_is_resumed_once_and_finished() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(store.clone(), runs.clone());
    // Accepted by a process that died before claiming anything durable beyond the event.
    store.put_event(&pending("evt_orphan", "known", "k-2")).await.unwrap();
    assert_eq!(d.resume_once().await.unwrap(), 1);
    for _ in 0..100 {
        if store.get_event("evt_orphan").await.unwrap().unwrap().status != EventStatus::Processing {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let e = store.get_event("evt_orphan").await.unwrap().unwrap();
    assert_eq!(e.outcome, Some(StoredOutcome::Succeeded("20".into())));
    // A second pass finds nothing to do: the event is finished and its record done.
    assert_eq!(d.resume_once().await.unwrap(), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_event_behind_150_live_ones_is_resumed() {
    use oncerpc_core::store::{Claim, ClaimRequest};
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(store.clone(), runs.clone());
    let claim = |key: RecordKey, lease: Duration| {
        let store = store.clone();
        async move {
            let req = ClaimRequest {
                key: &key,
                fingerprint: "fp",
                force_retry: false,
                lease,
                ttl: Duration::from_secs(3600),
            };
            assert!(matches!(store.claim(req).await.unwrap(), Claim::Acquired { .. }));
        }
    };
    // 150 events whose owners are alive elsewhere (long leases), older than the crashed one.
    for i in 0..150 {
        let mut e = pending(&format!("evt_live_{i:03}"), "known", &format!("live-{i}"));
        e.created_at_ms -= 10_000;
        claim(e.record.clone(), Duration::from_secs(60)).await;
        store.put_event(&e).await.unwrap();
    }
    // The crashed one: its owner's lease ran out.
    let crashed = pending("evt_crashed", "known", "crashed");
    claim(crashed.record.clone(), Duration::from_millis(50)).await;
    store.put_event(&crashed).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    assert_eq!(d.resume_once().await.unwrap(), 1, "the crashed event, 151st in age, is resumed");
    for _ in 0..100 {
        if store.get_event("evt_crashed").await.unwrap().unwrap().status != EventStatus::Processing {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let e = store.get_event("evt_crashed").await.unwrap().unwrap();
    assert_eq!(e.outcome, Some(StoredOutcome::Succeeded("20".into())));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the crashed event ran");
    let live = store.get_event("evt_live_000").await.unwrap().unwrap();
    assert_eq!(live.status, EventStatus::Processing, "live events are left to their owners");
}
