//! The MCP door's metrics: `oncerpc_mcp_requests_total{method,outcome}`,
//! `oncerpc_mcp_sessions_total{event}` and `oncerpc_mcp_refusals_total{reason}`. Labels are bounded: MCP's own method names (anything
//! else is `other`) and a handful of outcomes.

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

/// The door's counters; register them where `/metrics` gathers ([`McpMetrics::register`]).
#[derive(Clone)]
pub struct McpMetrics {
    requests: IntCounterVec,
    sessions: IntCounterVec,
    refusals: IntCounterVec,
    /// `tools/call` answered `ok` and `tool_error`: every call's counter, looked up once
    /// (a labelled lookup hashes the labels and takes a lock).
    calls: [IntCounter; 2],
}

/// The method label of a message.
pub(crate) fn method_label(method: &str) -> &'static str {
    match method {
        "initialize" => "initialize",
        "server/discover" => "server/discover",
        "ping" => "ping",
        "logging/setLevel" => "logging/setLevel",
        "tools/list" => "tools/list",
        "tools/call" => "tools/call",
        "resources/list" => "resources/list",
        "resources/templates/list" => "resources/templates/list",
        "resources/read" => "resources/read",
        "prompts/list" => "prompts/list",
        "prompts/get" => "prompts/get",
        "completion/complete" => "completion/complete",
        m if m.starts_with("notifications/") => "notification",
        _ => "other",
    }
}

impl McpMetrics {
    pub fn new() -> McpMetrics {
        let requests = IntCounterVec::new(
            Opts::new(
                "oncerpc_mcp_requests_total",
                "MCP messages by method and outcome: ok, error (a JSON-RPC error), tool_error (a tool result with isError), notification, refused (not JSON, or a batch the revision lacks)",
            ),
            &["method", "outcome"],
        )
        .expect("valid metric");
        let sessions = IntCounterVec::new(
            Opts::new("oncerpc_mcp_sessions_total", "MCP sessions opened and ended (DELETE) by this process"),
            &["event"],
        )
        .expect("valid metric");
        let refusals = IntCounterVec::new(
            Opts::new(
                "oncerpc_mcp_refusals_total",
                "Requests /mcp refused before any message was handled: origin (403), no_session (400), unknown_session (404), version (400: a revision not served), and in 2026-07-28 malformed (400), batch (400), meta (400: _meta without the protocol version or client capabilities), header_mismatch (400)",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let calls = ["ok", "tool_error"].map(|outcome| requests.with_label_values(&["tools/call", outcome]));
        McpMetrics { requests, sessions, refusals, calls }
    }

    /// Add the counters to `registry` (the front door's).
    pub fn register(&self, registry: &Registry) {
        let _ = registry.register(Box::new(self.requests.clone()));
        let _ = registry.register(Box::new(self.sessions.clone()));
        let _ = registry.register(Box::new(self.refusals.clone()));
    }

    /// A request the HTTP transport refused (`reason`: a fixed word).
    pub fn refused(&self, reason: &'static str) {
        self.refusals.with_label_values(&[reason]).inc();
    }

    pub(crate) fn request(&self, method: &str, outcome: &str) {
        match (method, outcome) {
            ("tools/call", "ok") => self.calls[0].inc(),
            ("tools/call", "tool_error") => self.calls[1].inc(),
            _ => self.requests.with_label_values(&[method_label(method), outcome]).inc(),
        }
    }

    /// A session `opened` or `ended`.
    pub fn session(&self, event: &str) {
        self.sessions.with_label_values(&[event]).inc();
    }
}

impl Default for McpMetrics {
    fn default() -> Self {
        McpMetrics::new()
    }
}
