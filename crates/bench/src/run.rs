//! The run: build, start the servers, create the duplicate keys, then repetition by repetition
//! every (scenario, server) once: checks, warm-up, the measured wrk run with the CPU times and
//! counters around it; finally the report.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use oncerpc_bench::wrk::{self, WrkStats};

use crate::checks::{unrecorded, verify};
use crate::cli::{Group, RunArgs, Store};
use crate::client::Client;
use crate::procs;
use crate::record::{Meta, ProcInfo, RunRecord};
use crate::scenarios::{Scenario, Server, scenarios};
use crate::servers::log_volume;
use crate::state::{Bench, Target};
use crate::{BoxError, report, stalls, workspace_root};

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// The whole run; `Ok(false)` when some answer was wrong or some check failed.
pub fn run(args: &RunArgs) -> Result<bool, BoxError> {
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
    for b in ["oncerpc", "bench-jsonrpsee", "bench-floor", "bench-upstream", "bench-rmcp"] {
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
        unpinned: Vec::new(),
        pinned: args.pinned(procs::cpus_allowed()),
        stores: Vec::new(),
        flow: None,
        mcp: None,
        dup_answers: HashMap::new(),
        runs: Vec::new(),
        anchor_runs: Vec::new(),
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
    let processes: Vec<ProcInfo> = bench
        .procs
        .iter()
        .map(|p| ProcInfo {
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
    let meta = Meta {
        generated: procs::now_utc(),
        // bench/run.sh says how it was called; otherwise our own command line.
        command: std::env::var("ONCERPC_BENCH_COMMAND")
            .unwrap_or_else(|_| std::env::args().collect::<Vec<_>>().join(" ")),
        machine: procs::machine(),
        oncerpc_git: procs::git_describe(&root),
        rustc: procs::first_line("rustc", &["-V"], &root).unwrap_or_default(),
        wrk: procs::first_line("wrk", &["-v"], &root)
            .map(|l| l.split(" Copyright").next().unwrap_or_default().to_owned())
            .unwrap_or_default(),
        jsonrpsee: procs::lock_version(&root, "jsonrpsee").unwrap_or_default(),
        hyper: procs::lock_version(&root, "hyper").unwrap_or_default(),
        rmcp: procs::lock_version(&root, "rmcp").unwrap_or_default(),
        settings: args.clone(),
        pinned: bench.pinned,
        nonce: bench.nonce.clone(),
        wall_time_s: wall,
    };
    let rep = report::build(
        meta,
        &bench.runs,
        &bench.anchor_runs,
        processes,
        bench.skipped.clone(),
        bench.notes.clone(),
    );
    report::write(&rep, &out_dir, &root)?;
    eprintln!("wall time {:.0} s", wall);
    Ok(rep.clean)
}

impl Bench<'_> {
    fn measure_all(&mut self) {
        let args = self.args;
        let list = scenarios(args, &self.stores, self.flow.is_some(), self.pinned);
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
                    if matches!(sc, Scenario::Command { store: Store::Postgres, .. }) {
                        crate::anchor::vacuum(&args.postgres_url);
                    }
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
                // The anchor right after oncerpc's new keys on PostgreSQL, alone on the machine.
                if *sc == (Scenario::Command { store: Store::Postgres, dup: false }) {
                    crate::anchor::vacuum(&args.postgres_url);
                    self.run_anchor(rep);
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
            Scenario::Unpinned { .. } => self
                .unpinned
                .iter()
                .map(|(s, i)| Target { label: s.name().into(), server: *s, proc_idx: *i, upstream: None })
                .collect(),
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
            Scenario::McpAdd { .. } | Scenario::McpCommand { .. } => {
                let Some(m) = &self.mcp else { return Vec::new() };
                let at = |server: Server, label: &str, proc_idx: usize| Target {
                    label: label.into(),
                    server,
                    proc_idx,
                    upstream: None,
                };
                let mut out = vec![
                    at(Server::Oncerpc, "oncerpc /rpc", m.oncerpc),
                    at(Server::OncerpcMcp, "oncerpc /mcp", m.oncerpc),
                ];
                if m.session.is_some() {
                    out.push(at(Server::OncerpcMcpSession, "oncerpc /mcp session", m.oncerpc));
                }
                if matches!(sc, Scenario::McpAdd { .. }) {
                    out.push(at(Server::Rmcp, "rmcp", m.rmcp));
                }
                out
            }
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

    /// The script argument: the key prefix (the server's name in it where several doors of one
    /// process run the same scenario, so no door's keys are another's duplicates).
    fn key_prefix(&self, rep: u32, sc: &Scenario, server: Server, warmup: bool) -> String {
        match sc {
            Scenario::Command { dup: true, .. } => self.dup_prefix(false),
            Scenario::Flow { dup: true } => self.dup_prefix(true),
            Scenario::McpCommand { .. } => format!(
                "{}-r{rep}-{}-{}-{}",
                self.nonce,
                sc.id(),
                server.name(),
                if warmup { "w" } else { "m" }
            ),
            _ => format!("{}-r{rep}-{}-{}", self.nonce, sc.id(), if warmup { "w" } else { "m" }),
        }
    }

    fn run_one(&mut self, rep: u32, sc: Scenario, t: &Target) -> RunRecord {
        let args = self.args;
        let conns = sc.conns(args);
        let threads = args.threads.min(conns);
        let script_path = self.out_dir.join("lua").join(format!("{}-{}.lua", sc.id(), t.server.name()));
        let url = format!("http://{}{}", self.procs[t.proc_idx].addr, sc.path(t.server));
        let process = self.procs[t.proc_idx].name.clone();
        let mut rec = RunRecord::start(rep, sc.id(), sc.title(), t.label.clone(), process);
        let session = self.mcp.as_ref().and_then(|m| m.session.as_deref());
        if let Err(e) = std::fs::write(&script_path, sc.script(t.server, args.dup_keys, session)) {
            rec.wrk_error = Some(format!("cannot write {}: {e}", script_path.display()));
            return rec;
        }
        if !self.procs[t.proc_idx].alive() {
            rec.wrk_error =
                Some(format!("{} is not running: {}", rec.process, self.procs[t.proc_idx].log_tail()));
            return rec;
        }

        // 1. A handful of requests, judged.
        // What is sent and how it is judged (an unpinned row: its pinned scenario's).
        let judged = sc.base();
        let (n, failures) = self.precheck(rep, &judged, t);
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
            let prefix = self.key_prefix(rep, &sc, t.server, true);
            match run_wrk(threads, conns, args.warmup, &script_path, &url, &prefix, self.wrk_cpu(&sc)) {
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
            if t.server.is_oncerpc() { self.settled_snapshot(&judged, t) } else { self.snapshot(&judged, t) };
        let redis = matches!(sc, Scenario::Command { store: Store::Redis, .. });
        let store0 = redis.then(|| procs::redis_cpu_secs(&args.redis_url)).flatten();
        let cpu0 = self.cpu(t);
        let seen0 = self.watch.count();
        let t0 = Instant::now();
        let prefix = self.key_prefix(rep, &sc, t.server, false);
        let outcome = run_wrk(threads, conns, args.duration, &script_path, &url, &prefix, self.wrk_cpu(&sc));
        let wall = t0.elapsed().as_secs_f64();
        let cpu1 = self.cpu(t);
        // The edge row: the server's memory with the stalled connections still open.
        if stalls.is_some() {
            rec.stalled_rss_mib = self.procs[t.proc_idx].rss_kib().map(|k| k as f64 / 1024.0);
        }
        let store1 = redis.then(|| procs::redis_cpu_secs(&args.redis_url)).flatten();
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
        rec.wall_s = wall;
        rec.upstream_cpu = t.upstream.map(|_| ticks(cpu0.upstream, cpu1.upstream));
        rec.wrk_cpu = (cpu1.children_s - cpu0.children_s) / wall;
        let machine = (cpu1.machine.0.saturating_sub(cpu0.machine.0)) as f64 / self.clk / wall;
        rec.other_cpu = (machine - rec.server_cpu - rec.wrk_cpu - rec.upstream_cpu.unwrap_or(0.0)).max(0.0);
        match outcome {
            Ok((st, raw)) => {
                let file =
                    self.out_dir.join("wrk").join(format!("r{rep}-{}-{}.txt", sc.id(), t.server.name()));
                let _ = std::fs::write(file, raw);
                if let (Some(a), Some(b), true) = (store0, store1, st.requests > 0) {
                    rec.store_cpu_us = Some((b - a) * 1e6 / st.requests as f64);
                }
                rec.wrk = st;
            }
            Err(e) => {
                rec.wrk_error = Some(e);
                return rec;
            }
        }

        // 4. Did oncerpc count what wrk counted?
        if t.server.is_oncerpc() {
            let after = self.settled_snapshot(&judged, t);
            match (before, after) {
                (Ok(b), Ok(a)) => {
                    let (ok, text) = verify(&judged, t.server, rec.wrk.requests, u64::from(conns), &b, &a);
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

    /// The CPU wrk is pinned to: every row of a pinned run but the shared view's.
    fn wrk_cpu(&self, sc: &Scenario) -> Option<usize> {
        (self.pinned && !matches!(sc, Scenario::Unpinned { .. })).then_some(self.args.wrk_cpu)
    }

    /// The CPU a server of the main table is pinned to.
    pub fn server_cpu(&self) -> Option<usize> {
        self.pinned.then_some(self.args.server_cpu)
    }

    fn cpu(&self, t: &Target) -> CpuSample {
        CpuSample {
            server: self.procs[t.proc_idx].cpu_ticks(),
            upstream: t.upstream.and_then(|u| self.procs[u].cpu_ticks()),
            children_s: procs::children_cpu_secs(),
            machine: procs::machine_ticks(),
        }
    }
}

struct CpuSample {
    server: Option<u64>,
    upstream: Option<u64>,
    children_s: f64,
    machine: (u64, u64),
}

/// Run wrk (pinned to `cpu` when given); its parsed report and raw output.
fn run_wrk(
    threads: u32,
    conns: u32,
    secs: u64,
    script: &Path,
    url: &str,
    prefix: &str,
    cpu: Option<usize>,
) -> Result<(WrkStats, String), String> {
    let mut cmd = Command::new("wrk");
    if let Some(cpu) = cpu {
        procs::pin(&mut cmd, cpu);
    }
    let out = cmd
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
