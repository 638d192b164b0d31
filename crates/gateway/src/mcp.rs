//! The `[mcp]` section: the MCP door at `/mcp` (its protocol is `oncerpc-mcp`) and how its
//! tools are named (`tool_names`), and what a `[[methods]]` entry says about its tool (`mcp`, `title`, `destructive`, `output_schema`,
//! `derive_key`).

use std::time::Duration;

pub use crate::config::mcp::{MIN_SECRET_LEN, McpSection};
pub use crate::config::tools::{DeriveFrom, DeriveKey, TaskSupport, ToolNames};
use crate::config::{Config, MethodConfig};

/// Whether `registry`'s tools can be named as `[mcp] tool_names` says: two methods with one
/// tool name, or a name over 64 characters, is a config error naming them.
pub fn check_tool_names(cfg: &Config, registry: &oncerpc_core::Registry) -> Result<(), crate::ConfigError> {
    oncerpc_mcp::Tools::check_names(registry, cfg.mcp.tool_names.mcp())
        .map_err(|e| crate::ConfigError::Invalid(format!("mcp.tool_names: {e}")))
}

/// A method's tool options, on its registry spec. Every configured method is a flow, so its
/// tool reaches the world outside (`openWorldHint`).
pub fn apply(m: &MethodConfig, spec: &mut oncerpc_core::MethodSpec) {
    spec.tool = oncerpc_core::ToolOptions {
        hidden: !m.mcp,
        title: m.title.clone(),
        destructive: m.destructive,
        open_world: !m.steps.is_empty(),
        output_schema: m.output_schema.clone(),
        task_required: m.tasks == Some(TaskSupport::Required),
        array_argument: None,
    };
    spec.derive_key_window = m.derive_key.as_ref().map(|d| Duration::from_secs(d.window_secs));
}

/// The tool keys' own rules; the error names the key.
pub fn validate_method(cfg: &Config, m: &MethodConfig) -> Result<(), String> {
    let name = &m.name;
    if m.tasks.is_some() && m.kind == oncerpc_core::Kind::Query {
        return Err(format!("methods.{name}.tasks: a query answers inline; only commands run as tasks"));
    }
    if let Some(s) = &m.output_schema
        && !(s.is_object() && s.get("type").is_none_or(|t| t == "object"))
    {
        return Err(format!("methods.{name}.output_schema must be a JSON Schema of an object"));
    }
    if m.destructive.is_some() && m.kind == oncerpc_core::Kind::Query {
        return Err(format!("methods.{name}.destructive: a query changes nothing; it is for commands"));
    }
    let Some(d) = &m.derive_key else { return Ok(()) };
    if m.kind != oncerpc_core::Kind::Command {
        return Err(format!("methods.{name}.derive_key: only commands have keys"));
    }
    if m.key_from.is_some() || m.key_header.is_some() {
        return Err(format!(
            "methods.{name}.derive_key: the method already takes its key from key_from/key_header"
        ));
    }
    if d.window_secs == 0 || d.window_secs > cfg.store.ttl_secs {
        return Err(format!(
            "methods.{name}.derive_key.window_secs must be between 1 and store.ttl_secs ({}): a record kept for a shorter time cannot tell a duplicate",
            cfg.store.ttl_secs
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const STEP: &str = "  [[methods.steps]]\n  name = \"s\"\n  url = \"http://127.0.0.1:9/s\"\n";

    fn method(keys: &str) -> String {
        format!("demo = false\n[[methods]]\nname = \"m\"\nkind = \"command\"\n{keys}\n{STEP}")
    }

    #[test]
    fn a_methods_tool_keys_reach_its_spec() {
        let cfg = Config::from_toml(&method(
            "mcp = false\ntitle = \"Refund\"\ndestructive = true\noutput_schema = { type = \"object\" }\n\
             derive_key = { from = \"arguments\", window_secs = 600 }",
        ))
        .unwrap();
        let spec = crate::method_spec(&cfg, &cfg.methods[0]);
        assert!(spec.tool.hidden && spec.tool.open_world);
        assert_eq!((spec.tool.title.as_deref(), spec.tool.destructive), (Some("Refund"), Some(true)));
        assert_eq!(spec.derive_key_window, Some(std::time::Duration::from_secs(600)));
        let shown = Config::from_toml(&method("")).unwrap();
        assert!(!crate::method_spec(&shown, &shown.methods[0]).tool.hidden, "a method is a tool by default");
        assert!(!crate::method_spec(&shown, &shown.methods[0]).tool.task_required, "a task when asked for");
        let required = Config::from_toml(&method("tasks = \"required\"")).unwrap();
        assert!(crate::method_spec(&required, &required.methods[0]).tool.task_required);
    }

    #[test]
    fn wrong_tool_keys_are_refused_naming_the_key() {
        for (keys, names) in [
            ("output_schema = { type = \"array\" }", "methods.m.output_schema"),
            ("derive_key = { from = \"arguments\", window_secs = 0 }", "methods.m.derive_key.window_secs"),
            (
                "derive_key = { from = \"arguments\", window_secs = 99999999 }",
                "methods.m.derive_key.window_secs",
            ),
            (
                "derive_key = { from = \"arguments\", window_secs = 9 }\nkey_from = \"/id\"",
                "methods.m.derive_key",
            ),
            ("derive_key = { from = \"headers\", window_secs = 9 }", "from"),
        ] {
            let err = Config::from_toml(&method(keys)).unwrap_err().to_string();
            assert!(err.contains(names), "{keys}: {err}");
        }
        let query = method("destructive = true").replace("kind = \"command\"", "kind = \"query\"");
        assert!(Config::from_toml(&query).unwrap_err().to_string().contains("methods.m.destructive"));
        let query = method("tasks = \"required\"").replace("kind = \"command\"", "kind = \"query\"");
        assert!(Config::from_toml(&query).unwrap_err().to_string().contains("methods.m.tasks"));
        assert!(Config::from_toml(&method("tasks = \"sometimes\"")).is_err());
    }
}
