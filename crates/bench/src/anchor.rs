//! The pgbench anchor: PostgreSQL's ceiling for one idempotency key with the store's per-key
//! design, measured by the harness in the same run as oncerpc's PostgreSQL command rows.
//!
//! Each transaction is the store's two statements for one new key, each autocommitted: the
//! claim (`INSERT … ON CONFLICT DO NOTHING RETURNING token`) and the completion (`UPDATE … SET
//! state, outcome … WHERE tenant, method, key, token`), in the single-key form of what
//! `crates/store-postgres/src/lib.rs` sends batched with `unnest`. Run as `pgbench -n -M prepared
//! -c 16 -j 2 -T <--duration>` against `--postgres-url`, once per repetition, right after that
//! repetition's `cmd-new-postgres` run, with nothing else of the harness running. Keys start
//! with the run's id, so the end-of-run cleanup (`servers.rs`) deletes them. A missing `pgbench`
//! or `psql`, a missing table or a failed run skips the repetition with a note, never the run.

use std::fmt::Write;
use std::process::Command;
use std::time::Instant;

use oncerpc_bench::median;

use crate::cells::thousands;
use crate::procs;
use crate::record::{AnchorRun, AnchorSummary, PgbenchStats, RunRecord};
use crate::state::Bench;

/// The row's title in the commands table.
pub const TITLE: &str = "pgbench anchor: the store's two statements per key, -c 16";
/// The oncerpc row the anchor is compared with.
pub const SCENARIO: &str = "cmd-new-postgres";
const CLIENTS: u32 = 16;
const THREADS: u32 = 2;
/// `t` when the store's table and token sequence exist (`oncerpc-postgres` creates them).
const TABLE_EXISTS: &str =
    "SELECT to_regclass('oncerpc_records') IS NOT NULL AND to_regclass('oncerpc_tokens') IS NOT NULL";

/// The numbers of pgbench's report (`tps = N (without initial connection time)`, `latency
/// average = X ms`, the transactions processed and failed).
pub fn parse(out: &str) -> Result<PgbenchStats, String> {
    let mut st = PgbenchStats::default();
    let (mut tps, mut latency) = (None, None);
    let first = |s: &str| s.split_whitespace().next().map(str::to_owned).unwrap_or_default();
    for line in out.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("tps = ") {
            // Older pgbench prints two lines; the one without the connection time is wanted.
            if v.contains("without initial") || v.contains("excluding") || tps.is_none() {
                tps = first(v).parse::<f64>().ok();
            }
        } else if let Some(v) = line.strip_prefix("latency average = ") {
            latency = v.strip_suffix(" ms").and_then(|x| x.trim().parse::<f64>().ok());
        } else if let Some(v) = line.strip_prefix("number of transactions actually processed: ") {
            st.transactions = first(v.split('/').next().unwrap_or(v)).parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("number of failed transactions: ") {
            st.failed = first(v).parse().unwrap_or(0);
        }
    }
    st.tps = tps.filter(|x| x.is_finite()).ok_or("no `tps = N` line in pgbench's output")?;
    st.latency_avg_ms =
        latency.filter(|x| x.is_finite()).ok_or("no `latency average = X ms` line in pgbench's output")?;
    Ok(st)
}

/// The pgbench script: one new key `PREFIX<uuid>` per transaction, claimed and completed with
/// the store's statements (table, columns, clock and token sequence of `store-postgres`).
pub fn script(prefix: &str) -> String {
    const NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
    // As oncerpc stores them: the default tenant, the demo command, a SHA-256 hex fingerprint,
    // an answer like counter.increment's; a 30 s lease and a 24 h retention.
    let (tenant, method) = ("default", "counter.increment");
    let fingerprint = "5f1c".repeat(16);
    let outcome = r#"{"result":{"total":1}}"#;
    format!(
        "-- oncerpc-bench: the pgbench anchor (crates/bench/src/anchor.rs). Two autocommitted\n\
         -- statements per new key, the single-key form of crates/store-postgres's claim and completion.\n\
         INSERT INTO oncerpc_records (tenant, method, key, fingerprint, state, token, lease_until, expires_at)\n  \
         VALUES ('{tenant}', '{method}', '{prefix}' || gen_random_uuid(), '{fingerprint}', 0, nextval('oncerpc_tokens'),\n          \
         {NOW} + 30000, {NOW} + 86400000)\n  \
         ON CONFLICT (tenant, method, key) DO NOTHING RETURNING key, token\n\
         \\gset\n\
         UPDATE oncerpc_records SET state = 1, outcome = '{outcome}', lease_until = 0,\n    \
         expires_at = {NOW} + 86400000, takeover_token = NULL, takeover_until = NULL\n  \
         WHERE tenant = '{tenant}' AND method = '{method}' AND key = :key AND token = :token AND state = 0;\n"
    )
}

