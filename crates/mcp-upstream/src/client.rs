//! oncerpc's MCP client of one upstream: the handshake in the era the upstream speaks
//! (`server/discover`, else `initialize`), requests matched to their answers by id, and what
//! the upstream sends on its own — progress (passed on in the order received, before the
//! answer that follows it), `notifications/tools/list_changed`, `ping` (answered) and any
//! other request (`-32601`: oncerpc offers the upstream no capability).
//!
//! The bytes travel over a [`Wire`](crate::wire::Wire): a POST per message (Streamable HTTP)
//! or lines on a child's stdin/stdout. Everything received goes through [`Shared::route`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncerpc_core::{Progress, ToolProgress};
use oncerpc_mcp::SESSION_VERSIONS;
use oncerpc_mcp::stateless::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, STATELESS_VERSIONS};
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::wire::Wire;

/// The `_meta` member naming the client in a stateless request.
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// Pages of `tools/list` read at most (an upstream whose cursors never end is cut off).
const MAX_PAGES: usize = 100;

/// The progress sinks of the calls in flight whose client listens, by progress token.
pub(crate) type Listeners = Arc<Mutex<HashMap<i64, Progress>>>;

/// Which revision the connection speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Era {
    /// `2026-07-28`: every request carries its version and capabilities in `_meta`.
    Stateless,
    /// `initialize` done: this version, and over HTTP the session the upstream gave.
    Session(String),
}

/// Why a request got no result.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The connection is gone (the command exited, the session ended, the host is down).
    Closed(String),
    /// The upstream answered with a JSON-RPC error.
    Error { code: i64, message: String },
    /// It answered something that is not MCP, or the transport refused this one message.
    Garbage(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Closed(why) => write!(f, "connection closed: {why}"),
            Failure::Error { code, message, .. } => write!(f, "error {code}: {message}"),
            Failure::Garbage(why) => write!(f, "{why}"),
        }
    }
}

/// What both sides of a connection share: the requests waiting for their answers, the
/// listeners of progress, and whether it is closed (and why).
pub(crate) struct Shared {
    pending: Mutex<HashMap<i64, oneshot::Sender<Result<Value, Failure>>>>,
    listeners: Listeners,
    relist: Arc<Notify>,
    closed: CancellationToken,
    why: Mutex<Option<String>>,
}

impl Shared {
    pub(crate) fn new(listeners: Listeners, relist: Arc<Notify>) -> Arc<Shared> {
        Arc::new(Shared {
            pending: Mutex::default(),
            listeners,
            relist,
            closed: CancellationToken::new(),
            why: Mutex::default(),
        })
    }

    /// Close the connection: every request waiting fails with `why` (the first reason given
    /// is kept).
    pub(crate) fn close(&self, why: &str) {
        {
            let mut kept = self.why.lock().unwrap_or_else(|e| e.into_inner());
            if kept.is_none() {
                *kept = Some(why.to_owned());
            }
        }
        self.closed.cancel();
        let waiting: Vec<_> = self.pending.lock().unwrap_or_else(|e| e.into_inner()).drain().collect();
        for (_, tx) in waiting {
            let _ = tx.send(Err(Failure::Closed(why.to_owned())));
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Why it closed (once it has).
    pub(crate) fn why(&self) -> String {
        self.why.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default()
    }

    pub(crate) fn closed(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.closed.cancelled()
    }

    /// Whether the answer to request `id` is still awaited.
    pub(crate) fn awaits(&self, id: i64) -> bool {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&id)
    }

    /// One message received from the upstream. A request of its own is answered through
    /// `wire` (on a task: the reader is not held up).
    pub(crate) fn route(&self, message: Value, wire: &Wire) {
        let Value::Object(mut message) = message else {
            tracing::debug!("MCP upstream sent a message that is not an object: ignored");
            return;
        };
        let method = message.get("method").and_then(Value::as_str).map(str::to_owned);
        match (method, message.remove("id")) {
            (Some(method), Some(id)) => {
                let answer = if method == "ping" {
                    json!({ "jsonrpc": "2.0", "id": id, "result": {} })
                } else {
                    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32601, "message": "Method not found" } })
                };
                let wire = wire.clone();
                tokio::spawn(async move { wire.notify(answer, None).await });
            }
            (Some(method), None) => self.notification(&method, message.get("params")),
            (None, Some(id)) => {
                let Some(id) = id.as_i64() else { return };
                let Some(tx) = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) else {
                    // Late (its caller gave up) or never asked for.
                    return;
                };
                let answer = match (message.remove("result"), message.remove("error")) {
                    (Some(result), None) => Ok(result),
                    (None, Some(error)) => Err(Failure::Error {
                        code: error["code"].as_i64().unwrap_or(0),
                        message: error["message"].as_str().unwrap_or_default().to_owned(),
                    }),
                    _ => Err(Failure::Garbage("an answer with neither result nor error".into())),
                };
                let _ = tx.send(answer);
            }
            (None, None) => tracing::debug!("MCP upstream sent a message that is not JSON-RPC: ignored"),
        }
    }

    fn notification(&self, method: &str, params: Option<&Value>) {
        match method {
            "notifications/progress" => {
                let Some(p) = params else { return };
                let token = match &p["progressToken"] {
                    Value::Number(n) => n.as_i64(),
                    Value::String(s) => s.parse().ok(),
                    _ => None,
                };
                let (Some(token), Some(progress)) = (token, p["progress"].as_f64()) else { return };
                // A token of no call in flight (late, or made up by the upstream) is dropped.
                let sink = self.listeners.lock().unwrap_or_else(|e| e.into_inner()).get(&token).cloned();
                if let Some(sink) = sink {
                    sink.forward(&ToolProgress {
                        progress,
                        total: p["total"].as_f64(),
                        message: p["message"].as_str(),
                    });
                }
            }
            "notifications/tools/list_changed" => self.relist.notify_one(),
            _ => {}
        }
    }
}

