//! # oncerpc-mcp
//!
//! The MCP door: the registry's methods and flows served as Model Context Protocol tools,
//! through the same dispatcher as every other door — policy, params schema, tenants, and the
//! idempotency engine, so a tool call retried with the same key runs once.
//!
//! This crate is the protocol, without I/O: [`McpServer::handle`] answers one message of a
//! [`Session`]. The transports call it: [`stdio`] (newline-delimited JSON, for desktop hosts
//! that start `oncerpc mcp` as a command).
//!
//! * **Protocol eras**, chosen per message: the stateless revision `2026-07-28`
//!   ([`stateless`], [`McpServer::stateless`]: no handshake, `_meta` on every request,
//!   `server/discover`, HTTP headers checked against the body) and the session era
//!   (`2025-11-25`, `2025-06-18`, `2025-03-26`):
//!   `initialize` negotiates one of them (an unknown one is answered with the latest), `ping`,
//!   `logging/setLevel`, `tools/list` (paginated) and `tools/call` (in `2025-11-25` also as a
//!   task, with `tasks/get|result|list|cancel`: [`tasks::session`]); notifications are never
//!   answered. Batches only where the negotiated revision has them (`2025-03-26`).
//! * **Tools** ([`tools`]): every method that takes an id, by a name model APIs accept
//!   ([`names`]: `counter.increment` → `counter_increment`, the method's own name in `title` and
//!   `_meta`), with its description, an `inputSchema` listing every argument ([`schema`]; plus
//!   `idempotency_key` and `force_retry` properties for commands, whose descriptions tell a
//!   model to reuse the key when it retries), and annotations from its kind.
//! * **Calls** ([`call`]): the key comes from `_meta["io.oncerpc/idempotency-key"]`, else
//!   `arguments.idempotency_key`, else the method's own key rule; the result carries the key,
//!   `new|duplicate` and the correlation id in `_meta`; a duplicate gets the stored result, byte
//!   for byte. Every refusal of the call itself (invalid arguments, key reuse, in progress,
//!   store unavailable, timeouts, upstream failures) is a tool result with `isError: true`
//!   and `structuredContent: {code, message, data}`; an unknown tool or a malformed request is
//!   a JSON-RPC error.
//! * **What other servers offer** ([`offers`]): the resources, resource templates, prompts and
//!   completions of upstream MCP servers (SPEC §16b), listed, forwarded to their source, and
//!   declared in the capabilities only while some are offered.
//!
//! ```
//! use std::sync::Arc;
//! use oncerpc_core::{Context, Dispatcher, DispatcherConfig, MethodSpec, Registry, typed};
//! use oncerpc_core::protocol::RpcError;
//! use oncerpc_mcp::{McpServer, Session};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let mut registry = Registry::new();
//! let charge = typed(|_: Context, p: serde_json::Value| async move { Ok::<_, RpcError>(p["amount"].clone()) });
//! registry.register("charge", MethodSpec::command(), charge).unwrap();
//! let server = McpServer::new(Arc::new(Dispatcher::new(registry, DispatcherConfig::default())));
//! let mut session = Session::new("default");
//! let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call",
//!   "params":{"name":"charge","arguments":{"amount":5,"idempotency_key":"order-1"}}}"#;
//! let first = server.handle(call, &mut session).await.unwrap();
//! let retry = server.handle(call, &mut session).await.unwrap();
//! let status = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap()["result"]["_meta"]
//!     ["io.oncerpc/idempotency-status"].clone();
//! assert_eq!((status(&first), status(&retry)), ("new".into(), "duplicate".into()));
//! # });
//! ```

mod arguments;
pub mod call;
mod cancel;
pub mod discover;
pub mod elicit;
pub mod external;
pub mod meta;
mod metrics;
pub mod names;
pub mod notify;
pub mod offers;
mod result;
pub mod schema;
pub mod session;
pub mod sessions;
pub mod stateless;
pub mod stdio;
pub mod tasks;
pub mod tool;
pub mod tools;

use std::borrow::Cow;
use std::sync::Arc;

use oncerpc_core::Dispatcher;
use oncerpc_protocol::{Entry, ErrorCode, Id, Message, Request, RpcError};
use serde_json::{Value, json};

