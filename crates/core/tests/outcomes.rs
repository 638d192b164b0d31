//! Outcomes survive store blips and shutdowns (issue "the promise without holes", items 1, 2
//! and 7), on a real dispatcher over the memory store behind the testkit's switchable store.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use oncerpc_core::store::{RecordKey, RecordState, StoredOutcome};
use oncerpc_core::testkit::SwitchableStore;
use oncerpc_core::{
    Context, Dispatcher, DispatcherConfig, IdempotencyConfig, MemoryStore, MethodSpec, Mode, Registry,
    RequestMeta, Store, typed,
};
use oncerpc_protocol::RpcError;

const LEASE: Duration = Duration::from_millis(1500);

fn config() -> DispatcherConfig {
    DispatcherConfig {
        idempotency: IdempotencyConfig {
            mode: Mode::Dev,
            lease: LEASE,
            ttl: Duration::from_secs(3600),
            ..Default::default()
        },
        ..DispatcherConfig::default()
    }
}

/// `pay` counts its runs, optionally switches the store down while it executes, and sleeps
/// `{"ms": n}`.
fn dispatcher(
    store: Arc<dyn Store>,
    runs: Arc<AtomicUsize>,
    down: Option<Arc<SwitchableStore>>,
) -> Arc<Dispatcher> {
    let mut registry = Registry::new();
    registry
        .register(
            "pay",
            MethodSpec::command().timeout(Duration::from_millis(400)),
            typed(move |_ctx: Context, p: serde_json::Value| {
                let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                let down = down.clone();
                async move {
                    if let Some(s) = down {
                        s.set_down(true);
                    }
                    tokio::time::sleep(Duration::from_millis(p["ms"].as_u64().unwrap_or(0))).await;
                    Ok::<_, RpcError>(serde_json::json!({ "charge": n }))
                }
            }),
        )
        .unwrap();
    Arc::new(Dispatcher::with_store(registry, config(), store))
}

fn pay(key: &str, ms: u64) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","method":"pay","params":{{"ms":{ms},"idempotency_key":"{key}"}},"id":1}}"#)
        .into_bytes()
}

async fn call(d: &Dispatcher, key: &str, ms: u64) -> (String, Option<&'static str>) {
    let reply = d.handle(&pay(key, ms), &RequestMeta::default()).await;
    (String::from_utf8(reply.body.unwrap()).unwrap(), reply.idempotency.map(|i| i.status.as_str()))
}

