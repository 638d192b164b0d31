//! [`Executions::run_or_spawn`]: in place until the work waits, in a task of its own from there.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::Executions;
use crate::budget::Budget;
use crate::metrics::Metrics;
use crate::{MemoryStore, Store};

fn executions() -> Executions {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let metrics = Metrics::new();
    let budget = Budget::new(16, &HashMap::new(), metrics.clone());
    Executions::new(store, None, metrics, Duration::from_secs(60), budget)
}

/// The task a piece of work ran in, sent back when it ends.
fn report() -> (oneshot::Sender<tokio::task::Id>, oneshot::Receiver<tokio::task::Id>) {
    oneshot::channel()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_finishes_at_once_runs_in_its_callers_task() {
    let exec = Arc::new(executions());
    let caller = tokio::spawn(async move {
        let (tx, rx) = report();
        exec.run_or_spawn(Box::pin(async move { tx.send(tokio::task::id()).unwrap() })).await;
        (tokio::task::id(), rx.await.expect("the work ran"), exec.tracker.len())
    });
    let (caller, ran_in, tracked) = caller.await.unwrap();
    assert_eq!(ran_in, caller, "no task was spawned for it");
    assert_eq!(tracked, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_waits_goes_on_in_its_own_task_when_its_caller_is_dropped() {
    let exec = Arc::new(executions());
    let (go, wait) = oneshot::channel::<()>();
    let (tx, rx) = report();
    let started = exec.clone();
    let caller = tokio::spawn(async move {
        let work = Box::pin(async move {
            wait.await.expect("released");
            tx.send(tokio::task::id()).unwrap();
        });
        started.run_or_spawn(work).await;
        std::future::pending::<()>().await
    });
    // The caller polled the work once and is now dropped (aborted) with it still waiting.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let caller_id = caller.id();
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    assert_eq!(exec.tracker.len(), 1, "the waiting work is a tracked task");
    go.send(()).unwrap();
    let ran_in = tokio::time::timeout(Duration::from_secs(10), rx).await.unwrap().expect("the work ended");
    assert_ne!(ran_in, caller_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_first_poll_is_caught_and_the_caller_carries_on() {
    let exec = Arc::new(executions());
    let caller = tokio::spawn(async move {
        let (tx, rx) = report();
        exec.run_or_spawn(Box::pin(async move {
            let _dropped_with_the_work = tx;
            if std::hint::black_box(true) {
                panic!("a store's bug");
            }
        }))
        .await;
        // The work's sender was dropped as it unwound: a waiting caller learns it ended.
        rx.await.is_err()
    });
    assert!(caller.await.expect("the caller's task did not panic"), "the work was dropped");
}
