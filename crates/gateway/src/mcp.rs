//! The `[mcp]` section: the MCP door at `/mcp` (its protocol is `oncerpc-mcp`).

use serde::{Deserialize, Serialize};

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
}

impl Default for McpSection {
    fn default() -> Self {
        McpSection { enabled: true, session_secret: None }
    }
}

fn yes() -> bool {
    true
}

/// The shortest secret accepted: an HMAC key guessed is every session forged.
pub const MIN_SECRET_LEN: usize = 32;

impl McpSection {
    /// The section's own rules; the error names the key.
    pub fn check(&self) -> Result<(), String> {
        match &self.session_secret {
            Some(s) if s.len() < MIN_SECRET_LEN => {
                Err(format!("mcp.session_secret must be at least {MIN_SECRET_LEN} characters"))
            }
            _ => Ok(()),
        }
    }
}
