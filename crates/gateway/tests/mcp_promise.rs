//! The promise through every MCP path, on the real `oncerpc serve` in front of the official
//! Python SDK's server (`tests/clients/mcp_upstream_server.py`): two tenants' same key are two
//! calls at an upstream that honours keys; the stateless revision reads a key from the same
//! headers as the session era and refuses the same conflicts; two upstreams never share one
//! tool name; a flood of an upstream's progress costs no memory and never hides a call's
//! answer; a stateless cancellation stops only what its own stream carries.
//!
//! What ran is read from the upstream's own log of executions, never from oncerpc's answers.
//! Outside CI a missing Python SDK skips a test with a printed reason; in CI it is a failure.

mod common;

use std::process::Command;
use std::time::Duration;

use common::mcp_clients;
use common::mcp_upstream::{Executions, HttpUpstream, free_port, wait_for, wait_up};
use common::process::{Gateway, Http, TempDir, unique};
use oncerpc_core::idempotency::upstream_key;
use serde_json::{Value, json};

const ACME: &str = "acme-promise-s3cr3t-0001";
const BETA: &str = "beta-promise-s3cr3t-0002";

fn sqlite(dir: &TempDir) -> String {
    format!("[store]\nurl = \"sqlite://{}\"\n", dir.file("once.db").display())
}

fn tenants() -> String {
    format!(
        "[[tenants]]\nname = \"acme\"\napi_keys = [\"{ACME}\"]\n[[tenants]]\nname = \"beta\"\napi_keys = [\"{BETA}\"]\n"
    )
}

/// `_meta` of a `2026-07-28` request, with `more` members.
fn meta(more: Value) -> Value {
    let mut m = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    m.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
    m
}

fn call(id: u64, tool: &str, arguments: Value, more_meta: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":tool,"arguments":arguments,"_meta":meta(more_meta)}})
}

/// POST a `2026-07-28` message to `/mcp` with its standard headers, `bearer` (if any) and
/// `extra` headers.
async fn post(gw: &Http, bearer: Option<&str>, body: &Value, extra: &[(&str, &str)]) -> common::Answer {
    let method = body["method"].as_str().unwrap().to_owned();
    let name = body["params"]["name"].as_str().unwrap_or_default().to_owned();
    let auth = bearer.map(|b| format!("Bearer {b}"));
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if !name.is_empty() {
        headers.push(("Mcp-Name", name.as_str()));
    }
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    headers.extend_from_slice(extra);
    gw.post("/mcp", body.to_string(), &headers).await
}

/// What the Python upstream answered: its text content, which it writes as JSON.
fn answered(result: &Value) -> Value {
    let text = result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text: {result}"));
    serde_json::from_str(text).expect("JSON text")
}

fn status(result: &Value) -> &str {
    result["_meta"]["io.oncerpc/idempotency-status"].as_str().unwrap_or("")
}

/// Finding 1: every tenant reaches an upstream with oncerpc's one set of credentials, so the
/// upstream must never see the client's own key. Tenant acme calls with `order-1`, tenant
/// beta with `order-1` and other arguments: an upstream that honours keys runs both, and
/// answers each its own — a retry of each gets its own stored result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_with_one_key_are_two_calls_at_an_upstream_that_honours_keys() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-promise-tenants");
    let log = Executions(dir.file("executions.log"));
    let upstream = HttpUpstream::start(&python, &log).await;
    let config = format!(
        "{store}{tenants}[[mcp.upstreams]]\nname = \"pay\"\nurl = \"{url}\"\ntools = [\"keyed_charge\"]\nkey_argument = \"idempotency_key\"\n",
        store = sqlite(&dir),
        tenants = tenants(),
        url = upstream.url
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_for_upstream(&http, ACME, "pay").await;

    let key = unique("order");
    let acme_args = json!({"account": "acme-account", "amount": 100});
    let beta_args = json!({"account": "beta-account", "amount": 7});
    let with_key = json!({ "io.oncerpc/idempotency-key": key });
    let acme =
        post(&http, Some(ACME), &call(1, "keyed_charge", acme_args.clone(), with_key.clone()), &[]).await;
    let beta =
        post(&http, Some(BETA), &call(2, "keyed_charge", beta_args.clone(), with_key.clone()), &[]).await;
    let (acme, beta) = (acme.json()["result"].clone(), beta.json()["result"].clone());
    assert_eq!(answered(&acme)["args"], acme_args, "{acme}");
    assert_eq!(answered(&beta)["args"], beta_args, "beta's own charge, not acme's result: {beta}");
    assert_eq!((status(&acme), status(&beta)), ("new", "new"));

    // What the upstream saw: two executions, each under its tenant's own key.
    let ran: Vec<Value> = log.lines().into_iter().filter(|l| l["tool"] == "keyed_charge").collect();
    assert_eq!(ran.len(), 2, "beta's charge ran: {ran:?}");
    let sent = |tenant: &str| upstream_key(tenant, "keyed_charge", &key, "keyed_charge");
    assert_eq!(ran[0]["key"], sent("acme"), "{ran:?}");
    assert_eq!(ran[1]["key"], sent("beta"), "{ran:?}");
    assert_ne!(ran[0]["key"], key.as_str(), "never the client's key");
    assert_eq!(ran[1]["account"], "beta-account");

    // Retries: each tenant gets its own stored result, and nothing runs again.
    let again = post(&http, Some(BETA), &call(3, "keyed_charge", beta_args, with_key), &[]).await;
    let again = again.json()["result"].clone();
    assert_eq!((status(&again), &answered(&again)["args"]["account"]), ("duplicate", &json!("beta-account")));
    assert_eq!(log.count("keyed_charge"), 2);
}

