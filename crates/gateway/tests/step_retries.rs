//! Step retries by policy (issue: durable flows), against a real gateway and a real upstream
//! on loopback that answers scripted statuses: transient failures are retried with backoff
//! and the same step key, `Retry-After` is honoured, other failures fail at once, and every
//! attempt is counted in `/metrics`.

mod common;

use std::time::Duration;

use common::upstream::Upstream;
use common::{TestServer, test_config};
use oncerpc::config::{MethodConfig, StepConfig};
use oncerpc::retry::RetryPolicy;
use serde_json::{Value, json};

/// A one-step flow `pay` (step `charge`) with `attempts` attempts, backoff 100–400 ms.
async fn start(attempts: u32, timeout_ms: u64, step_timeout_ms: Option<u64>) -> (TestServer, Upstream) {
    let up = Upstream::start().await;
    let mut cfg = test_config();
    cfg.methods = vec![MethodConfig {
        name: "pay".into(),
        kind: oncerpc_core::Kind::Command,
        timeout_ms: Some(timeout_ms),
        steps: vec![StepConfig {
            name: "charge".into(),
            url: up.url("charge"),
            retry: RetryPolicy { attempts, backoff_ms: 100, max_backoff_ms: 400 },
            timeout_ms: step_timeout_ms,
            ..Default::default()
        }],
        ..Default::default()
    }];
    (TestServer::start_with(cfg).await, up)
}

async fn pay(s: &TestServer, key: &str) -> Value {
    s.call(
        json!({"jsonrpc": "2.0", "method": "pay", "params": {"amount": 5, "idempotency_key": key}, "id": 1}),
    )
    .await
}

