//! `oncerpc stdio` as a real child process: framing, ordering, stdout discipline,
//! idempotency across restarts, shutdown.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use common::process::TempDir;
use serde_json::{Value, json};

fn daemon(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .arg("stdio")
        .args(args)
        .env("RUST_LOG", "debug") // as much stderr logging as possible: none may reach stdout
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn oncerpc stdio")
}

/// Feed `input`, close stdin, collect (stdout, stderr, exit code).
fn run(args: &[&str], input: &[u8]) -> (Vec<u8>, String, i32) {
    let mut child = daemon(args);
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Write from another thread: the daemon answers while we write, and pipes are finite.
    let writer = std::thread::spawn(move || {
        stdin.write_all(&input).unwrap();
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (out.stdout, String::from_utf8_lossy(&out.stderr).into_owned(), out.status.code().unwrap_or(-1))
}

fn cl(body: &str) -> String {
    format!("Content-Length: {}\r\n\r\n{body}", body.len())
}

/// Parse the whole of `out` as Content-Length frames; any leftover byte fails the test.
fn parse_cl_frames(out: &[u8]) -> Vec<Value> {
    let mut frames = Vec::new();
    let mut rest = out;
    while !rest.is_empty() {
        let sep = rest.windows(4).position(|w| w == b"\r\n\r\n").expect("a header block");
        let header = std::str::from_utf8(&rest[..sep]).unwrap();
        let len: usize =
            header.strip_prefix("Content-Length: ").expect("only Content-Length").parse().unwrap();
        let body = &rest[sep + 4..sep + 4 + len];
        frames.push(serde_json::from_slice(body).expect("every frame body is JSON"));
        rest = &rest[sep + 4 + len..];
    }
    frames
}

#[test]
fn a_thousand_mixed_frames_are_answered_in_order_and_stdout_is_only_frames() {
    let mut input = String::new();
    let mut expected: Vec<Value> = Vec::new();
    for i in 0..1000 {
        match i % 8 {
            0..=2 => {
                input +=
                    &cl(&json!({"jsonrpc":"2.0","method":"subtract","params":[i, 1],"id":i}).to_string());
                expected.push(json!({"jsonrpc":"2.0","result":i - 1,"id":i}));
            }
            3 => {
                // An allowed notification: never answered.
                input += &cl(r#"{"jsonrpc":"2.0","method":"update","params":[1,2,3]}"#);
            }
            4 => {
                input += &cl(&json!({"jsonrpc":"2.0","method":"no.such","id":format!("s{i}")}).to_string());
                expected.push(json!({"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":format!("s{i}")}));
            }
            5 => {
                input += &cl(r#"{"jsonrpc":"2.0","method":"sum","params":[1,"#); // invalid JSON
                expected.push(json!({"code": -32700}));
            }
            6 => {
                // A query notification: refused fail-fast, with id null.
                input += &cl(r#"{"jsonrpc":"2.0","method":"sum","params":[1,2]}"#);
                expected.push(json!({"code": -32600}));
            }
            _ => {
                let batch = json!([
                    {"jsonrpc":"2.0","method":"sum","params":[i, 1],"id":format!("b{i}")},
                    {"jsonrpc":"2.0","method":"notify_hello","params":[7]},
                    {"jsonrpc":"2.0","method":"get_data","id":i}
                ]);
                input += &cl(&batch.to_string());
                expected.push(json!([
                    {"jsonrpc":"2.0","result":i + 1,"id":format!("b{i}")},
                    {"jsonrpc":"2.0","result":["hello",5],"id":i}
                ]));
            }
        }
    }
    let (out, stderr, code) = run(&["--store", "memory://"], input.as_bytes());
    assert_eq!(code, 0, "{stderr}");
    let frames = parse_cl_frames(&out);
    assert_eq!(frames.len(), expected.len(), "one answer per non-notification frame");
    for (got, want) in frames.iter().zip(&expected) {
        if let Some(code) = want.get("code") {
            assert_eq!(&got["error"]["code"], code, "{got}");
            assert_eq!(got["id"], Value::Null, "{got}");
        } else {
            assert_eq!(got, want);
        }
    }
    assert!(stderr.contains("DEBUG") || stderr.contains("INFO"), "logs go to stderr");
}

#[test]
fn ndjson_input_gets_ndjson_answers_one_per_line() {
    let input = concat!(
        r#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend":42,"subtrahend":23},"id":1}"#,
        "\n",
        r#"[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},{"jsonrpc":"2.0","method":"notify_hello","params":[7]}]"#,
        "\n\n",
        r#"{"jsonrpc":"2.0","method":"update","params":[1]}"#,
        "\n",
        "{broken\n",
        r#"{"jsonrpc":"2.0","method":"get_data","id":9}"#
    );
    let (out, stderr, code) = run(&["--store", "memory://"], input.as_bytes());
    assert_eq!(code, 0, "{stderr}");
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<Value> =
        text.lines().map(|l| serde_json::from_str(l).expect("each line is JSON")).collect();
    assert!(text.ends_with('\n'));
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0], json!({"jsonrpc":"2.0","result":19,"id":1}));
    assert_eq!(lines[1], json!([{"jsonrpc":"2.0","result":7,"id":"1"}]));
    assert_eq!(lines[2]["error"]["code"], -32700);
    assert_eq!(lines[3], json!({"jsonrpc":"2.0","result":["hello",5],"id":9}));
}

#[test]
fn unframeable_input_answers_then_says_why_on_stderr_and_exits_non_zero() {
    let input = format!(
        "{}Content-Type: text/plain\r\n\r\n{{}}",
        cl(r#"{"jsonrpc":"2.0","method":"get_data","id":1}"#)
    );
    let (out, stderr, code) = run(&["--store", "memory://"], input.as_bytes());
    assert_ne!(code, 0);
    assert!(stderr.contains("Content-Length"), "the reason is on stderr: {stderr}");
    let frames = parse_cl_frames(&out);
    assert_eq!(frames[0]["result"], json!(["hello", 5]));
    assert_eq!(frames[1]["error"]["code"], -32700);
    assert_eq!(frames.len(), 2);
}

#[test]
fn an_idempotent_command_survives_a_restart_of_the_daemon() {
    let dir = TempDir::new("stdio-restart");
    let store = format!("sqlite://{}", dir.file("o.db").display());
    let call = cl(
        r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":4,"idempotency_key":"editor-1"},"id":1}"#,
    );
    let get = cl(r#"{"jsonrpc":"2.0","method":"counter.get","id":2}"#);
    let (first, e1, c1) = run(&["--store", &store], format!("{call}{call}").as_bytes());
    assert_eq!(c1, 0, "{e1}");
    let first = parse_cl_frames(&first);
    assert_eq!(first[0], json!({"jsonrpc":"2.0","result":{"total":4},"id":1}));
    assert_eq!(first[1], first[0], "a retry in the same session is counted once");
    let (second, e2, c2) = run(&["--store", &store], format!("{call}{get}").as_bytes());
    assert_eq!(c2, 0, "{e2}");
    let second = parse_cl_frames(&second);
    assert_eq!(second[0], first[0], "the stored outcome, after a restart");
    assert_eq!(second[1]["result"], json!({"total": 0}), "nothing re-executed in the new process");
}

#[tokio::test]
async fn sigterm_finishes_the_request_in_hand_flushes_and_exits_0() {
    let dir = TempDir::new("stdio-term");
    let db = dir.file("o.db");
    let store = format!("sqlite://{}", db.display());
    let mut child = daemon(&["--store", &store]);
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(cl(r#"{"jsonrpc":"2.0","method":"demo.sleep","params":{"ms":1500,"idempotency_key":"term-1"},"id":"t"}"#).as_bytes())
        .unwrap();
    stdin.flush().unwrap();
    // The request is in hand once its record is claimed. (It sleeps 1.5 s: a loaded machine's
    // polling must not miss the whole window between the claim and the outcome.)
    let observer = oncerpc_store_sqlite::SqliteStore::open(&db).unwrap();
    common::wait_processing(&observer, "default", "demo.sleep", "term-1").await;
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let code = child.wait().unwrap().code();
    assert_eq!(code, Some(0));
    let frames = parse_cl_frames(&out);
    assert_eq!(frames, vec![json!({"jsonrpc":"2.0","result":{"slept_ms":1500},"id":"t"})]);
    drop(stdin);
}

#[test]
fn lsp_dollar_notifications_are_ignored_without_a_warning() {
    // LSP: a `$/` notification the server does not implement is ignored; a `$/` request is
    // answered -32601. Other unknown notifications keep their warning (SPEC §2).
    let input = [
        cl(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#),
        cl(r#"{"jsonrpc":"2.0","method":"$/setTrace","params":{"value":"off"}}"#),
        cl(r#"{"jsonrpc":"2.0","method":"no.such.method","params":[]}"#),
        cl(r#"{"jsonrpc":"2.0","method":"$/progress","id":2}"#),
        cl(r#"{"jsonrpc":"2.0","method":"get_data","id":3}"#),
    ]
    .concat();
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .args(["stdio", "--store", "memory://"])
        .env_remove("RUST_LOG") // the default level, as users run it
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn oncerpc stdio");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let frames = parse_cl_frames(&out.stdout);
    assert_eq!(frames.len(), 2, "only the two requests are answered: {frames:?}");
    assert_eq!(frames[0]["error"]["code"], -32601);
    assert_eq!(frames[0]["id"], 2);
    assert_eq!(frames[1], json!({"jsonrpc":"2.0","result":["hello",5],"id":3}));
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "one warning, for the unknown non-LSP notification: {warnings:?}");
    assert!(warnings[0].contains("no.such.method"), "{}", warnings[0]);
}
