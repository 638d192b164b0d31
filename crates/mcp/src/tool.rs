//! One tool as the door lists and calls it, whoever offers it (a method of the registry, or
//! another server's tool, [`crate::external`]).

use oncerpc_core::Kind;
use serde_json::Value;

/// One tool: its name, kind and the JSON `tools/list` shows for it.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    /// The method a call runs (its own name; the tool's name may differ, [`crate::names`]).
    pub method: String,
    /// The argument holding the method's positional params ([`crate::schema`]), if any.
    pub array_argument: Option<String>,
    pub kind: Kind,
    pub json: Value,
    /// `tasks = "required"`: it runs only as a task ([`crate::tasks`]).
    pub task_required: bool,
    /// `execution` as the session era's `2025-11-25` `tools/list` shows it:
    /// `{"taskSupport": "forbidden" | "optional" | "required"}`.
    pub execution: Value,
    /// Its `x-mcp-header` arguments: the header's `{Name}` and the argument's path (read once
    /// here, checked on every stateless call over HTTP).
    pub header_params: Vec<(String, Vec<String>)>,
    /// The scopes a caller must hold to call it (its method's): `tools/list` shows it only to
    /// callers that hold them (SPEC §20).
    pub scopes: Vec<String>,
    /// Its method asks the client questions while it runs (a flow's `ask` step): a call
    /// needs a client that answers elicitation ([`crate::elicit`]).
    pub asks: bool,
}
