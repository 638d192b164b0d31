//! What is retried, and how long to wait: pure functions, so the table in docs/CLIENT.md is
//! the code's own and the tests need no clock.
//!
//! | what happened | query | keyed command | keyless command |
//! |---|---|---|---|
//! | cannot connect | retry | retry | no |
//! | attempt timed out, connection lost | retry | retry | no |
//! | HTTP `408`, `429`, `502`, `503`, `504` without a JSON-RPC answer | retry | retry | no |
//! | `-32001` in progress, `-32004` store unavailable, `-32007` overloaded, `-32008` rate limited | retry | retry | no |
//! | `-32700`, `-32600`, `-32601`, `-32602`, `-32002`, `-32003` (rejections) | no | no | no |
//! | `-32603`, `-32005`, `-32006`, application codes (the stored outcome) | no | no | no |
//! | `401`, another HTTP status without a JSON-RPC answer | no | no | no |

use std::time::Duration;

use oncerpc_protocol::ErrorCode;

/// Why an attempt failed, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// No connection was made.
    Connect,
    /// The attempt's time ran out before an answer.
    Timeout,
    /// The connection broke after the request may have been sent.
    Disconnected,
    /// An HTTP status without a JSON-RPC (or flows-door) answer.
    Status(u16),
    /// A JSON-RPC error code.
    Code(ErrorCode),
}

/// What a call is, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Safety {
    /// No side effects: any number of sends is the same as one.
    Query,
    /// A command with an idempotency key: the server runs it once per key.
    KeyedCommand,
    /// A command without a key: a second send may run it a second time.
    KeylessCommand,
}

/// Whether an attempt that failed with `cause` may be sent again (the table above).
///
/// ```
/// use oncerpc_client::retry::{Cause, Safety, retryable};
/// use oncerpc_protocol::ErrorCode;
/// assert!(retryable(Cause::Timeout, Safety::KeyedCommand));
/// assert!(!retryable(Cause::Timeout, Safety::KeylessCommand));
/// assert!(retryable(Cause::Code(ErrorCode::RequestInProgress), Safety::KeyedCommand));
/// assert!(!retryable(Cause::Code(ErrorCode::InvalidParams), Safety::KeyedCommand));
/// ```
pub fn retryable(cause: Cause, safety: Safety) -> bool {
    if safety == Safety::KeylessCommand {
        return false;
    }
    match cause {
        Cause::Connect | Cause::Timeout | Cause::Disconnected => true,
        Cause::Status(s) => matches!(s, 408 | 429 | 502 | 503 | 504),
        Cause::Code(c) => transient_code(c),
    }
}

/// The codes that say "nothing was decided yet, come back": in progress, store unavailable,
/// overloaded, rate limited. Every other code is a rejection or the stored outcome.
pub fn transient_code(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::RequestInProgress
            | ErrorCode::StoreUnavailable
            | ErrorCode::Overloaded
            | ErrorCode::RateLimited
    )
}

/// How a call is retried: within a total deadline, with full-jitter exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The whole call, every attempt and wait included (default 30 s).
    pub deadline: Duration,
    /// One attempt at most (default 10 s; never past the deadline).
    pub attempt_timeout: Duration,
    /// The first backoff's ceiling (default 100 ms); it doubles per attempt.
    pub base: Duration,
    /// The largest backoff ceiling (default 5 s).
    pub max_backoff: Duration,
    /// Retries after the first attempt at most (default: as many as the deadline allows).
    pub max_retries: Option<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            deadline: Duration::from_secs(30),
            attempt_timeout: Duration::from_secs(10),
            base: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            max_retries: None,
        }
    }
}

impl RetryPolicy {
    /// No retries: one attempt within the deadline.
    pub fn none() -> Self {
        RetryPolicy { max_retries: Some(0), ..RetryPolicy::default() }
    }

    /// The ceiling of the backoff after `attempt` attempts (1 = after the first):
    /// `min(max_backoff, base × 2^(attempt-1))`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1).min(30);
        self.base.saturating_mul(1u32 << shift).min(self.max_backoff)
    }

    /// Full jitter: a uniform wait in `[0, ceiling(attempt)]`.
    pub fn backoff(&self, attempt: u32, rng: &mut fastrand::Rng) -> Duration {
        let ceiling = self.ceiling(attempt).as_millis().min(u128::from(u64::MAX)) as u64;
        Duration::from_millis(rng.u64(0..=ceiling))
    }

    /// The wait before the next attempt: the server's hint when it gave one (`Retry-After`,
    /// `data.retry_after_ms`), else the jittered backoff. `None` when the next attempt would
    /// not fit: the attempt limit is reached, or the wait ends at or past the deadline
    /// (`remaining` is the time left).
    pub fn next_wait(
        &self,
        attempts: u32,
        hint: Option<Duration>,
        remaining: Duration,
        rng: &mut fastrand::Rng,
    ) -> Option<Duration> {
        if self.max_retries.is_some_and(|max| attempts > max) {
            return None;
        }
        let wait = hint.unwrap_or_else(|| self.backoff(attempts, rng));
        (wait < remaining).then_some(wait)
    }
}

