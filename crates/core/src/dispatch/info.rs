//! What a door tells a client about a command's key: the key, its status and when to try again.

use std::sync::Arc;

use oncerpc_protocol::Outcome;

use crate::method::IdempotencyStatus;

/// The idempotency key and status of a single command, for response headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyInfo {
    pub key: Arc<str>,
    pub status: IdempotencyStatus,
    /// With `processing`: when to try again (SPEC §3), for HTTP's `Retry-After`.
    pub retry_after_ms: Option<u64>,
    /// Where the key came from (SPEC §15), for `X-Idempotency-Key-Source`.
    pub origin: crate::derived::KeyOrigin,
}

impl IdempotencyInfo {
    pub(super) fn of(
        key: Arc<str>,
        origin: crate::derived::KeyOrigin,
        status: IdempotencyStatus,
        outcome: &Outcome,
    ) -> Self {
        let retry_after_ms = match status {
            IdempotencyStatus::Processing => crate::execution::in_progress_hint(outcome),
            _ => None,
        };
        IdempotencyInfo { key, status, retry_after_ms, origin }
    }
}
