//! The official Python SDK's MCP server (`tests/clients/mcp_upstream_server.py`) as an
//! upstream of oncerpc: its log of executions, started over Streamable HTTP, and waits for
//! oncerpc to connect to it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use oncerpc_core::idempotency::upstream_key;
use serde_json::Value;

use super::mcp_clients;
use super::process::Http;

/// The upstream's log of executions: one JSON object a line.
pub struct Executions(pub PathBuf);

impl Executions {
    pub fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.0)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The executions of `tool` for a client's call with key `key`: the upstream never sees
    /// that key, but the one oncerpc derives for the default tenant, the exported tool (these
    /// tests export it with no prefix or `pay.`) and the upstream's tool.
    pub fn of(&self, tool: &str, key: Option<&str>) -> Vec<Value> {
        let base = tool.strip_suffix("_cancelled").unwrap_or(tool);
        let sent: Vec<Option<String>> = ["", "pay."]
            .iter()
            .map(|prefix| key.map(|k| upstream_key("default", &format!("{prefix}{base}"), k, base)))
            .collect();
        self.lines()
            .into_iter()
            .filter(|l| l["tool"] == tool && sent.iter().any(|s| l["key"].as_str() == s.as_deref()))
            .collect()
    }

    pub fn count(&self, tool: &str) -> usize {
        self.lines().iter().filter(|l| l["tool"] == tool).count()
    }

    /// The pid of the upstream process started last.
    pub fn last_pid(&self) -> Option<i32> {
        self.lines().iter().rev().find_map(|l| l["started"].as_i64()).map(|p| p as i32)
    }

    pub fn starts(&self) -> usize {
        self.lines().iter().filter(|l| l.get("started").is_some()).count()
    }

    /// Hold `slow_charge` in flight until [`release`](Self::release).
    pub fn hold(&self) {
        std::fs::write(self.0.with_extension("log.hold"), "").unwrap();
    }

    pub fn release(&self) {
        let _ = std::fs::remove_file(self.0.with_extension("log.hold"));
    }
}

/// The Python upstream over Streamable HTTP on a free loopback port.
pub struct HttpUpstream {
    child: Child,
    pub url: String,
}

impl HttpUpstream {
    pub async fn start(python: &str, log: &Executions) -> HttpUpstream {
        Self::start_on(python, log, free_port()).await
    }

    /// [`start`](Self::start) on `port` (a test that names the URL before the server is up).
    pub async fn start_on(python: &str, log: &Executions, port: u16) -> HttpUpstream {
        Self::start_env(python, log, port, &[]).await
    }

    /// [`start_on`](Self::start_on) with these environment variables (`UPSTREAM_ISSUER` and
    /// `UPSTREAM_AUDIENCE`: it checks access tokens).
    pub async fn start_env(python: &str, log: &Executions, port: u16, env: &[(&str, &str)]) -> HttpUpstream {
        let child = Command::new(python)
            .envs(env.iter().copied())
            .arg(mcp_clients::client_script("mcp_upstream_server.py"))
            .arg(&log.0)
            .args(["http", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the Python upstream");
        let addr = format!("127.0.0.1:{port}");
        wait_for("the Python upstream to listen", || std::net::TcpStream::connect(&addr).is_ok()).await;
        HttpUpstream { child, url: format!("http://{addr}/mcp") }
    }
}

impl Drop for HttpUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll (every 50 ms, for at most 30 s) until `done`.
pub async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..600 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Wait until `/healthz` shows `upstream` connected with tools.
pub async fn wait_up(gw: &Http, upstream: &str) {
    for _ in 0..600 {
        let health = gw.get("/healthz", &[]).await.json();
        if health["mcp_upstreams"][upstream]["up"] == true && health["mcp_upstreams"][upstream]["tools"] != 0
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("upstream {upstream} did not connect: {}", gw.get("/healthz", &[]).await.json());
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
