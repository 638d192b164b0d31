//! `oncerpc`: the command line (docs/SPEC.md, "Command line").

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod client_cli;
mod reload_cli;

/// mimalloc instead of glibc malloc: the request path allocates small, short-lived buffers,
/// which glibc served with costly consolidation (see docs/BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use oncerpc::config::Source;
use oncerpc::logging::{self, LogFormat, LogGuard, LogSettings};
use oncerpc::{App, Config, ConfigError, Mode};

#[derive(Parser)]
#[command(
    name = "oncerpc",
    version,
    about = "JSON-RPC 2.0 gateway: a command runs once, however many times it is sent"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve JSON-RPC over HTTP (`POST /rpc`).
    Serve(ServeArgs),
    /// Serve JSON-RPC on stdin/stdout (Content-Length or newline-delimited framing), for
    /// editor clients and local tools. Logs go to stderr.
    Stdio(StdioArgs),
    /// Serve the registry as MCP tools on stdin/stdout (newline-delimited JSON), for desktop
    /// hosts that start a server as a command. Logs go to stderr.
    Mcp(StdioArgs),
    /// Call a method of a running gateway: the result on stdout, the status and key on
    /// stderr. A command with a key (--key, --auto-key) is retried with that same key.
    Call(client_cli::CallArgs),
    /// Submit a flow to a running gateway (the event id on stdout), wait for it (--wait),
    /// or call it synchronously (--sync).
    Flow(client_cli::FlowArgs),
    /// Ask a running `oncerpc serve` to reload its configuration (the `SIGHUP` that
    /// `systemctl reload` sends), named by its pid file or pid; with --healthz, wait for the
    /// outcome.
    Reload(reload_cli::ReloadArgs),
    /// Validate a config file and print what it would serve.
    CheckConfig {
        /// The TOML file to check.
        file: PathBuf,
    },
    /// Print a shell completion script on stdout, e.g.
    /// `oncerpc completions bash > /etc/bash_completion.d/oncerpc`.
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff, generated from this command line) on stdout.
    #[command(hide = true)]
    Manpage,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML config file; flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:8080.
    #[arg(long)]
    listen: Option<String>,
    /// Idempotency store URL: memory:// | sqlite://PATH | redis://HOST:PORT | postgres://…
    #[arg(long)]
    store: Option<String>,
    /// dev (keyless commands run without deduplication) or production (commands need a key).
    #[arg(long)]
    mode: Option<Mode>,
    /// Write the process id to this file once listening (removed on exit), for
    /// `oncerpc reload --pid-file`.
    #[arg(long)]
    pid_file: Option<PathBuf>,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(clap::Args)]
struct StdioArgs {
    /// TOML config file; flags override it (`listen` and `[[tenants]]` do not apply).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Idempotency store URL: memory:// | sqlite://PATH
    #[arg(long)]
    store: Option<String>,
    /// dev (keyless commands run without deduplication) or production (commands need a key).
    #[arg(long)]
    mode: Option<Mode>,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(clap::Args)]
struct LogArgs {
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log filter (tracing EnvFilter syntax); RUST_LOG wins when set. Given, it fixes the
    /// level: the file's `[log] level` (default info) then does not apply, nor a reload's.
    #[arg(long)]
    log_level: Option<String>,
    /// Log lines queued for stderr at most; past it lines are dropped (and counted in
    /// `oncerpc_log_lines_dropped_total`) rather than slowing requests.
    #[arg(long, default_value_t = logging::DEFAULT_BUFFER_LINES)]
    log_buffer_lines: usize,
}

