//! The MCP door's stateless revision (`2026-07-28`) over Streamable HTTP on the real
//! `oncerpc serve`, on the same `/mcp` as the session era: the official TypeScript SDK v2
//! client (`@modelcontextprotocol/client`, pinned to `2026-07-28`, and negotiating) runs a
//! command once however
//! often it is sent, on one gateway and across two replicas on one store; every refusal of a
//! request (headers that disagree with the body, a version not served, `_meta` missing, a
//! batch, malformed JSON) has its documented status and runs nothing.
//!
//! Outside CI a missing SDK or Redis skips its test with a printed reason; in CI (`CI=true`,
//! where `scripts/test.sh` provides both) it is a failure.

mod common;

use common::mcp_clients;
use common::process::{Gateway, Http, TempDir, unique};
use common::upstream::Upstream;
use serde_json::{Value, json};

const ACME: &str = "acme-mcp26-s3cr3t-000";

/// One tenant, one command flow `orders.create` on `up` (its `warehouse` argument mirrored in
/// an `Mcp-Param-Warehouse` header), the demo methods; `extra` at the top (a store).
fn config(up: &Upstream, extra: &str) -> String {
    format!(
        r#"
demo = true
{extra}

[[tenants]]
name = "acme"
api_keys = ["{ACME}"]

[[methods]]
name = "orders.create"
kind = "command"
timeout_ms = 5000
params_schema = {{ type = "object", required = ["sku"], properties = {{ sku = {{ type = "string" }}, warehouse = {{ type = "string", "x-mcp-header" = "Warehouse" }} }} }}

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

/// `_meta` of a `2026-07-28` request.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

fn call(id: u64, sku: &str, key: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":"orders_create","arguments":{"sku":sku,"idempotency_key":key},"_meta":meta()}})
}

/// The headers a conforming client sends with `body`.
fn standard(body: &Value) -> Headers {
    let mut h = vec![("MCP-Protocol-Version", "2026-07-28".to_owned())];
    if let Some(m) = body["method"].as_str() {
        h.push(("Mcp-Method", m.to_owned()));
    }
    if let Some(n) = body["params"]["name"].as_str() {
        h.push(("Mcp-Name", n.to_owned()));
    }
    h
}

/// POST `body` to `/mcp` as ACME with `headers`.
async fn post(h: &Http, headers: &[(&str, String)], body: &str) -> common::Answer {
    let bearer = format!("Bearer {ACME}");
    let mut all: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.push(("Authorization", &bearer));
    all.push(("Content-Type", "application/json"));
    all.push(("Accept", "application/json, text/event-stream"));
    h.post("/mcp", body.to_owned(), &all).await
}

/// What the SDK client script saw (tests/clients/mcp_client_2026.mjs).
fn assert_ran_once(seen: &Value, up: &Upstream) {
    assert_eq!(seen["era"], json!(["modern", "modern"]), "{seen}");
    assert_eq!(seen["versions"][0], "2026-07-28", "{seen}");
    assert_eq!(seen["server"], "oncerpc", "{seen}");
    assert!(seen["tools"].as_array().unwrap().contains(&json!("orders_create")), "{seen}");
    assert_eq!(seen["tools_ttl_ms"], 300_000, "{seen}");
    assert_eq!(seen["first"]["status"], "new", "{seen}");
    assert_eq!(seen["again"]["status"], "duplicate", "{seen}");
    assert_eq!(seen["first"]["text"], seen["again"]["text"], "the stored result, byte for byte");
    assert_eq!(seen["other"]["is_error"], true, "{seen}");
    assert_eq!(seen["other"]["structured"]["code"], -32002, "{seen}");
    assert_eq!(seen["query"]["structured"], json!({"result": 5}), "{seen}");
    assert_eq!(up.count("charge"), 1, "the upstream ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_v2_client_in_2026_07_28_calls_a_command_twice_and_it_runs_once() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp26-ts");
    let gw = Gateway::with_config(&dir, &config(&up, &sqlite(&dir)));
    let url = gw.url("/mcp");
    let Some(client) = mcp_clients::typescript_2026(&[&url, &url, ACME, "order-2026-1"]) else { return };
    assert_ran_once(&mcp_clients::summary(client).await, &up);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_answers_any_stateless_request_and_a_key_holds_across_them_on_redis() {
    let Some(redis) = oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_URL", "Redis") else { return };
    replicas_answer(format!("[store]\nurl = \"{redis}\"\nredis_prefix = \"{}\"", unique("mcp26"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_answers_any_stateless_request_and_a_key_holds_across_them_on_postgres() {
    let Some(pg) = oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_URL", "PostgreSQL") else {
        return;
    };
    replicas_answer(format!("[store]\nurl = \"{pg}\"")).await;
}

/// Two replicas on the store `shared` names (no session secret: nothing of a stateless
/// request depends on the replica).
async fn replicas_answer(shared: String) {
    let up = Upstream::start().await;
    let (dir_a, dir_b) = (TempDir::new("mcp26-replica-a"), TempDir::new("mcp26-replica-b"));
    let a = Gateway::with_config(&dir_a, &config(&up, &shared));
    let b = Gateway::with_config(&dir_b, &config(&up, &shared));

    // By hand, alternating: new on A, then duplicates on B, A, B.
    let key = unique("cross26");
    let mut statuses = Vec::new();
    for (i, h) in [a.http(), b.http(), a.http(), b.http()].iter().enumerate() {
        let body = call(i as u64 + 1, "R-1", &key);
        let r = post(h, &standard(&body), &body.to_string()).await;
        assert_eq!(r.status, 200, "replica {}: {}", i % 2, r.body);
        statuses
            .push(r.json()["result"]["_meta"]["io.oncerpc/idempotency-status"].as_str().unwrap().to_owned());
    }
    assert_eq!(statuses, ["new", "duplicate", "duplicate", "duplicate"]);
    assert_eq!(up.count("charge"), 1, "one upstream call across the replicas");

    // The SDK client: calls on A, its retry on B.
    let (url_a, url_b) = (a.url("/mcp"), b.url("/mcp"));
    let Some(client) = mcp_clients::typescript_2026(&[&url_a, &url_b, ACME, &unique("sdk26")]) else {
        return;
    };
    let seen = mcp_clients::summary(client).await;
    assert_eq!(seen["first"]["status"], "new", "{seen}");
    assert_eq!(seen["again"]["status"], "duplicate", "the retry on the other replica: {seen}");
    assert_eq!(seen["other"]["structured"]["code"], -32002, "{seen}");
    assert_eq!(up.count("charge"), 2, "one more upstream call: the SDK's command ran once");
}

/// Request headers: name, value.
type Headers = Vec<(&'static str, String)>;

/// A refusal case: what, the headers, the body, the HTTP status, the JSON-RPC code.
type Case = (&'static str, Headers, String, u16, i64);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stateless_refusal_has_its_status_and_nothing_runs() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp26-refusals");
    let gw = Gateway::with_config(&dir, &config(&up, &sqlite(&dir)));
    let h = gw.http();
    let good = call(1, "A", "k-refused");
    let with = |f: &dyn Fn(&mut Headers)| {
        let mut h = standard(&good);
        f(&mut h);
        h
    };
    let set = |name: &'static str, value: &str| {
        let value = value.to_owned();
        move |h: &mut Headers| {
            h.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            h.push((name, value.clone()));
        }
    };
    let drop = |name: &'static str| move |h: &mut Headers| h.retain(|(n, _)| *n != name);
    let mut other_version = good.clone();
    other_version["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1999-01-01");
    let mut no_meta = good.clone();
    no_meta["params"].as_object_mut().unwrap().remove("_meta");
    let mut no_caps = good.clone();
    no_caps["params"]["_meta"].as_object_mut().unwrap().remove("io.modelcontextprotocol/clientCapabilities");
    let mut in_warehouse = good.clone();
    in_warehouse["params"]["arguments"]["warehouse"] = json!("north");
    let initialize = json!({"jsonrpc":"2.0","id":9,"method":"initialize","params":{"_meta":meta()}});
    let ping = json!({"jsonrpc":"2.0","id":10,"method":"ping","params":{"_meta":meta()}});
    let cases: Vec<Case> = vec![
        ("Mcp-Method disagrees", with(&set("Mcp-Method", "tools/list")), good.to_string(), 400, -32020),
        ("Mcp-Method in other case", with(&set("Mcp-Method", "TOOLS/CALL")), good.to_string(), 400, -32020),
        ("Mcp-Method missing", with(&drop("Mcp-Method")), good.to_string(), 400, -32020),
        ("Mcp-Name disagrees", with(&set("Mcp-Name", "subtract")), good.to_string(), 400, -32020),
        ("Mcp-Name missing", with(&drop("Mcp-Name")), good.to_string(), 400, -32020),
        (
            "Mcp-Name bad Base64",
            with(&set("Mcp-Name", "=?base64?b3JkZXJz?=x")),
            good.to_string(),
            400,
            -32020,
        ),
        ("MCP-Protocol-Version missing", with(&drop("MCP-Protocol-Version")), good.to_string(), 400, -32020),
        ("header and _meta versions disagree", standard(&good), other_version.to_string(), 400, -32020),
        (
            "a version not served",
            with(&set("MCP-Protocol-Version", "1999-01-01")),
            other_version.to_string(),
            400,
            -32022,
        ),
        ("no _meta", standard(&good), no_meta.to_string(), 400, -32602),
        ("_meta without clientCapabilities", standard(&good), no_caps.to_string(), 400, -32602),
        ("Mcp-Param-Warehouse missing", standard(&in_warehouse), in_warehouse.to_string(), 400, -32020),
        (
            "Mcp-Param-Warehouse disagrees",
            with(&set("Mcp-Param-Warehouse", "south")),
            in_warehouse.to_string(),
            400,
            -32020,
        ),
        ("a batch", standard(&good), format!("[{good}]"), 400, -32600),
        ("malformed JSON", standard(&good), "{\"jsonrpc\":".into(), 400, -32700),
        ("initialize, removed", standard(&initialize), initialize.to_string(), 404, -32601),
        ("ping, removed", standard(&ping), ping.to_string(), 404, -32601),
    ];
    let refused = cases.len();
    for (what, headers, body, status, code) in cases {
        let a = post(&h, &headers, &body).await;
        assert_eq!(a.status, status, "{what}: {}", a.body);
        assert!(
            a.header("content-type").is_some_and(|c| c.contains("json")),
            "{what}: a body a client can read"
        );
        let answer = a.json();
        assert_eq!(answer["error"]["code"], code, "{what}: {answer}");
        let id = serde_json::from_str::<Value>(&body).ok().and_then(|b| b.get("id").cloned());
        if let Some(id) = id {
            assert_eq!(answer["id"], id, "{what}: the request's id");
        }
    }
    let unsupported =
        post(&h, &with(&set("MCP-Protocol-Version", "1999-01-01")), &other_version.to_string()).await;
    let data = &unsupported.json()["error"]["data"];
    assert_eq!(data["requested"], "1999-01-01");
    assert_eq!(data["supported"], json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]));
    assert_eq!(up.count("charge"), 0, "nothing ran");

    // The same request, right: it runs once; headers are case-insensitive and trimmed, and an
    // argument mirrored in Base64 is decoded before it is compared.
    let ok = post(&h, &standard(&good), &good.to_string()).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.json()["result"]["resultType"], "complete");
    assert_eq!(ok.json()["result"]["_meta"]["io.oncerpc/idempotency-status"], "new");
    let lower: Vec<(&str, String)> = vec![
        ("mcp-protocol-version", " 2026-07-28 ".into()),
        ("mcp-method", "tools/call".into()),
        ("MCP-NAME", "=?base64?b3JkZXJzX2NyZWF0ZQ==?=".into()),
    ];
    let again = post(&h, &lower, &good.to_string()).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json()["result"]["_meta"]["io.oncerpc/idempotency-status"], "duplicate");
    let mut in_north = call(2, "B", "k-north");
    in_north["params"]["arguments"]["warehouse"] = json!("north");
    let north = post(
        &h,
        &[standard(&in_north), vec![("Mcp-Param-Warehouse", "=?base64?bm9ydGg=?=".into())]].concat(),
        &in_north.to_string(),
    )
    .await;
    assert_eq!(north.status, 200, "{}", north.body);
    assert_eq!(up.count("charge"), 2);

    // Discovery, a notification, GET; the session era on the same endpoint, unchanged.
    let discover = json!({"jsonrpc":"2.0","id":"d-1","method":"server/discover","params":{"_meta":meta()}});
    let d = post(&h, &standard(&discover), &discover.to_string()).await;
    assert_eq!(d.status, 200, "{}", d.body);
    assert_eq!(
        d.json()["result"]["capabilities"],
        json!({"tools": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
    );
    let note =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"_meta":meta(),"requestId":1}});
    let n = post(&h, &standard(&note), &note.to_string()).await;
    assert_eq!((n.status, n.body.as_str()), (202, ""));
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let session = post(&h, &[], init).await;
    assert_eq!(session.status, 200, "{}", session.body);
    assert!(session.header("mcp-session-id").is_some(), "initialize still opens a session");
    assert_eq!(h.get("/mcp", &[("Authorization", &format!("Bearer {ACME}"))]).await.status, 405);

    // Counted: each refusal under its reason, the calls, discovery.
    let metrics = h.get("/metrics", &[]).await.body;
    for line in [
        r#"oncerpc_mcp_refusals_total{reason="header_mismatch"} 10"#.to_owned(),
        r#"oncerpc_mcp_refusals_total{reason="version"} 2"#.to_owned(),
        r#"oncerpc_mcp_refusals_total{reason="meta"} 2"#.to_owned(),
        r#"oncerpc_mcp_refusals_total{reason="batch"} 1"#.to_owned(),
        r#"oncerpc_mcp_refusals_total{reason="malformed"} 1"#.to_owned(),
        format!(r#"oncerpc_mcp_requests_total{{method="other",outcome="refused"}} {}"#, refused - 2 + 1),
        r#"oncerpc_mcp_requests_total{method="tools/call",outcome="ok"} 3"#.to_owned(),
        r#"oncerpc_mcp_requests_total{method="server/discover",outcome="ok"} 1"#.to_owned(),
        r#"oncerpc_mcp_requests_total{method="initialize",outcome="error"} 1"#.to_owned(),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in /metrics:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_tells_its_steps_only_as_the_request_asks() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp26-progress");
    let gw = Gateway::with_config(&dir, &config(&up, &sqlite(&dir)));
    let h = gw.http();
    // A progress token and a log level: the answer is a stream of events, the result last.
    let mut asking = call(1, "P-1", "k-progress");
    asking["params"]["_meta"]["progressToken"] = json!("tok-1");
    asking["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    let a = post(&h, &standard(&asking), &asking.to_string()).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")), "{}", a.body);
    let events: Vec<Value> = a
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).expect("an event is JSON"))
        .collect();
    let methods: Vec<&str> = events.iter().filter_map(|e| e["method"].as_str()).collect();
    assert_eq!(methods, ["notifications/progress", "notifications/message"], "{}", a.body);
    assert_eq!(events[0]["params"]["progressToken"], "tok-1");
    let last = events.last().unwrap();
    assert_eq!(last["result"]["_meta"]["io.oncerpc/idempotency-status"], "new", "{last}");
    // Neither: one JSON body, and no log message (the earlier request's level is not kept).
    let quiet = call(2, "P-2", "k-quiet");
    let q = post(&h, &standard(&quiet), &quiet.to_string()).await;
    assert!(q.header("content-type").is_some_and(|c| c.contains("application/json")), "{}", q.body);
    assert!(!q.body.contains("notifications/"), "{}", q.body);
    assert_eq!(up.count("charge"), 2);
}