pub use external::{External, ExternalTool};
pub use meta::{SESSION_VERSIONS, STATELESS_VERSIONS};
pub use metrics::McpMetrics;
pub use names::{ToolNameError, ToolNames};
pub use oncerpc_stdio::Outbox;
pub use session::{SessionError, SessionId, SessionTokens};
pub use sessions::Sessions;
pub use stateless::{RequestHeaders, StatelessAnswer};
pub use tools::Tools;

/// What a server knows about one client's session.
#[derive(Debug, Clone)]
pub struct Session {
    /// The tenant every call of the session runs as.
    pub tenant: Arc<str>,
    /// The revision `initialize` negotiated; `None` before it.
    pub version: Option<&'static str>,
    /// The log level the client asked for (`logging/setLevel`).
    pub log_level: Option<String>,
    /// The transport's name for the session (HTTP: its `Mcp-Session-Id`), which scopes the
    /// request ids a cancellation names; `None` where one connection is one session.
    pub id: Option<Arc<str>>,
    /// The key the transport carried (HTTP: `Idempotency-Key` / `X-Idempotency-Key`), used
    /// by a call whose `_meta` has none.
    pub key_header: Option<Arc<str>>,
    /// The request headers a method's `key_header` names (HTTP), for methods that take their
    /// key from one.
    pub key_headers: Vec<(Arc<str>, Arc<str>)>,
    /// The W3C trace context the transport carried (HTTP: `traceparent`/`tracestate`), used
    /// by a call whose `_meta` has none.
    pub trace: Option<oncerpc_core::TraceContext>,
    /// What the caller may call (its token's or key's scopes; SPEC §20).
    pub grant: oncerpc_core::Grant,
    /// The client declared the `elicitation` capability at `initialize` (form mode): a flow's
    /// `ask` step may ask it ([`elicit`]).
    pub elicitation: bool,
    /// Who the caller is (the audit trail), as its credential says.
    pub subject: Option<Arc<str>>,
}

impl Session {
    pub fn new(tenant: impl Into<Arc<str>>) -> Session {
        Session {
            tenant: tenant.into(),
            version: None,
            log_level: None,
            id: None,
            key_header: None,
            key_headers: Vec::new(),
            trace: None,
            grant: oncerpc_core::Grant::All,
            subject: None,
            elicitation: false,
        }
    }

    /// A session of the request's tenant carrying what its transport read (a stateless
    /// request over HTTP).
    pub fn carrying(request: oncerpc_core::RequestMeta) -> Session {
        let mut session = Session::new(request.tenant.clone());
        session.carry(request);
        session
    }

    /// Take the transport's key (`Idempotency-Key`/`X-Idempotency-Key`), the headers a
    /// method's `key_header` names and the trace context: both eras read keys from the same
    /// places, and refuse the same conflicts.
    pub fn carry(&mut self, request: oncerpc_core::RequestMeta) {
        self.key_header = request.idempotency_key;
        self.key_headers = request.key_headers;
        self.trace = request.trace;
        self.grant = request.grant;
        self.subject = request.subject;
    }
}

/// A session of a tenant with nothing carried yet (a stateless request on stdio, tests).
impl From<&str> for Session {
    fn from(tenant: &str) -> Session {
        Session::new(tenant)
    }
}

impl From<Arc<str>> for Session {
    fn from(tenant: Arc<str>) -> Session {
        Session::new(tenant)
    }
}

/// What [`McpServer::answer`] sends back.
#[derive(Debug)]
pub struct Answer {
    /// The answer's bytes; `None`: nothing (notifications).
    pub body: Option<Vec<u8>>,
    /// The message was refused whole: not JSON, or a batch the revision does not have.
    pub refused: bool,
}

/// The MCP protocol over one dispatcher.
pub struct McpServer {
    dispatcher: Arc<Dispatcher>,
    tools: Tools,
    metrics: McpMetrics,
    /// Shared with this server's successors (a reload), so a cancellation reaches a call
    /// that started before it.
    inflight: Arc<cancel::Inflight>,
    /// The session era's questions to clients waiting for their answers (shared likewise).
    waiting: Arc<elicit::Waiting>,
    /// `initialize` says `tools.listChanged: true`: the transport sends
    /// `notifications/tools/list_changed` to open sessions when the tools change.
    list_changed: bool,
}

