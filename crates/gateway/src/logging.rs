//! The process's log output (SPEC §7): tracing's fmt layer (text or JSON lines) on stderr,
//! written off the request path. A request only copies its formatted line into a bounded
//! queue; a writer thread of its own drains the queue every few milliseconds in one write.
//! When the queue is full (the sink cannot keep up: a full pipe, a slow terminal, a stalled
//! log shipper) new lines are **dropped** and counted in `oncerpc_log_lines_dropped_total`;
//! a request never waits for the log.
//!
//! Why not tracing-appender's `NonBlocking`: it wakes its writer thread for every line, and on
//! a small machine those wake-ups (a futex and a context switch per request) cost more than the
//! request; the profile showed a third of the CPU in the scheduler. Here the writer sleeps
//! between drains, and nobody wakes it.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::log_text::{CachedSecondTime, FastFields, FastFormat};

/// Log line format on stderr.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Lines the queue holds before it drops: about 2–10 MiB of text at typical line sizes.
pub const DEFAULT_BUFFER_LINES: usize = 16_384;
/// How often the writer thread drains the queue.
const DRAIN_EVERY: Duration = Duration::from_millis(10);
/// How long the last drain may take at exit before the rest is given up.
const EXIT_FLUSH: Duration = Duration::from_secs(1);

/// How the process logs.
#[derive(Clone, Debug)]
pub struct LogSettings {
    pub format: LogFormat,
    /// tracing `EnvFilter` syntax; `RUST_LOG` wins when set.
    pub level: String,
    /// What fixed `level` when a reload may not change it (`--log-level`); `None`: it is the
    /// file's `[log] level`, which a reload changes.
    pub pinned: Option<&'static str>,
    /// Queue bound in lines; past it new lines are dropped and counted.
    pub buffer_lines: usize,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    lines: usize,
}

struct Queue {
    pending: Mutex<Pending>,
    max_lines: usize,
    dropped: AtomicU64,
    stop: AtomicBool,
}

impl Queue {
    fn push(&self, line: &[u8]) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.lines >= self.max_lines {
            drop(p);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        p.bytes.extend_from_slice(line);
        p.lines += 1;
    }

    fn take(&self, spare: &mut Vec<u8>) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::swap(&mut p.bytes, spare);
        p.lines = 0;
    }
}

/// The writer handed to tracing: one `write` per formatted event (the fmt layer formats a
/// whole line, then writes it once).
#[derive(Clone)]
pub struct QueueWriter(Arc<Queue>);

impl Write for QueueWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for QueueWriter {
    type Writer = QueueWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Keep it until the process ends: dropping it writes what is queued (for at most a second).
pub struct LogGuard {
    queue: Arc<Queue>,
    done: std::sync::mpsc::Receiver<()>,
    /// The span export (`[telemetry]`), flushed first when the process ends.
    telemetry: Option<crate::telemetry::Telemetry>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        if let Some(t) = self.telemetry.take() {
            t.shutdown();
        }
        self.queue.stop.store(true, Ordering::Relaxed);
        let _ = self.done.recv_timeout(EXIT_FLUSH);
    }
}

