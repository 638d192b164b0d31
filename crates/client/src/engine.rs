//! The retry loop every call goes through: attempts within the deadline, waits between them.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;
use crate::retry::{RetryPolicy, Safety, retryable};
use crate::transport::Failed;

/// Run `attempt` until it succeeds, fails for good, or the policy says stop. `attempt` gets
/// the attempt's number (from 1) and its time. `Ok` carries the attempts made.
pub(crate) async fn run<R, F, Fut>(
    policy: &RetryPolicy,
    safety: Safety,
    mut attempt: F,
) -> Result<(R, u32), Error>
where
    F: FnMut(u32, Duration) -> Fut,
    Fut: Future<Output = Result<R, Failed>>,
{
    let start = Instant::now();
    let mut rng = fastrand::Rng::new();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let remaining = policy.deadline.saturating_sub(start.elapsed());
        let timeout = policy.attempt_timeout.min(remaining).max(Duration::from_millis(1));
        tracing::debug!(attempt = attempts, timeout_ms = timeout.as_millis() as u64, "attempt");
        let failed = match attempt(attempts, timeout).await {
            Ok(r) => return Ok((r, attempts)),
            Err(f) => f,
        };
        if !failed.cause.is_some_and(|c| retryable(c, safety)) {
            return Err(failed.error);
        }
        let remaining = policy.deadline.saturating_sub(start.elapsed());
        let Some(wait) = policy.next_wait(attempts, failed.hint, remaining, &mut rng) else {
            tracing::info!(attempts, error = %failed.error, "giving up");
            return Err(Error::GaveUp { attempts, elapsed: start.elapsed(), last: Box::new(failed.error) });
        };
        tracing::info!(
            attempt = attempts,
            wait_ms = wait.as_millis() as u64,
            error = %failed.error,
            "retrying"
        );
        tokio::time::sleep(wait).await;
    }
}
