//! `oncerpc call` and `oncerpc flow`: the client crate (`oncerpc-client`) on the command line.
//! Part of the binary only (`main.rs`), not of the gateway library.
//!
//! The result goes to stdout as JSON, the idempotency status, key and correlation id to
//! stderr. Exit codes: 0 a result; 1 a JSON-RPC error (its code on stderr), or a flow that
//! failed; 2 bad input refused before anything was sent; 3 no answer (unreachable, timed out,
//! an answer that is not the door's).

use std::process::ExitCode;
use std::time::Duration;

use oncerpc_client::{Client, Error, EventStatus, Outcome, RawValue, RetryPolicy};

#[derive(clap::Args)]
pub struct Target {
    /// The gateway's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// API key, sent as X-API-Key.
    #[arg(long)]
    api_key: Option<String>,
    /// An idempotency key for the command: every attempt carries it.
    #[arg(long, conflicts_with = "auto_key")]
    key: Option<String>,
    /// Give the command a new UUIDv7 key (printed on stderr, to retry it by hand later).
    #[arg(long)]
    auto_key: bool,
    /// Retries after the first attempt at most (default: as many as the deadline allows).
    #[arg(long)]
    retries: Option<u32>,
    /// The whole call, retries and waits included, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    deadline_ms: u64,
    /// One attempt at most, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    attempt_timeout_ms: u64,
    /// Run a failed execution of the key again (X-Force-Retry: true).
    #[arg(long)]
    force_retry: bool,
}

#[derive(clap::Args)]
pub struct CallArgs {
    /// The method to call.
    method: String,
    /// The params, as JSON (an object or an array).
    params: Option<String>,
    /// The method is a query (no side effects): retried even without a key. Without it and
    /// without a key, the call is sent once, since a command may not run twice.
    #[arg(long, conflicts_with_all = ["key", "auto_key", "force_retry"])]
    query: bool,
    #[command(flatten)]
    target: Target,
}

#[derive(clap::Args)]
pub struct FlowArgs {
    /// The flow (any method the flows door serves).
    flow: String,
    /// The body (the params), as JSON.
    body: Option<String>,
    /// Call synchronously and print the result, instead of submitting an event.
    #[arg(long, conflicts_with = "wait")]
    sync: bool,
    /// After submitting, wait for the event to finish and print it.
    #[arg(long)]
    wait: bool,
    /// Tags of the event, comma-separated.
    #[arg(long)]
    tags: Option<String>,
    /// The step whose output is the result.
    #[arg(long)]
    return_step: Option<String>,
    #[command(flatten)]
    target: Target,
}

impl Target {
    fn client(&self) -> Result<Client, Error> {
        let policy = RetryPolicy {
            deadline: Duration::from_millis(self.deadline_ms),
            attempt_timeout: Duration::from_millis(self.attempt_timeout_ms),
            max_retries: self.retries,
            ..RetryPolicy::default()
        };
        let mut builder = Client::http(self.url.clone()).policy(policy);
        if let Some(k) = &self.api_key {
            builder = builder.api_key(k.clone());
        }
        builder.build()
    }

    fn key(&self) -> Option<String> {
        if self.auto_key { Some(oncerpc_client::new_key()) } else { self.key.clone() }
    }
}

fn parse_json(text: Option<&str>) -> Result<Option<serde_json::Value>, ExitCode> {
    match text {
        None => Ok(None),
        Some(t) => serde_json::from_str(t).map(Some).map_err(|e| {
            eprintln!("oncerpc: the params are not JSON: {e}");
            ExitCode::from(2)
        }),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
        eprintln!("oncerpc: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

/// Retries are logged on stderr (`RUST_LOG` for more).
fn init_logging() {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "oncerpc_client=info".into());
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("oncerpc_client=info"));
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).try_init();
}

