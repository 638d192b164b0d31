//! Process-level tests of the real `oncerpc` binary: serving, graceful shutdown on SIGTERM,
//! `check-config`, and JSON log lines.

mod common;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_oncerpc");

/// A generous bound on waits for the child process, so that a broken shutdown fails the test
/// instead of hanging it. Not a performance threshold.
const PATIENCE: Duration = Duration::from_secs(20);

/// An `oncerpc serve` child process with its stderr collected line by line.
struct Served {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<Vec<String>>>,
    stderr_done: mpsc::Receiver<()>,
}

impl Served {
    /// Start `oncerpc serve --listen 127.0.0.1:0 --store memory:// <extra>` and wait for the
    /// `oncerpc listening on ADDR` log line.
    fn start(extra: &[&str]) -> Served {
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--store", "memory://"])
            .args(extra)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn oncerpc serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = mpsc::channel::<SocketAddr>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let collected = lines.clone();
        // Keep draining stderr for the whole life of the child, so it never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = listening_addr(&line) {
                    let _ = addr_tx.send(addr);
                }
                collected.lock().unwrap().push(line);
            }
            let _ = done_tx.send(());
        });
        let addr = match addr_rx.recv_timeout(PATIENCE) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("no `listening on` line; stderr: {:#?}", lines.lock().unwrap());
            }
        };
        Served { child, addr, stderr: lines, stderr_done: done_rx }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn sigterm(&self) {
        let status = Command::new("kill").args(["-TERM", &self.pid()]).status().expect("run kill");
        assert!(status.success(), "kill -TERM {} failed", self.pid());
    }

    /// Wait (bounded) for the process to exit; then for its stderr to be fully read.
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let _ = self.stderr_done.recv_timeout(PATIENCE);
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("oncerpc did not exit; stderr: {:#?}", self.stderr_lines());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // Only our own child, by its handle.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `… oncerpc listening on 127.0.0.1:PORT …` → the address.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = &line[line.find("listening on ")? + "listening on ".len()..];
    let token: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']'))
        .collect();
    token.parse().ok()
}

async fn rpc(client: &reqwest::Client, url: &str, body: Value) -> Value {
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request sent");
    assert_eq!(resp.status().as_u16(), 200);
    resp.json().await.expect("JSON body")
}

/// A unique file under the temp dir with `contents`; removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> TempFile {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "oncerpc-test-{}-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
        ));
        std::fs::write(&path, contents).expect("write temp config");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn check_config(contents: &str) -> Output {
    let file = TempFile::new("config.toml", contents);
    Command::new(BIN)
        .arg("check-config")
        .arg(&file.0)
        .stdin(Stdio::null())
        .output()
        .expect("run oncerpc check-config")
}

// ---------------------------------------------------------------------------------------------
// serve + graceful shutdown

