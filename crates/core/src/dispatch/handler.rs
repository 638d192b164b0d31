//! One handler call: its deadline and its panic guard.

use std::time::Instant;

use futures::FutureExt;
use oncerpc_protocol::{ErrorCode, Outcome, RawValue, RpcError};

use crate::method::{Context, HandlerResult, Method};

/// Run a handler with its deadline; a panic becomes `-32603` and the server carries on.
/// The deadline is `started + timeout`: no clock read here.
pub(crate) async fn run_handler(
    method: &Method,
    ctx: Context,
    params: Option<&RawValue>,
    started: Instant,
) -> Outcome {
    let cid = ctx.correlation_id.clone();
    // A keyed flow tells its journal which step's request is out, for a deadline's answer.
    let journal = ctx.journal.clone();
    let mut call =
        std::pin::pin!(std::panic::AssertUnwindSafe(method.handler.call(ctx, params)).catch_unwind());
    // A handler that answers on its first poll (every handler that cannot block) needs no
    // timer: the deadline is only armed for one that has to wait. Building and dropping a
    // `Sleep` per call was ~5 % of the server's CPU on batches of 50.
    let finished = match futures::poll!(call.as_mut()) {
        std::task::Poll::Ready(done) => Ok(done),
        std::task::Poll::Pending => {
            let deadline = deadline(method, started);
            // Boxed: the timer is then not part of every call's future (it would be moved with
            // each entry of a batch).
            Box::pin(tokio::time::timeout_at(deadline, call)).await
        }
    };
    match (finished, journal) {
        (Err(_), Some(journal)) => Outcome::Error(timed_out(method, journal.in_flight())),
        (finished, _) => handler_outcome(method, &cid, finished),
    }
}

/// The timeout error of `method`. `steps`: for a keyed flow that sent a step, the step whose
/// request was out when the deadline fired (`data.step_in_flight`, `data.step`): the upstream
/// may have acted on it, so a force retry sends it again (with the same step key).
fn timed_out(method: &Method, steps: Option<Option<String>>) -> RpcError {
    let mut data = serde_json::json!({ "timeout_ms": method.spec.timeout.as_millis() as u64 });
    match steps {
        Some(Some(step)) => {
            data["step_in_flight"] = true.into();
            data["step"] = step.into();
        }
        Some(None) => data["step_in_flight"] = false.into(),
        None => {}
    }
    RpcError::new(ErrorCode::Timeout).data(data)
}

/// When a handler's call that started with its request at `started` is cut short.
pub(super) fn deadline(method: &Method, started: Instant) -> tokio::time::Instant {
    tokio::time::Instant::from_std(started + method.spec.timeout)
}

/// What a handler's call came to: its result or error, a panic as `-32603`, a deadline passed
/// as the timeout error.
pub(super) fn handler_outcome(
    method: &Method,
    cid: &str,
    finished: Result<std::thread::Result<HandlerResult>, tokio::time::error::Elapsed>,
) -> Outcome {
    match finished {
        Ok(Ok(Ok(result))) => Outcome::Result(result),
        Ok(Ok(Err(e))) => Outcome::Error(e),
        Ok(Err(panic)) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(correlation_id = %cid, panic = %what, "handler panicked");
            Outcome::Error(RpcError::internal("the handler panicked"))
        }
        Err(_) => Outcome::Error(timed_out(method, None)),
    }
}
