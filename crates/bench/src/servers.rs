//! The server processes of a run: which ones start (per scenario group and store), the keys
//! created before the duplicate scenarios, and the cleanup of what the run left behind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;

use crate::BoxError;
use crate::checks::judge_keyed;
use crate::cli::{Group, Store};
use crate::procs::{self, Proc};
use crate::scenarios::{Server, flow_config};
use crate::state::{Bench, McpProcs};
use oncerpc_bench::bodies;

impl Bench<'_> {
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.out_dir.join("logs").join(format!("{name}.log"))
    }

    /// Start an oncerpc process; `Err` carries the reason (the caller decides whether that is
    /// fatal).
    /// The server is pinned to `--server-cpu` when the run pins.
    fn start_oncerpc(
        &mut self,
        bin: &Path,
        name: &str,
        serves: &str,
        extra: &[String],
    ) -> Result<usize, String> {
        self.start_oncerpc_on(bin, name, serves, extra, self.server_cpu())
    }

    /// [`Self::start_oncerpc`], pinned to CPU `cpu` when given.
    fn start_oncerpc_on(
        &mut self,
        bin: &Path,
        name: &str,
        serves: &str,
        extra: &[String],
        cpu: Option<usize>,
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
        let mut p =
            Proc::spawn(name, serves, addr, &bin.join("oncerpc"), &args, self.log_path(name), &cwd, cpu)
                .map_err(|e| e.to_string())?;
        let client = &self.client;
        p.wait_ready(Duration::from_secs(30), |a| {
            client.once(a, Method::GET, "/healthz", &[], "").is_ok_and(|r| r.status == 200)
        })?;
        eprintln!("   {name}: pid {} on {addr}", p.pid());
        self.procs.push(p);
        Ok(self.procs.len() - 1)
    }

    /// A benchmark server (`bench-…`), pinned as [`Self::start_oncerpc`] is.
    fn start_plain(&mut self, bin: &Path, program: &str, name: &str, serves: &str) -> Result<usize, String> {
        self.start_plain_on(bin, program, name, serves, self.server_cpu())
    }

    fn start_plain_on(
        &mut self,
        bin: &Path,
        program: &str,
        name: &str,
        serves: &str,
        cpu: Option<usize>,
    ) -> Result<usize, String> {
        let addr = procs::free_addr().map_err(|e| e.to_string())?;
        let args = vec!["--listen".to_owned(), addr.to_string()];
        let log = self.log_path(name);
        let mut p = Proc::spawn(name, serves, addr, &bin.join(program), &args, log, &self.out_dir, cpu)
            .map_err(|e| e.to_string())?;
        p.wait_ready(Duration::from_secs(30), |_| true)?;
        eprintln!("   {name}: pid {} on {addr}", p.pid());
        self.procs.push(p);
        Ok(self.procs.len() - 1)
    }

    pub fn start_all(&mut self, bin: &Path) -> Result<(), BoxError> {
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
        if self.pinned && args.has(Group::Unpinned) {
            let unpinned = "the shared view (nothing pinned)";
            let i = self.start_oncerpc_on(bin, "oncerpc-unpinned", unpinned, &[], None)?;
            self.unpinned.push((Server::Oncerpc, i));
            let i = self.start_plain_on(bin, "bench-jsonrpsee", "jsonrpsee-unpinned", unpinned, None)?;
            self.unpinned.push((Server::Jsonrpsee, i));
            let i = self.start_plain_on(bin, "bench-floor", "floor-unpinned", unpinned, None)?;
            self.unpinned.push((Server::Floor, i));
        }
        if args.has(Group::Mcp) {
            let serves = "MCP group: /rpc and /mcp (memory store)";
            let oncerpc = self.start_oncerpc(bin, "oncerpc-mcp", serves, &mem)?;
            let serves = "MCP group: rmcp 3.11, one `add` tool";
            let rmcp = self.start_plain(bin, "bench-rmcp", "rmcp", serves)?;
            let session = match self.mcp_initialize(oncerpc) {
                Ok(id) => Some(id),
                Err(e) => {
                    eprintln!("   MCP session: {e}");
                    self.notes.push(format!("MCP session era row skipped: initialize failed: {e}"));
                    None
                }
            };
            self.mcp = Some(McpProcs { oncerpc, rmcp, session });
        }
        Ok(())
    }

    /// `initialize` and `notifications/initialized` on oncerpc's `/mcp`: the session of the
    /// session-era row.
    fn mcp_initialize(&self, idx: usize) -> Result<String, String> {
        let addr = self.procs[idx].addr;
        let accept = ("Accept", "application/json, text/event-stream");
        let r = self
            .client
            .once(addr, Method::POST, "/mcp", &[accept], &bodies::mcp_initialize())
            .map_err(|e| e.to_string())?;
        let id = match (&r.session, r.json()) {
            (Some(id), Some(v))
                if r.status == 200 && v["result"]["protocolVersion"] == bodies::MCP_SESSION =>
            {
                id.clone()
            }
            _ => return Err(format!("HTTP {} {}", r.status, r.text())),
        };
        let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let headers =
            [accept, ("Mcp-Session-Id", id.as_str()), ("MCP-Protocol-Version", bodies::MCP_SESSION)];
        let r = self.client.once(addr, Method::POST, "/mcp", &headers, note).map_err(|e| e.to_string())?;
        if r.status != 202 {
            return Err(format!("notifications/initialized: HTTP {} {}", r.status, r.text()));
        }
        Ok(id)
    }

    /// The keys of the duplicate scenarios: `PREFIX-0` … `PREFIX-(n-1)`.
    pub fn dup_prefix(&self, flows: bool) -> String {
        format!("{}-{}", self.nonce, if flows { "f" } else { "d" })
    }

    pub fn precreate_all(&mut self) {
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

    /// Best-effort removal of what the run left in Redis and PostgreSQL, and the SQLite files.
    pub fn cleanup(&mut self) {
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

/// What the default-config server's access log cost in volume: its lines and bytes per line.
pub fn log_volume(log: &Path) -> Option<String> {
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