/// What `call` and `flow` start with: logging, the JSON they send, a runtime and the client;
/// an exit code when one of them cannot be had.
fn start(
    json: Option<&str>,
    target: &Target,
) -> Result<(Option<serde_json::Value>, tokio::runtime::Runtime, Client), ExitCode> {
    init_logging();
    let json = parse_json(json)?;
    let rt = runtime()?;
    let client = target.client().map_err(|e| fail(&e))?;
    Ok((json, rt, client))
}

pub fn call(args: CallArgs) -> ExitCode {
    let t = &args.target;
    let (params, rt, client) = match start(args.params.as_deref(), t) {
        Ok(started) => started,
        Err(code) => return code,
    };
    let call = if args.query {
        client.query::<Box<RawValue>>(&args.method, params)
    } else {
        let call = client.command::<Box<RawValue>>(&args.method, params);
        let call = match t.key() {
            Some(k) => call.key(k),
            None => call.without_key(),
        };
        if t.force_retry { call.force_retry() } else { call }
    };
    match rt.block_on(call.send()) {
        Ok(outcome) => success(&outcome),
        Err(e) => fail(&e),
    }
}

pub fn flow(args: FlowArgs) -> ExitCode {
    let t = &args.target;
    let (body, rt, client) = match start(args.body.as_deref(), t) {
        Ok(started) => started,
        Err(code) => return code,
    };
    let mut flow = client.flow(&args.flow, body);
    flow = match t.key() {
        Some(k) => flow.key(k),
        None => flow.without_key(),
    };
    if t.force_retry {
        flow = flow.force_retry();
    }
    if let Some(tags) = &args.tags {
        flow = flow.tags(tags.split(',').map(str::trim).filter(|s| !s.is_empty()));
    }
    if let Some(step) = &args.return_step {
        flow = flow.return_step(step.clone());
    }
    if args.sync {
        return match rt.block_on(flow.call::<Box<RawValue>>()) {
            Ok(outcome) => success(&outcome),
            Err(e) => fail(&e),
        };
    }
    let submitted = match rt.block_on(flow.submit()) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    eprintln!(
        "status: {}  key: {}  event: {}",
        submitted.status.map_or("-", |s| s.as_str()),
        submitted.key.as_deref().unwrap_or("-"),
        submitted.event_id
    );
    if !args.wait {
        println!("{}", serde_json::json!({ "event_id": submitted.event_id }));
        return ExitCode::SUCCESS;
    }
    match rt.block_on(client.wait(&submitted.event_id)) {
        Ok(event) => {
            let view = serde_json::json!({
                "event_id": event.event_id,
                "flow": event.flow,
                "status": match event.status {
                    EventStatus::Processing => "processing",
                    EventStatus::Succeeded => "succeeded",
                    EventStatus::Failed => "failed",
                    EventStatus::Cancelled => "cancelled",
                },
                "result": event.result,
                "error": event.error,
            });
            println!("{view}");
            if event.status == EventStatus::Succeeded { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(e) => fail(&e),
    }
}

fn success(outcome: &Outcome<Box<RawValue>>) -> ExitCode {
    println!("{}", outcome.result.get());
    eprintln!(
        "status: {}  key: {}  attempts: {}  correlation id: {}",
        outcome.status.map_or("-", |s| s.as_str()),
        outcome.key.as_deref().unwrap_or("-"),
        outcome.attempts,
        outcome.correlation_id.as_deref().unwrap_or("-"),
    );
    ExitCode::SUCCESS
}

fn fail(e: &Error) -> ExitCode {
    eprintln!("oncerpc: {e}");
    if let Some(f) = e.rpc() {
        eprintln!(
            "code: {}  status: {}  key: {}  correlation id: {}",
            f.code.code(),
            f.status.map_or("-", |s| s.as_str()),
            f.key.as_deref().unwrap_or("-"),
            f.correlation_id.as_deref().unwrap_or("-"),
        );
        return ExitCode::from(1);
    }
    match e.last() {
        Error::InvalidKey(_) | Error::InvalidCall(_) | Error::Config(_) => ExitCode::from(2),
        _ => ExitCode::from(3),
    }
}
