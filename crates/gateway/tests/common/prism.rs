//! A real OpenAPI mock server for the tests: Prism (`@stoplight/prism-cli`, installed by
//! `scripts/test.sh` into `ONCERPC_OPENAPI_DIR` with the Node it needs), serving a document on
//! a loopback port with `--errors`: a request that breaks the document is answered `422` (or
//! `400`/`401`) with the violations, never a made-up success.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::mcp_clients::skip;

/// Where the OpenAPI tools are installed; `None` (skipped outside CI) when they are not.
pub fn tools_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("ONCERPC_OPENAPI_DIR").map(PathBuf::from);
    if dir.is_none() {
        skip("the OpenAPI mock server Prism (ONCERPC_OPENAPI_DIR)");
    }
    dir
}

/// `node` of the tools' folder running `script` (a file under `node_modules`).
pub fn node(dir: &Path, script: &str) -> Command {
    let mut cmd = Command::new(dir.join("node_modules/.bin/node"));
    cmd.arg(dir.join("node_modules").join(script)).env("NODE_PATH", dir.join("node_modules"));
    cmd
}

/// A vendored document under `tests/fixtures/openapi`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openapi").join(name)
}

pub struct Prism {
    child: Child,
    pub port: u16,
}

impl Prism {
    /// Prism serving `spec`, up and answering; `None` (skipped) without it.
    pub async fn start(spec: &Path) -> Option<Prism> {
        let dir = tools_dir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = super::process::kept_log(format!("prism-{port}"));
        let stderr = match log {
            Some(f) => Stdio::from(f),
            None => Stdio::null(),
        };
        let child = node(&dir, "@stoplight/prism-cli/dist/index.js")
            .args(["mock", "--errors", "-h", "127.0.0.1", "-p", &port.to_string()])
            .arg(spec)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("prism starts");
        let prism = Prism { child, port };
        let client = super::http_client();
        for _ in 0..600 {
            if client.get(prism.url()).send().await.is_ok() {
                return Some(prism);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("Prism did not come up on port {port}");
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Prism {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
