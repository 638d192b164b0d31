//! The `[mcp]` section as the config file says it: the MCP door at `/mcp` and its sessions,
//! how tools are named, and the `[[mcp.upstreams]]` (`mcp_upstreams.rs` of this folder). What
//! the section does to the registry and the doors is `crate::mcp`.

use serde::{Deserialize, Serialize};

use super::mcp_upstreams::UpstreamConfig;
use super::tools::ToolNames;

/// `[mcp]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    /// Serve `/mcp` on the listener.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Signs session ids, so that replicas sharing it accept each other's sessions; absent: a
    /// random secret per process. Use `"${NAME}"` to keep it out of the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_secret: Option<String>,
    /// A session unused for this long ends, on every replica (sessions live in the store).
    #[serde(default = "default_idle")]
    pub session_idle_secs: u64,
    /// Other MCP servers whose tools are re-exported here (`[[mcp.upstreams]]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<UpstreamConfig>,
    /// How tools are named: `"safe"` (names model APIs accept) or `"method"`.
    #[serde(default, skip_serializing_if = "ToolNames::is_safe")]
    pub tool_names: ToolNames,
}

impl Default for McpSection {
    fn default() -> Self {
        McpSection {
            enabled: true,
            session_secret: None,
            session_idle_secs: default_idle(),
            upstreams: Vec::new(),
            tool_names: ToolNames::Safe,
        }
    }
}

fn default_idle() -> u64 {
    oncerpc_mcp::sessions::DEFAULT_IDLE.as_secs()
}

fn yes() -> bool {
    true
}

/// The shortest secret accepted: an HMAC key guessed is every session forged.
pub const MIN_SECRET_LEN: usize = 32;

impl McpSection {
    /// The section's own rules; the error names the key.
    pub fn check(&self) -> Result<(), String> {
        let lifetime = oncerpc_mcp::session::SESSION_LIFETIME.as_secs();
        if !(1..=lifetime).contains(&self.session_idle_secs) {
            return Err(format!(
                "mcp.session_idle_secs must be between 1 and {lifetime} (a session's whole life)"
            ));
        }
        super::mcp_upstreams::check(&self.upstreams)?;
        match &self.session_secret {
            Some(s) if s.len() < MIN_SECRET_LEN => {
                Err(format!("mcp.session_secret must be at least {MIN_SECRET_LEN} characters"))
            }
            _ => Ok(()),
        }
    }
}
