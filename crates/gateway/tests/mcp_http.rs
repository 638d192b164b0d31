//! The MCP door over Streamable HTTP (`/mcp`, session era) on the real `oncerpc serve`: the
//! official MCP Python and TypeScript SDKs as clients, every refusal with its documented status (and
//! nothing run), and sessions and keys that hold across two replicas on one Redis store.
//!
//! Outside CI a missing SDK or Redis skips its test with a printed reason; in CI
//! (`CI=true`, where `scripts/test.sh` provides both) it is a failure.

mod common;

use common::mcp_clients;
use common::process::{Gateway, Http, TempDir, unique};
use common::upstream::Upstream;
use serde_json::{Value, json};

const ACME: &str = "acme-mcp-s3cr3t-0000";
const BETA: &str = "beta-mcp-s3cr3t-0000";

/// Two tenants, one command flow `orders.create` on `up`, the demo methods; `extra` is added
/// at the top (a store, a session secret).
fn config(up: &Upstream, extra: &str) -> String {
    format!(
        r#"
demo = true
{extra}

[[tenants]]
name = "acme"
api_keys = ["{ACME}"]

[[tenants]]
name = "beta"
api_keys = ["{BETA}"]

[[methods]]
name = "orders.create"
kind = "command"
timeout_ms = 5000
params_schema = {{ type = "object", required = ["sku"] }}

  [[methods.steps]]
  name = "charge"
  url = "{charge}"
"#,
        charge = up.url("charge"),
    )
}

fn sqlite(dir: &TempDir) -> String {
    format!("[store]\nurl = \"sqlite://{}\"", dir.file("mcp.db").display())
}

/// POST one MCP message to `/mcp` with `headers` (`Authorization` added from `key` if given).
async fn mcp(h: &Http, key: Option<&str>, headers: &[(&str, &str)], body: &str) -> common::Answer {
    let bearer = key.map(|k| format!("Bearer {k}"));
    let mut all: Vec<(&str, &str)> = headers.to_vec();
    if let Some(b) = &bearer {
        all.push(("Authorization", b));
    }
    all.push(("Content-Type", "application/json"));
    all.push(("Accept", "application/json, text/event-stream"));
    h.post("/mcp", body.to_owned(), &all).await
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// Open a session as `key`'s tenant; its id.
async fn open(h: &Http, key: &str) -> String {
    let a = mcp(h, Some(key), &[], INIT).await;
    assert_eq!(a.status, 200, "{}", a.body);
    a.header("mcp-session-id").expect("a session id").to_owned()
}

fn call(id: u64, sku: &str, key: &str) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":"orders_create","arguments":{"sku":sku,"idempotency_key":key}}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_over_streamable_http_calls_a_command_twice_and_it_runs_once() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-http-python");
    let gw = Gateway::with_config(&dir, &config(&up, &sqlite(&dir)));
    let Some(client) = mcp_clients::python(&["http", &gw.url("/mcp"), ACME, "order-http-1"]) else { return };
    assert_ran_once(&mcp_clients::summary(client).await, &up);
}

/// What both SDK clients must have seen (their scripts print the same summary).
fn assert_ran_once(seen: &Value, up: &Upstream) {
    assert_eq!(seen["server"], "oncerpc");
    assert!(seen["tools"].as_array().unwrap().contains(&json!("orders_create")), "{seen}");
    assert_eq!(seen["first"]["status"], "new", "{seen}");
    assert_eq!(seen["again"]["status"], "duplicate", "{seen}");
    assert_eq!(seen["first"]["text"], seen["again"]["text"], "the stored result, byte for byte");
    assert_eq!(seen["other"]["is_error"], true, "{seen}");
    assert_eq!(seen["other"]["structured"]["code"], -32002, "{seen}");
    assert_eq!(seen["query"]["structured"], json!({"result": 5}));
    assert_eq!(up.count("charge"), 1, "the upstream ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_over_streamable_http_calls_a_command_twice_and_it_runs_once() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-http-ts");
    let gw = Gateway::with_config(&dir, &config(&up, &sqlite(&dir)));
    let Some(client) = mcp_clients::typescript(&[&gw.url("/mcp"), ACME, "order-ts-1"]) else { return };
    assert_ran_once(&mcp_clients::summary(client).await, &up);
}

