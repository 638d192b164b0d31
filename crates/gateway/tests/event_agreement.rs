//! Events agree with their keys under concurrency (issue "events you can trust"): two real
//! `oncerpc serve` replicas on one Redis or PostgreSQL store; keys whose first execution
//! failed are then hammered at once, across both replicas, with parallel async submissions
//! (plain and force-retried), sync force retries and re-drives. At the end every key ran its
//! upstream once after the failure, and for each key the event (read from either replica),
//! the key's stored outcome and every listing (any page size, any status) say the same.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use common::process::{Gateway, Http, TempDir, replica_config, unique};
use common::upstream::Upstream;
use serde_json::Value;

const KEYS: usize = 6;

fn body(key: &str) -> String {
    format!(r#"{{"order":"{key}"}}"#)
}

/// An async submission of `key`, tagged `tag` (the test's own events, in a store that other
/// tests share).
async fn submit(h: &Http, key: &str, tag: &str, force: bool) -> (u16, Value) {
    let mut headers = vec![("X-Idempotency-Key", key)];
    if force {
        headers.push(("X-Force-Retry", "true"));
    }
    let a = h.post(&format!("/v2/flows/orders.create?tags={tag}"), body(key), &headers).await;
    let v = serde_json::from_str(&a.body).unwrap_or(Value::Null);
    (a.status, v)
}

/// Wait (bounded) until the event is no longer processing on `h`; returns it.
async fn settled(h: &Http, id: &str) -> Value {
    let mut v = Value::Null;
    for _ in 0..500 {
        v = h.get(&format!("/v2/events/{id}"), &[]).await.json();
        if v["status"] != "processing" {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("event {id} stayed processing: {v}");
}

/// Every page of `GET /v2/events?tag={tag}{query}` with page size `limit`: the ids in order.
async fn listing(h: &Http, tag: &str, query: &str, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let mut path = format!("/v2/events?limit={limit}&tag={tag}{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let a = h.get(&path, &[]).await;
        assert_eq!(a.status, 200, "{}", a.body);
        let v = a.json();
        ids.extend(
            v["events"].as_array().unwrap().iter().map(|e| e["event_id"].as_str().unwrap().to_owned()),
        );
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return ids,
        }
    }
    panic!("the listing never ended");
}

async fn hammer_two_replicas(store_url: String) {
    let up = Upstream::start().await;
    up.set_delay(40, &[]);
    let dir = TempDir::new("event-agreement");
    let config = replica_config(&dir, &store_url, &up, 5_000, 3_000);
    let gws: Vec<Gateway> = (0..2).map(|_| Gateway::start(&["--config", &config])).collect();
    let hs: Arc<Vec<Http>> = Arc::new(gws.iter().map(Gateway::http).collect());
    let keys: Vec<String> = (0..KEYS).map(|i| unique(&format!("agree-{i}"))).collect();
    let tag = unique("agree");

    // Phase 1: each key's first execution fails (the upstream answers 500).
    up.set_fail(true);
    let mut ids = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        let (status, v) = submit(&hs[i % 2], key, &tag, false).await;
        assert_eq!(status, 200, "{v}");
        let id = v["event_id"].as_str().unwrap().to_owned();
        assert_eq!(settled(&hs[i % 2], &id).await["status"], "failed");
        ids.insert(key.clone(), id);
    }
    let failed_calls = up.calls().len();
    up.set_fail(false);

    // Phase 2: all at once, across both replicas, per key: 6 async submissions (every other
    // one force-retried), 3 sync force retries and 3 re-drives.
    let mut tasks = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        for n in 0..12 {
            let (hs, key, id, tag) = (hs.clone(), key.clone(), ids[key].clone(), tag.clone());
            tasks.push(tokio::spawn(async move {
                let h = &hs[(k + n) % 2];
                match n % 4 {
                    0 | 1 => {
                        let (status, v) = submit(h, &key, &tag, n % 2 == 0).await;
                        assert!(status == 200 || status == 409, "async: {status} {v}");
                        if status == 200 {
                            assert_eq!(v["event_id"], id.as_str(), "a duplicate gets the same event");
                        }
                    }
                    2 => {
                        let headers = [("X-Idempotency-Key", key.as_str()), ("X-Force-Retry", "true")];
                        let a = h.post("/v2/flows/orders.create?sync=true", body(&key), &headers).await;
                        assert!(a.status == 200 || a.status == 409, "sync: {} {}", a.status, a.body);
                    }
                    _ => {
                        let a = h.post(&format!("/v2/events/{id}/retry"), "", &[]).await;
                        assert!(a.status == 202 || a.status == 409, "re-drive: {} {}", a.status, a.body);
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("a hammering task");
    }

    // The event (from either replica) and the key's stored outcome agree.
    for key in &keys {
        let id = &ids[key];
        let a = settled(&hs[0], id).await;
        let b = settled(&hs[1], id).await;
        assert_eq!(a, b, "{key}: both replicas read one event");
        assert_eq!(a["status"], "succeeded", "{key}: {a}");
        let headers = [("X-Idempotency-Key", key.as_str())];
        let stored = hs[0].post("/v2/flows/orders.create?sync=true", body(key), &headers).await;
        assert_eq!(stored.header("x-idempotency-status"), Some("duplicate"), "{}", stored.body);
        let stored: Value = serde_json::from_str(&stored.body).unwrap();
        assert_eq!(a["result"], stored, "{key}: the event's result is the key's outcome");
        let steps = a["steps"].as_array().expect("steps");
        assert_eq!(steps.len(), 1, "{key}: {a}");
        assert_eq!(steps[0]["status"], "succeeded", "{key}: {a}");
    }

    // Each key ran once after its failure.
    let mut runs: HashMap<String, usize> = HashMap::new();
    for c in &up.calls()[failed_calls..] {
        *runs.entry(c.body["order"].as_str().unwrap_or_default().to_owned()).or_default() += 1;
    }
    for key in &keys {
        assert_eq!(runs.get(key), Some(&1), "{key} ran once after its failure: {runs:?}");
    }

    // Every listing shows each event once, under the status it has.
    let mine: HashSet<&String> = ids.values().collect();
    for h in hs.iter() {
        for limit in [1, 4, 100] {
            let all = listing(h, &tag, "", limit).await;
            assert!(all.iter().all(|id| mine.contains(id)), "only the test's events carry its tag");
            let listed: Vec<&String> = all.iter().collect();
            let distinct: HashSet<&&String> = listed.iter().collect();
            assert_eq!((listed.len(), distinct.len()), (KEYS, KEYS), "limit {limit}: each once: {listed:?}");
        }
        let succeeded = listing(h, &tag, "&status=succeeded", 2).await;
        assert_eq!(succeeded.iter().filter(|id| mine.contains(id)).count(), KEYS);
        for status in ["failed", "processing"] {
            let other = listing(h, &tag, &format!("&status={status}"), 2).await;
            assert!(!other.iter().any(|id| mine.contains(id)), "none listed as {status}: {other:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_agree_with_their_keys_across_two_replicas_on_redis() {
    let Some(url) = oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_URL", "Redis") else { return };
    hammer_two_replicas(url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_agree_with_their_keys_across_two_replicas_on_postgres() {
    let Some(url) = oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_URL", "PostgreSQL") else {
        return;
    };
    hammer_two_replicas(url).await;
}
