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
    pub derive_key: Option<crate::mcp::DeriveKey>,
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
    fn check_windows(&self, ttl_secs: u64) -> Result<(), String> {
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
    pub fn spec(&self, tool_names: crate::mcp::ToolNames) -> UpstreamSpec {
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

/// The configured upstreams, not yet connected (`None`: none configured). `store.lease_ms`
/// must outlive each one's method deadline, as every method's (SPEC §3).
pub fn upstreams(
    config: &crate::Config,
) -> Result<Option<std::sync::Arc<oncerpc_mcp_upstream::Upstreams>>, crate::ConfigError> {
    let configured = &config.mcp.upstreams;
    if configured.is_empty() {
        return Ok(None);
    }
    let lease = Duration::from_millis(config.store.lease_ms);
    for u in configured {
        u.check_windows(config.store.ttl_secs).map_err(crate::ConfigError::Invalid)?;
        let max = u.method_timeout();
        if lease < max + oncerpc_core::lease_margin(max) {
            return Err(crate::ConfigError::Invalid(format!(
                "store.lease_ms ({}) must exceed mcp.upstreams.{}.timeout_ms by at least {} ms",
                config.store.lease_ms,
                u.name,
                (max - Duration::from_millis(u.timeout_ms) + oncerpc_core::lease_margin(max)).as_millis()
            )));
        }
    }
    let specs = configured.iter().map(|u| u.spec(config.mcp.tool_names)).collect();
    let upstreams = oncerpc_mcp_upstream::Upstreams::new(specs).map_err(crate::ConfigError::Invalid)?;
    Ok(Some(std::sync::Arc::new(upstreams)))
}

/// What a reload changes in `[[mcp.upstreams]]` (checked as a start checks them): the names
/// to remove (gone, or changed) and the specs to add (new, or changed). An upstream whose
/// entry and `mcp.tool_names` are the same is left alone.
pub(crate) fn changes(
    old: &crate::Config,
    new: &crate::Config,
) -> Result<(Vec<String>, Vec<UpstreamSpec>), crate::ConfigError> {
    drop(upstreams(new)?);
    let same_names = old.mcp.tool_names == new.mcp.tool_names;
    let same = |a: &UpstreamConfig, b: &UpstreamConfig| {
        same_names && a.name == b.name && serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
    };
    let removed = old
        .mcp
        .upstreams
        .iter()
        .filter(|o| !new.mcp.upstreams.iter().any(|n| same(o, n)))
        .map(|o| o.name.clone())
        .collect();
    let added = new
        .mcp
        .upstreams
        .iter()
        .filter(|n| !old.mcp.upstreams.iter().any(|o| same(o, n)))
        .map(|n| n.spec(new.mcp.tool_names))
        .collect();
    Ok((removed, added))
}

pub use oncerpc_flows::McpStep;

/// A step's `mcp` names a configured upstream, and the step has no `url` too.
pub fn check_step(config: &crate::Config, step: &McpStep, no_url: bool) -> Result<(), String> {
    if !no_url {
        return Err("set exactly one of url and mcp".into());
    }
    if !config.mcp.upstreams.iter().any(|u| u.name == step.upstream) {
        return Err(format!("mcp.upstream {:?} is not in [[mcp.upstreams]]", step.upstream));
    }
    if step.tool.is_empty() {
        return Err("mcp.tool must name a tool".into());
    }
    Ok(())
}

/// `check-config`: each upstream, and what it would export now (it is connected to once; one
/// that cannot be reached is said so, not a config error: it may be down right now).
pub fn print_upstreams(config: &crate::Config) {
    let upstreams = &config.mcp.upstreams;
    if upstreams.is_empty() {
        return;
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return println!("mcp upstreams: cannot list their tools: {e}"),
    };
    let http = crate::upstream::client(&config.upstream).ok();
    for (i, u) in upstreams.iter().enumerate() {
        let at = match (&u.url, &u.command) {
            (Some(url), _) => format!(
                "url={}",
                config.shown(&format!("mcp.upstreams[{i}].url"), &oncerpc_core::redact_url(url))
            ),
            (None, c) => format!(
                "command={}",
                config.shown(&format!("mcp.upstreams[{i}].command"), c.as_deref().unwrap_or(""))
            ),
        };
        println!(
            "mcp upstream {} {at} prefix={:?} timeout_ms={} max_in_flight={}",
            u.name, u.prefix, u.timeout_ms, u.max_in_flight
        );
        let Some(http) = http.clone() else { continue };
        match rt.block_on(oncerpc_mcp_upstream::Upstreams::preview(u.spec(config.mcp.tool_names), http)) {
            Ok(tools) => {
                for (name, kind) in tools {
                    println!("  tool       {name} ({})", kind.as_str());
                }
            }
            Err(e) => println!(
                "  (not reachable now: {}; its tools are listed once it is)",
                oncerpc_core::LogSafe(&e)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_overrides_set_a_kind_a_derived_key_or_both_and_only_commands_derive() {
        let upstream = |tools: &str| -> UpstreamConfig {
            toml::from_str(&format!("name = \"mail\"\nurl = \"http://127.0.0.1:9/mcp\"\n{tools}"))
                .expect("an upstream")
        };
        let derive = "derive_key = { from = \"arguments\", window_secs = 600 }";
        let ok = upstream(&format!(
            "[[tool]]\nname = \"send\"\n{derive}\n[[tool]]\nname = \"peek\"\nkind = \"query\""
        ));
        ok.check().expect("valid overrides");
        let spec = ok.spec(crate::mcp::ToolNames::Safe);
        assert_eq!(spec.derive_key.get("send"), Some(&Duration::from_secs(600)));
        assert_eq!((spec.kinds.get("peek"), spec.kinds.get("send")), (Some(&Kind::Query), None));
        assert!(ok.check_windows(86_400).is_ok());
        let short = ok.check_windows(60).unwrap_err();
        assert!(short.contains("mcp.upstreams.mail.tool \"send\".derive_key.window_secs"), "{short}");
        for (tools, why) in [
            (format!("[[tool]]\nname = \"peek\"\nkind = \"query\"\n{derive}"), "only commands have keys"),
            ("[[tool]]\nname = \"send\"".to_owned(), "set kind, derive_key, scopes or more"),
            (
                "[[tool]]\nname = \"a\"\nkind = \"query\"\n[[tool]]\nname = \"a\"\nkind = \"command\""
                    .to_owned(),
                "is set twice",
            ),
        ] {
            let refused = upstream(&tools).check().unwrap_err();
            assert!(refused.contains(why), "{tools}: {refused}");
        }
    }

    #[test]
    fn an_upstream_url_never_carries_credentials() {
        let upstream = |url: &str| -> UpstreamConfig {
            toml::from_str(&format!("name = \"mail\"\nurl = {url:?}")).expect("an upstream")
        };
        let refused = upstream("https://bot:s3cret@mail.example/mcp").check().unwrap_err();
        assert!(refused.contains("must not carry a user or password"), "{refused}");
        assert!(!refused.contains("s3cret"), "the refusal does not repeat the secret: {refused}");
        upstream("https://mail.example/mcp?to=a@b.example").check().expect("an @ after the host is no user");
        upstream("http://127.0.0.1:9000/mcp").check().expect("a plain URL");
    }

    #[test]
    fn an_oauth_client_is_for_a_url_upstream_without_an_authorization_header() {
        let oauth = "oauth = { token_url = \"https://idp.example/token\", client_id = \"gw\", client_secret = \"s3cret\" }";
        let upstream = |rest: &str| -> UpstreamConfig {
            toml::from_str(&format!("name = \"mail\"\n{rest}")).expect("an upstream")
        };
        let ok = upstream(&format!("url = \"https://mail.example/mcp\"\n{oauth}"));
        ok.check().expect("a url upstream with an OAuth client");
        match ok.spec(crate::mcp::ToolNames::Safe).transport {
            Transport::Http { oauth: Some(o), .. } => assert_eq!(o.client_id, "gw"),
            other => panic!("the client reaches the transport: {other:?}"),
        }
        for (rest, why) in [
            (format!("command = \"mail-mcp\"\n{oauth}"), "oauth is for url upstreams"),
            (
                format!("url = \"https://mail.example/mcp\"\nheaders = {{ Authorization = \"Bearer x\" }}\n{oauth}"),
                "set oauth or an Authorization header, not both",
            ),
            (
                "url = \"https://mail.example/mcp\"\noauth = { token_url = \"ftp://x\", client_id = \"gw\", client_secret = \"s\" }".to_owned(),
                "oauth.token_url must be an http:// or https:// URL",
            ),
        ] {
            let refused = upstream(&rest).check().unwrap_err();
            assert!(refused.contains(why), "{rest}: {refused}");
            assert!(!refused.contains("s3cret"), "never the secret: {refused}");
        }
    }

    #[test]
    fn two_upstreams_that_could_export_one_name_are_a_config_error() {
        let upstream = |name: &str, extra: &str| -> UpstreamConfig {
            toml::from_str(&format!("name = {name:?}\nurl = \"http://127.0.0.1:9/mcp\"\n{extra}"))
                .expect("an upstream")
        };
        let refused = |a: &UpstreamConfig, b: &UpstreamConfig| check(&[a.clone(), b.clone()]).err();
        // One prefix (none) and every tool of both: any name both have is two tools.
        let e = refused(&upstream("mail", ""), &upstream("pay", "")).expect("a clash");
        assert!(e.contains("mcp.upstreams.mail and mcp.upstreams.pay"), "{e}");
        assert!(e.contains("give each its own prefix"), "{e}");
        // The same prefix, lists with a name in common (literally, or by a glob).
        let (a, b) = (
            upstream("mail", "prefix = \"x.\"\ntools = [\"charge\", \"send\"]"),
            upstream("pay", "prefix = \"x.\"\ntools = [\"charge\"]"),
        );
        let e = refused(&a, &b).expect("a clash");
        assert!(e.contains("\"x.charge\""), "{e}");
        let e = refused(&upstream("pay", "prefix = \"x.\"\ntools = [\"ch*\"]"), &a).expect("a clash");
        assert!(e.contains("\"x.charge\""), "{e}");
        // Not a clash: other prefixes, or lists without a name in common.
        assert_eq!(
            refused(&upstream("mail", "prefix = \"mail.\""), &upstream("pay", "prefix = \"pay.\"")),
            None
        );
        assert_eq!(refused(&a, &upstream("pay", "prefix = \"x.\"\ntools = [\"refund\"]")), None);
        assert_eq!(refused(&a, &upstream("pay", "prefix = \"x.\"\ntools = [\"re*\"]")), None);
    }
}