/// A refusal case: what, the API key, the headers, the body, the expected status.
type Case<'a> = (&'a str, Option<&'a str>, Vec<(&'a str, String)>, String, u16);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_its_status_and_nothing_runs() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-http-refusals");
    let gw = Gateway::with_config(
        &dir,
        &config(&up, &format!("{}\n[limits]\nmax_body_bytes = 4096", sqlite(&dir))),
    );
    let h = gw.http();
    let no_key = mcp(&h, None, &[], INIT).await;
    assert_eq!(no_key.status, 401, "{}", no_key.body);
    assert_eq!(no_key.header("www-authenticate"), Some("Bearer"));
    assert_eq!(mcp(&h, Some("wrong-key-0000000000"), &[], INIT).await.status, 401);
    let x_api_key = h.post("/mcp", INIT, &[("X-API-Key", ACME), ("Content-Type", "application/json")]).await;
    assert_eq!(x_api_key.status, 200, "X-API-Key selects the tenant too: {}", x_api_key.body);

    let sid = open(&h, ACME).await;
    let with =
        |sid: &str| vec![("Mcp-Session-Id", sid.to_owned()), ("MCP-Protocol-Version", "2025-06-18".into())];
    let cases: Vec<Case> = vec![
        ("no session", Some(ACME), vec![], call(2, "A", "k-nosession"), 400),
        ("unknown session", Some(ACME), with("not-a-session"), call(3, "A", "k-unknown"), 404),
        ("another tenant's session", Some(BETA), with(&sid), call(4, "A", "k-beta"), 404),
        (
            "unsupported protocol version",
            Some(ACME),
            vec![("Mcp-Session-Id", sid.clone()), ("MCP-Protocol-Version", "1999-01-01".into())],
            call(5, "A", "k-version"),
            400,
        ),
        (
            "hostile origin",
            Some(ACME),
            vec![("Origin", "http://evil.example".into())],
            call(6, "A", "k-origin"),
            403,
        ),
        ("malformed JSON", Some(ACME), with(&sid), "{\"jsonrpc\":".into(), 400),
        (
            "a batch where the revision has none",
            Some(ACME),
            with(&sid),
            format!("[{}]", call(7, "A", "k-batch")),
            400,
        ),
        ("oversized body", Some(ACME), with(&sid), call(8, &"x".repeat(5000), "k-big"), 413),
    ];
    for (what, key, headers, body, status) in cases {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let a = mcp(&h, key, &headers, &body).await;
        assert_eq!(a.status, status, "{what}: {}", a.body);
        assert!(
            a.header("content-type").is_some_and(|c| c.contains("json")),
            "{what}: a body a client can read"
        );
    }
    assert_eq!(up.count("charge"), 0, "nothing ran");

    // The session works, answers notifications with 202, and ends with DELETE.
    let sid_headers = [("Mcp-Session-Id", sid.as_str())];
    let note =
        mcp(&h, Some(ACME), &sid_headers, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    assert_eq!((note.status, note.body.as_str()), (202, ""));
    let ok = mcp(&h, Some(ACME), &sid_headers, &call(9, "A", "k-ok")).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.json()["result"]["_meta"]["io.oncerpc/idempotency-status"], "new");
    assert_eq!(h.get("/mcp", &[("Authorization", &format!("Bearer {ACME}"))]).await.status, 405);
    let bearer = format!("Bearer {ACME}");
    let del = h.client_delete("/mcp", &[("Authorization", &bearer), ("Mcp-Session-Id", &sid)]).await;
    assert_eq!(del, 204);
    assert_eq!(
        mcp(&h, Some(ACME), &sid_headers, &call(10, "A", "k-ok")).await.status,
        404,
        "an ended session"
    );
    assert_eq!(up.count("charge"), 1);

    // Counted: the call, the notification, the refused bodies, the sessions.
    let metrics = h.get("/metrics", &[]).await.body;
    for line in [
        r#"oncerpc_mcp_requests_total{method="tools/call",outcome="ok"} 1"#,
        r#"oncerpc_mcp_requests_total{method="notification",outcome="notification"} 1"#,
        r#"oncerpc_mcp_requests_total{method="other",outcome="refused"} 2"#,
        r#"oncerpc_mcp_sessions_total{event="opened"} 2"#,
        r#"oncerpc_mcp_sessions_total{event="ended"} 1"#,
        // Opened with X-API-Key and still live; the other one was ended.
        "oncerpc_mcp_sessions_active 1",
        r#"oncerpc_mcp_refusals_total{reason="no_session"} 1"#,
        r#"oncerpc_mcp_refusals_total{reason="unknown_session"} 3"#,
        r#"oncerpc_mcp_refusals_total{reason="version"} 1"#,
        r#"oncerpc_mcp_refusals_total{reason="origin"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in /metrics:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_and_a_key_hold_across_two_replicas_on_redis() {
    let Some(redis) = oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_URL", "Redis") else { return };
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-http-replicas");
    let shared = format!(
        "[store]\nurl = \"{redis}\"\nredis_prefix = \"{}\"\n\n[mcp]\nsession_secret = \"{}\"",
        unique("mcp"),
        "0123456789abcdef0123456789abcdef-s3cr3t"
    );
    let a = Gateway::with_config(&dir, &config(&up, &shared));
    let dir_b = TempDir::new("mcp-http-replicas-b");
    let b = Gateway::with_config(&dir_b, &config(&up, &shared));
    let (ha, hb) = (a.http(), b.http());
    let sid = open(&ha, ACME).await;
    let headers = [("Mcp-Session-Id", sid.as_str()), ("MCP-Protocol-Version", "2025-06-18")];
    let key = unique("cross");
    let mut statuses = Vec::new();
    for (i, h) in [&ha, &hb, &ha, &hb].into_iter().enumerate() {
        let r = mcp(h, Some(ACME), &headers, &call(i as u64 + 2, "Q-1", &key)).await;
        assert_eq!(r.status, 200, "replica {}: {}", i % 2, r.body);
        statuses
            .push(r.json()["result"]["_meta"]["io.oncerpc/idempotency-status"].as_str().unwrap().to_owned());
    }
    assert_eq!(statuses, ["new", "duplicate", "duplicate", "duplicate"]);
    assert_eq!(up.count("charge"), 1, "one upstream call across the replicas");

    // A replica with another secret does not know the session.
    let other = format!(
        "[store]\nurl = \"{redis}\"\n\n[mcp]\nsession_secret = \"{}\"",
        "another-deployment-secret-00000000"
    );
    let dir_c = TempDir::new("mcp-http-replicas-c");
    let c = Gateway::with_config(&dir_c, &config(&up, &other));
    assert_eq!(mcp(&c.http(), Some(ACME), &headers, &call(9, "Q-1", &key)).await.status, 404);

    // Ended on one replica, it is ended on the other: sessions live in the store.
    let ping = json!({"jsonrpc":"2.0","id":10,"method":"ping"}).to_string();
    assert_eq!(mcp(&hb, Some(ACME), &headers, &ping).await.status, 200);
    let bearer = format!("Bearer {ACME}");
    let ended = ha
        .client_delete("/mcp", &[("Mcp-Session-Id", sid.as_str()), ("Authorization", bearer.as_str())])
        .await;
    assert_eq!(ended, 204);
    let after = mcp(&hb, Some(ACME), &headers, &ping).await;
    assert_eq!(after.status, 404, "the other replica refuses an ended session: {}", after.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_ends_and_a_used_one_lives_on() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-http-idle");
    let gw =
        Gateway::with_config(&dir, &config(&up, &format!("{}\n[mcp]\nsession_idle_secs = 2", sqlite(&dir))));
    let h = gw.http();
    let ping = json!({"jsonrpc":"2.0","id":2,"method":"ping"}).to_string();
    let (busy, idle) = (open(&h, ACME).await, open(&h, ACME).await);
    let with = |sid: &str| {
        vec![("Mcp-Session-Id", sid.to_owned()), ("MCP-Protocol-Version", "2025-06-18".to_owned())]
    };
    let send = |sid: &str| {
        let headers = with(sid);
        let (h, ping) = (h.clone(), ping.clone());
        async move {
            let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            mcp(&h, Some(ACME), &headers, &ping).await.status
        }
    };
    // The busy session is used every 300 ms for 3 s: each use past half its idle time renews
    // it. The idle one is not used at all, and is gone after its two seconds.
    for _ in 0..10 {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert_eq!(send(&busy).await, 200, "a session in use lives on");
    }
    assert_eq!(send(&idle).await, 404, "an idle session ends");
}

/// The data of each server-sent event of a `text/event-stream` body, as JSON.
fn events(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("event data is JSON ({e}): {d:?}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_tells_each_step_as_progress_and_log_events_before_its_result() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-http-progress");
    let steps: String = ["reserve", "charge", "ship"]
        .iter()
        .map(|s| format!("  [[methods.steps]]\n  name = \"{s}\"\n  url = \"{}\"\n", up.url(s)))
        .collect();
    let flow = format!("[[methods]]\nname = \"orders.ship\"\nkind = \"command\"\ntimeout_ms = 5000\n{steps}");
    let gw = Gateway::with_config(&dir, &config(&up, &format!("{}\n{flow}", sqlite(&dir))));
    let h = gw.http();
    let sid = open(&h, ACME).await;
    let session = [("Mcp-Session-Id", sid.as_str()), ("MCP-Protocol-Version", "2025-06-18")];
    let ship = |id: u64, key: &str, token: Option<&str>| {
        let mut params = json!({"name":"orders_ship","arguments":{"sku":"A","idempotency_key":key}});
        if let Some(t) = token {
            params["_meta"] = json!({"progressToken": t});
        }
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":params}).to_string()
    };

    // Progress only: three progress events in order, then the result, as SSE.
    let a = mcp(&h, Some(ACME), &session, &ship(2, "ship-1", Some("p-1"))).await;
    assert_eq!((a.status, a.header("content-type")), (200, Some("text/event-stream")), "{}", a.body);
    let seen = events(&a.body);
    assert_eq!(seen.len(), 4, "{seen:#?}");
    for (n, e) in seen[..3].iter().enumerate() {
        assert_eq!(e["method"], "notifications/progress", "{e}");
        assert_eq!(e["params"]["progressToken"], "p-1");
        assert_eq!(
            (e["params"]["progress"].as_u64(), e["params"]["total"].as_u64()),
            (Some(n as u64 + 1), Some(3))
        );
    }
    assert!(seen[2]["params"]["message"].as_str().unwrap().contains("ship"), "{}", seen[2]);
    assert_eq!(seen[3]["id"], 2);
    assert_eq!(seen[3]["result"]["_meta"]["io.oncerpc/idempotency-status"], "new");

    // After logging/setLevel, each step is a log message too (info); the retry of the same
    // key is a duplicate: nothing runs again, so nothing is told, and it answers plain JSON.
    let level =
        json!({"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"debug"}}).to_string();
    assert_eq!(mcp(&h, Some(ACME), &session, &level).await.status, 200);
    let a = mcp(&h, Some(ACME), &session, &ship(4, "ship-2", Some("p-2"))).await;
    let seen = events(&a.body);
    let logs: Vec<&Value> = seen.iter().filter(|e| e["method"] == "notifications/message").collect();
    let progress = seen.iter().filter(|e| e["method"] == "notifications/progress").count();
    assert_eq!((logs.len(), progress), (3, 3), "{seen:#?}");
    assert_eq!(logs[0]["params"]["level"], "info");
    assert_eq!(logs[0]["params"]["data"]["step"], "reserve");
    assert_eq!(seen.last().unwrap()["id"], 4);
    let again = mcp(&h, Some(ACME), &session, &ship(5, "ship-2", Some("p-3"))).await;
    assert_eq!(again.header("content-type"), Some("application/json"), "{}", again.body);
    assert_eq!(again.json()["result"]["_meta"]["io.oncerpc/idempotency-status"], "duplicate");

    // A client that takes only JSON gets JSON, and no notifications.
    let mut json_only: Vec<(&str, &str)> = session.to_vec();
    let bearer = format!("Bearer {ACME}");
    json_only.extend([
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json"),
    ]);
    let a = h.post("/mcp", ship(6, "ship-3", Some("p-4")), &json_only).await;
    assert_eq!((a.status, a.header("content-type")), (200, Some("application/json")), "{}", a.body);
    assert_eq!(a.json()["result"]["isError"], false);
    // Each step ran once per new key: three keys.
    for step in ["reserve", "charge", "ship"] {
        assert_eq!(up.count(step), 3, "{step}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_query_stops_and_a_cancelled_command_runs_on() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-http-cancel");
    let lookup = format!(
        "[[methods]]\nname = \"orders.lookup\"\nkind = \"query\"\ntimeout_ms = 30000\n  [[methods.steps]]\n  name = \"lookup\"\n  url = \"{}\"\n",
        up.url("lookup")
    );
    let gw = Gateway::with_config(&dir, &config(&up, &format!("{}\n{lookup}", sqlite(&dir))));
    let h = gw.http();
    let sid = open(&h, ACME).await;
    let session = [("Mcp-Session-Id", sid.as_str()), ("MCP-Protocol-Version", "2025-06-18")];
    let cancel = |id: u64| {
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":id,"reason":"user"}})
            .to_string()
    };
    let wait_for = |step: &'static str| {
        let up = &up;
        async move {
            for _ in 0..500 {
                if up.count(step) > 0 {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            panic!("{step} was never called");
        }
    };

    // A query that waits on a slow upstream: cancelled, its POST ends at once with no answer.
    up.set_delay(20_000, &["lookup"]);
    let query = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"orders_lookup","arguments":{}}});
    let (h2, s2) = (h.clone(), sid.clone());
    let asked = tokio::spawn(async move {
        let session = [("Mcp-Session-Id", s2.as_str()), ("MCP-Protocol-Version", "2025-06-18")];
        mcp(&h2, Some(ACME), &session, &query.to_string()).await
    });
    wait_for("lookup").await;
    // Another tenant cannot cancel it (its session is not this one).
    let beta = open(&h, BETA).await;
    let other = [("Mcp-Session-Id", beta.as_str()), ("MCP-Protocol-Version", "2025-06-18")];
    assert_eq!(mcp(&h, Some(BETA), &other, &cancel(7)).await.status, 202);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!asked.is_finished(), "another session's cancellation stops nothing");
    assert_eq!(mcp(&h, Some(ACME), &session, &cancel(7)).await.status, 202);
    let a = asked.await.unwrap();
    assert_eq!((a.status, a.body.as_str()), (202, ""), "a cancelled request gets no answer");
    assert_eq!(up.active(), 1, "answered while the upstream still held the query: it was not waited for");

    // A command is not stopped: it finishes, its POST gets the result, and the retry the
    // stored one.
    up.set_delay(300, &["charge"]);
    let (h2, s2) = (h.clone(), sid.clone());
    let ordered = tokio::spawn(async move {
        let session = [("Mcp-Session-Id", s2.as_str()), ("MCP-Protocol-Version", "2025-06-18")];
        mcp(&h2, Some(ACME), &session, &call(8, "A", "cancel-me")).await
    });
    wait_for("charge").await;
    assert_eq!(mcp(&h, Some(ACME), &session, &cancel(8)).await.status, 202);
    let a = ordered.await.unwrap();
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["result"]["_meta"]["io.oncerpc/idempotency-status"], "new", "{}", a.body);
    let retry = mcp(&h, Some(ACME), &session, &call(9, "A", "cancel-me")).await;
    assert_eq!(retry.json()["result"]["_meta"]["io.oncerpc/idempotency-status"], "duplicate");
    assert_eq!(up.count("charge"), 1);
    let metrics = h.get("/metrics", &[]).await.body;
    assert!(
        metrics.contains(r#"oncerpc_mcp_requests_total{method="tools/call",outcome="cancelled"} 1"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_header_is_a_calls_key_as_on_rpc() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-http-key-header");
    let gw = Gateway::with_config(&dir, &config(&up, &sqlite(&dir)));
    let h = gw.http();
    let sid = open(&h, ACME).await;
    let keyless = |id: u64| {
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"orders_create","arguments":{"sku":"H"}}})
            .to_string()
    };
    let with = |key: &'static str| [("Mcp-Session-Id", sid.clone()), ("Idempotency-Key", key.to_owned())];
    let send = |headers: [(&'static str, String); 2], body: String| {
        let h = h.clone();
        async move {
            let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            mcp(&h, Some(ACME), &headers, &body).await
        }
    };
    let status = |a: &common::Answer| a.json()["result"]["_meta"]["io.oncerpc/idempotency-status"].clone();
    let first = send(with("hdr-1"), keyless(2)).await;
    assert_eq!(
        (status(&first), first.json()["result"]["_meta"]["io.oncerpc/idempotency-key"].clone()),
        (json!("new"), json!("hdr-1"))
    );
    assert_eq!(status(&send(with("hdr-1"), keyless(3)).await), json!("duplicate"));
    // The header and a key in _meta or in the arguments must agree.
    let meta = json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"orders_create",
        "arguments":{"sku":"H"},"_meta":{"io.oncerpc/idempotency-key":"other-1"}}});
    let a = send(with("hdr-1"), meta.to_string()).await;
    assert_eq!(a.json()["error"]["code"], -32602, "{}", a.body);
    let a = send(with("hdr-1"), call(5, "H", "other-2")).await;
    assert_eq!(a.json()["result"]["isError"], true, "{}", a.body);
    assert_eq!(up.count("charge"), 1);
}
