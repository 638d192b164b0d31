//! A step whose HTTP request is built from its input (an imported OpenAPI operation,
//! [`crate::openapi`]) instead of a `POST` of the input to the step's `url`.
//!
//! The flow still owns everything around the request — the step key, retries, timeouts,
//! tokens, trace headers, the answer — so such a step runs once like any other.

/// Builds one step's HTTP request from the step's input (the params, without oncerpc's
/// reserved members).
pub trait StepRequest: Send + Sync + std::fmt::Debug {
    /// The request for `input`; `Err` says which param is missing or malformed (the call is
    /// refused with `-32602` and nothing is sent).
    fn build(&self, input: &[u8]) -> Result<Built, String>;

    /// The header that carries the step key of a keyed execution (`Idempotency-Key`).
    fn key_header(&self) -> &str;
}

/// A request, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    pub method: reqwest::Method,
    /// The whole URL: base, filled path and query.
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// The body and its content type.
    pub body: Option<(Vec<u8>, &'static str)>,
}
