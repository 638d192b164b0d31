//! A real upstream HTTP server for flow tests: counts calls per step, records the headers
//! it was sent, and can be told to fail or to be slow.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};

/// One call an upstream step received.
#[derive(Debug, Clone)]
pub struct Call {
    pub step: String,
    pub body: Value,
    pub idempotency_key: Option<String>,
    /// The `Idempotency-Key` header (imported OpenAPI operations send their step key there).
    pub key: Option<String>,
    /// The request's method, path and query, as it came.
    pub request: String,
    pub correlation_id: Option<String>,
    /// W3C Trace Context headers.
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    /// The `Authorization` header (oncerpc's own token for the upstream, `[upstream.oauth]`).
    pub authorization: Option<String>,
    /// When the call arrived.
    pub at: std::time::Instant,
}

/// A scripted answer: status and `Retry-After`.
type Scripted = (u16, Option<String>);

#[derive(Default)]
pub struct Behaviour {
    pub fail: AtomicBool,
    pub delay_ms: AtomicU64,
    /// Steps whose calls are slow (all when empty).
    pub slow_steps: Mutex<Vec<String>>,
    calls: Mutex<Vec<Call>>,
    /// Calls being answered right now, and the most there ever were at once.
    active: AtomicU64,
    max_active: AtomicU64,
    handshakes_failed: AtomicU64,
    /// Per step, answers given before the normal one: (status, `Retry-After`), in order.
    scripted: Mutex<HashMap<String, std::collections::VecDeque<Scripted>>>,
}

pub struct Upstream {
    pub addr: SocketAddr,
    pub state: Arc<Behaviour>,
    task: tokio::task::JoinHandle<()>,
    scheme: &'static str,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let state = Arc::new(Behaviour::default());
        let app = Router::new().route("/{step}", post(step)).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Upstream { addr, state, task, scheme: "http" }
    }

    /// The same upstream over HTTPS with `tls` (rustls); a connection whose handshake fails
    /// is dropped (and counted in `handshakes_failed`).
    pub async fn start_tls(tls: Arc<rustls::ServerConfig>) -> Upstream {
        let state = Arc::new(Behaviour::default());
        let app = Router::new().route("/{step}", post(step)).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let (acceptor, app, st) = (acceptor.clone(), app.clone(), st.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        st.handshakes_failed.fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    let svc = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Upstream { addr, state, task, scheme: "https" }
    }

    /// Connections whose TLS handshake failed ([`Upstream::start_tls`]).
    pub fn handshakes_failed(&self) -> u64 {
        self.state.handshakes_failed.load(Ordering::SeqCst)
    }

    pub fn url(&self, step: &str) -> String {
        format!("{}://{}/{step}", self.scheme, self.addr)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().unwrap().clone()
    }

    pub fn count(&self, step: &str) -> usize {
        self.calls().iter().filter(|c| c.step == step).count()
    }

    pub fn counts(&self) -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for c in self.calls() {
            *m.entry(c.step).or_default() += 1;
        }
        m
    }

    /// The calls this upstream is answering now.
    pub fn active(&self) -> u64 {
        self.state.active.load(Ordering::SeqCst)
    }

    /// The most calls this upstream was answering at the same time.
    pub fn max_concurrency(&self) -> u64 {
        self.state.max_active.load(Ordering::SeqCst)
    }

    /// The next calls of `step` get these answers, one each, before the normal one.
    pub fn script(&self, step: &str, answers: &[(u16, Option<&str>)]) {
        let mut s = self.state.scripted.lock().unwrap();
        s.entry(step.to_owned()).or_default().extend(answers.iter().map(|(c, r)| (*c, r.map(str::to_owned))));
    }

    pub fn set_fail(&self, fail: bool) {
        self.state.fail.store(fail, Ordering::SeqCst);
    }

    pub fn set_delay(&self, ms: u64, steps: &[&str]) {
        *self.state.slow_steps.lock().unwrap() = steps.iter().map(|s| s.to_string()).collect();
        self.state.delay_ms.store(ms, Ordering::SeqCst);
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Echoes what it got: `{"step": name, "n": calls so far to this step, "input": body}`.
async fn step(
    State(st): State<Arc<Behaviour>>,
    Path(step): Path<String>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> impl IntoResponse {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let input: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let n = {
        let mut calls = st.calls.lock().unwrap();
        calls.push(Call {
            step: step.clone(),
            body: input.clone(),
            idempotency_key: header("x-idempotency-key"),
            key: header("idempotency-key"),
            request: format!("{method} {uri}"),
            correlation_id: header("x-correlation-id"),
            traceparent: header("traceparent"),
            tracestate: header("tracestate"),
            authorization: header("authorization"),
            at: std::time::Instant::now(),
        });
        calls.iter().filter(|c| c.step == step).count()
    };
    let now_active = st.active.fetch_add(1, Ordering::SeqCst) + 1;
    st.max_active.fetch_max(now_active, Ordering::SeqCst);
    let delay = st.delay_ms.load(Ordering::SeqCst);
    let slow = {
        let steps = st.slow_steps.lock().unwrap();
        steps.is_empty() || steps.contains(&step)
    };
    if delay > 0 && slow {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    st.active.fetch_sub(1, Ordering::SeqCst);
    let scripted = st.scripted.lock().unwrap().get_mut(&step).and_then(|q| q.pop_front());
    if let Some((code, retry_after)) = scripted {
        let mut resp = (StatusCode::from_u16(code).unwrap(), format!("scripted {code}")).into_response();
        if let Some(r) = retry_after {
            resp.headers_mut().insert("retry-after", r.parse().unwrap());
        }
        return resp;
    }
    if st.fail.load(Ordering::SeqCst) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "upstream exploded".to_string()).into_response();
    }
    (StatusCode::OK, json!({ "step": step, "n": n, "input": input }).to_string()).into_response()
}

/// A command flow `name` whose steps are `steps` on `up` (5 s timeout; params need `sku`).
pub fn flow(name: &str, up: &Upstream, steps: &[&str]) -> oncerpc::config::MethodConfig {
    oncerpc::config::MethodConfig {
        name: name.into(),
        kind: oncerpc_core::Kind::Command,
        notification_allowed: false,
        timeout_ms: Some(5_000),
        params_schema: Some(json!({"type": "object", "required": ["sku"]})),
        description: None,
        steps: steps
            .iter()
            .map(|s| oncerpc::config::StepConfig { name: (*s).into(), url: up.url(s), ..Default::default() })
            .collect(),
        ..Default::default()
    }
}
