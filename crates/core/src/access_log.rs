//! The access line's direct path (SPEC §7): a query's line handed, as typed values, to the
//! process's log writer instead of going through tracing's event machinery — recording ten
//! fields through `dyn Debug`, each formatted by `core::fmt`, was ~2,800 of a query's ~29,000
//! instructions. Whoever installs the log ([`set_access_log`]) decides whether it can write
//! the line exactly as its tracing layer would; lines it cannot (another format, a filter with
//! span directives) and lines inside a span (the span's fields belong on the line) still go
//! through tracing.

use std::sync::OnceLock;

/// The access line's target (its module), as tracing gives it.
pub const TARGET: &str = "oncerpc_core::dispatch::observe";

/// One request's access line: the fields of the `request` event, in its order.
pub struct AccessLine<'a> {
    pub correlation_id: &'a str,
    /// The method name as sent: written through [`LogSafe`](crate::LogSafe).
    pub method: &'a str,
    pub kind: &'a str,
    pub tenant: &'a str,
    /// Who called (SPEC §20), when its credential says: written through [`LogSafe`](crate::LogSafe).
    pub subject: Option<&'a str>,
    pub trace_id: Option<&'a str>,
    pub idempotency_status: Option<&'a str>,
    pub duration_us: u64,
    /// `ok` or `error`.
    pub outcome: &'a str,
    pub code: Option<i64>,
}

/// The process's access-line writer.
pub trait AccessLog: Send + Sync + 'static {
    /// Write `line` at `info` (the level of every line this path is given).
    fn write(&self, line: &AccessLine<'_>);
}

static ACCESS_LOG: OnceLock<Box<dyn AccessLog>> = OnceLock::new();

/// Install the direct path (one per process, like the global tracing subscriber; the first
/// call wins). Install it only where it writes what the tracing layer would, at `info`, for
/// the access line's target.
pub fn set_access_log(log: impl AccessLog) {
    let _ = ACCESS_LOG.set(Box::new(log));
}

/// The direct path, when one is installed and the line has no span around it.
pub(crate) fn direct() -> Option<&'static dyn AccessLog> {
    let log = ACCESS_LOG.get()?;
    tracing::Span::current().is_disabled().then_some(&**log)
}
