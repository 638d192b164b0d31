//! The stateless revision, `2026-07-28`: no handshake and no session. Every request carries
//! its protocol version and the client's capabilities in `params._meta`, so any replica
//! answers any request and nothing is kept between two of them.
//!
//! * **Era**: [`is_stateless`] picks it per message: a request whose `_meta` names a protocol
//!   version, or (over HTTP) whose `MCP-Protocol-Version` header is not a session-era revision.
//!   Everything else (`initialize`, messages of a session) is the session era's.
//! * **Requests**: `server/discover` ([`discover`]), `tools/list` (with caching
//!   hints: `ttlMs`, `cacheScope`) and `tools/call` — the same calls as the session era's
//!   ([`call`]), keys, `new|duplicate` and `isError` results alike. Every result
//!   carries `resultType: "complete"`. With the tasks extension declared, a command's call is
//!   a task on the event store, and `tasks/get|update|cancel` read and cancel it
//!   ([`tasks`]; `-32021` without the extension). Any other method
//!   (`initialize`, `ping`, `logging/setLevel`, `tasks/list`, …) is `-32601`. Resources,
//!   prompts and completions other servers offer are listed (with the same caching hints)
//!   and forwarded ([`offers`](crate::offers)).
//! * **Refusals**, before anything runs: not JSON (`-32700`), a batch or an invalid request
//!   (`-32600`), `_meta` without `io.modelcontextprotocol/protocolVersion` or
//!   `…/clientCapabilities` (`-32602`), an HTTP header missing or disagreeing with the body
//!   (`-32020`, [`RequestHeaders`]), a version that is not served (`-32022`, with
//!   `data.supported` and `data.requested`).
//! * **Notifications** are accepted and never answered. `notifications/cancelled` stops a
//!   running query only where it arrives on the connection that carries the call (stdio, one
//!   client per pipe). Over HTTP every POST is a stream of its own and a stateless request has
//!   no session to scope its id: a cancellation POSTed on another stream could name any
//!   client's request, so there it stops nothing, and a client cancels a query by closing the
//!   request's stream.
//! * **Keys and trace context** come from the same places as in the session era: `_meta`,
//!   the arguments, and the transport's `Idempotency-Key`/`X-Idempotency-Key`, `key_header`
//!   headers and `traceparent`, which the transport hands over in the [`Session`] it passes.
//! * **While a call runs**, progress (with `_meta.progressToken`) and a flow's steps as log
//!   messages (only with `_meta["io.modelcontextprotocol/logLevel"]`) go to the transport's
//!   outbox, as in the session era ([`notify`](crate::notify)).
//!
//! Why one file of about 600 lines (its tests are in `stateless/tests.rs`, the headers' text in
//! `stateless/headers.rs`): it is the whole of one revision's request handling — era detection, the per-request capabilities, and each
//! method's answer — which must be read together to see that no state is kept between requests.

use std::borrow::Cow;

use oncerpc_core::LogSafe;
use oncerpc_protocol::{Entry, ErrorCode, Id, Message, RawValue, Request, RpcError};
use serde_json::{Map, Value, json};

use crate::meta::complete;
pub use crate::meta::{
    LIST_TTL_MS, META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_PROTOCOL_VERSION, STATELESS_VERSIONS,
    supported_versions,
};
use crate::{
    McpServer, Outbox, SESSION_VERSIONS, Session, call, discover, error_answer, result_answer, tasks,
};

/// Whether a message is in the stateless era: its `params._meta` names a protocol version,
/// or `version_header` (HTTP's `MCP-Protocol-Version`) is present and not a session-era
/// revision. The caller has already set aside messages of a session (`Mcp-Session-Id`).
pub fn is_stateless(body: &[u8], version_header: Option<&str>) -> bool {
    if let Some(v) = version_header
        && !SESSION_VERSIONS.contains(&v.trim())
    {
        return true;
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(message)) => message
            .get("params")
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(META_PROTOCOL_VERSION))
            .is_some(),
        _ => false,
    }
}

