//! Events tell the truth (issue "events you can trust"): concurrent duplicate submissions
//! leave the winner's event, an event follows its key's outcome whatever door retried it, and
//! a failed event write after a force retry or take-over keeps the key's record.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use oncerpc_core::journal::{StepStatus, StepView};
use oncerpc_core::store::{Claim, ClaimRequest, EventFilter, EventStatus, RecordKey, RecordState, now_ms};
use oncerpc_core::testkit::SwitchableStore;
use oncerpc_core::{
    Context, Dispatcher, DispatcherConfig, IdempotencyStatus, MemoryStore, MethodSpec, Registry, RequestMeta,
    Store, typed,
};
use oncerpc_protocol::{ErrorCode, RawValue, RpcError};

/// `step`: a one-step flow that shows its step in the event, then answers `{"n": n}`;
/// `flaky`: fails its first execution of each key, then succeeds; `broken`: always fails.
fn dispatcher(store: Arc<dyn Store>, runs: Arc<AtomicUsize>, config: DispatcherConfig) -> Arc<Dispatcher> {
    let mut registry = Registry::new();
    let r = runs.clone();
    registry
        .register(
            "step",
            MethodSpec::command(),
            typed(move |ctx: Context, p: serde_json::Value| {
                r.fetch_add(1, Ordering::SeqCst);
                async move {
                    let journal = ctx.journal.expect("keyed");
                    let view = |status| StepView {
                        name: "only".into(),
                        status,
                        attempts: 1,
                        started_at_ms: now_ms(),
                        finished_at_ms: None,
                        key: None,
                        output: None,
                        error: None,
                    };
                    journal.report(0, view(StepStatus::Running)).await;
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    journal.report(0, view(StepStatus::Succeeded)).await;
                    Ok::<_, RpcError>(serde_json::json!({ "n": p["n"] }))
                }
            }),
        )
        .unwrap();
    let seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::<String>::new()));
    let r = runs.clone();
    registry
        .register(
            "flaky",
            MethodSpec::command(),
            typed(move |ctx: Context, _p: serde_json::Value| {
                r.fetch_add(1, Ordering::SeqCst);
                let first =
                    seen.lock().unwrap().insert(ctx.idempotency_key.as_deref().unwrap_or("").to_owned());
                async move {
                    if first {
                        Err(RpcError::new(ErrorCode::UpstreamFailed))
                    } else {
                        Ok::<_, RpcError>(serde_json::json!("ok"))
                    }
                }
            }),
        )
        .unwrap();
    registry
        .register(
            "broken",
            MethodSpec::command(),
            typed(move |_ctx: Context, _p: serde_json::Value| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move { Err::<serde_json::Value, _>(RpcError::new(ErrorCode::UpstreamFailed)) }
            }),
        )
        .unwrap();
    Arc::new(Dispatcher::with_store(registry, config, store))
}

fn meta(key: &str, force_retry: bool) -> RequestMeta {
    RequestMeta { idempotency_key: Some(Arc::from(key)), force_retry, ..RequestMeta::default() }
}

fn params(json: &str) -> Box<RawValue> {
    RawValue::from_string(json.to_owned()).unwrap()
}

