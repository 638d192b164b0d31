//! Step retries by policy (SPEC §14): which failures another attempt may cure, and how
//! long to wait before it.
//!
//! Transient: no connection (refused, reset, DNS), the attempt's own `timeout_ms`, and the
//! statuses `429`, `502`, `503`, `504`. Anything else — another `4xx` or `5xx`, an answer
//! too large or not JSON — fails at once: sending the same request again would get the same
//! answer. The wait before attempt `n + 1` is exponential with jitter: a uniformly random
//! duration in `[b/2, b]` where `b = min(backoff_ms · 2^(n-1), max_backoff_ms)`, so that
//! clients retrying together spread out. A `Retry-After` (seconds or an HTTP date) on a
//! `429` or `503` is the wait instead, as the upstream asked. A wait that would end past the
//! method's deadline is not taken: the step fails with its last failure ([`next_wait`]).
//!
//! No number an upstream sends can panic here: a `Retry-After` of more seconds than a `u64`
//! holds is the longest wait, an HTTP date is read by `httpdate` (years up to 9999), and the
//! wait is compared with the time left, never added to an `Instant`.
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// `[[methods.steps]] retry = { attempts, backoff_ms, max_backoff_ms }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1: no retry).
    pub attempts: u32,
    /// The first wait's upper bound.
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
    /// No wait's upper bound is longer.
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
}

fn default_backoff_ms() -> u64 {
    100
}

fn default_max_backoff_ms() -> u64 {
    5_000
}

impl Default for RetryPolicy {
    /// One attempt: a step without `retry` is tried once, as before.
    fn default() -> Self {
        RetryPolicy {
            attempts: 1,
            backoff_ms: default_backoff_ms(),
            max_backoff_ms: default_max_backoff_ms(),
        }
    }
}

/// Most attempts a policy may ask for.
pub const MAX_ATTEMPTS: u32 = 20;

impl RetryPolicy {
    /// Why the policy is unusable, if it is.
    pub fn problem(&self) -> Option<String> {
        if self.attempts == 0 || self.attempts > MAX_ATTEMPTS {
            return Some(format!("retry.attempts must be 1 to {MAX_ATTEMPTS} (got {})", self.attempts));
        }
        if self.max_backoff_ms < self.backoff_ms {
            return Some(format!(
                "retry.max_backoff_ms ({}) is less than retry.backoff_ms ({})",
                self.max_backoff_ms, self.backoff_ms
            ));
        }
        None
    }

    /// The wait after the `attempt`-th failed attempt (1-based). `unit` is a random number
    /// in `[0, 1)`; `retry_after` is the upstream's own ask, which wins.
    pub fn wait(&self, attempt: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        if let Some(asked) = retry_after {
            return asked;
        }
        let exp = attempt.saturating_sub(1).min(32);
        let bound = self.backoff_ms.saturating_mul(1u64 << exp).min(self.max_backoff_ms);
        let unit = unit.clamp(0.0, 1.0);
        Duration::from_millis(bound / 2) + Duration::from_millis(((bound - bound / 2) as f64 * unit) as u64)
    }
}

/// How an attempt ended, as far as retrying goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    Succeeded,
    /// Another attempt may succeed (the upstream's `Retry-After`, when it sent one).
    Transient(Option<Duration>),
    /// Another attempt would fail the same way.
    Permanent,
}

impl Attempt {
    /// The label of `oncerpc_step_attempts_total{outcome}`.
    pub fn label(self) -> &'static str {
        match self {
            Attempt::Succeeded => "succeeded",
            Attempt::Transient(_) => "transient",
            Attempt::Permanent => "failed",
        }
    }
}

/// Whether an upstream status is worth another attempt.
pub fn transient_status(status: u16) -> bool {
    matches!(status, 429 | 502 | 503 | 504)
}

/// A `Retry-After` value: delta-seconds or an HTTP date (RFC 9110 §10.2.3); a date in the
/// past is no wait, and more seconds than a `u64` holds are `u64::MAX` seconds (the caller's
/// deadline caps every wait, [`next_wait`]).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The wait after the `attempt`-th failed attempt when `left` is the time until the method's
/// deadline: `None` when the wait would not end before it (the step fails with its last
/// failure). Whatever `retry_after` says, the wait taken is shorter than `left`.
pub fn next_wait(
    policy: &RetryPolicy,
    attempt: u32,
    retry_after: Option<Duration>,
    unit: f64,
    left: Duration,
) -> Option<Duration> {
    let wait = policy.wait(attempt, retry_after, unit);
    (wait < left).then_some(wait)
}

