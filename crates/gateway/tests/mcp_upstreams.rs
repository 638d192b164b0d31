//! oncerpc in front of an MCP server it did not write (SPEC §16b): an upstream made with the
//! official Python SDK's own server classes (`tests/clients/mcp_upstream_server.py`, FastMCP),
//! over Streamable HTTP and over stdio (started and restarted by oncerpc), its tools
//! re-exported on the real `oncerpc serve`'s `/mcp` and called by the Python SDK's client
//! and by plain `2026-07-28` requests. What ran is read from the upstream's own log of
//! executions, never from oncerpc's answers.
//!
//! Outside CI a missing Python SDK skips a test with a printed reason; in CI it is a failure.

mod common;

use std::process::Command;
use std::time::Duration;

use common::mcp_clients;
use common::mcp_upstream::{Executions, HttpUpstream, wait_for, wait_up};
use common::process::{Gateway, Http, TempDir, unique};
use oncerpc_core::idempotency::upstream_key;
use serde_json::{Value, json};

fn sqlite(dir: &TempDir) -> String {
    format!("demo = false\n[store]\nurl = \"sqlite://{}\"\n", dir.file("once.db").display())
}

/// A config with the Python upstream over stdio as `pay` (started by oncerpc), logging its
/// executions to `log`; `extra`: more keys of its `[[mcp.upstreams]]` entry.
fn stdio_config(dir: &TempDir, python: &str, log: &Executions, extra: &str) -> String {
    format!(
        "{store}\n[[mcp.upstreams]]\nname = \"pay\"\ncommand = \"{python}\"\nargs = [\"{script}\", \"{log}\", \"stdio\"]\n{extra}",
        store = sqlite(dir),
        script = mcp_clients::client_script("mcp_upstream_server.py").display(),
        log = log.0.display(),
    )
}

use common::mcp2026::call;

