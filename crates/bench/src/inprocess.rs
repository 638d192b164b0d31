//! `oncerpc-bench inprocess`: the earlier, single-process variant of the benchmark, kept for
//! quick profiling of the idempotency engine without wrk or child processes.
//!
//! What does "runs once" cost? This mode starts oncerpc servers **in this process**
//! (one over the memory store, one over SQLite in a fresh temporary directory), each from
//! [`oncerpc::App`] with the demo methods, on a multi-thread tokio runtime of its own (2 worker
//! threads). A separate runtime (1–2 threads) drives them over HTTP/1.1 keep-alive connections
//! (one hyper client connection per task) and records every request's latency in an HDR
//! histogram.
//!
//! Scenarios, in this order (store by store):
//!
//! 1. query `sum` `[1,2]` (memory server; queries never touch the store);
//! 2. `counter.increment` with a new idempotency key per request, memory store;
//! 3. `counter.increment` with duplicate keys (1,000 keys created beforehand, then cycled, so
//!    every measured request is answered from the store), memory store;
//! 4. as 2, SQLite store;
//! 5. as 3, SQLite store.
//!
//! Every answer is checked: anything but HTTP 200 with a JSON-RPC `result` (the right one, for
//! the right `id`, with the expected `x-idempotency-status`) is an error, counted per scenario
//! and sampled on stderr. A run that saw errors exits with status 2.
//!
//! No logging subscriber is installed, so the server's logs cost nothing.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use oncerpc::config::StoreConfig;
use oncerpc::{App, Config};
use serde::Serialize;
use serde_json::Value;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

/// The response header with `new | processing | duplicate` (DESIGN §3).
const STATUS_HEADER: &str = "x-idempotency-status";
/// Worker threads of the servers' runtime.
const SERVER_THREADS: usize = 2;
/// Error samples kept per scenario, and per class of error.
const MAX_SAMPLES: usize = 10;
const SAMPLES_PER_CLASS: u64 = 2;
/// Histogram range, in microseconds: 1 µs .. 60 s.
const HIST_MAX_US: u64 = 60_000_000;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Flags of `oncerpc-bench inprocess`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Concurrent HTTP/1.1 keep-alive connections (one client task each).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=4096))]
    connections: u64,
    /// Measured seconds per scenario.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    duration: u64,
    /// Unmeasured warm-up seconds per scenario (answers are still checked).
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    /// Worker threads of the load generator's runtime.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=2))]
    client_threads: u64,
    /// Keys created before a duplicate scenario, then cycled through.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    dup_keys: u64,
    /// Store URL of the memory server. The default capacity holds every key a run creates:
    /// the gateway's default (100,000 live records) fills in seconds at full speed, after
    /// which new keys are refused (-32004) by design.
    #[arg(long, default_value = "memory://?capacity=5000000")]
    memory_url: String,
    /// Where the Markdown table is written (default: <workspace>/target/bench/idempotency.md).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the results as JSON on stdout instead of the Markdown table.
    #[arg(long)]
    json: bool,
}

/// What a scenario sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Query,
    NewKey,
    DuplicateKey,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum StoreKind {
    Memory,
    Sqlite,
}

struct Scenario {
    name: &'static str,
    kind: Kind,
    store: StoreKind,
}

const SCENARIOS: [Scenario; 5] = [
    Scenario { name: "query `sum` [1,2] (memory server)", kind: Kind::Query, store: StoreKind::Memory },
    Scenario { name: "`counter.increment`, new key, memory", kind: Kind::NewKey, store: StoreKind::Memory },
    Scenario {
        name: "`counter.increment`, duplicate key, memory",
        kind: Kind::DuplicateKey,
        store: StoreKind::Memory,
    },
    Scenario { name: "`counter.increment`, new key, SQLite", kind: Kind::NewKey, store: StoreKind::Sqlite },
    Scenario {
        name: "`counter.increment`, duplicate key, SQLite",
        kind: Kind::DuplicateKey,
        store: StoreKind::Sqlite,
    },
];

/// One request a client task sends and what it must get back.
struct Call {
    body: Bytes,
    id: u64,
}

