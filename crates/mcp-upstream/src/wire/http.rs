//! Streamable HTTP: every message is a POST; a request's answer comes back as JSON or as an
//! event stream (progress first, the answer last). In the session era the upstream's
//! session id and version go on every POST, and a GET stream carries what it sends outside
//! a request (`notifications/tools/list_changed`). In the stateless era every POST carries
//! `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and the `Mcp-Param-*` headers of the
//! tool's `x-mcp-header` arguments.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use http_body_util::BodyExt;
use oncerpc_core::error_chain;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Response, StatusCode};
use serde_json::Value;
use sse_stream::SseStream;

use crate::oauth::TokenSource;
use crate::shared::{Era, Failure, Headers, MAX_MESSAGE, Shared};

const SESSION_ID: &str = "mcp-session-id";

pub(crate) struct HttpWire {
    client: reqwest::Client,
    url: String,
    /// The config's headers for this upstream (oncerpc's own credentials).
    headers: HeaderMap,
    /// oncerpc's own access tokens for the upstream (`oauth`): one on every request.
    tokens: Option<Arc<TokenSource>>,
    session: Mutex<Option<HeaderValue>>,
    /// The era of the last message sent: what an answer to the upstream's request uses.
    era: Mutex<Option<Era>>,
    shared: Arc<Shared>,
}

/// A body's read failed, or it grew past [`MAX_MESSAGE`].
#[derive(Debug)]
struct BodyError(String);

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BodyError {}

