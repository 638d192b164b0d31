//! How a method is offered as a tool, as the config file says it: `[mcp] tool_names`, and a
//! `[[methods]]` entry's (or an upstream tool's) `derive_key` and `tasks`.

use serde::{Deserialize, Serialize};

/// `[mcp] tool_names`.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ToolNames {
    /// `^[a-zA-Z0-9_-]{1,64}$`, as OpenAI's and Anthropic's APIs require: every other
    /// character of a method's name made `_` (`counter.increment` → `counter_increment`).
    #[default]
    Safe,
    /// The methods' own names, dots kept (`counter.increment`), for hosts that want them.
    Method,
}

impl ToolNames {
    pub(crate) fn is_safe(&self) -> bool {
        *self == ToolNames::Safe
    }

    /// As `oncerpc-mcp` names them.
    pub fn mcp(self) -> oncerpc_mcp::ToolNames {
        match self {
            ToolNames::Safe => oncerpc_mcp::ToolNames::ModelSafe,
            ToolNames::Method => oncerpc_mcp::ToolNames::Method,
        }
    }
}

/// `[[methods]] derive_key = { from = "arguments", window_secs = 600 }`: a call that brings no
/// key gets one derived from its canonical arguments, so an identical call within the window
/// is a duplicate (for models that mint a new key on every retry).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeriveKey {
    pub from: DeriveFrom,
    pub window_secs: u64,
}

/// What a derived key is made from.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DeriveFrom {
    /// The call's arguments (params), canonical: member order and number spelling do not
    /// matter.
    Arguments,
}

/// How a command's tool runs over MCP `2026-07-28` with the tasks extension (`tasks = …`).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    /// A task when the client declares the extension, else synchronous (a command's default).
    Optional,
    /// Only as a task: a client that does not declare the extension is refused (`-32021`).
    Required,
}
