//! What a run records and reports, as data: each measured wrk run, each failed check, each
//! pgbench anchor run, and the report's rows, ratios and metadata (the JSON document's
//! shape). The modules that measure (`run.rs`, `checks.rs`, `anchor.rs`) fill these; the ones
//! that write (`report.rs`, `mcp_report.rs`, `chart.rs`, `cells.rs`) read them.

use oncerpc_bench::wrk::WrkStats;
use serde::{Deserialize, Serialize};

use crate::cli::RunArgs;
use crate::procs::Machine;

/// A body sent before the measured run that did not get the right answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckFailure {
    pub request: String,
    pub status: Option<u16>,
    pub idempotency_status: Option<String>,
    pub response: String,
    pub why: String,
}

/// What pgbench reported.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PgbenchStats {
    /// Transactions (= keys) per second, without the initial connection time.
    pub tps: f64,
    pub latency_avg_ms: f64,
    pub transactions: u64,
    pub failed: u64,
}

/// One repetition of the anchor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AnchorRun {
    pub rep: u32,
    pub command: String,
    pub stats: Option<PgbenchStats>,
    /// Why this repetition has no numbers (skipped or failed).
    pub error: Option<String>,
    /// CPU during the run, in cores: pgbench, and the rest of the machine (mostly PostgreSQL).
    pub pgbench_cpu: f64,
    pub other_cpu: f64,
    pub compilers_seen: bool,
}

/// The anchor over the repetitions, and oncerpc's new-key PostgreSQL row against it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AnchorSummary {
    pub title: String,
    pub command: String,
    pub reps: usize,
    /// Medians over the repetitions.
    pub keys_per_s: f64,
    pub latency_avg_ms: f64,
    pub keys_per_s_each: Vec<f64>,
    pub transactions: u64,
    pub failed: u64,
    pub pgbench_cpu: f64,
    pub other_cpu: f64,
    pub compilers_seen: bool,
    /// Per repetition with both: `cmd-new-postgres` req/s ÷ the anchor's keys/s.
    pub postgres_per_anchor_each: Vec<f64>,
    /// The median of `postgres_per_anchor_each`.
    pub postgres_per_anchor: Option<f64>,
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
    /// Wall seconds of the measured run (wrk's process, start to exit).
    #[serde(default)]
    pub wall_s: f64,
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
    /// The store server's CPU per request wrk counted, µs (Redis rows: its `INFO cpu`).
    #[serde(default)]
    pub store_cpu_us: Option<f64>,
    /// The edge row: the server's resident set (`VmRSS`, MiB) at the end of the measured run,
    /// the stalled connections still open.
    #[serde(default)]
    pub stalled_rss_mib: Option<f64>,
}

impl RunRecord {
    /// A run about to start: nothing measured or checked yet.
    pub fn start(rep: u32, scenario: String, title: String, server: String, process: String) -> RunRecord {
        RunRecord {
            rep,
            scenario,
            title,
            server,
            process,
            wrk: WrkStats::default(),
            wrk_error: None,
            server_cpu: 0.0,
            wall_s: 0.0,
            upstream_cpu: None,
            wrk_cpu: 0.0,
            other_cpu: 0.0,
            compilers_seen: false,
            check_requests: 0,
            check_failures: Vec::new(),
            verified: None,
            verification: String::new(),
            unrecorded_executions: 0,
            store_cpu_us: None,
            stalled_rss_mib: None,
        }
    }

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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub generated: String,
    pub command: String,
    pub machine: Machine,
    pub oncerpc_git: String,
    pub rustc: String,
    pub wrk: String,
    pub jsonrpsee: String,
    pub hyper: String,
    #[serde(default)]
    pub rmcp: String,
    pub settings: RunArgs,
    /// Whether the servers ran pinned to `settings.server_cpu` and wrk to `settings.wrk_cpu`
    /// (runs before `--pin`: the MCP group only).
    #[serde(default)]
    pub pinned: bool,
    /// Prefix of every idempotency key (and Redis namespace) of this run.
    pub nonce: String,
    pub wall_time_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcInfo {
    pub name: String,
    pub serves: String,
    pub command: String,
    /// `VmHWM` at the end of the run, MiB.
    pub peak_rss_mib: Option<f64>,
}

/// One (scenario, server): medians over the repetitions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub scenario: String,
    pub title: String,
    pub shared: bool,
    pub server: String,
    pub reps: usize,
    pub req_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub req_per_s_each: Vec<f64>,
    pub non_2xx: u64,
    pub socket_errors: u64,
    /// Check requests (before the measured runs) and how many were answered wrongly.
    pub check_requests: usize,
    pub wrong_answers: usize,
    /// Runs whose after-run cross-check passed / was done.
    pub verified_runs: usize,
    pub verifiable_runs: usize,
    pub server_cpu: f64,
    pub wrk_cpu: f64,
    pub other_cpu: f64,
    /// Median over the repetitions of this row's req/s ÷ oncerpc's single-call req/s at the
    /// same connection count in the same repetition (commands and flows).
    pub commands_per_query: Option<f64>,
    pub compilers_seen: bool,
    /// Median over the repetitions of the server's CPU time per request, µs (CPU seconds ÷
    /// requests wrk counted).
    #[serde(default)]
    pub server_cpu_us: f64,
    /// Median over the repetitions of this row's server CPU per request ÷ oncerpc's
    /// single-call query's in the same repetition (commands and flows).
    #[serde(default)]
    pub cpu_per_query: Option<f64>,
    /// The store server's own CPU per request, µs (Redis: `INFO cpu`), median.
    #[serde(default)]
    pub store_cpu_us: Option<f64>,
}