/// POST one `2026-07-28` request to `/mcp`; its `result`.
async fn post(gw: &Http, body: &Value) -> Value {
    let answer = common::mcp2026::post(gw, body, &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["result"].clone()
}

/// The tool names oncerpc's `tools/list` gives now (`2026-07-28`, first page).
async fn tool_names(gw: &Http) -> Vec<String> {
    let body = json!({"jsonrpc":"2.0","id":0,"method":"tools/list","params":{"_meta":{
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let result = post(gw, &body).await;
    let tools = result["tools"].as_array().unwrap();
    // Re-exported tools too are named and described as model APIs take them.
    common::tool_schemas::assert_model_ready(tools);
    tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

/// A tool result's text content, which the Python upstream writes as JSON.
fn text_json(text: &Value) -> Value {
    serde_json::from_str(text.as_str().unwrap_or_else(|| panic!("no text: {text}"))).expect("JSON text")
}

fn status(result: &Value) -> &str {
    result["_meta"]["io.oncerpc/idempotency-status"].as_str().unwrap_or("")
}

/// The Python SDK's client (and the TypeScript SDK's), through oncerpc, against the Python
/// SDK's server over Streamable HTTP: a command retried with one key runs once on the upstream, with the key in `_meta`;
/// the same key with other arguments is refused and runs nothing; 50 identical calls at once
/// run once; an `isError` result is an outcome, replayed; a read-only tool passes through
/// without a record; `/healthz` and `/metrics` show the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_through_oncerpc_runs_an_http_upstreams_command_once_per_key() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-upstream-http");
    let log = Executions(dir.file("executions.log"));
    let upstream = HttpUpstream::start(&python, &log).await;
    let config = format!(
        "{store}\n[[mcp.upstreams]]\nname = \"pay\"\nurl = \"{url}\"\ntools = [\"charge\", \"balance\", \"declined\"]\ntimeout_ms = 10000\n",
        store = sqlite(&dir),
        url = upstream.url
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "pay").await;

    let key = unique("charge");
    let mut client = Command::new(&python);
    client.arg(mcp_clients::client_script("mcp_upstream_client.py")).args([&gw.url("/mcp"), &key]);
    let seen = mcp_clients::summary(client).await;
    assert_eq!(seen["tools"], json!(["balance", "charge", "declined"]), "the allowlist: {seen}");
    assert_eq!(seen["charge_key_property"], true, "{seen}");
    assert_eq!(seen["charge_description"], "Charge a card (counts every execution).", "{seen}");
    assert_eq!(seen["balance_read_only"], true, "{seen}");
    assert_eq!(
        (seen["first"]["status"].as_str(), seen["again"]["status"].as_str()),
        (Some("new"), Some("duplicate"))
    );
    assert_eq!(seen["first"]["text"], seen["again"]["text"], "the stored result, as the upstream gave it");
    assert_eq!(seen["other"]["is_error"], true, "{seen}");
    assert_eq!(seen["other"]["structured"]["code"], -32002, "{seen}");
    let ran = log.of("charge", Some(&key));
    assert_eq!(ran.len(), 1, "the upstream ran the charge once: {ran:?}");
    assert_eq!(ran[0]["amount"], 5, "the first arguments ran, the reused key's did not");
    assert_eq!(ran[0]["key_argument"], Value::Null, "no key_argument configured: the key only in _meta");

    let many = log.of("charge", Some(&format!("{key}-many")));
    assert_eq!(many.len(), 1, "50 identical calls at once ran once: {many:?}");
    for answer in seen["many"].as_array().unwrap() {
        let fine = answer["is_error"] == false || answer["structured"]["code"] == -32001;
        assert!(fine, "each of the 50 has the result or 'in progress': {answer}");
    }
    assert!(seen["many"].as_array().unwrap().iter().any(|a| a["is_error"] == false));

    // The TypeScript SDK's client, the same way.
    let ts_key = unique("ts");
    if let Some(ts) =
        mcp_clients::typescript_script("mcp_upstream_ts_client.mjs", &[&gw.url("/mcp"), &ts_key])
    {
        let seen = mcp_clients::summary(ts).await;
        assert_eq!(
            (seen["first"]["status"].as_str(), seen["again"]["status"].as_str()),
            (Some("new"), Some("duplicate")),
            "{seen}"
        );
        assert_eq!(seen["first"]["text"], seen["again"]["text"], "{seen}");
        assert_eq!(seen["other"]["structured"]["code"], -32002, "{seen}");
        assert_eq!(log.of("charge", Some(&ts_key)).len(), 1, "the TypeScript client's charge ran once");
    }

    // The read-only tool: passed through each time, no key, no record.
    assert_eq!(log.count("balance"), 2, "a query runs every time");
    for b in seen["balance"].as_array().unwrap() {
        assert_eq!((b["is_error"].as_bool(), b["status"].as_str()), (Some(false), None), "{b}");
    }

    // The upstream's isError result is the command's outcome: stored and replayed.
    let declined_key = unique("declined");
    let first = post(&http, &call(1, "declined", json!({"amount": 3}), &declined_key)).await;
    let again = post(&http, &call(2, "declined", json!({"amount": 3}), &declined_key)).await;
    assert_eq!((first["isError"].as_bool(), status(&first)), (Some(true), "new"), "{first}");
    assert_eq!((again["isError"].as_bool(), status(&again)), (Some(true), "duplicate"), "{again}");
    assert_eq!(first["content"], again["content"]);
    assert_eq!(first["content"][0]["text"], "card declined", "the upstream's own content");
    assert_eq!(log.of("declined", Some(&declined_key)).len(), 1);

    let metrics = http.get("/metrics", &[]).await.body;
    assert!(metrics.contains("oncerpc_mcp_upstream_up{upstream=\"pay\"} 1"), "{metrics}");
    assert!(
        metrics.contains("oncerpc_mcp_upstream_calls_total{outcome=\"ok\",upstream=\"pay\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("oncerpc_mcp_upstream_calls_total{outcome=\"tool_error\",upstream=\"pay\"} 1"),
        "{metrics}"
    );
}

/// An upstream tool works as a native one: its server's progress notifications reach the
/// client that made the call (under the client's token; the upstream gets one of oncerpc's);
/// `[[mcp.upstreams.tool]] derive_key` makes identical keyless calls one execution; its
/// `x-mcp-header` arguments must come as `Mcp-Param-*` headers over `2026-07-28` HTTP; a
/// task-augmented call of its command is a task (an event) that calls the upstream once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_tool_forwards_progress_derives_keys_checks_header_arguments_and_runs_as_a_task() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-upstream-extras");
    let log = Executions(dir.file("executions.log"));
    let upstream = HttpUpstream::start(&python, &log).await;
    let config = format!(
        "{store}\n[[mcp.upstreams]]\nname = \"pay\"\nurl = \"{url}\"\ntools = [\"charge\", \"ship\"]\ntimeout_ms = 10000\n\
         [[mcp.upstreams.tool]]\nname = \"charge\"\nderive_key = {{ from = \"arguments\", window_secs = 600 }}\n",
        store = sqlite(&dir),
        url = upstream.url
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "pay").await;

    let key = unique("ship");
    let mut client = Command::new(&python);
    client.arg(mcp_clients::client_script("mcp_upstream_client.py")).args([&gw.url("/mcp"), &key, "extras"]);
    let seen = mcp_clients::summary(client).await;
    assert_eq!(text_json(&seen["ship"]["text"])["shipped"], "o-1", "{seen}");
    assert_eq!(
        seen["progress"],
        json!([[1.0, 3.0, "packed"], [2.0, 3.0, "labelled"], [3.0, 3.0, "handed over"]]),
        "the upstream's own progress, forwarded as it came: {seen}"
    );
    let shipped = log.of("ship", Some(&key));
    assert_eq!(shipped.len(), 1, "{shipped:?}");
    assert!(shipped[0]["progress_token"].is_number(), "oncerpc's own token went upstream: {shipped:?}");

    // derive_key: the same arguments and no key, twice: one execution, the second a duplicate.
    let unkeyed = seen["unkeyed"].as_array().unwrap();
    let statuses = (unkeyed[0]["status"].as_str(), unkeyed[1]["status"].as_str());
    assert_eq!(statuses, (Some("new"), Some("duplicate")), "{seen}");
    assert_eq!(unkeyed[0]["text"], unkeyed[1]["text"], "the stored result: {seen}");
    let charged = log.lines().into_iter().filter(|l| l["tool"] == "charge" && l["amount"] == 11).count();
    assert_eq!(charged, 1, "identical keyless calls ran once");

    // `x-mcp-header`: kept in the listed schema, and its header is required and checked.
    let body = call(3, "ship", json!({"order": "o-2", "region": "eu"}), &unique("hdr"));
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "ship"),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let missing = http.post("/mcp", body.to_string(), &headers).await;
    assert_eq!(
        (missing.status, missing.json()["error"]["code"].as_i64()),
        (400, Some(-32020)),
        "{}",
        missing.body
    );
    let mut wrong = headers.to_vec();
    wrong.push(("Mcp-Param-Region", "us"));
    let wrong = http.post("/mcp", body.to_string(), &wrong).await;
    assert_eq!((wrong.status, wrong.json()["error"]["code"].as_i64()), (400, Some(-32020)), "{}", wrong.body);
    let mut right = headers.to_vec();
    right.push(("Mcp-Param-Region", "eu"));
    let right = http.post("/mcp", body.to_string(), &right).await;
    assert_eq!(right.status, 200, "{}", right.body);
    assert_eq!(text_json(&right.json()["result"]["content"][0]["text"])["shipped"], "o-2", "{}", right.body);
    let o2 = log.lines().into_iter().filter(|l| l["tool"] == "ship" && l["order"] == "o-2").count();
    assert_eq!(o2, 1, "the refused calls ran nothing");

    // Tasks: a task-augmented call of the upstream's command is an event that calls it once;
    // the same key is the same task.
    let task_key = unique("task");
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "extensions": { "io.modelcontextprotocol/tasks": {} } },
    });
    let mut body = call(4, "charge", json!({"amount": 13, "card": "visa"}), &task_key);
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        meta["io.modelcontextprotocol/clientCapabilities"].clone();
    let created = post(&http, &body).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    assert_eq!(post(&http, &body).await["taskId"], id.as_str(), "the same key, the same task");
    let get = json!({"jsonrpc":"2.0","id":5,"method":"tasks/get","params":{"taskId": id, "_meta": meta}});
    let mut done = post(&http, &get).await;
    for _ in 0..600 {
        if done["status"] != "working" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        done = post(&http, &get).await;
    }
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"].as_str().map(|t| text_json(&json!(t))["charged"].clone()),
        Some(json!(13)),
        "the upstream's result: {done}"
    );
    assert_eq!(post(&http, &body).await["status"], "completed");
    assert_eq!(log.of("charge", Some(&task_key)).len(), 1, "the task called the upstream once");
}