/// Wait until `/healthz` (as `bearer`) shows `upstream` connected with tools.
async fn wait_for_upstream(http: &Http, bearer: &str, upstream: &str) {
    let auth = format!("Bearer {bearer}");
    for _ in 0..600 {
        let health = http.get("/healthz", &[("Authorization", &auth)]).await.json();
        if health["mcp_upstreams"][upstream]["up"] == true && health["mcp_upstreams"][upstream]["tools"] != 0
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("upstream {upstream} did not connect");
}

/// Open a session-era (`2025-11-25`) session as ACME: its id.
async fn session(http: &Http) -> String {
    let auth = format!("Bearer {ACME}");
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25",
        "capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let opened = http.post("/mcp", init.to_string(), &headers).await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    let id = opened.header("mcp-session-id").expect("a session id").to_owned();
    let note = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    let mut with_session = headers.to_vec();
    with_session.push(("Mcp-Session-Id", &id));
    with_session.push(("MCP-Protocol-Version", "2025-11-25"));
    assert_eq!(http.post("/mcp", note.to_string(), &with_session).await.status, 202);
    id
}

/// A session-era `tools/call` of `counter.increment` as ACME with `headers`: its result.
async fn session_call(http: &Http, id: &str, arguments: Value, headers: &[(&str, &str)]) -> Value {
    let auth = format!("Bearer {ACME}");
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"counter_increment","arguments":arguments}});
    let mut all = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Mcp-Session-Id", id),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    all.extend_from_slice(headers);
    let answer = http.post("/mcp", body.to_string(), &all).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["result"].clone()
}

/// Finding 2: `2026-07-28` reads `Idempotency-Key` and `X-Idempotency-Key` as the session era
/// does — a retry keyed by a header runs once — and refuses a header that disagrees with the
/// argument, with the session era's very answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stateless_revision_reads_the_key_headers_as_the_session_era_does() {
    let dir = TempDir::new("mcp-promise-headers");
    let gw = Gateway::with_config(&dir, &format!("demo = true\n{}{}", sqlite(&dir), tenants()));
    let http = gw.http();
    let increment = |id, by: u64| call(id, "counter_increment", json!({ "by": by }), json!({}));

    for header in ["Idempotency-Key", "X-Idempotency-Key"] {
        let key = unique("retry");
        let first = post(&http, Some(ACME), &increment(1, 5), &[(header, &key)]).await;
        let again = post(&http, Some(ACME), &increment(2, 5), &[(header, &key)]).await;
        let (first, again) = (first.json()["result"].clone(), again.json()["result"].clone());
        assert_eq!((status(&first), status(&again)), ("new", "duplicate"), "{header}: {first} {again}");
        assert_eq!(first["_meta"]["io.oncerpc/idempotency-key"], key.as_str(), "{header}");
        assert_eq!(first["content"], again["content"], "{header}: the stored total, not a second increment");
    }
    let total = post(&http, Some(ACME), &call(9, "counter_get", json!({}), json!({})), &[]).await;
    assert_eq!(
        total.json()["result"]["structuredContent"]["total"],
        10,
        "two keys, two increments of 5: {}",
        total.body
    );

    // A header and an argument that disagree: refused in both eras alike, nothing runs.
    let conflict = json!({ "by": 1, "idempotency_key": "bbb-2" });
    let stateless = post(
        &http,
        Some(ACME),
        &call(3, "counter_increment", conflict.clone(), json!({})),
        &[("Idempotency-Key", "aaa-1")],
    )
    .await;
    let stateless = stateless.json()["result"].clone();
    let id = session(&http).await;
    let sessioned = session_call(&http, &id, conflict, &[("Idempotency-Key", "aaa-1")]).await;
    assert_eq!(stateless["isError"], true, "{stateless}");
    assert_eq!(stateless["structuredContent"]["code"], -32602, "{stateless}");
    assert_eq!(stateless["structuredContent"], sessioned["structuredContent"], "one answer in both eras");
    // Two key headers that disagree: refused before anything is read, in both eras.
    let two = [("Idempotency-Key", "aaa-1"), ("X-Idempotency-Key", "aaa-2")];
    let refused = post(&http, Some(ACME), &increment(4, 1), &two).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("X-Idempotency-Key and Idempotency-Key differ"), "{}", refused.body);
    let total = post(&http, Some(ACME), &call(9, "counter_get", json!({}), json!({})), &[]).await;
    assert_eq!(total.json()["result"]["structuredContent"]["total"], 10, "the refused calls ran nothing");
}

