//! The text log's lines, written as tracing-subscriber's default (`Full`) format writes them,
//! byte for byte, at a fraction of its cost — every request writes one (SPEC §7), and
//! formatting it was ~6,000 instructions of a ~37,000-instruction query (callgrind,
//! docs/BENCHMARKS.md).
//!
//! * [`FastFields`]: numbers, booleans and plain strings are written directly, every other
//!   value with one formatting call instead of three; the message, errors and `r#`-prefixed
//!   names are left to `DefaultVisitor` itself. (`log.` fields are special to
//!   `DefaultVisitor` only with tracing-subscriber's `tracing-log` feature, which this build
//!   does not enable; the test below would show it.)
//! * [`FastFormat`]: an event outside any span (a query's access line) is timestamp, level,
//!   target and fields, written without the formatting machinery; inside a span, or with ANSI
//!   colours, the default format writes it.
//! * [`CachedSecondTime`]: tracing's default timestamp, the date and time of day formatted once
//!   a second per thread.

use std::fmt;
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Format, Full, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// tracing's default timestamp (RFC 3339, microseconds, UTC), with the date and time of day
/// formatted once a second per thread instead of on every line.
#[derive(Debug, Default, Clone, Copy)]
pub struct CachedSecondTime;

impl FormatTime for CachedSecondTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        use std::cell::RefCell;
        use std::time::UNIX_EPOCH;
        thread_local! {
            static SECOND: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
        }
        let now = std::time::SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        SECOND.with(|cached| {
            let mut cached = cached.borrow_mut();
            if cached.0 != now.as_secs() || cached.1.is_empty() {
                let whole = UNIX_EPOCH + Duration::from_secs(now.as_secs());
                let text = humantime::format_rfc3339_seconds(whole).to_string();
                *cached = (now.as_secs(), text.trim_end_matches('Z').to_owned());
            }
            w.write_str(&cached.1)?;
            // `.{:06}Z`, without the formatting machinery.
            let micros = now.subsec_micros();
            let mut digits = [b'.', b'0', b'0', b'0', b'0', b'0', b'0', b'Z'];
            let mut n = micros;
            for d in digits[1..7].iter_mut().rev() {
                *d = b'0' + (n % 10) as u8;
                n /= 10;
            }
            w.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)
        })
    }
}

/// The default `Full` format's line for an event outside any span, written directly (module
/// docs); any other event is the default format's.
#[derive(Debug)]
pub struct FastFormat {
    full: Format<Full, CachedSecondTime>,
}

impl FastFormat {
    pub fn new() -> FastFormat {
        FastFormat { full: tracing_subscriber::fmt::format().with_timer(CachedSecondTime).with_ansi(false) }
    }
}

impl<S, N> FormatEvent<S, N> for FastFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if writer.has_ansi_escapes() || ctx.event_scope().is_some() {
            return self.full.format_event(ctx, writer, event);
        }
        if CachedSecondTime.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        let meta = event.metadata();
        let level = match *meta.level() {
            Level::TRACE => " TRACE ",
            Level::DEBUG => " DEBUG ",
            Level::INFO => "  INFO ",
            Level::WARN => "  WARN ",
            Level::ERROR => " ERROR ",
        };
        writer.write_str(level)?;
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

/// `DefaultFields`' output, faster (module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct FastFields;

impl<'writer> FormatFields<'writer> for FastFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Visitor { writer, is_empty: true, result: Ok(()) };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Visitor<'a> {
    writer: Writer<'a>,
    is_empty: bool,
    result: fmt::Result,
}

impl Visitor<'_> {
    /// `name=` after the separating space; `false`: the field is one `DefaultVisitor` writes.
    fn begin(&mut self, field: &Field) -> bool {
        let name = field.name();
        if self.result.is_err() || name == "message" || name.starts_with("r#") {
            return false;
        }
        if self.is_empty {
            self.is_empty = false;
        } else if let Err(e) = self.writer.write_char(' ') {
            self.result = Err(e);
            return true;
        }
        self.result = self.writer.write_str(name).and_then(|()| self.writer.write_char('='));
        true
    }

    /// The message (`DefaultVisitor` writes it escaped, a character at a time): written whole
    /// when it is printable ASCII, which escaping leaves as it is; `false`: anything else.
    fn message(&mut self, value: &dyn fmt::Debug) -> bool {
        if self.result.is_err() {
            return false;
        }
        with_scratch(|text| {
            use fmt::Write as _;
            if write!(text, "{value:?}").is_err() || !text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                return false;
            }
            let pad = if self.is_empty { "" } else { " " };
            self.is_empty = false;
            self.result = self.writer.write_str(pad).and_then(|()| self.writer.write_str(text));
            true
        })
    }

    /// `name=` and the digits of `value`; `false`: the field is one `DefaultVisitor` writes.
    fn integer(&mut self, field: &Field, value: impl itoa::Integer) -> bool {
        if !self.begin(field) {
            return false;
        }
        let mut buf = itoa::Buffer::new();
        self.result = self.result.and_then(|()| self.writer.write_str(buf.format(value)));
        true
    }

    /// The field as `DefaultVisitor` writes it.
    fn delegate(&mut self, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut inner = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut inner);
        self.is_empty = false;
        self.result = VisitOutput::finish(inner);
    }
}

