//! Real JSON-RPC clients against oncerpc: Emacs's built-in `jsonrpc.el` over `oncerpc stdio`,
//! and the Python library `jsonrpcclient` over the HTTP door.
//!
//! Outside CI a missing Emacs or Python library skips the test with a printed reason; in CI
//! (`CI=true`, where `scripts/test.sh` installs both) it is a failure.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::TestServer;
use common::process::TempDir;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// `true` when the test may run; otherwise skips (or fails in CI) with the reason.
fn available(what: &str, ok: bool, reason: &str) -> bool {
    if ok {
        return true;
    }
    assert!(!in_ci(), "{what} is required in CI: {reason}");
    eprintln!("SKIPPED: {what}: {reason} (run ./scripts/test.sh to install it)");
    false
}

#[test]
fn emacs_jsonrpc_el_drives_the_stdio_daemon() {
    let emacs = Command::new("emacs").arg("--version").output();
    if !available("emacs", emacs.is_ok_and(|o| o.status.success()), "emacs is not installed") {
        return;
    }
    let dir = TempDir::new("emacs");
    let out = Command::new("emacs")
        .args(["--batch", "-Q", "-l"])
        .arg(clients_dir().join("oncerpc-jsonrpc-test.el"))
        .env("ONCERPC_BIN", env!("CARGO_BIN_EXE_oncerpc"))
        .env("ONCERPC_STORE", format!("sqlite://{}", dir.file("emacs.db").display()))
        .output()
        .expect("run emacs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "emacs failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ONCERPC-EMACS-OK"), "{stdout}\n{stderr}");
    for check in ["subtract", "after a notification", "unknown method is -32601", "counted once"] {
        assert!(stderr.contains(&format!("ok: {check}")), "missing check {check:?}:\n{stderr}");
    }
}

#[tokio::test]
async fn python_jsonrpcclient_drives_the_http_door() {
    let python = std::env::var("ONCERPC_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python).args(["-c", "import jsonrpcclient, requests"]).output();
    if !available(
        "python jsonrpcclient",
        probe.is_ok_and(|o| o.status.success()),
        &format!("{python} cannot import jsonrpcclient and requests"),
    ) {
        return;
    }
    let s = TestServer::start().await;
    let url = s.url("/rpc");
    let script = clients_dir().join("python_client.py");
    let out = tokio::process::Command::new(&python).arg(script).arg(url).output().await.expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python client failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ONCERPC-PYTHON-OK"), "{stdout}");
    assert_eq!(s.demo.counter("default"), 5, "the server agrees: counted once");
}

#[tokio::test]
async fn node_json_rpc_2_0_resolves_every_call_of_an_oversized_batch() {
    // The npm package json-rpc-2.0, installed by scripts/test.sh into target/node-clients.
    let modules = std::env::var("ONCERPC_NODE_PATH").map(PathBuf::from).unwrap_or_else(|_| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/node-clients/node_modules")
    });
    let node = Command::new("node").arg("--version").output();
    let ready = node.is_ok_and(|o| o.status.success()) && modules.join("json-rpc-2.0").is_dir();
    if !available("node with json-rpc-2.0", ready, &format!("node or {} is missing", modules.display())) {
        return;
    }
    let s = TestServer::start().await;
    let script = clients_dir().join("node_client.cjs");
    let out = tokio::process::Command::new("node")
        .arg(script)
        .arg(s.url("/rpc"))
        .env("NODE_PATH", &modules)
        .output()
        .await
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "node client failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ONCERPC-NODE-OK"), "{stdout}");
    assert_eq!(s.demo.counter("default"), 0, "the server agrees: nothing in the oversized batch ran");
}