#[tokio::test]
async fn serve_answers_and_sigterm_finishes_in_flight_work_then_exits_0() {
    let mut server = Served::start(&[]);
    let client = common::http_client();
    let url = server.url("/rpc");

    let v = rpc(&client, &url, json!({"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1})).await;
    assert_eq!(v, json!({"jsonrpc":"2.0","result":19,"id":1}));

    // An 800 ms request in flight…
    let in_flight = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            rpc(&client, &url, json!({"jsonrpc":"2.0","method":"demo.sleep","params":{"ms":800},"id":"slow"}))
                .await
        })
    };
    // …give it time to reach the server (a margin for the request to be accepted, not a
    // measurement), then SIGTERM.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(!in_flight.is_finished(), "the request must still be in flight when SIGTERM is sent");
    server.sigterm();

    // The server stops accepting: new connections are refused while the request finishes.
    let addr = server.addr;
    let refused_while_in_flight = {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match tokio::net::TcpStream::connect(addr).await {
                // Refused once the listener is gone; reset when the SYN raced the close (the
                // kernel had begun the handshake on the listening socket that is now closed).
                // Either way the connection was not accepted.
                Err(e) => {
                    assert!(
                        matches!(
                            e.kind(),
                            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
                        ),
                        "{e}"
                    );
                    break !in_flight.is_finished();
                }
                Ok(_) => {
                    assert!(Instant::now() < deadline, "still accepting connections after SIGTERM");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    };

    let v = tokio::time::timeout(PATIENCE, in_flight).await.expect("in-flight request ended").expect("task");
    assert_eq!(v, json!({"jsonrpc":"2.0","result":{"slept_ms":800},"id":"slow"}), "full result");
    assert!(refused_while_in_flight, "the listener closed before the in-flight request ended");

    let status = server.wait_exit();
    assert!(
        status.success(),
        "graceful exit with status 0, got {status:?}; stderr: {:#?}",
        server.stderr_lines()
    );
    let err = std::net::TcpStream::connect(addr).expect_err("nothing listens after exit");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    assert!(
        server.stderr_lines().iter().any(|l| l.contains("SIGTERM")),
        "the shutdown is logged: {:#?}",
        server.stderr_lines()
    );
}

#[tokio::test]
async fn log_format_json_makes_every_stderr_line_a_json_object() {
    let mut server = Served::start(&["--log-format", "json"]);
    let client = common::http_client();
    let url = server.url("/rpc");
    let v =
        rpc(&client, &url, json!({"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":"j-1"})).await;
    assert_eq!(v["result"], 19);
    let v = rpc(&client, &url, json!({"jsonrpc":"2.0","method":"nope","id":"j-2"})).await;
    assert_eq!(v["error"]["code"], -32601);
    // A notification: its generated correlation id is in the header and on its log lines.
    let resp = client
        .post(&url)
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","method":"update","params":[1]}"#)
        .send()
        .await
        .expect("request sent");
    assert_eq!(resp.status().as_u16(), 204);
    let notification_cid = resp
        .headers()
        .get("x-correlation-id")
        .and_then(|h| h.to_str().ok())
        .expect("X-Correlation-Id on a notification")
        .to_owned();
    drop(client);
    server.sigterm();
    let status = server.wait_exit();
    assert!(status.success(), "{status:?}");

    let lines = server.stderr_lines();
    assert!(lines.len() >= 2, "at least the listening and stopped lines: {lines:#?}");
    let mut objects = Vec::new();
    for line in lines.iter().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        assert!(v.is_object(), "a JSON object per line: {line}");
        objects.push(v);
    }
    let text = |v: &Value| v.to_string();
    assert!(objects.iter().any(|o| text(o).contains("listening on")), "{lines:#?}");

    // SPEC §7: the request's line is structured — method, kind, tenant, duration, outcome —
    // and carries the correlation id (the request id's text).
    let field = |o: &Value, name: &str| -> Value {
        o.pointer(&format!("/span/{name}"))
            .or_else(|| o.pointer(&format!("/fields/{name}")))
            .or_else(|| o.get(name))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let j1: Vec<&Value> = objects.iter().filter(|o| field(o, "correlation_id") == "j-1").collect();
    assert!(!j1.is_empty(), "log lines of request j-1: {lines:#?}");
    assert!(
        j1.iter().any(|o| {
            field(o, "method") == "subtract"
                && field(o, "kind") == "query"
                && field(o, "tenant").is_string()
                && field(o, "outcome").is_string()
                && field(o, "duration_us").is_number()
        }),
        "a structured line with method, kind, tenant, outcome and duration for j-1: {j1:#?}"
    );
    assert!(
        objects.iter().any(|o| field(o, "correlation_id") == notification_cid.as_str()),
        "the notification's X-Correlation-Id {notification_cid} is on its log lines: {lines:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// check-config

#[test]
fn check_config_unknown_key_is_refused_naming_the_key() {
    let out = check_config("[batch]\nmax_sise = 3\n");
    assert!(!out.status.success(), "unknown key must be refused: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("max_sise"), "stderr names the key: {stderr}");
}

#[test]
fn check_config_unknown_top_level_key_is_refused_naming_the_key() {
    let out = check_config("listen = \"127.0.0.1:8080\"\nlisten_adress = \"x\"\n");
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("listen_adress"), "stderr names the key: {stderr}");
}

#[test]
fn check_config_valid_flow_and_tenant_exits_0_and_prints_the_method() {
    let out = check_config(
        r#"
mode = "production"
listen = "127.0.0.1:9090"

[store]
url = "memory://"
lease_ms = 60000

[batch]
enabled = true
max_size = 10

[[tenants]]
name = "acme"
api_keys = ["acme-secret-0123456789"]

[[methods]]
name = "orders.create"
kind = "command"
timeout_ms = 30000
params_schema = { type = "object", required = ["sku"] }

  [[methods.steps]]
  name = "reserve"
  url = "http://127.0.0.1:9000/reserve"
  [[methods.steps]]
  name = "confirm"
  url = "http://127.0.0.1:9000/confirm"
"#,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "valid config: {stdout}\n{stderr}");
    assert!(stdout.contains("orders.create"), "prints the method: {stdout}");
    assert!(stdout.contains("acme"), "prints the tenant: {stdout}");
}

#[test]
fn check_config_lease_not_exceeding_a_method_timeout_with_a_margin_is_refused() {
    // The margin is a tenth of the timeout, at least a second: 5000 + 1000.
    for lease in [5000, 4000, 5001, 5999] {
        let out = check_config(&format!(
            r#"
[store]
url = "memory://"
lease_ms = {lease}

[[methods]]
name = "slow.thing"
kind = "query"
timeout_ms = 5000
  [[methods.steps]]
  name = "only"
  url = "http://127.0.0.1:9/only"
"#
        ));
        assert!(!out.status.success(), "lease_ms {lease} < timeout 5000 + 1000 must be refused: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("lease_ms"), "the message names lease_ms: {stderr}");
    }
    // The timeout plus the margin is accepted.
    let out = check_config(
        "[store]\nurl = \"memory://\"\nlease_ms = 6000\n\n[[methods]]\nname = \"slow.thing\"\nkind = \"query\"\ntimeout_ms = 5000\n[[methods.steps]]\nname = \"only\"\nurl = \"http://127.0.0.1:9/only\"\n",
    );
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn check_config_ttl_not_far_above_the_lease_is_refused() {
    // A record must outlive its lease by far (10×): 600 s for the default 60 s lease.
    let out = check_config("[store]\nurl = \"memory://\"\nttl_secs = 599\n");
    assert!(!out.status.success(), "ttl 599 s with a 60 s lease must be refused: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ttl_secs") && stderr.contains("lease_ms"), "names both keys: {stderr}");
    let out = check_config("[store]\nurl = \"memory://\"\nttl_secs = 600\n");
    assert!(out.status.success(), "{out:?}");
}

// ---------------------------------------------------------------------------------------------
// production mode (SPEC §12)

fn refused(out: &Output, names: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must be refused: {out:?}");
    for n in names {
        assert!(stderr.contains(n), "the message names {n}: {stderr}");
    }
}

fn accepted(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "must be accepted: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

const SHA256_OF_TEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

#[test]
fn production_turns_the_demo_methods_off_by_default() {
    let stdout = accepted(&check_config("mode = \"production\"\n"));
    assert!(stdout.contains("demo        off"), "{stdout}");
    let stdout = accepted(&check_config("mode = \"dev\"\n"));
    assert!(stdout.contains("demo        registered"), "{stdout}");
}

#[test]
fn production_refuses_an_explicit_demo_true() {
    refused(&check_config("mode = \"production\"\ndemo = true\n"), &["demo"]);
    accepted(&check_config("mode = \"dev\"\ndemo = true\n"));
}

#[test]
fn production_refuses_a_public_listen_without_tenants_unless_allow_anonymous() {
    refused(
        &check_config("mode = \"production\"\nlisten = \"0.0.0.0:8080\"\n"),
        &["listen", "allow_anonymous"],
    );
    accepted(&check_config("mode = \"production\"\nlisten = \"0.0.0.0:8080\"\nallow_anonymous = true\n"));
    accepted(&check_config("mode = \"production\"\nlisten = \"[::1]:8080\"\n"));
    accepted(&check_config("mode = \"dev\"\nlisten = \"0.0.0.0:8080\"\n"));
    accepted(&check_config(
        "mode = \"production\"\nlisten = \"0.0.0.0:8080\"\n[[tenants]]\nname = \"a\"\napi_keys = [\"a-key-0123456789abc\"]\n",
    ));
}

#[test]
fn production_refuses_the_same_api_key_in_two_tenants() {
    let two = |a: &str, b: &str| {
        format!(
            "mode = \"production\"\n[[tenants]]\nname = \"acme\"\napi_keys = [{a:?}]\n[[tenants]]\nname = \"beta\"\napi_keys = [{b:?}]\n"
        )
    };
    let key = "shared-key-0123456789";
    refused(&check_config(&two(key, key)), &["tenants.beta", "acme"]);
    // A plaintext key and the hash of the same key are the same key.
    let long = "test-key-0123456789";
    let hashed = format!("sha256:{}", sha256_hex(long));
    refused(&check_config(&two(long, &hashed)), &["tenants.beta", "acme"]);
    refused(
        &check_config(&two(&hashed, &hashed.to_uppercase().replace("SHA256:", "sha256:"))),
        &["tenants.beta"],
    );
    accepted(&check_config(&two(key, "another-key-0123456789")));
}

#[test]
fn production_refuses_short_plaintext_api_keys() {
    let one =
        |k: &str, mode: &str| format!("mode = {mode:?}\n[[tenants]]\nname = \"acme\"\napi_keys = [{k:?}]\n");
    refused(&check_config(&one("fifteen-chars-x", "production")), &["tenants.acme.api_keys", "16"]);
    accepted(&check_config(&one("sixteen-chars-xx", "production")));
    accepted(&check_config(&one(&format!("sha256:{SHA256_OF_TEST}"), "production")));
    accepted(&check_config(&one("short", "dev")));
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn store_passwords_are_never_printed() {
    let secret = "s3cret";
    let out = check_config("[store]\nurl = \"postgres://app:s3cret@127.0.0.1:5432/db\"\n");
    let stdout = accepted(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("postgres://app:***@127.0.0.1:5432/db"), "{stdout}");
    assert!(!stdout.contains(secret) && !stderr.contains(secret), "{stdout}\n{stderr}");
    // Config errors print the URL masked too.
    let out = check_config("[store]\nurl = \"app:s3cret@127.0.0.1:5432/db\"\n");
    refused(&out, &["store.url", "***"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains(secret), "{out:?}");
    // So do the store's own errors (a URL the driver refuses, before any connection).
    let out = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            "postgres://app:s3cret@127.0.0.1:5432/db?bogus=1",
        ])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run oncerpc serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("store.url") && stderr.contains("***"), "{stderr}");
    assert!(!stderr.contains(secret) && !String::from_utf8_lossy(&out.stdout).contains(secret), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// logs that cannot be forged (SPEC §7)

#[tokio::test]
async fn logged_method_names_are_escaped_and_bounded_one_line_per_request() {
    let config = TempFile::new("config.toml", "[limits]\nmax_body_bytes = 4194304\n");
    let mut server = Served::start(&["--config", config.0.to_str().unwrap()]);
    let client = common::http_client();
    let url = server.url("/rpc");
    let forged = "2026-01-01T00:00:00.000000Z  INFO FORGED: admin logged in";
    let v = rpc(&client, &url, json!({"jsonrpc":"2.0","method":format!("evil\n{forged}\r\n"),"id":"log-1"}))
        .await;
    assert_eq!(v["error"]["code"], -32601);
    let huge = "m".repeat(1 << 20);
    let v = rpc(&client, &url, json!({"jsonrpc":"2.0","method":huge,"id":"log-2"})).await;
    assert_eq!(v["error"]["code"], -32601);
    let v = rpc(&client, &url, json!({"jsonrpc":"2.0","method":"tab\there\u{1b}[31m","id":"log-3"})).await;
    assert_eq!(v["error"]["code"], -32601);
    drop(client);
    server.sigterm();
    let status = server.wait_exit();
    assert!(status.success(), "{status:?}");

    let lines = server.stderr_lines();
    for line in &lines {
        assert!(line.len() < 2048, "a log line is bounded: {} bytes: {}…", line.len(), &line[..200]);
        assert!(!line.starts_with("2026-01-01") && !line.starts_with(forged), "forged line: {line:?}");
        assert!(!line.contains('\u{1b}'), "control character logged raw: {line:?}");
    }
    // The forged text is only ever inside the request's own line, escaped.
    let mentions: Vec<&String> = lines.iter().filter(|l| l.contains("FORGED")).collect();
    assert_eq!(mentions.len(), 1, "{mentions:#?}");
    assert!(mentions[0].contains("correlation_id=log-1"), "{mentions:#?}");
    for id in ["log-1", "log-2", "log-3"] {
        let own: Vec<&String> =
            lines.iter().filter(|l| l.contains(&format!("correlation_id={id}"))).collect();
        assert_eq!(own.len(), 1, "exactly one line for request {id}: {lines:#?}");
    }
    let one = lines.iter().find(|l| l.contains("correlation_id=log-1")).unwrap();
    assert!(
        one.contains(r"method=evil\n2026-01-01T00:00:00.000000Z  INFO FORGED: admin logged in\r\n"),
        "{one}"
    );
    let two = lines.iter().find(|l| l.contains("correlation_id=log-2")).unwrap();
    assert!(
        two.contains(&format!("method={}…", "m".repeat(128))) && !two.contains(&"m".repeat(129)),
        "{two}"
    );
    let three = lines.iter().find(|l| l.contains("correlation_id=log-3")).unwrap();
    assert!(three.contains(r"method=tab\there\u{1b}[31m"), "{three}");
}
