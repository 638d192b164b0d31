//! `[[mcp.upstreams]]` as the config file says it: other MCP servers whose tools, resources and
//! prompts oncerpc re-exports (SPEC §16b), each entry's own rules, and what
//! `oncerpc-mcp-upstream` is given ([`UpstreamConfig::spec`]). Connecting them is
//! `crate::mcp_upstreams`.

use std::collections::BTreeMap;
use std::time::Duration;

use oncerpc_core::Kind;
use oncerpc_mcp_upstream::{Transport, UpstreamSpec};
use serde::{Deserialize, Serialize};

use super::tools::{DeriveKey, ToolNames};

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
    /// oncerpc's own OAuth client at the upstream's authorization server (the
    /// client-credentials grant): its access token on every request, fetched again once on a
    /// `401`. Instead of a fixed `Authorization` header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<oncerpc_flows::OAuthClient>,
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
    /// The scopes a caller must hold to call its tools (SPEC §20); empty: any caller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Per-tool overrides (`[[mcp.upstreams.tool]] name, kind`).
    #[serde(default, rename = "tool", skip_serializing_if = "Vec::is_empty")]
    pub tool_overrides: Vec<ToolOverride>,
}

/// `[[mcp.upstreams.tool]]`: one upstream tool's settings: its kind, over its `readOnlyHint`,
/// and a key derived from its arguments for calls that bring none (as `[[methods]]
/// derive_key`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// The upstream's name of the tool (without the prefix).
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derive_key: Option<DeriveKey>,
    /// This tool's scopes, instead of the upstream's `scopes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
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
                // Credentials go in `headers` (from `${ENV}`), never in the URL: a URL is shown
                // in logs and errors, a header is not.
                if oncerpc_core::has_userinfo(url) {
                    return Err(format!(
                        "mcp.upstreams.{name}.url must not carry a user or password: \
                         put the credential in headers, e.g. Authorization = \"Bearer ${{TOKEN}}\""
                    ));
                }
            }
            (None, Some(c)) if !c.trim().is_empty() => {}
            _ => return Err(format!("mcp.upstreams.{name}: set exactly one of url and command")),
        }
        if self.url.is_none() && !self.headers.is_empty() {
            return Err(format!("mcp.upstreams.{name}.headers are for url upstreams; a command gets env"));
        }
        if let Some(o) = &self.oauth {
            if self.url.is_none() {
                return Err(format!("mcp.upstreams.{name}.oauth is for url upstreams; a command gets env"));
            }
            if self.headers.keys().any(|k| k.eq_ignore_ascii_case("authorization")) {
                return Err(format!("mcp.upstreams.{name}: set oauth or an Authorization header, not both"));
            }
            o.check(&format!("mcp.upstreams.{name}.oauth"))?;
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
        let mut tools = std::collections::BTreeSet::new();
        for t in &self.tool_overrides {
            let tool = &t.name;
            if !tools.insert(tool) {
                return Err(format!("mcp.upstreams.{name}.tool: {tool:?} is set twice"));
            }
            if t.kind.is_none() && t.derive_key.is_none() && t.scopes.is_none() {
                return Err(format!(
                    "mcp.upstreams.{name}.tool {tool:?}: set kind, derive_key, scopes or more"
                ));
            }
            if t.derive_key.is_some() && t.kind == Some(Kind::Query) {
                return Err(format!(
                    "mcp.upstreams.{name}.tool {tool:?}.derive_key: only commands have keys"
                ));
            }
        }
        Ok(())
    }

    /// `derive_key` windows against the store's TTL: a record kept for a shorter time cannot
    /// tell a duplicate.
    pub(crate) fn check_windows(&self, ttl_secs: u64) -> Result<(), String> {
        for t in &self.tool_overrides {
            if let Some(d) = &t.derive_key
                && (d.window_secs == 0 || d.window_secs > ttl_secs)
            {
                return Err(format!(
                    "mcp.upstreams.{}.tool {:?}.derive_key.window_secs must be between 1 and store.ttl_secs ({ttl_secs})",
                    self.name, t.name
                ));
            }
        }
        Ok(())
    }

    /// The method deadline of this upstream's tools: its `timeout_ms` and a moment for the
    /// answer (the upstream's own timeout answers first, with its name).
    pub fn method_timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms) + Duration::from_millis(500)
    }

    /// What `oncerpc-mcp-upstream` is given; its tools named as `[mcp] tool_names` says.
    pub fn spec(&self, tool_names: ToolNames) -> UpstreamSpec {
        let transport = match (&self.url, &self.command) {
            (Some(url), _) => Transport::Http {
                url: url.clone(),
                headers: self.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                oauth: self.oauth.clone(),
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
            kinds: self.tool_overrides.iter().filter_map(|t| Some((t.name.clone(), t.kind?))).collect(),
            derive_key: self
                .tool_overrides
                .iter()
                .filter_map(|t| {
                    Some((t.name.clone(), Duration::from_secs(t.derive_key.as_ref()?.window_secs)))
                })
                .collect(),
            scopes: self.scopes.clone(),
            tool_scopes: self
                .tool_overrides
                .iter()
                .filter_map(|t| Some((t.name.clone(), t.scopes.clone()?)))
                .collect(),
            tool_names: tool_names.mcp(),
        }
    }
}

/// Every upstream's rules, names given once, and no two upstreams that could export one name.
pub fn check(upstreams: &[UpstreamConfig]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for u in upstreams {
        u.check()?;
        if !seen.insert(&u.name) {
            return Err(format!("mcp.upstreams: {:?} is named twice", u.name));
        }
    }
    for (i, a) in upstreams.iter().enumerate() {
        for b in &upstreams[i + 1..] {
            if let Some(clash) = may_clash(a, b) {
                return Err(format!(
                    "mcp.upstreams.{} and mcp.upstreams.{} both export tools as {:?}{clash}: one name \
                     would be two tools, and a call could reach the other server; give each its own \
                     prefix, or tools lists without a name in common",
                    a.name, b.name, a.prefix
                ));
            }
        }
    }
    Ok(())
}

/// Whether two upstreams with one `prefix` may export a tool under one name: `Some` (with
/// the name, when known) unless their `tools` lists show they cannot. Upstreams' lists are
/// known only once they are connected: a clash the config cannot show (prefixes such as `a`
/// and `a.`) is withheld when it happens, and the tool stays with the upstream that offered
/// it first.
fn may_clash(a: &UpstreamConfig, b: &UpstreamConfig) -> Option<String> {
    if a.prefix != b.prefix {
        return None;
    }
    fn literal(u: &UpstreamConfig) -> Option<&Vec<String>> {
        (!u.tools.is_empty() && u.tools.iter().all(|t| !t.contains(['*', '?', '[', '{', '\\'])))
            .then_some(&u.tools)
    }
    let matches = |names: &Vec<String>, other: &UpstreamConfig| {
        let set = oncerpc_mcp_upstream::export::allowlist(&other.tools).ok()?;
        names
            .iter()
            .find(|n| set.is_match(n.as_str()))
            .map(|n| format!(" ({:?})", format!("{}{n}", a.prefix)))
    };
    match (literal(a), literal(b)) {
        (Some(names), _) => matches(names, b),
        (None, Some(names)) => matches(names, a),
        (None, None) => Some(String::new()),
    }
}
