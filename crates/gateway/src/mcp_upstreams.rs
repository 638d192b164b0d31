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

use std::time::Duration;

pub use crate::config::mcp_upstreams::{ToolOverride, UpstreamConfig, check};
use oncerpc_mcp_upstream::UpstreamSpec;

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
    use oncerpc_core::Kind;
    use oncerpc_mcp_upstream::Transport;

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
