//! Questions a running call asks its client (a flow's `ask` step, MCP elicitation): a door
//! that can ask puts an [`Ask`] in [`RequestMeta`](crate::RequestMeta); the handler finds it
//! in its [`Context`](crate::Context). A method that asks ([`MethodSpec::asks`](crate::MethodSpec))
//! is refused (`-32602`, nothing claimed or run) by a door that cannot.
//!
//! The door decides how: the session era sends `elicitation/create` and waits for the
//! client's response (the method's deadline bounds the wait); `2026-07-28` finds the answer in
//! the request's `inputResponses`, or notes the question for its `input_required` result.

use std::fmt;
use std::sync::Arc;

use crate::future::BoxFuture;

/// One question: the step that asks it, the text shown to the user, and the flat object
/// schema of the answer (MCP's `requestedSchema`).
#[derive(Debug, Clone)]
pub struct Question {
    pub step: String,
    pub message: String,
    pub schema: serde_json::Value,
    /// Why the client's previous answer to this question did not fit (it is asked again);
    /// `None` the first time.
    pub again: Option<String>,
}

/// What came of a question.
#[derive(Debug, Clone)]
pub enum Asked {
    /// The client's answer (MCP's `ElicitResult`: `action`, and `content` when accepted), as
    /// it sent it; the handler checks it.
    Answered(serde_json::Value),
    /// No answer in this request (`2026-07-28`: the question goes back as `input_required`),
    /// or the question could not be delivered: the execution stops unrecorded (`-32013`) and
    /// resumes on the retry.
    Pending(String),
    /// The client answered with an error: the step fails (`-32012`).
    Failed(String),
}

impl Asked {
    /// For the log: `answered`, `pending` or `failed`.
    pub fn label(&self) -> &'static str {
        match self {
            Asked::Answered(_) => "answered",
            Asked::Pending(_) => "pending",
            Asked::Failed(_) => "failed",
        }
    }
}

/// Where a call's questions go: a callback of the door that started it.
#[derive(Clone)]
pub struct Ask(Arc<dyn Fn(Question) -> BoxFuture<'static, Asked> + Send + Sync>);

impl Ask {
    pub fn new(ask: impl Fn(Question) -> BoxFuture<'static, Asked> + Send + Sync + 'static) -> Ask {
        Ask(Arc::new(ask))
    }

    /// Ask the client `question`; the future ends when it answers (or cannot).
    pub fn ask(&self, question: Question) -> BoxFuture<'static, Asked> {
        (self.0)(question)
    }
}

impl fmt::Debug for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Ask(..)")
    }
}
