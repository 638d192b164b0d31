//! Everything an upstream MCP server offers, not only its tools (SPEC §16b): an upstream made
//! with the official Python SDK's FastMCP (`tests/clients/mcp_upstream_server.py`) offers a
//! resource, a resource template, a prompt and completions; the real `oncerpc serve`
//! re-exports them, and the official SDK clients — Python (session era) and TypeScript (the
//! session era's `@modelcontextprotocol/sdk`, the `2026-07-28` v2 client) — list, read, get
//! and complete them through it. A change of the upstream's resources reaches an open
//! session (its `GET /mcp` event stream, which a shutdown ends); a client's cancellation of an
//! upstream's command reaches the upstream. What ran is read from the upstreams' own logs.
//!
//! Outside CI a missing SDK skips a test with a printed reason; in CI it is a failure.

mod common;

use std::process::Command;

use common::mcp_clients;
use common::mcp_upstream::{Executions, HttpUpstream, wait_for, wait_up};
use common::process::{Gateway, Http, TempDir, unique};
use serde_json::{Value, json};

fn sqlite(dir: &TempDir) -> String {
    format!("demo = false\n[store]\nurl = \"sqlite://{}\"\n", dir.file("once.db").display())
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// POST one `2026-07-28` request of `method` with `params` (`_meta` added); the whole answer.
async fn request(gw: &Http, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    let name = params["uri"].as_str().or(params["name"].as_str()).unwrap_or_default().to_owned();
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if matches!(method, "tools/call" | "prompts/get" | "resources/read") && !name.is_empty() {
        headers.push(("Mcp-Name", &name));
    }
    gw.post("/mcp", body.to_string(), &headers).await.json()
}

/// The SDK clients through oncerpc, in front of two upstreams offering the same resources and
/// a prompt each: `pay` over Streamable HTTP (no prefix) and `ledger` over stdio (prefix
/// `ledger.`: its prompt is `ledger_dispute`, its resources keep their URIs, which `pay`
/// offered first). Listed once each, read, got and completed at the upstream that offers
/// them; bad URIs and names are `-32602`; a resource the upstream publishes is announced on
/// the session's stream; a cancelled call is cancelled on the upstream, and not stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_clients_read_an_upstreams_resources_and_prompts_through_oncerpc() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-upstream-offers");
    let log = Executions(dir.file("pay.log"));
    let ledger_log = Executions(dir.file("ledger.log"));
    let upstream = HttpUpstream::start(&python, &log).await;
    let config = format!(
        "{store}\n[[mcp.upstreams]]\nname = \"pay\"\nurl = \"{url}\"\ntools = [\"charge\", \"publish_statement\", \"slow_charge\"]\ntimeout_ms = 20000\n\
         [[mcp.upstreams]]\nname = \"ledger\"\ncommand = \"{python}\"\nargs = [\"{script}\", \"{ledger}\", \"stdio\"]\ntools = [\"balance\"]\nprefix = \"ledger.\"\n",
        store = sqlite(&dir),
        url = upstream.url,
        script = mcp_clients::client_script("mcp_upstream_server.py").display(),
        ledger = ledger_log.0.display(),
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "pay").await;
    wait_up(&http, "ledger").await;

    // The Python SDK (session era): capabilities, lists, reads, a prompt, completions.
    let mut client = Command::new(&python);
    client
        .arg(mcp_clients::client_script("mcp_upstream_offers_client.py"))
        .args([&gw.url("/mcp"), "ledger_"]);
    let seen = mcp_clients::summary(client).await;
    for capability in ["completions", "prompts", "resources", "tools"] {
        assert!(
            seen["capabilities"].as_array().unwrap().contains(&json!(capability)),
            "{capability}: {seen}"
        );
    }
    assert_eq!(seen["resources"], json!(["pay://terms"]), "one URI, listed once: {seen}");
    assert_eq!(seen["templates"], json!(["pay://receipts/{receipt_id}"]), "{seen}");
    let prompts = json!([
        { "name": "dispute", "arguments": ["charge_id", "reason"] },
        { "name": "ledger_dispute", "arguments": ["charge_id", "reason"] },
    ]);
    assert_eq!(seen["prompts"], prompts, "each upstream's prompt, prefixed as its tools: {seen}");
    assert_eq!(seen["terms"], json!(["Payment is due within 30 days."]), "{seen}");
    assert_eq!(
        seen["receipt"],
        json!({ "receipt": "r-7", "amount": 5 }),
        "read through the template: {seen}"
    );
    assert_eq!(seen["prompt"], json!(["Write a dispute of charge ch-1, reason: fraudulent."]), "{seen}");
    let got: Vec<Value> = ledger_log.lines().into_iter().filter(|l| l["prompt"] == "dispute").collect();
    assert_eq!(got.len(), 1, "ledger_dispute was got at the ledger, under its own name: {got:?}");
    assert_eq!(log.lines().iter().filter(|l| l["prompt"] == "dispute").count(), 0, "not at pay");
    assert_eq!(seen["reason"], json!(["duplicate"]), "{seen}");
    assert_eq!(seen["receipt_ids"], json!(["r-1", "r-10"]), "{seen}");
    assert_eq!(seen["unknown"]["code"], -32602, "{seen}");
    assert!(seen["unknown"]["message"].as_str().unwrap().contains("Resource not found"), "{seen}");
    assert_eq!(seen["missing"]["code"], -32602, "the upstream's refusal: {seen}");
    assert!(
        seen["missing"]["message"].as_str().unwrap().contains("\"pay\""),
        "it names the upstream: {seen}"
    );
    assert_eq!(seen["no_prompt"]["code"], -32602, "{seen}");
    assert_eq!(
        seen["list_changed"], true,
        "the upstream's new resource was announced on the session's stream: {seen}"
    );
    assert_eq!(seen["after"], json!(["pay://statement", "pay://terms"]), "{seen}");

    // The TypeScript SDK (session era): the same, and a call it cancels.
    let key = unique("cancel");
    log.hold();
    let log_path = log.0.display().to_string();
    if let Some(ts) = mcp_clients::typescript_script(
        "mcp_upstream_offers_ts_client.mjs",
        &["session", &gw.url("/mcp"), &key, &log_path],
    ) {
        let seen = mcp_clients::summary(ts).await;
        assert_ts_offers(&seen);
        assert!(
            seen["cancelled"].is_string() || seen["cancelled"].is_number(),
            "the call was aborted: {seen}"
        );
        wait_for("the upstream to be told of the cancellation", || {
            log.of("slow_charge_cancelled", Some(&key)).len() == 1
        })
        .await;
        // A cancelled call has no outcome: the retry with its key runs.
        log.release();
        let retry = request(
            &http,
            "tools/call",
            json!({ "name": "slow_charge", "arguments": { "amount": 3, "idempotency_key": key } }),
        )
        .await;
        assert_eq!(retry["result"]["isError"], false, "{retry}");
        assert_eq!(retry["result"]["_meta"]["io.oncerpc/idempotency-status"], "new", "{retry}");
        assert_eq!(log.of("slow_charge", Some(&key)).len(), 2, "cancelled once, then run");
    }
    log.release();

    // The TypeScript v2 client, pinned to 2026-07-28.
    if let Some(ts) =
        mcp_clients::typescript_2026_script("mcp_upstream_offers_ts_client.mjs", &["2026", &gw.url("/mcp")])
    {
        let seen = mcp_clients::summary(ts).await;
        assert_ts_offers(&seen);
    }

    // The stateless revision's lists carry caching hints, as tools/list does.
    let listed = request(&http, "resources/list", json!({})).await;
    assert_eq!(listed["result"]["resultType"], "complete", "{listed}");
    assert_eq!(
        (listed["result"]["cacheScope"].as_str(), listed["result"]["ttlMs"].is_u64()),
        (Some("public"), true)
    );
}