/// Wait (bounded) until the event is no longer processing; returns it.
async fn settled(store: &dyn Store, id: &str) -> oncerpc_core::store::Event {
    for _ in 0..300 {
        let e = store.get_event(id).await.unwrap().expect("the event exists");
        if e.status != EventStatus::Processing {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("event {id} stayed processing");
}

/// Finding 1: eight parallel async submissions of each of 40 keys, the duplicates' event
/// writes landing after the owner's (as a race would order them). Every event ends as its
/// owner left it — succeeded, with its step — and each key ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_duplicate_submits_leave_the_owners_event() {
    let switch = Arc::new(SwitchableStore::new(Arc::new(MemoryStore::default())));
    // The owner's write lands after 10 ms; a duplicate's blank one after 60 ms: a duplicate
    // that looked for the event before the owner wrote it writes after the owner did.
    switch.set_event_write_delays(Duration::from_millis(10), Duration::from_millis(60));
    let store: Arc<dyn Store> = switch.clone();
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(store.clone(), runs.clone(), DispatcherConfig::default());
    let mut tasks = Vec::new();
    for k in 0..40 {
        for _ in 0..8 {
            let d = d.clone();
            tasks.push(tokio::spawn(async move {
                let p = params(&format!(r#"{{"n":{k}}}"#));
                d.submit("step", Some(&p), &meta(&format!("key-{k}"), false), vec![]).await.expect("accepted")
            }));
        }
    }
    let mut ids = std::collections::HashMap::new();
    for t in tasks {
        let s = t.await.unwrap();
        ids.entry(s.key.to_string()).or_insert_with(Vec::new).push(s.event_id);
    }
    assert_eq!(ids.len(), 40);
    for (key, evs) in &ids {
        assert!(evs.iter().all(|e| *e == evs[0]), "{key}: one event id for every duplicate");
        let e = settled(&*store, &evs[0]).await;
        assert_eq!(e.status, EventStatus::Succeeded, "{key}: {e:?}");
        let record = store.get(&e.record).await.unwrap().expect("record");
        assert_eq!(e.token, record.token, "{key}: the event is the owner's");
        match record.state {
            RecordState::Done(outcome) => {
                assert_eq!(e.outcome, Some(outcome), "{key}: event = key's outcome")
            }
            other => panic!("{key}: record not done: {other:?}"),
        }
        let steps = e.steps.expect("the owner's step views");
        assert!(steps.contains(r#""status":"succeeded""#), "{key}: {steps}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 40, "each key ran once");
}

/// Finding 2: an async event that failed, force-retried through a sync door and succeeding
/// there, says `succeeded` with the key's outcome, and is no longer listed as failed.
#[tokio::test]
async fn an_event_follows_a_sync_force_retry_of_its_key() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(store.clone(), runs.clone(), DispatcherConfig::default());
    let s = d.submit("flaky", Some(&params("{}")), &meta("pay-1", false), vec![]).await.unwrap();
    let e = settled(&*store, &s.event_id).await;
    assert_eq!(e.status, EventStatus::Failed);

    let body = br#"{"jsonrpc":"2.0","method":"flaky","params":{"idempotency_key":"pay-1","force_retry":true},"id":1}"#;
    let reply = d.handle(body, &RequestMeta::default()).await;
    assert_eq!(String::from_utf8(reply.body.unwrap()).unwrap(), r#"{"jsonrpc":"2.0","result":"ok","id":1}"#);
    assert_eq!(reply.idempotency.unwrap().status, IdempotencyStatus::New);

    let e = settled(&*store, &s.event_id).await;
    assert_eq!(e.status, EventStatus::Succeeded, "the event follows the key: {e:?}");
    assert_eq!(e.outcome.map(|o| o.json().to_owned()).as_deref(), Some(r#""ok""#));
    let failed = EventFilter { status: Some(EventStatus::Failed), ..Default::default() };
    let (listed, _) = store.list_events("default", &failed, None, 10).await.unwrap();
    assert!(listed.is_empty(), "not listed as failed any more: {listed:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// Finding 9, force retry: the event write fails after the force retry's claim. The request
/// is refused (`-32004`) and the key keeps its stored failure: a retry gets it, nothing runs.
#[tokio::test]
async fn a_failed_event_write_after_a_force_retry_keeps_the_failure() {
    let switch = Arc::new(SwitchableStore::new(Arc::new(MemoryStore::default())));
    let store: Arc<dyn Store> = switch.clone();
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(store.clone(), runs.clone(), DispatcherConfig::default());
    let s = d.submit("broken", Some(&params("{}")), &meta("order-9", false), vec![]).await.unwrap();
    let before = settled(&*store, &s.event_id).await;
    assert_eq!(before.status, EventStatus::Failed);

    switch.set_event_writes_down(true);
    let err = d.submit("broken", Some(&params("{}")), &meta("order-9", true), vec![]).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::StoreUnavailable);
    switch.set_event_writes_down(false);

    let record = store.get(&before.record).await.unwrap().expect("the record is kept");
    assert!(
        matches!(&record.state, RecordState::Done(o) if Some(o) == before.outcome.as_ref()),
        "the stored failure is back: {record:?}"
    );
    let again = d.submit("broken", Some(&params("{}")), &meta("order-9", false), vec![]).await.unwrap();
    assert_eq!(again.status, IdempotencyStatus::Duplicate, "a retry gets the stored failure");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "nothing ran again");
}

/// Finding 9, take-over: the event write fails after a take-over of an execution whose owner
/// died with a finished step. The record and its step journal are kept for the next claimant.
#[tokio::test]
async fn a_failed_event_write_after_a_take_over_keeps_the_journal() {
    let switch = Arc::new(SwitchableStore::new(Arc::new(MemoryStore::default())));
    let store: Arc<dyn Store> = switch.clone();
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(store.clone(), runs.clone(), DispatcherConfig::default());
    // The fingerprint of these params, as the dispatcher makes it: from a finished probe.
    let probe = d.submit("step", Some(&params("{}")), &meta("probe", false), vec![]).await.unwrap();
    let probe = settled(&*store, &probe.event_id).await;
    let fingerprint = store.get(&probe.record).await.unwrap().expect("probe record").fingerprint;
    let record = RecordKey::new("default", "step", "dead-owner");
    let req = ClaimRequest {
        key: &record,
        fingerprint: &fingerprint,
        force_retry: false,
        lease: Duration::from_millis(50),
        ttl: Duration::from_secs(3600),
    };
    let Claim::Acquired { token, .. } = store.claim(req).await.unwrap() else { panic!("claim") };
    assert!(
        store.put_step(&record, token, 0, r#"{"reserved":true}"#, Duration::from_millis(50)).await.unwrap()
    );
    tokio::time::sleep(Duration::from_millis(120)).await;

    switch.set_event_writes_down(true);
    let err = d.submit("step", Some(&params("{}")), &meta("dead-owner", false), vec![]).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::StoreUnavailable);
    let kept = store.get(&record).await.unwrap().expect("the record is kept");
    assert_eq!(kept.steps.get(&0).map(String::as_str), Some(r#"{"reserved":true}"#), "its journal too");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the probe ran");
}
