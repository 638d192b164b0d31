//! One upstream's connection: made, watched, and made again with backoff when it is lost
//! (a command that exited is started again), and the calls sent over it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use globset::GlobSet;
use oncerpc_core::Progress;
use oncerpc_mcp::External;
use oncerpc_protocol::RpcError;
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, Semaphore, watch};

use crate::client::Connection;
use crate::errors::{failed, timed_out};
use crate::oauth::TokenSource;
use crate::shared::{Era, Headers, Listeners, Shared};
use crate::wire::Wire;
use crate::wire::http::HttpWire;
use crate::wire::stdio::StdioWire;
use crate::{Transport, UpstreamMetrics, UpstreamSpec};

/// The `_meta` member carrying the key to the upstream (the one oncerpc's own clients use).
pub const META_KEY: &str = oncerpc_mcp::call::META_KEY;
/// The first pause before connecting again; it doubles up to [`MAX_BACKOFF`].
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(200);
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A stateless upstream's tool list is read again when its `ttlMs` ends, but not more often.
pub(crate) const MIN_RELIST: Duration = Duration::from_secs(1);

pub struct Link {
    pub spec: UpstreamSpec,
    pub(crate) allow: GlobSet,
    connection: RwLock<Option<Arc<Connection>>>,
    pub(crate) limit: Semaphore,
    pub(crate) metrics: UpstreamMetrics,
    pub(crate) stop: watch::Sender<bool>,
    /// The upstream said `notifications/tools/list_changed`.
    pub(crate) relist: Arc<Notify>,
    /// It answered `server/discover` with an error it cannot be parsed from: `initialize`.
    legacy: AtomicBool,
    /// Where the progress of each call in flight goes, by the token oncerpc gave it.
    listeners: Listeners,
    next_token: AtomicI64,
    /// Each listed tool's `x-mcp-header` arguments: (header, path to the argument).
    pub(crate) header_params: RwLock<HashMap<String, HeaderParams>>,
    /// Its access tokens (`oauth`), made with the first connection's HTTP client and kept
    /// across connections, so a token outlives a reconnect.
    tokens: OnceLock<Option<Arc<TokenSource>>>,
    /// Removed by a reload: its tools are withdrawn and stay so until it stops.
    pub(crate) retired: AtomicBool,
    /// Its resources' and prompts' side: told when they change.
    /// The upstream said its resources or prompts changed.
    pub(crate) offers_changed: Arc<Notify>,
}

/// A tool's `x-mcp-header` arguments: each header's name and the path to its argument.
type HeaderParams = Vec<(String, Vec<String>)>;

/// A call's progress token, listened to until the call ends.
struct Listening<'a> {
    listeners: &'a Listeners,
    token: i64,
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.listeners.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.token);
    }
}

impl Link {
    pub fn new(spec: UpstreamSpec, metrics: UpstreamMetrics) -> Result<Arc<Link>, String> {
        let allow =
            crate::names::allowlist(&spec.tools).map_err(|e| format!("mcp.upstreams.{}.{e}", spec.name))?;
        Ok(Arc::new(Link {
            limit: Semaphore::new(spec.max_in_flight.max(1)),
            spec,
            allow,
            connection: RwLock::new(None),
            metrics,
            stop: watch::channel(false).0,
            relist: Arc::new(Notify::new()),
            legacy: AtomicBool::new(false),
            listeners: Arc::default(),
            next_token: AtomicI64::new(1),
            header_params: RwLock::default(),
            tokens: OnceLock::new(),
            retired: AtomicBool::new(false),
            offers_changed: Arc::default(),
        }))
    }

    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Removed by a reload: withdraw its tools from `external` now (no new call reaches it),
    /// let the calls in flight finish (each is bounded by the upstream's `timeout_ms`), then
    /// stop it.
    pub fn retire(self: Arc<Self>, external: &External) {
        self.retired.store(true, Ordering::SeqCst);
        external.replace(&self.spec.name, Vec::new());
        external.forget_health(&self.spec.name);
        tokio::spawn(async move {
            let all = u32::try_from(self.spec.max_in_flight.max(1)).unwrap_or(u32::MAX);
            let _idle = self.limit.acquire_many(all).await;
            tracing::info!(upstream = %self.spec.name, "MCP upstream removed by a reload: its calls have finished, closing it");
            self.stop();
        });
    }