/// A request in flight: its answer's slot, given up (and the upstream told, best effort)
/// when the caller stops waiting.
struct Waiting<'a> {
    connection: &'a Connection,
    id: i64,
    answered: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let removed =
            self.connection.shared.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
        if !self.answered && removed.is_some() && !self.connection.shared.is_closed() {
            let cancel = self.connection.message(
                None,
                "notifications/cancelled",
                json!({ "requestId": self.id, "reason": "oncerpc stopped waiting" }),
            );
            let wire = self.connection.wire.clone();
            let era = self.connection.era.clone();
            tokio::spawn(async move { wire.notify(cancel, Some(&era)).await });
        }
    }
}

/// One connection to an upstream, after its handshake.
pub(crate) struct Connection {
    pub(crate) shared: Arc<Shared>,
    wire: Wire,
    era: Era,
    next_id: AtomicI64,
}

/// An upstream's tool list: the tools as it listed them, and (stateless era) how long it may
/// be kept before it is read again.
pub(crate) struct Listing {
    pub tools: Vec<Value>,
    pub ttl: Option<Duration>,
}

/// The extra HTTP headers of one request of the stateless era: `Mcp-Name` and the
/// `Mcp-Param-*` of its `x-mcp-header` arguments.
#[derive(Default)]
pub(crate) struct Headers {
    pub name: Option<String>,
    pub params: Vec<(String, String)>,
}

impl Connection {
    /// Open `wire` and shake hands in the upstream's era: `server/discover` first (unless
    /// `legacy`), and `initialize` when that is refused. Whether it is a session-era server.
    pub(crate) async fn connect(
        open: impl Fn(Arc<Shared>) -> Result<Wire, String>,
        shared: impl Fn() -> Arc<Shared>,
        legacy: bool,
        discover_wait: Duration,
    ) -> Result<Connection, String> {
        if !legacy {
            let s = shared();
            let mut c =
                Connection { wire: open(s.clone())?, shared: s, era: Era::Stateless, next_id: 1.into() };
            match tokio::time::timeout(
                discover_wait,
                c.request("server/discover", json!({}), Headers::default()),
            )
            .await
            {
                Ok(Ok(result)) => {
                    let served = result["supportedVersions"].as_array().is_some_and(|v| {
                        v.iter().any(|v| v.as_str().is_some_and(|v| STATELESS_VERSIONS.contains(&v)))
                    });
                    if served {
                        return Ok(c);
                    }
                    tracing::debug!("MCP upstream: server/discover names no revision of ours: initialize");
                    c.era = Era::Session(String::new());
                    return c.initialize().await.map(|()| c);
                }
                // A JSON-RPC error to `server/discover`: a session-era server, on the same
                // connection (as the revision's compatibility rule says).
                Ok(Err(Failure::Error { code, .. })) if code != -32020 && code != -32021 => {
                    c.era = Era::Session(String::new());
                    return c.initialize().await.map(|()| c);
                }
                Ok(Err(e)) => tracing::debug!(error = %e, "MCP upstream: server/discover failed: initialize"),
                Err(_) => tracing::debug!("MCP upstream: no answer to server/discover: initialize"),
            }
            c.shared.close("server/discover refused");
        }
        let s = shared();
        let mut c = Connection {
            wire: open(s.clone())?,
            shared: s,
            era: Era::Session(String::new()),
            next_id: 1.into(),
        };
        c.initialize().await.map(|()| c)
    }

