//! `oncerpc mcp` as a desktop host runs it: a child process speaking newline-delimited MCP on
//! stdin/stdout. Driven by the official MCP Python SDK (`mcp`), and by hand for `kill -9`: a
//! command whose outcome was stored is answered again after a restart, without running again.
//!
//! Outside CI a missing Python SDK skips its test with a printed reason; in CI (`CI=true`,
//! where `scripts/test.sh` installs it) it is a failure.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::mcp_clients;
use common::process::TempDir;
use common::upstream::Upstream;
use serde_json::{Value, json};

/// A config: one command flow `orders.create` (one step on `up`), the demo methods, SQLite.
fn config(dir: &TempDir, up: &Upstream) -> String {
    let path = dir.file("mcp.toml");
    let toml = format!(
        r#"
demo = true

[store]
url = "sqlite://{db}"

[[methods]]
name = "orders.create"
kind = "command"
description = "Create an order"
timeout_ms = 5000
params_schema = {{ type = "object", required = ["sku"] }}

  [[methods.steps]]
  name = "charge"
  url = "{charge}"
"#,
        db = dir.file("mcp.db").display(),
        charge = up.url("charge"),
    );
    std::fs::write(&path, toml).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_calls_a_command_twice_and_it_runs_once() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-python");
    let config = config(&dir, &up);
    let bin = env!("CARGO_BIN_EXE_oncerpc");
    let Some(client) = mcp_clients::python(&["stdio", bin, &config, "order-7f3a"]) else { return };
    let seen = mcp_clients::summary(client).await;
    assert_eq!(seen["server"], "oncerpc");
    assert_eq!(seen["protocol"], "2025-11-25", "{seen}");
    assert!(seen["tools"].as_array().unwrap().contains(&json!("orders_create")), "{seen}");
    assert_eq!((&seen["key_property"], &seen["idempotent_hint"]), (&json!(true), &json!(true)));
    assert_eq!(seen["first"]["status"], "new", "{seen}");
    assert_eq!(seen["again"]["status"], "duplicate", "{seen}");
    assert_eq!(seen["again"]["key"], "order-7f3a");
    assert_eq!(seen["first"]["text"], seen["again"]["text"], "the stored result, byte for byte");
    assert_eq!(seen["first"]["structured"]["step"], "charge");
    assert_eq!(seen["other"]["is_error"], true, "{seen}");
    assert_eq!(seen["other"]["structured"]["code"], -32002);
    assert_eq!(seen["query"]["structured"], json!({"result": 5}), "{seen}");
    assert_eq!(up.count("charge"), 1, "the upstream ran once");
}

/// One `oncerpc mcp` child: write a message, read its answer line.
struct Child {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Child {
    fn start(config: &str) -> Child {
        let mut child = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
            .args(["mcp", "--config", config])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("oncerpc mcp starts");
        let out = BufReader::new(child.stdout.take().unwrap());
        Child { child, out }
    }

    fn ask(&mut self, msg: Value) -> Value {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).expect("an answer line");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_and_a_restart_the_retry_gets_the_stored_result() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-kill9");
    let config = config(&dir, &up);
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
        "params":{"name":"orders.create","arguments":{"sku":"Z-9"},"_meta":{"io.oncerpc/idempotency-key":"kill-9-key"}}});
    let init =
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}});
    let (first, again) = {
        let (config, call, init) = (config.clone(), call.clone(), init.clone());
        tokio::task::spawn_blocking(move || {
            let mut a = Child::start(&config);
            a.ask(init.clone());
            let first = a.ask(call.clone());
            a.child.kill().unwrap(); // SIGKILL
            a.child.wait().unwrap();
            let mut b = Child::start(&config);
            b.ask(init);
            let again = b.ask(call);
            (first, again)
        })
        .await
        .unwrap()
    };
    assert_eq!(first["result"]["_meta"]["io.oncerpc/idempotency-status"], "new", "{first}");
    assert_eq!(again["result"]["_meta"]["io.oncerpc/idempotency-status"], "duplicate", "{again}");
    assert_eq!(first["result"]["content"], again["result"]["content"]);
    assert_eq!(up.count("charge"), 1, "one upstream call across the crash");
}

