//! # oncerpc-bench
//!
//! One reproducible load benchmark (docs/BENCHMARKS.md). In one run it starts, on loopback and
//! **each as its own OS process** (so each one's peak RSS is its `/proc/PID/status` `VmHWM`):
//!
//! - **oncerpc**: the release binary `target/release/oncerpc serve --log-level warn` (one
//!   process for the shared scenarios, one per idempotency store, one for the sync flow);
//! - **jsonrpsee**: `bench-jsonrpsee` (this crate), jsonrpsee's HTTP server with `add`/`echo`;
//! - **floor**: `bench-floor` (this crate), bare hyper that parses the body and answers a fixed
//!   response;
//! - `bench-upstream` (this crate), the upstream of the sync flow;
//!
//! and drives them with **wrk** (a separate process; one Lua script per scenario), repetition
//! by repetition, every server of a scenario in turn. Before each measured run a handful of
//! requests are sent and their answers judged; after it, oncerpc's `/metrics` (and the demo
//! counter, or the upstream's call count) must have moved by what wrk counted. The table (median
//! of the repetitions) is printed and written to `target/bench/latest.md` and `latest.json`, and
//! a chart to `docs/benchmarks.png` (full runs) or `target/bench/latest.png`.
//!
//! `oncerpc-bench inprocess` is the earlier single-process benchmark (see `inprocess.rs`).
//!
//! `cargo test` never starts a load run: only the unit tests run.

mod client;
mod inprocess;
mod procs;
mod report;
mod stalls;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::{Parser, Subcommand, ValueEnum};
use hyper::Method;
use oncerpc_bench::wrk::WrkStats;
use oncerpc_bench::{bodies, lua, prom, wrk};
use serde::{Deserialize, Serialize};

use crate::client::{Client, Resp};
use crate::procs::Proc;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Requests sent and judged before each measured run.
const CHECK_REQUESTS: usize = 5;
/// The flow of the sync-flow scenario, and its door.
const FLOW: &str = "orders.create";
const FLOW_PATH: &str = "/v2/flows/orders.create?sync=true";
const KEY_HEADER: &str = "X-Idempotency-Key";

#[derive(Parser)]
#[command(
    name = "oncerpc-bench",
    about = "Load benchmark: oncerpc vs jsonrpsee vs a bare hyper floor, and the cost of idempotency per store; \
             every server its own process, driven by wrk. See docs/BENCHMARKS.md.",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Mode {
    /// The earlier single-process benchmark: oncerpc servers (memory, SQLite) in this process,
    /// a hyper client load generator, HDR histograms. For quick profiling; no wrk, no rivals.
    Inprocess(inprocess::Args),
    /// Write latest.md and the charts again from a run's latest.json, running nothing (after a
    /// change to the report's layout).
    Redraw {
        /// The latest.json of the run.
        json: PathBuf,
    },
}

/// Which scenarios run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    /// Single call at 1 and N connections, batch of 50: oncerpc, jsonrpsee, floor.
    Shared,
    /// `counter.increment` with new and duplicate keys, per store (oncerpc only).
    Commands,
    /// Sync flow `orders.create` against a local upstream, new and duplicate keys (oncerpc only).
    Flows,
    /// The single call while `--stalled` slow-loris connections are held open (oncerpc only).
    Edge,
}

/// Idempotency stores of the command scenarios.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Store {
    Memory,
    Sqlite,
    Redis,
    Postgres,
}

impl Store {
    pub fn name(self) -> &'static str {
        match self {
            Store::Memory => "memory",
            Store::Sqlite => "sqlite",
            Store::Redis => "redis",
            Store::Postgres => "postgres",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Store::Memory => "memory",
            Store::Sqlite => "SQLite",
            Store::Redis => "Redis",
            Store::Postgres => "PostgreSQL",
        }
    }
}

#[derive(clap::Args, Clone, Debug, Serialize, Deserialize)]
pub struct RunArgs {
    /// Measured seconds per (server, scenario, repetition).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub duration: u64,
    /// Repetitions; the report shows the median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub reps: u32,
    /// Unmeasured wrk seconds before each measured run (0: none).
    #[arg(long, default_value_t = 1)]
    pub warmup: u64,
    /// Connections of the many-connection scenarios.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(2..=10_000))]
    pub connections: u32,
    /// wrk threads of the many-connection scenarios (the 1-connection one uses 1).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: u32,
    /// Keys created before a duplicate-key scenario, then cycled through.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub dup_keys: u64,
    /// Scenario groups to run (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Group::Shared, Group::Commands, Group::Flows, Group::Edge])]
    pub groups: Vec<Group>,
    /// Stalled connections of the edge scenario: two thirds stall in their headers, one third
    /// in their bodies; each one the server closes is opened again.
    #[arg(long, default_value_t = 3000)]
    pub stalled: u32,
    /// Stores of the command scenarios (comma-separated); Redis and PostgreSQL are skipped, with
    /// the reason in the report, when they cannot be reached.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Store::Memory, Store::Sqlite, Store::Redis, Store::Postgres])]
    pub stores: Vec<Store>,
    /// Memory store of every oncerpc process that needs none other. The gateway's default
    /// (`memory://`, 100,000 live records) fills in seconds at full speed, after which new keys
    /// are refused by design (-32004): this one holds every key a run creates.
    #[arg(long, default_value = "memory://?capacity=5000000")]
    pub memory_url: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
    pub postgres_url: String,
    /// Do not run `cargo build --release -p oncerpc -p oncerpc-bench --bins` first.
    #[arg(long)]
    pub no_build: bool,
    /// Where latest.md, latest.json, logs and scripts go (default: <target>/bench).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Where the chart goes. Default: docs/benchmarks.png for a full run (≥ 3 repetitions of
    /// ≥ 10 s, every group), else <out-dir>/latest.png only.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// TrueType font of the chart's text (default: DejaVu Sans of fonts-dejavu-core,
    /// installed when missing; without a font the chart has no text).
    #[arg(long)]
    pub font: Option<PathBuf>,
}

impl RunArgs {
    fn has(&self, g: Group) -> bool {
        self.groups.contains(&g)
    }

    /// Whether this run is the documented full run (whose chart goes to docs/).
    fn is_full(&self) -> bool {
        self.reps >= 3
            && self.duration >= 10
            && [Group::Shared, Group::Commands, Group::Flows, Group::Edge].iter().all(|g| self.has(*g))
    }
}

/// A server the shared scenarios are sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Server {
    /// `oncerpc serve` with the defaults a user gets (`info` logs, the SQLite store).
    Oncerpc,
    /// The same with `--log-level warn`: the extra, labelled row.
    OncerpcWarn,
    Jsonrpsee,
    Floor,
}

impl Server {
    pub fn name(self) -> &'static str {
        match self {
            Server::Oncerpc => "oncerpc",
            Server::OncerpcWarn => "oncerpc-warn",
            Server::Jsonrpsee => "jsonrpsee",
            Server::Floor => "floor",
        }
    }

    /// The method doing `[1,2] → 3`: oncerpc's demo `sum`, jsonrpsee's `add` (the floor does not
    /// look, and is sent jsonrpsee's body).
    fn method(self) -> &'static str {
        match self {
            Server::Oncerpc | Server::OncerpcWarn => "sum",
            Server::Jsonrpsee | Server::Floor => "add",
        }
    }

    /// An oncerpc process: its counters can be read and cross-checked.
    fn is_oncerpc(self) -> bool {
        matches!(self, Server::Oncerpc | Server::OncerpcWarn)
    }

    fn path(self) -> &'static str {
        match self {
            Server::Oncerpc | Server::OncerpcWarn => "/rpc",
            Server::Jsonrpsee | Server::Floor => "/",
        }
    }
}

