//! The `maxmemory-policy` check at connect, against a `redis-server` this test starts itself
//! on a free loopback port (the shared server's configuration is left alone).
use std::io::Write;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncerpc_core::Store;
use oncerpc_core::store::{Claim, ClaimRequest};
use oncerpc_store_redis::{RedisOptions, RedisStore};

/// A private `redis-server`, killed on drop.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    /// `None` (the test skips) when `redis-server` is not installed, except in CI.
    fn start(args: &[&str]) -> Option<Server> {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let spawned = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(args)
            .stdout(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
                assert!(!ci, "redis-server is required in CI: {e}");
                eprintln!("SKIPPED: redis-server not found ({e})");
                return None;
            }
        };
        let server = Server { child, url: format!("redis://127.0.0.1:{port}") };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {port} did not come up");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the store logs while `f` runs (on this thread: the tests are single-threaded).
async fn logged<T>(f: impl AsyncFnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
    let guard = tracing::subscriber::set_default(subscriber);
    let out = f().await;
    drop(guard);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

fn opts(production: bool) -> RedisOptions {
    RedisOptions { production, ..RedisOptions::new("oncerpc-policy") }
}

#[tokio::test]
async fn evicting_policy_is_refused_in_production_and_a_warning_in_dev() {
    let Some(server) = Server::start(&["--maxmemory-policy", "allkeys-lru"]) else { return };
    let e = RedisStore::connect_with(&server.url, opts(true)).await.err().expect("production refuses");
    let msg = e.to_string();
    assert!(msg.contains("allkeys-lru") && msg.contains("maxmemory-policy noeviction"), "{msg}");

    let (store, logs) = logged(async || RedisStore::connect_with(&server.url, opts(false)).await).await;
    let store = store.expect("development starts");
    assert!(logs.contains("WARN") && logs.contains("allkeys-lru"), "a warning: {logs}");
    store.ping().await.unwrap();
}

#[tokio::test]
async fn noeviction_starts_silently_in_production() {
    let Some(server) = Server::start(&["--maxmemory-policy", "noeviction"]) else { return };
    let (store, logs) = logged(async || RedisStore::connect_with(&server.url, opts(true)).await).await;
    store.expect("noeviction is fine");
    assert!(!logs.contains("WARN"), "no warning: {logs}");
}

#[tokio::test]
async fn a_renamed_config_command_is_a_warning() {
    let Some(server) = Server::start(&["--rename-command", "CONFIG", ""]) else { return };
    let (store, logs) = logged(async || RedisStore::connect_with(&server.url, opts(true)).await).await;
    store.expect("starts: the policy could not be checked");
    assert!(logs.contains("could not check maxmemory-policy"), "{logs}");
}

/// On a fresh server no script is loaded yet: the pipelined script + `WAIT` loads it and
/// retries, then fails closed for want of replicas.
#[tokio::test]
async fn wait_pipeline_loads_its_script() {
    let Some(server) = Server::start(&[]) else { return };
    let store = RedisStore::connect_with(&server.url, RedisOptions { wait_replicas: 1, ..opts(true) })
        .await
        .expect("connect");
    let key = oncerpc_core::testkit::fresh_key("m", "noscript");
    let req = ClaimRequest {
        key: &key,
        fingerprint: "fp",
        force_retry: false,
        lease: Duration::from_secs(60),
        ttl: Duration::from_secs(60),
    };
    match store.claim(req.clone()).await.expect("a claim") {
        Claim::Unconfirmed { error, .. } => assert!(error.contains("written to 0 of 1 replicas"), "{error}"),
        c => panic!("no replicas: {c:?}"),
    }
    assert!(matches!(store.claim(req).await.unwrap(), Claim::InProgress { .. }), "the claim itself landed");
}
