//! `oncerpc-client` against the real `oncerpc` binary (issue 30): retries carry the same key
//! across a `kill -9`, a lost answer comes back as a `duplicate`, `Retry-After` is waited
//! for, rejections and keyless commands are sent once; and over random fault schedules a
//! command runs exactly once.

mod common;

use std::time::{Duration, Instant};

use common::faults::{Fault, FaultProxy};
use common::process::{Gateway, TempDir, replica_config};
use common::upstream::Upstream;
use oncerpc_client::{Client, Error, ErrorCode, EventStatus, IdempotencyStatus, RetryPolicy};
use serde_json::{Value, json};

/// A client of `url` with short backoffs (the tests' waits stay small).
fn client(url: &str, deadline: Duration) -> Client {
    Client::http(url)
        .deadline(deadline)
        .attempt_timeout(Duration::from_secs(5))
        .backoff(Duration::from_millis(20), Duration::from_millis(300))
        .build()
        .expect("a client")
}

/// The counter's total, read directly from the gateway.
async fn total(gw: &Gateway) -> i64 {
    let c = client(&gw.url(""), Duration::from_secs(10));
    let v: Value = c.query("counter.get", ()).await.expect("counter.get").result;
    v["total"].as_i64().expect("a total")
}

fn memory_gateway() -> Gateway {
    Gateway::start(&["--store", "memory://"])
}

#[tokio::test]
async fn a_command_survives_a_kill_9_with_the_same_key_on_every_attempt() {
    let up = Upstream::start().await;
    up.set_delay(1_500, &["charge"]);
    let dir = TempDir::new("client-kill9");
    let store = format!("sqlite://{}", dir.file("oncerpc.db").display());
    // The lease outlives the method's timeout (a config rule); after the kill, a retry can
    // take the record over once the dead owner's lease has run out.
    let config = replica_config(&dir, &store, &up, 4_000, 3_000);
    let mut gw = Gateway::start(&["--config", &config]);
    let proxy = FaultProxy::start(gw.addr).await;
    let c = client(&proxy.url(), Duration::from_secs(40));

    let key = common::process::unique("kill9");
    let call = tokio::spawn({
        let (c, key) = (c.clone(), key.clone());
        async move { c.command::<Value>("orders.create", json!({"amount": 42})).key(key).await }
    });
    // The step is in flight on the first gateway: kill it, start another on the same store.
    let deadline = Instant::now() + Duration::from_secs(20);
    while up.count("charge") == 0 {
        assert!(Instant::now() < deadline, "the step was never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gw.kill9();
    let gw2 = Gateway::start(&["--config", &config]);
    proxy.retarget(gw2.addr);

    let outcome = call.await.expect("the call's task").expect("completed by the retries");
    assert_eq!(outcome.key.as_deref(), Some(key.as_str()));
    assert_eq!(outcome.status, Some(IdempotencyStatus::New), "the take-over ran it");
    assert_eq!(outcome.result["step"], "charge");
    assert!(outcome.attempts >= 2, "{outcome:?}");
    // Every attempt the client made carried the same key…
    let seen = proxy.seen();
    assert_eq!(seen.len() as u32, outcome.attempts, "{seen:?}");
    assert!(seen.iter().all(|s| s.key.as_deref() == Some(key.as_str())), "{seen:?}");
    // …and the step was called again only for the interrupted execution, with its step key.
    let calls = up.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[0].idempotency_key.is_some());
    assert_eq!(calls[0].idempotency_key, calls[1].idempotency_key);
    drop(gw2);
}

#[tokio::test]
async fn a_lost_answer_is_retried_and_answered_as_a_duplicate_with_the_same_result() {
    let gw = memory_gateway();
    let proxy = FaultProxy::start(gw.addr).await;
    let before = total(&gw).await;
    proxy.schedule([Fault::DropResponse]);
    let c = client(&proxy.url(), Duration::from_secs(20));
    let outcome =
        c.command::<Value>("counter.increment", json!({"by": 3})).key("lost-answer-1").await.expect("ok");
    let cid = outcome.correlation_id.as_deref().expect("X-Correlation-Id");
    assert_eq!(uuid_version(cid), Some(7), "the call's id is the correlation id: {cid}");
    assert_eq!(outcome.status, Some(IdempotencyStatus::Duplicate));
    assert_eq!(outcome.attempts, 2);
    assert_eq!(outcome.result, json!({"total": before + 3}), "the first execution's result");
    assert_eq!(total(&gw).await, before + 3, "run once");
    let seen = proxy.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.key.as_deref() == Some("lost-answer-1")), "{seen:?}");
}

