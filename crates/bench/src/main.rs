//! # oncerpc-bench
//!
//! One reproducible load benchmark (docs/BENCHMARKS.md). In one run it starts, on loopback and
//! **each as its own OS process** (so each one's peak RSS is its `/proc/PID/status` `VmHWM`):
//!
//! - **oncerpc**: the release binary `target/release/oncerpc serve` with the defaults (one
//!   process for the shared scenarios, one more with `--log-level warn`, one per idempotency
//!   store, one for the sync flow);
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
//! The modules, one job each:
//!
//! - `cli`: the flags;
//! - `scenarios`: what each scenario sends, its wrk script, and their order;
//! - `servers`: which server processes a run starts, the duplicate keys, the cleanup;
//! - `run`: the run loop, wrk, the CPU times around each measured run;
//! - `checks`: the answers judged before a measured run, the counters verified after it;
//! - `report` and `chart`: latest.md, latest.json and the PNG;
//! - `anchor`: the pgbench anchor of the PostgreSQL command rows (run, parsed, reported);
//! - `procs`, `client`, `stalls`: child processes and the machine, the HTTP client of the
//!   checks, the slow-loris connections of the edge row.
//!
//! `cargo test` never starts a load run: only the unit tests run.

mod anchor;
mod cells;
mod chart;
mod checks;
mod cli;
mod client;
mod mcp_report;
mod procs;
mod record;
mod report;
mod run;
mod scenarios;
mod servers;
mod stalls;
mod state;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Mode};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.mode {
        Some(Mode::Redraw { json }) => report::redraw(&json),
        None => run::run(&cli.run),
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