impl McpServer {
    pub fn new(dispatcher: Arc<Dispatcher>) -> McpServer {
        McpServer::with_external(dispatcher, External::default())
    }

    /// A server that also offers `external`'s tools (other MCP servers', SPEC §16b). The
    /// dispatcher finds them by name for their events (tasks; resumed after a crash once the
    /// tool is offered again).
    ///
    /// Tools have model-safe names ([`names`]); a registry whose names clash that way keeps
    /// its methods' own names, logged as an error ([`with_names`](Self::with_names) refuses it).
    pub fn with_external(dispatcher: Arc<Dispatcher>, external: External) -> McpServer {
        let production = dispatcher.config().idempotency.mode == oncerpc_core::Mode::Production;
        let tools = Tools::from_registry_in(dispatcher.registry(), production);
        McpServer::of_tools(dispatcher, tools, external)
    }

    /// [`with_external`](Self::with_external), its tools named as `names` says: two methods
    /// with one tool name, or a name too long for model APIs, is the error.
    pub fn with_names(
        dispatcher: Arc<Dispatcher>,
        external: External,
        names: ToolNames,
    ) -> Result<McpServer, ToolNameError> {
        let production = dispatcher.config().idempotency.mode == oncerpc_core::Mode::Production;
        let tools = Tools::build(dispatcher.registry(), production, names)?;
        Ok(McpServer::of_tools(dispatcher, tools, external))
    }

    fn of_tools(dispatcher: Arc<Dispatcher>, tools: Tools, external: External) -> McpServer {
        let found = external.clone();
        dispatcher.resolve_external(Arc::new(move |name| found.get(name).map(|t| t.method.clone())));
        let tools = tools.with_external(external);
        McpServer {
            dispatcher,
            tools,
            metrics: McpMetrics::new(),
            inflight: Arc::default(),
            waiting: Arc::default(),
            list_changed: false,
        }
    }

    /// Say in `initialize` that open sessions are told when the tools change (a transport
    /// with a stream to the client, which sends `notifications/tools/list_changed`).
    pub fn announcing_list_changes(mut self) -> McpServer {
        self.list_changed = true;
        self
    }

    /// A server over a new configuration's dispatcher (a reload), its tools named as
    /// `names` says, that keeps this one's counters and the calls in flight that a
    /// `notifications/cancelled` may still stop.
    pub fn successor(
        &self,
        dispatcher: Arc<Dispatcher>,
        external: External,
        names: ToolNames,
    ) -> Result<McpServer, ToolNameError> {
        let mut next = McpServer::with_names(dispatcher, external, names)?;
        next.metrics = self.metrics.clone();
        next.inflight = self.inflight.clone();
        next.waiting = self.waiting.clone();
        next.list_changed = self.list_changed;
        Ok(next)
    }

    /// The door's counters (register them where `/metrics` gathers).
    pub fn metrics(&self) -> &McpMetrics {
        &self.metrics
    }

    /// The tools this server offers.
    pub fn tools(&self) -> &Tools {
        &self.tools
    }

    /// Answer one message (a request, a notification, or where the revision allows it a
    /// batch). `None`: nothing to send back (a notification, a batch of them).
    pub async fn handle(&self, body: &[u8], session: &mut Session) -> Option<Vec<u8>> {
        self.answer(body, session).await.body
    }

    /// [`handle`](Self::handle), also saying whether the message was refused whole (not
    /// JSON, or a batch the revision does not have): HTTP answers that with `400`.
    pub async fn answer(&self, body: &[u8], session: &mut Session) -> Answer {
        self.answer_with(body, session, None).await
    }

