//! An HTTP proxy on loopback in front of a gateway that injects one fault per request from a
//! schedule: drop the request unanswered, drop the answer after the gateway answered, answer
//! `503` (or any status) itself, or forward after a delay. It records every request it got
//! (path and idempotency key) and can be pointed at another gateway (a restarted one).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

/// What the proxy does with one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Forward it and its answer.
    Pass,
    /// Close the connection without forwarding: the gateway never sees it.
    DropRequest,
    /// Forward it, wait for the gateway's answer, then close the connection without it.
    DropResponse,
    /// Answer `503` (no `Retry-After`, plain text) without forwarding.
    Unavailable,
    /// Answer this status with an HTML page, without forwarding.
    Answer(u16),
    /// Forward it after this delay.
    Delay(Duration),
}

/// A request the proxy received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub key: Option<String>,
    pub body: String,
    pub fault: Fault,
    pub at: Instant,
}

struct State {
    target: Mutex<SocketAddr>,
    schedule: Mutex<VecDeque<Fault>>,
    seen: Mutex<Vec<Seen>>,
    client: reqwest::Client,
}

pub struct FaultProxy {
    pub addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

type Failure = Box<dyn std::error::Error + Send + Sync>;

impl FaultProxy {
    pub async fn start(target: SocketAddr) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            target: Mutex::new(target),
            schedule: Mutex::default(),
            seen: Mutex::default(),
            client: super::http_client_builder().pool_max_idle_per_host(0).build().unwrap(),
        });
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(st.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        FaultProxy { addr, state, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Forward to another gateway from now on.
    pub fn retarget(&self, target: SocketAddr) {
        *self.state.target.lock().unwrap() = target;
    }

    /// The next requests get these faults, one each, in order; then `Pass`.
    pub fn schedule(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.schedule.lock().unwrap().extend(faults);
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// Forget the requests seen and the faults not used yet.
    pub fn reset(&self) {
        self.state.seen.lock().unwrap().clear();
        self.state.schedule.lock().unwrap().clear();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(st: Arc<State>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Failure> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let fault = st.schedule.lock().unwrap().pop_front().unwrap_or(Fault::Pass);
    let header = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let path = parts.uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
    st.seen.lock().unwrap().push(Seen {
        path: path.clone(),
        key: header("x-idempotency-key"),
        body: String::from_utf8_lossy(&body).into_owned(),
        fault: fault.clone(),
        at: Instant::now(),
    });
    match fault {
        Fault::DropRequest => return Err("request dropped by the fault proxy".into()),
        Fault::Unavailable => return Ok(plain(503, "text/plain", "unavailable")),
        Fault::Answer(status) => return Ok(plain(status, "text/html", "<html><body>not here</body></html>")),
        Fault::Delay(d) => tokio::time::sleep(d).await,
        Fault::Pass | Fault::DropResponse => {}
    }
    let target = *st.target.lock().unwrap();
    let mut fwd = st.client.request(parts.method.clone(), format!("http://{target}{path}")).body(body);
    for name in ["content-type", "x-idempotency-key", "x-force-retry", "x-api-key", "x-correlation-id"] {
        if let Some(v) = parts.headers.get(name) {
            fwd = fwd.header(name, v.clone());
        }
    }
    let answer = fwd.send().await?;
    let status = answer.status().as_u16();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await?;
    if fault == Fault::DropResponse {
        return Err("response dropped by the fault proxy".into());
    }
    let mut resp = Response::new(Full::new(bytes));
    *resp.status_mut() = StatusCode::from_u16(status)?;
    for (name, value) in &headers {
        if name != "content-length" && name != "transfer-encoding" && name != "connection" {
            resp.headers_mut().insert(name.clone(), value.clone());
        }
    }
    Ok(resp)
}

fn plain(status: u16, content_type: &str, body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert("content-type", content_type.parse().unwrap());
    resp
}
