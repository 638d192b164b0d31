//! Durability of the SQLite store against `kill -9` of a real `oncerpc serve` process.

mod common;

use std::time::Duration;

use common::process::{Gateway, TempDir, post};
use serde_json::json;

#[tokio::test]
async fn completed_command_survives_kill_9_and_is_replayed_byte_identical() {
    let dir = TempDir::new("crash-done");
    let store = format!("sqlite://{}", dir.file("o.db").display());
    let client = common::http_client();
    let body = json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":3,"idempotency_key":"pay-kill"},"id":1})
        .to_string();

    let mut gw = Gateway::start(&["--store", &store]);
    let (status, idem, first) = post(&client, &gw.url(""), &body).await;
    assert_eq!((status, idem.as_deref()), (200, Some("new")));
    assert!(first.contains(r#""result":{"total":3}"#), "{first}");
    gw.kill9();

    let gw = Gateway::start(&["--store", &store]);
    let (_, idem, again) = post(&client, &gw.url(""), &body).await;
    assert_eq!(idem.as_deref(), Some("duplicate"));
    assert_eq!(again, first, "the stored outcome, byte for byte, after a crash");
    // The new process's counter never moved: nothing re-executed.
    let (_, _, total) =
        post(&client, &gw.url(""), r#"{"jsonrpc":"2.0","method":"counter.get","id":2}"#).await;
    assert!(total.contains(r#""total":0"#), "{total}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_while_processing_then_exactly_one_retry_takes_over_after_the_lease() {
    let dir = TempDir::new("crash-processing");
    let config = dir.file("oncerpc.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\nurl = \"sqlite://{}\"\nlease_ms = 2000\n\n[limits]\ndefault_timeout_ms = 1000\n",
            dir.file("o.db").display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let client = common::http_client();
    let body =
        json!({"jsonrpc":"2.0","method":"demo.sleep","params":{"ms":400,"idempotency_key":"slow-kill"},"id":1})
            .to_string();

    // The handler sleeps 400 ms under a 1 s deadline that also covers the claim: sixteen
    // racing take-over claims on a loaded CI disk must not push the winner past it.
    let mut gw = Gateway::start(&["--config", &config]);
    let url = gw.url("");
    let (c, b) = (client.clone(), body.clone());
    let in_flight = tokio::spawn(async move { c.post(format!("{url}/rpc")).body(b).send().await });
    // Wait until the claim is in the database (read by this test through the same file),
    // then crash mid-execution.
    let observer = oncerpc_store_sqlite::SqliteStore::open(dir.file("o.db")).unwrap();
    common::wait_processing(&observer, "default", "demo.sleep", "slow-kill").await;
    gw.kill9();
    assert!(in_flight.await.unwrap().is_err(), "the crashed server never answered");

    let gw = Gateway::start(&["--config", &config]);
    // Past the dead owner's lease (2 s from its claim).
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (c, u, b) = (client.clone(), gw.url(""), body.clone());
        tasks.push(tokio::spawn(async move { post(&c, &u, &b).await }));
    }
    let mut new = 0;
    for t in tasks {
        let (status, idem, text) = t.await.unwrap();
        assert_eq!(status, 200);
        match idem.as_deref() {
            Some("new") => {
                new += 1;
                assert!(text.contains(r#""result":{"slept_ms":400}"#), "{text}");
            }
            Some("processing") => assert!(text.contains("-32001"), "{text}"),
            other => panic!("unexpected status {other:?}: {text}"),
        }
    }
    assert_eq!(new, 1, "exactly one retry re-executes after the lease expired");
    let (_, idem, _) = post(&client, &gw.url(""), &body).await;
    assert_eq!(idem.as_deref(), Some("duplicate"));
}

/// Claims are answered without waiting for the disk (only answers that tell a client
/// something durable wait for a sync of the WAL): `kill -9` under a flood of new keys, three
/// times at different moments, must still lose no outcome a client was told about, and a key
/// in flight at the kill is either unknown (its claim never committed) or still in progress
/// (its claim committed: it survived the kill without a sync).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_under_a_flood_of_new_keys_loses_no_answered_outcome() {
    let dir = TempDir::new("crash-flood");
    let store = format!("sqlite://{}", dir.file("o.db").display());
    let client = common::http_client();
    let body = |key: &str| {
        json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":1,"idempotency_key":key},"id":1})
            .to_string()
    };
    for (round, kill_after_ms) in [(0, 150u64), (1, 400), (2, 900)] {
        let mut gw = Gateway::start(&["--store", &store]);
        let url = gw.url("");
        let answered = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut workers = Vec::new();
        for w in 0..32 {
            let (client, url, answered, sent) = (client.clone(), url.clone(), answered.clone(), sent.clone());
            workers.push(tokio::spawn(async move {
                for i in 0.. {
                    let key = format!("r{round}-w{w}-{i}");
                    let b = body(&key);
                    sent.lock().unwrap().push(key.clone());
                    let req = client.post(format!("{url}/rpc")).header("content-type", "application/json");
                    let Ok(resp) = req.body(b).send().await else { return };
                    let idem =
                        resp.headers().get("x-idempotency-status").map(|v| v.to_str().unwrap().to_owned());
                    let status = resp.status().as_u16();
                    let Ok(text) = resp.text().await else { return };
                    assert_eq!((status, idem.as_deref()), (200, Some("new")), "{key}: {text}");
                    answered.lock().unwrap().push((key, text));
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
        gw.kill9();
        for w in workers {
            w.await.unwrap();
        }
        let answered = std::mem::take(&mut *answered.lock().unwrap());
        let sent = std::mem::take(&mut *sent.lock().unwrap());
        assert!(!answered.is_empty(), "round {round}: nothing was answered before the kill");

        let gw = Gateway::start(&["--store", &store]);
        for (key, first) in &answered {
            let (status, idem, again) = post(&client, &gw.url(""), &body(key)).await;
            assert_eq!((status, idem.as_deref()), (200, Some("duplicate")), "round {round}, {key}: {again}");
            assert_eq!(&again, first, "round {round}, {key}: the answered outcome, byte for byte");
        }
        let answered_keys: std::collections::HashSet<&str> =
            answered.iter().map(|(k, _)| k.as_str()).collect();
        let mut in_flight: std::collections::BTreeMap<String, usize> = Default::default();
        for key in sent.iter().filter(|k| !answered_keys.contains(k.as_str())) {
            let (status, idem, text) = post(&client, &gw.url(""), &body(key)).await;
            *in_flight.entry(idem.clone().unwrap_or_default()).or_default() += 1;
            match idem.as_deref() {
                Some("new") => assert!(text.contains(r#""result":{"total":"#), "{key}: {text}"),
                Some("processing") => assert!(text.contains("-32001"), "{key}: {text}"),
                // Its outcome committed and was synced, but the answer never reached the client.
                Some("duplicate") => assert!(text.contains(r#""result":{"total":"#), "{key}: {text}"),
                other => panic!("round {round}, {key}: HTTP {status} {other:?} {text}"),
            }
        }
        eprintln!(
            "round {round}: {} answered and replayed; in flight at the kill: {in_flight:?}",
            answered.len()
        );
        drop(gw);
    }
}
