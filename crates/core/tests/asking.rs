//! A method that asks its client (MethodSpec::asks, an `ask` step): refused with `-32602`
//! before anything is claimed by a door that cannot ask; a run that waits for the answer
//! (`-32013 Input required`) stores no outcome and ends its lease, so the retry with the same
//! key takes the record over at once and finds the journal the first run wrote.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use oncerpc_core::journal::StepDef;
use oncerpc_core::store::{RecordKey, RecordState};
use oncerpc_core::{
    Ask, Asked, Context, Dispatcher, DispatcherConfig, MemoryStore, MethodSpec, Registry, RequestMeta, Store,
    typed,
};
use oncerpc_protocol::{ErrorCode, Outcome, RpcError};

/// `book`: journals step 0, then waits for an answer on the first run; on a run that finds
/// step 0 journaled, answers with how many runs there were.
fn dispatcher(store: Arc<dyn Store>, runs: Arc<AtomicUsize>) -> Arc<Dispatcher> {
    let mut registry = Registry::new();
    let handler = typed(move |ctx: Context, _: serde_json::Value| {
        let runs = runs.clone();
        async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            let journal = ctx.journal.clone().expect("a keyed execution has a journal");
            let step = StepDef::new("check", &["http"]);
            if journal.resumed_steps() == 0 {
                journal.record(0, &step, "flow", "\"checked\"").await.unwrap();
                return Err(RpcError::new(ErrorCode::InputRequired));
            }
            Ok::<_, RpcError>(serde_json::json!({ "runs": n, "resumed": journal.resumed_steps() }))
        }
    });
    registry.register("book", MethodSpec::command().asks(true), handler).unwrap();
    Arc::new(Dispatcher::with_store(registry, DispatcherConfig::default(), store))
}

fn meta(ask: bool) -> RequestMeta {
    RequestMeta {
        idempotency_key: Some(Arc::from("k-1")),
        ask: ask.then(|| Ask::new(|_| Box::pin(async { Asked::Pending("not here".into()) }))),
        ..RequestMeta::default()
    }
}

#[tokio::test]
async fn a_door_that_cannot_ask_runs_and_records_nothing() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(store.clone(), runs.clone());
    let params = serde_json::value::to_raw_value(&serde_json::json!({})).unwrap();
    let (outcome, _, _) = d.call("book", Some(&params), &meta(false)).await;
    match outcome {
        Outcome::Error(e) => assert_eq!(e.code, ErrorCode::InvalidParams, "{e:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(store.get(&RecordKey::new("default", "book", "k-1")).await.unwrap().is_none());
}

#[tokio::test]
async fn a_run_waiting_for_its_answer_is_resumed_by_the_retry_from_its_journal() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(store.clone(), runs.clone());
    let params = serde_json::value::to_raw_value(&serde_json::json!({})).unwrap();
    let (first, _, _) = d.call("book", Some(&params), &meta(true)).await;
    assert!(matches!(&first, Outcome::Error(e) if e.code == ErrorCode::InputRequired), "{first:?}");
    let record = store.get(&RecordKey::new("default", "book", "k-1")).await.unwrap().expect("kept");
    assert!(matches!(record.state, RecordState::Processing { .. }), "no outcome stored");
    assert_eq!(record.steps.len(), 1, "the journal is kept");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (second, _, _) = d.call("book", Some(&params), &meta(true)).await;
    match second {
        Outcome::Result(r) => assert_eq!(r.get(), r#"{"resumed":1,"runs":2}"#),
        other => panic!("the retry takes it over at once: {other:?}"),
    }
}