    async fn initialize(&mut self) -> Result<(), String> {
        let params = json!({
            "protocolVersion": SESSION_VERSIONS[0],
            "capabilities": {},
            "clientInfo": client_info(),
        });
        let result = self
            .request("initialize", params, Headers::default())
            .await
            .map_err(|e| format!("initialize: {e}"))?;
        let version = result["protocolVersion"].as_str().unwrap_or_default();
        if !SESSION_VERSIONS.contains(&version) {
            return Err(format!("initialize: the upstream speaks {version:?}, not a revision of ours"));
        }
        self.era = Era::Session(version.to_owned());
        let initialized = self.message(None, "notifications/initialized", json!({}));
        self.wire.notify(initialized, Some(&self.era)).await.map_err(|e| format!("initialized: {e}"))?;
        self.wire.listen(&self.era);
        Ok(())
    }

    pub(crate) fn era(&self) -> &Era {
        &self.era
    }

    /// A message of this connection's era: in the stateless one, `params._meta` carries the
    /// version, the client and its (no) capabilities.
    fn message(&self, id: Option<i64>, method: &str, mut params: Value) -> Value {
        if self.era == Era::Stateless && !method.starts_with("notifications/") {
            if !params.is_object() {
                params = json!({});
            }
            let meta = params.as_object_mut().expect("an object").entry("_meta").or_insert_with(|| json!({}));
            if let Value::Object(meta) = meta {
                meta.insert(META_PROTOCOL_VERSION.into(), json!(STATELESS_VERSIONS[0]));
                meta.insert(META_CLIENT_INFO.into(), client_info());
                meta.insert(META_CLIENT_CAPABILITIES.into(), json!({}));
            }
        }
        let mut message = Map::new();
        message.insert("jsonrpc".into(), json!("2.0"));
        if let Some(id) = id {
            message.insert("id".into(), json!(id));
        }
        message.insert("method".into(), json!(method));
        message.insert("params".into(), params);
        Value::Object(message)
    }

