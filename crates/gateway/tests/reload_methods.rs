//! Reloading methods while they are called, seen by every door, and `oncerpc reload`: a real
//! `oncerpc serve` process, its config file rewritten and reloaded.

mod common;

use std::time::Duration;

use common::reload::Reloadable;
use common::upstream::Upstream;
use serde_json::{Value, json};

const KEY: &str = "acme-reload-key-0123456789";

/// A config: tenant `acme`, the query flow `orders.get`, and, with `slow`, the command flow
/// `extra.slow` whose step `wait` the upstream answers slowly.
fn config(up: &Upstream, slow: bool) -> String {
    let extra = if slow {
        format!(
            "\n[[methods]]\nname = \"extra.slow\"\nkind = \"command\"\n  [[methods.steps]]\n  name = \"wait\"\n  url = \"{}\"\n",
            up.url("wait")
        )
    } else {
        String::new()
    };
    format!(
        r#"
[store]
url = "memory://"

[[tenants]]
name = "acme"
api_keys = ["{KEY}"]

[[methods]]
name = "orders.get"
kind = "query"

  [[methods.steps]]
  name = "lookup"
  url = "{lookup}"
{extra}"#,
        lookup = up.url("lookup"),
    )
}

fn rpc(method: &str, id: u64) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": {"n": id}, "id": id}).to_string()
}