/// Finding 3: two upstreams that could export one name are a config error at start; a clash
/// the config cannot show (other prefixes, one name) is withheld when it happens: the tool stays
/// with the upstream that offered it first, and a call never reaches the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_upstreams_never_share_one_tool_name() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-promise-shadow");
    let (mail_log, pay_log) = (Executions(dir.file("mail.log")), Executions(dir.file("pay.log")));
    let mail = HttpUpstream::start(&python, &mail_log).await;
    let pay_port = free_port();
    let pay_url = format!("http://127.0.0.1:{pay_port}/mcp");
    let entry = |name: &str, url: &str, extra: &str| {
        format!("[[mcp.upstreams]]\nname = \"{name}\"\nurl = \"{url}\"\ntimeout_ms = 10000\n{extra}\n")
    };

    // One prefix (none), every tool of both: refused by check-config and by serve.
    let clash = format!("{}{}{}", sqlite(&dir), entry("mail", &mail.url, ""), entry("pay", &pay_url, ""));
    let path = dir.file("clash.toml");
    std::fs::write(&path, &clash).unwrap();
    for command in ["check-config", "serve"] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_oncerpc"));
        match command {
            "serve" => cmd.args(["serve", "--listen", "127.0.0.1:0", "--config"]),
            _ => cmd.arg("check-config"),
        };
        let out = cmd.arg(&path).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command}: {said}");
        assert!(said.contains("mcp.upstreams.mail and mcp.upstreams.pay"), "{command}: {said}");
    }

    // `mail` exports `slow_charge` itself; `pay` exports its `charge` as `slow_` + `charge`.
    let config = format!(
        "{}{}{}",
        sqlite(&dir),
        entry("mail", &mail.url, "tools = [\"slow_charge\"]"),
        entry("pay", &pay_url, "prefix = \"slow_\"\ntools = [\"charge\"]"),
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "mail").await;
    let _pay = HttpUpstream::start_on(&python, &pay_log, pay_port).await;
    let mut health = Value::Null;
    for _ in 0..600 {
        health = http.get("/healthz", &[]).await.json();
        if health["mcp_upstreams"]["pay"]["up"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(health["mcp_upstreams"]["pay"]["up"], true, "{health}");
    assert_eq!(
        health["mcp_upstreams"]["pay"]["withheld"],
        json!([{ "tool": "slow_charge", "offered_by": "mail" }]),
        "{health}"
    );
    assert_eq!(health["mcp_upstreams"]["pay"]["tools"], 0, "{health}");
    let listed = post(
        &http,
        None,
        &json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":meta(json!({}))}}),
        &[],
    )
    .await;
    let names: Vec<Value> =
        listed.json()["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].clone()).collect();
    assert_eq!(names.iter().filter(|n| *n == "slow_charge").count(), 1, "listed once: {names:?}");
    let key = unique("shadow");
    let answer = post(
        &http,
        None,
        &call(2, "slow_charge", json!({"amount": 3}), json!({ "io.oncerpc/idempotency-key": key })),
        &[],
    )
    .await;
    assert_eq!(answer.json()["result"]["isError"], false, "{}", answer.body);
    assert_eq!(
        mail_log.of("slow_charge", Some(&key)).len(),
        1,
        "the call reached the upstream that offered it first"
    );
    assert_eq!(pay_log.count("charge"), 0, "and never the other one, with the arguments and the key");
    let logged = gw.log().join("\n");
    assert!(logged.contains("MCP upstream tool withheld"), "logged");
}

/// The gateway's resident memory (`VmRSS`), in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The events of a `text/event-stream` body: each `data:` as JSON.
fn events(body: &str) -> Vec<Value> {
    body.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect()
}

/// Finding 4: an upstream's progress flood to a client that does not read costs the gateway
/// no memory (notifications are dropped, a message is cut at 1 KiB); a client that reads gets
/// the call's answer as the last event, however long the call streams (here longer than the
/// connection's idle timeout, which closed such a stream before its answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_flood_costs_no_memory_and_never_hides_the_answer() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-promise-flood");
    let log = Executions(dir.file("executions.log"));
    // Over stdio, where an upstream may write any number of lines (an HTTP upstream's whole
    // event stream is cut at 16 MiB).
    let config = format!(
        "{}[limits]\nheader_timeout_ms = 1000\n[[mcp.upstreams]]\nname = \"pay\"\ncommand = \"{python}\"\nargs = [\"{script}\", \"{log}\", \"stdio\"]\ntools = [\"flood\"]\ntimeout_ms = 20000\n",
        sqlite(&dir),
        script = mcp_clients::client_script("mcp_upstream_server.py").display(),
        log = log.0.display(),
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "pay").await;

    // A reader, for three times the idle timeout: every event, then the answer, last.
    let key = unique("flood-read");
    let arguments = json!({"count": 20, "size": 100, "pause_ms": 150});
    let more = json!({ "progressToken": "p-1", "io.oncerpc/idempotency-key": key });
    let answer = post(&http, None, &call(1, "flood", arguments, more), &[]).await;
    assert_eq!(answer.header("content-type"), Some("text/event-stream"), "{}", answer.body);
    let events = events(&answer.body);
    let last = events.last().expect("events");
    assert_eq!(
        (last["id"].clone(), answered(&last["result"])["flooded"].clone()),
        (json!(1), json!(20)),
        "the answer came, last: {last}"
    );
    let progress = events.iter().filter(|e| e["method"] == "notifications/progress").count();
    assert_eq!(progress, 20, "a reader keeping up gets every notification");

    // A client that sends the call and never reads: 1,500 × 64 KiB of progress.
    let before = rss_kib(gw.pid());
    let key = unique("flood-stall");
    let body = call(
        2,
        "flood",
        json!({"count": 1500, "size": 65536, "pause_ms": 0}),
        json!({ "progressToken": "p-2", "io.oncerpc/idempotency-key": key }),
    )
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: flood\r\nContent-Length: {len}\r\n\r\n{body}",
        host = gw.addr,
        len = body.len()
    );
    let mut stalled = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stalled, request.as_bytes()).await.unwrap();
    wait_for("the flood to end upstream", || log.count("flood_done") == 2).await;
    let grown_mib = rss_kib(gw.pid()).saturating_sub(before) / 1024;
    assert!(
        grown_mib < 32,
        "94 MiB of progress to a client that does not read grew the gateway by {grown_mib} MiB"
    );
    // The command's outcome was stored all the same: its retry is a duplicate (once the
    // answer the upstream has sent reached the gateway: until then, `processing`, as a
    // client that retries early is told).
    let mut retry;
    let mut rounds = 0;
    loop {
        retry = post(
            &http,
            None,
            &call(
                3,
                "flood",
                json!({"count": 1500, "size": 65536, "pause_ms": 0}),
                json!({ "io.oncerpc/idempotency-key": key }),
            ),
            &[],
        )
        .await;
        rounds += 1;
        if status(&retry.json()["result"]) != "processing" || rounds == 100 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status(&retry.json()["result"]), "duplicate", "{}", retry.body);
    assert_eq!(log.lines().iter().filter(|l| l["tool"] == "flood").count(), 2, "ran once per key");
    drop(stalled);
}