/// The body of request `seq` on connection `conn` of scenario `index`.
fn make_call(kind: Kind, index: usize, conn: u64, seq: u64, dup_keys: u64, connections: u64) -> Call {
    let id = seq;
    let body = match kind {
        Kind::Query => format!(r#"{{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":{id}}}"#),
        Kind::NewKey => increment_body(&format!("s{index}-c{conn}-n{seq}"), id),
        Kind::DuplicateKey => {
            // Connections start spread over the key space and walk it in step.
            let start = conn * dup_keys / connections;
            increment_body(&dup_key((start + seq) % dup_keys), id)
        }
    };
    Call { body: Bytes::from(body), id }
}

fn increment_body(key: &str, id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"counter.increment","params":{{"by":1,"idempotency_key":"{key}"}},"id":{id}}}"#
    )
}

fn dup_key(i: u64) -> String {
    format!("dup-{i:07}")
}

/// An answer that is not what the scenario expects.
#[derive(Debug, Clone, Serialize)]
struct ErrorSample {
    request: String,
    /// HTTP status, or `None` when no answer arrived.
    status: Option<u16>,
    idempotency_status: Option<String>,
    response: String,
    why: String,
}

/// A received answer.
struct Answer {
    status: StatusCode,
    idempotency_status: Option<String>,
    body: Bytes,
}

/// A wrong answer: a low-cardinality class to count by, and the details.
struct Failure {
    class: String,
    detail: String,
}

fn fail(class: impl Into<String>, detail: impl Into<String>) -> Failure {
    Failure { class: class.into(), detail: detail.into() }
}

/// Why `answer` is not the right answer to `call` in a `kind` scenario.
fn check(kind: Kind, call: &Call, answer: &Answer) -> Result<(), Failure> {
    if answer.status != StatusCode::OK {
        let status = answer.status.as_u16();
        return Err(fail(format!("HTTP {status}"), format!("HTTP status {status} (expected 200)")));
    }
    let v: Value = serde_json::from_slice(&answer.body)
        .map_err(|e| fail("body is not JSON", format!("body is not JSON: {e}")))?;
    let obj = v.as_object().ok_or_else(|| fail("body is not an object", "body is not a JSON object"))?;
    if let Some(e) = obj.get("error") {
        let class = format!("JSON-RPC error {} {}", e["code"], e["message"]);
        return Err(fail(class.clone(), class));
    }
    let result = obj.get("result").ok_or_else(|| fail("no result", "no `result` member"))?;
    if obj.get("id").and_then(Value::as_u64) != Some(call.id) {
        return Err(fail("wrong id", format!("response id {:?} (expected {})", obj.get("id"), call.id)));
    }
    let expected_status = match kind {
        Kind::Query => {
            if result.as_i64() != Some(3) {
                return Err(fail("wrong result", format!("sum [1,2] returned {result}")));
            }
            None
        }
        Kind::NewKey => Some("new"),
        Kind::DuplicateKey => Some("duplicate"),
    };
    if let Some(expected) = expected_status {
        if result.get("total").and_then(Value::as_i64).is_none() {
            return Err(fail("wrong result", format!("result {result} has no integer `total`")));
        }
        let got = answer.idempotency_status.as_deref();
        if got != Some(expected) {
            return Err(fail(
                format!("{STATUS_HEADER} {got:?}"),
                format!("{STATUS_HEADER}: {got:?} (expected {expected:?})"),
            ));
        }
    }
    Ok(())
}