    /// [`answer`](Self::answer), sending the notifications of a call while it runs to
    /// `outbox` (progress with a `progressToken`, a flow's steps as log messages at the
    /// session's level): the transport delivers them before the answer (SSE, stdio lines).
    /// `None`: the transport cannot, and none are made.
    pub async fn answer_with(&self, body: &[u8], session: &mut Session, outbox: Option<Outbox>) -> Answer {
        let refused = |e: &RpcError| Answer { body: Some(oncerpc_protocol::error_body(e)), refused: true };
        // The client's response to a question a call asked it (elicitation): nothing to answer.
        if let Some(answered) = self.waiting.deliver(body, session.id.as_deref().unwrap_or("")) {
            self.metrics.request("response", if answered { "ok" } else { "unknown" });
            tracing::info!(tenant = %session.tenant, answered, "MCP response from the client");
            return Answer { body: None, refused: false };
        }
        let message = match oncerpc_protocol::parse(body) {
            Ok(m) => m,
            Err(e) => {
                self.metrics.request("other", "refused");
                tracing::info!(error = %e, "MCP message refused: not JSON");
                return refused(&e);
            }
        };
        let body = match message {
            Message::Single(entry) => self.entry(entry, session, outbox.as_ref()).await,
            Message::Batch(entries) if session.version == Some("2025-03-26") && !entries.is_empty() => {
                let mut answers = Vec::new();
                for entry in entries {
                    answers.extend(self.entry(entry, session, outbox.as_ref()).await);
                }
                (!answers.is_empty()).then(|| {
                    let mut out = b"[".to_vec();
                    out.extend(answers.join(&b","[..]));
                    out.push(b']');
                    out
                })
            }
            Message::Batch(_) => {
                self.metrics.request("other", "refused");
                tracing::info!("MCP batch refused: the revision has none");
                return refused(&RpcError::invalid_request(
                    "batches are not part of this protocol revision: send one message at a time",
                ));
            }
        };
        Answer { body, refused: false }
    }

    async fn entry(
        &self,
        entry: Entry<'_>,
        session: &mut Session,
        outbox: Option<&Outbox>,
    ) -> Option<Vec<u8>> {
        let req = match entry {
            Entry::Valid(req) => req,
            Entry::Invalid { id, error } => return Some(error_answer(id, &error)),
        };
        let method = oncerpc_core::LogSafe(&req.method);
        let Some(id) = req.id else {
            // Notifications (initialized, cancelled, progress, roots changed …): nothing to
            // answer. A cancelled call runs on: a command keeps its side effect and its
            // stored outcome, which the retry gets.
            let stopped = req.method == "notifications/cancelled" && self.cancel(&req, session);
            self.metrics.request(&req.method, "notification");
            tracing::info!(mcp_method = %method, tenant = %session.tenant, stopped, "MCP notification");
            return None;
        };
        let mut tool_error = false;
        let answer = match &*req.method {
            "initialize" => Ok(self.initialize(&req, session)),
            "ping" => Ok(Cow::Borrowed("{}")),
            "logging/setLevel" => set_level(&req, session).map(|()| Cow::Borrowed("{}")),
            "tools/list" if tasks::session::offered(session) => cursor(&req)
                .and_then(|c| self.tools.page_with_execution(c.as_deref(), &session.grant))
                .map(Cow::Owned),
            "tools/list" => {
                cursor(&req).and_then(|c| self.tools.page(c.as_deref(), &session.grant)).map(Cow::Owned)
            }
            "tools/call" => match self.tools_call(&req, id, session, outbox).await {
                Ok(Some((r, e))) => {
                    tool_error = e;
                    Ok(Cow::Owned(r))
                }
                // Cancelled by the client: no answer (the revision asks for none).
                Ok(None) => return self.cancelled(&req, session),
                Err(e) => Err(e),
            },
            m if offers::Offers::answers(m) => {
                self.tools.external().offers().answer(m, req.params, &session.grant).await.map(Cow::Owned)
            }
            "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel"
                if tasks::session::offered(session) =>
            {
                match self.task_request(&req, id, session, outbox).await {
                    Ok(Some(r)) => Ok(Cow::Owned(r)),
                    Ok(None) => return self.cancelled(&req, session),
                    Err(e) => Err(e),
                }
            }
            _ => Err(RpcError::method_not_found()),
        };
        let outcome = match (&answer, tool_error) {
            (Err(_), _) => "error",
            (Ok(_), true) => "tool_error",
            (Ok(_), false) => "ok",
        };
        self.metrics.request(&req.method, outcome);
        // A call that ran has its access line from the dispatcher; every other message has
        // this one.
        if &*req.method != "tools/call" || answer.is_err() {
            tracing::info!(mcp_method = %method, tenant = %session.tenant, outcome, "MCP message");
        }
        Some(match answer {
            Ok(result) => result_answer(id, &result),
            Err(e) => error_answer(Some(id), &e),
        })
    }

