//! The access log with the default configuration (SPEC §7, issue "defaults"), against the
//! real binary: one line per HTTP request (a batch: one line with its size and error count),
//! written off the request path by a bounded writer that drops lines, and counts them, when
//! its sink cannot keep up — requests never wait for the log.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::process::Gateway;
use futures::StreamExt;
use serde_json::{Value, json};

const REQUESTS: usize = 3_000;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_does_not_keep_up_loses_log_lines_not_requests() {
    // stderr is a pipe that nobody reads while the load runs: after its 64 KiB buffer and
    // the writer's 200-line queue, every write would block. Requests must not.
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .args(["serve", "--store", "memory://", "--log-buffer-lines", "200"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn oncerpc");
    let client = common::http_client_builder().timeout(Duration::from_secs(20)).build().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let mut up = false;
    for _ in 0..200 {
        if client.get(format!("{base}/healthz")).send().await.is_ok_and(|r| r.status().is_success()) {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the gateway did not start");

    let url = format!("{base}/rpc");
    let answers: Vec<(usize, Result<Value, String>)> = futures::stream::iter(0..REQUESTS)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                let body = json!({"jsonrpc":"2.0","method":"sum","params":[i, 1],"id": i}).to_string();
                let sent =
                    client.post(url).header("content-type", "application/json").body(body).send().await;
                let v = match sent {
                    Ok(r) => r.json::<Value>().await.map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                (i, v)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for (i, v) in answers {
        let v = v.unwrap_or_else(|e| panic!("request {i} was not answered (blocked on the log?): {e}"));
        assert_eq!(v, json!({"jsonrpc":"2.0","result": i + 1,"id": i}));
    }
    let metrics = client.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    let dropped: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("oncerpc_log_lines_dropped_total "))
        .expect("the dropped-lines counter is exported")
        .trim()
        .parse()
        .unwrap();
    assert!(dropped > 0, "the sink never drained, so lines were dropped: {dropped}");

    // Now drain the pipe: what was written plus what was dropped covers every request.
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let stderr = child.stderr.take().unwrap();
    let written =
        BufReader::new(stderr).lines().map_while(Result::ok).filter(|l| l.contains(" request")).count();
    let _ = child.wait();
    assert!(written < REQUESTS, "some lines were dropped: {written} written");
    assert!(written as u64 + dropped >= REQUESTS as u64, "{written} written + {dropped} dropped");
}

#[tokio::test]
async fn a_batch_is_one_access_line_with_its_size_and_error_count() {
    let gw = Gateway::start(&["--store", "memory://"]);
    let entries: Vec<Value> = (0..50)
        .map(|i| match i % 10 {
            // 5 of the 50 are errors: an unknown method.
            0 => json!({"jsonrpc":"2.0","method":"no.such","id": i}),
            _ => json!({"jsonrpc":"2.0","method":"sum","params":[i, 1],"id": i}),
        })
        .collect();
    let client = common::http_client();
    let resp = client.post(gw.url("/rpc")).json(&entries).send().await.unwrap();
    let cid = resp.headers()["x-correlation-id"].to_str().unwrap().to_owned();
    let answers: Vec<Value> = resp.json().await.unwrap();
    assert_eq!(answers.len(), 50);
    let single = client
        .post(gw.url("/rpc"))
        .json(&json!({"jsonrpc":"2.0","method":"sum","params":[1, 2],"id": "single-1"}))
        .send()
        .await
        .unwrap();
    assert!(single.status().is_success());

    // Lines reach the log from its own thread: wait (bounded) for the single request's.
    let mut log = Vec::new();
    for _ in 0..100 {
        log = gw.log();
        if log.iter().any(|l| l.contains("single-1")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let batch_lines: Vec<&String> = log.iter().filter(|l| l.contains(&cid)).collect();
    assert_eq!(batch_lines.len(), 1, "one line for the batch: {batch_lines:#?}");
    let line = batch_lines[0];
    assert!(line.contains("size=50") && line.contains("errors=5"), "{line}");
    let per_request = log.iter().filter(|l| l.contains(" request")).count();
    assert_eq!(per_request, 1, "only the single request has a request line: {log:#?}");
}

/// A query's line takes the direct path (`oncerpc_core::access_log`) under a plain level
/// filter, and tracing's event under one with a field directive (`EnvFilter`): both must write
/// the same line.
#[tokio::test]
async fn the_direct_access_line_matches_the_tracing_line() {
    let direct = Gateway::start_env(&["--store", "memory://"], &[("RUST_LOG", "info")]);
    let traced =
        Gateway::start_env(&["--store", "memory://"], &[("RUST_LOG", "info,[{no_such_field=1}]=trace")]);
    let client = common::http_client();
    let requests = [
        (json!({"jsonrpc":"2.0","method":"sum","params":[1, 2],"id": "q-1"}), vec![]),
        (json!({"jsonrpc":"2.0","method":"no such \u{1b}[31m \"method\"","id": "q-2"}), vec![]),
        (
            json!({"jsonrpc":"2.0","method":"sum","params":[3],"id": 3}),
            vec![("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")],
        ),
        (json!({"jsonrpc":"2.0","method":"sum","params":"bad","id": "q-4"}), vec![]),
        (
            json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":1},"id": "q-5"}),
            vec![("x-idempotency-key", "direct-line-5")],
        ),
        (
            json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":1},"id": "q-6"}),
            vec![("x-idempotency-key", "direct-line-5")],
        ),
    ];
    for gw in [&direct, &traced] {
        for (body, headers) in &requests {
            let mut req = client.post(gw.url("/rpc")).json(body);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            assert!(req.send().await.unwrap().status().is_success());
        }
    }
    // Each line without its timestamp and duration (the only parts that differ between runs).
    let lines = |gw: &Gateway| -> Vec<String> {
        gw.log()
            .iter()
            .filter(|l| l.contains("oncerpc_core::dispatch::observe: request"))
            .map(|l| {
                let rest = l.split_once(' ').map_or("", |(_, r)| r);
                let mut words: Vec<&str> = rest.split(' ').collect();
                words.retain(|w| !w.starts_with("duration_us="));
                words.join(" ")
            })
            .collect()
    };
    // The invalid request (`params` a string) is logged as `invalid request` before dispatch.
    let expected = requests.len() - 1;
    let mut got = (Vec::new(), Vec::new());
    for _ in 0..100 {
        got = (lines(&direct), lines(&traced));
        if got.0.len() >= expected && got.1.len() >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(got.0.len(), expected, "{:#?} {:#?}", got.0, got.1);
    assert_eq!(got.0, got.1);
    assert!(got.0[1].contains(r#"method=no such \u{1b}[31m \"method\""#), "{}", got.0[1]);
}