/// The HTTP headers a stateless POST is checked against, as received (raw bytes: a value
/// that is not visible ASCII is refused, not guessed at). Header names are matched
/// case-insensitively by the transport; values are compared case-sensitively, without the
/// surrounding spaces and tabs.
#[derive(Debug, Default, Clone)]
pub struct RequestHeaders<'a> {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<&'a [u8]>,
    /// `Mcp-Method`.
    pub method: Option<&'a [u8]>,
    /// `Mcp-Name`.
    pub name: Option<&'a [u8]>,
    /// `Mcp-Param-{Name}` headers: the `{Name}` part lowercased, and the value.
    pub params: Vec<(String, &'a [u8])>,
}

/// Why a stateless message was refused before anything ran (the HTTP transport counts it in
/// `oncerpc_mcp_refusals_total{reason}` and answers `400`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not JSON, or not a JSON-RPC request (`-32700`, `-32600`).
    Malformed,
    /// A batch: the revision has none (`-32600`).
    Batch,
    /// `_meta` lacks the protocol version or the client capabilities (`-32602`).
    Meta,
    /// A header is missing, malformed or disagrees with the body (`-32020`).
    HeaderMismatch,
    /// The protocol version is not served (`-32022`).
    Version,
    /// The request needs a client capability it does not declare (`-32021`): `tasks/*`
    /// without the tasks extension, a `tasks = "required"` tool called without it.
    Capability,
}

impl Refusal {
    /// The `reason` label.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::Batch => "batch",
            Refusal::Meta => "meta",
            Refusal::HeaderMismatch => "header_mismatch",
            Refusal::Version => "version",
            Refusal::Capability => "capability",
        }
    }
}

/// How a stateless message was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// A result, or a JSON-RPC error of a request that was handled (HTTP `200`).
    Answered,
    /// A notification, or a call the client cancelled: nothing to send (HTTP `202`).
    Accepted,
    /// The method is not one of this revision's (`-32601`, HTTP `404`).
    MethodNotFound,
    /// Refused whole before anything ran (HTTP `400`).
    Refused(Refusal),
}

/// What [`McpServer::stateless`] sends back.
#[derive(Debug)]
pub struct StatelessAnswer {
    /// The answer's bytes; `None` for a notification.
    pub body: Option<Vec<u8>>,
    pub status: Status,
    /// The refusal's message, for the transport's log line.
    pub message: Option<String>,
}

struct Refused {
    why: Refusal,
    error: RpcError,
}

impl Refused {
    fn new(why: Refusal, error: RpcError) -> Refused {
        Refused { why, error }
    }

    fn header(message: String) -> Refused {
        Refused::new(Refusal::HeaderMismatch, RpcError::with_message(ErrorCode::HeaderMismatch, message))
    }

    fn meta(message: &'static str) -> Refused {
        Refused::new(Refusal::Meta, RpcError::invalid_params(message))
    }
}

impl McpServer {
    /// Answer one message of the stateless era for `tenant`. `headers`: the HTTP headers to
    /// check against the body (`None` on stdio, which has none).
    pub async fn stateless(
        &self,
        body: &[u8],
        carried: Session,
        headers: Option<&RequestHeaders<'_>>,
    ) -> StatelessAnswer {
        self.stateless_with(body, carried, headers, None).await
    }

