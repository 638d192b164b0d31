//! One attempt's raw answer, and how a failed attempt is described to the retry loop.

use std::time::{Duration, SystemTime};

use crate::error::Error;
use crate::outcome::IdempotencyStatus;
use crate::retry::{Cause, parse_retry_after};

/// What came back from one attempt, before it is read as JSON-RPC or as a flows-door answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reply {
    /// `None` over stdio.
    pub http_status: Option<u16>,
    pub content_type: String,
    pub body: Vec<u8>,
    pub idempotency_status: Option<IdempotencyStatus>,
    pub correlation_id: Option<String>,
    /// `Retry-After`, read.
    pub retry_after: Option<Duration>,
}

impl Reply {
    pub(crate) fn from_headers(status: u16, headers: &reqwest::header::HeaderMap, body: Vec<u8>) -> Reply {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        Reply {
            http_status: Some(status),
            content_type: header("content-type").unwrap_or_default(),
            body,
            idempotency_status: header("x-idempotency-status").as_deref().and_then(IdempotencyStatus::parse),
            correlation_id: header("x-correlation-id"),
            retry_after: header("retry-after").and_then(|v| parse_retry_after(&v, SystemTime::now())),
        }
    }

    /// The answer is not what the door sends: name its status and content type.
    pub(crate) fn unexpected(&self) -> Error {
        let text = String::from_utf8_lossy(&self.body);
        let snippet: String = text.chars().take(200).collect();
        Error::Unexpected {
            status: self.http_status.unwrap_or(0),
            content_type: self.content_type.clone(),
            snippet,
        }
    }
}

/// A failed attempt: the error, whether (and why) it may be retried, and the server's hint.
#[derive(Debug)]
pub(crate) struct Failed {
    /// `None`: final whatever the call is (a rejection, a stored outcome, a local error).
    pub cause: Option<Cause>,
    /// `Retry-After` or `data.retry_after_ms`.
    pub hint: Option<Duration>,
    pub error: Error,
}

impl Failed {
    pub(crate) fn fatal(error: Error) -> Failed {
        Failed { cause: None, hint: None, error }
    }
}

/// A reqwest error as the retry loop sees it: no connection, no answer in time, or a
/// connection that broke once the request may have left.
pub(crate) fn from_reqwest(e: &reqwest::Error, timeout: Duration) -> Failed {
    let text = chain(e);
    if e.is_timeout() {
        Failed { cause: Some(Cause::Timeout), hint: None, error: Error::Timeout(timeout) }
    } else if e.is_connect() {
        Failed { cause: Some(Cause::Connect), hint: None, error: Error::Connect(text) }
    } else if e.is_builder() {
        Failed::fatal(Error::InvalidCall(text))
    } else {
        Failed { cause: Some(Cause::Disconnected), hint: None, error: Error::Disconnected(text) }
    }
}

/// An error and its sources on one line.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        cur = s.source();
    }
    text
}
