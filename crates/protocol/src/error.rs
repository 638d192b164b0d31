//! The error-code table of SPEC §8, in exactly one place.
//!
//! Every JSON-RPC error oncerpc emits is an [`RpcError`] whose [`ErrorCode`] carries its
//! number, its canonical message and the HTTP status the flows door maps it to. Nothing
//! else in the workspace spells out a code number or an HTTP status for an RPC error.

use std::borrow::Cow;
use std::fmt;
use std::io::Write as _;

use serde_json::value::RawValue;

/// A JSON-RPC error code: the reserved ones of the specification, oncerpc's own
/// (`-32001..=-32013`), the MCP `2026-07-28` revision's (`-32020..=-32022`), or an application
/// code a handler chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// -32700: invalid JSON, invalid UTF-8, nesting deeper than the parser's limit.
    ParseError,
    /// -32600: the message is not a valid request (shape, id type, batch rules, id required,
    /// notification not allowed).
    InvalidRequest,
    /// -32601: no such method.
    MethodNotFound,
    /// -32602: params failed the schema or the handler's type, or the idempotency key is
    /// malformed, missing or ambiguous.
    InvalidParams,
    /// -32603: the handler panicked or the server failed internally.
    InternalError,
    /// -32001: the same command is being executed right now.
    RequestInProgress,
    /// -32002: the idempotency key was used before with different params.
    KeyReused,
    /// -32003: force retry of an execution that succeeded.
    ForceRetryRefused,
    /// -32004: the idempotency store cannot be reached; commands fail closed.
    StoreUnavailable,
    /// -32005: the method's deadline passed.
    Timeout,
    /// -32006: an upstream step failed.
    UpstreamFailed,
    /// -32007: too many requests in flight.
    Overloaded,
    /// -32008: the tenant is over its rate (`rate_per_sec`/`burst`).
    RateLimited,
    /// -32009: the execution was cancelled before it finished (MCP `tasks/cancel`); its
    /// record keeps this outcome, so a retry with the same key gets it.
    Cancelled,
    /// -32010: the caller is who it says, but lacks a scope the method requires (HTTP `403`;
    /// `data.scopes`: what the method requires).
    Forbidden,
    /// -32011: the identity provider that must vouch for the caller's token cannot be reached
    /// (its keys or introspection down, slow or answering garbage): HTTP `503`, retry later.
    IdentityUnavailable,
    /// -32012: the method asked its client a question (an `ask` step, MCP elicitation) and the
    /// user declined or cancelled it, or the client answered it with an error; the record
    /// keeps this outcome, so a retry with the same key gets it (`force_retry` asks again).
    Declined,
    /// -32013: the method waits for its client's answer to a question (an `ask` step) that
    /// this request did not bring. Never stored: the record stays resumable, and MCP
    /// `2026-07-28` answers it as an `input_required` result naming the question.
    InputRequired,
    /// -32020 (MCP `2026-07-28`, `HeaderMismatch`): an HTTP header (`MCP-Protocol-Version`,
    /// `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`) is missing, malformed or disagrees with the body.
    HeaderMismatch,
    /// -32021 (MCP `2026-07-28`, `MissingRequiredClientCapability`): the request needs a client
    /// capability its `_meta` does not declare (`data.requiredCapabilities`).
    MissingRequiredClientCapability,
    /// -32022 (MCP `2026-07-28`, `UnsupportedProtocolVersionError`): the request's protocol
    /// version is not served (`data`: `supported`, `requested`).
    UnsupportedProtocolVersion,
    /// Any other code, chosen by an application handler.
    Application(i32),
}

impl ErrorCode {
    /// Every code of the table, in table order (used by docs and tests).
    pub const TABLE: [ErrorCode; 21] = [
        ErrorCode::ParseError,
        ErrorCode::InvalidRequest,
        ErrorCode::MethodNotFound,
        ErrorCode::InvalidParams,
        ErrorCode::InternalError,
        ErrorCode::RequestInProgress,
        ErrorCode::KeyReused,
        ErrorCode::ForceRetryRefused,
        ErrorCode::StoreUnavailable,
        ErrorCode::Timeout,
        ErrorCode::UpstreamFailed,
        ErrorCode::Overloaded,
        ErrorCode::RateLimited,
        ErrorCode::Cancelled,
        ErrorCode::Forbidden,
        ErrorCode::IdentityUnavailable,
        ErrorCode::Declined,
        ErrorCode::InputRequired,
        ErrorCode::HeaderMismatch,
        ErrorCode::MissingRequiredClientCapability,
        ErrorCode::UnsupportedProtocolVersion,
    ];

