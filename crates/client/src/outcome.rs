//! What a successful call returns.

/// `X-Idempotency-Status` (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdempotencyStatus {
    /// This call's attempt executed the command.
    New,
    /// The stored outcome of an earlier execution with this key.
    Duplicate,
    /// Still running (only seen on an error, `-32001`, or a flow's `processing`).
    Processing,
}

impl IdempotencyStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            IdempotencyStatus::New => "new",
            IdempotencyStatus::Duplicate => "duplicate",
            IdempotencyStatus::Processing => "processing",
        }
    }

    /// The header's value; `None` for anything else.
    pub fn parse(s: &str) -> Option<IdempotencyStatus> {
        match s.trim() {
            "new" => Some(IdempotencyStatus::New),
            "duplicate" => Some(IdempotencyStatus::Duplicate),
            "processing" => Some(IdempotencyStatus::Processing),
            _ => None,
        }
    }
}

impl std::fmt::Display for IdempotencyStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call's result with what the server said about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome<T> {
    /// The typed result.
    pub result: T,
    /// `new` or `duplicate` for a keyed command over HTTP; `None` for queries, keyless
    /// commands, batch entries and stdio (which send no status).
    pub status: Option<IdempotencyStatus>,
    /// The key the command was sent with, on every attempt (`None` for queries and keyless
    /// commands).
    pub key: Option<String>,
    /// `X-Correlation-Id` of the answer (HTTP), the id to find the call in the server's logs.
    pub correlation_id: Option<String>,
    /// How many attempts were sent (1 when the first one was answered).
    pub attempts: u32,
}

impl<T> Outcome<T> {
    /// The same outcome with its result mapped.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        Outcome {
            result: f(self.result),
            status: self.status,
            key: self.key,
            correlation_id: self.correlation_id,
            attempts: self.attempts,
        }
    }
}