impl Row {
    /// A row of the MCP group.
    pub fn is_mcp(&self) -> bool {
        self.scenario.starts_with("mcp-")
    }

    /// A row of the shared view (nothing pinned).
    pub fn is_unpinned(&self) -> bool {
        self.scenario.starts_with("unpinned-")
    }
}

impl Row {
    pub fn errors(&self) -> u64 {
        self.non_2xx + self.socket_errors + self.wrong_answers as u64
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ratio {
    pub scenario: String,
    pub title: String,
    pub oncerpc_per_jsonrpsee: Option<f64>,
    pub oncerpc_per_floor: Option<f64>,
    /// Server CPU per request, oncerpc ÷ jsonrpsee.
    #[serde(default)]
    pub cpu_oncerpc_per_jsonrpsee: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub meta: Meta,
    pub rows: Vec<Row>,
    pub ratios: Vec<Ratio>,
    pub processes: Vec<ProcInfo>,
    pub skipped: Vec<String>,
    pub notes: Vec<String>,
    /// Every answer that was wrong and every failed check, with the request and the response.
    pub problems: Vec<String>,
    pub clean: bool,
    pub runs: Vec<RunRecord>,
    /// The pgbench anchor of the PostgreSQL rows: each repetition, and the medians.
    #[serde(default)]
    pub anchor_runs: Vec<AnchorRun>,
    #[serde(default)]
    pub anchor: Option<AnchorSummary>,
}

/// How the run placed its processes, for the report's headings.
pub fn pinning(m: &Meta) -> String {
    if m.pinned {
        format!("servers pinned to CPU {}, wrk to CPU {}", m.settings.server_cpu, m.settings.wrk_cpu)
    } else {
        "nothing pinned".into()
    }
}

/// The median req/s of (scenario, server), when it ran.
pub fn rps(rows: &[Row], scenario: &str, server: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.server == server)
        .map(|r| r.req_per_s)
        .filter(|x| !x.is_nan() && *x > 0.0)
}

#[cfg(test)]
pub mod tests {
    use super::*;

    pub fn row(scenario: &str, server: &str, rps: f64, cpu_us: f64) -> Row {
        Row {
            scenario: scenario.into(),
            title: scenario.into(),
            shared: false,
            server: server.into(),
            reps: 1,
            req_per_s: rps,
            p50_ms: 1.0,
            p99_ms: 2.0,
            req_per_s_each: vec![rps],
            non_2xx: 0,
            socket_errors: 0,
            check_requests: 5,
            wrong_answers: 0,
            verified_runs: 1,
            verifiable_runs: 1,
            server_cpu: 1.0,
            wrk_cpu: 0.5,
            other_cpu: 0.0,
            commands_per_query: None,
            compilers_seen: false,
            server_cpu_us: cpu_us,
            cpu_per_query: None,
            store_cpu_us: None,
        }
    }
}
