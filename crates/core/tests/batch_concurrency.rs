//! A batch runs its waiting entries concurrently up to `batch.max_concurrency`, answers at once
//! the entries that cannot block, and keeps the answers in request order (SPEC §1).
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use oncerpc_core::{
    BatchConfig, Context, Dispatcher, DispatcherConfig, MethodSpec, Registry, RequestMeta, typed,
};
use oncerpc_protocol::RpcError;

/// `wait` sleeps `ms` and records how many of its calls were running at once; `add` answers
/// at once.
fn dispatcher(max_concurrency: usize, running: Arc<AtomicUsize>, peak: Arc<AtomicUsize>) -> Dispatcher {
    let mut registry = Registry::new();
    registry
        .register(
            "wait",
            MethodSpec::query(),
            typed(move |_ctx: Context, p: serde_json::Value| {
                let (running, peak) = (running.clone(), peak.clone());
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(p["ms"].as_u64().unwrap_or(0))).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, RpcError>(p["n"].clone())
                }
            }),
        )
        .unwrap();
    registry
        .register(
            "add",
            MethodSpec::query(),
            typed(|_ctx: Context, p: (i64, i64)| async move { Ok::<_, RpcError>(p.0 + p.1) }),
        )
        .unwrap();
    let config = DispatcherConfig {
        batch: BatchConfig { enabled: true, max_size: 50, max_concurrency },
        ..DispatcherConfig::default()
    };
    Dispatcher::new(registry, config)
}

#[tokio::test]
async fn waiting_entries_run_concurrently_up_to_the_limit_and_answers_keep_their_order() {
    let (running, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let d = dispatcher(4, running.clone(), peak.clone());
    // 40 entries: every third answers at once, the others wait a varying time (later entries
    // often finish first), so order must be restored.
    let entries: Vec<serde_json::Value> = (0..40)
        .map(|i| {
            if i % 3 == 0 {
                serde_json::json!({"jsonrpc":"2.0","method":"add","params":[i, 1000],"id":i})
            } else {
                let ms = 5 + (i * 7) % 23;
                serde_json::json!({"jsonrpc":"2.0","method":"wait","params":{"ms":ms,"n":i},"id":i})
            }
        })
        .collect();
    let body = serde_json::to_vec(&entries).unwrap();
    let reply = d.handle(&body, &RequestMeta::default()).await;
    let answers: Vec<serde_json::Value> = serde_json::from_slice(&reply.body.unwrap()).unwrap();
    assert_eq!(answers.len(), 40);
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a["id"], i, "answer {i} out of order: {a}");
        let expected = if i % 3 == 0 { serde_json::json!(i + 1000) } else { serde_json::json!(i) };
        assert_eq!(a["result"], expected, "{a}");
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 4, "{peak} waiting entries ran at once, the limit is 4");
    assert!(peak >= 2, "waiting entries ran one after the other ({peak} at once)");
    assert_eq!(running.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_limit_of_one_runs_waiting_entries_one_at_a_time() {
    let (running, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let d = dispatcher(1, running, peak.clone());
    let entries: Vec<serde_json::Value> = (0..6)
        .map(|i| serde_json::json!({"jsonrpc":"2.0","method":"wait","params":{"ms":3,"n":i},"id":i}))
        .collect();
    let reply = d.handle(&serde_json::to_vec(&entries).unwrap(), &RequestMeta::default()).await;
    let answers: Vec<serde_json::Value> = serde_json::from_slice(&reply.body.unwrap()).unwrap();
    let ids: Vec<u64> = answers.iter().map(|a| a["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(peak.load(Ordering::SeqCst), 1);
}
