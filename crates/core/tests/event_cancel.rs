//! Cancelling an event (`Dispatcher::cancel_event`, MCP `tasks/cancel`): the record keeps
//! `-32009 Cancelled`, the owner's later outcome never replaces it, a retry with the same key
//! gets it, a finished event is left alone, and another tenant's event is unknown.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use oncerpc_core::events::Cancelled;
use oncerpc_core::store::{EventStatus, RecordKey, RecordState, StoredOutcome};
use oncerpc_core::{
    Context, Dispatcher, DispatcherConfig, IdempotencyStatus, MemoryStore, MethodSpec, Registry, RequestMeta,
    Store, typed,
};
use oncerpc_protocol::{ErrorCode, RpcError};

fn dispatcher(store: Arc<dyn Store>, finished: Arc<AtomicUsize>) -> Arc<Dispatcher> {
    let mut registry = Registry::new();
    registry
        .register(
            "slow",
            MethodSpec::command(),
            typed(move |_ctx: Context, ms: u64| {
                let finished = finished.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    finished.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, RpcError>(serde_json::json!("done"))
                }
            }),
        )
        .unwrap();
    Arc::new(Dispatcher::with_store(registry, DispatcherConfig::default(), store))
}

fn meta(tenant: &str, key: &str) -> RequestMeta {
    RequestMeta { tenant: Arc::from(tenant), idempotency_key: Some(Arc::from(key)), ..RequestMeta::default() }
}

async fn event_status(d: &Dispatcher, id: &str) -> (EventStatus, Option<StoredOutcome>) {
    let e = d.store().get_event(id).await.unwrap().unwrap();
    (e.status, e.outcome)
}

#[tokio::test]
async fn a_running_event_is_cancelled_for_good_and_a_finished_one_is_left_alone() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let finished = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(store.clone(), finished.clone());
    let params = serde_json::value::to_raw_value(&300u64).unwrap();
    let sub = d.submit("slow", Some(&params), &meta("t1", "k-1"), Vec::new()).await.unwrap();
    assert_eq!(sub.status, IdempotencyStatus::New);

    assert_eq!(d.cancel_event("t2", &sub.event_id).await.unwrap(), Cancelled::NotFound);
    assert_eq!(d.cancel_event("t1", "evt_nope").await.unwrap(), Cancelled::NotFound);
    assert!(matches!(d.cancel_event("t1", &sub.event_id).await.unwrap(), Cancelled::Now(_)));
    let cancelled = oncerpc_core::events::cancelled_outcome();
    assert_eq!(event_status(&d, &sub.event_id).await, (EventStatus::Cancelled, Some(cancelled.clone())));
    let record = store.get(&RecordKey::new("t1", "slow", "k-1")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Done(cancelled.clone()));
    assert!(cancelled.json().contains(&ErrorCode::Cancelled.code().to_string()));

    // The handler finishes later: its outcome is fenced out, the event stays cancelled.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(finished.load(Ordering::SeqCst), 1);
    assert_eq!(event_status(&d, &sub.event_id).await, (EventStatus::Cancelled, Some(cancelled.clone())));
    // Again: nothing changes. A retry with the key: the same event, a duplicate.
    assert!(matches!(d.cancel_event("t1", &sub.event_id).await.unwrap(), Cancelled::AlreadyDone(_)));
    let again = d.submit("slow", Some(&params), &meta("t1", "k-1"), Vec::new()).await.unwrap();
    assert_eq!(
        (again.event_id.as_str(), again.status),
        (sub.event_id.as_str(), IdempotencyStatus::Duplicate)
    );

    // A finished event is left as it is.
    let quick = serde_json::value::to_raw_value(&1u64).unwrap();
    let done = d.submit("slow", Some(&quick), &meta("t1", "k-2"), Vec::new()).await.unwrap();
    for _ in 0..200 {
        if event_status(&d, &done.event_id).await.0 != EventStatus::Processing {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(matches!(d.cancel_event("t1", &done.event_id).await.unwrap(), Cancelled::AlreadyDone(_)));
    assert_eq!(event_status(&d, &done.event_id).await.0, EventStatus::Succeeded);
}