    /// `initialize`: the client's revision when it is one of ours, else the latest.
    fn initialize(&self, req: &Request<'_>, session: &mut Session) -> Cow<'static, str> {
        let asked =
            params_object(req).ok().and_then(|p| p.get("protocolVersion")?.as_str().map(str::to_owned));
        let version = SESSION_VERSIONS
            .iter()
            .copied()
            .find(|v| Some(*v) == asked.as_deref())
            .unwrap_or(SESSION_VERSIONS[0]);
        session.version = Some(version);
        session.elicitation = params_object(req)
            .ok()
            .and_then(|p| p.get("capabilities")?.get("elicitation").map(elicit::form_mode))
            .unwrap_or(false);
        let mut capabilities = json!({ "tools": { "listChanged": self.list_changed }, "logging": {} });
        self.tools.external().offers().capabilities(&mut capabilities);
        if tasks::session::offered(session) {
            capabilities["tasks"] = tasks::session::capability();
        }
        let result = json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": { "name": "oncerpc", "version": env!("CARGO_PKG_VERSION") },
            "instructions": "Tools that change something are commands: pass an idempotency_key and \
                reuse the same key when you retry the same call, so it runs once.",
        });
        Cow::Owned(result.to_string())
    }
}

impl McpServer {
    /// A session-era `tools/call`: inline, or (`2025-11-25` with `params.task`) as a task.
    async fn tools_call(
        &self,
        req: &Request<'_>,
        id: Id<'_>,
        session: &Session,
        outbox: Option<&Outbox>,
    ) -> Result<Option<(String, bool)>, RpcError> {
        let mut prepared = call::prepare(&self.tools, req, id, session, outbox)?;
        // A tool that asks questions: asked on the call's stream, when the client answers them.
        if prepared.tool.tool().asks
            && session.elicitation
            && let Some(outbox) = outbox
        {
            let scope = session.id.clone().unwrap_or_else(|| Arc::from(""));
            let version = session.version.unwrap_or(SESSION_VERSIONS[0]);
            prepared.meta.ask = Some(self.waiting.asker(outbox.clone(), scope, version));
        }
        match tasks::session::route(&prepared, session) {
            tasks::session::Route::Sync => {
                call::run(&self.dispatcher, prepared, id, session, &self.inflight).await
            }
            tasks::session::Route::Task => Ok(Some(tasks::session::create(&self.dispatcher, prepared).await)),
            tasks::session::Route::Refused(e) => Err(e),
        }
    }

    /// `tasks/*` of a `2025-11-25` session. `None`: the client cancelled the request (a
    /// `tasks/result` that waited).
    async fn task_request(
        &self,
        req: &Request<'_>,
        id: Id<'_>,
        session: &Session,
        outbox: Option<&Outbox>,
    ) -> Result<Option<String>, RpcError> {
        use tasks::session;
        let (d, tenant) = (&*self.dispatcher, &*session.tenant);
        if req.method == "tasks/list" {
            return session::list(d, tenant, cursor(req)?.as_deref()).await.map(Some);
        }
        let params = params_object(req)?;
        match &*req.method {
            "tasks/get" => session::get(d, tenant, &params).await.map(Some),
            "tasks/cancel" => session::cancel(d, tenant, &params).await.map(Some),
            _ => {
                // The wait stops when the client cancels the request.
                let waiting = session::result(d, tenant, &params, outbox);
                let scope = session.id.as_deref().unwrap_or("");
                match self.inflight.register(tenant, scope, id.raw()) {
                    None => waiting.await.map(Some),
                    Some(mut r) => tokio::select! {
                        done = waiting => done.map(Some),
                        Ok(()) = &mut r.cancelled => Ok(None),
                    },
                }
            }
        }
    }

