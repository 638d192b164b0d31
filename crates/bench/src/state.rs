//! The state of a run: its settings, the server processes it started and what its measured
//! runs recorded. The run's steps are `impl Bench` blocks in the modules that do them (`run.rs`,
//! `servers.rs`, `checks.rs`, `anchor.rs`).

use std::collections::HashMap;
use std::path::PathBuf;

use bytes::Bytes;

use crate::cli::{RunArgs, Store};
use crate::client::Client;
use crate::procs::{self, Proc};
use crate::record::{AnchorRun, RunRecord};
use crate::scenarios::Server;

/// The processes of the MCP group.
#[derive(Clone, Debug)]
pub struct McpProcs {
    pub oncerpc: usize,
    pub rmcp: usize,
    /// The `Mcp-Session-Id` of the session-era row (`None`: `initialize` failed; see the notes).
    pub session: Option<String>,
}

/// Where a scenario is sent.
#[derive(Clone)]
pub struct Target {
    pub label: String,
    pub server: Server,
    pub proc_idx: usize,
    pub upstream: Option<usize>,
}

/// The state of a run: its settings, the server processes (by index into `procs`) and what
/// the measured runs recorded.
pub struct Bench<'a> {
    pub args: &'a RunArgs,
    pub nonce: String,
    pub out_dir: PathBuf,
    pub client: Client,
    pub procs: Vec<Proc>,
    pub shared: Vec<(Server, usize)>,
    /// The shared view's servers: oncerpc, jsonrpsee and the floor again, not pinned.
    pub unpinned: Vec<(Server, usize)>,
    /// Whether the servers run pinned to `--server-cpu` and wrk to `--wrk-cpu`.
    pub pinned: bool,
    pub stores: Vec<(Store, usize)>,
    pub flow: Option<(usize, usize)>,
    /// The MCP group's processes: oncerpc (memory store) and rmcp.
    pub mcp: Option<McpProcs>,
    /// The answers to the keys created before the duplicate scenarios, per process.
    pub dup_answers: HashMap<usize, Vec<Bytes>>,
    pub runs: Vec<RunRecord>,
    /// The pgbench anchor, once per repetition with the PostgreSQL store (`anchor.rs`).
    pub anchor_runs: Vec<AnchorRun>,
    pub notes: Vec<String>,
    pub skipped: Vec<String>,
    pub watch: procs::CompilerWatch,
    pub clk: f64,
}