    /// The number on the wire.
    pub const fn code(self) -> i32 {
        match self {
            ErrorCode::ParseError => -32700,
            ErrorCode::InvalidRequest => -32600,
            ErrorCode::MethodNotFound => -32601,
            ErrorCode::InvalidParams => -32602,
            ErrorCode::InternalError => -32603,
            ErrorCode::RequestInProgress => -32001,
            ErrorCode::KeyReused => -32002,
            ErrorCode::ForceRetryRefused => -32003,
            ErrorCode::StoreUnavailable => -32004,
            ErrorCode::Timeout => -32005,
            ErrorCode::UpstreamFailed => -32006,
            ErrorCode::Overloaded => -32007,
            ErrorCode::RateLimited => -32008,
            ErrorCode::Cancelled => -32009,
            ErrorCode::Forbidden => -32010,
            ErrorCode::IdentityUnavailable => -32011,
            ErrorCode::Declined => -32012,
            ErrorCode::InputRequired => -32013,
            ErrorCode::HeaderMismatch => -32020,
            ErrorCode::MissingRequiredClientCapability => -32021,
            ErrorCode::UnsupportedProtocolVersion => -32022,
            ErrorCode::Application(c) => c,
        }
    }

    /// The code for a number read off the wire or out of a store.
    pub fn from_code(code: i32) -> ErrorCode {
        ErrorCode::TABLE.into_iter().find(|c| c.code() == code).unwrap_or(ErrorCode::Application(code))
    }

    /// The canonical message (the specification's wording for the reserved codes).
    pub const fn message(self) -> &'static str {
        match self {
            ErrorCode::ParseError => "Parse error",
            ErrorCode::InvalidRequest => "Invalid Request",
            ErrorCode::MethodNotFound => "Method not found",
            ErrorCode::InvalidParams => "Invalid params",
            ErrorCode::InternalError => "Internal error",
            ErrorCode::RequestInProgress => "Request in progress",
            ErrorCode::KeyReused => "Idempotency key reused with different params",
            ErrorCode::ForceRetryRefused => "Force retry refused: the execution succeeded",
            ErrorCode::StoreUnavailable => "Idempotency store unavailable",
            ErrorCode::Timeout => "Timeout",
            ErrorCode::UpstreamFailed => "Upstream failed",
            ErrorCode::Overloaded => "Overloaded",
            ErrorCode::RateLimited => "Rate limited",
            ErrorCode::Cancelled => "Cancelled",
            ErrorCode::Forbidden => "Forbidden",
            ErrorCode::IdentityUnavailable => "Identity provider unavailable",
            ErrorCode::Declined => "Declined by the user",
            ErrorCode::InputRequired => "Input required",
            ErrorCode::HeaderMismatch => "Header mismatch",
            ErrorCode::MissingRequiredClientCapability => "Missing required client capability",
            ErrorCode::UnsupportedProtocolVersion => "Unsupported protocol version",
            ErrorCode::Application(_) => "Application error",
        }
    }

    /// The HTTP status the REST flows door answers with (SPEC §8). `/rpc` always answers
    /// JSON-RPC errors with `200`.
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorCode::ParseError
            | ErrorCode::InvalidRequest
            | ErrorCode::InvalidParams
            | ErrorCode::HeaderMismatch
            | ErrorCode::MissingRequiredClientCapability
            | ErrorCode::UnsupportedProtocolVersion => 400,
            ErrorCode::MethodNotFound => 404,
            ErrorCode::InternalError => 500,
            ErrorCode::RequestInProgress => 200,
            ErrorCode::KeyReused => 422,
            ErrorCode::ForceRetryRefused | ErrorCode::Cancelled | ErrorCode::Declined => 409,
            ErrorCode::InputRequired => 409,
            ErrorCode::Forbidden => 403,
            ErrorCode::StoreUnavailable | ErrorCode::Overloaded | ErrorCode::IdentityUnavailable => 503,
            ErrorCode::RateLimited => 429,
            ErrorCode::Timeout => 504,
            ErrorCode::UpstreamFailed => 502,
            ErrorCode::Application(_) => 500,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code(), self.message())
    }
}

