//! W3C Trace Context (`traceparent`, `tracestate`): what a caller says about the trace its
//! request belongs to, read once at the door, carried with the request, and handed on to
//! every upstream step request as the parent of a span of the gateway's own.

/// A caller's trace context, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lowercase hex digits, not all zero.
    pub trace_id: String,
    /// The caller's span: 16 lowercase hex digits, not all zero.
    pub parent_id: String,
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
    /// `tracestate`, passed on as it came (at most [`MAX_TRACESTATE`] bytes, else dropped).
    pub state: Option<String>,
}

/// The longest `tracestate` passed on (the W3C limit of 32 members fits well inside).
pub const MAX_TRACESTATE: usize = 512;

fn lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl TraceContext {
    /// Read `traceparent` (version `00`, or a later version's first four fields) and
    /// `tracestate`; `None` for a missing or malformed `traceparent` (the request then starts
    /// no trace of its own: an invalid header is ignored, as the W3C rules ask).
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        let mut parts = traceparent.trim().split('-');
        let (version, trace_id, parent_id, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if !lower_hex(version, 2) || version == "ff" || (version == "00" && parts.next().is_some()) {
            return None;
        }
        let zero = |s: &str| s.bytes().all(|b| b == b'0');
        if !lower_hex(trace_id, 32) || zero(trace_id) || !lower_hex(parent_id, 16) || zero(parent_id) {
            return None;
        }
        if !lower_hex(flags, 2) {
            return None;
        }
        let state = tracestate
            .map(str::trim)
            .filter(|s| {
                !s.is_empty() && s.len() <= MAX_TRACESTATE && s.bytes().all(|b| (0x20..0x7f).contains(&b))
            })
            .map(str::to_owned);
        Some(TraceContext {
            trace_id: trace_id.to_owned(),
            parent_id: parent_id.to_owned(),
            flags: u8::from_str_radix(flags, 16).ok()?,
            state,
        })
    }

    /// A `traceparent` for a request the gateway makes within this trace, with a fresh span
    /// id of its own (returned too, for the log).
    pub fn child(&self) -> (String, String) {
        let span_id = new_span_id();
        (format!("00-{}-{span_id}-{:02x}", self.trace_id, self.flags), span_id)
    }
}

/// 16 random lowercase hex digits, never all zero.
pub fn new_span_id() -> String {
    loop {
        let n = uuid::Uuid::new_v4().as_u128() as u64;
        if n != 0 {
            return format!("{n:016x}");
        }
    }
}

/// The trace context a request carries in `params._meta` (`traceparent`, `tracestate`): for
/// a door whose protocol has no headers (`oncerpc stdio`), and `/rpc` when the request brought
/// no `traceparent` header (a header wins). Anything else — no `_meta`, not an object, a
/// `traceparent` that is not a valid string — is no trace, as a malformed header is ignored.
/// `_meta` is a reserved member of params: no part of the fingerprint.
pub fn from_params(params: Option<&serde_json::value::RawValue>) -> Option<TraceContext> {
    let text = params?.get();
    // Most requests have no `_meta`: a byte search of their text (each `_` looked at), not a
    // parse.
    // (A plain loop: params are short, and a searcher's set-up would cost more than the scan.)
    let bytes = text.as_bytes();
    let named = (1..bytes.len())
        .any(|i| bytes[i] == b'_' && bytes[i - 1] == b'"' && bytes[i..].starts_with(b"_meta\""));
    if !named {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(rename = "_meta", borrow)]
        meta: Option<Meta<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        traceparent: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow)]
        tracestate: Option<std::borrow::Cow<'a, str>>,
    }
    let meta = serde_json::from_str::<Params<'_>>(text).ok()?.meta?;
    TraceContext::parse(&meta.traceparent?, meta.tracestate.as_deref())
}

/// The target of the spans the gateway exports ([`SpanExport`]): the request, its idempotency
/// claim, each upstream step, an async event's run. Log output leaves them out.
pub const SPAN_TARGET: &str = "oncerpc::span";

/// Exports the gateway's spans (the binary's OpenTelemetry pipeline, `[telemetry]`). Installed
/// once; without one no such span is made and the request path is as it was.
pub trait SpanExport: Send + Sync + 'static {
    /// Make `span` a child of the caller's span (a remote parent).
    fn adopt(&self, span: &tracing::Span, caller: &TraceContext);
    /// The W3C `traceparent` naming `span`: its trace and its own span id (sent to an upstream,
    /// whose spans then hang under it). `None` when the span is not exported.
    fn traceparent(&self, span: &tracing::Span) -> Option<String>;
}

static EXPORT: std::sync::OnceLock<Box<dyn SpanExport>> = std::sync::OnceLock::new();

/// Install the span exporter (the first one wins; `false` for a later one).
pub fn install_export(export: Box<dyn SpanExport>) -> bool {
    EXPORT.set(export).is_ok()
}

/// The span exporter, when spans are exported.
pub fn export() -> Option<&'static dyn SpanExport> {
    EXPORT.get().map(|e| &**e)
}