fn assert_ts_offers(seen: &Value) {
    for capability in ["completions", "prompts", "resources", "tools"] {
        assert!(
            seen["capabilities"].as_array().unwrap().contains(&json!(capability)),
            "{capability}: {seen}"
        );
    }
    assert_eq!(seen["resources"], json!(["pay://statement", "pay://terms"]), "{seen}");
    assert_eq!(seen["templates"], json!(["pay://receipts/{receipt_id}"]), "{seen}");
    assert_eq!(seen["prompts"], json!(["dispute", "ledger_dispute"]), "{seen}");
    assert_eq!(seen["terms"], json!(["Payment is due within 30 days."]), "{seen}");
    assert_eq!(seen["receipt"], json!({ "receipt": "r-9", "amount": 5 }), "{seen}");
    assert_eq!(seen["prompt"], json!(["Write a dispute of charge ch-2, reason: duplicate."]), "{seen}");
    assert_eq!(seen["reason"], json!(["fraudulent"]), "{seen}");
    assert_eq!(
        (seen["unknown"].as_i64(), seen["no_prompt"].as_i64()),
        (Some(-32602), Some(-32602)),
        "{seen}"
    );
}

/// Bad input is refused with a clear JSON-RPC error, and an upstream that is down answers
/// reads and gets as it answers tool calls: `-32006`, naming it, within its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_and_a_down_upstream_answers_32006() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-upstream-offers-down");
    let log = Executions(dir.file("pay.log"));
    let upstream = HttpUpstream::start(&python, &log).await;
    let config = format!(
        "{store}\n[[mcp.upstreams]]\nname = \"pay\"\nurl = \"{url}\"\ntimeout_ms = 3000\n",
        store = sqlite(&dir),
        url = upstream.url,
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "pay").await;

    for (method, params, says) in [
        ("resources/read", json!({ "uri": "nope://x" }), "Resource not found"),
        ("resources/read", json!({ "uri": 5 }), "params.uri must be a string"),
        ("resources/read", json!({}), "params.uri must be a string"),
        ("prompts/get", json!({ "name": "nope" }), "Unknown prompt"),
        ("prompts/get", json!({ "name": "dispute", "arguments": [1] }), "arguments must be an object"),
        ("completion/complete", json!({ "ref": { "type": "ref/tool", "name": "charge" } }), "ref must be"),
        ("resources/list", json!({ "cursor": "x" }), "invalid cursor"),
    ] {
        let answer = request(&http, method, params.clone()).await;
        assert_eq!(answer["error"]["code"], -32602, "{method} {params}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{method} {params}: {message}");
    }
    let unknown = request(&http, "resources/read", json!({ "uri": "nope://x" })).await;
    assert_eq!(unknown["error"]["data"], json!({ "uri": "nope://x" }), "{unknown}");
    let subscribed = request(&http, "resources/subscribe", json!({ "uri": "pay://terms" })).await;
    assert_eq!(subscribed["error"]["code"], -32601, "no subscriptions: {subscribed}");

    // The upstream goes away: what it offered is still listed, and using it is -32006.
    drop(upstream);
    for (method, params) in [
        ("resources/read", json!({ "uri": "pay://terms" })),
        ("resources/read", json!({ "uri": "pay://receipts/r-1" })),
        ("prompts/get", json!({ "name": "dispute", "arguments": { "charge_id": "c" } })),
    ] {
        let answer = request(&http, method, params.clone()).await;
        assert_eq!(answer["error"]["code"], -32006, "{method} {params}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains("\"pay\""), "{answer}");
    }
}