/// `_meta` of a `2026-07-28` request.
fn modern_meta(extra: Value) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    if let (Some(m), Value::Object(e)) = (meta.as_object_mut(), extra) {
        m.extend(e);
    }
    meta
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_requests_are_answered_without_a_handshake_and_a_retry_runs_once() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-stdio-2026");
    let config = config(&dir, &up);
    let answers = tokio::task::spawn_blocking(move || {
        let mut c = Child::start(&config);
        let discover = c.ask(json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":modern_meta(json!({}))}}));
        let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"orders_create",
            "arguments":{"sku":"S-1","idempotency_key":"stdio-2026-key"},"_meta":modern_meta(json!({}))}});
        let first = c.ask(call.clone());
        let again = c.ask(call);
        let list = c.ask(json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":modern_meta(json!({}))}}));
        let removed = c.ask(json!({"jsonrpc":"2.0","id":4,"method":"initialize","params":{"_meta":modern_meta(json!({}))}}));
        let no_meta = c.ask(json!({"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":
            {"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}));
        let unsupported = c.ask(json!({"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":
            {"io.modelcontextprotocol/protocolVersion":"1999-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}));
        // The session era in the same process, unchanged.
        let init = c.ask(json!({"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}));
        let ping = c.ask(json!({"jsonrpc":"2.0","id":8,"method":"ping"}));
        [discover, first, again, list, removed, no_meta, unsupported, init, ping]
    })
    .await
    .unwrap();
    let [discover, first, again, list, removed, no_meta, unsupported, init, ping] = answers;
    assert_eq!(discover["result"]["supportedVersions"][0], "2026-07-28", "{discover}");
    assert_eq!(discover["result"]["resultType"], "complete");
    assert_eq!(discover["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "oncerpc");
    assert_eq!(first["result"]["resultType"], "complete", "{first}");
    assert_eq!(first["result"]["_meta"]["io.oncerpc/idempotency-status"], "new", "{first}");
    assert_eq!(again["result"]["_meta"]["io.oncerpc/idempotency-status"], "duplicate", "{again}");
    assert_eq!(first["result"]["content"], again["result"]["content"], "the stored result, byte for byte");
    assert_eq!(up.count("charge"), 1, "the upstream ran once");
    assert!(
        list["result"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == "orders_create"),
        "{list}"
    );
    assert!(list["result"]["ttlMs"].as_u64().is_some() && list["result"]["cacheScope"] == "public", "{list}");
    assert_eq!(
        (removed["id"].clone(), removed["error"]["code"].clone()),
        (json!(4), json!(-32601)),
        "{removed}"
    );
    assert_eq!(no_meta["error"]["code"], -32602, "{no_meta}");
    assert_eq!(unsupported["error"]["code"], -32022, "{unsupported}");
    assert_eq!(unsupported["error"]["data"]["requested"], "1999-01-01");
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    assert_eq!(ping["result"], json!({}), "{ping}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_step_the_retry_resumes_and_sends_that_step_its_same_key() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-kill9-step");
    let config = dir.file("mcp.toml").display().to_string();
    let toml = format!(
        "demo = false\n[store]\nurl = \"sqlite://{db}\"\nlease_ms = 2500\n\n\
         [[methods]]\nname = \"orders.place\"\nkind = \"command\"\ntimeout_ms = 1000\n\
         \x20 [[methods.steps]]\n  name = \"reserve\"\n  url = \"{reserve}\"\n\
         \x20 [[methods.steps]]\n  name = \"charge\"\n  url = \"{charge}\"\n",
        db = dir.file("mcp.db").display(),
        reserve = up.url("reserve"),
        charge = up.url("charge"),
    );
    std::fs::write(&config, toml).unwrap();
    let init =
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}});
    let call = |id: u64| {
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
            "params":{"name":"orders_place","arguments":{"sku":"K-1","idempotency_key":"kill-in-step"}}})
    };
    up.set_delay(700, &["charge"]);
    let mut a = {
        let (config, init, call) = (config.clone(), init.clone(), call(2));
        tokio::task::spawn_blocking(move || {
            let mut a = Child::start(&config);
            a.ask(init);
            let stdin = a.child.stdin.as_mut().unwrap();
            writeln!(stdin, "{call}").unwrap();
            stdin.flush().unwrap();
            a
        })
        .await
        .unwrap()
    };
    for _ in 0..500 {
        if up.count("charge") == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(up.count("charge"), 1, "the charge is in flight");
    a.child.kill().unwrap(); // SIGKILL, while the upstream holds the charge
    a.child.wait().unwrap();
    up.set_delay(0, &[]);

    let answers = tokio::task::spawn_blocking(move || {
        let mut b = Child::start(&config);
        b.ask(init);
        // In progress (isError, -32001) until the dead owner's lease lapses; then it resumes.
        let mut answers = Vec::new();
        for id in 3..60 {
            let a = b.ask(call(id));
            let busy = a["result"]["structuredContent"]["code"] == -32001;
            answers.push(a);
            if !busy {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        answers
    })
    .await
    .unwrap();
    let last = answers.last().unwrap();
    assert_eq!(last["result"]["isError"], false, "{last}");
    assert_eq!(last["result"]["_meta"]["io.oncerpc/idempotency-status"], "new", "{last}");
    assert_eq!(up.count("reserve"), 1, "the finished step is not called again: it is in the journal");
    let charges: Vec<_> = up.calls().into_iter().filter(|c| c.step == "charge").collect();
    assert_eq!(charges.len(), 2, "the step in flight at the crash is sent again");
    assert!(charges[0].idempotency_key.is_some());
    assert_eq!(charges[0].idempotency_key, charges[1].idempotency_key, "with the same step key");
}
