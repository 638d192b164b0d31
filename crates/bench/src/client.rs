//! A small blocking HTTP/1.1 client (hyper on a current-thread runtime) for the checks around
//! each measured run: the answers are read and judged here, never during a measured run.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::runtime::Runtime;

use crate::BoxError;

/// An answer.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    /// `X-Idempotency-Status`.
    pub idempotency: Option<String>,
    /// `Mcp-Session-Id`.
    pub session: Option<String>,
    pub body: Bytes,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// One keep-alive connection.
pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

pub struct Client {
    rt: Runtime,
}

impl Client {
    pub fn new() -> Result<Client, BoxError> {
        Ok(Client { rt: tokio::runtime::Builder::new_current_thread().enable_all().build()? })
    }

    pub fn connect(&self, addr: SocketAddr) -> Result<Conn, BoxError> {
        self.rt.block_on(async {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(Conn { sender, host: addr.to_string() })
        })
    }

    /// Send one request on `conn`.
    pub fn send(
        &self,
        conn: &mut Conn,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<Resp, BoxError> {
        self.rt.block_on(async {
            conn.sender.ready().await?;
            let mut req = Request::builder().method(method).uri(path).header(HOST, &conn.host);
            if !body.is_empty() {
                req = req.header(CONTENT_TYPE, "application/json");
            }
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            let req = req.body(Full::new(Bytes::from(body.to_owned())))?;
            let resp =
                tokio::time::timeout(std::time::Duration::from_secs(30), conn.sender.send_request(req))
                    .await
                    .map_err(|_| "no answer within 30 s")??;
            let (parts, body) = resp.into_parts();
            let body = body.collect().await?.to_bytes();
            let idempotency =
                parts.headers.get("x-idempotency-status").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let session =
                parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
            Ok(Resp { status: parts.status.as_u16(), idempotency, session, body })
        })
    }

    /// One request on a new connection.
    pub fn once(
        &self,
        addr: SocketAddr,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<Resp, BoxError> {
        let mut conn = self.connect(addr)?;
        self.send(&mut conn, method, path, headers, body)
    }
}