/// One keep-alive client connection.
struct Client {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Result<Client, BoxError> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // Ends when the sender is dropped or the server closes the connection; a broken
            // connection shows up as an error on the next request.
            let _ = conn.await;
        });
        Ok(Client { sender, host: addr.to_string() })
    }

    async fn post(&mut self, body: Bytes) -> Result<Answer, BoxError> {
        self.sender.ready().await?;
        let req = Request::builder()
            .method(Method::POST)
            .uri("/rpc")
            .header(HOST, &self.host)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        let resp = self.sender.send_request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        let idempotency_status =
            parts.headers.get(STATUS_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        Ok(Answer { status: parts.status, idempotency_status, body })
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("valid histogram bounds")
}

/// What one client task saw.
struct ConnStats {
    hist: Histogram<u64>,
    errors_measured: u64,
}

/// The wrong answers of one scenario, shared by its tasks: counts by class and a few samples.
#[derive(Default)]
struct ErrorLog {
    by_class: BTreeMap<String, u64>,
    samples: Vec<ErrorSample>,
}

type Errors = Arc<Mutex<ErrorLog>>;

fn log_error(errors: &Errors, request: &Bytes, answer: Option<&Answer>, f: Failure) {
    let mut log = errors.lock().expect("error log lock");
    let n = log.by_class.entry(f.class).or_insert(0);
    *n += 1;
    if *n <= SAMPLES_PER_CLASS && log.samples.len() < MAX_SAMPLES {
        log.samples.push(ErrorSample {
            request: String::from_utf8_lossy(request).into_owned(),
            status: answer.map(|a| a.status.as_u16()),
            idempotency_status: answer.and_then(|a| a.idempotency_status.clone()),
            response: answer.map(|a| String::from_utf8_lossy(&a.body).into_owned()).unwrap_or_default(),
            why: f.detail,
        });
    }
}

struct TaskPlan {
    addr: SocketAddr,
    kind: Kind,
    index: usize,
    conn: u64,
    connections: u64,
    dup_keys: u64,
    measure_from: Instant,
    until: Instant,
    errors: Errors,
}

/// Send requests back to back on one connection until `until`; record the latency of the
/// correct answers to requests sent from `measure_from` on.
async fn client_task(p: TaskPlan) -> ConnStats {
    let mut stats = ConnStats { hist: new_histogram(), errors_measured: 0 };
    let mut client: Option<Client> = None;
    let mut seq = 0u64;
    loop {
        let now = Instant::now();
        if now >= p.until {
            break;
        }
        let measured = now >= p.measure_from;
        let c = match client.as_mut() {
            Some(c) => c,
            None => match Client::connect(p.addr).await {
                Ok(c) => client.insert(c),
                Err(e) => {
                    if measured {
                        stats.errors_measured += 1;
                    }
                    log_error(&p.errors, &Bytes::new(), None, fail("connect", format!("connect: {e}")));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        seq += 1;
        let call = make_call(p.kind, p.index, p.conn, seq, p.dup_keys, p.connections);
        let t0 = Instant::now();
        let outcome = c.post(call.body.clone()).await;
        let elapsed = t0.elapsed();
        let correct = match outcome {
            Ok(answer) => match check(p.kind, &call, &answer) {
                Ok(()) => true,
                Err(f) => {
                    log_error(&p.errors, &call.body, Some(&answer), f);
                    false
                }
            },
            Err(e) => {
                log_error(&p.errors, &call.body, None, fail("transport", format!("transport: {e}")));
                client = None;
                false
            }
        };
        if measured && correct {
            let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX).clamp(1, HIST_MAX_US);
            stats.hist.record(us).expect("value within bounds");
        } else if measured {
            stats.errors_measured += 1;
        }
    }
    stats
}

/// A scenario's results.
#[derive(Debug, Clone, Serialize)]
struct ScenarioResult {
    scenario: &'static str,
    kind: Kind,
    store: StoreKind,
    /// Correct answers to requests sent in the measured window.
    requests: u64,
    req_per_s: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
    /// Wrong answers and transport failures, warm-up and set-up included.
    errors: u64,
    errors_measured: u64,
    /// req/s of this scenario divided by the query scenario's.
    ratio_to_query: f64,
    errors_by_class: BTreeMap<String, u64>,
    error_samples: Vec<ErrorSample>,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Run one scenario against `addr` on the load runtime.
fn run_scenario(
    rt: &Runtime,
    args: &Args,
    index: usize,
    sc: &Scenario,
    addr: SocketAddr,
    errors: Errors,
) -> ScenarioResult {
    let start = Instant::now();
    let measure_from = start + Duration::from_secs(args.warmup);
    let until = measure_from + Duration::from_secs(args.duration);
    let stats: Vec<ConnStats> = rt.block_on(async {
        let tasks: Vec<_> = (0..args.connections)
            .map(|conn| {
                tokio::spawn(client_task(TaskPlan {
                    addr,
                    kind: sc.kind,
                    index,
                    conn,
                    connections: args.connections,
                    dup_keys: args.dup_keys,
                    measure_from,
                    until,
                    errors: errors.clone(),
                }))
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            out.push(t.await.expect("client task"));
        }
        out
    });
    let mut hist = new_histogram();
    let mut errors_measured = 0;
    for s in &stats {
        hist.add(&s.hist).expect("same bounds");
        errors_measured += s.errors_measured;
    }
    let requests = hist.len();
    let log = std::mem::take(&mut *errors.lock().expect("error log lock"));
    ScenarioResult {
        scenario: sc.name,
        kind: sc.kind,
        store: sc.store,
        requests,
        req_per_s: requests as f64 / args.duration as f64,
        p50_ms: ms(hist.value_at_quantile(0.50)),
        p90_ms: ms(hist.value_at_quantile(0.90)),
        p99_ms: ms(hist.value_at_quantile(0.99)),
        p999_ms: ms(hist.value_at_quantile(0.999)),
        max_ms: ms(hist.max()),
        errors: log.by_class.values().sum(),
        errors_measured,
        ratio_to_query: 0.0,
        errors_by_class: log.by_class,
        error_samples: log.samples,
    }
}

/// Create the duplicate scenario's keys (each must be answered `new`), spread over a few
/// connections; wrong answers go to `errors`.
fn precreate_keys(rt: &Runtime, addr: SocketAddr, dup_keys: u64, errors: &Errors) {
    let lanes = 8.min(dup_keys);
    rt.block_on(async {
        let tasks: Vec<_> = (0..lanes)
            .map(|lane| {
                let errors = errors.clone();
                tokio::spawn(async move {
                    let mut client = None;
                    for i in (lane..dup_keys).step_by(lanes as usize) {
                        let call = Call { body: Bytes::from(increment_body(&dup_key(i), i)), id: i };
                        let c = match client.as_mut() {
                            Some(c) => c,
                            None => match Client::connect(addr).await {
                                Ok(c) => client.insert(c),
                                Err(e) => {
                                    let f = fail("set-up: connect", format!("connect: {e}"));
                                    log_error(&errors, &call.body, None, f);
                                    continue;
                                }
                            },
                        };
                        match c.post(call.body.clone()).await {
                            Ok(answer) => {
                                if let Err(f) = check(Kind::NewKey, &call, &answer) {
                                    let f = Failure { class: format!("set-up: {}", f.class), ..f };
                                    log_error(&errors, &call.body, Some(&answer), f);
                                }
                            }
                            Err(e) => {
                                client = None;
                                let f = fail("set-up: transport", format!("transport: {e}"));
                                log_error(&errors, &call.body, None, f);
                            }
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("set-up task");
        }
    });
}

/// An oncerpc server running on the server runtime.
struct Server {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

fn start_server(rt: &Runtime, store_url: String) -> Result<Server, BoxError> {
    let cfg = Config {
        listen: "127.0.0.1:0".into(),
        store: StoreConfig { url: store_url, ..StoreConfig::default() },
        ..Config::default()
    };
    rt.block_on(async {
        let app = App::new(cfg).await?;
        let listener = app.bind().await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(app.serve(listener, async move {
            let _ = rx.await;
        }));
        Ok(Server { addr, shutdown: Some(tx), task })
    })
}

fn stop_server(rt: &Runtime, mut server: Server) -> Result<(), BoxError> {
    if let Some(tx) = server.shutdown.take() {
        let _ = tx.send(());
    }
    rt.block_on(async {
        match tokio::time::timeout(Duration::from_secs(10), server.task).await {
            Ok(joined) => Ok(joined??),
            Err(_) => Err("server did not shut down within 10 s".into()),
        }
    })
}

fn default_out() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        manifest.parent().and_then(Path::parent).unwrap_or(manifest).join("target")
    });
    target.join("bench").join("idempotency.md")
}

#[derive(Serialize)]
struct Report<'a> {
    connections: u64,
    duration_secs: u64,
    warmup_secs: u64,
    server_threads: usize,
    client_threads: u64,
    dup_keys: u64,
    memory_url: &'a str,
    cpus: usize,
    scenarios: &'a [ScenarioResult],
}

fn markdown(report: &Report) -> String {
    let mut s = String::new();
    s.push_str("# oncerpc: the cost of idempotency\n\n");
    s.push_str(&format!(
        "In-process servers (tokio, {} worker threads) and load generator (separate runtime, {} threads), \
         HTTP/1.1 keep-alive, {} connections, {} s measured after {} s warm-up per scenario, \
         {} duplicate keys, memory server on `{}`, {} CPUs.\n\n",
        report.server_threads,
        report.client_threads,
        report.connections,
        report.duration_secs,
        report.warmup_secs,
        report.dup_keys,
        report.memory_url,
        report.cpus
    ));
    s.push_str("| scenario | req/s | p50 ms | p99 ms | errors | ratio to query req/s |\n");
    s.push_str("|---|--:|--:|--:|--:|--:|\n");
    for r in report.scenarios {
        s.push_str(&format!(
            "| {} | {:.0} | {:.3} | {:.3} | {} | {:.2} |\n",
            r.scenario, r.req_per_s, r.p50_ms, r.p99_ms, r.errors, r.ratio_to_query
        ));
    }
    s.push_str(
        "\nreq/s and latencies count only correct answers (HTTP 200, the right `result` and `id`, \
         `x-idempotency-status` `new` for new keys and `duplicate` for duplicates) to requests sent \
         in the measured window; errors count every other answer, warm-up and key set-up included.\n",
    );
    let failing: Vec<_> = report.scenarios.iter().filter(|r| r.errors > 0).collect();
    if !failing.is_empty() {
        s.push_str("\nErrors by kind:\n\n");
        for r in failing {
            for (class, n) in &r.errors_by_class {
                s.push_str(&format!("- {}: {n} x {class}\n", r.scenario));
            }
        }
    }
    s
}

/// Run every scenario; `Ok(false)` when some answers were wrong.
pub fn run(args: &Args) -> Result<bool, BoxError> {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(SERVER_THREADS)
        .thread_name("oncerpc-server")
        .enable_all()
        .build()?;
    let load_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::try_from(args.client_threads)?)
        .thread_name("bench-load")
        .enable_all()
        .build()?;

    let tmp = tempfile::Builder::new().prefix("oncerpc-bench-").tempdir()?;
    let db = tmp.path().join("bench.db");
    let db = db.to_str().ok_or("temporary path is not UTF-8")?;
    let memory = start_server(&server_rt, args.memory_url.clone())?;
    let sqlite = start_server(&server_rt, format!("sqlite://{db}"))?;
    eprintln!("servers: {} on {}, sqlite://{db} on {}", args.memory_url, memory.addr, sqlite.addr);

    let addr_of = |store: StoreKind| match store {
        StoreKind::Memory => memory.addr,
        StoreKind::Sqlite => sqlite.addr,
    };
    // The duplicate scenarios' keys are created up front, before the new-key scenarios fill
    // the stores, so that a bounded store's capacity shows up where it is reached.
    let logs: Vec<Errors> = SCENARIOS.iter().map(|_| Errors::default()).collect();
    for (index, sc) in SCENARIOS.iter().enumerate() {
        if sc.kind == Kind::DuplicateKey {
            eprintln!("[{}] creating {} keys", index + 1, args.dup_keys);
            precreate_keys(&load_rt, addr_of(sc.store), args.dup_keys, &logs[index]);
        }
    }

    let mut results = Vec::new();
    for (index, sc) in SCENARIOS.iter().enumerate() {
        let addr = addr_of(sc.store);
        eprintln!("[{}] {} ({} s + {} s warm-up)", index + 1, sc.name, args.duration, args.warmup);
        let r = run_scenario(&load_rt, args, index, sc, addr, logs[index].clone());
        eprintln!(
            "[{}] {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms, {} errors",
            index + 1,
            r.req_per_s,
            r.p50_ms,
            r.p99_ms,
            r.errors
        );
        results.push(r);
    }
    drop(load_rt);
    stop_server(&server_rt, memory)?;
    stop_server(&server_rt, sqlite)?;
    drop(server_rt);
    tmp.close()?;

    let query_rps = results.iter().find(|r| r.kind == Kind::Query).map_or(0.0, |r| r.req_per_s);
    for r in &mut results {
        r.ratio_to_query = if query_rps > 0.0 { r.req_per_s / query_rps } else { 0.0 };
    }
    let report = Report {
        connections: args.connections,
        duration_secs: args.duration,
        warmup_secs: args.warmup,
        server_threads: SERVER_THREADS,
        client_threads: args.client_threads,
        dup_keys: args.dup_keys,
        memory_url: &args.memory_url,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        scenarios: &results,
    };
    let md = markdown(&report);
    let out = args.out.clone().unwrap_or_else(default_out);
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, &md)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{md}");
    }
    eprintln!("written to {}", out.display());

    let mut clean = true;
    for r in &results {
        if r.errors > 0 {
            clean = false;
            eprintln!("\n{}: {} errors ({} in the measured window)", r.scenario, r.errors, r.errors_measured);
            for (class, n) in &r.errors_by_class {
                eprintln!("  {n} x {class}");
            }
            eprintln!("samples:");
            for e in &r.error_samples {
                eprintln!(
                    "  why: {}\n  request: {}\n  answer: HTTP {:?}, {STATUS_HEADER}: {:?}\n  body: {}\n",
                    e.why, e.request, e.status, e.idempotency_status, e.response
                );
            }
        }
    }
    Ok(clean)
}