    /// [`stateless`](Self::stateless), sending the notifications of a call while it runs to
    /// `outbox`: progress when the call's `_meta` has a `progressToken`, a flow's steps as log
    /// messages when it has `io.modelcontextprotocol/logLevel` (none without it).
    pub async fn stateless_with(
        &self,
        body: &[u8],
        carried: Session,
        headers: Option<&RequestHeaders<'_>>,
        outbox: Option<Outbox>,
    ) -> StatelessAnswer {
        let tenant = carried.tenant.clone();
        let refused = |id: Option<Id<'_>>, r: Refused| {
            self.metrics.request("other", "refused");
            StatelessAnswer {
                body: Some(error_answer(id, &r.error)),
                status: Status::Refused(r.why),
                message: Some(r.error.message.into_owned()),
            }
        };
        // The common message in one pass; anything else through the JSON-RPC parser.
        let (req, members) = match fast_call(body) {
            Some((id, members)) => {
                (Request { method: Cow::Borrowed("tools/call"), params: None, id: Some(id) }, Some(members))
            }
            None => {
                let message = match oncerpc_protocol::parse(body) {
                    Ok(m) => m,
                    Err(e) => return refused(None, Refused::new(Refusal::Malformed, e)),
                };
                let entry = match message {
                    Message::Single(entry) => entry,
                    Message::Batch(_) => {
                        let e = RpcError::invalid_request(
                            "batches are not part of 2026-07-28: send one request per message",
                        );
                        return refused(None, Refused::new(Refusal::Batch, e));
                    }
                };
                match entry {
                    Entry::Valid(req) => (req, None),
                    Entry::Invalid { id, error } => {
                        return refused(id, Refused::new(Refusal::Malformed, error));
                    }
                }
            }
        };
        // What the transport carried (tenant, key and trace headers); nothing kept from before.
        let mut session = carried;
        session.version = Some(STATELESS_VERSIONS[0]);
        session.id = None;
        let Some(id) = req.id else {
            // Notifications: nothing to answer. A cancelled query stops, when the cancellation
            // comes on the call's own connection (stdio; over HTTP, `headers` is there and the
            // POST is another client's stream as much as the caller's: nothing stops); a
            // cancelled command runs on and stores its outcome, which the retry gets.
            let stopped =
                req.method == "notifications/cancelled" && headers.is_none() && self.cancel(&req, &session);
            self.metrics.request(&req.method, "notification");
            tracing::info!(mcp_method = %LogSafe(&req.method), tenant = %tenant, stopped, "MCP notification (2026-07-28)");
            return StatelessAnswer { body: None, status: Status::Accepted, message: None };
        };
        let params = match checked(&req, members, headers) {
            Ok(p) => p,
            Err(r) => return refused(Some(id), r),
        };
        if let Err(r) = self.param_headers(&req, &params, headers) {
            return refused(Some(id), r);
        }
        // The request's own log level (none: no log messages), never one kept from before.
        session.log_level = params
            .call
            .meta
            .as_ref()
            .and_then(|m| m.log_level)
            .and_then(call::text_of)
            .filter(|l| crate::meta::LEVELS.contains(&&**l))
            .map(|l| l.into_owned());
        let mut tool_error = false;
        let answer: Result<String, RpcError> = match &*req.method {
            "server/discover" => Ok(discover::result(self.tools.external().offers())),
            "tools/list" => {
                let scope = if self.tools.scoped() { "private" } else { "public" };
                crate::cursor(&req)
                    .and_then(|c| self.tools.page(c.as_deref(), &session.grant))
                    .map(|page| cacheable(&page, scope))
            }
            m if crate::offers::Offers::answers(m) => {
                let offers = self.tools.external().offers();
                let answered = offers.answer(m, req.params, &session.grant).await;
                let scope = if offers.scoped() { "private" } else { "public" };
                match m.ends_with("/list") || m == "resources/read" {
                    true => answered.map(|page| cacheable(&page, scope)),
                    false => answered.map(|r| complete(&r)),
                }
            }
            "tools/call"
                if let route @ (tasks::Route::Task | tasks::Route::Refused(_)) =
                    tasks::route(&self.tools, params.name().as_deref(), params.declares_tasks()) =>
            {
                match route {
                    tasks::Route::Refused(e) => Err(e),
                    _ => match tasks::create(&self.dispatcher, &self.tools, &req, id, &session).await {
                        Ok((r, e)) => {
                            tool_error = e;
                            Ok(r)
                        }
                        Err(e) => Err(e),
                    },
                }
            }
            "tasks/get" | "tasks/update" | "tasks/cancel" if !params.declares_tasks() => {
                Err(tasks::missing_capability())
            }
            "tasks/get" => tasks::get(&self.dispatcher, &tenant, &params.tree()).await,
            "tasks/update" => tasks::update(&self.dispatcher, &tenant, &params.tree()).await,
            "tasks/cancel" => tasks::cancel(&self.dispatcher, &tenant, &params.tree()).await,
            "tools/call" => {
                let calling = call::call_read(
                    &self.dispatcher,
                    &self.tools,
                    &params.call,
                    id,
                    &session,
                    outbox.as_ref(),
                    &self.inflight,
                );
                match calling.await {
                    Ok(Some((r, e))) => {
                        tool_error = e;
                        Ok(r)
                    }
                    // Cancelled by the client (stdio's notifications/cancelled): no answer.
                    Ok(None) => {
                        self.metrics.request(&req.method, "cancelled");
                        tracing::info!(tenant = %tenant, "MCP call cancelled by the client (2026-07-28)");
                        return StatelessAnswer { body: None, status: Status::Accepted, message: None };
                    }
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
        if &*req.method != "tools/call" || answer.is_err() {
            tracing::info!(mcp_method = %LogSafe(&req.method), tenant = %tenant, outcome, "MCP message (2026-07-28)");
        }
        match answer {
            Ok(result) => StatelessAnswer {
                body: Some(result_answer(id, &result)),
                status: Status::Answered,
                message: None,
            },
            Err(e) => {
                let status = if e.code == ErrorCode::MethodNotFound {
                    Status::MethodNotFound
                } else if e.code == ErrorCode::MissingRequiredClientCapability {
                    Status::Refused(Refusal::Capability)
                } else {
                    Status::Answered
                };
                let message = matches!(status, Status::Refused(_)).then(|| e.message.to_string());
                StatelessAnswer { body: Some(error_answer(Some(id), &e)), status, message }
            }
        }
    }

    /// `Mcp-Param-{Name}` headers of a `tools/call` over HTTP: every argument the tool's
    /// `inputSchema` marks with `x-mcp-header` and the call gives must come as its header,
    /// with the same value (Base64 sentinel `=?base64?…?=` decoded first).
    fn param_headers(
        &self,
        req: &Request<'_>,
        params: &Checked<'_>,
        headers: Option<&RequestHeaders<'_>>,
    ) -> Result<(), Refused> {
        let Some(headers) = headers else { return Ok(()) };
        if req.method != "tools/call" {
            return Ok(());
        }
        let Some(name) = params.name() else { return Ok(()) };
        // A registered tool, else another server's (its `x-mcp-header` arguments too).
        let external;
        let wanted = match self.tools.get(&name) {
            Some(tool) => &tool.header_params,
            None => match self.tools.external().get(&name) {
                Some(t) => {
                    external = t;
                    &external.tool.header_params
                }
                None => return Ok(()),
            },
        };
        if wanted.is_empty() {
            return Ok(());
        }
        // Only a tool with header parameters needs its arguments read here.
        let arguments = params
            .call
            .arguments
            .and_then(|a| serde_json::from_str::<Value>(a.get()).ok())
            .unwrap_or(Value::Null);
        let arguments = &arguments;
        for (header, path) in wanted {
            let lower = header.to_ascii_lowercase();
            let sent = headers.params.iter().find(|(n, _)| *n == lower).map(|(_, v)| *v);
            let given = path.iter().try_fold(arguments, |v, key| v.get(key)).filter(|v| !v.is_null());
            let shown = LogSafe(header);
            let malformed = || Refused::header(format!("Header mismatch: Mcp-Param-{shown} is malformed"));
            match (given, sent) {
                // Not in the call: not expected, but one sent must still be a valid value.
                (None, Some(raw)) if header_text(raw).and_then(decoded).is_none() => return Err(malformed()),
                (None, _) => {}
                (Some(_), None) => {
                    return Err(Refused::header(format!("Header mismatch: Mcp-Param-{shown} is required")));
                }
                (Some(value), Some(raw)) => {
                    let text = header_text(raw).and_then(decoded).ok_or_else(malformed)?;
                    if !same_value(&text, value) {
                        return Err(Refused::header(format!(
                            "Header mismatch: Mcp-Param-{shown} does not match the argument"
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A stateless request's params, checked: the members a call reads (`_meta` read once),
/// and the params as sent for the methods that read more.
pub(crate) struct Checked<'a> {
    pub call: call::CallParams<'a>,
    raw: Option<&'a RawValue>,
}

impl Checked<'_> {
    /// `name` (`tools/call`'s tool), when it is a string.
    fn name(&self) -> Option<Cow<'_, str>> {
        self.call.name.and_then(call::text_of)
    }

    /// Whether the client declares the tasks extension in its capabilities.
    fn declares_tasks(&self) -> bool {
        declares_tasks(self.call.meta.as_ref())
    }

    /// The params as a tree, every member but `arguments` (which no method here reads). They
    /// were read as an object already: `{}` stands only for what cannot happen.
    fn tree(&self) -> Map<String, Value> {
        let mut params: Map<String, Value> =
            self.raw.and_then(|raw| serde_json::from_str(raw.get()).ok()).unwrap_or_default();
        params.remove("arguments");
        params
    }
}

/// A stateless request's params, once `_meta` and the HTTP headers are checked: `_meta`
/// first (`-32602`), then the headers against the body (`-32020`), then the version
/// (`-32022`).
fn checked<'a>(
    req: &Request<'a>,
    members: Option<call::RawParams<'a>>,
    headers: Option<&RequestHeaders<'_>>,
) -> Result<Checked<'a>, Refused> {
    const NEEDED: &str = "params._meta must carry io.modelcontextprotocol/protocolVersion (a string) and \
        io.modelcontextprotocol/clientCapabilities (an object) on every 2026-07-28 request";
    let not_object = || {
        let e = RpcError::new(ErrorCode::InvalidParams).reason("params must be an object");
        Refused::new(Refusal::Meta, e)
    };
    let members: call::RawParams<'a> = match (members, req.params) {
        (Some(read), _) => read,
        (None, None) => call::RawParams::default(),
        (None, Some(raw)) if call::starts_with(raw, '{') => serde_json::from_str(raw.get()).map_err(|e| {
            Refused::new(Refusal::Meta, RpcError::invalid_params(format!("invalid params: {e}")))
        })?,
        (None, Some(_)) => return Err(not_object()),
    };
    let mut call = call::CallParams::new(members.name, members.arguments, members.meta)
        .map_err(|e| Refused::new(Refusal::Meta, e))?;
    call.input_responses = members.input_responses;
    let meta = call.meta.as_ref().ok_or_else(|| Refused::meta(NEEDED))?;
    let version = meta.protocol_version.and_then(call::text_of).ok_or_else(|| Refused::meta(NEEDED))?;
    if !meta.client_capabilities.is_some_and(|c| call::starts_with(c, '{')) {
        return Err(Refused::meta(NEEDED));
    }
    if let Some(h) = headers {
        let must_match = |header: &str, sent: Option<&[u8]>, body: &str| match sent.map(header_text) {
            None => Err(Refused::header(format!("Header mismatch: {header} is required"))),
            Some(None) => Err(Refused::header(format!("Header mismatch: {header} has invalid characters"))),
            Some(Some(v)) if v == body => Ok(()),
            Some(Some(v)) => Err(Refused::header(format!(
                "Header mismatch: {header} header value '{}' does not match body value '{}'",
                LogSafe(v),
                LogSafe(body)
            ))),
        };
        must_match("MCP-Protocol-Version", h.protocol_version, &version)?;
        must_match("Mcp-Method", h.method, &req.method)?;
        let source = match &*req.method {
            "tools/call" | "prompts/get" => members.name,
            // The tasks extension's routing header: the task's id.
            "tasks/get" | "tasks/update" | "tasks/cancel" => members.task_id,
            "resources/read" => members.uri,
            _ => None,
        };
        if let Some(body) = source.and_then(call::text_of) {
            let sent = h.name.map(|raw| header_text(raw).and_then(decoded));
            match sent {
                None => return Err(Refused::header("Header mismatch: Mcp-Name is required".into())),
                Some(None) => return Err(Refused::header("Header mismatch: Mcp-Name is malformed".into())),
                Some(Some(v)) if v == body => {}
                Some(Some(v)) => {
                    return Err(Refused::header(format!(
                        "Header mismatch: Mcp-Name header value '{}' does not match body value '{}'",
                        LogSafe(&v),
                        LogSafe(&body)
                    )));
                }
            }
        }
    }
    if !STATELESS_VERSIONS.contains(&&*version) {
        let hint = if SESSION_VERSIONS.contains(&&*version) {
            format!(" ({version} is served with initialize and Mcp-Session-Id)")
        } else {
            String::new()
        };
        let e = RpcError::with_message(
            ErrorCode::UnsupportedProtocolVersion,
            format!("Unsupported protocol version{hint}"),
        )
        .data(json!({ "supported": supported_versions(), "requested": version }));
        return Err(Refused::new(Refusal::Version, e));
    }
    Ok(Checked { call, raw: req.params })
}

/// A `tools/call` request read in one pass — the envelope and the members of its params the
/// door reads — when it is the common message: exactly the members `jsonrpc: "2.0"`, `id`,
/// `method: "tools/call"` and object `params`, none written with escapes or repeated, no
/// deeper than the parser allows, and not asking for a task (a task reads the request
/// again). `None` for everything else, which the JSON-RPC parser then reads and answers as it
/// always does: this only spares the common call a second scan of its params.
fn fast_call(body: &[u8]) -> Option<(Id<'_>, call::RawParams<'_>)> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Envelope<'a> {
        #[serde(borrow)]
        jsonrpc: &'a RawValue,
        #[serde(borrow)]
        id: &'a RawValue,
        #[serde(borrow)]
        method: &'a RawValue,
        #[serde(borrow)]
        params: call::ParamsObject<'a>,
    }
    let text = std::str::from_utf8(body).ok()?;
    if !text.trim_start().starts_with('{') || oncerpc_protocol::check_depth(text, 0).is_err() {
        return None;
    }
    let m: Envelope<'_> = serde_json::from_str(text).ok()?;
    if m.jsonrpc.get() != "\"2.0\"" || m.method.get() != "\"tools/call\"" {
        return None;
    }
    let id = Id::from_raw(m.id)?;
    let members = m.params.0;
    let meta = match &members.meta {
        Some(call::MetaMember::Object(meta)) => Some(meta),
        _ => None,
    };
    (!declares_tasks(meta)).then_some((id, members))
}

/// Whether a request's `_meta` declares the tasks extension in its client capabilities.
fn declares_tasks(meta: Option<&call::CallMeta<'_>>) -> bool {
    let caps = meta.and_then(|m| m.client_capabilities);
    // `{}` (most requests) needs no tree.
    match caps.map(|c| c.get().trim()) {
        None | Some("{}") => false,
        Some(c) => serde_json::from_str::<Value>(c).is_ok_and(|caps| tasks::declared_capabilities(&caps)),
    }
}

/// A cacheable result (`tools/list`): `resultType`, and the caching hints `ttlMs` and
/// `cacheScope` (`public`: every tenant sees the same tools).
/// `result` with the caching hints: `scope` is `public` when every caller sees the same list,
/// `private` when it depends on the caller's scopes.
fn cacheable(result: &str, scope: &str) -> String {
    let hints = format!(r#""ttlMs":{LIST_TTL_MS},"cacheScope":"{scope}","#);
    let completed = complete(result);
    match completed.strip_prefix('{') {
        Some(rest) => format!("{{{hints}{rest}"),
        None => completed,
    }
}

mod headers;
use headers::{decoded, header_text, same_value};

#[cfg(test)]
mod tests;