#[tokio::test]
async fn a_429_with_retry_after_1_is_waited_for() {
    let dir = TempDir::new("client-429");
    let gw = Gateway::with_config(
        &dir,
        r#"
[store]
url = "memory://"

[[tenants]]
name = "slow"
api_keys = ["client-test-key-0001"]
rate_per_sec = 1
burst = 1
"#,
    );
    let c = Client::http(gw.url(""))
        .api_key("client-test-key-0001")
        .deadline(Duration::from_secs(20))
        .build()
        .unwrap();
    c.query::<Value>("counter.get", ()).await.expect("the bucket's one token");
    let started = Instant::now();
    let outcome = c.command::<Value>("counter.increment", json!({"by": 1})).await.expect("after the wait");
    let waited = started.elapsed();
    assert_eq!(outcome.attempts, 2, "a 429, then the answer");
    assert!(waited >= Duration::from_millis(900), "Retry-After: 1 was not waited for: {waited:?}");
    assert_eq!(outcome.status, Some(IdempotencyStatus::New));
}

#[tokio::test]
async fn invalid_params_are_not_retried() {
    let gw = memory_gateway();
    let proxy = FaultProxy::start(gw.addr).await;
    let c = client(&proxy.url(), Duration::from_secs(20));
    let err = c.command::<Value>("counter.increment", json!({"by": "three"})).await.expect_err("-32602");
    assert_eq!(err.code(), Some(ErrorCode::InvalidParams), "{err}");
    let rpc = err.rpc().unwrap();
    assert!(rpc.data.is_some(), "the schema's path is in data: {rpc:?}");
    assert!(rpc.key.is_some(), "the key used is in the error");
    assert_eq!(proxy.seen().len(), 1);
}

#[tokio::test]
async fn a_keyless_command_is_sent_once_even_when_it_times_out() {
    let gw = memory_gateway();
    let proxy = FaultProxy::start(gw.addr).await;
    let c = Client::http(proxy.url())
        .deadline(Duration::from_secs(10))
        .attempt_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let err =
        c.command::<Value>("demo.sleep", json!({"ms": 1500})).without_key().await.expect_err("timed out");
    assert!(matches!(err, Error::Timeout(_)), "{err:?}");
    assert_eq!(proxy.seen().len(), 1, "sent once");
    assert_eq!(proxy.seen()[0].key, None);
    // The same with a key is retried, and completes once.
    let ok = c.command::<Value>("demo.sleep", json!({"ms": 500})).key("sleepy-1").await.expect("completed");
    assert!(ok.attempts >= 2, "{ok:?}");
    assert_eq!(ok.result, json!({"slept_ms": 500}));
}

