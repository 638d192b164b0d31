//! The command line: the flags of a run ([`RunArgs`]), the scenario groups and stores they
//! choose, and the `redraw` subcommand.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};

#[derive(Parser)]
#[command(
    name = "oncerpc-bench",
    about = "Load benchmark: oncerpc vs jsonrpsee vs a bare hyper floor, and the cost of idempotency per store; \
             every server its own process, driven by wrk. See docs/BENCHMARKS.md.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub mode: Option<Mode>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Subcommand)]
pub enum Mode {
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
    /// The MCP door: `tools/call` `add` and a keyed `counter.increment` on oncerpc's `/mcp`
    /// beside the same methods on `/rpc`, and rmcp serving `add`.
    Mcp,
    /// The shared view: the single call and the batch at N connections again, on servers and
    /// a wrk that share every CPU (the second table; only when the run pins).
    Unpinned,
}

/// Whether the servers run pinned to one CPU and wrk to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pin {
    /// Pin on a machine with 2 CPUs or more.
    Auto,
    On,
    Off,
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
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Group::Shared, Group::Commands, Group::Flows, Group::Edge, Group::Mcp, Group::Unpinned])]
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
    /// Pin every server to `--server-cpu` and wrk to `--wrk-cpu`, so a row's req/s is one
    /// core's worth of server and its CPU per request is the server's own (`auto`: when the
    /// machine has 2 CPUs or more). The `unpinned` group then repeats the shared scenarios
    /// with nothing pinned.
    #[arg(long, value_enum, default_value_t = Pin::Auto)]
    #[serde(default = "pin_auto")]
    pub pin: Pin,
    /// The CPU the servers are pinned to.
    #[arg(long, alias = "mcp-server-cpu", default_value_t = 0)]
    #[serde(default, alias = "mcp_server_cpu")]
    pub server_cpu: usize,
    /// The CPU wrk is pinned to.
    #[arg(long, alias = "mcp-wrk-cpu", default_value_t = 1)]
    #[serde(default = "cpu_one", alias = "mcp_wrk_cpu")]
    pub wrk_cpu: usize,
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

fn cpu_one() -> usize {
    1
}

/// Runs recorded before `--pin` existed pinned the MCP group only; `redraw` reads them as
/// `auto`.
fn pin_auto() -> Pin {
    Pin::Auto
}

impl RunArgs {
    pub fn has(&self, g: Group) -> bool {
        self.groups.contains(&g)
    }

    /// Whether this run is the documented full run (whose chart goes to docs/).
    pub fn is_full(&self) -> bool {
        self.reps >= 3
            && self.duration >= 10
            && [Group::Shared, Group::Commands, Group::Flows, Group::Edge, Group::Mcp]
                .iter()
                .all(|g| self.has(*g))
    }

    /// Whether servers and wrk are pinned, given the CPUs this process may use.
    pub fn pinned(&self, cpus: usize) -> bool {
        match self.pin {
            Pin::On => true,
            Pin::Off => false,
            Pin::Auto => cpus >= 2 && self.server_cpu != self.wrk_cpu,
        }
    }
}