/// `Retry-After` as seconds or an HTTP date (RFC 9110); `None` when unreadable.
pub fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Safety; 3] = [Safety::Query, Safety::KeyedCommand, Safety::KeylessCommand];

    #[test]
    fn a_keyless_command_is_never_retried() {
        for cause in [
            Cause::Connect,
            Cause::Timeout,
            Cause::Disconnected,
            Cause::Status(503),
            Cause::Code(ErrorCode::RequestInProgress),
            Cause::Code(ErrorCode::Overloaded),
        ] {
            assert!(!retryable(cause, Safety::KeylessCommand), "{cause:?}");
            assert!(retryable(cause, Safety::KeyedCommand), "{cause:?}");
            assert!(retryable(cause, Safety::Query), "{cause:?}");
        }
    }

    #[test]
    fn the_transient_codes_are_retried_and_no_other() {
        for code in ErrorCode::TABLE {
            let expected = matches!(code.code(), -32001 | -32004 | -32007 | -32008);
            assert_eq!(retryable(Cause::Code(code), Safety::KeyedCommand), expected, "{code}");
        }
        assert!(!retryable(Cause::Code(ErrorCode::Application(-1)), Safety::KeyedCommand));
        assert!(!retryable(Cause::Code(ErrorCode::Application(-32001 - 100)), Safety::Query));
    }

    #[test]
    fn rejections_are_never_retried() {
        for code in [-32700, -32600, -32601, -32602, -32002, -32003] {
            for safety in ALL {
                assert!(!retryable(Cause::Code(ErrorCode::from_code(code)), safety), "{code} {safety:?}");
            }
        }
    }

    #[test]
    fn only_gateway_statuses_are_retried() {
        for status in [408, 429, 502, 503, 504] {
            assert!(retryable(Cause::Status(status), Safety::KeyedCommand), "{status}");
        }
        for status in [200, 400, 401, 403, 404, 409, 413, 422, 500] {
            assert!(!retryable(Cause::Status(status), Safety::KeyedCommand), "{status}");
        }
    }

    #[test]
    fn the_backoff_ceiling_doubles_up_to_its_cap() {
        let p = RetryPolicy {
            base: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
            ..RetryPolicy::default()
        };
        let ceilings: Vec<u128> = (1..=6).map(|a| p.ceiling(a).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(p.ceiling(u32::MAX), Duration::from_millis(1000));
    }

    #[test]
    fn full_jitter_stays_within_the_ceiling_and_spreads() {
        let p = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(7);
        let waits: Vec<Duration> = (0..200).map(|_| p.backoff(4, &mut rng)).collect();
        assert!(waits.iter().all(|w| *w <= p.ceiling(4)));
        let (min, max) = (waits.iter().min().unwrap(), waits.iter().max().unwrap());
        assert!(*max - *min > p.ceiling(4) / 2, "not spread: {min:?}..{max:?}");
    }

    #[test]
    fn the_servers_hint_is_the_wait_and_must_fit_the_deadline() {
        let p = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(1);
        let hint = Some(Duration::from_secs(1));
        assert_eq!(p.next_wait(1, hint, Duration::from_secs(5), &mut rng), hint);
        assert_eq!(p.next_wait(1, hint, Duration::from_millis(999), &mut rng), None);
        assert_eq!(p.next_wait(1, None, Duration::ZERO, &mut rng), None);
    }

    #[test]
    fn the_attempt_limit_stops_retries() {
        let p = RetryPolicy { max_retries: Some(2), ..RetryPolicy::default() };
        let mut rng = fastrand::Rng::with_seed(1);
        let left = Duration::from_secs(60);
        assert!(p.next_wait(1, None, left, &mut rng).is_some());
        assert!(p.next_wait(2, None, left, &mut rng).is_some());
        assert!(p.next_wait(3, None, left, &mut rng).is_none());
        assert!(RetryPolicy::none().next_wait(1, None, left, &mut rng).is_none());
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after(" 1 ", now), Some(Duration::from_secs(1)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(3));
        assert_eq!(parse_retry_after(&later, now), Some(Duration::from_secs(3)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(3));
        assert_eq!(parse_retry_after(&past, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }
}
