//! The process's log output (DESIGN §7): tracing's fmt layer (text or JSON lines) on stderr,
//! written by a background thread through a bounded queue that **drops** lines when the
//! sink cannot keep up (a full pipe, a slow terminal, a stalled log shipper) instead of
//! blocking the request that logs. Dropped lines are counted in
//! `oncerpc_log_lines_dropped_total`.

use clap::ValueEnum;
use tracing_appender::non_blocking::NonBlockingBuilder;
pub use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;

/// Log line format on stderr.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Lines the queue holds before it drops: about 2–10 MiB of text at typical line sizes.
pub const DEFAULT_BUFFER_LINES: usize = 16_384;

/// How the process logs.
#[derive(Clone, Debug)]
pub struct LogSettings {
    pub format: LogFormat,
    /// tracing `EnvFilter` syntax; `RUST_LOG` wins when set.
    pub level: String,
    /// Queue bound in lines; past it new lines are dropped and counted.
    pub buffer_lines: usize,
}

/// Install the global subscriber writing to `sink` off the calling threads. Keep the guard
/// until the process ends: dropping it flushes what is queued.
pub fn init<W>(settings: &LogSettings, sink: W) -> WorkerGuard
where
    W: std::io::Write + Send + 'static,
{
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(settings.buffer_lines.max(1))
        .thread_name("oncerpc-log")
        .finish(sink);
    let dropped = writer.error_counter();
    oncerpc_core::set_log_lines_dropped_source(move || dropped.dropped_lines() as u64);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&settings.level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer);
    match settings.format {
        LogFormat::Text => builder.with_ansi(false).init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).init(),
    }
    guard
}