/// A JSON-RPC error object: `{"code":…,"message":…,"data":…}`.
#[derive(Debug, Clone)]
pub struct RpcError {
    pub code: ErrorCode,
    pub message: Cow<'static, str>,
    /// Already-serialised JSON for `error.data`.
    pub data: Option<Box<RawValue>>,
}

impl RpcError {
    /// An error with the code's canonical message and no data.
    pub fn new(code: ErrorCode) -> Self {
        RpcError { code, message: Cow::Borrowed(code.message()), data: None }
    }

    /// An error with its own message.
    pub fn with_message(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Self {
        RpcError { code, message: message.into(), data: None }
    }

    /// Attach `data` (any serialisable value). A value that cannot be serialised is dropped.
    pub fn data(mut self, data: impl serde::Serialize) -> Self {
        self.data = serde_json::value::to_raw_value(&data).ok();
        self
    }

    /// Attach a human-readable reason as `data` (a JSON string).
    pub fn reason(self, reason: impl fmt::Display) -> Self {
        self.data(reason.to_string())
    }

    pub fn parse_error(reason: impl fmt::Display) -> Self {
        Self::new(ErrorCode::ParseError).reason(reason)
    }

    pub fn invalid_request(reason: impl fmt::Display) -> Self {
        Self::new(ErrorCode::InvalidRequest).reason(reason)
    }

    pub fn method_not_found() -> Self {
        Self::new(ErrorCode::MethodNotFound)
    }

    pub fn invalid_params(message: impl Into<Cow<'static, str>>) -> Self {
        Self::with_message(ErrorCode::InvalidParams, message)
    }

    pub fn internal(reason: impl fmt::Display) -> Self {
        Self::new(ErrorCode::InternalError).reason(reason)
    }

    /// The HTTP status of this error on the flows door.
    pub fn http_status(&self) -> u16 {
        self.code.http_status()
    }

    /// Serialise as a JSON error object.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"code\":");
        // Writing into a Vec cannot fail.
        let _ = write!(out, "{}", self.code.code());
        out.extend_from_slice(b",\"message\":");
        let _ = serde_json::to_writer(&mut *out, self.message.as_ref());
        if let Some(data) = &self.data {
            out.extend_from_slice(b",\"data\":");
            out.extend_from_slice(data.get().as_bytes());
        }
        out.push(b'}');
    }

    /// The error object as JSON text.
    pub fn to_json(&self) -> Box<RawValue> {
        let mut out = Vec::with_capacity(64);
        self.write_json(&mut out);
        // The writer above only produces valid JSON.
        RawValue::from_string(String::from_utf8(out).expect("utf-8")).expect("valid json")
    }

    /// Read an error object back (e.g. out of a store).
    pub fn from_json(raw: &str) -> Result<Self, serde_json::Error> {
        #[derive(serde::Deserialize)]
        struct Wire {
            code: i32,
            message: String,
            data: Option<Box<RawValue>>,
        }
        let w: Wire = serde_json::from_str(raw)?;
        Ok(RpcError { code: ErrorCode::from_code(w.code), message: Cow::Owned(w.message), data: w.data })
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code.code(), self.message)?;
        if let Some(d) = &self.data {
            write!(f, " ({})", d.get())?;
        }
        Ok(())
    }
}

impl std::error::Error for RpcError {}

impl PartialEq for RpcError {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code
            && self.message == other.message
            && self.data.as_ref().map(|d| d.get()) == other.data.as_ref().map(|d| d.get())
    }
}

impl From<ErrorCode> for RpcError {
    fn from(code: ErrorCode) -> Self {
        RpcError::new(code)
    }
}
