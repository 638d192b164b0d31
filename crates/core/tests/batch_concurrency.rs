//! A batch runs its waiting entries concurrently up to `batch.max_concurrency`, answers at once
//! the entries that cannot block, and keeps the answers in request order (SPEC §1). A query
//! dropped while it waits, in a batch or alone, is counted once as `client_closed`.
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

/// Queries of every kind, each answered in a batch exactly as it is alone: a batch answers
/// its queries on a path of its own (`dispatch/quick.rs`), the single request on the general one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_each_entry_as_the_same_request_alone() {
    let mut registry = Registry::new();
    let query = || MethodSpec::query().timeout(Duration::from_millis(300));
    registry
        .register(
            "add",
            query().params_schema(serde_json::json!({"type": "array", "items": {"type": "integer"}})),
            typed(|_ctx: Context, p: (i64, i64)| async move { Ok::<_, RpcError>(p.0 + p.1) }),
        )
        .unwrap();
    registry
        .register(
            "fails",
            query(),
            typed(|_ctx: Context, _p: serde_json::Value| async move {
                Err::<(), _>(RpcError::invalid_params("invalid params: no"))
            }),
        )
        .unwrap();
    registry
        .register(
            "panics",
            query(),
            typed(|_ctx: Context, p: serde_json::Value| async move {
                if p.is_null() {
                    panic!("a handler's bug");
                }
                Ok::<_, RpcError>(())
            }),
        )
        .unwrap();
    registry
        .register(
            "sleeps",
            query(),
            typed(|_ctx: Context, p: serde_json::Value| async move {
                tokio::time::sleep(Duration::from_millis(p["ms"].as_u64().unwrap_or(0))).await;
                Ok::<_, RpcError>(p["ms"].clone())
            }),
        )
        .unwrap();
    registry
        .register(
            "trace",
            query(),
            typed(|ctx: Context, _p: serde_json::Value| async move {
                Ok::<_, RpcError>(ctx.trace.map(|t| t.trace_id))
            }),
        )
        .unwrap();
    registry
        .register(
            "pay",
            MethodSpec::command(),
            typed(|_ctx: Context, p: Vec<i64>| async move { Ok::<_, RpcError>(p[0]) }),
        )
        .unwrap();
    let d = Dispatcher::new(registry, DispatcherConfig::default());
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let entries = [
        serde_json::json!({"jsonrpc":"2.0","method":"add","params":[1, 2],"id":1}),
        serde_json::json!({"jsonrpc":"2.0","method":"add","params":["x", 2],"id":2}),
        serde_json::json!({"jsonrpc":"2.0","method":"add","params":[1],"id":"three"}),
        serde_json::json!({"jsonrpc":"2.0","method":"fails","id":4}),
        serde_json::json!({"jsonrpc":"2.0","method":"panics","id":5}),
        serde_json::json!({"jsonrpc":"2.0","method":"sleeps","params":{"ms":20},"id":6}),
        serde_json::json!({"jsonrpc":"2.0","method":"sleeps","params":{"ms":1000},"id":7}),
        serde_json::json!({"jsonrpc":"2.0","method":"trace","params":{"_meta":{"traceparent":traceparent}},"id":8}),
        serde_json::json!({"jsonrpc":"2.0","method":"trace","id":9}),
        serde_json::json!({"jsonrpc":"2.0","method":"nope","id":10}),
        serde_json::json!({"jsonrpc":"2.0","method":"rpc.discover","id":11}),
        serde_json::json!({"jsonrpc":"2.0","method":"pay","params":[7],"id":12}),
        serde_json::json!({"jsonrpc":"2.0","method":"add","params":[1, 2]}),
        serde_json::json!({"jsonrpc":"2.0","method":"add","params":[1, 2],"id":null}),
    ];
    let meta = RequestMeta::default();
    let answer =
        |body: Option<Vec<u8>>| body.map(|b| serde_json::from_slice::<serde_json::Value>(&b).unwrap());
    let mut alone = Vec::new();
    for e in &entries {
        alone.extend(answer(d.handle(&serde_json::to_vec(e).unwrap(), &meta).await.body));
    }
    let batch = answer(d.handle(&serde_json::to_vec(&entries).unwrap(), &meta).await.body).unwrap();
    assert_eq!(batch.as_array().unwrap(), &alone, "the batch's answers and the single ones");
    // What was compared: results, the schema's refusal, the handler's error, its panic, its
    // deadline, a trace context from the entry's own `_meta`, and the general path's entries.
    assert_eq!(alone[0]["result"], 3);
    assert_eq!(alone[1]["error"]["code"], -32602);
    assert_eq!(alone[3]["error"]["message"], "invalid params: no");
    assert_eq!(alone[4]["error"]["code"], -32603);
    assert_eq!(alone[5]["result"], 20);
    assert!(alone[6]["error"]["data"]["timeout_ms"] == 300, "{}", alone[6]);
    assert_eq!(alone[7]["result"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(alone[8]["result"], serde_json::Value::Null);
    assert_eq!(alone[9]["error"]["code"], -32601);
    assert!(alone[10]["result"]["methods"].is_array());
    assert_eq!(alone[11]["result"], 7);
    assert_eq!(alone[12]["error"]["code"], -32600, "a notification the method refuses");
    assert_eq!((&alone[13]["id"], &alone[13]["result"]), (&serde_json::Value::Null, &serde_json::json!(3)));
    // Every entry was counted once: the single requests and the batch's (two `add`s succeed).
    let metrics = d.metrics().render();
    let ok_add = metrics
        .lines()
        .find(|l| {
            l.starts_with("oncerpc_requests_total") && l.contains("method=\"add\"") && l.contains("\"ok\"")
        })
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(ok_add.ends_with(" 4"), "{ok_add}");
}

/// A batch dropped while a query of it waits (the client hung up) counts that entry as
/// `client_closed`, as it counts a single request.
#[tokio::test]
async fn a_batch_dropped_while_a_query_waits_counts_it_as_closed() {
    let (running, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let d = dispatcher(4, running, peak);
    let entries = serde_json::json!([
        {"jsonrpc":"2.0","method":"add","params":[1, 2],"id":1},
        {"jsonrpc":"2.0","method":"wait","params":{"ms":5000,"n":2},"id":2},
    ]);
    let body = serde_json::to_vec(&entries).unwrap();
    let meta = RequestMeta::default();
    assert!(tokio::time::timeout(Duration::from_millis(50), d.handle(&body, &meta)).await.is_err());
    let metrics = d.metrics().render();
    let closed = metrics
        .lines()
        .find(|l| l.contains("method=\"wait\"") && l.contains("client_closed"))
        .unwrap_or_else(|| panic!("no client_closed line: {metrics}"));
    assert!(closed.ends_with(" 1"), "{closed}");
    assert!(
        !metrics.lines().any(|l| l.contains("method=\"add\"") && l.contains("client_closed")),
        "{metrics}"
    );
}

/// A single query dropped while its handler waits (the client hung up) is counted once as
/// `client_closed` and never as answered; one that answers at once is counted `ok`.
#[tokio::test]
async fn a_single_query_dropped_while_it_waits_counts_as_closed() {
    let (running, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let d = dispatcher(4, running, peak);
    let meta = RequestMeta::default();
    let wait = serde_json::to_vec(&serde_json::json!(
        {"jsonrpc":"2.0","method":"wait","params":{"ms":5000,"n":2},"id":2}
    ))
    .unwrap();
    assert!(tokio::time::timeout(Duration::from_millis(50), d.handle(&wait, &meta)).await.is_err());
    let add = serde_json::to_vec(&serde_json::json!({"jsonrpc":"2.0","method":"add","params":[1, 2],"id":1}))
        .unwrap();
    let answer = d.handle(&add, &meta).await.body.unwrap();
    assert_eq!(String::from_utf8(answer).unwrap(), r#"{"jsonrpc":"2.0","result":3,"id":1}"#);
    let metrics = d.metrics().render();
    let line = |method: &str, outcome: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("oncerpc_requests_total")
                    && l.contains(&format!("method=\"{method}\""))
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap().to_owned())
    };
    assert_eq!(line("wait", "client_closed").as_deref(), Some("1"), "{metrics}");
    assert_eq!(line("wait", "ok").as_deref().unwrap_or("0"), "0", "{metrics}");
    assert_eq!(line("add", "ok").as_deref(), Some("1"), "{metrics}");
}
