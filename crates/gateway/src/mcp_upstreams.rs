//! `[[mcp.upstreams]]`: other MCP servers whose tools oncerpc re-exports on its own MCP door,
//! each call run once per key (SPEC §16b; the client and engine are `oncerpc-mcp-upstream`).
//!
//! ```toml
//! [[mcp.upstreams]]
//! name = "mail"
//! command = "mail-mcp-server"          # or url = "https://mail.example/mcp"
//! args = ["--stdio"]
//! env = { MAIL_TOKEN = "${MAIL_TOKEN}" }
//! tools = ["send_*"]
//! prefix = "mail."
//! key_argument = "idempotency_key"
//! [[mcp.upstreams.tool]]
//! name = "send_preview"
//! kind = "query"
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use oncerpc_core::Kind;
use oncerpc_mcp_upstream::{Transport, UpstreamSpec};
use serde::{Deserialize, Serialize};

/// One `[[mcp.upstreams]]` entry.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Names the upstream in logs, metrics, `/healthz` and flow steps.
    pub name: String,
    /// Streamable HTTP endpoint (`http://` or `https://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A command speaking MCP on stdin/stdout, started and supervised by oncerpc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment of the command (values may be `"${NAME}"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Headers of every HTTP request: oncerpc's own credentials for the upstream (values may
    /// be `"${NAME}"`). A client's are never passed through.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Glob patterns of the upstream's tool names to offer; empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Put before each tool's name on oncerpc's door.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// The upstream's own idempotency-key argument, if it has one: the key is sent in it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_argument: Option<String>,
    /// Per-tool overrides (`[[mcp.upstreams.tool]] name, kind`).
    #[serde(default, rename = "tool", skip_serializing_if = "Vec::is_empty")]
    pub tool_overrides: Vec<ToolOverride>,
}

/// `[[mcp.upstreams.tool]]`: the kind of one upstream tool, over its `readOnlyHint`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// The upstream's name of the tool (without the prefix).
    pub name: String,
    pub kind: Kind,
}

fn default_timeout_ms() -> u64 {
    30_000
}

fn default_max_in_flight() -> usize {
    16
}

impl UpstreamConfig {
    /// The entry's own rules; the error names the key.
    pub fn check(&self) -> Result<(), String> {
        let name = &self.name;
        let token = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if name.is_empty() || !name.chars().all(token) {
            return Err(format!("mcp.upstreams: name {name:?} must be letters, digits, '-' or '_'"));
        }
        match (&self.url, &self.command) {
            (Some(url), None) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!("mcp.upstreams.{name}.url must be http:// or https://"));
                }
            }
            (None, Some(c)) if !c.trim().is_empty() => {}
            _ => return Err(format!("mcp.upstreams.{name}: set exactly one of url and command")),
        }
        if self.url.is_none() && !self.headers.is_empty() {
            return Err(format!("mcp.upstreams.{name}.headers are for url upstreams; a command gets env"));
        }
        if self.url.is_some() && (!self.env.is_empty() || !self.args.is_empty()) {
            return Err(format!("mcp.upstreams.{name}: args and env are for command upstreams"));
        }
        if !(1..=3_600_000).contains(&self.timeout_ms) {
            return Err(format!("mcp.upstreams.{name}.timeout_ms must be between 1 and 3600000"));
        }
        if !(1..=10_000).contains(&self.max_in_flight) {
            return Err(format!("mcp.upstreams.{name}.max_in_flight must be between 1 and 10000"));
        }
        oncerpc_mcp_upstream::export::allowlist(&self.tools)
            .map_err(|e| format!("mcp.upstreams.{name}.{e}"))?;
        Ok(())
    }

    /// The method deadline of this upstream's tools: its `timeout_ms` and a moment for the
    /// answer (the upstream's own timeout answers first, with its name).
    pub fn method_timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms) + Duration::from_millis(500)
    }

    /// What `oncerpc-mcp-upstream` is given.
    pub fn spec(&self) -> UpstreamSpec {
        let transport = match (&self.url, &self.command) {
            (Some(url), _) => Transport::Http {
                url: url.clone(),
                headers: self.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            },
            (None, command) => Transport::Stdio {
                command: command.clone().unwrap_or_default(),
                args: self.args.clone(),
                env: self.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            },
        };
        UpstreamSpec {
            name: self.name.clone(),
            transport,
            tools: self.tools.clone(),
            prefix: self.prefix.clone(),
            timeout: Duration::from_millis(self.timeout_ms),
            method_timeout: self.method_timeout(),
            max_in_flight: self.max_in_flight,
            key_argument: self.key_argument.clone(),
            kinds: self.tool_overrides.iter().map(|t| (t.name.clone(), t.kind)).collect(),
        }
    }
}

/// Every upstream's rules, and names given once.
pub fn check(upstreams: &[UpstreamConfig]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for u in upstreams {
        u.check()?;
        if !seen.insert(&u.name) {
            return Err(format!("mcp.upstreams: {:?} is named twice", u.name));
        }
    }
    Ok(())
}