impl HttpWire {
    pub(crate) fn open(
        client: reqwest::Client,
        url: &str,
        headers: &[(String, String)],
        tokens: Option<Arc<TokenSource>>,
        shared: Arc<Shared>,
    ) -> Result<Arc<HttpWire>, String> {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header {k:?}: {e}"))?;
            let value = HeaderValue::from_str(v).map_err(|e| format!("header {k:?}: {e}"))?;
            map.insert(name, value);
        }
        Ok(Arc::new(HttpWire {
            client,
            url: url.to_owned(),
            headers: map,
            tokens,
            session: Mutex::default(),
            era: Mutex::default(),
            shared,
        }))
    }

    fn session(&self) -> Option<HeaderValue> {
        self.session.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A request to the upstream with the headers of `era` (and of the session it gave).
    fn builder(&self, method: reqwest::Method, era: &Era) -> reqwest::RequestBuilder {
        let mut req = self.client.request(method, &self.url).headers(self.headers.clone());
        match era {
            Era::Stateless => {
                req = req.header("mcp-protocol-version", oncerpc_mcp::stateless::STATELESS_VERSIONS[0])
            }
            Era::Session(v) if !v.is_empty() => req = req.header("mcp-protocol-version", v.as_str()),
            Era::Session(_) => {}
        }
        if let Some(session) = self.session() {
            req = req.header(SESSION_ID, session);
        }
        req
    }

    /// oncerpc's access token for the upstream, if it has an `oauth` client: the cached one,
    /// or one fetched now. A token endpoint that fails fails this message (nothing was sent).
    async fn bearer(&self) -> Result<Option<Arc<str>>, Failure> {
        let Some(tokens) = &self.tokens else { return Ok(None) };
        match tokens.token().await {
            Ok(token) => Ok(Some(token)),
            Err(why) => Err(Failure::Garbage(format!("no access token for the upstream: {why}"))),
        }
    }

    /// Send `req` with oncerpc's `token`; an upstream that refuses it (`401`) makes it fetch
    /// a new one and send once more.
    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        token: Option<Arc<str>>,
    ) -> Result<Response, reqwest::Error> {
        let again = req.try_clone();
        let resp = with_token(req, token.as_deref()).send().await?;
        let (Some(token), Some(tokens), Some(again)) = (token, &self.tokens, again) else { return Ok(resp) };
        if resp.status() != StatusCode::UNAUTHORIZED {
            return Ok(resp);
        }
        drop(resp);
        tokens.forget(&token);
        tracing::info!("MCP upstream refused oncerpc's access token (401): fetching a new one, once");
        let fresh = self.bearer().await.ok().flatten();
        with_token(again, fresh.as_deref()).send().await
    }

    async fn post(
        &self,
        message: &Value,
        method: &str,
        era: &Era,
        headers: &Headers,
    ) -> Result<Response, Failure> {
        *self.era.lock().unwrap_or_else(|e| e.into_inner()) = Some(era.clone());
        let mut req = self
            .builder(reqwest::Method::POST, era)
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json");
        if *era == Era::Stateless {
            req = req.header("mcp-method", method);
            if let Some(name) = &headers.name {
                req = req.header("mcp-name", name.as_str());
            }
            for (name, value) in &headers.params {
                req = req.header(format!("mcp-param-{name}"), value.as_str());
            }
        }
        let body = serde_json::to_vec(message).map_err(|e| Failure::Garbage(e.to_string()))?;
        // The URL stays out of the error (and so of the log): its query may hold a token.
        let token = self.bearer().await?;
        match self.send(req.body(body), token).await.map_err(reqwest::Error::without_url) {
            Ok(resp) => Ok(resp),
            // No answer in time is this request's failure; anything else (refused, reset,
            // TLS) means the upstream is not there: the connection is made again.
            Err(e) if e.is_timeout() || e.is_builder() => Err(Failure::Garbage(error_chain(&e))),
            Err(e) => {
                let why = format!("cannot reach the upstream: {}", error_chain(&e));
                self.shared.close(&why);
                Err(Failure::Closed(why))
            }
        }
    }

    pub(crate) async fn request(
        self: &Arc<Self>,
        id: i64,
        method: &str,
        message: &Value,
        era: &Era,
        headers: &Headers,
    ) -> Result<(), Failure> {
        let resp = self.post(message, method, era, headers).await?;
        if method == "initialize"
            && let Some(session) = resp.headers().get(SESSION_ID)
        {
            *self.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(session.clone());
        }
        let status = resp.status();
        if status == StatusCode::NOT_FOUND && self.session().is_some() {
            self.shared.close("the upstream ended the session");
            return Err(Failure::Closed("the upstream ended the session".into()));
        }
        if status == StatusCode::ACCEPTED {
            // The answer will come on the GET stream.
            return Ok(());
        }
        if is_event_stream(&resp) && status.is_success() {
            return self.events(resp, Some(id)).await;
        }
        let body = read(resp).await.map_err(|e| self.broken(&e))?;
        match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Array(messages)) => messages.into_iter().for_each(|m| self.route(m)),
            Ok(message) => self.route(message),
            Err(_) if status.is_success() => return Err(Failure::Garbage("the answer is not JSON".into())),
            Err(_) => {}
        }
        if self.shared.awaits(id) {
            return Err(Failure::Garbage(format!("HTTP {status} without an answer")));
        }
        Ok(())
    }

    /// An event stream's messages, routed in order, until the answer to `until` (or the
    /// stream's end).
    async fn events(self: &Arc<Self>, resp: Response, until: Option<i64>) -> Result<(), Failure> {
        let body = http_body_util::Limited::new(reqwest::Body::from(resp), MAX_MESSAGE)
            .map_err(|e| BodyError(without_url(e)));
        let mut events = SseStream::new(body);
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| self.broken(&e.to_string()))?;
            let Some(data) = event.data.filter(|d| !d.is_empty()) else { continue };
            match serde_json::from_str::<Value>(&data) {
                Ok(message) => self.route(message),
                Err(_) => tracing::debug!("MCP upstream: an event that is not JSON, ignored"),
            }
            if until.is_some_and(|id| !self.shared.awaits(id)) {
                return Ok(());
            }
        }
        match until {
            Some(id) if self.shared.awaits(id) => {
                Err(Failure::Garbage("the event stream ended without an answer".into()))
            }
            _ => Ok(()),
        }
    }

    /// Route one received message; the answer to a request of the upstream's own is POSTed
    /// on a task of its own.
    fn route(self: &Arc<Self>, message: Value) {
        if let Some(reply) = self.shared.route(message) {
            let this = self.clone();
            tokio::spawn(async move { this.notify(&reply, None).await });
        }
    }

    /// A stream or body broke off: the upstream went away mid-answer.
    fn broken(&self, why: &str) -> Failure {
        let why = format!("the answer broke off: {why}");
        self.shared.close(&why);
        Failure::Closed(why)
    }

    pub(crate) async fn notify(&self, message: &Value, era: Option<&Era>) -> Result<(), Failure> {
        let era = match era {
            Some(e) => e.clone(),
            None => self.era.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or(Era::Stateless),
        };
        let method = message["method"].as_str().unwrap_or_default().to_owned();
        let resp = self.post(message, &method, &era, &Headers::default()).await?;
        let status = resp.status();
        if status.is_success() { Ok(()) } else { Err(Failure::Garbage(format!("HTTP {status}"))) }
    }

    /// The session's GET stream, read until the connection closes; opened again a second
    /// after it ends. An upstream that offers none (`405`) is not asked again.
    pub(crate) fn listen(self: Arc<Self>, era: Era) {
        tokio::spawn(async move {
            let shared = self.shared.clone();
            let listening = async {
                loop {
                    let get = self.builder(reqwest::Method::GET, &era).header(ACCEPT, "text/event-stream");
                    // Without a token (its endpoint failing) the stream waits for the next round.
                    let sent = match self.bearer().await {
                        Ok(token) => self.send(get, token).await,
                        Err(_) => {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                    };
                    match sent {
                        Ok(resp) if resp.status() == StatusCode::METHOD_NOT_ALLOWED => return,
                        Ok(resp) if resp.status() == StatusCode::NOT_FOUND => {
                            self.shared.close("the upstream ended the session");
                            return;
                        }
                        Ok(resp) if resp.status().is_success() && is_event_stream(&resp) => {
                            let _ = self.events(resp, None).await;
                        }
                        Ok(_) | Err(_) => {}
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            };
            tokio::select! {
                _ = listening => {}
                _ = shared.closed() => {}
            }
        });
    }

    /// Tell a session-era upstream its session is over (best effort).
    pub(crate) fn delete_session(&self, era: &Era) {
        if self.session().is_none() || self.shared.is_closed() {
            return;
        }
        let req = self.builder(reqwest::Method::DELETE, era);
        let token = self.tokens.as_ref().and_then(|t| t.cached());
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_secs(5), with_token(req, token.as_deref()).send()).await;
        });
    }
}

/// `req` with `Authorization: Bearer token`, if there is a token.
fn with_token(req: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(token) => req.bearer_auth(token),
        None => req,
    }
}

/// A body's error without the URL reqwest puts in it.
fn without_url(e: Box<dyn std::error::Error + Send + Sync>) -> String {
    match e.downcast::<reqwest::Error>() {
        Ok(e) => e.without_url().to_string(),
        Err(e) => e.to_string(),
    }
}

fn is_event_stream(resp: &Response) -> bool {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/event-stream"))
}

/// A whole body, at most [`MAX_MESSAGE`] bytes.
async fn read(mut resp: Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.without_url().to_string())? {
        if body.len() + chunk.len() > MAX_MESSAGE {
            return Err(format!("an answer over {MAX_MESSAGE} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
