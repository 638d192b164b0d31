//! The official MCP SDK clients the tests drive the MCP door with: the Python SDK (`mcp`, in
//! the venv `ONCERPC_PYTHON` names), the TypeScript SDK (with the Node 22 and the
//! conformance suite in `ONCERPC_CONFORMANCE_DIR`) and, for the stateless revision
//! `2026-07-28`, the TypeScript SDK v2 client (`@modelcontextprotocol/client`, with the 0.2
//! conformance suite in `ONCERPC_CONFORMANCE_2026_DIR`), all installed by `scripts/test.sh`. A
//! client script prints one JSON summary of what it saw; missing, the test skips with a
//! reason, or fails in CI.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

pub fn skip(what: &str) {
    assert!(!in_ci(), "{what} is required in CI (scripts/test.sh installs it)");
    eprintln!("SKIPPED: {what} is not installed: run ./scripts/test.sh");
}

/// `tests/clients/mcp_client.py` under the Python that has the SDK, with `args`; `None` when
/// there is no such Python (outside CI).
pub fn python(args: &[&str]) -> Option<Command> {
    python_script("mcp_client.py", args)
}

/// `tests/clients/{script}` under the Python that has the SDK, with `args`.
pub fn python_script(script: &str, args: &[&str]) -> Option<Command> {
    let mut cmd = Command::new(python_sdk()?);
    cmd.arg(client_script(script)).args(args);
    Some(cmd)
}

/// The Python interpreter that has the MCP SDK; `None` when there is none (outside CI).
pub fn python_sdk() -> Option<String> {
    let python = std::env::var("ONCERPC_PYTHON").unwrap_or_else(|_| "python3".into());
    let has_sdk = Command::new(&python).args(["-c", "import mcp"]).output().is_ok_and(|o| o.status.success());
    if !has_sdk {
        skip("the MCP Python SDK (pip package mcp)");
        return None;
    }
    Some(python)
}

/// A script of `tests/clients`.
pub fn client_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients").join(name)
}

/// The directory holding the conformance suite, the TypeScript SDK and Node 22.
pub fn node_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("ONCERPC_CONFORMANCE_DIR").map(PathBuf::from);
    if dir.is_none() {
        skip("the MCP conformance suite and TypeScript SDK (ONCERPC_CONFORMANCE_DIR)");
    }
    dir
}

/// The directory holding the 0.2 conformance suite (`2026-07-28`), the SDK v2 client and Node 22.
pub fn node_dir_2026() -> Option<PathBuf> {
    let dir = std::env::var_os("ONCERPC_CONFORMANCE_2026_DIR").map(PathBuf::from);
    if dir.is_none() {
        skip("the MCP conformance suite 0.2 and @modelcontextprotocol/client (ONCERPC_CONFORMANCE_2026_DIR)");
    }
    dir
}

/// `tests/clients/mcp_client_2026.mjs` (the SDK v2 client pinned to `2026-07-28`) under that
/// Node, with `args`.
pub fn typescript_2026(args: &[&str]) -> Option<Command> {
    typescript_2026_script("mcp_client_2026.mjs", args)
}

/// `tests/clients/{script}` under the Node of the SDK v2 client (and its tasks extension,
/// `@modelcontextprotocol/ext-tasks`), with `args`.
pub fn typescript_2026_script(script: &str, args: &[&str]) -> Option<Command> {
    let dir = node_dir_2026()?;
    let mut cmd = Command::new(dir.join("node_modules/.bin/node"));
    cmd.arg(client_script(script)).args(args).env("NODE_PATH", dir.join("node_modules"));
    Some(cmd)
}

/// `tests/clients/mcp_ts_client.mjs` under that Node, with `args`.
pub fn typescript(args: &[&str]) -> Option<Command> {
    typescript_script("mcp_ts_client.mjs", args)
}

/// `tests/clients/{script}` under the Node of the session-era TypeScript SDK, with `args`.
pub fn typescript_script(script: &str, args: &[&str]) -> Option<Command> {
    let dir = node_dir()?;
    let mut cmd = Command::new(dir.join("node_modules/.bin/node"));
    cmd.arg(client_script(script)).args(args).env("NODE_PATH", dir.join("node_modules"));
    Some(cmd)
}

/// Run a client (off the runtime's threads) and read its summary; its output is kept for
/// the secret scan.
pub async fn summary(mut cmd: Command) -> Value {
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("the client runs")).await.unwrap();
    super::process::keep_output(&out);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the client's summary")
}

/// The Python of the agent frameworks' venv (`ONCERPC_FRAMEWORKS_PYTHON`, made by
/// `scripts/test.sh`: fastmcp, openai-agents, pydantic-ai, langchain-mcp-adapters) when it
/// imports `module`; `None` (a skip, or a failure in CI) when it does not.
pub fn frameworks_python(module: &str) -> Option<String> {
    let python = std::env::var("ONCERPC_FRAMEWORKS_PYTHON").ok();
    let has = python.as_ref().is_some_and(|p| {
        Command::new(p).args(["-c", &format!("import {module}")]).output().is_ok_and(|o| o.status.success())
    });
    if !has {
        skip(&format!("the Python package of {module} (ONCERPC_FRAMEWORKS_PYTHON)"));
        return None;
    }
    python
}

/// The directory holding the agent frameworks' npm packages and a Node ≥ 22
/// (`ONCERPC_FRAMEWORKS_NODE_DIR`, made by `scripts/test.sh`) when it has `package`.
pub fn frameworks_node_dir(package: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("ONCERPC_FRAMEWORKS_NODE_DIR").map(PathBuf::from);
    match dir {
        Some(d) if d.join("node_modules").join(package).join("package.json").is_file() => Some(d),
        _ => {
            skip(&format!("the npm package {package} (ONCERPC_FRAMEWORKS_NODE_DIR)"));
            None
        }
    }
}

/// [`summary`], but the client is killed (and the test fails) when it has not exited within
/// `limit`.
pub async fn summary_within(mut cmd: Command, limit: std::time::Duration) -> Value {
    use std::process::Stdio;
    let out = tokio::task::spawn_blocking(move || {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the client runs");
        let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let out = std::thread::spawn(move || {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut stdout, &mut b).map(|_| b)
        });
        let err = std::thread::spawn(move || {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut stderr, &mut b).map(|_| b)
        });
        let deadline = std::time::Instant::now() + limit;
        let status = loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                break Some(s);
            }
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        // After a kill a grandchild may still hold the pipes: the output is not waited for.
        let Some(status) = status else { return (None, Vec::new(), Vec::new()) };
        let (stdout, stderr) =
            (out.join().unwrap().unwrap_or_default(), err.join().unwrap().unwrap_or_default());
        (Some(status), stdout, stderr)
    })
    .await
    .unwrap();
    let (status, stdout, stderr) = out;
    let Some(status) = status else {
        panic!("the client did not exit within {limit:?} (killed)");
    };
    super::process::keep_output(&std::process::Output {
        status,
        stdout: stdout.clone(),
        stderr: stderr.clone(),
    });
    assert!(status.success(), "{}", String::from_utf8_lossy(&stderr));
    serde_json::from_slice(&stdout)
        .unwrap_or_else(|e| panic!("the client's summary ({e}): {}", String::from_utf8_lossy(&stdout)))
}