    /// Send a request and wait for its answer (the caller bounds the wait).
    pub(crate) async fn request(
        &self,
        method: &str,
        params: Value,
        headers: Headers,
    ) -> Result<Value, Failure> {
        if self.shared.is_closed() {
            return Err(Failure::Closed(self.shared.why()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.shared.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        let mut waiting = Waiting { connection: self, id, answered: false };
        let message = self.message(Some(id), method, params);
        if let Err(e) = self.wire.request(id, method, message, &self.era, headers).await {
            waiting.answered = true;
            return Err(e);
        }
        let answer = tokio::select! {
            answer = rx => answer.unwrap_or_else(|_| Err(Failure::Closed(self.shared.why()))),
            _ = self.shared.closed() => Err(Failure::Closed(self.shared.why())),
        };
        waiting.answered = true;
        answer
    }

    /// Every tool the upstream lists (all pages).
    pub(crate) async fn list_tools(&self) -> Result<Listing, Failure> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut ttl = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let mut page = self.request("tools/list", params, Headers::default()).await?;
            let Some(listed) = page.get_mut("tools").and_then(Value::as_array_mut) else {
                return Err(Failure::Garbage("tools/list: no tools array".into()));
            };
            tools.extend(listed.drain(..).filter(|t| t["name"].is_string()));
            ttl = page["ttlMs"].as_u64().map(Duration::from_millis).or(ttl);
            match page["nextCursor"].as_str() {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(Listing { tools, ttl }),
            }
        }
        Err(Failure::Garbage(format!("tools/list: more than {MAX_PAGES} pages")))
    }

    /// `tools/call`: the upstream's result as it gave it (an `isError` one too), less the
    /// stateless revision's `resultType` framing; a result that is not a tool result is
    /// garbage.
    pub(crate) async fn call_tool(&self, params: Value, headers: Headers) -> Result<Value, Failure> {
        let mut result = self.request("tools/call", params, headers).await?;
        let Some(object) = result.as_object_mut() else {
            return Err(Failure::Garbage("tools/call: the result is not an object".into()));
        };
        match object.remove("resultType") {
            None => {}
            Some(t) if t == "complete" => {}
            Some(t) => {
                return Err(Failure::Garbage(format!("tools/call: a result of type {t}, not complete")));
            }
        }
        if object.get("content").is_some_and(|c| !c.is_array()) {
            return Err(Failure::Garbage("tools/call: content is not an array".into()));
        }
        Ok(result)
    }

    /// End the connection (a session-era HTTP session is deleted, a command stopped).
    pub(crate) fn close(&self) {
        self.wire.close(&self.era);
        self.shared.close("closed by oncerpc");
    }
}

fn client_info() -> Value {
    json!({ "name": "oncerpc", "version": env!("CARGO_PKG_VERSION") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::stdio::StdioWire;

    fn shared() -> (Arc<Shared>, Listeners, Arc<Notify>) {
        let listeners = Listeners::default();
        let relist = Arc::new(Notify::new());
        (Shared::new(listeners.clone(), relist.clone()), listeners, relist)
    }

    fn waiting(shared: &Shared, id: i64) -> oneshot::Receiver<Result<Value, Failure>> {
        let (tx, rx) = oneshot::channel();
        shared.pending.lock().unwrap().insert(id, tx);
        rx
    }

    #[tokio::test]
    async fn answers_reach_their_request_and_the_upstreams_requests_are_answered() {
        let (shared, listeners, relist) = shared();
        let (wire, mut sent) = StdioWire::pair();
        let mut one = waiting(&shared, 1);
        let mut two = waiting(&shared, 2);

        // Progress for a call whose client listens, in the order received.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        listeners.lock().unwrap().insert(
            7,
            Progress::new(move |r| {
                if let oncerpc_core::Report::Tool(t) = r {
                    sink.lock().unwrap().push((t.progress, t.message.map(str::to_owned)));
                }
            }),
        );
        for (n, token) in [(1, json!(7)), (2, json!("7")), (3, json!(8))] {
            let p = json!({"jsonrpc":"2.0","method":"notifications/progress",
                "params":{"progressToken": token, "progress": n, "message": format!("step {n}")}});
            shared.route(p, &wire);
        }
        assert_eq!(
            *seen.lock().unwrap(),
            [(1.0, Some("step 1".into())), (2.0, Some("step 2".into()))],
            "token 8 is no call's"
        );

        shared.route(json!({"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"bad"}}), &wire);
        shared.route(json!({"jsonrpc":"2.0","id":1,"result":{"ok":true}}), &wire);
        shared.route(json!({"jsonrpc":"2.0","id":9,"result":{}}), &wire);
        assert_eq!(one.try_recv().unwrap().unwrap(), json!({"ok": true}));
        assert!(matches!(two.try_recv().unwrap(), Err(Failure::Error { code: -32602, .. })));
        assert!(shared.pending.lock().unwrap().is_empty(), "an answer nobody asked for is dropped");

        shared.route(json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}), &wire);
        tokio::time::timeout(Duration::from_secs(5), relist.notified()).await.expect("relist");

        shared.route(json!({"jsonrpc":"2.0","id":"p","method":"ping"}), &wire);
        shared.route(json!({"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{}}), &wire);
        let mut replies = Vec::new();
        for _ in 0..2 {
            let line = tokio::time::timeout(Duration::from_secs(5), sent.recv()).await.unwrap().unwrap();
            replies.push(serde_json::from_slice::<Value>(&line).unwrap());
        }
        let reply = |id: Value| replies.iter().find(|r| r["id"] == id).cloned();
        let refused = json!({"jsonrpc":"2.0","id":5,"error":{"code":-32601,"message":"Method not found"}});
        assert_eq!(reply(json!(5)), Some(refused), "oncerpc offers the upstream no capability");
        assert_eq!(reply(json!("p")), Some(json!({"jsonrpc":"2.0","id":"p","result":{}})));

        // Garbage is ignored; closing fails whoever still waits, with the first reason.
        for junk in [json!(3), json!([1]), json!({"x": 1}), json!({"id": 3})] {
            shared.route(junk, &wire);
        }
        let mut three = waiting(&shared, 3);
        shared.close("the command exited");
        shared.close("later");
        assert!(matches!(three.try_recv().unwrap(), Err(Failure::Closed(w)) if w == "the command exited"));
        assert_eq!(shared.why(), "the command exited");
    }
}