/// Whether `<str as Debug>` writes `s` unchanged between its quotes.
fn plain(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

impl Visit for Visitor<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if !self.integer(field, value) {
            self.delegate(|v| v.record_u64(field, value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if !self.integer(field, value) {
            self.delegate(|v| v.record_i64(field, value));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.begin(field) {
            self.result =
                self.result.and_then(|()| self.writer.write_str(if value { "true" } else { "false" }));
        } else {
            self.delegate(|v| v.record_bool(field, value));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if !plain(value) || !self.begin(field) {
            return self.delegate(|v| v.record_str(field, value));
        }
        self.result = self.result.and_then(|()| {
            self.writer.write_char('"')?;
            self.writer.write_str(value)?;
            self.writer.write_char('"')
        });
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(|v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" && self.message(value) {
            return;
        }
        if self.begin(field) {
            self.result = self.result.and_then(|()| write!(self.writer, "{value:?}"));
        } else {
            self.delegate(|v| v.record_debug(field, value));
        }
    }
}

/// `f` with this thread's scratch string, empty: a line's text is built there without an
/// allocation per line. Should it be in use (nothing built in it logs, so it never is), a
/// fresh one.
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut String) -> R) -> R {
    use std::cell::RefCell;
    thread_local! {
        static SCRATCH: RefCell<String> = const { RefCell::new(String::new()) };
    }
    SCRATCH.with(|cell| {
        let mut own = String::new();
        let mut held = cell.try_borrow_mut();
        let text = held.as_deref_mut().unwrap_or(&mut own);
        text.clear();
        f(text)
    })
}

/// The access line as [`FastFormat`] and [`FastFields`] write the `request` event outside any
/// span, from its typed fields ([`oncerpc_core::access_log`]): the same bytes, without
/// tracing's field visiting. `out` is cleared first.
pub fn access_line(out: &mut String, line: &oncerpc_core::access_log::AccessLine<'_>) {
    use std::fmt::Write as _;
    out.clear();
    if CachedSecondTime.format_time(&mut Writer::new(out)).is_err() {
        out.push_str("<unknown time>");
    }
    out.push_str("  INFO ");
    out.push_str(oncerpc_core::access_log::TARGET);
    out.push_str(": request correlation_id=");
    out.push_str(line.correlation_id);
    out.push_str(" method=");
    let safe = oncerpc_core::LogSafe(line.method);
    match safe.as_plain() {
        Some(method) => out.push_str(method),
        None => {
            let _ = write!(out, "{safe}");
        }
    }
    for (name, value) in [(" kind=", Some(line.kind)), (" tenant=", Some(line.tenant))] {
        if let Some(v) = value {
            out.push_str(name);
            out.push_str(v);
        }
    }
    if let Some(subject) = line.subject {
        out.push_str(" subject=");
        let safe = oncerpc_core::LogSafe(subject);
        match safe.as_plain() {
            Some(s) => out.push_str(s),
            None => {
                let _ = write!(out, "{safe}");
            }
        }
    }
    for (name, value) in [(" trace_id=", line.trace_id), (" idempotency_status=", line.idempotency_status)] {
        if let Some(v) = value {
            out.push_str(name);
            out.push_str(v);
        }
    }
    let mut digits = itoa::Buffer::new();
    out.push_str(" duration_us=");
    out.push_str(digits.format(line.duration_us));
    out.push_str(" outcome=");
    out.push_str(line.outcome);
    if let Some(code) = line.code {
        out.push_str(" code=");
        out.push_str(digits.format(code));
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("outer failed")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// Every kind of field, in events and spans: what the log has always written.
    fn emit() {
        let cid: Arc<str> = Arc::from("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
        let code: Option<i64> = Some(-32601);
        let none: Option<u64> = None;
        tracing::info!(
            correlation_id = %cid,
            method = %"sum",
            kind = %"query",
            duration_us = 42u64,
            outcome = %"ok",
            code,
            none,
            "request"
        );
        tracing::warn!(
            plain = "abc",
            quoted = "say \"hi\"",
            slash = "a\\b",
            unicode = "naïve ☃",
            control = "tab\there\nnl\u{1b}[31m",
            negative = -7i64,
            big = u64::MAX,
            yes = true,
            no = false,
            float = 1.5f64,
            debug = ?vec![1, 2],
            a_field_name_longer_than_the_forty_eight_bytes_of_its_buffer = 1u64,
            log.target = "a log field",
            r#type = "raw name",
            "message with \u{1b}[2J an escape and {} args",
            3
        );
        let err = Outer(std::io::Error::other("inner cause"));
        tracing::error!(error = &err as &(dyn std::error::Error + 'static), "failed");
        let simple = std::io::Error::other("only one");
        tracing::error!(error = &simple as &(dyn std::error::Error + 'static));
        let span = tracing::info_span!("rpc", correlation_id = %cid, n = 1u64, s = "x y", empty = tracing::field::Empty);
        let _g = span.enter();
        span.record("empty", 9u64);
        tracing::info!(inside = "span", "in a span");
        let inner = tracing::info_span!("step", name = "reserve", attempt = 2u64);
        inner.in_scope(|| tracing::info!("nested"));
        tracing::info!("");
        tracing::info!(n = 1u64, "naïve \u{85} message");
    }

    /// Every line of `emit`, with the timestamps (the only part that differs between two
    /// runs) checked for their shape and cut off.
    fn capture(fast: bool) -> Vec<String> {
        use tracing_subscriber::layer::SubscriberExt;
        let buf = Buf::default();
        let layer = tracing_subscriber::fmt::layer().with_writer(buf.clone()).with_ansi(false);
        if fast {
            let layer = layer.fmt_fields(FastFields).event_format(FastFormat::new());
            tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        } else {
            let layer = layer.with_timer(CachedSecondTime);
            tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        }
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        out.lines()
            .map(|l| {
                let (time, rest) = l.split_once(' ').unwrap_or_else(|| panic!("no timestamp: {l:?}"));
                let shape = time.len() == 27 && time.ends_with('Z') && time.as_bytes()[19] == b'.';
                assert!(shape, "{time:?} in {l:?}");
                rest.to_owned()
            })
            .collect()
    }

    #[test]
    fn writes_what_the_default_format_writes_byte_for_byte() {
        let default = capture(false);
        let fast = capture(true);
        assert!(default[0].contains("correlation_id=0193a1b2"), "{default:?}");
        assert!(default[0].starts_with(" INFO "), "{default:?}");
        assert_eq!(default.len(), 8, "{default:?}");
        assert_eq!(fast, default);
    }

    /// The access line's direct path writes, for every shape of line, the bytes the `request`
    /// event gets from the text layer (the event as `observe` emits it outside a span).
    #[test]
    fn the_direct_access_line_is_the_events_line_byte_for_byte() {
        use oncerpc_core::access_log::{AccessLine, TARGET};
        use tracing_subscriber::layer::SubscriberExt;
        let long = "m".repeat(oncerpc_core::LOG_MAX_CHARS + 5);
        let lines = [
            AccessLine {
                correlation_id: "1",
                method: "sum",
                kind: "query",
                tenant: "default",
                subject: None,
                trace_id: None,
                idempotency_status: None,
                duration_us: 17,
                outcome: "ok",
                code: None,
            },
            AccessLine {
                correlation_id: "\"x\"",
                method: "no\u{1b}[31m \"such\"\n",
                kind: "unknown",
                tenant: "acme",
                subject: Some("billing-job \u{7}\"x\""),
                trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736"),
                idempotency_status: Some("duplicate"),
                duration_us: u64::MAX,
                outcome: "error",
                code: Some(-32601),
            },
            AccessLine {
                correlation_id: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
                method: &long,
                kind: "command",
                tenant: "t",
                subject: Some("acme-service"),
                trace_id: None,
                idempotency_status: Some("new"),
                duration_us: 0,
                outcome: "error",
                code: Some(7),
            },
        ];
        for line in &lines {
            let buf = Buf::default();
            let layer = tracing_subscriber::fmt::layer()
                .with_writer(buf.clone())
                .with_ansi(false)
                .fmt_fields(FastFields)
                .event_format(FastFormat::new());
            tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
                tracing::info!(
                    target: TARGET,
                    correlation_id = Some(tracing::field::display(line.correlation_id)),
                    method = %oncerpc_core::LogSafe(line.method),
                    kind = %line.kind,
                    tenant = %line.tenant,
                    subject = line.subject.map(|s| tracing::field::display(oncerpc_core::LogSafe(s))),
                    trace_id = line.trace_id.map(tracing::field::display),
                    idempotency_status = line.idempotency_status.map(tracing::field::display),
                    duration_us = line.duration_us,
                    outcome = %line.outcome,
                    code = line.code,
                    "request"
                )
            });
            let event = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
            let mut direct = String::new();
            access_line(&mut direct, line);
            // The timestamps differ (27 bytes, then the same text).
            assert_eq!(event.len(), direct.len(), "{event}{direct}");
            assert_eq!(event[27..], direct[27..]);
        }
    }

    #[test]
    fn the_timestamp_is_rfc3339_with_microseconds() {
        let mut s = String::new();
        CachedSecondTime.format_time(&mut Writer::new(&mut s)).unwrap();
        let parsed = humantime::parse_rfc3339(&s).unwrap_or_else(|e| panic!("{s}: {e}"));
        let age = std::time::SystemTime::now().duration_since(parsed).unwrap();
        assert!(age < Duration::from_secs(60), "{s}");
        assert_eq!((s.len(), &s[19..20], &s[26..]), (27, ".", "Z"), "{s}");
    }
}