/// What one run sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// `stalled`: slow-loris connections held open during the run (oncerpc only).
    Single {
        conns: u32,
        stalled: u32,
    },
    Batch {
        conns: u32,
    },
    Command {
        store: Store,
        dup: bool,
    },
    Flow {
        dup: bool,
    },
}

impl Scenario {
    pub fn id(&self) -> String {
        match self {
            Scenario::Single { conns, stalled: 0 } => format!("single-c{conns}"),
            Scenario::Single { conns, stalled } => format!("single-c{conns}-stalled{stalled}"),
            Scenario::Batch { conns } => format!("batch50-c{conns}"),
            Scenario::Command { store, dup } => {
                format!("cmd-{}-{}", if *dup { "dup" } else { "new" }, store.name())
            }
            Scenario::Flow { dup } => format!("flow-{}", if *dup { "dup" } else { "new" }),
        }
    }

    pub fn title(&self) -> String {
        let plural = |n: u32| if n == 1 { "connection" } else { "connections" };
        match self {
            Scenario::Single { conns, stalled: 0 } => {
                format!("single call [1,2], {conns} {}", plural(*conns))
            }
            Scenario::Single { conns, stalled } => {
                format!("single call [1,2], {conns} {}, {stalled} stalled connections open", plural(*conns))
            }
            Scenario::Batch { conns } => format!("batch of 50 calls, {conns} {}", plural(*conns)),
            Scenario::Command { store, dup: false } => {
                format!("`counter.increment`, new key per request, {}", store.title())
            }
            Scenario::Command { store, dup: true } => {
                format!("`counter.increment`, duplicate keys, {}", store.title())
            }
            Scenario::Flow { dup: false } => "sync flow, new key per request (memory)".into(),
            Scenario::Flow { dup: true } => "sync flow, duplicate keys (memory)".into(),
        }
    }

    pub fn is_shared(&self) -> bool {
        matches!(self, Scenario::Single { .. } | Scenario::Batch { .. })
    }

    pub fn is_dup(&self) -> bool {
        matches!(self, Scenario::Command { dup: true, .. } | Scenario::Flow { dup: true })
    }

    pub fn conns(&self, args: &RunArgs) -> u32 {
        match self {
            Scenario::Single { conns, .. } | Scenario::Batch { conns } => *conns,
            _ => args.connections,
        }
    }
}

/// A body sent before the measured run that did not get the right answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckFailure {
    pub request: String,
    pub status: Option<u16>,
    pub idempotency_status: Option<String>,
    pub response: String,
    pub why: String,
}

/// One measured wrk run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub rep: u32,
    pub scenario: String,
    pub title: String,
    pub server: String,
    pub process: String,
    pub wrk: WrkStats,
    /// wrk failed or its output could not be read.
    pub wrk_error: Option<String>,
    /// CPU used during the measured run, in cores (CPU seconds / wall seconds).
    pub server_cpu: f64,
    pub upstream_cpu: Option<f64>,
    pub wrk_cpu: f64,
    /// Everything else on the machine.
    pub other_cpu: f64,
    /// A compiler (someone's cargo build) ran during the measured run.
    pub compilers_seen: bool,
    pub check_requests: usize,
    pub check_failures: Vec<CheckFailure>,
    /// The after-run cross-check against oncerpc's counters (`None`: nothing to read).
    pub verified: Option<bool>,
    pub verification: String,
    /// New-key runs: executions (side effects) beyond the `new` count of the metrics, i.e.
    /// requests left in flight by wrk's stop that ran without being counted.
    pub unrecorded_executions: u64,
}

impl RunRecord {
    pub fn errors(&self) -> u64 {
        self.wrk.non_2xx + self.wrk.socket_errors()
    }

    pub fn clean(&self) -> bool {
        self.wrk_error.is_none()
            && self.errors() == 0
            && self.check_failures.is_empty()
            && self.verified != Some(false)
    }
}

/// Counters read before and after a measured run.
#[derive(Debug, Clone, Default)]
pub struct Snap {
    pub metrics: String,
    pub counter: Option<i64>,
    pub upstream_calls: Option<u64>,
}

/// Where a scenario is sent.
#[derive(Clone)]
struct Target {
    label: String,
    server: Server,
    proc_idx: usize,
    upstream: Option<usize>,
}