    pub(crate) fn set_connection(&self, connection: Option<Arc<Connection>>) {
        *self.connection.write().unwrap_or_else(|e| e.into_inner()) = connection;
    }

    pub(crate) fn connection(&self) -> Option<Arc<Connection>> {
        self.connection.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Connect in the era the upstream speaks: `server/discover` first, else `initialize`
    /// (and `initialize` only, from then on).
    pub(crate) async fn connect(&self, http: &reqwest::Client) -> Result<Connection, String> {
        let shared = || Shared::new(self.listeners.clone(), self.relist.clone(), self.offers_changed.clone());
        let open = |shared: Arc<Shared>| match &self.spec.transport {
            Transport::Http { url, headers, oauth } => {
                let tokens = self
                    .tokens
                    .get_or_init(|| oauth.clone().map(|o| Arc::new(TokenSource::new(o, http.clone()))));
                HttpWire::open(http.clone(), url, headers, tokens.clone(), shared).map(Wire::Http)
            }
            Transport::Stdio { command, args, env } => {
                StdioWire::open(command, args, env, shared).map(Wire::Stdio)
            }
        };
        let budget = self.spec.timeout.max(Duration::from_secs(5));
        let legacy = self.legacy.load(Ordering::Relaxed);
        let connecting = Connection::connect(open, shared, legacy, budget / 2);
        let connection = match tokio::time::timeout(budget, connecting).await {
            Ok(r) => r?,
            Err(_) => return Err("no answer to the handshake".into()),
        };
        if *connection.era() != Era::Stateless {
            self.legacy.store(true, Ordering::Relaxed);
        }
        Ok(connection)
    }

    pub(crate) fn report(&self, external: &External, up: bool, error: Option<&str>) {
        if self.retired.load(Ordering::SeqCst) {
            return;
        }
        let mut state = json!({ "up": up, "tools": external.names(&self.spec.name).len() });
        let withheld = external.withheld(&self.spec.name);
        if !withheld.is_empty() {
            // Tools whose name another upstream offered first: not offered, so a call never
            // reaches a server its client did not mean.
            state["withheld"] =
                withheld.iter().map(|(tool, by)| json!({ "tool": tool, "offered_by": by })).collect();
        }
        if let Some(e) = error {
            state["error"] = json!(e);
        }
        external.set_health(&self.spec.name, state);
    }

    /// The stateless era's HTTP headers of a call of `tool`: its name, and each
    /// `x-mcp-header` argument the call gives (a string of visible ASCII as it is, another
    /// in the Base64 sentinel `=?base64?…?=`; numbers and booleans as JSON writes them).
    fn call_headers(&self, tool: &str, arguments: &Map<String, Value>) -> Headers {
        let mut headers = Headers { name: Some(tool.to_owned()), params: Vec::new() };
        let wanted = self.header_params.read().unwrap_or_else(|e| e.into_inner());
        for (header, path) in wanted.get(tool).into_iter().flatten() {
            let Some((first, rest)) = path.split_first() else { continue };
            let value = arguments.get(first).and_then(|v| rest.iter().try_fold(v, |v, key| v.get(key)));
            let text = match value {
                Some(Value::String(s)) if is_plain(s) => s.clone(),
                Some(Value::String(s)) => format!("=?base64?{}?=", STANDARD.encode(s)),
                Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
                _ => continue,
            };
            headers.params.push((header.clone(), text));
        }
        headers
    }

    /// `tools/call` of `tool` with `arguments` and the key: the upstream's `CallToolResult`
    /// (an `isError` one too), or `-32006` (not connected, the connection failed or was lost,
    /// an answer that is not a result) or `-32005` (no answer within `timeout_ms`). With
    /// `progress`, the call carries a progress token and the upstream's progress
    /// notifications for it are passed on there.
    pub async fn call_tool(
        &self,
        tool: &str,
        mut arguments: Map<String, Value>,
        key: Option<&str>,
        progress: Option<Progress>,
    ) -> Result<Value, RpcError> {
        let name = &self.spec.name;
        let outcome = |o: &str| self.metrics.call(name, o);
        let Some(connection) = self.connection() else {
            outcome("failed");
            return Err(failed(name, "not connected"));
        };
        let mut meta = Map::new();
        if let Some(key) = key {
            if let Some(arg) = &self.spec.key_argument {
                arguments.insert(arg.clone(), json!(key));
            }
            meta.insert(META_KEY.into(), json!(key));
        }
        let _listening = progress.map(|sink| {
            let token = self.next_token.fetch_add(1, Ordering::Relaxed);
            self.listeners.lock().unwrap_or_else(|e| e.into_inner()).insert(token, sink);
            meta.insert("progressToken".into(), json!(token));
            Listening { listeners: &self.listeners, token }
        });
        // Only the stateless revision's HTTP requests carry them.
        let headers = match connection.era() {
            Era::Stateless => self.call_headers(tool, &arguments),
            Era::Session(_) => Headers::default(),
        };
        let mut params = json!({ "name": tool, "arguments": arguments });
        if !meta.is_empty() {
            params["_meta"] = Value::Object(meta);
        }
        let calling = async {
            let _permit = self.limit.acquire().await;
            connection.call_tool(params, headers).await
        };
        match tokio::time::timeout(self.spec.timeout, calling).await {
            Ok(Ok(value)) => {
                outcome(if value["isError"] == json!(true) { "tool_error" } else { "ok" });
                Ok(value)
            }
            Ok(Err(e)) => {
                outcome("failed");
                tracing::warn!(upstream = %name, tool = %oncerpc_core::LogSafe(tool), error = %oncerpc_core::LogSafe(&e.to_string()), "MCP upstream call failed");
                Err(failed(name, "the call did not complete"))
            }
            Err(_) => {
                outcome("timeout");
                Err(timed_out(name, self.spec.timeout.as_millis()))
            }
        }
    }
}

/// A header value that can go as it is: visible ASCII, no space or tab at either end.
fn is_plain(s: &str) -> bool {
    s.bytes().all(|b| (b' '..=b'~').contains(&b)) && s.trim_matches([' ', '\t']).len() == s.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn link() -> Arc<Link> {
        let spec = UpstreamSpec {
            name: "up".into(),
            transport: Transport::Http { url: "http://127.0.0.1:9/mcp".into(), headers: vec![], oauth: None },
            tools: vec![],
            prefix: String::new(),
            timeout: Duration::from_secs(1),
            method_timeout: Duration::from_secs(2),
            max_in_flight: 1,
            key_argument: None,
            kinds: BTreeMap::new(),
            derive_key: BTreeMap::new(),
            scopes: Vec::new(),
            tool_scopes: BTreeMap::new(),
            tool_names: Default::default(),
        };
        Link::new(spec, UpstreamMetrics::new()).unwrap()
    }

    #[test]
    fn x_mcp_header_arguments_go_as_their_headers_encoded_as_the_door_decodes_them() {
        let link = link();
        let schema = json!({ "type": "object", "properties": {
            "region": { "type": "string", "x-mcp-header": "Region" },
            "note": { "type": "string", "x-mcp-header": "Note" },
            "qty": { "type": "integer", "x-mcp-header": "Qty" },
            "urgent": { "type": "boolean", "x-mcp-header": "Urgent" },
            "addr": { "type": "object", "properties": { "city": { "type": "string", "x-mcp-header": "City" } } },
            "tags": { "type": "array", "x-mcp-header": "Tags" },
        }});
        link.header_params.write().unwrap().insert("ship".into(), oncerpc_mcp::tools::header_params(&schema));
        let arguments = json!({
            "region": "eu west", "note": " café ", "qty": 3, "urgent": true,
            "addr": { "city": "Zürich" }, "tags": ["a"],
        });
        let headers = link.call_headers("ship", arguments.as_object().unwrap());
        assert_eq!(headers.name.as_deref(), Some("ship"));
        let mut params = headers.params;
        params.sort();
        let expected: Vec<(String, String)> = [
            ("City", format!("=?base64?{}?=", STANDARD.encode("Zürich"))),
            ("Note", format!("=?base64?{}?=", STANDARD.encode(" café "))),
            ("Qty", "3".into()),
            ("Region", "eu west".into()),
            ("Urgent", "true".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(params, expected, "an array has no header form and is left out");

        let none = link.call_headers("other", arguments.as_object().unwrap());
        assert!(none.params.is_empty(), "a tool without x-mcp-header arguments sends none");
    }
}