impl LogArgs {
    /// The settings with the file's `[log] level` where no flag sets one.
    fn settings(&self, file_level: &str) -> LogSettings {
        LogSettings {
            format: self.log_format,
            level: self.log_level.clone().unwrap_or_else(|| file_level.to_owned()),
            pinned: self.log_level.is_some().then_some("--log-level"),
            buffer_lines: self.log_buffer_lines,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file } => {
            match Config::load(&file)
                .and_then(with_openapi)
                .and_then(|(c, y)| oncerpc::check_methods(&c).map(|()| (c, y)))
                .and_then(|(c, y)| oncerpc::check_tls_files(&c).map(|()| (c, y)))
            {
                Ok((cfg, yields)) => {
                    print_summary(&cfg);
                    oncerpc::openapi::print(&yields);
                    oncerpc::mcp_upstreams::print_upstreams(&cfg);
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("oncerpc: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Serve(args) => serve(args),
        Command::Stdio(args) => stdio(args, false),
        Command::Mcp(args) => stdio(args, true),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "oncerpc", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Call(args) => client_cli::call(args),
        Command::Reload(args) => reload_cli::reload(args),
        Command::Flow(args) => client_cli::flow(args),
        Command::Manpage => manpage(),
    }
}

/// `check-config`: the `[[openapi]]` documents read (and fetched) as serving will, their
/// operations added to the config's methods.
fn with_openapi(mut cfg: Config) -> Result<(Config, Vec<oncerpc::openapi::Yield>), ConfigError> {
    if cfg.openapi.is_empty() {
        return Ok((cfg, Vec::new()));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ConfigError::Invalid(format!("a runtime to fetch the OpenAPI documents: {e}")))?;
    let client = oncerpc::upstream::client(&cfg.upstream).map_err(ConfigError::Invalid)?;
    let yields = rt.block_on(oncerpc::openapi::expand(&mut cfg, &client))?;
    cfg.validate()?;
    Ok((cfg, yields))
}

/// The man page, rendered by clap_mangen from the same definition clap parses with, so the
/// two cannot drift apart. The hidden `manpage` subcommand itself is not listed.
fn manpage() -> ExitCode {
    let mut out = std::io::stdout().lock();
    match clap_mangen::Man::new(Cli::command()).render(&mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oncerpc: writing the man page failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Shared by `serve` and `stdio`: logging, the config with its overrides, the runtime, and
/// the app (which connects to its store). `Err` is the exit code, the reason already printed.
fn start(
    log: &LogArgs,
    source: Source,
    worker_threads: Option<usize>,
) -> Result<(tokio::runtime::Runtime, App, LogGuard), ExitCode> {
    // The config first: `[telemetry]` is part of how the log is set up (nothing logs before).
    let loaded = source.load().map_err(|e| {
        eprintln!("oncerpc: {e}");
        ExitCode::from(2)
    })?;
    let cfg = loaded.config.clone();
    let telemetry = oncerpc::telemetry::pipeline(&cfg.telemetry).map_err(|e| {
        eprintln!("oncerpc: {e}");
        ExitCode::from(2)
    })?;
    let exporting = cfg.telemetry.traces_url().filter(|_| telemetry.is_some());
    let log = logging::init(&log.settings(&cfg.log.level), std::io::stderr(), telemetry);
    if let Some(url) = exporting {
        tracing::info!(endpoint = %oncerpc_core::redact_url(&url), service = %cfg.telemetry.service_name, sampling_ratio = cfg.telemetry.sampling_ratio, "exporting spans over OTLP");
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = worker_threads {
        builder.worker_threads(n);
    }
    let rt = builder.enable_all().build().map_err(|e| {
        eprintln!("oncerpc: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })?;
    // From here on a SIGHUP never ends the process (the default action): tokio keeps a
    // handler once one is registered. `serve` reloads on it once it serves; one that comes
    // while the app is being built finds the file just read.
    #[cfg(unix)]
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        if let Err(e) = signal(SignalKind::hangup()) {
            tracing::warn!(error = %e, "cannot install the SIGHUP handler");
        }
    });
    let app = rt.block_on(App::new(cfg)).map_err(|e| {
        eprintln!("oncerpc: {e}");
        ExitCode::from(2)
    })?;
    // `serve` reloads from the same source on SIGHUP.
    Ok((rt, app.reload_from(source, loaded), log))
}

/// `oncerpc stdio`, or with `mcp` the MCP door on the same loop: `oncerpc mcp`.
fn stdio(args: StdioArgs, mcp: bool) -> ExitCode {
    let source = Source { path: args.config, listen: None, store: args.store, mode: args.mode };
    let (rt, app, _log) = match start(&args.log, source, Some(2)) {
        Ok(started) => started,
        Err(code) => return code,
    };
    let max_body = app.config.limits.max_body_bytes;
    let grace = std::time::Duration::from_millis(app.config.limits.shutdown_grace_ms);
    let exit = rt.block_on(async {
        let (input, output, signal) =
            (tokio::io::stdin(), tokio::io::stdout(), oncerpc_http::shutdown_signal());
        let exit = if mcp {
            let names = app.config.mcp.tool_names.mcp();
            let server =
                oncerpc_mcp::McpServer::with_names(app.dispatcher.clone(), app.external.clone(), names)
                    .unwrap_or_else(|_| {
                        oncerpc_mcp::McpServer::with_external(app.dispatcher.clone(), app.external.clone())
                    });
            tracing::info!(tools = server.tools().len(), "oncerpc mcp ready");
            oncerpc_mcp::stdio::run(&server, input, output, max_body, signal).await
        } else {
            tracing::info!(methods = app.dispatcher.registry().len(), "oncerpc stdio ready");
            oncerpc_stdio::run(&app.dispatcher, input, output, max_body, signal).await
        };
        // Outcomes still being written (the store was down) get the grace to land.
        app.dispatcher.shutdown(grace).await;
        exit
    });
    // tokio's stdin reader is a blocking thread: do not wait for it.
    rt.shutdown_background();
    match exit {
        Ok(oncerpc_stdio::Exit::Clean) => ExitCode::SUCCESS,
        Ok(oncerpc_stdio::Exit::Unframeable(reason)) => {
            eprintln!("oncerpc: stopping: {reason}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("oncerpc: writing stdout failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let source = Source { path: args.config, listen: args.listen, store: args.store, mode: args.mode };
    let pid_file = args.pid_file;
    let (rt, app, _log) = match start(&args.log, source, None) {
        Ok(started) => started,
        Err(code) => return code,
    };
    raise_open_file_limit(app.config.limits.max_connections);
    rt.block_on(async move {
        let listener = match app.bind().await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("oncerpc: cannot listen on {}: {e}", app.config.listen);
                return ExitCode::FAILURE;
            }
        };
        if let Some(file) = &pid_file
            && let Err(e) = std::fs::write(file, format!("{}\n", std::process::id()))
        {
            eprintln!("oncerpc: cannot write the pid file {}: {e}", file.display());
            return ExitCode::FAILURE;
        }
        let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let (mode, methods) = (app.config.mode, app.dispatcher.registry().len());
        let ready = move || {
            tracing::info!(addr = %addr, mode = ?mode, methods, "oncerpc listening on {addr}");
        };
        let served = app.serve_ready(listener, oncerpc_http::shutdown_signal(), ready).await;
        if let Some(file) = &pid_file {
            let _ = std::fs::remove_file(file);
        }
        match served {
            Ok(()) => {
                tracing::info!("stopped");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("oncerpc: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Each connection is a file descriptor, and the usual soft limit (1,024) is far below the
/// default `limits.max_connections` (10,000): raise it to the hard limit, as Go's runtime and
/// nginx's `worker_rlimit_nofile` do, and say so when even that is too low.
fn raise_open_file_limit(max_connections: usize) {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < max_connections as u64 + 64 => tracing::warn!(
            open_files = limit,
            max_connections,
            "the open-file limit is below limits.max_connections: connections past it cannot be accepted"
        ),
        Ok(limit) => tracing::debug!(open_files = limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "could not read or raise the open-file limit"),
    }
}

fn print_summary(cfg: &Config) {
    println!("config OK");
    println!("listen      {}", cfg.shown("listen", &cfg.listen));
    println!("mode        {:?}", cfg.mode);
    println!(
        "store       {} (ttl {} s, lease {} ms)",
        cfg.shown("store.url", &oncerpc_core::redact_url(&cfg.store.url)),
        cfg.store.ttl_secs,
        cfg.store.lease_ms
    );
    println!(
        "batch       enabled={} max_size={} max_concurrency={}",
        cfg.batch.enabled, cfg.batch.max_size, cfg.batch.max_concurrency
    );
    println!(
        "limits      max_body_bytes={} max_in_flight={} shutdown_grace_ms={}",
        cfg.limits.max_body_bytes, cfg.limits.max_in_flight, cfg.limits.shutdown_grace_ms
    );
    let path = |key: &str, p: &Option<PathBuf>| p.as_ref().map(|p| cfg.shown(key, &p.display().to_string()));
    match &cfg.tls {
        Some(t) => println!(
            "tls         cert_file={} key_file={}",
            cfg.shown("tls.cert_file", &t.cert_file.display().to_string()),
            cfg.shown("tls.key_file", &t.key_file.display().to_string())
        ),
        None => println!("tls         off (plain HTTP)"),
    }
    let up = &cfg.upstream;
    println!(
        "upstream    ca_file={} client_cert_file={}",
        path("upstream.ca_file", &up.ca_file).unwrap_or_else(|| "(platform roots only)".into()),
        path("upstream.client_cert_file", &up.client_cert_file).unwrap_or_else(|| "(none)".into())
    );
    println!("demo        {}", if cfg.demo_enabled() { "registered" } else { "off" });
    for t in &cfg.tenants {
        println!("tenant      {} ({} api keys)", t.name, t.api_keys.len());
    }
    for m in &cfg.methods {
        let steps: Vec<&str> = m.steps.iter().map(|s| s.name.as_str()).collect();
        println!(
            "method      {} kind={} notification_allowed={} timeout_ms={} steps=[{}]",
            m.name,
            m.kind.as_str(),
            m.notification_allowed,
            cfg.method_timeout_ms(m),
            steps.join(", ")
        );
        let webhook = oncerpc::webhooks::summary(m);
        if !webhook.is_empty() {
            println!("  webhook   {webhook}");
        }
    }
}