/// Finding 5: over HTTP a stateless request has no session, so a cancellation POSTed on
/// another stream must not stop it: a second client naming the first one's request id stops
/// nothing, and the first gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_cancellation_from_another_client_stops_nothing() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-promise-cancel");
    let log = Executions(dir.file("executions.log"));
    let upstream = HttpUpstream::start(&python, &log).await;
    let config = format!(
        "{}[[mcp.upstreams]]\nname = \"pay\"\nurl = \"{}\"\ntools = [\"slow_charge\"]\ntimeout_ms = 30000\n[[mcp.upstreams.tool]]\nname = \"slow_charge\"\nkind = \"query\"\n",
        sqlite(&dir),
        upstream.url
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "pay").await;
    log.hold();
    let first = {
        let http = http.clone();
        tokio::spawn(async move {
            post(&http, None, &call(7, "slow_charge", json!({"amount": 2}), json!({})), &[]).await
        })
    };
    wait_for("the query to reach the upstream", || log.count("slow_charge") == 1).await;
    let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"_meta":meta(json!({}))}});
    let other = post(&http, None, &cancel, &[]).await;
    assert_eq!(other.status, 202, "accepted, as every notification: {}", other.body);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!first.is_finished(), "the first client's query still runs");
    log.release();
    let answer = first.await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answered(&answer.json()["result"])["charged"], 2, "{}", answer.body);
    assert_eq!(log.count("slow_charge_cancelled"), 0, "the upstream was told nothing");

    // The caller's own way to stop its query: closing the request's connection.
    log.hold();
    let body = call(8, "slow_charge", json!({"amount": 3}), json!({}));
    let gave_up = tokio::time::timeout(Duration::from_secs(2), post(&http, None, &body, &[])).await;
    assert!(gave_up.is_err(), "still held: the client gives up and closes");
    wait_for("the upstream to be told", || log.count("slow_charge_cancelled") == 1).await;
    log.release();
}

