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

/// Progress an external tool's own server reported while it ran the call (an MCP
/// upstream's `notifications/progress`), passed on as it came.
#[derive(Debug, Clone, Copy)]
pub struct ToolProgress<'a> {
    /// How far it is (increasing; the unit is the server's).
    pub progress: f64,
    /// Out of how much, when the server knows.
    pub total: Option<f64>,
    /// What it is doing, in the server's words.
    pub message: Option<&'a str>,
}

/// One report to a door: a finished step of a flow, or a tool's own progress.
#[derive(Debug, Clone, Copy)]
pub enum Report<'a> {
    Step(StepProgress<'a>),
    Tool(ToolProgress<'a>),
}

/// Where a call's progress goes: a callback of the door that started it.
#[derive(Clone)]
pub struct Progress(Arc<dyn Fn(&Report<'_>) + Send + Sync>);

impl Progress {
    pub fn new(report: impl Fn(&Report<'_>) + Send + Sync + 'static) -> Progress {
        Progress(Arc::new(report))
    }

    /// Tell the door a step finished.
    pub fn report(&self, step: &StepProgress<'_>) {
        (self.0)(&Report::Step(*step))
    }

    /// Pass on the progress a tool's own server reported.
    pub fn forward(&self, progress: &ToolProgress<'_>) {
        (self.0)(&Report::Tool(*progress))
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Progress(..)")
    }
}