struct Bench<'a> {
    args: &'a RunArgs,
    nonce: String,
    out_dir: PathBuf,
    client: Client,
    procs: Vec<Proc>,
    shared: Vec<(Server, usize)>,
    stores: Vec<(Store, usize)>,
    flow: Option<(usize, usize)>,
    /// The answers to the keys created before the duplicate scenarios, per process.
    dup_answers: HashMap<usize, Vec<Bytes>>,
    runs: Vec<RunRecord>,
    notes: Vec<String>,
    skipped: Vec<String>,
    watch: procs::CompilerWatch,
    clk: f64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.mode {
        Some(Mode::Inprocess(a)) => inprocess::run(&a),
        Some(Mode::Redraw { json }) => redraw(&json),
        None => run(&cli.run),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("oncerpc-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (where Cargo.toml with `[workspace]` is).
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().and_then(Path::parent).unwrap_or(manifest).to_path_buf()
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

fn now_utc() -> String {
    procs::first_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"], Path::new("/")).unwrap_or_default()
}

/// The whole run; `Ok(false)` when some answer was wrong or some check failed.
fn run(args: &RunArgs) -> Result<bool, BoxError> {
    let started = Instant::now();
    let root = workspace_root();
    let target = target_dir(&root);
    // Absolute: the servers run in directories of their own.
    let out_dir = std::path::absolute(args.out_dir.clone().unwrap_or_else(|| target.join("bench")))?;
    for d in ["logs", "lua", "wrk"] {
        std::fs::create_dir_all(out_dir.join(d))?;
    }
    let mut notes = Vec::new();

    if !procs::have("wrk") {
        procs::apt_install("wrk")?;
    }
    if !args.no_build {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        eprintln!("== cargo build --release -p oncerpc -p oncerpc-bench --bins");
        let status = Command::new(&cargo)
            .args(["build", "--release", "-p", "oncerpc", "-p", "oncerpc-bench", "--bins"])
            .current_dir(&root)
            .status()?;
        if !status.success() {
            notes.push(format!(
                "`cargo build --release` failed ({status}): the binaries already built were used"
            ));
            eprintln!("warning: cargo build failed ({status}); using the binaries already built");
        }
    }
    let bin = target.join("release");
    for b in ["oncerpc", "bench-jsonrpsee", "bench-floor", "bench-upstream"] {
        if !bin.join(b).is_file() {
            return Err(format!(
                "{} is missing: run `cargo build --release -p oncerpc -p oncerpc-bench --bins`",
                bin.join(b).display()
            )
            .into());
        }
    }
    let compilers = procs::running_compilers();
    if !compilers.is_empty() {
        notes.push(format!("compilers running when the run started: {}", compilers.join(", ")));
    }

    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let nonce = format!("b{secs:x}{:x}", std::process::id());
    let mut bench = Bench {
        args,
        nonce,
        out_dir: out_dir.clone(),
        client: Client::new()?,
        procs: Vec::new(),
        shared: Vec::new(),
        stores: Vec::new(),
        flow: None,
        dup_answers: HashMap::new(),
        runs: Vec::new(),
        notes,
        skipped: Vec::new(),
        watch: procs::CompilerWatch::start(),
        clk: procs::clock_ticks_per_sec(),
    };
    let result = bench.start_all(&bin).map(|()| {
        bench.precreate_all();
        bench.measure_all();
    });
    // Peak RSS is read before the processes stop.
    let processes: Vec<report::ProcInfo> = bench
        .procs
        .iter()
        .map(|p| report::ProcInfo {
            name: p.name.clone(),
            serves: p.serves.clone(),
            command: p.command.clone(),
            peak_rss_mib: p.peak_rss_kib().map(|k| k as f64 / 1024.0),
        })
        .collect();
    for p in &mut bench.procs {
        p.stop();
    }
    if let Some(note) = log_volume(&bench.log_path("oncerpc")) {
        bench.notes.push(note);
    }
    bench.cleanup();
    result?;

    let wall = started.elapsed().as_secs_f64();
    let compilers_seen = bench.watch.names.lock().expect("names lock").iter().cloned().collect::<Vec<_>>();
    if !compilers_seen.is_empty() {
        bench.notes.push(format!(
            "compiler processes seen during the run ({}): the runs marked † overlapped with a build",
            compilers_seen.join(", ")
        ));
    }
    let meta = report::Meta {
        generated: now_utc(),
        // bench/run.sh says how it was called; otherwise our own command line.
        command: std::env::var("ONCERPC_BENCH_COMMAND")
            .unwrap_or_else(|_| std::env::args().collect::<Vec<_>>().join(" ")),
        machine: procs::machine(),
        oncerpc_git: git_describe(&root),
        rustc: procs::first_line("rustc", &["-V"], &root).unwrap_or_default(),
        wrk: procs::first_line("wrk", &["-v"], &root)
            .map(|l| l.split(" Copyright").next().unwrap_or_default().to_owned())
            .unwrap_or_default(),
        jsonrpsee: lock_version(&root, "jsonrpsee").unwrap_or_default(),
        hyper: lock_version(&root, "hyper").unwrap_or_default(),
        settings: args.clone(),
        nonce: bench.nonce.clone(),
        wall_time_s: wall,
    };
    let rep = report::build(meta, &bench.runs, processes, bench.skipped.clone(), bench.notes.clone());
    write_report(&rep, &out_dir, &root)?;
    eprintln!("wall time {:.0} s", wall);
    Ok(rep.clean)
}

/// latest.md, latest.json and the charts of a report: `latest.png` in `out_dir`, and the
/// `--chart` path or, for a full run, docs/benchmarks.png.
fn write_report(rep: &report::Report, out_dir: &Path, root: &Path) -> Result<(), BoxError> {
    let args = &rep.meta.settings;
    let md = report::markdown(rep);
    std::fs::write(out_dir.join("latest.md"), &md)?;
    std::fs::write(out_dir.join("latest.json"), serde_json::to_string_pretty(rep)?)?;
    let mut charts = vec![out_dir.join("latest.png")];
    match &args.chart {
        Some(p) => charts.push(p.clone()),
        None if args.is_full() => charts.push(root.join("docs").join("benchmarks.png")),
        None => {}
    }
    let font = report::load_font(args.font.as_deref());
    for c in &charts {
        if let Err(e) = report::chart(rep, c, font) {
            eprintln!("warning: chart {}: {e}", c.display());
        }
    }
    print!("{md}");
    eprintln!(
        "\nwritten: {}, {}, chart {}",
        out_dir.join("latest.md").display(),
        out_dir.join("latest.json").display(),
        charts.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

/// `oncerpc-bench redraw FILE`: the report of a finished run, written again.
fn redraw(json: &Path) -> Result<bool, BoxError> {
    let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
    let rep: report::Report = serde_json::from_str(&text)?;
    let out_dir = json.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    write_report(&rep, &out_dir, &workspace_root())?;
    Ok(rep.clean)
}

/// What the default-config server's access log cost in volume: its lines and bytes per line.
fn log_volume(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let (mut lines, mut bytes, mut batch_lines, mut batch_bytes) = (0u64, 0u64, 0u64, 0u64);
    for l in text.lines() {
        if l.contains(": request ") {
            lines += 1;
            bytes += l.len() as u64 + 1;
        } else if l.contains(": batch ") {
            batch_lines += 1;
            batch_bytes += l.len() as u64 + 1;
        }
    }
    (lines > 0).then(|| {
        format!(
            "log volume with the defaults (`oncerpc`, `info`, text): {lines} request lines of {:.0} bytes on \
             average, {batch_lines} batch lines of {:.0} bytes (one per batch of 50 calls); {:.1} MB in all",
            bytes as f64 / lines as f64,
            batch_bytes as f64 / batch_lines.max(1) as f64,
            text.len() as f64 / 1e6
        )
    })
}

/// `git describe`-like: the commit and whether the work tree has changes (and where).
fn git_describe(root: &Path) -> String {
    let rev = procs::first_line("git", &["rev-parse", "--short", "HEAD"], root).unwrap_or_else(|| "?".into());
    let out = Command::new("git").args(["status", "--porcelain"]).current_dir(root).output();
    let changed: std::collections::BTreeSet<String> = out
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.get(3..))
                .map(|p| {
                    let mut parts = p.split('/');
                    match (parts.next(), parts.next()) {
                        (Some("crates"), Some(c)) => format!("crates/{c}"),
                        (Some(first), _) => first.to_owned(),
                        _ => String::new(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if changed.is_empty() {
        rev
    } else {
        format!("{rev} + uncommitted changes in {}", changed.into_iter().collect::<Vec<_>>().join(", "))
    }
}

/// The version of `package` in Cargo.lock.
fn lock_version(root: &Path, package: &str) -> Option<String> {
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).ok()?;
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l == format!("name = \"{package}\"") {
            return lines.next()?.strip_prefix("version = ")?.trim_matches('"').to_owned().into();
        }
    }
    None
}

/// The scenarios of one repetition, in order.
fn scenarios(args: &RunArgs, stores: &[(Store, usize)], flows: bool) -> Vec<Scenario> {
    let mut out = Vec::new();
    if args.has(Group::Shared) {
        out.push(Scenario::Single { conns: 1, stalled: 0 });
        out.push(Scenario::Single { conns: args.connections, stalled: 0 });
        out.push(Scenario::Batch { conns: args.connections });
    } else if !stores.is_empty() || flows || args.has(Group::Edge) {
        // The query baseline the commands and the edge row are compared with (oncerpc only).
        out.push(Scenario::Single { conns: args.connections, stalled: 0 });
    }
    if args.has(Group::Edge) && args.stalled > 0 {
        out.push(Scenario::Single { conns: args.connections, stalled: args.stalled });
    }
    for (store, _) in stores {
        out.push(Scenario::Command { store: *store, dup: false });
        out.push(Scenario::Command { store: *store, dup: true });
    }
    if flows {
        out.push(Scenario::Flow { dup: false });
        out.push(Scenario::Flow { dup: true });
    }
    out
}

impl Bench<'_> {
    fn log_path(&self, name: &str) -> PathBuf {
        self.out_dir.join("logs").join(format!("{name}.log"))
    }

    /// Start an oncerpc process; `Err` carries the reason (the caller decides whether that is
    /// fatal).
    fn start_oncerpc(
        &mut self,
        bin: &Path,
        name: &str,
        serves: &str,
        extra: &[String],
    ) -> Result<usize, String> {
        let addr = procs::free_addr().map_err(|e| e.to_string())?;
        // The defaults a user gets: nothing but the address and `extra`, run in a fresh
        // directory of its own (the default store is `sqlite://oncerpc.db` there).
        let mut args: Vec<String> = vec!["serve".into(), "--listen".into(), addr.to_string()];
        args.extend(extra.iter().cloned());
        let cwd = tempfile::Builder::new()
            .prefix(&format!("run-{name}-"))
            .tempdir_in(&self.out_dir)
            .map_err(|e| e.to_string())?
            .keep();
        let mut p = Proc::spawn(name, serves, addr, &bin.join("oncerpc"), &args, self.log_path(name), &cwd)
            .map_err(|e| e.to_string())?;
        let client = &self.client;
        p.wait_ready(Duration::from_secs(30), |a| {
            client.once(a, Method::GET, "/healthz", &[], "").is_ok_and(|r| r.status == 200)
        })?;
        eprintln!("   {name}: pid {} on {addr}", p.pid());
        self.procs.push(p);
        Ok(self.procs.len() - 1)
    }

    fn start_plain(&mut self, bin: &Path, program: &str, name: &str, serves: &str) -> Result<usize, String> {
        let addr = procs::free_addr().map_err(|e| e.to_string())?;
        let args = vec!["--listen".to_owned(), addr.to_string()];
        let mut p =
            Proc::spawn(name, serves, addr, &bin.join(program), &args, self.log_path(name), &self.out_dir)
                .map_err(|e| e.to_string())?;
        p.wait_ready(Duration::from_secs(30), |_| true)?;
        eprintln!("   {name}: pid {} on {addr}", p.pid());
        self.procs.push(p);
        Ok(self.procs.len() - 1)
    }

    fn start_all(&mut self, bin: &Path) -> Result<(), BoxError> {
        let args = self.args;
        eprintln!("== starting the servers (run {})", self.nonce);
        let mem = vec!["--store".to_owned(), args.memory_url.clone()];
        let needs_query =
            [Group::Shared, Group::Commands, Group::Flows, Group::Edge].iter().any(|g| args.has(*g));
        if needs_query {
            let i =
                self.start_oncerpc(bin, "oncerpc", "shared scenarios and the edge row (the defaults)", &[])?;
            self.shared.push((Server::Oncerpc, i));
        }
        if args.has(Group::Shared) {
            let warn = ["--log-level".to_owned(), "warn".to_owned()];
            let i = self.start_oncerpc(
                bin,
                "oncerpc-warn",
                "shared scenarios (defaults + --log-level warn)",
                &warn,
            )?;
            self.shared.push((Server::OncerpcWarn, i));
            let i = self.start_plain(bin, "bench-jsonrpsee", "jsonrpsee", "shared scenarios")?;
            self.shared.push((Server::Jsonrpsee, i));
            let i = self.start_plain(bin, "bench-floor", "floor", "shared scenarios")?;
            self.shared.push((Server::Floor, i));
        }
        if args.has(Group::Commands) {
            for &store in &args.stores {
                let name = format!("oncerpc-{}", store.name());
                let serves = format!("commands, {} store", store.title());
                let extra = match store {
                    Store::Memory => Ok(mem.clone()),
                    Store::Sqlite => {
                        let dir = tempfile::Builder::new().prefix("sqlite-").tempdir_in(&self.out_dir)?;
                        // Removed when the run ends (cleanup).
                        let db = dir.keep().join("bench.db");
                        Ok(vec!["--store".to_owned(), format!("sqlite://{}", db.display())])
                    }
                    Store::Redis => match procs::url_host_port(&args.redis_url, 6379) {
                        Some(hp) if procs::reachable(&hp) => {
                            let cfg = self.out_dir.join("oncerpc-redis.toml");
                            std::fs::write(
                                &cfg,
                                format!(
                                    "[store]\nurl = {:?}\nredis_prefix = {:?}\n",
                                    args.redis_url,
                                    format!("oncerpc-bench-{}", self.nonce)
                                ),
                            )?;
                            Ok(vec!["--config".to_owned(), cfg.display().to_string()])
                        }
                        _ => Err(format!("{} is not reachable", args.redis_url)),
                    },
                    Store::Postgres => match procs::url_host_port(&args.postgres_url, 5432) {
                        Some(hp) if procs::reachable(&hp) => {
                            Ok(vec!["--store".to_owned(), args.postgres_url.clone()])
                        }
                        _ => Err(format!("{} is not reachable", args.postgres_url)),
                    },
                };
                let started = extra.and_then(|extra| self.start_oncerpc(bin, &name, &serves, &extra));
                match started {
                    Ok(i) => self.stores.push((store, i)),
                    Err(e) if matches!(store, Store::Redis | Store::Postgres) => {
                        eprintln!("   {name}: skipped: {e}");
                        self.skipped.push(format!("{} store: {e}", store.title()));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if args.has(Group::Flows) {
            let up =
                self.start_plain(bin, "bench-upstream", "upstream", "the sync flow's upstream (POST /step)")?;
            let cfg = self.out_dir.join("oncerpc-flow.toml");
            std::fs::write(&cfg, flow_config(&args.memory_url, self.procs[up].addr))?;
            let extra = vec!["--config".to_owned(), cfg.display().to_string()];
            let i =
                self.start_oncerpc(bin, "oncerpc-flow", "sync flow orders.create (memory store)", &extra)?;
            self.flow = Some((i, up));
        }
        Ok(())
    }

    /// The keys of the duplicate scenarios: `PREFIX-0` … `PREFIX-(n-1)`.
    fn dup_prefix(&self, flows: bool) -> String {
        format!("{}-{}", self.nonce, if flows { "f" } else { "d" })
    }

    fn precreate_all(&mut self) {
        let mut todo: Vec<(usize, bool, String)> =
            self.stores.iter().map(|(s, i)| (*i, false, s.title().to_owned())).collect();
        if let Some((i, _)) = self.flow {
            todo.push((i, true, "sync flow".into()));
        }
        for (idx, flows, what) in todo {
            eprintln!("== creating {} keys ({what})", self.args.dup_keys);
            let t = Instant::now();
            match self.precreate(idx, flows) {
                Ok(answers) => {
                    self.dup_answers.insert(idx, answers);
                    eprintln!("   done in {:.1} s", t.elapsed().as_secs_f64());
                }
                Err(e) => {
                    eprintln!("   FAILED: {e}");
                    self.notes.push(format!("creating the duplicate keys ({what}) failed: {e}"));
                }
            }
        }
    }

    fn precreate(&self, idx: usize, flows: bool) -> Result<Vec<Bytes>, String> {
        let addr = self.procs[idx].addr;
        let prefix = self.dup_prefix(flows);
        let mut conn = self.client.connect(addr).map_err(|e| e.to_string())?;
        let mut answers = Vec::new();
        for i in 0..self.args.dup_keys {
            let key = format!("{prefix}-{i}");
            let (req, resp) =
                self.send_keyed(&mut conn, flows, &key).map_err(|e| format!("key {key}: {e}"))?;
            if let Err(why) = judge_keyed(flows, "new", &resp, None) {
                return Err(format!("{why}; request {req}; answer HTTP {} {}", resp.status, resp.text()));
            }
            answers.push(resp.body);
        }
        Ok(answers)
    }

    /// Send the keyed request of a command (or flow) scenario; returns what was sent.
    fn send_keyed(
        &self,
        conn: &mut client::Conn,
        flows: bool,
        key: &str,
    ) -> Result<(String, Resp), BoxError> {
        if flows {
            let resp =
                self.client.send(conn, Method::POST, FLOW_PATH, &[(KEY_HEADER, key)], bodies::FLOW_BODY)?;
            Ok((format!("POST {FLOW_PATH} {KEY_HEADER}: {key} {}", bodies::FLOW_BODY), resp))
        } else {
            let body = bodies::increment(key);
            let resp = self.client.send(conn, Method::POST, "/rpc", &[], &body)?;
            Ok((format!("POST /rpc {body}"), resp))
        }
    }

    fn measure_all(&mut self) {
        let args = self.args;
        let list = scenarios(args, &self.stores, self.flow.is_some());
        let per_rep: usize = list.iter().map(|s| self.targets(s).len()).sum();
        eprintln!(
            "== {} repetitions × {per_rep} runs × ({} s + {} s warm-up)",
            args.reps, args.duration, args.warmup
        );
        for rep in 1..=args.reps {
            for sc in &list {
                let mut targets = self.targets(sc);
                // Rotate the order each repetition, so no server is always first.
                if !targets.is_empty() {
                    let k = (rep as usize - 1) % targets.len();
                    targets.rotate_left(k);
                }
                for t in targets {
                    let r = self.run_one(rep, *sc, &t);
                    eprintln!(
                        "[rep {rep}] {:<24} {:<18} {:>9.0} req/s  p50 {:>7.3} ms  p99 {:>7.3} ms  errors {}{}{}",
                        sc.id(),
                        t.label,
                        r.wrk.req_per_s,
                        r.wrk.p50_ms,
                        r.wrk.p99_ms,
                        r.errors() + r.check_failures.len() as u64,
                        match r.verified {
                            Some(true) => "  verified",
                            Some(false) => "  VERIFICATION FAILED",
                            None => "",
                        },
                        if r.compilers_seen { "  † compiler running" } else { "" }
                    );
                    if let Some(e) = &r.wrk_error {
                        eprintln!("    wrk: {e}");
                    }
                    if r.verified == Some(false) {
                        eprintln!("    {}", r.verification);
                    }
                    for f in &r.check_failures {
                        eprintln!(
                            "    wrong answer: {}\n      request: {}\n      answer: HTTP {:?} {:?} {}",
                            f.why, f.request, f.status, f.idempotency_status, f.response
                        );
                    }
                    self.runs.push(r);
                }
            }
        }
    }

    fn targets(&self, sc: &Scenario) -> Vec<Target> {
        match sc {
            Scenario::Single { .. } | Scenario::Batch { .. } => {
                // Every server in the shared group; oncerpc alone for the baseline and the edge row.
                let all =
                    self.args.has(Group::Shared) && !matches!(sc, Scenario::Single { stalled: 1.., .. });
                self.shared
                    .iter()
                    .filter(|(s, _)| all || *s == Server::Oncerpc)
                    .map(|(s, i)| Target { label: s.name().into(), server: *s, proc_idx: *i, upstream: None })
                    .collect()
            }
            Scenario::Command { store, .. } => self
                .stores
                .iter()
                .filter(|(s, _)| s == store)
                .map(|(s, i)| Target {
                    label: format!("oncerpc ({})", s.name()),
                    server: Server::Oncerpc,
                    proc_idx: *i,
                    upstream: None,
                })
                .collect(),
            Scenario::Flow { .. } => self
                .flow
                .iter()
                .map(|(i, up)| Target {
                    label: "oncerpc (flow)".into(),
                    server: Server::Oncerpc,
                    proc_idx: *i,
                    upstream: Some(*up),
                })
                .collect(),
        }
    }

    /// The wrk Lua script of (scenario, server).
    fn script(&self, sc: &Scenario, server: Server) -> String {
        let comment = format!("{} → {}", sc.title(), server.name());
        match sc {
            Scenario::Single { .. } => lua::fixed(&comment, &bodies::single(server.method())),
            Scenario::Batch { .. } => lua::fixed(&comment, &bodies::batch(server.method())),
            Scenario::Command { dup: false, .. } => {
                let (head, tail) = bodies::increment_halves();
                lua::new_key_body(&comment, &head, &tail)
            }
            Scenario::Command { dup: true, .. } => {
                let (head, tail) = bodies::increment_halves();
                lua::cycled_key_body(&comment, &head, &tail, self.args.dup_keys)
            }
            Scenario::Flow { dup: false } => lua::new_key_header(&comment, KEY_HEADER, bodies::FLOW_BODY),
            Scenario::Flow { dup: true } => {
                lua::cycled_key_header(&comment, KEY_HEADER, bodies::FLOW_BODY, self.args.dup_keys)
            }
        }
    }

    /// The script argument: the key prefix.
    fn key_prefix(&self, rep: u32, sc: &Scenario, warmup: bool) -> String {
        match sc {
            Scenario::Command { dup: true, .. } => self.dup_prefix(false),
            Scenario::Flow { dup: true } => self.dup_prefix(true),
            _ => format!("{}-r{rep}-{}-{}", self.nonce, sc.id(), if warmup { "w" } else { "m" }),
        }
    }

    fn run_one(&mut self, rep: u32, sc: Scenario, t: &Target) -> RunRecord {
        let args = self.args;
        let conns = sc.conns(args);
        let threads = args.threads.min(conns);
        let script_path = self.out_dir.join("lua").join(format!("{}-{}.lua", sc.id(), t.server.name()));
        let url = format!(
            "http://{}{}",
            self.procs[t.proc_idx].addr,
            match sc {
                Scenario::Flow { .. } => FLOW_PATH,
                _ => t.server.path(),
            }
        );
        let mut rec = RunRecord {
            rep,
            scenario: sc.id(),
            title: sc.title(),
            server: t.label.clone(),
            process: self.procs[t.proc_idx].name.clone(),
            wrk: WrkStats::default(),
            wrk_error: None,
            server_cpu: 0.0,
            upstream_cpu: None,
            wrk_cpu: 0.0,
            other_cpu: 0.0,
            compilers_seen: false,
            check_requests: 0,
            check_failures: Vec::new(),
            verified: None,
            verification: String::new(),
            unrecorded_executions: 0,
        };
        if let Err(e) = std::fs::write(&script_path, self.script(&sc, t.server)) {
            rec.wrk_error = Some(format!("cannot write {}: {e}", script_path.display()));
            return rec;
        }
        if !self.procs[t.proc_idx].alive() {
            rec.wrk_error =
                Some(format!("{} is not running: {}", rec.process, self.procs[t.proc_idx].log_tail()));
            return rec;
        }

        // 1. A handful of requests, judged.
        let (n, failures) = self.precheck(rep, &sc, t);
        rec.check_requests = n;
        rec.check_failures = failures;

        // The edge row: slow-loris connections held open through the warm-up and the run.
        let stalls = match sc {
            Scenario::Single { stalled: n @ 1.., .. } => {
                let (n, headers) = (n as usize, n as usize * 2 / 3);
                match stalls::Stalls::start(self.procs[t.proc_idx].addr, headers, n - headers) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        rec.wrk_error = Some(format!("cannot open the stalled connections: {e}"));
                        return rec;
                    }
                }
            }
            _ => None,
        };

        // 2. Warm-up (unmeasured; its errors are noted).
        if args.warmup > 0 {
            let prefix = self.key_prefix(rep, &sc, true);
            match run_wrk(threads, conns, args.warmup, &script_path, &url, &prefix) {
                Ok((st, _)) if st.non_2xx + st.socket_errors() > 0 => self.notes.push(format!(
                    "rep {rep} {} → {}: warm-up saw {} non-2xx and {} socket errors",
                    sc.id(),
                    t.label,
                    st.non_2xx,
                    st.socket_errors()
                )),
                Ok(_) => {}
                Err(e) => self.notes.push(format!("rep {rep} {} → {}: warm-up: {e}", sc.id(), t.label)),
            }
        }

        // 3. The measured run, with the counters and CPU times around it. oncerpc's counters
        //    are read once they stand still: requests the warm-up's wrk left in flight (counted
        //    `client_closed` when oncerpc notices the closed connection) land before them.
        let before =
            if t.server.is_oncerpc() { self.settled_snapshot(&sc, t) } else { self.snapshot(&sc, t) };
        let cpu0 = self.cpu(t);
        let seen0 = self.watch.count();
        let t0 = Instant::now();
        let prefix = self.key_prefix(rep, &sc, false);
        let outcome = run_wrk(threads, conns, args.duration, &script_path, &url, &prefix);
        let wall = t0.elapsed().as_secs_f64();
        let cpu1 = self.cpu(t);
        if let Some(stalls) = stalls {
            let reopened = stalls.stop();
            self.notes.push(format!(
                "rep {rep} {}: the server ended {reopened} stalled connections during the warm-up and the run \
                 (header and body timeouts); each was opened again at once",
                sc.id()
            ));
        }
        rec.compilers_seen = self.watch.count() > seen0;
        let ticks = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / self.clk / wall,
            _ => 0.0,
        };
        rec.server_cpu = ticks(cpu0.server, cpu1.server);
        rec.upstream_cpu = t.upstream.map(|_| ticks(cpu0.upstream, cpu1.upstream));
        rec.wrk_cpu = (cpu1.children_s - cpu0.children_s) / wall;
        let machine = (cpu1.machine.0.saturating_sub(cpu0.machine.0)) as f64 / self.clk / wall;
        rec.other_cpu = (machine - rec.server_cpu - rec.wrk_cpu - rec.upstream_cpu.unwrap_or(0.0)).max(0.0);
        match outcome {
            Ok((st, raw)) => {
                let file =
                    self.out_dir.join("wrk").join(format!("r{rep}-{}-{}.txt", sc.id(), t.server.name()));
                let _ = std::fs::write(file, raw);
                rec.wrk = st;
            }
            Err(e) => {
                rec.wrk_error = Some(e);
                return rec;
            }
        }

        // 4. Did oncerpc count what wrk counted?
        if t.server.is_oncerpc() {
            let after = self.settled_snapshot(&sc, t);
            match (before, after) {
                (Ok(b), Ok(a)) => {
                    let (ok, text) = verify(&sc, rec.wrk.requests, u64::from(conns), &b, &a);
                    rec.unrecorded_executions = unrecorded(&sc, &b, &a);
                    rec.verified = Some(ok);
                    rec.verification = text;
                }
                (Err(e), _) | (_, Err(e)) => {
                    rec.verified = Some(false);
                    rec.verification = format!("cannot read the counters: {e}");
                }
            }
        } else {
            rec.verification =
                "no counters to read: judged by the checks before the run and by wrk's status counts".into();
        }
        rec
    }

    fn cpu(&self, t: &Target) -> CpuSample {
        CpuSample {
            server: self.procs[t.proc_idx].cpu_ticks(),
            upstream: t.upstream.and_then(|u| self.procs[u].cpu_ticks()),
            children_s: procs::children_cpu_secs(),
            machine: procs::machine_ticks(),
        }
    }

    /// Send [`CHECK_REQUESTS`] requests as the scenario sends them and judge the answers.
    fn precheck(&self, rep: u32, sc: &Scenario, t: &Target) -> (usize, Vec<CheckFailure>) {
        let addr = self.procs[t.proc_idx].addr;
        let mut failures = Vec::new();
        let mut conn = match self.client.connect(addr) {
            Ok(c) => c,
            Err(e) => {
                failures.push(CheckFailure {
                    request: format!("connect {addr}"),
                    status: None,
                    idempotency_status: None,
                    response: String::new(),
                    why: e.to_string(),
                });
                return (1, failures);
            }
        };
        for i in 0..CHECK_REQUESTS {
            let outcome: Result<(String, Resp, Result<(), String>), BoxError> = (|| match sc {
                Scenario::Single { .. } | Scenario::Batch { .. } => {
                    let (body, expected) = match sc {
                        Scenario::Single { .. } => {
                            (bodies::single(t.server.method()), bodies::SINGLE_ANSWER.to_owned())
                        }
                        _ => (bodies::batch(t.server.method()), bodies::batch_answer()),
                    };
                    let resp = self.client.send(&mut conn, Method::POST, t.server.path(), &[], &body)?;
                    let verdict = judge_fixed(&resp, &expected);
                    Ok((format!("POST {} {body}", t.server.path()), resp, verdict))
                }
                Scenario::Command { dup, .. } | Scenario::Flow { dup } => {
                    let flows = matches!(sc, Scenario::Flow { .. });
                    let (key, stored) = if *dup {
                        let n = self.args.dup_keys as usize;
                        let k = (i * 997 + rep as usize * 13) % n;
                        let stored = self.dup_answers.get(&t.proc_idx).and_then(|a| a.get(k)).cloned();
                        (format!("{}-{k}", self.dup_prefix(flows)), stored)
                    } else {
                        (format!("{}-c{rep}-{}-{i}", self.nonce, sc.id()), None)
                    };
                    let (req, resp) = self.send_keyed(&mut conn, flows, &key)?;
                    let want = if *dup { "duplicate" } else { "new" };
                    let verdict = if *dup && stored.is_none() {
                        Err("the duplicate keys were not created (see the notes)".to_owned())
                    } else {
                        judge_keyed(flows, want, &resp, stored.as_ref())
                    };
                    Ok((req, resp, verdict))
                }
            })();
            match outcome {
                Ok((_, _, Ok(()))) => {}
                Ok((request, resp, Err(why))) => failures.push(CheckFailure {
                    request,
                    status: Some(resp.status),
                    idempotency_status: resp.idempotency.clone(),
                    response: resp.text(),
                    why,
                }),
                Err(e) => {
                    failures.push(CheckFailure {
                        request: format!("request {i} of the check"),
                        status: None,
                        idempotency_status: None,
                        response: String::new(),
                        why: e.to_string(),
                    });
                    match self.client.connect(addr) {
                        Ok(c) => conn = c,
                        Err(_) => return (i + 1, failures),
                    }
                }
            }
        }
        (CHECK_REQUESTS, failures)
    }

    /// oncerpc's metrics, and the demo counter or the upstream's calls.
    fn snapshot(&self, sc: &Scenario, t: &Target) -> Result<Snap, String> {
        if !t.server.is_oncerpc() {
            return Ok(Snap::default());
        }
        let addr = self.procs[t.proc_idx].addr;
        let get = |addr: SocketAddr, path: &str| -> Result<Resp, String> {
            let r =
                self.client.once(addr, Method::GET, path, &[], "").map_err(|e| format!("GET {path}: {e}"))?;
            if r.status == 200 { Ok(r) } else { Err(format!("GET {path}: HTTP {} {}", r.status, r.text())) }
        };
        let mut snap = Snap { metrics: get(addr, "/metrics")?.text(), ..Snap::default() };
        match sc {
            Scenario::Command { .. } => {
                let body = r#"{"jsonrpc":"2.0","method":"counter.get","id":1}"#;
                let r = self
                    .client
                    .once(addr, Method::POST, "/rpc", &[], body)
                    .map_err(|e| format!("counter.get: {e}"))?;
                let total = r.json().and_then(|v| v["result"]["total"].as_i64());
                snap.counter =
                    Some(total.ok_or_else(|| format!("counter.get: HTTP {} {}", r.status, r.text()))?);
            }
            Scenario::Flow { .. } => {
                let up = self.procs[t.upstream.expect("flow has an upstream")].addr;
                let r = get(up, "/count")?;
                let calls = r.json().and_then(|v| v["calls"].as_u64());
                snap.upstream_calls = Some(calls.ok_or_else(|| format!("upstream /count: {}", r.text()))?);
            }
            _ => {}
        }
        Ok(snap)
    }

    /// The counters once requests left in flight by wrk's stop have finished: read until two
    /// reads agree (at most ~2 s).
    fn settled_snapshot(&self, sc: &Scenario, t: &Target) -> Result<Snap, String> {
        std::thread::sleep(Duration::from_millis(200));
        let key = |s: &Snap| {
            (
                prom::sum(&s.metrics, "oncerpc_requests_total", |_| true),
                prom::sum(&s.metrics, "oncerpc_idempotency_total", |_| true),
                s.counter,
                s.upstream_calls,
            )
        };
        let mut last = self.snapshot(sc, t)?;
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(200));
            let next = self.snapshot(sc, t)?;
            // The reads themselves (counter.get) are requests: compare without them.
            let (r0, i0, c0, u0) = key(&last);
            let (r1, i1, c1, u1) = key(&next);
            let own = if matches!(sc, Scenario::Command { .. }) { 1.0 } else { 0.0 };
            if i0 == i1 && c0 == c1 && u0 == u1 && r1 - r0 <= own {
                return Ok(next);
            }
            last = next;
        }
        Ok(last)
    }

    /// Best-effort removal of what the run left in Redis and PostgreSQL, and the SQLite files.
    fn cleanup(&mut self) {
        if let Ok(dir) = std::fs::read_dir(&self.out_dir) {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("sqlite-") || name.starts_with("run-") {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let stores: Vec<Store> = self.stores.iter().map(|(s, _)| *s).collect();
        if stores.contains(&Store::Redis)
            && procs::have("redis-cli")
            && let Some(hp) = procs::url_host_port(&self.args.redis_url, 6379)
        {
            let (host, port) = hp.rsplit_once(':').unwrap_or((&hp, "6379"));
            let script = format!(
                "redis-cli -h {host} -p {port} --scan --pattern 'oncerpc-bench-{n}:*' \
                 | xargs -r -n 500 redis-cli -h {host} -p {port} unlink >/dev/null",
                n = self.nonce
            );
            let _ = Command::new("sh").args(["-c", &script]).status();
        }
        if stores.contains(&Store::Postgres) && procs::have("psql") {
            let sql = format!("DELETE FROM oncerpc_records WHERE key LIKE '{n}-%';", n = self.nonce);
            let _ = Command::new("psql")
                .args([self.args.postgres_url.as_str(), "-qc", &sql])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

struct CpuSample {
    server: Option<u64>,
    upstream: Option<u64>,
    children_s: f64,
    machine: (u64, u64),
}

/// The oncerpc config of the sync-flow process: one command flow, one step to the upstream.
fn flow_config(memory_url: &str, upstream: SocketAddr) -> String {
    format!(
        "# generated by oncerpc-bench: the sync-flow scenario\n\
         demo = false\n\n[store]\nurl = {memory_url:?}\n\n\
         [[methods]]\nname = \"{FLOW}\"\nkind = \"command\"\n\n  \
         [[methods.steps]]\n  name = \"reserve\"\n  url = \"http://{upstream}/step\"\n"
    )
}

/// Run wrk; its parsed report and raw output.
fn run_wrk(
    threads: u32,
    conns: u32,
    secs: u64,
    script: &Path,
    url: &str,
    prefix: &str,
) -> Result<(WrkStats, String), String> {
    let out = Command::new("wrk")
        .arg(format!("-t{threads}"))
        .arg(format!("-c{conns}"))
        .arg(format!("-d{secs}s"))
        .arg("--latency")
        .arg("-s")
        .arg(script)
        .arg(url)
        .arg("--")
        .arg(prefix)
        .output()
        .map_err(|e| format!("cannot run wrk: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!("wrk exited with {}: {} {}", out.status, stdout.trim(), stderr.trim()));
    }
    let st = wrk::parse(&stdout).map_err(|e| format!("{e}: {} {}", stdout.trim(), stderr.trim()))?;
    Ok((st, format!("{stdout}{stderr}")))
}

/// A fixed-answer scenario: HTTP 200 and the expected JSON.
fn judge_fixed(resp: &Resp, expected: &str) -> Result<(), String> {
    if resp.status != 200 {
        return Err(format!("HTTP {} (expected 200)", resp.status));
    }
    let want: serde_json::Value = serde_json::from_str(expected).expect("valid expected answer");
    match resp.json() {
        Some(got) if got == want => Ok(()),
        Some(_) => Err(format!("unexpected body (expected {expected})")),
        None => Err("the body is not JSON".into()),
    }
}

/// A keyed command or flow answer: HTTP 200, the idempotency status `want`, the right shape, and
/// for a duplicate the stored answer byte for byte.
fn judge_keyed(flows: bool, want: &str, resp: &Resp, stored: Option<&Bytes>) -> Result<(), String> {
    if resp.status != 200 {
        return Err(format!("HTTP {} (expected 200)", resp.status));
    }
    if resp.idempotency.as_deref() != Some(want) {
        return Err(format!("X-Idempotency-Status {:?} (expected {want:?})", resp.idempotency));
    }
    let v = resp.json().ok_or("the body is not JSON")?;
    let shape_ok = if flows {
        v["step"] == "reserve" && v["n"].is_u64()
    } else {
        v["jsonrpc"] == "2.0" && v["id"] == 1 && v["result"]["total"].is_i64() && v.get("error").is_none()
    };
    if !shape_ok {
        return Err(if flows {
            "expected the upstream's {\"step\":\"reserve\",\"n\":N}".into()
        } else {
            "expected {\"jsonrpc\":\"2.0\",\"result\":{\"total\":N},\"id\":1}".into()
        });
    }
    if let Some(stored) = stored
        && stored != &resp.body
    {
        return Err(format!(
            "not the stored answer byte for byte (stored: {})",
            String::from_utf8_lossy(stored)
        ));
    }
    Ok(())
}

/// Side effects beyond the `new` executions in the metrics (new-key scenarios).
pub fn unrecorded(sc: &Scenario, before: &Snap, after: &Snap) -> u64 {
    let (method, effect) = match sc {
        Scenario::Command { dup: false, .. } => {
            ("counter.increment", after.counter.unwrap_or(0) - before.counter.unwrap_or(0))
        }
        Scenario::Flow { dup: false } => {
            (FLOW, after.upstream_calls.unwrap_or(0) as i64 - before.upstream_calls.unwrap_or(0) as i64)
        }
        _ => return 0,
    };
    let labels = [("method", method), ("status", "new")];
    let new = prom::value(&after.metrics, "oncerpc_idempotency_total", &labels)
        - prom::value(&before.metrics, "oncerpc_idempotency_total", &labels);
    u64::try_from(effect - new as i64).unwrap_or(0)
}

/// Compare what oncerpc counted during a measured run with what wrk counted: `requests`
/// completed answers, up to `conns` more left in flight when wrk stopped.
pub fn verify(sc: &Scenario, requests: u64, conns: u64, before: &Snap, after: &Snap) -> (bool, String) {
    let d = |name: &str, labels: &[(&str, &str)]| {
        prom::value(&after.metrics, name, labels) - prom::value(&before.metrics, name, labels)
    };
    // Δ oncerpc_requests_total of `method` over the outcomes `keep` accepts.
    let by_outcome = |method: &str, keep: fn(&str) -> bool| {
        let f = |t: &str| {
            prom::sum(t, "oncerpc_requests_total", |l| {
                l.contains(&("method", method)) && l.iter().any(|&(k, v)| k == "outcome" && keep(v))
            })
        };
        f(&after.metrics) - f(&before.metrics)
    };
    // Answered with an error: not ok, and not client_closed (a request still in flight when
    // wrk stopped and closed its connection).
    let bad = |method: &str| by_outcome(method, |o| o != "ok" && o != "client_closed");
    let closed = |method: &str| by_outcome(method, |o| o == "client_closed");
    let within = |x: f64, lo: u64, hi: u64| x >= lo as f64 && x <= hi as f64;
    let mut problems = Vec::new();
    let text = match sc {
        Scenario::Single { .. } | Scenario::Batch { .. } => {
            let per = if matches!(sc, Scenario::Batch { .. }) { bodies::BATCH_SIZE as u64 } else { 1 };
            let ok = d("oncerpc_requests_total", &[("method", "sum"), ("outcome", "ok")]);
            let errors = bad("sum");
            if !within(ok, requests * per, (requests + conns) * per) {
                problems.push(format!("`sum` answered ok {ok} times, wrk counted {requests} × {per}"));
            }
            if errors != 0.0 {
                problems.push(format!("{errors} `sum` calls answered with an error"));
            }
            format!("sum ok +{ok} for wrk's {requests} × {per}; errors +{errors}")
        }
        Scenario::Command { dup, .. } | Scenario::Flow { dup } => {
            let method = if matches!(sc, Scenario::Flow { .. }) { FLOW } else { "counter.increment" };
            let st = |s: &str| d("oncerpc_idempotency_total", &[("method", method), ("status", s)]);
            let (new, duplicate, processing) = (st("new"), st("duplicate"), st("processing"));
            let errors = bad(method);
            let cut = closed(method);
            if cut > conns as f64 {
                problems.push(format!("client_closed +{cut}: more than the {conns} connections"));
            }
            let (main, other, main_name) =
                if *dup { (duplicate, new, "duplicate") } else { (new, duplicate, "new") };
            if !within(main, requests, requests + conns) {
                problems.push(format!("{main_name} +{main}, wrk counted {requests}"));
            }
            if other != 0.0 {
                problems.push(format!("{} +{other}", if *dup { "new" } else { "duplicate" }));
            }
            if processing != 0.0 {
                problems.push(format!("processing +{processing}"));
            }
            if errors != 0.0 {
                problems.push(format!("{errors} `{method}` calls answered with an error"));
            }
            // Runs once: the side effect moved by the new executions, plus at most one execution
            // per request left in flight when wrk stopped: those ran and were stored, but their
            // client had gone, so they are counted as client_closed, not as `new`.
            let (effect, effect_name) = match sc {
                Scenario::Flow { .. } => (
                    after.upstream_calls.unwrap_or(0) as f64 - before.upstream_calls.unwrap_or(0) as f64,
                    "upstream calls",
                ),
                _ => (after.counter.unwrap_or(0) as f64 - before.counter.unwrap_or(0) as f64, "counter"),
            };
            if *dup && effect != 0.0 {
                problems.push(format!("{effect_name} +{effect} for duplicates (nothing may run)"));
            } else if !*dup && (effect < new || effect > (requests + conns) as f64) {
                problems.push(format!(
                    "{effect_name} +{effect}: expected between the new executions ({new}) and the requests sent ({requests} + at most {conns} in flight)"
                ));
            }
            let unrecorded = if !*dup && effect > new {
                format!(
                    " ({} executions of requests whose connection wrk closed at its stop ran; the metrics count {cut} client_closed)",
                    effect - new
                )
            } else {
                String::new()
            };
            format!(
                "new +{new}, duplicate +{duplicate}, processing +{processing}, errors +{errors}, {effect_name} +{effect}; wrk counted {requests}{unrecorded}"
            )
        }
    };
    if problems.is_empty() { (true, text) } else { (false, format!("{}: {text}", problems.join("; "))) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(new: u64, dup: u64, counter: i64) -> Snap {
        Snap {
            metrics: format!(
                "oncerpc_idempotency_total{{method=\"counter.increment\",status=\"new\"}} {new}\n\
                 oncerpc_idempotency_total{{method=\"counter.increment\",status=\"duplicate\"}} {dup}\n\
                 oncerpc_requests_total{{method=\"counter.increment\",kind=\"command\",outcome=\"ok\"}} {}\n",
                new + dup
            ),
            counter: Some(counter),
            upstream_calls: None,
        }
    }

    #[test]
    fn verification_of_new_keys() {
        let sc = Scenario::Command { store: Store::Memory, dup: false };
        // wrk counted 1000; 3 more were in flight when it stopped.
        let (ok, text) = verify(&sc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1013));
        assert!(ok, "{text}");
        // Requests in flight at wrk's stop may run without being counted in the metrics.
        let (ok, text) = verify(&sc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1020));
        assert!(ok && text.contains("7 executions"), "{text}");
        // More executions than requests sent: something ran twice.
        let (ok, text) = verify(&sc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1080));
        assert!(!ok && text.contains("counter"), "{text}");
        // Fewer executions than counted as new.
        let (ok, _) = verify(&sc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1012));
        assert!(!ok);
        // Fewer new than wrk answered.
        let (ok, _) = verify(&sc, 1000, 64, &snap(10, 5, 10), &snap(900, 5, 900));
        assert!(!ok);
    }

    #[test]
    fn verification_of_duplicates() {
        let sc = Scenario::Command { store: Store::Sqlite, dup: true };
        let (ok, text) = verify(&sc, 500, 64, &snap(1000, 0, 1000), &snap(1000, 520, 1000));
        assert!(ok, "{text}");
        let (ok, text) = verify(&sc, 500, 64, &snap(1000, 0, 1000), &snap(1001, 520, 1001));
        assert!(!ok && text.contains("new +1"), "{text}");
    }

    #[test]
    fn verification_of_batches() {
        let m = |ok: u64| Snap {
            metrics: format!("oncerpc_requests_total{{method=\"sum\",kind=\"query\",outcome=\"ok\"}} {ok}\n"),
            ..Snap::default()
        };
        let sc = Scenario::Batch { conns: 64 };
        assert!(verify(&sc, 100, 64, &m(0), &m(5000)).0);
        assert!(!verify(&sc, 100, 64, &m(0), &m(4999)).0);
    }

    #[test]
    fn scenario_order_and_ids() {
        let cli = Cli::try_parse_from(["oncerpc-bench"]).unwrap();
        let args = cli.run;
        assert!(args.is_full());
        let list = scenarios(&args, &[(Store::Memory, 3), (Store::Sqlite, 4)], true);
        let ids: Vec<String> = list.iter().map(Scenario::id).collect();
        assert_eq!(
            ids,
            [
                "single-c1",
                "single-c64",
                "batch50-c64",
                "single-c64-stalled3000",
                "cmd-new-memory",
                "cmd-dup-memory",
                "cmd-new-sqlite",
                "cmd-dup-sqlite",
                "flow-new",
                "flow-dup"
            ]
        );
        let quick = Cli::try_parse_from(["oncerpc-bench", "--duration", "3", "--reps", "1"]).unwrap();
        assert!(!quick.run.is_full());
        let only =
            Cli::try_parse_from(["oncerpc-bench", "--groups", "commands", "--stores", "sqlite"]).unwrap();
        let list = scenarios(&only.run, &[(Store::Sqlite, 1)], false);
        assert_eq!(
            list[0],
            Scenario::Single { conns: 64, stalled: 0 },
            "the query baseline is always measured"
        );
        assert!(Cli::try_parse_from(["oncerpc-bench", "inprocess", "--duration", "1"]).is_ok());
    }

    #[test]
    fn judges_answers() {
        let resp = |status: u16, idem: Option<&str>, body: &str| Resp {
            status,
            idempotency: idem.map(str::to_owned),
            body: Bytes::from(body.to_owned()),
        };
        assert!(
            judge_fixed(&resp(200, None, r#"{"id":1,"jsonrpc":"2.0","result":3}"#), bodies::SINGLE_ANSWER)
                .is_ok()
        );
        assert!(
            judge_fixed(&resp(200, None, r#"{"jsonrpc":"2.0","result":4,"id":1}"#), bodies::SINGLE_ANSWER)
                .is_err()
        );
        assert!(judge_fixed(&resp(500, None, bodies::SINGLE_ANSWER), bodies::SINGLE_ANSWER).is_err());
        let ok = r#"{"jsonrpc":"2.0","result":{"total":7},"id":1}"#;
        assert!(judge_keyed(false, "new", &resp(200, Some("new"), ok), None).is_ok());
        assert!(judge_keyed(false, "duplicate", &resp(200, Some("new"), ok), None).is_err());
        let stored = Bytes::from_static(br#"{"jsonrpc":"2.0","result":{"total":6},"id":1}"#);
        assert!(judge_keyed(false, "duplicate", &resp(200, Some("duplicate"), ok), Some(&stored)).is_err());
        let flow = r#"{"step":"reserve","n":3}"#;
        assert!(judge_keyed(true, "new", &resp(200, Some("new"), flow), None).is_ok());
        assert!(judge_keyed(true, "new", &resp(200, Some("new"), "{}"), None).is_err());
    }

    #[test]
    fn flow_config_is_valid() {
        let text = flow_config("memory://?capacity=5000000", "127.0.0.1:9000".parse().unwrap());
        let cfg = oncerpc::Config::from_toml(&text).unwrap();
        assert_eq!(cfg.methods.len(), 1);
        assert!(!cfg.demo_enabled());
    }
}