/// A random number in `[0, 1)` for the jitter.
pub fn unit() -> f64 {
    fastrand::f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(attempts: u32, backoff_ms: u64, max_backoff_ms: u64) -> RetryPolicy {
        RetryPolicy { attempts, backoff_ms, max_backoff_ms }
    }

    #[test]
    fn waits_grow_exponentially_within_the_jitter_band_up_to_the_cap() {
        let p = policy(10, 100, 1_000);
        for (attempt, bound) in [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1_000), (9, 1_000)] {
            assert_eq!(p.wait(attempt, None, 0.0), Duration::from_millis(bound / 2), "attempt {attempt}");
            assert_eq!(p.wait(attempt, None, 1.0), Duration::from_millis(bound), "attempt {attempt}");
            let mid = p.wait(attempt, None, 0.5).as_millis() as u64;
            assert!(mid > bound / 2 && mid < bound, "attempt {attempt}: {mid}");
        }
        assert_eq!(p.wait(u32::MAX, None, 1.0), Duration::from_millis(1_000), "no overflow");
    }

    #[test]
    fn retry_after_is_the_wait() {
        let p = policy(3, 100, 1_000);
        assert_eq!(p.wait(1, Some(Duration::from_secs(7)), 0.3), Duration::from_secs(7));
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00 GMT
        assert_eq!(parse_retry_after("1", now), Some(Duration::from_secs(1)));
        assert_eq!(parse_retry_after(" 120 ", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("", now), None);
        // Numbers past u64 are the longest wait, not "no Retry-After" (an immediate retry).
        let max = Some(Duration::from_secs(u64::MAX));
        assert_eq!(parse_retry_after("18446744073709551615", now), max);
        assert_eq!(parse_retry_after("99999999999999999999999999", now), max);
        assert_eq!(
            parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now).map(|d| d.as_secs() / 31_556_952),
            Some(7984),
            "years"
        );
    }

    #[test]
    fn no_wait_reaches_the_deadline() {
        let p = policy(3, 100, 1_000);
        let left = Duration::from_secs(2);
        assert_eq!(next_wait(&p, 1, Some(Duration::from_secs(1)), 0.5, left), Some(Duration::from_secs(1)));
        assert_eq!(next_wait(&p, 1, Some(Duration::from_secs(2)), 0.5, left), None);
        assert_eq!(next_wait(&p, 1, Some(Duration::from_secs(u64::MAX)), 0.5, left), None);
        assert_eq!(next_wait(&p, 1, Some(Duration::MAX), 0.5, Duration::MAX), None);
        assert_eq!(next_wait(&p, 1, None, 1.0, Duration::ZERO), None);
        assert_eq!(next_wait(&p, 1, None, 1.0, left), Some(Duration::from_millis(100)));
    }

    proptest::proptest! {
        /// Whatever an upstream sends as `Retry-After` (digits of any length, HTTP dates of any
        /// year, other text), whatever the clock, policy and time left: no panic, and a wait
        /// taken is shorter than the time left before the deadline.
        #[test]
        fn no_retry_after_panics_or_outlives_the_deadline(
            value in proptest::prop_oneof![
                "[0-9]{1,40}",
                "(Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{2} (Jan|Feb|Dec) [0-9]{4,6} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
                "\\PC{0,40}",
            ],
            now_secs in proptest::prelude::any::<u64>(),
            attempt in proptest::prelude::any::<u32>(),
            backoff_ms in proptest::prelude::any::<u64>(),
            unit in proptest::prelude::any::<f64>(),
            left_ms in proptest::prelude::any::<u64>(),
        ) {
            let now = SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(now_secs)).unwrap_or(SystemTime::UNIX_EPOCH);
            let asked = parse_retry_after(&value, now);
            let p = policy(3, backoff_ms, u64::MAX);
            let left = Duration::from_millis(left_ms);
            if let Some(wait) = next_wait(&p, attempt, asked, unit, left) {
                proptest::prop_assert!(wait < left, "{value:?}: {wait:?} >= {left:?}");
            }
        }
    }

    #[test]
    fn only_the_named_statuses_are_transient() {
        for s in [429, 502, 503, 504] {
            assert!(transient_status(s), "{s}");
        }
        for s in [400, 401, 404, 409, 422, 500, 501, 505] {
            assert!(!transient_status(s), "{s}");
        }
    }

    #[test]
    fn policies_are_checked() {
        assert_eq!(RetryPolicy::default().attempts, 1);
        assert!(RetryPolicy::default().problem().is_none());
        assert!(policy(0, 100, 1_000).problem().is_some());
        assert!(policy(MAX_ATTEMPTS + 1, 100, 1_000).problem().is_some());
        assert!(policy(3, 500, 100).problem().is_some());
        let p: RetryPolicy = toml::from_str("attempts = 5").unwrap();
        assert_eq!(p, policy(5, 100, 5_000));
        assert!(toml::from_str::<RetryPolicy>("attempts = 5\nbackof_ms = 1").is_err(), "typos are refused");
    }
}