async fn stored(store: &dyn Store, key: &str) -> Option<StoredOutcome> {
    match store.get(&RecordKey::new("default", "pay", key)).await {
        Ok(Some(r)) => match r.state {
            RecordState::Done(o) => Some(o),
            RecordState::Processing { .. } => None,
        },
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_blip_after_execution_loses_no_outcome() {
    let inner: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let switch = Arc::new(SwitchableStore::new(inner.clone()));
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(switch.clone(), runs.clone(), Some(switch.clone()));

    // The store goes down while the command executes: its outcome cannot be written.
    let (first, status) = call(&d, "blip-1", 0).await;
    assert!(first.contains(r#""result":{"charge":1}"#), "{first}");
    assert_eq!(status, Some("new"), "the client is answered without waiting for the store");

    // Past the lease, the store still down: a retry is answered from the unrecorded outcome.
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    let (again, status) = call(&d, "blip-1", 0).await;
    assert_eq!((again.as_str(), status), (first.as_str(), Some("duplicate")));

    // Back up: the outcome lands (the writer kept trying), and every door answers it.
    switch.set_down(false);
    for _ in 0..100 {
        if stored(&*inner, "blip-1").await.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stored(&*inner, "blip-1").await, Some(StoredOutcome::Succeeded(r#"{"charge":1}"#.into())));
    let (third, status) = call(&d, "blip-1", 0).await;
    assert_eq!((third.as_str(), status), (first.as_str(), Some("duplicate")));
    // Another process sharing the store (a second dispatcher) sees the stored outcome too.
    let other = dispatcher(inner.clone(), runs.clone(), None);
    let (fourth, status) = call(&other, "blip-1", 0).await;
    assert_eq!((fourth.as_str(), status), (first.as_str(), Some("duplicate")));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_executions_whose_client_left() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(store.clone(), runs.clone(), None);
    // Five clients hang up mid-command (their request futures are dropped).
    for i in 0..5 {
        let body = pay(&format!("left-{i}"), 300);
        let meta = RequestMeta::default();
        let _ = tokio::time::timeout(Duration::from_millis(50), d.handle(&body, &meta)).await;
    }
    assert_eq!(d.shutdown(Duration::from_secs(10)).await, 0, "nothing left processing");
    for i in 0..5 {
        assert!(stored(&*store, &format!("left-{i}")).await.is_some(), "left-{i} recorded");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_past_its_grace_names_what_it_leaves_processing() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let d = dispatcher(store.clone(), Arc::new(AtomicUsize::new(0)), None);
    let (body, meta) = (pay("slow-1", 350), RequestMeta::default());
    let _ = tokio::time::timeout(Duration::from_millis(50), d.handle(&body, &meta)).await;
    assert_eq!(d.shutdown(Duration::from_millis(20)).await, 1, "one record left processing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hanging_up_during_the_claim_leaves_no_orphaned_claim() {
    let inner: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let slow = Arc::new(SwitchableStore::new(inner.clone()));
    slow.set_claim_delay(Duration::from_millis(200));
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(slow.clone(), runs.clone(), None);
    // The client gives up after its claim landed, before the answer came back.
    let (body, meta) = (pay("hangup-1", 0), RequestMeta::default());
    assert!(tokio::time::timeout(Duration::from_millis(50), d.handle(&body, &meta)).await.is_err());
    // The claim still lands, and the command it guards runs and is recorded: a retry gets the
    // outcome at once instead of `processing` until the lease runs out.
    for _ in 0..100 {
        if stored(&*inner, "hangup-1").await.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stored(&*inner, "hangup-1").await, Some(StoredOutcome::Succeeded(r#"{"charge":1}"#.into())));
    slow.set_claim_delay(Duration::ZERO);
    let (again, status) = call(&d, "hangup-1", 0).await;
    assert!(again.contains(r#""charge":1"#), "{again}");
    assert_eq!(status, Some("duplicate"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_execution_budget_a_command_is_refused_before_its_claim() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let mut registry = Registry::new();
    let counted = runs.clone();
    registry
        .register(
            "pay",
            MethodSpec::command().timeout(Duration::from_millis(400)),
            typed(move |_ctx: Context, p: serde_json::Value| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::time::sleep(Duration::from_millis(p["ms"].as_u64().unwrap_or(0))).await;
                    Ok::<_, RpcError>(serde_json::json!("paid"))
                }
            }),
        )
        .unwrap();
    let d = Arc::new(Dispatcher::with_store(
        registry,
        DispatcherConfig { max_background: 2, ..config() },
        store.clone(),
    ));
    // Two slow commands hold the budget; their clients leave (they keep running).
    for key in ["b-1", "b-2"] {
        let (body, meta) = (pay(key, 300), RequestMeta::default());
        let _ = tokio::time::timeout(Duration::from_millis(30), d.handle(&body, &meta)).await;
    }
    let (third, status) = call(&d, "b-3", 0).await;
    assert!(third.contains("-32007"), "{third}");
    assert_eq!(status, None);
    assert!(store.get(&RecordKey::new("default", "pay", "b-3")).await.unwrap().is_none(), "nothing claimed");
    // Once a place is free, the same key runs.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (again, status) = call(&d, "b-3", 0).await;
    assert!(again.contains(r#""result":"paid""#), "{again}");
    assert_eq!(status, Some("new"));
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_renews_its_lease_while_its_outcome_is_being_written() {
    let inner: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let slow = Arc::new(SwitchableStore::new(inner.clone()));
    // The outcome write takes twice the lease (1.5 s) to land.
    slow.set_complete_delay(LEASE * 2);
    let runs = Arc::new(AtomicUsize::new(0));
    let owner = dispatcher(slow.clone(), runs.clone(), None);
    let other = dispatcher(inner.clone(), runs.clone(), None);
    let owner_call = {
        let owner = owner.clone();
        tokio::spawn(async move { call(&owner, "renewed-1", 0).await })
    };
    // Past the lease, the write still pending: the owner's heartbeats keep the record its own,
    // so another process sees it in progress instead of taking it over.
    tokio::time::sleep(LEASE + Duration::from_millis(500)).await;
    let (during, status) = call(&other, "renewed-1", 0).await;
    assert_eq!(status, Some("processing"), "{during}");
    // A retry reaching the owner meanwhile is answered from the outcome it is still writing.
    let (mine, status) = call(&owner, "renewed-1", 0).await;
    assert_eq!(status, Some("duplicate"), "{mine}");
    let (first, _) = owner_call.await.unwrap();
    assert_eq!(mine, first);
    let (after, status) = call(&other, "renewed-1", 0).await;
    assert_eq!((after.as_str(), status), (first.as_str(), Some("duplicate")));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
}

/// The time a claim waits for the store is not taken from the method's `timeout` (400 ms):
/// a claim answered after 300 ms still leaves the handler its whole budget (it runs 250 ms),
/// rather than a `-32005` recorded for a command whose upstream acted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_claim_does_not_eat_the_methods_timeout() {
    let inner: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let slow = Arc::new(SwitchableStore::new(inner.clone()));
    slow.set_claim_delay(Duration::from_millis(300));
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(slow.clone(), runs.clone(), None);
    let (body, status) = call(&d, "slow-claim-1", 250).await;
    assert!(body.contains(r#""charge":1"#), "{body}");
    assert_eq!(status, Some("new"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
