//! Elicitation in a flow (a `[[methods.steps]] ask` step) on the real `oncerpc serve`: the
//! official MCP Python SDK answers the question (session era, over Streamable HTTP and stdio),
//! the answer reaches the next step as its input, and it is journaled: after a `kill -9` while
//! the next step is stalled, a restart and a retry with the same key, the client is not asked
//! again. The `2026-07-28` revision asks with an `input_required` result and resumes from the
//! journal when the client calls again with the answer. A client that cannot answer questions
//! gets a tool error, `/rpc` a `-32602`, and nothing runs; `check-config` refuses a bad `ask`.
//!
//! Outside CI a missing SDK skips its test with a printed reason; in CI it is a failure.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::mcp_clients;
use common::mcp2026;
use common::process::{Gateway, TempDir};
use common::upstream::Upstream;
use serde_json::{Value, json};

const ACME: &str = "acme-elicit-s3cr3t-0000";

/// A tenant, a SQLite store, and the command flows `book` (`size` asks, then `reserve` and
/// `ship` on `up`) and `checked_book` (`check`, then `size` asks, then `reserve`).
fn config(dir: &TempDir, up: &Upstream) -> String {
    format!(
        r#"
[store]
url = "sqlite://{db}"
lease_ms = 4000

[[tenants]]
name = "acme"
api_keys = ["{ACME}"]

[[methods]]
name = "book"
kind = "command"
timeout_ms = 3000
params_schema = {{ type = "object", required = ["sku"] }}
  [[methods.steps]]
  name = "size"
  ask = {{ message = "Which size?", schema = {{ type = "object", properties = {{ size = {{ type = "string", enum = ["S", "M", "L"] }} }}, required = ["size"] }} }}
  [[methods.steps]]
  name = "reserve"
  url = "{reserve}"
  [[methods.steps]]
  name = "ship"
  url = "{ship}"

[[methods]]
name = "checked_book"
kind = "command"
timeout_ms = 3000
  [[methods.steps]]
  name = "check"
  url = "{check}"
  [[methods.steps]]
  name = "size"
  ask = {{ message = "Which size?", schema = {{ type = "object", properties = {{ size = {{ type = "string" }} }}, required = ["size"] }} }}
  [[methods.steps]]
  name = "reserve"
  url = "{reserve}"
"#,
        db = dir.file("elicit.db").display(),
        reserve = up.url("reserve"),
        ship = up.url("ship"),
        check = up.url("check"),
    )
}

/// The Python SDK client over HTTP calling `book` with `key` `calls` times, answering `answer`.
fn client(gw: &Gateway, key: &str, answer: &str, calls: u32) -> Option<std::process::Command> {
    let calls = calls.to_string();
    let args = ["http", &gw.url("/mcp"), ACME, "book", key, answer, &calls];
    mcp_clients::python_script("mcp_elicit_client.py", &args)
}

