//! SPEC §3 over HTTP against a real server: exactly-once commands, processing, replay,
//! force retry, validation leaving no record, fail-closed store, production mode.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{TestServer, test_config};
use oncerpc::App;
use oncerpc_core::testkit::SwitchableStore;
use oncerpc_core::{Context, MethodSpec, Mode, Registry, typed};
use serde_json::{Value, json};

fn increment(key: &str, by: i64, id: u64) -> String {
    json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":by,"idempotency_key":key},"id":id})
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_identical_commands_execute_once() {
    let s = Arc::new(TestServer::start().await);
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move { s.post(increment("pay-200", 7, i)).await }));
    }
    let (mut results, mut in_progress) = (0, 0);
    let mut statuses = std::collections::HashMap::<String, usize>::new();
    for t in tasks {
        let a = t.await.unwrap();
        assert_eq!(a.status, 200);
        *statuses.entry(a.header("x-idempotency-status").unwrap_or("none").to_string()).or_default() += 1;
        let v = a.json();
        if v.get("result").is_some() {
            assert_eq!(v["result"], json!({"total": 7}), "every result is the one execution's result");
            results += 1;
        } else {
            assert_eq!(v["error"]["code"], -32001, "the only other answer is 'in progress': {v}");
            in_progress += 1;
        }
    }
    assert_eq!(results + in_progress, 200);
    assert_eq!(s.demo.counter("default"), 7, "exactly one execution");
    assert_eq!(statuses.get("new"), Some(&1), "exactly one `new`: {statuses:?}");
    // Afterwards every retry is a duplicate with the same result.
    let a = s.post(increment("pay-200", 7, 999)).await;
    assert_eq!(a.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(a.json()["result"], json!({"total": 7}));
}