    /// A request the client cancelled: counted, logged, not answered.
    fn cancelled(&self, req: &Request<'_>, session: &Session) -> Option<Vec<u8>> {
        self.metrics.request(&req.method, "cancelled");
        tracing::info!(mcp_method = %oncerpc_core::LogSafe(&req.method), tenant = %session.tenant, "MCP request cancelled by the client");
        None
    }

    /// `notifications/cancelled`: stop the named request if it is a query running here.
    fn cancel(&self, req: &Request<'_>, session: &Session) -> bool {
        let Ok(params) = params_object(req) else { return false };
        let Some(id) = params.get("requestId").filter(|v| v.is_string() || v.is_number()) else {
            return false;
        };
        self.inflight.cancel(&session.tenant, session.id.as_deref().unwrap_or(""), &id.to_string())
    }

    /// A message read while another is being answered, handled at once when it has to be:
    /// `notifications/cancelled`, which must reach the call it names while that call runs
    /// (stdio reads ahead; HTTP needs nothing of this, every POST is answered on its own).
    /// Whether it was handled; if not, it waits its turn.
    pub fn urgent(&self, body: &[u8], session: &Session) -> bool {
        // The answer to a question the call being answered asked: it must reach that call now.
        if let Some(answered) = self.waiting.deliver(body, session.id.as_deref().unwrap_or("")) {
            self.metrics.request("response", if answered { "ok" } else { "unknown" });
            tracing::info!(tenant = %session.tenant, answered, "MCP response from the client");
            return true;
        }
        let Ok(Message::Single(Entry::Valid(req))) = oncerpc_protocol::parse(body) else { return false };
        if req.method != "notifications/cancelled" || req.id.is_some() {
            return false;
        }
        let stopped = self.cancel(&req, session);
        self.metrics.request(&req.method, "notification");
        tracing::info!(mcp_method = "notifications/cancelled", tenant = %session.tenant, stopped, "MCP notification");
        true
    }
}

/// Whether `body` is one `initialize` request (the message that opens a session).
pub fn is_initialize(body: &[u8]) -> bool {
    matches!(oncerpc_protocol::parse(body), Ok(Message::Single(Entry::Valid(req))) if req.method == "initialize" && req.id.is_some())
}

/// `logging/setLevel`: one of the syslog levels MCP names.
fn set_level(req: &Request<'_>, session: &mut Session) -> Result<(), RpcError> {
    use notify::LEVELS;
    let params = params_object(req)?;
    match params.get("level").and_then(Value::as_str) {
        Some(level) if LEVELS.contains(&level) => {
            session.log_level = Some(level.to_owned());
            Ok(())
        }
        _ => Err(RpcError::invalid_params(format!("level must be one of {}", LEVELS.join(", ")))),
    }
}

/// The `cursor` of a paginated request, if any.
pub(crate) fn cursor(req: &Request<'_>) -> Result<Option<String>, RpcError> {
    let params = params_object(req)?;
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(c)) => Ok(Some(c.clone())),
        Some(_) => Err(RpcError::invalid_params("cursor must be a string")),
    }
}

/// A request's params as an object (`{}` when absent); an array is `-32602`.
pub(crate) fn params_object(req: &Request<'_>) -> Result<serde_json::Map<String, Value>, RpcError> {
    match req.params {
        None => Ok(serde_json::Map::new()),
        Some(raw) => match serde_json::from_str::<Value>(raw.get()) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(RpcError::new(ErrorCode::InvalidParams).reason("params must be an object")),
        },
    }
}

/// The answer to request `id`: `result` is JSON text this crate wrote (tool results, tool
/// pages, discover), so it goes in as it is, not parsed again.
pub(crate) fn result_answer(id: Id<'_>, result: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(result.len() + 48);
    oncerpc_protocol::write_result_text(&mut out, Some(id), result);
    out
}

pub(crate) fn error_answer(id: Option<Id<'_>>, error: &RpcError) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    oncerpc_protocol::write_error(&mut out, id, error);
    out
}