/// The span of one request (`/rpc`, stdio, the flows door, an MCP tool call), a child of the
/// caller's trace when it brought one; a disabled span when nothing exports spans.
pub fn request_span(
    method: &str,
    cid: &str,
    tenant: &str,
    subject: Option<&str>,
    caller: Option<&TraceContext>,
) -> tracing::Span {
    let Some(export) = export() else { return tracing::Span::none() };
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        "oncerpc.request",
        otel.name = %method,
        otel.kind = "server",
        rpc.method = %method,
        oncerpc.correlation_id = %cid,
        oncerpc.tenant = %tenant,
        enduser.id = subject.map(tracing::field::display),
        otel.status_code = tracing::field::Empty,
    );
    if let Some(caller) = caller {
        export.adopt(&span, caller);
    }
    span
}

/// The span of an async event's run (after a crash or a re-drive it has no caller).
pub fn event_span(method: &str, event_id: &str, caller: Option<&TraceContext>) -> tracing::Span {
    let Some(export) = export() else { return tracing::Span::none() };
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        "oncerpc.event",
        otel.name = %format_args!("event {method}"),
        rpc.method = %method,
        oncerpc.event_id = %event_id,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(caller) = caller {
        export.adopt(&span, caller);
    }
    span
}

/// The span of an idempotency claim (a child of the current request's).
pub fn claim_span() -> tracing::Span {
    if export().is_none() {
        return tracing::Span::none();
    }
    tracing::info_span!(target: SPAN_TARGET, "oncerpc.idempotency.claim", otel.name = "idempotency claim")
}

/// The span of one upstream step request (a child of the current request's or event's).
pub fn step_span(step: &str, attempt: u32) -> tracing::Span {
    if export().is_none() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        target: SPAN_TARGET,
        "oncerpc.step",
        otel.name = %format_args!("step {step}"),
        otel.kind = "client",
        oncerpc.step = %step,
        oncerpc.attempt = attempt,
        otel.status_code = tracing::field::Empty,
    )
}

/// The current span when it is an exported one, else a disabled span: for work spawned off
/// a request, which must carry its exported span along (a task starts with none entered).
pub fn exported_current() -> tracing::Span {
    // Without an exporter no span is exported: the current span need not be looked up.
    if export().is_none() {
        return tracing::Span::none();
    }
    let current = tracing::Span::current();
    if current.metadata().is_some_and(|m| m.target() == SPAN_TARGET) {
        current
    } else {
        tracing::Span::none()
    }
}

/// Mark an exported span failed (`otel.status_code = ERROR`); nothing for a disabled one.
pub fn set_error(span: &tracing::Span) {
    if !span.is_disabled() {
        span.record("otel.status_code", "ERROR");
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn without_an_exporter_no_span_is_made() {
        assert!(export().is_none());
        assert!(request_span("m", "c", "t", None, None).is_disabled());
        assert!(claim_span().is_disabled());
        assert!(step_span("s", 1).is_disabled());
        assert!(event_span("m", "evt_1", None).is_disabled());
    }

    #[test]
    fn a_trace_context_is_read_from_params_meta_and_anything_else_is_none() {
        let raw = |t: &str| serde_json::value::RawValue::from_string(t.to_owned()).unwrap();
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let traced = raw(&format!(r#"{{"sku":"A","_meta":{{"traceparent":"{tp}","tracestate":"v=1"}}}}"#));
        let t = from_params(Some(&traced)).expect("a trace");
        assert_eq!(
            (t.trace_id.as_str(), t.parent_id.as_str(), t.state.as_deref()),
            ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", Some("v=1"))
        );
        for none in [
            r#"{"sku":"A"}"#.to_owned(),
            r#"{"_meta":{"traceparent":7}}"#.to_owned(),
            r#"{"_meta":"x"}"#.to_owned(),
            r#"{"_meta":{"traceparent":"00-bad-01"}}"#.to_owned(),
            format!(r#"["_meta",{{"traceparent":"{tp}"}}]"#),
            format!(r#"{{"a":{{"_meta":{{"traceparent":"{tp}"}}}}}}"#),
        ] {
            assert!(from_params(Some(&raw(&none))).is_none(), "{none}");
        }
        assert!(from_params(None).is_none());
    }
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read_and_its_child_keeps_the_trace() {
        let t = TraceContext::parse(TP, Some("rojo=00f067aa0ba902b7")).unwrap();
        assert_eq!(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_id, "00f067aa0ba902b7");
        assert_eq!(t.flags, 1);
        assert_eq!(t.state.as_deref(), Some("rojo=00f067aa0ba902b7"));
        let (child, span) = t.child();
        assert_eq!(child, format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span}-01"));
        assert!(lower_hex(&span, 16) && span != t.parent_id);
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        ] {
            assert_eq!(TraceContext::parse(bad, None), None, "{bad}");
        }
        // A later version may carry more fields; its first four are read.
        assert!(
            TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", None).is_some()
        );
        // An oversized or binary tracestate is dropped, the traceparent kept.
        let big = "a=".to_owned() + &"b".repeat(MAX_TRACESTATE);
        assert_eq!(TraceContext::parse(TP, Some(&big)).unwrap().state, None);
    }
}
