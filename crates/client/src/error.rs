//! The client's errors: one type, each case a thing the caller can act on.

use std::time::Duration;

use oncerpc_protocol::{ErrorCode, KeyFormatError};
use serde_json::Value;

use crate::outcome::IdempotencyStatus;

/// A JSON-RPC error the server answered (or, on the flows door, its REST form).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcFailure {
    /// The code, from the one table of SPEC §8 (`oncerpc_protocol::ErrorCode`).
    pub code: ErrorCode,
    pub message: String,
    /// `error.data`, when the server sent one.
    pub data: Option<Value>,
    /// The idempotency key the call was sent with, if any (to force-retry a stored failure).
    pub key: Option<String>,
    /// `X-Idempotency-Status` of the answer, when the door sends it.
    pub status: Option<IdempotencyStatus>,
    /// `X-Correlation-Id` of the answer: the id to look for in the server's logs.
    pub correlation_id: Option<String>,
    /// The HTTP status of the answer (`200` for JSON-RPC errors on `/rpc`), when over HTTP.
    pub http_status: Option<u16>,
}

impl std::fmt::Display for RpcFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code.code(), self.message)?;
        if let Some(d) = &self.data {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

/// Everything a call can end with other than its result.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The idempotency key breaks the format of SPEC §3; nothing was sent.
    #[error("{0}")]
    InvalidKey(#[from] KeyFormatError),
    /// The call cannot be sent as asked (params that do not serialise, a key with array params
    /// on stdio, a flow on the stdio transport, …); nothing was sent.
    #[error("invalid call: {0}")]
    InvalidCall(String),
    /// The client could not be built (a malformed URL, an API key that is not a header value).
    #[error("invalid client configuration: {0}")]
    Config(String),
    /// The server answered with a JSON-RPC error (or the flows door with an error body).
    #[error("{0}")]
    Rpc(Box<RpcFailure>),
    /// No connection could be made (refused, unreachable, DNS, TLS handshake).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// An attempt got no answer within its time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection broke after the request may have been sent: the server may have run it.
    #[error("connection lost: {0}")]
    Disconnected(String),
    /// An HTTP answer that is not the door's JSON: a load balancer's page, a wrong URL.
    #[error("unexpected answer: HTTP {status}, content type {content_type:?}: {snippet}")]
    Unexpected {
        status: u16,
        /// The `Content-Type` header (`""` when absent).
        content_type: String,
        /// The first 200 characters of the body.
        snippet: String,
    },
    /// `401`: the API key is missing or wrong.
    #[error("unauthorized (HTTP 401): check the API key")]
    Unauthorized,
    /// The result arrived but is not the type asked for. The command ran: retry with the same
    /// key to read it again.
    #[error("the result does not decode as the type asked for ({source}); key: {key:?}")]
    Decode {
        key: Option<String>,
        #[source]
        source: serde_json::Error,
    },
    /// The stdio daemon could not be started, or wrote something that is not JSON-RPC.
    #[error("stdio daemon: {0}")]
    Stdio(String),
    /// Retries ended (the deadline, or the attempt limit) before an answer that is not
    /// transient; `last` is the last attempt's error.
    #[error("gave up after {attempts} attempts in {elapsed:?}: {last}")]
    GaveUp { attempts: u32, elapsed: Duration, last: Box<Error> },
}

impl Error {
    /// The JSON-RPC error behind this error, if any (looking through [`Error::GaveUp`]).
    pub fn rpc(&self) -> Option<&RpcFailure> {
        match self {
            Error::Rpc(f) => Some(f),
            Error::GaveUp { last, .. } => last.rpc(),
            _ => None,
        }
    }

    /// The JSON-RPC code behind this error, if any (looking through [`Error::GaveUp`]).
    pub fn code(&self) -> Option<ErrorCode> {
        self.rpc().map(|f| f.code)
    }

    /// The error of the last attempt: this one, or the one inside [`Error::GaveUp`].
    pub fn last(&self) -> &Error {
        match self {
            Error::GaveUp { last, .. } => last.last(),
            e => e,
        }
    }

    pub(crate) fn rpc_failure(f: RpcFailure) -> Error {
        Error::Rpc(Box::new(f))
    }
}
