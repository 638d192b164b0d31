//! Progress of a running call, for a door that can tell its client while the call runs (the
//! MCP door's `notifications/progress` and `notifications/message`). A door puts a
//! [`Progress`] in [`RequestMeta`](crate::RequestMeta); the handler finds it in its
//! [`Context`](crate::Context) and reports each step it finishes. Reporting never blocks and
//! never fails: a client that stopped listening costs nothing.

use std::fmt;
use std::sync::Arc;

/// One finished step of a running call.
#[derive(Debug, Clone, Copy)]
pub struct StepProgress<'a> {
    /// The step's name.
    pub step: &'a str,
    /// Steps finished so far, this one included.
    pub done: u32,
    /// Steps in all.
    pub total: u32,
    /// Whether the step succeeded (a failed step ends the call).
    pub ok: bool,
    /// The step's output came from the journal of an earlier attempt: it did not run again.
    pub resumed: bool,
}

/// Where a call's progress goes: a callback of the door that started it.
#[derive(Clone)]
pub struct Progress(Arc<dyn Fn(&StepProgress<'_>) + Send + Sync>);

impl Progress {
    pub fn new(report: impl Fn(&StepProgress<'_>) + Send + Sync + 'static) -> Progress {
        Progress(Arc::new(report))
    }

    /// Tell the door a step finished.
    pub fn report(&self, step: &StepProgress<'_>) {
        (self.0)(step)
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Progress(..)")
    }
}