/// The names `rpc.discover` lists.
async fn discovered(gw: &Reloadable) -> Vec<String> {
    let d = gw.gw.http().rpc(rpc("rpc.discover", 1), &[("x-api-key", KEY)]).await.json();
    d["result"]["methods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str().map(str::to_owned))
        .collect()
}

/// POST one MCP message (session era) with `headers`.
async fn mcp(gw: &Reloadable, headers: &[(&str, &str)], body: &str) -> common::Answer {
    let mut all = headers.to_vec();
    all.extend([
        ("x-api-key", KEY),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ]);
    gw.gw.http().post("/mcp", body.to_owned(), &all).await
}

/// The tool names an MCP session's `tools/list` gives.
async fn tools(gw: &Reloadable, session: &str) -> Vec<String> {
    let a = mcp(
        gw,
        &[("mcp-session-id", session), ("mcp-protocol-version", "2025-06-18")],
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// A method added by a reload is served and listed at once (`rpc.discover`, and `tools/list`
/// of an MCP session opened before the reload, which stays open, and whose stream hears
/// `notifications/tools/list_changed`); removed while a call to it runs, that call finishes
/// with its result, and the next call is `-32601`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_added_then_removed_while_a_call_runs() {
    let up = Upstream::start().await;
    let mut gw = Reloadable::start("reload-methods", &config(&up, false), &[]);
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let a = mcp(&gw, &[], init).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let session = a.header("mcp-session-id").expect("a session").to_owned();
    assert_eq!(a.json()["result"]["capabilities"]["tools"]["listChanged"], true, "{}", a.body);
    assert!(!discovered(&gw).await.contains(&"extra.slow".to_owned()));
    assert!(!tools(&gw, &session).await.contains(&"extra_slow".to_owned()));
    // The session's stream from the server (GET /mcp), open across the reloads.
    let mut stream = open_stream(&gw, &session).await;
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");

    assert_eq!(gw.reload(&config(&up, true)).await["outcome"], "ok");
    let heard = next_event(&mut stream).await.expect("an event");
    assert!(heard.contains(r#""method":"notifications/tools/list_changed""#), "{heard}");
    assert!(discovered(&gw).await.contains(&"extra.slow".to_owned()), "rpc.discover lists the new method");
    assert!(tools(&gw, &session).await.contains(&"extra_slow".to_owned()), "the open session lists its tool");

    // A call in flight when the method is removed.
    up.set_delay(1500, &["wait"]);
    let http = gw.gw.http();
    let call = tokio::spawn(async move {
        http.rpc(rpc("extra.slow", 7), &[("x-api-key", KEY), ("x-idempotency-key", "slow-1")]).await
    });
    for _ in 0..500 {
        if up.count("wait") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(up.count("wait"), 1, "the call reached its step");
    assert_eq!(gw.reload(&config(&up, false)).await["outcome"], "ok");
    assert!(!discovered(&gw).await.contains(&"extra.slow".to_owned()), "no longer listed");
    let heard = next_event(&mut stream).await.expect("an event");
    assert!(heard.contains("notifications/tools/list_changed"), "told again on removal: {heard}");
    let gone =
        gw.gw.http().rpc(rpc("extra.slow", 8), &[("x-api-key", KEY), ("x-idempotency-key", "slow-2")]).await;
    assert_eq!(gone.json()["error"]["code"], -32601, "{}", gone.body);
    let done = tokio::time::timeout(Duration::from_secs(30), call).await.expect("no hang").expect("ran");
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.json().get("result").is_some(), "the call in flight finished: {}", done.body);
    assert_eq!(up.count("wait"), 1, "it ran once");
    assert!(!tools(&gw, &session).await.contains(&"extra_slow".to_owned()), "the session stays open");
}

/// `oncerpc reload --pid-file` signals the process from its pid file; with `--healthz` it
/// waits for the outcome: exit 0 for a config swapped in, 1 for one refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oncerpc_reload_from_a_pid_file() {
    let up = Upstream::start().await;
    let mut gw = Reloadable::start("reload-cli", &config(&up, false), &[]);
    let pid = std::fs::read_to_string(&gw.pid_file).expect("serve wrote its pid file");
    assert_eq!(pid.trim(), gw.gw.pid().to_string());
    let reload = |extra: &[&str]| {
        let mut args = vec!["reload".to_owned(), "--pid-file".to_owned(), gw.pid_file.display().to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        let out =
            std::process::Command::new(env!("CARGO_BIN_EXE_oncerpc")).args(&args).output().expect("run");
        common::process::keep_output(&out);
        out
    };
    gw.write(&config(&up, true));
    let out = reload(&["--healthz", &gw.gw.url("")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    gw.asked += 1;
    let shown: Value = serde_json::from_slice(&out.stdout).expect("the outcome as JSON");
    assert_eq!(shown["outcome"], "ok", "{shown}");
    assert!(discovered(&gw).await.contains(&"extra.slow".to_owned()));

    gw.write("this is = not [ toml");
    let out = reload(&["--healthz", &gw.gw.url("")]);
    assert_eq!(out.status.code(), Some(1), "a refused config: {}", String::from_utf8_lossy(&out.stdout));
    gw.asked += 1;
    assert!(discovered(&gw).await.contains(&"extra.slow".to_owned()), "nothing changed");

    gw.write(&config(&up, false));
    let out = reload(&[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    gw.asked += 1;
    assert_eq!(gw.outcome().await["outcome"], "ok");
    assert!(!discovered(&gw).await.contains(&"extra.slow".to_owned()));

    let missing = gw.dir.file("no.pid");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .args(["reload", "--pid-file", &missing.display().to_string()])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "a missing pid file");
    gw.gw.sigterm();
    assert!(gw.gw.wait_exit(Duration::from_secs(20)).success());
    assert!(!gw.pid_file.exists(), "the pid file is removed on exit");
}

/// A session's open stream ends when the server shuts down: it never holds the graceful
/// shutdown (here a grace of ten minutes) open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_session_stream_ends_at_shutdown() {
    let up = Upstream::start().await;
    let toml = format!("{}\n[limits]\nshutdown_grace_ms = 600000\n", config(&up, false));
    let mut gw = Reloadable::start("reload-stream-shutdown", &toml, &[]);
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let a = mcp(&gw, &[], init).await;
    let session = a.header("mcp-session-id").expect("a session").to_owned();
    let mut stream = open_stream(&gw, &session).await;
    assert_eq!(stream.status(), 200);
    let refused = gw.gw.http().get("/mcp", &[("x-api-key", KEY), ("mcp-session-id", "forged")]).await;
    assert_eq!(refused.status, 406, "a stream needs Accept: text/event-stream");
    let forged = gw
        .gw
        .http()
        .get("/mcp", &[("x-api-key", KEY), ("mcp-session-id", "forged"), ("accept", "text/event-stream")])
        .await;
    assert_eq!(forged.status, 404, "{}", forged.body);
    gw.gw.sigterm();
    assert_eq!(next_event(&mut stream).await, None, "the stream ends without an event");
    assert!(gw.gw.wait_exit(Duration::from_secs(20)).success(), "{:#?}", gw.gw.log());
}

/// The next event of a server stream (its SSE comments, such as the `: open` it starts with,
/// skipped), or `None` when the stream ends; within 20 s.
async fn next_event(stream: &mut reqwest::Response) -> Option<String> {
    loop {
        let chunk = tokio::time::timeout(Duration::from_secs(20), stream.chunk()).await.expect("no hang");
        let chunk = String::from_utf8_lossy(&chunk.expect("read")?).into_owned();
        if chunk.lines().any(|l| l.starts_with("data:")) {
            return Some(chunk);
        }
    }
}

/// `GET /mcp`: the session's stream from the server.
async fn open_stream(gw: &Reloadable, session: &str) -> reqwest::Response {
    gw.gw
        .http()
        .client
        .get(gw.gw.url("/mcp"))
        .header("x-api-key", KEY)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("the stream opens")
}