/// `psql URL -Atc SQL`: its trimmed stdout, or why not.
fn psql(url: &str, sql: &str) -> Result<String, String> {
    let out = Command::new("psql")
        .args([url, "-Atc", sql])
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if !out.status.success() {
        return Err(format!("psql: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `VACUUM (ANALYZE)` the store's table before a PostgreSQL run, as autovacuum would between
/// them: this machine's PostgreSQL runs with `autovacuum = off`, and without it each run
/// would start on the dead rows of the ones before (every new key leaves one: its claim's
/// version, updated by the completion). Failures are reported, not fatal.
pub fn vacuum(url: &str) {
    if procs::have("psql")
        && let Err(e) = psql(url, "VACUUM (ANALYZE) oncerpc_records")
    {
        eprintln!("vacuum before a PostgreSQL run failed: {e}");
    }
}

impl Bench<'_> {
    /// One repetition of the anchor (after `cmd-new-postgres` of the same repetition).
    pub fn run_anchor(&mut self, rep: u32) {
        let args = self.args;
        let url = args.postgres_url.as_str();
        let prefix = format!("{}-r{rep}-pgbench-", self.nonce);
        let script_path = self.out_dir.join("lua").join(format!("pgbench-anchor-r{rep}.sql"));
        let command = format!(
            "pgbench -n -M prepared -c {CLIENTS} -j {THREADS} -T {} -f {} {url}",
            args.duration,
            script_path.display()
        );
        let mut run = AnchorRun {
            rep,
            command,
            stats: None,
            error: None,
            pgbench_cpu: 0.0,
            other_cpu: 0.0,
            compilers_seen: false,
        };
        let ready = if !procs::have("pgbench") {
            Err("pgbench is not installed (Debian: postgresql-client)".to_owned())
        } else if !procs::have("psql") {
            Err("psql is not installed (needed to check the table and delete the anchor's keys)".to_owned())
        } else {
            psql(url, TABLE_EXISTS)
                .and_then(|t| {
                    if t == "t" {
                        Ok(())
                    } else {
                        Err("the store's table oncerpc_records (or sequence oncerpc_tokens) is missing"
                            .into())
                    }
                })
                .and_then(|()| {
                    std::fs::write(&script_path, script(&prefix))
                        .map_err(|e| format!("cannot write {}: {e}", script_path.display()))
                })
        };
        if let Err(e) = ready {
            eprintln!("[rep {rep}] pgbench anchor: skipped: {e}");
            self.anchor_runs.push(AnchorRun { error: Some(e), ..run });
            return;
        }

        let (cpu0, machine0, seen0) =
            (procs::children_cpu_secs(), procs::machine_ticks(), self.watch.count());
        let t0 = Instant::now();
        let out = Command::new("pgbench")
            .args(["-n", "-M", "prepared", "-c", &CLIENTS.to_string(), "-j", &THREADS.to_string()])
            .args(["-T", &args.duration.to_string(), "-f"])
            .arg(&script_path)
            .arg(url)
            .output();
        let wall = t0.elapsed().as_secs_f64();
        let machine = procs::machine_ticks().0.saturating_sub(machine0.0) as f64 / self.clk / wall;
        run.pgbench_cpu = (procs::children_cpu_secs() - cpu0) / wall;
        run.other_cpu = (machine - run.pgbench_cpu).max(0.0);
        run.compilers_seen = self.watch.count() > seen0;
        let outcome = out.map_err(|e| format!("cannot run pgbench: {e}")).and_then(|out| {
            let text =
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            let file = self.out_dir.join("wrk").join(format!("r{rep}-pgbench-anchor.txt"));
            let _ = std::fs::write(file, format!("$ {}\n{text}", run.command));
            let lines: Vec<&str> = text.lines().collect();
            let tail = || lines[lines.len().saturating_sub(3)..].join(" / ");
            if !out.status.success() {
                return Err(format!("pgbench exited with {}: {}", out.status, tail()));
            }
            parse(&text).map_err(|e| format!("{e}: {}", tail()))
        });
        match outcome {
            Ok(st) => {
                eprintln!(
                    "[rep {rep}] {:<24} {:<18} {:>9.0} keys/s  latency average {:.3} ms  failed {}",
                    "pgbench-anchor", "pgbench -c16", st.tps, st.latency_avg_ms, st.failed
                );
                if st.failed > 0 {
                    self.notes.push(format!("rep {rep} pgbench anchor: {} failed transactions", st.failed));
                }
                run.stats = Some(st);
            }
            Err(e) => {
                eprintln!("[rep {rep}] pgbench anchor: failed: {e}");
                run.error = Some(e);
            }
        }
        self.anchor_runs.push(run);
    }
}

/// The anchor's summary and oncerpc's ratio to it; notes for the repetitions without numbers.
pub fn summarize(runs: &[RunRecord], anchor: &[AnchorRun], notes: &mut Vec<String>) -> Option<AnchorSummary> {
    for a in anchor.iter().filter(|a| a.error.is_some()) {
        notes.push(format!(
            "rep {} pgbench anchor skipped: {}",
            a.rep,
            a.error.as_deref().unwrap_or_default()
        ));
    }
    let ok: Vec<(&AnchorRun, &PgbenchStats)> =
        anchor.iter().filter_map(|a| a.stats.as_ref().map(|s| (a, s))).collect();
    if ok.is_empty() {
        return None;
    }
    let col = |f: &dyn Fn(&AnchorRun, &PgbenchStats) -> f64| {
        median(&ok.iter().map(|(a, s)| f(a, s)).collect::<Vec<_>>())
    };
    let postgres_per_anchor_each: Vec<f64> = ok
        .iter()
        .filter(|(_, s)| s.tps > 0.0)
        .filter_map(|(a, s)| {
            runs.iter()
                .find(|r| r.rep == a.rep && r.scenario == SCENARIO && r.wrk_error.is_none())
                .map(|r| r.wrk.req_per_s / s.tps)
        })
        .collect();
    Some(AnchorSummary {
        title: TITLE.into(),
        command: ok[0].0.command.clone(),
        reps: ok.len(),
        keys_per_s: col(&|_, s| s.tps),
        latency_avg_ms: col(&|_, s| s.latency_avg_ms),
        keys_per_s_each: ok.iter().map(|(_, s)| s.tps).collect(),
        transactions: ok.iter().map(|(_, s)| s.transactions).sum(),
        failed: ok.iter().map(|(_, s)| s.failed).sum(),
        pgbench_cpu: col(&|a, _| a.pgbench_cpu),
        other_cpu: col(&|a, _| a.other_cpu),
        compilers_seen: ok.iter().any(|(a, _)| a.compilers_seen),
        postgres_per_anchor: (!postgres_per_anchor_each.is_empty())
            .then(|| median(&postgres_per_anchor_each)),
        postgres_per_anchor_each,
    })
}

/// The anchor's line of the commands table (same columns; its latency average in the p50
/// column, labelled).
pub fn table_row(a: &AnchorSummary) -> String {
    format!(
        "| {}{} | {} keys/s | {:.3} (latency average) | – | {} failed | – | {} | pgbench {:.2} / other {:.2} | {} transactions |",
        a.title,
        if a.compilers_seen { " †" } else { "" },
        thousands(a.keys_per_s),
        a.latency_avg_ms,
        a.failed,
        a.keys_per_s_each.iter().map(|x| thousands(*x)).collect::<Vec<_>>().join(" · "),
        a.pgbench_cpu,
        a.other_cpu,
        thousands(a.transactions as f64)
    )
}

/// The paragraph under the commands table: what the anchor is and oncerpc's ratio to it.
pub fn explain(a: &AnchorSummary) -> String {
    let mut o = String::new();
    if let Some(x) = a.postgres_per_anchor {
        let each = a.postgres_per_anchor_each.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>();
        let _ = writeln!(
            o,
            "\n**new keys, PostgreSQL / pgbench anchor: {x:.2} ×** (`{SCENARIO}` req/s ÷ the anchor's keys/s \
             of the same repetition, median; per repetition {}).",
            each.join(" · ")
        );
    }
    let _ = writeln!(
        o,
        "\npgbench anchor: PostgreSQL's ceiling for one key with the store's per-key design, the \
         store's claim (`INSERT … ON CONFLICT DO NOTHING RETURNING token`) and completion (`UPDATE … \
         SET state, outcome`) autocommitted one key at a time, a new key per transaction: `{}` (the \
         script is in `lua/`, the output in `wrk/`), run right after `{SCENARIO}` of each repetition \
         with nothing else of the harness running. Its \"p50\" is pgbench's latency average of the \
         two statements; \"other\" CPU is mostly PostgreSQL.",
        a.command
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    const PGBENCH_OUT: &str = "pgbench (15.20 (Debian 15.20-0+deb12u1))
transaction type: /tmp/anchor.sql
scaling factor: 1
query mode: prepared
number of clients: 16
number of threads: 2
maximum number of tries: 1
duration: 10 s
number of transactions actually processed: 98680
number of failed transactions: 0 (0.000%)
latency average = 1.621 ms
initial connection time = 25.313 ms
tps = 9868.112345 (without initial connection time)
";

    #[test]
    fn parses_pgbench_output() {
        let st = parse(PGBENCH_OUT).unwrap();
        assert_eq!(
            st,
            PgbenchStats { tps: 9868.112345, latency_avg_ms: 1.621, transactions: 98680, failed: 0 }
        );
        // pgbench ≤ 13: two tps lines, the one without the connections wins.
        let old = "number of transactions actually processed: 500/500\nlatency average = 2.000 ms\n\
                   tps = 480.1 (including connections establishing)\n\
                   tps = 500.5 (excluding connections establishing)\n";
        let st = parse(old).unwrap();
        assert_eq!((st.tps, st.transactions), (500.5, 500));
        assert!(parse("pgbench: error: connection to server failed").is_err());
        assert!(parse("latency average = NaN ms\ntps = 0.000000 (without initial connection time)").is_err());
    }

    #[test]
    fn summary_and_ratio_to_oncerpc() {
        let record = |rep: u32, scenario: &str, rps: f64| {
            let server = "oncerpc (postgres)".to_string();
            let mut r =
                RunRecord::start(rep, scenario.into(), String::new(), server, "oncerpc-postgres".into());
            r.wrk.req_per_s = rps;
            r
        };
        let runs = [
            record(1, SCENARIO, 16_000.0),
            record(2, SCENARIO, 15_000.0),
            record(2, "cmd-dup-postgres", 1.0),
        ];
        let anchor = |rep: u32, tps: f64, error: Option<&str>| AnchorRun {
            rep,
            command: "pgbench …".into(),
            stats: error.is_none().then_some(PgbenchStats {
                tps,
                latency_avg_ms: 1.5,
                transactions: 100,
                failed: 0,
            }),
            error: error.map(str::to_owned),
            pgbench_cpu: 0.4,
            other_cpu: 1.2,
            compilers_seen: false,
        };
        let mut notes = Vec::new();
        let a = summarize(
            &runs,
            &[
                anchor(1, 10_000.0, None),
                anchor(2, 10_000.0, None),
                anchor(3, 0.0, Some("pgbench is not installed")),
            ],
            &mut notes,
        )
        .unwrap();
        assert_eq!(notes, ["rep 3 pgbench anchor skipped: pgbench is not installed"]);
        assert_eq!((a.reps, a.keys_per_s, a.transactions), (2, 10_000.0, 200));
        assert_eq!(a.postgres_per_anchor_each, [1.6, 1.5]);
        assert_eq!(a.postgres_per_anchor, Some(1.55));
        assert!(table_row(&a).starts_with(&format!("| {TITLE} | 10,000 keys/s | 1.500 (latency average) |")));
        assert!(explain(&a).contains("new keys, PostgreSQL / pgbench anchor: 1.55 ×"));
        assert!(summarize(&runs, &[anchor(1, 0.0, Some("no table"))], &mut notes).is_none());
    }

    #[test]
    fn script_keys_start_with_the_run_id() {
        let s = script("b123-r2-pgbench-");
        assert!(s.contains("'b123-r2-pgbench-' || gen_random_uuid()"));
        assert!(s.contains("RETURNING key, token\n\\gset\n"));
        assert!(s.contains("AND key = :key AND token = :token"));
    }
}
