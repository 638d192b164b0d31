//! What a document yields: its operations as methods.

use crate::config::StepConfig;

/// One operation as a method.
#[derive(Debug, Clone)]
pub struct ImportedMethod {
    /// `prefix` + the model-safe operationId.
    pub name: String,
    /// The operationId (or, without one, the name derived from method and path).
    pub operation: String,
    /// `POST /charges`.
    pub http: String,
    pub kind: oncerpc_core::Kind,
    pub description: String,
    pub params_schema: serde_json::Value,
    /// Its one step, whose request is the operation's.
    pub step: StepConfig,
    pub scopes: Vec<String>,
    pub key_from: Option<String>,
    pub mcp: bool,
    pub timeout_ms: Option<u64>,
}

/// What a document yields: its methods, and notes on the operations left out.
#[derive(Debug, Default)]
pub struct Import {
    pub methods: Vec<ImportedMethod>,
    pub notes: Vec<String>,
}