/// A queue of at most `max_lines` lines drained into `sink` by a thread of its own.
pub fn writer<W>(sink: W, max_lines: usize) -> (QueueWriter, LogGuard)
where
    W: Write + Send + 'static,
{
    let queue = Arc::new(Queue {
        pending: Mutex::new(Pending::default()),
        max_lines: max_lines.max(1),
        dropped: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let (tx, done) = std::sync::mpsc::channel();
    let q = queue.clone();
    let mut sink = sink;
    std::thread::Builder::new()
        .name("oncerpc-log".into())
        .spawn(move || {
            let mut chunk = Vec::new();
            loop {
                let stopping = q.stop.load(Ordering::Relaxed);
                q.take(&mut chunk);
                if !chunk.is_empty() {
                    // A sink that fails (closed stderr) loses the lines; nothing else to do.
                    let _ = sink.write_all(&chunk).and_then(|()| sink.flush());
                    chunk.clear();
                }
                if stopping {
                    break;
                }
                std::thread::sleep(DRAIN_EVERY);
            }
            let _ = tx.send(());
        })
        .expect("spawn the log writer thread");
    (QueueWriter(queue.clone()), LogGuard { queue, done, telemetry: None })
}

/// The access line's direct path ([`oncerpc_core::access_log`]): formatted by
/// [`crate::log_text::access_line`] into the thread's scratch string, then queued like any line.
/// The access line's direct path, on while the log level lets its target through at `info`
/// (a reload may change that: [`crate::log_level`]).
struct DirectAccess(Arc<Queue>, Arc<AtomicBool>);

impl oncerpc_core::access_log::AccessLog for DirectAccess {
    fn write(&self, line: &oncerpc_core::access_log::AccessLine<'_>) {
        if !self.1.load(Ordering::Relaxed) {
            return;
        }
        crate::log_text::with_scratch(|text| {
            crate::log_text::access_line(text, line);
            self.0.push(text.as_bytes());
        });
    }
}

impl QueueWriter {
    /// Lines dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.0.dropped.load(Ordering::Relaxed)
    }
}

/// Install the global subscriber writing to `sink` off the calling threads.
///
/// The filter is `RUST_LOG` when set, else `settings.level`. A plain list of levels and
/// targets (`info`, `warn,oncerpc_core=debug`) is served by `Targets`, which costs nothing
/// per span; only a filter that needs `EnvFilter`'s span-field directives gets `EnvFilter`,
/// whose bookkeeping on every span enter and exit (a shared lock) cost several percent of a
/// query's throughput on two cores.
///
/// With `telemetry` (`[telemetry]`'s pipeline), the core's exported spans
/// ([`oncerpc_core::trace::SPAN_TARGET`]) go to its layer and are left out of the log lines;
/// the filter then lets them through at `info` whatever the log level.
pub fn init<W>(
    settings: &LogSettings,
    sink: W,
    telemetry: Option<(crate::telemetry::OtelLayer, crate::telemetry::Telemetry)>,
) -> LogGuard
where
    W: Write + Send + 'static,
{
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let (writer, mut guard) = writer(sink, settings.buffer_lines);
    let counter = writer.clone();
    oncerpc_core::set_log_lines_dropped_source(move || counter.dropped());
    let env = std::env::var("RUST_LOG").ok().filter(|s| !s.trim().is_empty());
    let pinned = if env.is_some() { Some("RUST_LOG") } else { settings.pinned };
    let spec = env.unwrap_or_else(|| settings.level.clone());
    if let Some((otel, t)) = telemetry {
        guard.telemetry = Some(t);
        init_exporting(&spec, pinned, settings.format, writer, otel);
        return guard;
    }
    type Boxed = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;
    let filter: Boxed = match spec.parse::<Targets>() {
        Ok(targets) => {
            // The access line's direct path writes what the text layer would, at `info`: only
            // where that layer is the one and a plain target filter (no field names) lets the
            // line through (its flag follows the level).
            let (live, on) = crate::log_level::install(targets, &spec, pinned);
            if !spec.contains('[') && matches!(settings.format, LogFormat::Text) {
                oncerpc_core::access_log::set_access_log(DirectAccess(writer.0.clone(), on));
            }
            Box::new(live)
        }
        Err(_) => {
            crate::log_level::pin(pinned.unwrap_or("a filter with span fields"));
            Box::new(EnvFilter::new(&spec))
        }
    };
    let filtered = tracing_subscriber::registry().with(filter);
    type Fmt =
        Box<dyn Layer<tracing_subscriber::layer::Layered<Boxed, tracing_subscriber::Registry>> + Send + Sync>;
    let fmt = tracing_subscriber::fmt::layer().with_writer(writer).with_timer(CachedSecondTime);
    let fmt: Fmt = match settings.format {
        LogFormat::Text => {
            Box::new(fmt.with_ansi(false).fmt_fields(FastFields).event_format(FastFormat::new()))
        }
        LogFormat::Json => Box::new(fmt.json().with_current_span(true).with_span_list(false)),
    };
    filtered.with(fmt).init();
    guard
}

/// [`init`] with the span export: per-layer filters, the log's (the level, without the exported
/// spans) and the export's (the exported spans only). Built only when `[telemetry]` is on, so
/// the plain path keeps its global filter.
fn init_exporting(
    spec: &str,
    pinned: Option<&'static str>,
    format: LogFormat,
    writer: QueueWriter,
    otel: crate::telemetry::OtelLayer,
) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{FilterExt, Targets, filter_fn};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let not_exported = filter_fn(|m| m.target() != oncerpc_core::trace::SPAN_TARGET);
    let exported = filter_fn(|m| m.target() == oncerpc_core::trace::SPAN_TARGET && m.is_span());
    let base = tracing_subscriber::registry().with(otel.with_filter(exported));
    let fmt = || tracing_subscriber::fmt::layer().with_writer(writer.clone()).with_timer(CachedSecondTime);
    let text = || fmt().with_ansi(false).fmt_fields(FastFields).event_format(FastFormat::new());
    let json = || fmt().json().with_current_span(true).with_span_list(false);
    let live = spec.parse::<Targets>().map(|t| crate::log_level::install(t, spec, pinned).0);
    if live.is_err() {
        crate::log_level::pin(pinned.unwrap_or("a filter with span fields"));
    }
    match (live, format) {
        (Ok(t), LogFormat::Text) => base.with(text().with_filter(t.and(not_exported))).init(),
        (Ok(t), LogFormat::Json) => base.with(json().with_filter(t.and(not_exported))).init(),
        (Err(_), LogFormat::Text) => {
            base.with(text().with_filter(EnvFilter::new(spec).and(not_exported))).init()
        }
        (Err(_), LogFormat::Json) => {
            base.with(json().with_filter(EnvFilter::new(spec).and(not_exported))).init()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that takes `delay` per write and records what it got.
    struct Slow(Arc<Mutex<Vec<u8>>>, Duration);

    impl Write for Slow {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            std::thread::sleep(self.1);
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_slow_sink_loses_lines_past_the_bound_and_counts_them() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let (mut w, guard) = writer(Slow(got.clone(), Duration::from_millis(200)), 100);
        // Far more than the queue holds while the sink is busy with its first write.
        for i in 0..10_000 {
            w.write_all(format!("line {i}\n").as_bytes()).unwrap();
        }
        let dropped = w.dropped();
        drop(guard);
        let written = String::from_utf8(got.lock().unwrap().clone()).unwrap().lines().count() as u64;
        assert!(dropped > 0, "the bound holds");
        assert_eq!(written + dropped, 10_000, "every line is either written or counted");
    }

    #[test]
    fn lines_are_written_in_order_and_flushed_at_exit() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let (mut w, guard) = writer(Slow(got.clone(), Duration::ZERO), 1_000);
        for i in 0..500 {
            w.write_all(format!("{i}\n").as_bytes()).unwrap();
        }
        drop(guard);
        let text = String::from_utf8(got.lock().unwrap().clone()).unwrap();
        let lines: Vec<usize> = text.lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(lines, (0..500).collect::<Vec<_>>());
        assert_eq!(w.dropped(), 0);
    }
}
