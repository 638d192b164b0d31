//! Bounded detached work (issue "hold the edge", item 2): with `limits.max_background = 64`,
//! 5,000 async flow calls against a slow upstream never run more than 64 executions at once;
//! each call is either refused cleanly before anything is claimed (`503`, and a later retry of
//! its key runs) or accepted and finished — none lost, none run twice. Against the real
//! `oncerpc` binary on loopback; the upstream runs in the test process.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::process::{Gateway, Http, TempDir};
use common::upstream::Upstream;
use serde_json::Value;

const CALLS: usize = 5_000;
const BUDGET: usize = 64;

async fn submit(h: &Http, key: &str) -> (u16, Option<String>) {
    let a = h
        .post("/v2/flows/orders.create", format!(r#"{{"order":"{key}"}}"#), &[("X-Idempotency-Key", key)])
        .await;
    let id = (a.status == 200).then(|| a.json()["event_id"].as_str().unwrap().to_owned());
    if a.status != 200 {
        assert_eq!(a.status, 503, "{}", a.body);
        assert_eq!(a.json()["code"], "503", "{}", a.body);
    }
    (a.status, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_async_calls_never_exceed_the_execution_budget_and_lose_nothing() {
    let up = Upstream::start().await;
    up.set_delay(100, &[]);
    let dir = TempDir::new("background");
    let gw = Gateway::with_config(
        &dir,
        &format!(
            r#"
[store]
url = "sqlite://{db}"
resume_interval_ms = 100

[limits]
max_background = {BUDGET}

[[methods]]
name = "orders.create"
kind = "command"
timeout_ms = 5000

  [[methods.steps]]
  name = "charge"
  url = "{charge}"
"#,
            db = dir.file("o.db").display(),
            charge = up.url("charge"),
        ),
    );
    let s = gw.http();

    // 5,000 calls, 128 at a time.
    let gate = Arc::new(tokio::sync::Semaphore::new(128));
    let mut tasks = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        let (s, gate) = (s.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _slot = gate.acquire().await.unwrap();
            let key = format!("order-{i}");
            let (status, id) = submit(&s, &key).await;
            (key, status, id)
        }));
    }
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            (key, 200, Some(id)) => accepted.push((key, id)),
            (key, _, _) => refused.push(key),
        }
    }
    assert!(
        !accepted.is_empty() && !refused.is_empty(),
        "{} accepted, {} refused",
        accepted.len(),
        refused.len()
    );

    // Every accepted event finishes `succeeded`.
    for (key, id) in &accepted {
        let mut v = Value::Null;
        for _ in 0..600 {
            v = s.get(&format!("/v2/events/{id}"), &[]).await.json();
            if v["status"] != "processing" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(v["status"], "succeeded", "{key}: {v}");
    }
    assert!(up.max_concurrency() <= BUDGET as u64, "{} executions at once", up.max_concurrency());

    // Each accepted key reached the upstream exactly once; no refused key reached it.
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for c in up.calls() {
        *per_key.entry(c.body["order"].as_str().unwrap_or_default().to_owned()).or_default() += 1;
    }
    for (key, _) in &accepted {
        assert_eq!(per_key.get(key), Some(&1), "{key} ran once");
    }
    for key in &refused {
        assert_eq!(per_key.get(key), None, "{key} was refused before anything ran");
    }
    // Refused before claiming: nothing half-claimed, so a retry of a refused key runs.
    for key in refused.iter().take(20) {
        let (status, id) = submit(&s, key).await;
        assert_eq!(status, 200, "the retry of {key} is accepted");
        let id = id.unwrap();
        for _ in 0..300 {
            if s.get(&format!("/v2/events/{id}"), &[]).await.json()["status"] == "succeeded" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(s.get(&format!("/v2/events/{id}"), &[]).await.json()["status"], "succeeded");
    }
    let metrics = s.get("/metrics", &[]).await.body;
    assert!(
        metrics.lines().any(|l| l.contains("background") && !l.starts_with('#')),
        "refusals are counted in /metrics"
    );
}