/// A stdio upstream started by oncerpc: the key goes in `_meta` and in the configured
/// `key_argument`; a tool it adds later (`notifications/tools/list_changed`) is offered. Killed with `kill -9` while a call is in flight, the caller gets
/// `-32006` at once (no hang), oncerpc starts it again, and the retry with the same key runs
/// (the failure was not stored) once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstream_killed_mid_call_gives_32006_and_the_retry_runs_once_after_its_restart() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-upstream-stdio");
    let log = Executions(dir.file("executions.log"));
    let config = stdio_config(
        &dir,
        &python,
        &log,
        "prefix = \"pay.\"\nkey_argument = \"idempotency_key\"\ntimeout_ms = 20000\n",
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "pay").await;

    let key = unique("stdio");
    let first = post(&http, &call(1, "pay_charge", json!({"amount": 4, "card": "visa"}), &key)).await;
    let again = post(&http, &call(2, "pay_charge", json!({"amount": 4, "card": "visa"}), &key)).await;
    assert_eq!((status(&first), status(&again)), ("new", "duplicate"), "{first} {again}");
    let ran = log.of("charge", Some(&key));
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(ran[0]["key_argument"], ran[0]["key"], "the key in the upstream's own argument too");
    assert_eq!(
        ran[0]["key"],
        upstream_key("default", "pay.charge", &key, "charge"),
        "the tenant's key, not the client's"
    );

    // The upstream adds a tool and says so: oncerpc lists its tools again and offers it.
    let unlocked = post(&http, &call(9, "pay_unlock_refund", json!({}), &unique("unlock"))).await;
    assert_eq!(unlocked["isError"], false, "{unlocked}");
    let mut names = Vec::new();
    for _ in 0..200 {
        names = tool_names(&http).await;
        if names.iter().any(|n| n == "pay_refund") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(names.iter().any(|n| n == "pay_refund"), "list_changed followed: {names:?}");

    // Killed mid-call.
    let slow_key = unique("slow");
    log.hold();
    let starts = log.starts();
    let pending = {
        let http = http.clone();
        let body = call(3, "pay_slow_charge", json!({"amount": 8}), &slow_key);
        tokio::spawn(async move { post(&http, &body).await })
    };
    wait_for("the slow call to reach the upstream", || log.of("slow_charge", Some(&slow_key)).len() == 1)
        .await;
    let pid = log.last_pid().expect("the upstream's pid");
    assert_eq!(unsafe { libc_kill(pid, 9) }, 0, "kill -9 the upstream");
    let failed = tokio::time::timeout(Duration::from_secs(20), pending).await.expect("no hang").unwrap();
    assert_eq!(failed["isError"], true, "{failed}");
    assert_eq!(failed["structuredContent"]["code"], -32006, "{failed}");
    let message = failed["structuredContent"]["message"].as_str().unwrap();
    assert!(message.contains("pay"), "the message names the upstream: {message}");

    // Restarted by oncerpc; the retry runs (nothing was stored), once.
    log.release();
    wait_for("oncerpc to start the upstream again", || log.starts() > starts).await;
    wait_up(&http, "pay").await;
    let mut retried = Value::Null;
    for _ in 0..100 {
        retried = post(&http, &call(4, "pay_slow_charge", json!({"amount": 8}), &slow_key)).await;
        // Until the supervisor has the new connection, a call is -32006 and not stored.
        if retried["structuredContent"]["code"] != -32006 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!((retried["isError"].as_bool(), status(&retried)), (Some(false), "new"), "{retried}");
    let again = post(&http, &call(5, "pay_slow_charge", json!({"amount": 8}), &slow_key)).await;
    assert_eq!(status(&again), "duplicate", "{again}");
    let ran = log.of("slow_charge", Some(&slow_key));
    assert_eq!(ran.len(), 2, "once before the kill, once after the restart: {ran:?}");

    // The same as a task: the upstream killed under it, the task ends with the upstream's
    // failure, which is not stored; the same call again, once the upstream is back, is a new
    // run of the same task, which completes.
    let task_key = unique("slow-task");
    let tasks = json!({ "extensions": { "io.modelcontextprotocol/tasks": {} } });
    let mut body = call(6, "pay_slow_charge", json!({"amount": 9}), &task_key);
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = tasks.clone();
    log.hold();
    let starts = log.starts();
    let created = post(&http, &body).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    wait_for("the task's call to reach the upstream", || log.of("slow_charge", Some(&task_key)).len() == 1)
        .await;
    let pid = log.last_pid().expect("the upstream's pid");
    assert_eq!(unsafe { libc_kill(pid, 9) }, 0, "kill -9 the upstream");
    let meta = json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": tasks });
    let get = json!({"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId": id, "_meta": meta}});
    let settled = |http: Http, get: Value| async move {
        for _ in 0..400 {
            let task = post(&http, &get).await;
            if task["status"] != "working" {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the task did not settle");
    };
    let ended = settled(http.clone(), get.clone()).await;
    assert_eq!(ended["result"]["structuredContent"]["code"], -32006, "the upstream's failure: {ended}");
    log.release();
    wait_for("oncerpc to start the upstream again", || log.starts() > starts).await;
    wait_up(&http, "pay").await;
    let mut again = Value::Null;
    for _ in 0..100 {
        again = post(&http, &body).await;
        assert_eq!(again["taskId"], id.as_str(), "the same task: {again}");
        let done = settled(http.clone(), get.clone()).await;
        if done["result"]["isError"] == false {
            again = done;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(again["status"], "completed", "{again}");
    assert_eq!(again["result"]["isError"], false, "{again}");
    let ran = log.of("slow_charge", Some(&task_key));
    assert_eq!(ran.len(), 2, "once under the kill, once again after the restart: {ran:?}");
}

/// `kill -9` of oncerpc after it stored the outcome: restarted, the retry gets the stored
/// result and the upstream still counts one. Killed while the upstream call is in flight: the
/// retry (after the dead owner's lease) runs it again with the same `_meta` key — the window
/// the upstream's own key must cover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oncerpc_killed_after_storing_replays_and_killed_in_flight_retries_with_the_same_key() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-upstream-crash");
    let log = Executions(dir.file("executions.log"));
    let upstream = HttpUpstream::start(&python, &log).await;
    let config = format!(
        "{store}lease_ms = 4000\n\n[[mcp.upstreams]]\nname = \"pay\"\nurl = \"{url}\"\ntimeout_ms = 2000\n",
        store = sqlite(&dir),
        url = upstream.url
    );
    let mut gw = Gateway::with_config(&dir, &config);
    wait_up(&gw.http(), "pay").await;
    let key = unique("crash");
    let body = call(1, "charge", json!({"amount": 6, "card": "visa"}), &key);
    let first = post(&gw.http(), &body).await;
    assert_eq!(status(&first), "new", "{first}");
    gw.kill9();
    let mut gw = Gateway::with_config(&dir, &config);
    wait_up(&gw.http(), "pay").await;
    let retry = post(&gw.http(), &body).await;
    assert_eq!(status(&retry), "duplicate", "{retry}");
    assert_eq!(retry["content"], first["content"], "the stored result");
    assert_eq!(log.of("charge", Some(&key)).len(), 1, "the upstream still counts one");

    // In flight.
    let slow_key = unique("inflight");
    log.hold();
    let pending = {
        let http = gw.http();
        let body = call(2, "slow_charge", json!({"amount": 1}), &slow_key);
        tokio::spawn(async move { post(&http, &body).await })
    };
    wait_for("the slow call to reach the upstream", || log.of("slow_charge", Some(&slow_key)).len() == 1)
        .await;
    gw.kill9();
    pending.abort();
    log.release();
    let gw = Gateway::with_config(&dir, &config);
    wait_up(&gw.http(), "pay").await;
    let body = call(3, "slow_charge", json!({"amount": 1}), &slow_key);
    let mut retried = Value::Null;
    for _ in 0..200 {
        retried = post(&gw.http(), &body).await;
        // The dead owner's record is 'in progress' until its lease ends.
        if retried["structuredContent"]["code"] != -32001 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!((retried["isError"].as_bool(), status(&retried)), (Some(false), "new"), "{retried}");
    let ran = log.of("slow_charge", Some(&slow_key));
    assert_eq!(ran.len(), 2, "run again after the crash, with the same _meta key: {ran:?}");
}

/// A flow step may call an upstream's tool (`mcp = { upstream, tool }`): its output is the
/// tool's result (its text parsed as JSON here), the step gets the step key in `_meta`, and the
/// flow's key makes a retry a duplicate that calls nothing. A step naming an upstream that is
/// not configured is a config error; `check-config` lists what the upstream would export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_step_calls_an_upstream_tool_once_per_key() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-upstream-step");
    let log = Executions(dir.file("executions.log"));
    let upstream = HttpUpstream::start(&python, &log).await;
    let methods = "[[methods]]\nname = \"checkout\"\nkind = \"command\"\n  [[methods.steps]]\n  name = \"pay\"\n  mcp = { upstream = \"pay\", tool = \"charge\" }\n";
    let config = format!(
        "{store}\n[[mcp.upstreams]]\nname = \"pay\"\nurl = \"{url}\"\ntools = [\"balance\"]\n\n{methods}",
        store = sqlite(&dir),
        url = upstream.url
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "pay").await;
    let key = unique("flow");
    let body = json!({"jsonrpc":"2.0","id":1,"method":"checkout","params":{"amount":2,"card":"visa","idempotency_key":key}});
    let first = http.rpc(body.to_string(), &[]).await;
    let again = http.rpc(body.to_string(), &[]).await;
    assert_eq!(first.json()["result"]["charged"], 2, "the tool's text as JSON: {}", first.body);
    assert_eq!(first.header("x-idempotency-status"), Some("new"));
    assert_eq!(again.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(first.json()["result"], again.json()["result"]);
    let ran = log.count("charge");
    assert_eq!(ran, 1, "the step ran once");
    let step_key = log.lines().into_iter().find(|l| l["tool"] == "charge").unwrap()["key"].clone();
    let step_key = step_key.as_str().expect("the step key in _meta");
    assert!(step_key.len() == 64 && step_key != key, "a step key, not the client's: {step_key}");

    // check-config connects once and lists what the upstream would export (the allowlist).
    let good = dir.file("good.toml");
    std::fs::write(&good, &config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .args(["check-config", &good.display().to_string()])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{listed}");
    assert!(listed.contains("mcp upstream pay url="), "{listed}");
    let tools: Vec<&str> = listed.lines().filter(|l| l.trim_start().starts_with("tool ")).collect();
    assert_eq!(tools.len(), 1, "{listed}");
    assert!(tools[0].contains("balance (query)"), "{listed}");

    let bad = config.replace("upstream = \"pay\", tool", "upstream = \"nope\", tool");
    let path = dir.file("bad.toml");
    std::fs::write(&path, bad).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .args(["check-config", &path.display().to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("\"nope\" is not in [[mcp.upstreams]]"), "{text}");
}

/// An upstream that answers garbage (not MCP, not JSON) is contained: oncerpc starts and
/// serves, `/healthz` stays `200` and shows it down, `/metrics` counts the failed connections,
/// and it keeps trying by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_upstream_is_shown_down_and_contained() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let garbage = tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\nnot json!")
                    .await;
            });
        }
    });
    let dir = TempDir::new("mcp-upstream-garbage");
    let config = format!(
        "{store}\n[[mcp.upstreams]]\nname = \"junk\"\nurl = \"http://{addr}/mcp\"\ntimeout_ms = 2000\n",
        store = sqlite(&dir)
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    let mut failed = 0;
    for _ in 0..200 {
        let metrics = http.get("/metrics", &[]).await.body;
        failed = metrics
            .lines()
            .find(|l| {
                l.starts_with("oncerpc_mcp_upstream_connects_total{outcome=\"failed\",upstream=\"junk\"}")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0);
        if failed >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(failed >= 2, "it keeps trying, and each failure is counted");
    let health = http.get("/healthz", &[]).await;
    assert_eq!(health.status, 200, "one upstream down does not make the gateway unhealthy");
    assert_eq!(health.json()["mcp_upstreams"]["junk"]["up"], false, "{}", health.body);
    let metrics = http.get("/metrics", &[]).await.body;
    assert!(metrics.contains("oncerpc_mcp_upstream_up{upstream=\"junk\"} 0"), "{metrics}");
    assert!(tool_names(&http).await.is_empty(), "nothing offered from it");
    garbage.abort();
}

/// A call oncerpc stops waiting for (its `timeout_ms` passed) is `-32005`, and the upstream
/// is told: `notifications/cancelled` for oncerpc's request reaches the tool, which stops.
/// Over stdio, where no closed connection could tell it instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_times_out_is_cancelled_on_the_upstream() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-upstream-cancel");
    let log = Executions(dir.file("executions.log"));
    let config = stdio_config(&dir, &python, &log, "timeout_ms = 1500\n");
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "pay").await;
    log.hold();
    let key = unique("cancel");
    let answer = post(&http, &call(1, "slow_charge", json!({"amount": 2}), &key)).await;
    assert_eq!(answer["structuredContent"]["code"], -32005, "{answer}");
    wait_for("the upstream to be told", || log.of("slow_charge_cancelled", Some(&key)).len() == 1).await;
    log.release();
    assert_eq!(log.of("slow_charge", Some(&key)).len(), 1, "it ran once, and was stopped");
}

/// oncerpc in front of another oncerpc, which speaks the stateless revision: the client
/// finds it with `server/discover` (no `initialize`), sends every request with the
/// revision's `_meta` and headers — the downstream door refuses a call whose `Mcp-Name` or
/// `Mcp-Param-Region` is missing or wrong, so an answer proves them — and a keyed command
/// runs once on the step server behind both. With the downstream killed, a call is `-32006`
/// and `/healthz` shows the upstream down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oncerpc_in_front_of_a_stateless_oncerpc_speaks_its_revision_and_runs_a_command_once() {
    let steps = common::upstream::Upstream::start().await;
    let dir = TempDir::new("mcp-upstream-stateless");
    let down_store = format!("demo = false\n[store]\nurl = \"sqlite://{}\"\n", dir.file("down.db").display());
    let downstream_config = format!(
        r#"{store}
[[methods]]
name = "ship"
kind = "command"
description = "Ship an order"
params_schema = {{ type = "object", required = ["order"], properties = {{ order = {{ type = "string" }}, region = {{ type = "string", "x-mcp-header" = "Region" }} }} }}
  [[methods.steps]]
  name = "ship"
  url = "{ship}"

[[methods]]
name = "stock"
kind = "query"
  [[methods.steps]]
  name = "stock"
  url = "{stock}"
"#,
        store = down_store,
        ship = steps.url("ship"),
        stock = steps.url("stock"),
    );
    let down_dir = TempDir::new("mcp-upstream-stateless-down");
    let mut downstream = Gateway::with_config(&down_dir, &downstream_config);
    let config = format!(
        "{store}\n[[mcp.upstreams]]\nname = \"down\"\nurl = \"{url}\"\nprefix = \"down.\"\ntimeout_ms = 5000\n",
        store = sqlite(&dir),
        // A query the downstream ignores: an upstream URL's query may hold a token, which no
        // log line may show.
        url = downstream.url("/mcp?probe=not-in-any-log")
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "down").await;
    let mut names = tool_names(&http).await;
    names.sort();
    assert_eq!(names, ["down_ship", "down_stock"], "both tools, prefixed");
    // It offers tools only: oncerpc declares no resources, prompts or completions.
    let discover = json!({"jsonrpc":"2.0","id":9,"method":"server/discover","params":{"_meta":{
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let capabilities = post(&http, &discover).await["capabilities"].clone();
    for absent in ["resources", "prompts", "completions"] {
        assert!(capabilities.get(absent).is_none(), "{absent}: {capabilities}");
    }

    let key = unique("stateless");
    let body = call(1, "down_ship", json!({"order": "o-1", "region": "eu west"}), &key);
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "down_ship"),
        ("Mcp-Param-Region", "=?base64?ZXUgd2VzdA==?="),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let first = http.post("/mcp", body.to_string(), &headers).await;
    let again = http.post("/mcp", body.to_string(), &headers).await;
    let (first, again) = (first.json()["result"].clone(), again.json()["result"].clone());
    assert_eq!(first["isError"], false, "the downstream accepted the call and its headers: {first}");
    assert_eq!((status(&first), status(&again)), ("new", "duplicate"), "{first} {again}");
    assert_eq!(first["content"], again["content"]);
    assert_eq!(first.get("resultType"), Some(&json!("complete")), "this door's own framing: {first}");
    assert_eq!(steps.count("ship"), 1, "the step behind both ran once");
    let sent = steps.calls().into_iter().find(|c| c.step == "ship").unwrap();
    assert_eq!(sent.body["region"], "eu west", "the arguments arrived: {:?}", sent.body);

    // A query passes through each time.
    for id in 2..4 {
        let stock = post(&http, &call(id, "down_stock", json!({}), &unique("q"))).await;
        assert_eq!(stock["isError"], false, "{stock}");
    }
    assert_eq!(steps.count("stock"), 2);

    // The downstream saw the stateless revision only: discover, list, calls; no initialize.
    let metrics = downstream.http().get("/metrics", &[]).await.body;
    let requests = |method: &str| {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("oncerpc_mcp_requests_total{") && l.contains(&format!("method=\"{method}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    assert!(requests("server/discover") >= 1.0, "{metrics}");
    assert_eq!(requests("initialize"), 0.0, "{metrics}");
    assert!(!metrics.contains("oncerpc_mcp_refusals_total{"), "no request was refused: {metrics}");

    // The downstream killed: a call fails as the upstream's failure, and health shows it.
    downstream.kill9();
    let failed = post(&http, &call(5, "down_stock", json!({}), &unique("q"))).await;
    assert_eq!(failed["structuredContent"]["code"], -32006, "{failed}");
    let mut health = Value::Null;
    for _ in 0..200 {
        health = http.get("/healthz", &[]).await.json();
        if health["mcp_upstreams"]["down"]["up"] == false {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(health["mcp_upstreams"]["down"]["up"], false, "{health}");
    wait_for("the failed reconnection's log line", || {
        gw.log().iter().any(|l| l.contains("MCP upstream: cannot connect"))
    })
    .await;
    let logged: Vec<String> = gw.log().into_iter().filter(|l| l.contains("not-in-any-log")).collect();
    assert!(logged.is_empty(), "the upstream's URL in a log line: {logged:?}");
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
