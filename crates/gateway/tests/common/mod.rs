//! Shared harness for integration tests: a real oncerpc HTTP server on a loopback port, in
//! this process, and a real HTTP client.
#![allow(dead_code)]

pub mod console;
pub mod faults;
pub mod guide;
pub mod mcp2026;
pub mod mcp_clients;
pub mod mcp_upstream;
pub mod oidc;
pub mod pki;
pub mod prism;
pub mod process;
pub mod proxy;
pub mod reload;
pub mod tasks;
pub mod tool_schemas;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::Arc;

use oncerpc::{App, Config};
use serde_json::Value;
use tokio::sync::oneshot;

pub struct TestServer {
    pub addr: SocketAddr,
    pub client: reqwest::Client,
    pub demo: Arc<oncerpc::demo::DemoState>,
    pub dispatcher: Arc<oncerpc_core::Dispatcher>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

/// A reqwest builder: reqwest is built without a TLS provider of its own (the gateway uses
/// rustls's ring provider), so the process default is installed first.
pub fn http_client_builder() -> reqwest::ClientBuilder {
    oncerpc::upstream::install_crypto_provider();
    reqwest::Client::builder()
}

/// A default reqwest client (see [`http_client_builder`]).
pub fn http_client() -> reqwest::Client {
    http_client_builder().build().expect("an HTTP client")
}

/// A raw HTTP answer.
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The embedded default with an in-memory store, on a free loopback port.
pub fn test_config() -> Config {
    let mut cfg = Config { listen: "127.0.0.1:0".into(), ..Config::default() };
    cfg.store.url = "memory://".into();
    cfg
}

async fn answer(resp: reqwest::Response) -> Answer {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.expect("body read");
    Answer { status, headers, body }
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(test_config()).await
    }

    pub async fn start_with(config: Config) -> TestServer {
        let app = App::new(config).await.expect("valid test config");
        Self::start_app(app).await
    }

    pub async fn start_app(app: App) -> TestServer {
        let demo = app.demo.clone();
        let dispatcher = app.dispatcher.clone();
        let listener = app.bind().await.expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(app.serve(listener, async move {
            let _ = rx.await;
        }));
        TestServer { addr, client: http_client(), demo, dispatcher, shutdown: Some(tx), task: Some(task) }
    }

    /// Wait (bounded) until the record of (tenant, method, key) is `processing`: the first
    /// execution has claimed it. Races between test requests are thereby avoided.
    pub async fn wait_processing(&self, tenant: &str, method: &str, key: &str) {
        wait_processing(&**self.dispatcher.store(), tenant, method, key).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// POST a raw body to /rpc.
    pub async fn post(&self, body: impl Into<reqwest::Body>) -> Answer {
        self.post_with(body, &[]).await
    }

    /// POST a raw body to /rpc with extra headers.
    pub async fn post_with(&self, body: impl Into<reqwest::Body>, headers: &[(&str, &str)]) -> Answer {
        let mut req = self.client.post(self.url("/rpc")).header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.body(body).send().await.expect("request sent");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.text().await.expect("body read");
        Answer { status, headers, body }
    }

    /// POST a JSON value to /rpc and parse the JSON answer.
    pub async fn call(&self, body: Value) -> Value {
        self.post(body.to_string()).await.json()
    }

    /// POST a raw body to any path (the flows door) with extra headers.
    pub async fn post_path(
        &self,
        path: &str,
        body: impl Into<reqwest::Body>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut req = self.client.post(self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        answer(req.body(body).send().await.expect("request sent")).await
    }

    /// GET with extra headers.
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        let mut req = self.client.get(self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        answer(req.send().await.expect("request sent")).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        let resp = self.client.get(self.url(path)).send().await.expect("request sent");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.text().await.expect("body read");
        Answer { status, headers, body }
    }

    /// Graceful shutdown; waits for the server task to end.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.expect("server task").expect("server ran");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Wait (bounded) until a record is `processing` in `store`.
pub async fn wait_processing(store: &dyn oncerpc_core::Store, tenant: &str, method: &str, key: &str) {
    use oncerpc_core::store::{RecordKey, RecordState};
    let key = RecordKey::new(tenant, method, key);
    for _ in 0..1000 {
        if let Ok(Some(r)) = store.get(&key).await
            && matches!(r.state, RecordState::Processing { .. })
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("{key:?} never became processing");
}
