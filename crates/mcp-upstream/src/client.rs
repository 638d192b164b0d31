//! oncerpc's MCP client of one upstream: the handshake in the era the upstream speaks
//! (`server/discover`, else `initialize`), requests matched to their answers by id, and what
//! the upstream sends on its own — progress (passed on in the order received, before the
//! answer that follows it), `notifications/tools/list_changed` (and the resources' and
//! prompts'), `ping` (answered) and any
//! other request (`-32601`: oncerpc offers the upstream no capability).
//!
//! The bytes travel over a `Wire` (`wire/`): a POST per message (Streamable HTTP) or lines on
//! a child's stdin/stdout. Everything received goes through `Shared::route` (`shared.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use oncerpc_mcp::SESSION_VERSIONS;
use oncerpc_mcp::stateless::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, STATELESS_VERSIONS};
use serde_json::{Map, Value, json};

use crate::shared::{Era, Failure, Headers, Shared};
use crate::wire::Wire;

/// The `_meta` member naming the client in a stateless request.
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// Pages of `tools/list` read at most (an upstream whose cursors never end is cut off).
const MAX_PAGES: usize = 100;

/// A request in flight: its answer's slot, given up (and the upstream told, best effort)
/// when the caller stops waiting.
struct Waiting<'a> {
    connection: &'a Connection,
    id: i64,
    answered: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let waited = self.connection.shared.give_up(self.id);
        if !self.answered && waited && !self.connection.shared.is_closed() {
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
    /// What the upstream said it offers (`server/discover`'s or `initialize`'s capabilities).
    capabilities: Value,
}

/// An upstream's tool list: the tools as it listed them, and (stateless era) how long it may
/// be kept before it is read again.
pub(crate) struct Listing {
    pub tools: Vec<Value>,
    pub ttl: Option<Duration>,
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
            let mut c = Connection {
                wire: open(s.clone())?,
                shared: s,
                era: Era::Stateless,
                next_id: 1.into(),
                capabilities: Value::Null,
            };
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
                        c.capabilities = result["capabilities"].clone();
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
            capabilities: Value::Null,
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
        self.capabilities = result["capabilities"].clone();
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
        let rx = self.shared.expect(id);
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

    /// Whether the upstream declares the capability `name` (`resources`, `prompts`,
    /// `completions`).
    pub(crate) fn offers(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(Value::is_object)
    }

    /// Every item of a paginated list (`resources/list`'s `resources` …), all pages.
    pub(crate) async fn list(&self, method: &str, member: &str) -> Result<Vec<Value>, Failure> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let mut page = self.request(method, params, Headers::default()).await?;
            let Some(listed) = page.get_mut(member).and_then(Value::as_array_mut) else {
                return Err(Failure::Garbage(format!("{method}: no {member} array")));
            };
            items.append(listed);
            match page["nextCursor"].as_str() {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(items),
            }
        }
        Err(Failure::Garbage(format!("{method}: more than {MAX_PAGES} pages")))
    }

    /// A request whose result is passed on as it came, less the stateless revision's
    /// `resultType` framing (a result of another type, or not an object, is garbage).
    pub(crate) async fn forward(
        &self,
        method: &str,
        params: Value,
        headers: Headers,
    ) -> Result<Value, Failure> {
        let mut result = self.request(method, params, headers).await?;
        let Some(object) = result.as_object_mut() else {
            return Err(Failure::Garbage(format!("{method}: the result is not an object")));
        };
        match object.remove("resultType") {
            None => Ok(result),
            Some(t) if t == "complete" => Ok(result),
            Some(t) => Err(Failure::Garbage(format!("{method}: a result of type {t}, not complete"))),
        }
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