/// A stored failure a model can get past (issue "MCP as agents meet it", item 3): command tools
/// list `force_retry`; a failure replayed to a retry with the same key says that it is one and
/// how to run the action again; with `force_retry: true` it runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_failure_says_so_and_force_retry_runs_it_again() {
    let dir = TempDir::new("mcp-promise-replay");
    let gw = Gateway::with_config(&dir, &format!("demo = true\n{}", sqlite(&dir)));
    let http = gw.http();
    let listed = post(
        &http,
        None,
        &json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":meta(json!({}))}}),
        &[],
    )
    .await;
    let tools = listed.json()["result"]["tools"].as_array().unwrap().clone();
    let flaky = tools.iter().find(|t| t["name"] == "demo_flaky").expect("demo.flaky is a tool");
    let force = &flaky["inputSchema"]["properties"]["force_retry"];
    assert_eq!(force["type"], "boolean", "{flaky}");
    assert!(force["description"].as_str().unwrap().contains("FAILED"), "{force}");
    let key_text = flaky["inputSchema"]["properties"]["idempotency_key"]["description"].as_str().unwrap();
    assert!(key_text.contains("force_retry: true"), "{key_text}");

    let key = unique("flaky");
    let args = |force: bool| json!({"fail_times": 1, "idempotency_key": key, "force_retry": force});
    let first =
        post(&http, None, &call(2, "demo_flaky", args(false), json!({})), &[]).await.json()["result"].clone();
    let again =
        post(&http, None, &call(3, "demo_flaky", args(false), json!({})), &[]).await.json()["result"].clone();
    assert_eq!((first["isError"].as_bool(), status(&first)), (Some(true), "new"), "{first}");
    assert_eq!((again["isError"].as_bool(), status(&again)), (Some(true), "duplicate"), "{again}");
    // The stored failure itself, with the hint beside it (some frameworks show a model the
    // structuredContent only).
    let mut stored = again["structuredContent"].clone();
    let hint = stored.as_object_mut().unwrap().remove("hint").expect("a hint");
    assert_eq!(first["structuredContent"], stored, "the stored failure itself");
    assert!(hint.as_str().unwrap().contains("force_retry: true"), "{hint}");
    assert!(first["structuredContent"].get("hint").is_none(), "a first failure is not a stored one");
    let text = again["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with(first["content"][0]["text"].as_str().unwrap()), "{text}");
    assert!(
        text.contains(&format!("stored outcome of an earlier attempt with idempotency_key \"{key}\"")),
        "{text}"
    );
    assert!(text.contains("force_retry: true"), "{text}");
    let forced =
        post(&http, None, &call(4, "demo_flaky", args(true), json!({})), &[]).await.json()["result"].clone();
    assert_eq!(
        (forced["isError"].as_bool(), status(&forced)),
        (Some(false), "new"),
        "it ran again: {forced}"
    );
}