/// The session's event stream (`GET /mcp` with its `Mcp-Session-Id`): refused for an unknown
/// session (`404`) and without `Accept: text/event-stream` (`406`); open, it does not hold a
/// graceful shutdown up — the server ends it and exits without waiting out its grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_event_stream_is_its_owners_and_ends_at_shutdown() {
    let dir = TempDir::new("mcp-session-stream");
    let config = format!("{}\n[limits]\nshutdown_grace_ms = 60000\n", sqlite(&dir));
    let mut gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    let initialize = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let json_headers =
        [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    let opened = http.post("/mcp", initialize.to_string(), &json_headers).await;
    let session = opened.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let stream = [("Mcp-Session-Id", session.as_str()), ("Accept", "text/event-stream")];

    let forged =
        http.get("/mcp", &[("Mcp-Session-Id", "no.such-session"), ("Accept", "text/event-stream")]).await;
    assert_eq!(forged.status, 404, "{}", forged.body);
    let no_accept = http.get("/mcp", &[("Mcp-Session-Id", session.as_str())]).await;
    assert_eq!(no_accept.status, 406, "{}", no_accept.body);

    let mut req = http.client.get(gw.url("/mcp"));
    for (k, v) in stream {
        req = req.header(k, v);
    }
    let mut open = req.send().await.expect("the stream opens");
    assert_eq!(open.status(), 200);
    assert_eq!(open.headers()["content-type"], "text/event-stream");
    let first = open.chunk().await.unwrap().expect("the opening comment");
    assert_eq!(&first[..], b": open\n\n");

    // Bounds beyond the grace guard against a hang; the log says whether the grace ran out.
    gw.sigterm();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(120), open.chunk()).await;
    assert!(matches!(ended, Ok(Ok(None)) | Ok(Err(_))), "the stream ended: {ended:?}");
    let (gw, exited) = tokio::task::spawn_blocking(move || {
        let status = gw.wait_exit(std::time::Duration::from_secs(120));
        (gw, status)
    })
    .await
    .unwrap();
    assert!(exited.success(), "a clean exit");
    let waited: Vec<String> = gw.log().into_iter().filter(|l| l.contains("shutdown grace over")).collect();
    assert!(waited.is_empty(), "the open stream held the shutdown for its grace: {waited:?}");
}