#[tokio::test]
async fn bad_input_fails_clearly_without_a_panic() {
    // An unreachable URL: the deadline, then the last error.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let c = client(&format!("http://127.0.0.1:{port}"), Duration::from_millis(800));
    let started = Instant::now();
    let err = c.query::<Value>("sum", [1, 2]).await.expect_err("nobody listens");
    assert!(matches!(err, Error::GaveUp { .. }), "{err:?}");
    assert!(matches!(err.last(), Error::Connect(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "bounded by the deadline");

    // An invalid key: refused before anything is sent.
    let gw = memory_gateway();
    let proxy = FaultProxy::start(gw.addr).await;
    let c = client(&proxy.url(), Duration::from_secs(5));
    let err = c
        .command::<Value>("counter.increment", json!({}))
        .key("no spaces please")
        .await
        .expect_err("bad key");
    assert!(matches!(err, Error::InvalidKey(_)), "{err:?}");
    assert!(proxy.seen().is_empty());

    // An answer that is not JSON-RPC: its status and content type are named.
    proxy.schedule([Fault::Answer(404)]);
    let err = c.query::<Value>("sum", [1]).await.expect_err("not JSON");
    match &err {
        Error::Unexpected { status, content_type, .. } => {
            assert_eq!((*status, content_type.as_str()), (404, "text/html"));
        }
        other => panic!("{other:?}"),
    }
    // A 503 page from "a load balancer" is retried.
    proxy.schedule([Fault::Unavailable, Fault::Unavailable]);
    assert_eq!(c.query::<i64>("sum", [1, 2]).await.expect("after two 503").attempts, 3);
}

#[tokio::test]
async fn batches_answer_in_order_with_a_key_per_command() {
    let gw = memory_gateway();
    let proxy = FaultProxy::start(gw.addr).await;
    let c = client(&proxy.url(), Duration::from_secs(20));
    let before = total(&gw).await;
    proxy.schedule([Fault::DropResponse]);
    let answers = c
        .batch()
        .query("sum", [1, 2, 4])
        .command_with_key("counter.increment", json!({"by": 2}), "batch-entry-1")
        .query("nope.unknown", ())
        .command_without_key("counter.increment", json!({"by": 100}))
        .send()
        .await;
    assert_eq!(answers.len(), 4);
    assert_eq!(answers[0].as_ref().unwrap().result, json!(7));
    let cmd = answers[1].as_ref().unwrap();
    assert_eq!(cmd.key.as_deref(), Some("batch-entry-1"));
    assert_eq!(cmd.attempts, 2);
    assert_eq!(answers[2].as_ref().unwrap_err().code(), Some(ErrorCode::MethodNotFound));
    // The keyless entry was in the lost answer: it is not sent again.
    assert!(answers[3].is_err(), "{:?}", answers[3]);
    let after = total(&gw).await;
    assert_eq!(after, before + 2 + 100, "the keyed entry ran once, the keyless one once");
}

#[tokio::test]
async fn flows_are_submitted_waited_for_and_called() {
    let up = Upstream::start().await;
    let dir = TempDir::new("client-flows");
    let config = replica_config(&dir, "memory://", &up, 4_000, 3_000);
    let gw = Gateway::start(&["--config", &config]);
    let c = client(&gw.url(""), Duration::from_secs(20));

    let first =
        c.flow("orders.create", json!({"amount": 1})).key("flow-1").tags(["web"]).submit().await.unwrap();
    let again =
        c.flow("orders.create", json!({"amount": 1})).key("flow-1").tags(["web"]).submit().await.unwrap();
    assert_eq!(first.event_id, again.event_id);
    assert_eq!(again.status, Some(IdempotencyStatus::Duplicate));
    let event = c.wait(&first.event_id).await.expect("finished");
    assert_eq!(event.status, EventStatus::Succeeded);
    assert_eq!(event.result.as_ref().unwrap()["step"], "charge");
    assert_eq!(event.tags, ["web"]);

    let page = c.events().flow("orders.create").tag("web").limit(10).send().await.unwrap();
    assert!(page.events.iter().any(|e| e.event_id == first.event_id), "{page:?}");

    let sync = c.flow("orders.create", json!({"amount": 2})).key("flow-2").call::<Value>().await.unwrap();
    assert_eq!(sync.status, Some(IdempotencyStatus::New));
    let cid = sync.correlation_id.as_deref().expect("X-Correlation-Id");
    assert_eq!(uuid_version(cid), Some(7), "the client's own correlation id: {cid}");
    let dup = c.flow("orders.create", json!({"amount": 2})).key("flow-2").call::<Value>().await.unwrap();
    assert_eq!((dup.status, &dup.result), (Some(IdempotencyStatus::Duplicate), &sync.result));
    assert_eq!(up.count("charge"), 2, "one call per key");

    let err = c.flow("orders.create", json!({"amount": 3})).key("flow-2").call::<Value>().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::KeyReused), "{err}");
    let err = c.retry_event(&first.event_id).await.unwrap_err();
    assert_eq!(err.rpc().and_then(|f| f.http_status), Some(409), "{err}");
}

/// The version of a UUID's text, if it is one.
fn uuid_version(text: &str) -> Option<u8> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit())).then(|| hex.as_bytes()[12] - b'0')
}

#[tokio::test]
async fn the_stdio_daemon_is_a_door_too() {
    let c = Client::stdio(
        env!("CARGO_BIN_EXE_oncerpc"),
        ["stdio", "--store", "memory://", "--log-level", "warn"],
    )
    .with_policy(RetryPolicy { deadline: Duration::from_secs(20), ..RetryPolicy::default() });
    let sum: i64 = c.query("sum", [1, 2, 4]).await.unwrap().result;
    assert_eq!(sum, 7);
    let first = c.command::<Value>("counter.increment", json!({"by": 4})).key("stdio-1").await.unwrap();
    let again = c.command::<Value>("counter.increment", json!({"by": 4})).key("stdio-1").await.unwrap();
    assert_eq!(first.result, json!({"total": 4}));
    assert_eq!(again.result, first.result, "the stored outcome");
    let now: Value = c.query("counter.get", ()).await.unwrap().result;
    assert_eq!(now, json!({"total": 4}));
    let err = c.command::<Value>("counter.increment", [1]).key("stdio-2").await.unwrap_err();
    assert!(matches!(err, Error::InvalidCall(_)), "a key needs object params on stdio: {err:?}");
    let answers = c.batch().query("sum", [1, 1]).command("counter.increment", json!({"by": 1})).send().await;
    assert_eq!(answers[0].as_ref().unwrap().result, json!(2));
    assert_eq!(answers[1].as_ref().unwrap().result, json!({"total": 5}));
}