#[tokio::test]
async fn retried_command_is_counted_once_and_replayed_byte_identical() {
    let s = TestServer::start().await;
    let first = s.post(increment("order-1", 5, 1)).await;
    assert_eq!(first.header("x-idempotency-key"), Some("order-1"));
    assert_eq!(first.header("x-idempotency-status"), Some("new"));
    let second = s.post(increment("order-1", 5, 1)).await;
    assert_eq!(second.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(second.body, first.body, "same id → the whole response byte-identical");
    // Another id: the outcome bytes are the same, the id is the new request's.
    let third = s.post(increment("order-1", 5, 42)).await;
    assert_eq!(third.body, first.body.replace(r#""id":1}"#, r#""id":42}"#));
    assert_eq!(s.demo.counter("default"), 5);
}

#[tokio::test]
async fn header_keys_work_and_must_agree_with_params() {
    let s = TestServer::start().await;
    let body = json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":2},"id":1}).to_string();
    let a = s.post_with(body.clone(), &[("X-Idempotency-Key", "hdr-1")]).await;
    assert_eq!(a.header("x-idempotency-status"), Some("new"));
    let b = s.post_with(body.clone(), &[("Idempotency-Key", "hdr-1")]).await;
    assert_eq!(b.header("x-idempotency-status"), Some("duplicate"), "the IETF header names the same key");
    assert_eq!(s.demo.counter("default"), 2);

    let conflict = s.post_with(increment("params-key", 1, 3), &[("X-Idempotency-Key", "other-key")]).await;
    let v = conflict.json();
    assert_eq!(v["error"]["code"], -32602);
    assert_eq!(s.demo.counter("default"), 2, "a conflicting key runs nothing");

    let both = s.post_with(body, &[("X-Idempotency-Key", "k-a"), ("Idempotency-Key", "k-b")]).await;
    assert_eq!(both.status, 400);
}

#[tokio::test]
async fn key_format_is_checked_before_execution_with_exact_messages() {
    let s = TestServer::start().await;
    for (key, msg) in [
        ("a b", "invalid idempotency key: invalid characters"),
        ("key/1", "invalid idempotency key: invalid characters"),
        ("ab", "invalid idempotency key: key length must be between 3 and 128 characters"),
        (&"k".repeat(129), "invalid idempotency key: key length must be between 3 and 128 characters"),
    ] {
        let v = s.post(increment(key, 1, 1)).await.json();
        assert_eq!(v["error"]["code"], -32602, "{key}");
        assert_eq!(v["error"]["message"], msg, "{key}");
    }
    let v = s
        .call(json!({"jsonrpc":"2.0","method":"counter.increment","params":{"idempotency_key":12345},"id":1}))
        .await;
    assert_eq!(v["error"]["code"], -32602);
    assert_eq!(s.demo.counter("default"), 0);
}

#[tokio::test]
async fn same_key_with_other_params_is_refused() {
    let s = TestServer::start().await;
    s.post(increment("reuse-1", 1, 1)).await;
    let v = s.post(increment("reuse-1", 2, 2)).await.json();
    assert_eq!(v["error"]["code"], -32002);
    assert_eq!(v["id"], 2);
    assert_eq!(s.demo.counter("default"), 1);
    // Member order and the reserved members do not change the fingerprint.
    let reordered = r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"idempotency_key":"reuse-1","by":1},"id":3}"#;
    let a = s.post(reordered).await;
    assert_eq!(a.header("x-idempotency-status"), Some("duplicate"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_command_answers_processing_then_duplicate() {
    let s = Arc::new(TestServer::start().await);
    let body = json!({"jsonrpc":"2.0","method":"demo.sleep","params":{"ms":600,"idempotency_key":"sleep-1"},"id":"s"})
        .to_string();
    let first = {
        let (s, body) = (s.clone(), body.clone());
        tokio::spawn(async move { s.post(body).await })
    };
    s.wait_processing("default", "demo.sleep", "sleep-1").await;
    let p = s.post(body.clone()).await;
    assert_eq!(p.header("x-idempotency-status"), Some("processing"), "{}", p.body);
    let v = p.json();
    assert_eq!(v["error"]["code"], -32001);
    assert!(v["error"]["data"]["retry_after_ms"].as_u64().unwrap() > 0);
    assert_eq!(v["id"], "s");
    let first = first.await.unwrap();
    assert_eq!(first.header("x-idempotency-status"), Some("new"));
    assert_eq!(first.json()["result"], json!({"slept_ms": 600}));
    let after = s.post(body).await;
    assert_eq!(after.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(after.body, first.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_is_counted_as_client_closed_and_its_command_still_completes_once() {
    use tokio::io::AsyncWriteExt;
    let s = TestServer::start().await;
    let body = json!({"jsonrpc":"2.0","method":"demo.sleep","params":{"ms":300,"idempotency_key":"gone-1"},"id":"g"})
        .to_string();
    let mut conn = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "POST /rpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(body.as_bytes()).await.unwrap();
    s.wait_processing("default", "demo.sleep", "gone-1").await;
    drop(conn); // the client hangs up mid-execution

    // `oncerpc_requests_total` of demo.sleep, by outcome.
    let count = |metrics: &str, outcome: &str| -> Option<String> {
        let want = format!(r#"outcome="{outcome}""#);
        metrics
            .lines()
            .find(|l| {
                l.starts_with("oncerpc_requests_total{")
                    && l.contains(r#"method="demo.sleep""#)
                    && l.contains(&want)
            })
            .and_then(|l| l.rsplit(' ').next().map(str::to_owned))
    };
    let mut metrics = String::new();
    for _ in 0..500 {
        metrics = s.get("/metrics").await.body;
        if count(&metrics, "client_closed").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        count(&metrics, "client_closed").as_deref(),
        Some("1"),
        "the hang-up is counted once: {metrics}"
    );
    // (The `ok` series exists from registration on: its handle is resolved once.)
    assert_eq!(count(&metrics, "ok").as_deref(), Some("0"), "and not as answered: {metrics}");
    // The command ran to the end anyway; its outcome was stored: a retry replays it.
    let mut retry = s.post(body.clone()).await;
    for _ in 0..500 {
        if retry.header("x-idempotency-status") != Some("processing") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        retry = s.post(body.clone()).await;
    }
    assert_eq!(retry.header("x-idempotency-status"), Some("duplicate"), "{}", retry.body);
    assert_eq!(retry.json(), json!({"jsonrpc":"2.0","result":{"slept_ms":300},"id":"g"}));
}

#[tokio::test]
async fn failed_command_is_replayed_then_force_retried_then_refused() {
    let s = TestServer::start().await;
    let body = |force: bool| {
        json!({"jsonrpc":"2.0","method":"demo.flaky","params":{"fail_times":1,"idempotency_key":"flaky-1","force_retry":force},"id":1})
            .to_string()
    };
    let failed = s.post(body(false)).await;
    assert_eq!(failed.header("x-idempotency-status"), Some("new"));
    assert_eq!(failed.json()["error"]["code"], -32006);
    assert_eq!(s.demo.flaky_attempts("default", "flaky-1"), 1);

    let replay = s.post(body(false)).await;
    assert_eq!(replay.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(replay.body, failed.body, "the stored failure, byte-identical");
    assert_eq!(s.demo.flaky_attempts("default", "flaky-1"), 1, "a replay runs nothing");

    let forced = s.post(body(true)).await;
    assert_eq!(forced.header("x-idempotency-status"), Some("new"));
    assert_eq!(forced.json()["result"]["ok"], true);
    assert_eq!(s.demo.flaky_attempts("default", "flaky-1"), 2);

    let again = s.post(body(true)).await.json();
    assert_eq!(again["error"]["code"], -32003);
    assert_eq!(s.demo.flaky_attempts("default", "flaky-1"), 2, "-32003: nothing ran");

    // The header form of force retry is refused the same way.
    let hdr = s.post_with(body(false), &[("X-Force-Retry", "true")]).await.json();
    assert_eq!(hdr["error"]["code"], -32003);
    let plain = s.post(body(false)).await;
    assert_eq!(plain.body, forced.body, "the success is what is stored now");
}

#[tokio::test]
async fn validation_errors_leave_no_record_so_a_corrected_retry_runs() {
    let s = TestServer::start().await;
    // Schema failure (counter.increment's params_schema).
    let bad = json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":"ten","idempotency_key":"fix-1"},"id":1});
    assert_eq!(s.call(bad).await["error"]["code"], -32602);
    let good = s.post(increment("fix-1", 10, 2)).await;
    assert_eq!(good.header("x-idempotency-status"), Some("new"));
    assert_eq!(s.demo.counter("default"), 10);
    assert_eq!(s.post(increment("fix-1", 10, 3)).await.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(s.demo.counter("default"), 10, "executed once");

    // Invalid params found inside the handler (the counter would overflow): the claim is
    // released.
    let bad = json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":i64::MAX,"idempotency_key":"fix-2"},"id":4});
    let v = s.call(bad).await;
    assert_eq!(v["error"]["code"], -32602);
    assert!(v["error"]["message"].as_str().unwrap().contains("overflow"), "{v}");
    let a = s.post(increment("fix-2", 1, 5)).await;
    assert_eq!(a.header("x-idempotency-status"), Some("new"), "{}", a.body);
    assert_eq!(s.demo.counter("default"), 11);
}

#[tokio::test]
async fn production_mode_requires_a_key_for_commands_but_not_queries() {
    let mut cfg = test_config();
    cfg.mode = Mode::Production;
    // Production mode refuses `demo = true`: the demo methods are registered by hand.
    let demo = Arc::new(oncerpc::demo::DemoState::default());
    let mut registry = Registry::new();
    oncerpc::demo::register(&mut registry, demo.clone(), Duration::from_secs(30)).unwrap();
    let s = TestServer::start_app(App::with_registry(cfg, registry, demo)).await;
    let v = s.call(json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":1},"id":1})).await;
    assert_eq!(v["error"]["code"], -32602);
    assert_eq!(v["error"]["message"], "idempotency_key is required for commands");
    assert_eq!(s.demo.counter("default"), 0);
    let q = s.call(json!({"jsonrpc":"2.0","method":"counter.get","id":2})).await;
    assert_eq!(q["result"], json!({"total": 0}));
    let ok = s.post(increment("prod-1", 1, 3)).await;
    assert_eq!(ok.header("x-idempotency-status"), Some("new"));
}

#[tokio::test]
async fn dev_mode_runs_keyless_commands_without_deduplication() {
    let s = TestServer::start().await;
    let body = json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":1},"id":1}).to_string();
    let a = s.post(body.clone()).await;
    let b = s.post(body).await;
    assert_eq!(a.header("x-idempotency-status"), None);
    assert_eq!(b.json()["result"], json!({"total": 2}));
}

#[tokio::test]
async fn same_key_twice_in_one_batch_executes_once_and_both_carry_the_outcome() {
    let s = TestServer::start().await;
    let batch = format!("[{},{},{}]", increment("b-1", 3, 1), increment("b-1", 3, 2), increment("b-2", 1, 3));
    let v = s.post(batch).await.json();
    assert_eq!(v[0], json!({"jsonrpc":"2.0","result":{"total":3},"id":1}));
    assert_eq!(v[1], json!({"jsonrpc":"2.0","result":{"total":3},"id":2}));
    assert_eq!(v[2], json!({"jsonrpc":"2.0","result":{"total":4},"id":3}));
    assert_eq!(s.demo.counter("default"), 4);
    // Same key, other params, in one batch → the second is a reuse error.
    let batch = format!("[{},{}]", increment("b-3", 1, 1), increment("b-3", 2, 2));
    let v = s.post(batch).await.json();
    assert_eq!(v[0]["result"], json!({"total": 5}));
    assert_eq!(v[1]["error"]["code"], -32002);
}

#[tokio::test]
async fn a_header_key_on_a_batch_is_a_400() {
    let s = TestServer::start().await;
    let a = s.post_with(format!("[{}]", increment("x-1", 1, 1)), &[("X-Idempotency-Key", "batch-key")]).await;
    assert_eq!(a.status, 400);
    let v = a.json();
    assert_eq!(v["id"], Value::Null);
    assert_eq!(v["error"]["code"], -32600);
    assert_eq!(s.demo.counter("default"), 0);
}

#[tokio::test]
async fn a_force_retry_header_on_a_batch_is_a_400() {
    let s = TestServer::start().await;
    for value in ["true", "false"] {
        let a = s.post_with(format!("[{}]", increment("fr-1", 1, 1)), &[("X-Force-Retry", value)]).await;
        assert_eq!(a.status, 400, "{}", a.body);
        let v = a.json();
        assert_eq!(v["id"], Value::Null);
        assert_eq!(v["error"]["code"], -32600);
        assert!(v["error"]["message"].as_str().unwrap().contains("X-Force-Retry"), "{v}");
    }
    assert_eq!(s.demo.counter("default"), 0, "nothing in the batch ran");
    // On a single request the header still applies.
    let a = s.post_with(increment("fr-1", 1, 2), &[("X-Force-Retry", "true")]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(s.demo.counter("default"), 1);
}

#[tokio::test]
async fn store_failure_fails_closed_queries_keep_working_and_service_recovers() {
    let demo = Arc::new(oncerpc::demo::DemoState::default());
    let mut registry = Registry::new();
    oncerpc::demo::register(&mut registry, demo.clone(), Duration::from_secs(30)).unwrap();
    let store = Arc::new(SwitchableStore::new(Arc::new(oncerpc_core::MemoryStore::default())));
    store.set_down(true);
    let app = App::with_store(test_config(), registry, demo, store.clone()).unwrap();
    let s = TestServer::start_app(app).await;
    let v = s.post(increment("down-1", 1, 1)).await.json();
    assert_eq!(v["error"]["code"], -32004);
    assert_eq!(v["id"], 1);
    assert_eq!(s.demo.counter("default"), 0, "the command did not run");
    let q = s.call(json!({"jsonrpc":"2.0","method":"sum","params":[1,2],"id":2})).await;
    assert_eq!(q["result"], 3, "queries do not touch the store");
    let health = s.get("/healthz").await;
    assert_eq!(health.status, 503);
    // SPEC §12: the store's error text goes to the log, never to the client.
    assert_eq!(health.json(), json!({"status": "degraded", "store": "memory"}), "{}", health.body);
    assert!(!health.body.contains("refused") && !health.body.contains("error"), "{}", health.body);
    let metrics = s.get("/metrics").await.body;
    assert!(metrics.contains(r#"oncerpc_store_errors_total{store="memory"} 1"#), "{metrics}");
    // The store comes back: so does the service, by itself.
    store.set_down(false);
    let a = s.post(increment("down-1", 1, 3)).await;
    assert_eq!(a.header("x-idempotency-status"), Some("new"));
    assert_eq!(s.demo.counter("default"), 1);
    assert_eq!(s.get("/healthz").await.status, 200);
}

#[tokio::test]
async fn handler_context_carries_key_status_and_correlation_id() {
    let mut registry = Registry::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    registry
        .register(
            "ctx.echo",
            MethodSpec::command(),
            typed(move |ctx: Context, _p: serde_json::Value| {
                c.fetch_add(1, Ordering::SeqCst);
                async move {
                    Ok(json!({
                        "key": ctx.idempotency_key.as_deref(),
                        "status": ctx.idempotency_status.map(|s| s.as_str()),
                        "correlation_id": &*ctx.correlation_id,
                        "tenant": &*ctx.tenant,
                    }))
                }
            }),
        )
        .unwrap();
    let app = App::with_registry(test_config(), registry, Default::default());
    let s = TestServer::start_app(app).await;
    let body =
        json!({"jsonrpc":"2.0","method":"ctx.echo","params":{"idempotency_key":"ctx-1"},"id":"corr-9"});
    let v = s.call(body.clone()).await;
    assert_eq!(
        v["result"],
        json!({"key":"ctx-1","status":"new","correlation_id":"corr-9","tenant":"default"})
    );
    s.call(body).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