/// `oncerpc_step_attempts_total{method="pay",step="charge",outcome=…}` from `/metrics`.
async fn attempts(s: &TestServer, outcome: &str) -> u64 {
    let text = s.get("/metrics").await.body;
    let want = format!(r#"oncerpc_step_attempts_total{{method="pay",outcome="{outcome}",step="charge"}} "#);
    text.lines().find_map(|l| l.strip_prefix(want.as_str())).map_or(0, |v| v.trim().parse().unwrap())
}

fn gaps(up: &Upstream) -> Vec<Duration> {
    let calls = up.calls();
    calls.windows(2).map(|w| w[1].at - w[0].at).collect()
}

#[tokio::test]
async fn two_503s_then_success_is_one_success_in_three_attempts_with_backoff_and_one_key() {
    let (s, up) = start(5, 10_000, None).await;
    up.script("charge", &[(503, None), (503, None)]);
    let r = pay(&s, "k-503").await;
    assert_eq!(r["result"]["step"], "charge", "{r}");
    assert_eq!(up.count("charge"), 3);
    let keys: Vec<_> = up.calls().into_iter().map(|c| c.idempotency_key.expect("a step key")).collect();
    assert!(keys.iter().all(|k| *k == keys[0]), "every attempt carries the same step key: {keys:?}");
    // Waits in [50, 100] ms then [100, 200] ms (jittered exponential backoff).
    let g = gaps(&up);
    assert!(g[0] >= Duration::from_millis(50), "first backoff {g:?}");
    assert!(g[1] >= Duration::from_millis(100), "second backoff {g:?}");
    assert_eq!((attempts(&s, "transient").await, attempts(&s, "succeeded").await), (2, 1));
    // The outcome is stored: a retry of the request does not call the upstream again.
    let again = pay(&s, "k-503").await;
    assert_eq!(again["result"], r["result"]);
    assert_eq!(up.count("charge"), 3);
}

#[tokio::test]
async fn a_429_with_retry_after_waits_as_asked() {
    let (s, up) = start(3, 10_000, None).await;
    up.script("charge", &[(429, Some("1"))]);
    let r = pay(&s, "k-429").await;
    assert_eq!(r["result"]["step"], "charge", "{r}");
    assert_eq!(up.count("charge"), 2);
    let g = gaps(&up)[0];
    assert!(g >= Duration::from_millis(950), "Retry-After: 1 waited only {g:?}");
    assert!(g < Duration::from_millis(3_000), "Retry-After: 1 waited {g:?}");
}

#[tokio::test]
async fn a_400_fails_at_once_with_one_attempt() {
    let (s, up) = start(5, 10_000, None).await;
    up.script("charge", &[(400, None)]);
    let r = pay(&s, "k-400").await;
    assert_eq!(r["error"]["code"], -32006, "{r}");
    assert_eq!(r["error"]["data"]["status"], 400);
    assert_eq!(up.count("charge"), 1);
    assert_eq!((attempts(&s, "failed").await, attempts(&s, "transient").await), (1, 0));
}

#[tokio::test]
async fn every_transient_status_is_retried_until_the_attempts_run_out() {
    let (s, up) = start(5, 10_000, None).await;
    up.script("charge", &[(502, None), (504, None), (503, None), (429, None), (503, None)]);
    let r = pay(&s, "k-out").await;
    assert_eq!(r["error"]["code"], -32006, "{r}");
    assert_eq!(r["error"]["data"]["status"], 503, "the last attempt's failure is the answer");
    assert_eq!(up.count("charge"), 5);
    assert_eq!(attempts(&s, "transient").await, 5);
}

#[tokio::test]
async fn no_wait_goes_past_the_methods_deadline() {
    // Retry-After: 30 cannot fit in a 2 s method: the step fails at once with its failure.
    let (s, up) = start(3, 2_000, None).await;
    up.script("charge", &[(503, Some("30"))]);
    let started = std::time::Instant::now();
    let r = pay(&s, "k-deadline").await;
    assert_eq!(r["error"]["code"], -32006, "{r}");
    assert!(started.elapsed() < Duration::from_millis(1_900), "{:?}", started.elapsed());
    assert_eq!(up.count("charge"), 1);
}

#[tokio::test]
async fn an_attempt_that_times_out_is_retried() {
    let (s, up) = start(2, 10_000, Some(300)).await;
    up.set_delay(1_000, &["charge"]);
    let started = std::time::Instant::now();
    let r = pay(&s, "k-slow").await;
    assert_eq!(r["error"]["code"], -32006, "{r}");
    assert_eq!(up.count("charge"), 2, "two attempts, each cut at 300 ms");
    assert!(started.elapsed() < Duration::from_millis(1_500), "{:?}", started.elapsed());
    assert_eq!(attempts(&s, "transient").await, 2);
    up.set_delay(0, &[]);
}

#[tokio::test]
async fn a_refused_connection_is_retried() {
    // A port nothing listens on: bound and never listening, so that no other test's server
    // can take it meanwhile (bound, then closed, it was free for the next one to bind, which
    // then answered the step) and every connection to it is refused.
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = reserved.local_addr().unwrap().port();
    let mut cfg = test_config();
    cfg.methods = vec![MethodConfig {
        name: "pay".into(),
        kind: oncerpc_core::Kind::Command,
        timeout_ms: Some(10_000),
        steps: vec![StepConfig {
            name: "charge".into(),
            url: format!("http://127.0.0.1:{port}/charge"),
            retry: RetryPolicy { attempts: 3, backoff_ms: 50, max_backoff_ms: 100 },
            ..Default::default()
        }],
        ..Default::default()
    }];
    let s = TestServer::start_with(cfg).await;
    let r = pay(&s, "k-refused").await;
    assert_eq!(r["error"]["code"], -32006, "{r}");
    assert_eq!(attempts(&s, "transient").await, 3);
    drop(reserved);
}

#[tokio::test]
async fn a_retry_after_past_any_clock_fails_the_step_and_is_stored_as_minus_32006() {
    // u64::MAX seconds made `Instant + Duration` panic: -32603 was stored. Numbers past u64 and
    // the last HTTP date (year 9999) are waits past the deadline too: one attempt, -32006.
    let (s, up) = start(3, 2_000, None).await;
    let asked = ["18446744073709551615", "184467440737095516150000", "Fri, 31 Dec 9999 23:59:59 GMT"];
    for (i, asked) in asked.iter().enumerate() {
        up.script("charge", &[(429, Some(asked))]);
        let started = std::time::Instant::now();
        let r = pay(&s, &format!("k-huge-{i}")).await;
        assert_eq!(r["error"]["code"], -32006, "Retry-After: {asked}: {r}");
        assert_eq!(r["error"]["data"]["status"], 429, "{r}");
        assert!(started.elapsed() < Duration::from_millis(1_900), "{asked}: {:?}", started.elapsed());
        assert_eq!(up.count("charge"), i + 1, "{asked}: no second attempt");
        // The stored outcome is that -32006: a retry of the request gets it, nothing runs.
        let again = pay(&s, &format!("k-huge-{i}")).await;
        assert_eq!(again["error"]["code"], -32006, "{asked}: {again}");
        assert_eq!(up.count("charge"), i + 1);
    }
}
