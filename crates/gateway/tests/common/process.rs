//! A real `oncerpc serve` child process on a loopback port.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

pub struct Gateway {
    pub child: Child,
    pub addr: SocketAddr,
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl Gateway {
    /// `oncerpc serve --listen 127.0.0.1:0 <args>`; returns once it is listening.
    pub fn start(args: &[&str]) -> Gateway {
        Self::start_env(args, &[])
    }

    /// [`start`](Self::start) with environment variables set for the child.
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Gateway {
        let mut all = vec!["--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        Self::start_as(&all, env)
    }

    /// `oncerpc serve <args>` (its address from them or the config), with `env`; returns once
    /// it is listening.
    pub fn start_as(args: &[&str], env: &[(&str, &str)]) -> Gateway {
        let mut child = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
            .envs(env.iter().copied())
            .arg("serve")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn oncerpc");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = lines.clone();
        let mut kept = kept_log(child.id());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(f) = kept.as_mut() {
                    use std::io::Write;
                    let _ = writeln!(f, "{line}");
                }
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let addr = addr.split(|c: char| c.is_whitespace() || c == '"').next().unwrap_or("");
                    if let Ok(a) = addr.parse::<SocketAddr>() {
                        let _ = tx.send(a);
                    }
                }
                sink.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!("oncerpc did not start listening: {:?}", lines.lock().unwrap());
            }
        };
        Gateway { child, addr, stderr: lines }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// SIGKILL: no cleanup, no flush, like a crash.
    pub fn kill9(&mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("reaped");
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM: the graceful shutdown of a rolling deploy.
    pub fn sigterm(&self) {
        let status =
            Command::new("kill").args(["-TERM", &self.pid().to_string()]).status().expect("run kill");
        assert!(status.success(), "kill -TERM {} failed", self.pid());
    }

    /// Wait (bounded) for the process to exit; its exit status.
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "the process did not exit within {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The stderr lines so far.
    pub fn log(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// Write `toml` to `oncerpc.toml` in `dir` and start the binary on it.
    pub fn with_config(dir: &TempDir, toml: &str) -> Gateway {
        let path = dir.file("oncerpc.toml");
        std::fs::write(&path, toml).expect("write the config file");
        Gateway::start(&["--config", &path.display().to_string()])
    }

    /// A client for this gateway.
    pub fn http(&self) -> Http {
        Http::new(self.url(""))
    }

    /// Wait (bounded) for a stderr line for which `pred` holds; that line.
    pub async fn wait_log(&self, within: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(line) = self.stderr.lock().unwrap().iter().find(|l| pred(l)) {
                return Some(line.clone());
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A reqwest client bound to a base URL (a [`Gateway`]'s, or an in-process server's), whose
/// answers are [`super::Answer`]s.
#[derive(Clone)]
pub struct Http {
    pub client: reqwest::Client,
    pub base: String,
}

impl Http {
    pub fn new(base: impl Into<String>) -> Http {
        Http { client: super::http_client(), base: base.into() }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GET `path` with extra headers.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> super::Answer {
        let mut req = self.client.get(self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Self::answer(req).await
    }

    /// POST a raw body to `path` with extra headers (no content type unless given).
    pub async fn post(
        &self,
        path: &str,
        body: impl Into<reqwest::Body>,
        headers: &[(&str, &str)],
    ) -> super::Answer {
        let mut req = self.client.post(self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Self::answer(req.body(body)).await
    }

    /// DELETE `path` with extra headers; the status.
    pub async fn client_delete(&self, path: &str, headers: &[(&str, &str)]) -> u16 {
        let mut req = self.client.delete(self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.expect("request sent").status().as_u16()
    }

    /// POST a JSON-RPC body to `/rpc` with extra headers.
    pub async fn rpc(&self, body: impl Into<reqwest::Body>, headers: &[(&str, &str)]) -> super::Answer {
        let mut req = self.client.post(self.url("/rpc")).header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Self::answer(req.body(body)).await
    }

    async fn answer(req: reqwest::RequestBuilder) -> super::Answer {
        let resp = req.send().await.expect("request sent");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.text().await.expect("body read");
        super::Answer { status, headers, body }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a child's log is kept for the whole run's secret scan: `ONCERPC_TEST_LOG_DIR`
/// (set by `scripts/test.sh`, which greps every kept log for the tests' secrets at the end).
pub fn kept_log(name: impl std::fmt::Display) -> Option<std::fs::File> {
    let dir = PathBuf::from(std::env::var_os("ONCERPC_TEST_LOG_DIR")?);
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::File::create(dir.join(format!("oncerpc-{}-{name}.log", std::process::id()))).ok()
}

/// Keep the output of a finished child with the run's logs, see [`kept_log`].
pub fn keep_output(output: &std::process::Output) {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    if let Some(mut f) = kept_log(format_args!("output-{}", N.fetch_add(1, Ordering::Relaxed))) {
        let _ = f.write_all(&output.stdout);
        let _ = f.write_all(&output.stderr);
    }
}

/// A unique path under the system temp dir (removed with its directory on drop).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "oncerpc-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// POST a body to /rpc; (status, x-idempotency-status, body).
pub async fn post(client: &reqwest::Client, gw_url: &str, body: &str) -> (u16, Option<String>, String) {
    let resp = client
        .post(format!("{gw_url}/rpc"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("request sent");
    let status = resp.status().as_u16();
    let idem = resp.headers().get("x-idempotency-status").and_then(|v| v.to_str().ok()).map(str::to_owned);
    (status, idem, resp.text().await.expect("body"))
}

/// A sync flow call of `orders.create` with `{"amount":42}` under `key`:
/// (status, x-idempotency-status, body).
pub async fn sync_flow(client: &reqwest::Client, gw: &Gateway, key: &str) -> (u16, Option<String>, String) {
    sync_flow_to(client, gw, "orders.create", key).await
}

/// [`sync_flow`] of the flow `method`.
pub async fn sync_flow_to(
    client: &reqwest::Client,
    gw: &Gateway,
    method: &str,
    key: &str,
) -> (u16, Option<String>, String) {
    let resp = client
        .post(gw.url(&format!("/v2/flows/{method}?sync=true")))
        .header("X-Idempotency-Key", key)
        .body(r#"{"amount":42}"#)
        .send()
        .await
        .expect("sent");
    let status = resp.status().as_u16();
    let idem = resp.headers().get("x-idempotency-status").and_then(|v| v.to_str().ok()).map(str::to_owned);
    (status, idem, resp.text().await.unwrap())
}

/// A name no other test (or earlier run against the same server) uses.
pub fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{tag}-{}-{nanos}", std::process::id())
}

/// A config file for a replica: the shared store, one flow (`orders.create`) with one step on
/// `up`.
pub fn replica_config(
    dir: &TempDir,
    store_url: &str,
    up: &super::upstream::Upstream,
    lease_ms: u64,
    timeout_ms: u64,
) -> String {
    replica_config_serving(dir, store_url, up, lease_ms, timeout_ms, "orders.create")
}

/// [`replica_config`] whose flow is named `method`. Replicas resume every pending event of a
/// method they serve on their store, so tests that run at the same time on one shared store
/// (or after an earlier run left an event pending there) each serve a method of their own:
/// otherwise one test's replicas would run another's event against their own upstream.
pub fn replica_config_serving(
    dir: &TempDir,
    store_url: &str,
    up: &super::upstream::Upstream,
    lease_ms: u64,
    timeout_ms: u64,
    method: &str,
) -> String {
    let path = dir.file("replica.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[store]
url = "{store_url}"
lease_ms = {lease_ms}
resume_interval_ms = 200
redis_prefix = "{prefix}"

[[methods]]
name = "{method}"
kind = "command"
timeout_ms = {timeout_ms}

  [[methods.steps]]
  name = "charge"
  url = "{charge}"
"#,
            prefix = unique("oncerpc-replicas"),
            charge = up.url("charge"),
        ),
    )
    .unwrap();
    path.display().to_string()
}