const ACCEPTED: &str = r#"{"action":"accept","content":{"size":"M"}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_answers_the_question_and_the_next_step_gets_the_answer_once() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-elicit");
    let gw = Gateway::with_config(&dir, &config(&dir, &up));
    let Some(cmd) = client(&gw, "book-1", "accept", 2) else { return };
    let seen = mcp_clients::summary(cmd).await;
    assert_eq!(seen["asked"], 1, "asked once, the retry is a duplicate: {seen}");
    assert_eq!(seen["questions"][0]["message"], "Which size?");
    assert_eq!(seen["questions"][0]["schema"]["required"], json!(["size"]));
    let (first, again) = (&seen["results"][0], &seen["results"][1]);
    assert_eq!((&first["is_error"], &first["status"]), (&json!(false), &json!("new")), "{first}");
    assert_eq!(first["structured"]["step"], "ship");
    assert_eq!(first["structured"]["input"]["input"], serde_json::from_str::<Value>(ACCEPTED).unwrap());
    assert_eq!((&again["status"], &again["structured"]), (&json!("duplicate"), &first["structured"]));
    assert_eq!((up.count("reserve"), up.count("ship")), (1, 1));
    assert_eq!(
        up.calls()[0].body,
        serde_json::from_str::<Value>(ACCEPTED).unwrap(),
        "the answer is reserve's input"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_question_ends_the_flow_with_a_stored_failure_that_says_so() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-elicit-decline");
    let gw = Gateway::with_config(&dir, &config(&dir, &up));
    let Some(cmd) = client(&gw, "book-2", "decline", 2) else { return };
    let seen = mcp_clients::summary(cmd).await;
    assert_eq!(seen["asked"], 1, "the stored failure is replayed, not asked again: {seen}");
    let (first, again) = (&seen["results"][0], &seen["results"][1]);
    assert_eq!(first["is_error"], true);
    let text = first["text"].as_str().unwrap();
    assert!(text.contains("declined") && text.contains("\"size\""), "{text}");
    assert_eq!(first["structured"]["code"], -32012);
    assert_eq!((&again["is_error"], &again["status"]), (&json!(true), &json!("duplicate")), "{again}");
    assert!(up.calls().is_empty(), "nothing after the question ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_cannot_answer_and_the_other_doors_run_nothing() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-elicit-none");
    let gw = Gateway::with_config(&dir, &config(&dir, &up));
    let Some(cmd) = client(&gw, "book-3", "none", 1) else { return };
    let seen = mcp_clients::summary(cmd).await;
    let result = &seen["results"][0];
    assert_eq!(result["is_error"], true, "{seen}");
    assert!(result["text"].as_str().unwrap().contains("cannot answer questions"), "{result}");
    let body =
        json!({"jsonrpc":"2.0","id":1,"method":"book","params":{"sku":"A-1","idempotency_key":"book-3"}});
    let bearer = format!("Bearer {ACME}");
    let rpc = gw.http().rpc(body.to_string(), &[("Authorization", &bearer)]).await.json();
    assert_eq!(rpc["error"]["code"], -32602, "{rpc}");
    assert!(rpc["error"]["message"].as_str().unwrap().contains("elicitation"), "{rpc}");
    let flows = common::http_client()
        .post(gw.url("/v2/flows/book"))
        .header("Authorization", &bearer)
        .header("X-Idempotency-Key", "book-3")
        .body(r#"{"sku":"A-1"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(flows.status().as_u16(), 400, "the flows door refuses it too");
    assert!(flows.text().await.unwrap().contains("elicitation"));
    // The same key over MCP, from a client that answers: it runs (nothing was recorded).
    let Some(cmd) = client(&gw, "book-3", "accept", 1) else { return };
    let seen = mcp_clients::summary(cmd).await;
    assert_eq!((&seen["asked"], &seen["results"][0]["status"]), (&json!(1), &json!("new")), "{seen}");
    assert_eq!((up.count("reserve"), up.count("ship")), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journaled_answer_is_not_asked_again_after_kill_9() {
    let up = Upstream::start().await;
    up.set_delay(20_000, &["reserve"]);
    let dir = TempDir::new("mcp-elicit-crash");
    let toml = config(&dir, &up);
    let mut gw = Gateway::with_config(&dir, &toml);
    let Some(mut cmd) = client(&gw, "book-4", "accept", 1) else { return };
    let mut first = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("the client runs");
    let stderr = BufReader::new(first.stderr.take().unwrap());
    let asked =
        tokio::task::spawn_blocking(move || stderr.lines().map_while(Result::ok).any(|l| l == "asked"));
    // The answer is journaled before `reserve` starts; kill while `reserve` is stalled.
    for _ in 0..2000 {
        if up.count("reserve") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(up.count("reserve"), 1, "the step after the question is in flight");
    gw.kill9();
    let _ = first.kill();
    let _ = first.wait();
    assert!(asked.await.unwrap(), "the first client was asked");
    up.set_delay(0, &[]);
    let gw = Gateway::with_config(&dir, &toml);
    // The dead owner's lease (4 s from the journaled answer) runs out, then the retry takes over.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let Some(cmd) = client(&gw, "book-4", "accept", 1) else { return };
    let seen = mcp_clients::summary(cmd).await;
    assert_eq!(seen["asked"], 0, "the journaled answer is not asked for again: {seen}");
    let result = &seen["results"][0];
    assert_eq!(
        (&result["is_error"], &result["structured"]["step"]),
        (&json!(false), &json!("ship")),
        "{result}"
    );
    let reserve: Vec<_> = up.calls().into_iter().filter(|c| c.step == "reserve").collect();
    assert_eq!(reserve.len(), 2, "the stalled step again, once");
    assert!(reserve.iter().all(|c| c.body == serde_json::from_str::<Value>(ACCEPTED).unwrap()));
    assert_eq!(reserve[0].idempotency_key, reserve[1].idempotency_key, "with its step key");
    assert_eq!(up.count("ship"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_answers_over_stdio() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-elicit-stdio");
    let path = dir.file("stdio.toml");
    let toml =
        config(&dir, &up).replace(&format!("[[tenants]]\nname = \"acme\"\napi_keys = [\"{ACME}\"]\n"), "");
    std::fs::write(&path, toml).unwrap();
    let bin = env!("CARGO_BIN_EXE_oncerpc");
    let args = ["stdio", bin, path.to_str().unwrap(), "book", "book-5", "accept", "1"];
    let Some(cmd) = mcp_clients::python_script("mcp_elicit_client.py", &args) else { return };
    let seen = mcp_clients::summary(cmd).await;
    assert_eq!(seen["asked"], 1, "{seen}");
    assert_eq!(seen["results"][0]["structured"]["step"], "ship", "{seen}");
    assert_eq!(up.calls()[0].body, serde_json::from_str::<Value>(ACCEPTED).unwrap());
}

/// A `2026-07-28` `tools/call` of `checked_book` with `key`; `capabilities` and
/// `inputResponses` as given.
fn call_2026(id: u64, key: &str, capabilities: Value, responses: Option<Value>) -> Value {
    let mut body = mcp2026::call(id, "checked_book", json!({}), key);
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = capabilities;
    if let Some(r) = responses {
        body["params"]["inputResponses"] = r;
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stateless_revision_asks_with_input_required_and_resumes_from_the_journal() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-elicit-2026");
    let gw = Gateway::with_config(&dir, &config(&dir, &up));
    let http = gw.http();
    let bearer = format!("Bearer {ACME}");
    let auth = [("Authorization", bearer.as_str())];
    let asks = json!({ "elicitation": {} });
    let first = mcp2026::post(&http, &call_2026(1, "cb-1", asks.clone(), None), &auth).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let result = &first.json()["result"];
    assert_eq!(result["resultType"], "input_required", "{result}");
    let request = &result["inputRequests"]["size"];
    assert_eq!(
        (&request["method"], &request["params"]["mode"]),
        (&json!("elicitation/create"), &json!("form"))
    );
    assert_eq!(request["params"]["message"], "Which size?");
    assert_eq!(request["params"]["requestedSchema"]["required"], json!(["size"]));
    assert_eq!((up.count("check"), up.count("reserve")), (1, 0), "stopped at the question");
    // An answer that lacks what the question requires: asked again.
    let lacking = json!({ "size": { "action": "accept", "content": {} } });
    let again = mcp2026::post(&http, &call_2026(2, "cb-1", asks.clone(), Some(lacking)), &auth).await;
    assert_eq!(again.json()["result"]["resultType"], "input_required", "{}", again.body);
    let answer = json!({ "size": { "action": "accept", "content": { "size": "L" } } });
    let done = mcp2026::post(&http, &call_2026(3, "cb-1", asks.clone(), Some(answer)), &auth).await;
    let result = &done.json()["result"];
    assert_eq!((&result["resultType"], &result["isError"]), (&json!("complete"), &json!(false)), "{result}");
    assert_eq!(result["structuredContent"]["input"], json!({"action":"accept","content":{"size":"L"}}));
    assert_eq!((up.count("check"), up.count("reserve")), (1, 1), "check ran once: resumed from the journal");
    let replay = mcp2026::post(&http, &call_2026(4, "cb-1", asks, None), &auth).await;
    let result = &replay.json()["result"];
    assert_eq!(result["_meta"]["io.oncerpc/idempotency-status"], "duplicate", "{result}");
    // Without the capability: a tool error, nothing run.
    let refused = mcp2026::post(&http, &call_2026(5, "cb-2", json!({}), None), &auth).await;
    let result = &refused.json()["result"];
    assert_eq!(result["isError"], true, "{result}");
    assert!(result["content"][0]["text"].as_str().unwrap().contains("cannot answer questions"));
    assert_eq!(up.count("check"), 1);
}

#[test]
fn check_config_refuses_a_bad_question() {
    let dir = TempDir::new("mcp-elicit-config");
    for (ask, needle) in [
        (
            r#"{ message = "Size?", schema = { type = "object", properties = { a = { type = "object" } } } }"#,
            "primitive",
        ),
        (
            r#"{ message = "Size?", schema = { type = "object", properties = { a = { type = "array" } } } }"#,
            "primitive",
        ),
        (r#"{ message = "", schema = { type = "object" } }"#, "ask.message"),
        (r#"{ message = "Size?", schema = { type = "object", required = ["b"] } }"#, "required"),
    ] {
        let path = dir.file("bad.toml");
        let toml = format!(
            "[[methods]]\nname = \"q\"\nkind = \"command\"\n  [[methods.steps]]\n  name = \"s\"\n  ask = {ask}\n"
        );
        std::fs::write(&path, toml).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oncerpc"))
            .args(["check-config", path.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "{ask}: {err}");
    }
    let path = dir.file("good.toml");
    let good = "[[methods]]\nname = \"q\"\nkind = \"command\"\n  [[methods.steps]]\n  name = \"s\"\n  ask = { message = \"Go on?\" }\n";
    std::fs::write(&path, good).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .args(["check-config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
