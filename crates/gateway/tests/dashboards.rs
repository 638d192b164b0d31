//! The dashboards and alerts that ship (`deploy/`): the alert rules pass `promtool check rules`
//! (Debian's `prometheus` package, installed by `scripts/test.sh`; outside CI a missing
//! promtool skips that part), the dashboard is valid JSON, and every metric either of them
//! names is one a real server exports once it has served the traffic the panels are about.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::TestServer;
use oncerpc::App;
use oncerpc_core::Registry;
use oncerpc_core::testkit::SwitchableStore;
use serde_json::{Value, json};

fn deploy(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(path)
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Every `oncerpc_…` metric name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("oncerpc_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_lowercase() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_alert_rules_pass_promtool() {
    let promtool = std::process::Command::new("promtool").arg("--version").output();
    if !promtool.is_ok_and(|o| o.status.success()) {
        assert!(!in_ci(), "promtool is required in CI (scripts/test.sh installs Debian's prometheus)");
        eprintln!("SKIPPED: promtool is not installed (run ./scripts/test.sh)");
        return;
    }
    let out = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(deploy("prometheus/alerts.yml"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("SUCCESS: 5 rules found"), "{said}");
}

async fn rpc(s: &TestServer, body: Value) -> common::Answer {
    s.post(body.to_string()).await
}

fn sleep(key: &str, ms: u64, id: u64) -> Value {
    json!({"jsonrpc": "2.0", "method": "demo.sleep", "params": {"ms": ms, "idempotency_key": key}, "id": id})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_of_the_dashboard_and_the_alerts_is_exported() {
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("grafana/oncerpc.json")).unwrap())
            .expect("JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut used = BTreeSet::new();
    for p in panels {
        let targets = p["targets"].as_array().unwrap_or_else(|| panic!("a panel without targets: {p}"));
        for t in targets {
            let expr = t["expr"].as_str().expect("an expression");
            assert!(!metric_names(expr).is_empty(), "{expr}");
            used.extend(metric_names(expr));
        }
    }
    let alerts = std::fs::read_to_string(deploy("prometheus/alerts.yml")).unwrap();
    used.extend(metric_names(&alerts));

    // A server that has served what the panels show: answers and errors, a duplicate, a retry
    // that found its key processing, refusals by the in-flight limit, a store outage.
    let demo = Arc::new(oncerpc::demo::DemoState::default());
    let mut registry = Registry::new();
    oncerpc::demo::register(&mut registry, demo.clone(), Duration::from_secs(30)).unwrap();
    let store = Arc::new(SwitchableStore::new(Arc::new(oncerpc_core::MemoryStore::default())));
    let mut cfg = common::test_config();
    cfg.limits.max_in_flight = 2;
    let s =
        Arc::new(TestServer::start_app(App::with_store(cfg, registry, demo, store.clone()).unwrap()).await);
    assert_eq!(
        rpc(&s, json!({"jsonrpc": "2.0", "method": "sum", "params": [1, 2], "id": 1})).await.status,
        200
    );
    rpc(&s, json!({"jsonrpc": "2.0", "method": "nope", "id": 2})).await;
    let running: Vec<_> = ["key-a", "key-b"]
        .map(|k| {
            let s = s.clone();
            tokio::spawn(async move { rpc(&s, sleep(k, 800, 3)).await })
        })
        .into_iter()
        .collect();
    s.wait_processing("default", "demo.sleep", "key-a").await;
    s.wait_processing("default", "demo.sleep", "key-b").await;
    assert_eq!(rpc(&s, json!({"jsonrpc": "2.0", "method": "sum", "params": [1], "id": 4})).await.status, 503);
    for r in running {
        r.await.unwrap();
    }
    let first = {
        let s = s.clone();
        tokio::spawn(async move { rpc(&s, sleep("key-c", 500, 5)).await })
    };
    s.wait_processing("default", "demo.sleep", "key-c").await;
    let dup = rpc(&s, sleep("key-c", 500, 6)).await;
    assert_eq!(dup.header("x-idempotency-status"), Some("processing"), "{}", dup.body);
    first.await.unwrap();
    assert_eq!(rpc(&s, sleep("key-c", 500, 7)).await.header("x-idempotency-status"), Some("duplicate"));
    store.set_down(true);
    rpc(&s, sleep("key-d", 1, 8)).await;
    store.set_down(false);

    let exported = s.get("/metrics").await.body;
    let families: BTreeSet<String> = exported
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    for name in &used {
        let family =
            ["_bucket", "_sum", "_count"].iter().find_map(|sfx| name.strip_suffix(sfx)).unwrap_or(name);
        assert!(
            families.contains(name) || families.contains(family),
            "{name} is not exported; the server exports {families:?}"
        );
    }
    assert!(used.len() >= 7, "{used:?}");
}