/// `oncerpc call` / `oncerpc flow`: the result on stdout, status and key on stderr, the exit
/// code says what happened.
#[test]
fn the_call_and_flow_subcommands_print_results_and_exit_with_the_outcome() {
    use std::process::Command;
    let gw = memory_gateway();
    let url = gw.url("");
    let run = |args: &[&str]| {
        let out =
            Command::new(env!("CARGO_BIN_EXE_oncerpc")).args(args).env_remove("RUST_LOG").output().unwrap();
        common::process::keep_output(&out);
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let args = ["call", "--url", &url, "counter.increment", r#"{"by":5}"#, "--key", "cli-1"];
    let (code, stdout, stderr) = run(&args);
    assert_eq!((code, stdout.trim()), (Some(0), r#"{"total":5}"#), "{stderr}");
    assert!(stderr.contains("status: new") && stderr.contains("key: cli-1"), "{stderr}");
    let (code, stdout, stderr) = run(&args);
    assert_eq!((code, stdout.trim()), (Some(0), r#"{"total":5}"#), "{stderr}");
    assert!(stderr.contains("status: duplicate"), "{stderr}");

    let (code, stdout, stderr) = run(&["call", "--url", &url, "sum", "[1,2,4]", "--query"]);
    assert_eq!((code, stdout.trim()), (Some(0), "7"), "{stderr}");

    let (code, stdout, stderr) =
        run(&["call", "--url", &url, "counter.increment", r#"{"by":"x"}"#, "--auto-key"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("code: -32602"), "{stderr}");

    let (code, _, stderr) =
        run(&["call", "--url", "http://127.0.0.1:9", "sum", "[1]", "--query", "--deadline-ms", "300"]);
    assert_eq!(code, Some(3), "unreachable: {stderr}");
    assert!(stderr.contains("gave up") && stderr.contains("connect"), "{stderr}");

    let (code, stdout, stderr) =
        run(&["flow", "--url", &url, "counter.increment", r#"{"by":1}"#, "--key", "cli-flow-1", "--wait"]);
    assert_eq!(code, Some(0), "{stderr}");
    let event: Value = serde_json::from_str(stdout.trim()).expect("the event as JSON");
    assert_eq!((event["status"].as_str(), &event["result"]), (Some("succeeded"), &json!({"total": 6})));
    let (code, stdout, stderr) =
        run(&["flow", "--url", &url, "counter.increment", r#"{"by":1}"#, "--key", "cli-flow-1"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("status: duplicate"), "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(stdout.trim()).unwrap()["event_id"], event["event_id"]);
}

mod property {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    use super::*;

    fn fault() -> impl Strategy<Value = Fault> {
        prop_oneof![
            Just(Fault::DropRequest),
            Just(Fault::DropResponse),
            Just(Fault::Unavailable),
            // Up to past the attempt timeout (500 ms): the attempt times out and is retried
            // while the delayed request may still reach the gateway.
            (0u64..800).prop_map(|ms| Fault::Delay(Duration::from_millis(ms))),
        ]
    }

    /// Whatever happens to requests and answers on the way, a command whose deadline was not
    /// reached ends with exactly one execution, and its answer is that execution's. One
    /// gateway and one proxy for every case (a local, so the gateway is stopped at the end);
    /// each case a new key and a new schedule.
    #[test]
    fn a_command_runs_exactly_once_over_random_fault_schedules() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let gw = memory_gateway();
        let proxy = rt.block_on(FaultProxy::start(gw.addr));
        let mut runner =
            TestRunner::new(Config { cases: 24, failure_persistence: None, ..Config::default() });
        let cases = (proptest::collection::vec(fault(), 0..5), 1i64..1000);
        let result = runner.run(&cases, |(faults, by)| {
            rt.block_on(async {
                proxy.reset();
                proxy.schedule(faults.clone());
                let before = total(&gw).await;
                let c = Client::http(proxy.url())
                    .deadline(Duration::from_secs(30))
                    .attempt_timeout(Duration::from_millis(500))
                    .backoff(Duration::from_millis(10), Duration::from_millis(200))
                    .build()
                    .unwrap();
                let key = common::process::unique("prop");
                let outcome = c.command::<Value>("counter.increment", json!({"by": by})).key(&key).await;
                let outcome = outcome.unwrap_or_else(|e| panic!("{faults:?}: {e}"));
                let after = total(&gw).await;
                assert_eq!(after - before, by, "exactly one execution under {faults:?}");
                assert_eq!(outcome.result, json!({"total": after}), "{faults:?}");
                let seen = proxy.seen();
                assert!(seen.iter().all(|s| s.key.as_deref() == Some(key.as_str())), "{seen:?}");
            });
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
    }
}
