//! The report: medians per (scenario, server), ratios, peak RSS, the Markdown table and the
//! JSON document, written with the chart (`chart.rs`) at the end of a run or by `redraw`.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use oncerpc_bench::median;

use crate::anchor;
use crate::cells::{checks, ms, ratio, server_rows, thousands, us};
use crate::checks::CHECK_REQUESTS;
use crate::record::{AnchorRun, Meta, ProcInfo, Ratio, Report, Row, RunRecord, pinning, rps};
use crate::{BoxError, chart, workspace_root};

fn server_rank(s: &str) -> usize {
    match s {
        "oncerpc" => 0,
        "oncerpc-warn" => 1,
        "jsonrpsee" => 2,
        "floor" => 3,
        "oncerpc /rpc" => 4,
        "oncerpc /mcp" => 5,
        "oncerpc /mcp session" => 6,
        "rmcp" => 7,
        _ => 8,
    }
}

pub fn build(
    meta: Meta,
    runs: &[RunRecord],
    anchor_runs: &[AnchorRun],
    processes: Vec<ProcInfo>,
    skipped: Vec<String>,
    notes: Vec<String>,
) -> Report {
    // (scenario, server) in order of first appearance; servers in a fixed order.
    let mut keys: Vec<(usize, String, String)> = Vec::new();
    let mut scenario_order: Vec<String> = Vec::new();
    for r in runs {
        if !scenario_order.contains(&r.scenario) {
            scenario_order.push(r.scenario.clone());
        }
        if !keys.iter().any(|(_, s, v)| *s == r.scenario && *v == r.server) {
            let pos = scenario_order.iter().position(|s| *s == r.scenario).unwrap_or(0);
            keys.push((pos, r.scenario.clone(), r.server.clone()));
        }
    }
    keys.sort_by_key(|(pos, _, server)| (*pos, server_rank(server)));
    let baseline = format!("single-c{}", meta.settings.connections);
    let query = |rep: u32| {
        runs.iter().find(|r| {
            r.rep == rep && r.scenario == baseline && r.server == "oncerpc" && r.wrk_error.is_none()
        })
    };
    let query_rps = |rep: u32| query(rep).map(|r| r.wrk.req_per_s);
    let rows: Vec<Row> = keys
        .iter()
        .map(|(_, scenario, server)| {
            let rs: Vec<&RunRecord> =
                runs.iter().filter(|r| r.scenario == *scenario && r.server == *server).collect();
            let ok: Vec<&&RunRecord> = rs.iter().filter(|r| r.wrk_error.is_none()).collect();
            let col = |f: &dyn Fn(&RunRecord) -> f64| median(&ok.iter().map(|r| f(r)).collect::<Vec<_>>());
            let shared = scenario.starts_with("single-") || scenario.starts_with("batch");
            let own = !shared && !scenario.starts_with("mcp-") && !scenario.starts_with("unpinned-");
            let commands_per_query = own.then(|| {
                median(
                    &ok.iter()
                        .filter_map(|r| query_rps(r.rep).filter(|q| *q > 0.0).map(|q| r.wrk.req_per_s / q))
                        .collect::<Vec<_>>(),
                )
            });
            let cpu_per_query = own.then(|| {
                median(
                    &ok.iter()
                        .filter_map(|r| query(r.rep).map(|q| cpu_us(r) / cpu_us(q)))
                        .filter(|x| x.is_finite())
                        .collect::<Vec<_>>(),
                )
            });
            let store_cpu: Vec<f64> = ok.iter().filter_map(|r| r.store_cpu_us).collect();
            Row {
                scenario: scenario.clone(),
                title: rs.first().map(|r| r.title.clone()).unwrap_or_default(),
                shared,
                server: server.clone(),
                reps: ok.len(),
                req_per_s: col(&|r| r.wrk.req_per_s),
                p50_ms: col(&|r| r.wrk.p50_ms),
                p99_ms: col(&|r| r.wrk.p99_ms),
                req_per_s_each: rs.iter().map(|r| r.wrk.req_per_s).collect(),
                non_2xx: rs.iter().map(|r| r.wrk.non_2xx).sum(),
                socket_errors: rs.iter().map(|r| r.wrk.socket_errors()).sum(),
                check_requests: rs.iter().map(|r| r.check_requests).sum(),
                wrong_answers: rs.iter().map(|r| r.check_failures.len()).sum(),
                verified_runs: rs.iter().filter(|r| r.verified == Some(true)).count(),
                verifiable_runs: rs.iter().filter(|r| r.verified.is_some()).count(),
                server_cpu: col(&|r| r.server_cpu + r.upstream_cpu.unwrap_or(0.0)),
                wrk_cpu: col(&|r| r.wrk_cpu),
                other_cpu: col(&|r| r.other_cpu),
                commands_per_query: commands_per_query.filter(|x| !x.is_nan()),
                compilers_seen: rs.iter().any(|r| r.compilers_seen),
                server_cpu_us: col(&cpu_us),
                cpu_per_query: cpu_per_query.filter(|x| !x.is_nan()),
                store_cpu_us: (!store_cpu.is_empty()).then(|| median(&store_cpu)),
            }
        })
        .collect();
    let ratios = rows
        .iter()
        .filter(|r| (r.shared || r.is_unpinned()) && r.server == "oncerpc")
        .map(|r| Ratio {
            scenario: r.scenario.clone(),
            title: r.title.clone(),
            oncerpc_per_jsonrpsee: rps(&rows, &r.scenario, "jsonrpsee").map(|j| r.req_per_s / j),
            oncerpc_per_floor: rps(&rows, &r.scenario, "floor").map(|f| r.req_per_s / f),
            cpu_oncerpc_per_jsonrpsee: rows
                .iter()
                .find(|j| j.scenario == r.scenario && j.server == "jsonrpsee")
                .map(|j| r.server_cpu_us / j.server_cpu_us)
                .filter(|x| x.is_finite()),
        })
        .filter(|r| r.oncerpc_per_jsonrpsee.is_some() || r.oncerpc_per_floor.is_some())
        .collect();
    let mut problems = Vec::new();
    for r in runs {
        let at = format!("rep {} {} → {}", r.rep, r.scenario, r.server);
        if let Some(e) = &r.wrk_error {
            problems.push(format!("{at}: wrk: {e}"));
        }
        if r.wrk.non_2xx > 0 {
            problems.push(format!("{at}: {} answers with HTTP status ≥ 400 (wrk)", r.wrk.non_2xx));
        }
        if r.wrk.socket_errors() > 0 {
            problems.push(format!(
                "{at}: socket errors (wrk): connect {}, read {}, write {}, timeout {}",
                r.wrk.connect_errors, r.wrk.read_errors, r.wrk.write_errors, r.wrk.timeouts
            ));
        }
        for f in &r.check_failures {
            let mut resp = f.response.clone();
            if resp.len() > 600 {
                let mut cut = 600;
                while !resp.is_char_boundary(cut) {
                    cut -= 1;
                }
                resp.truncate(cut);
                resp.push('…');
            }
            problems.push(format!(
                "{at}: wrong answer ({}): request `{}` → HTTP {} X-Idempotency-Status {:?} `{resp}`",
                f.why,
                f.request,
                f.status.map_or("-".into(), |s| s.to_string()),
                f.idempotency_status
            ));
        }
        if r.verified == Some(false) {
            problems.push(format!("{at}: counters do not match: {}", r.verification));
        }
    }
    let clean = problems.is_empty() && runs.iter().all(RunRecord::clean);
    let mut notes = notes;
    let unrecorded: u64 = runs.iter().map(|r| r.unrecorded_executions).sum();
    if unrecorded > 0 {
        let runs_with = runs.iter().filter(|r| r.unrecorded_executions > 0).count();
        notes.push(format!(
            "{unrecorded} executions in {runs_with} new-key runs were requests still in flight when wrk stopped \
             and closed its connections: they ran once and their outcome was stored (the demo counter / \
             upstream moved); oncerpc counts and logs such a request with outcome client_closed, not in \
             oncerpc_idempotency_total"
        ));
    }
    let anchor = anchor::summarize(runs, anchor_runs, &mut notes);
    let (runs, anchor_runs) = (runs.to_vec(), anchor_runs.to_vec());
    Report { meta, rows, ratios, processes, skipped, notes, problems, clean, runs, anchor_runs, anchor }
}

/// A run's server CPU time per request, µs (the flow's upstream included); NaN without
/// requests.
fn cpu_us(r: &RunRecord) -> f64 {
    if r.wrk.requests == 0 {
        return f64::NAN;
    }
    let wall = if r.wall_s > 0.0 { r.wall_s } else { r.wrk.duration_s };
    (r.server_cpu + r.upstream_cpu.unwrap_or(0.0)) * wall * 1e6 / r.wrk.requests as f64
}

pub fn markdown(rep: &Report) -> String {
    let m = &rep.meta;
    let s = &m.settings;
    let mut o = String::new();
    let w = &mut o;
    let _ = writeln!(w, "# oncerpc load benchmark: latest run\n");
    let _ = writeln!(
        w,
        "- **When / how**: {}; `{}`; wall time {:.0} min {:.0} s.",
        m.generated,
        m.command,
        (m.wall_time_s / 60.0).floor(),
        m.wall_time_s % 60.0
    );
    let placement = if m.pinned {
        format!(
            "Every server (and the flow's upstream) is pinned to CPU {} and wrk to CPU {}: a row's req/s \
             is what one core of server does, and its server CPU per request is the server's own; the \
             shared view repeats the shared scenarios with nothing pinned.",
            s.server_cpu, s.wrk_cpu
        )
    } else {
        "Nothing is pinned: every server, the upstream and wrk share these CPUs.".to_owned()
    };
    let _ = writeln!(
        w,
        "- **Machine**: {}, {} CPUs, {:.1} GiB RAM, Linux {}. {placement}",
        m.machine.cpu_model, m.machine.cpus, m.machine.memory_gib, m.machine.kernel
    );
    let _ = writeln!(
        w,
        "- **Software**: oncerpc {} (release build), jsonrpsee {}, hyper {} (floor), rmcp {}, {}, {}.",
        m.oncerpc_git,
        m.jsonrpsee,
        m.hyper,
        if m.rmcp.is_empty() { "–" } else { &m.rmcp },
        m.rustc,
        m.wrk
    );
    let _ = writeln!(
        w,
        "- **Method**: every (server, scenario) ran {} × {} s (after {} s of unmeasured warm-up each); \
         the servers of a scenario take turns within each repetition (order rotated every repetition); \
         the tables show the **median** of the repetitions (req/s, p50 and p99 each on its own). \
         wrk `-t{} -c{}` (`-t1 -c1` for one connection); every server is its own process on tokio's \
         default multi-thread runtime.",
        s.reps, s.duration, s.warmup, s.threads, s.connections
    );
    let _ = writeln!(
        w,
        "- **oncerpc** runs with the defaults a user gets: `oncerpc serve --listen ADDR` in a fresh directory \
         (`info` access log on stderr, the SQLite store `oncerpc.db`), only the store changed for the \
         command rows; `oncerpc-warn` is the same with `--log-level warn`, an extra row. Memory stores are \
         `{}` (the default `memory://` holds 100,000 live records and refuses new keys beyond that, by \
         design). The edge row holds {} slow-loris connections open (two thirds stalled in their headers, \
         one third in their bodies; each one the server's timeouts close is opened again) during the \
         warm-up and the run.",
        s.memory_url, s.stalled
    );
    let _ = writeln!(
        w,
        "- **Checks**: before each measured run {} requests are sent and judged (status, body, \
         `X-Idempotency-Status`, stored answers byte for byte); after it oncerpc's `/metrics` and the \
         side effect (demo counter, upstream calls) must have moved by what wrk counted. Errors = \
         wrk's non-2xx + socket errors + wrong answers. CPU: cores used during the measured run (CPU \
         time ÷ wall time; median) by the server, by wrk, and by everything else. †: a compiler was \
         running during a run of the row.\n",
        CHECK_REQUESTS
    );

    let shared: Vec<&Row> = rep.rows.iter().filter(|r| r.shared).collect();
    if !shared.is_empty() {
        let _ = writeln!(w, "## Same requests, three servers ({})\n", pinning(m));
        shared_table(w, rep, &shared);
        let baseline = format!("single-c{}", s.connections);
        let edge = shared
            .iter()
            .find(|r| r.server == "oncerpc" && r.scenario.starts_with(&format!("{baseline}-stalled")));
        if let (Some(edge), Some(base)) =
            (edge, shared.iter().find(|r| r.server == "oncerpc" && r.scenario == baseline))
        {
            let rss: Vec<f64> = rep
                .runs
                .iter()
                .filter(|r| r.scenario == edge.scenario)
                .filter_map(|r| r.stalled_rss_mib)
                .collect();
            let rss = if rss.is_empty() {
                String::new()
            } else {
                format!(
                    " The server's resident set with them open: {} MiB (per repetition {}).",
                    us(median(&rss)),
                    rss.iter().map(|x| us(*x)).collect::<Vec<_>>().join(" · ")
                )
            };
            let _ = writeln!(
                w,
                "\n**Edge**: with {} stalled connections open, well-behaved clients got {} req/s, {} × the run \
                 without them ({} req/s), p99 {} ms (without: {} ms).{rss}",
                s.stalled,
                thousands(edge.req_per_s),
                ratio(Some(edge.req_per_s / base.req_per_s)),
                thousands(base.req_per_s),
                ms(edge.p99_ms),
                ms(base.p99_ms)
            );
        }
        let _ = writeln!(w);
    }
    let unpinned: Vec<&Row> = rep.rows.iter().filter(|r| r.is_unpinned()).collect();
    if !unpinned.is_empty() {
        let _ = writeln!(w, "## The shared view: the same requests with nothing pinned\n");
        shared_table(w, rep, &unpinned);
        let _ = writeln!(w);
    }

    let own: Vec<&Row> = rep.rows.iter().filter(|r| !r.shared && !r.is_mcp() && !r.is_unpinned()).collect();
    if !own.is_empty() {
        let _ = writeln!(
            w,
            "## Idempotent commands and the sync flow (oncerpc only, {} connections)\n",
            s.connections
        );
        let _ = writeln!(
            w,
            "| scenario | req/s | server CPU µs per request | p50 ms | p99 ms | errors | commands / queries, req/s | commands / queries, server CPU per request | store server CPU µs per request | req/s per repetition | CPU cores server / wrk / other | checks |"
        );
        let _ = writeln!(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|---|");
        for r in &own {
            let _ = writeln!(
                w,
                "| {}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} / {:.2} / {:.2} | {} |",
                r.title,
                if r.compilers_seen { " †" } else { "" },
                thousands(r.req_per_s),
                us(r.server_cpu_us),
                ms(r.p50_ms),
                ms(r.p99_ms),
                r.errors(),
                ratio(r.commands_per_query),
                ratio(r.cpu_per_query),
                r.store_cpu_us.map_or("–".into(), us),
                r.req_per_s_each.iter().map(|x| thousands(*x)).collect::<Vec<_>>().join(" · "),
                r.server_cpu,
                r.wrk_cpu,
                r.other_cpu,
                checks(r)
            );
            if let Some(a) = rep.anchor.as_ref().filter(|_| r.scenario == anchor::SCENARIO) {
                let _ = writeln!(w, "{}", anchor::table_row(a));
            }
        }
        let _ = writeln!(
            w,
            "\ncommands / queries: the row's req/s (or server CPU per request) ÷ oncerpc's single-call \
             query's (`sum` [1,2], {} connections) in the same repetition; median over the repetitions. \
             Store server CPU: Redis's own (`INFO cpu`, user + system) over the run ÷ wrk's requests. \
             Duplicates \
             cycle through {} keys created before the runs. The sync flow's server CPU \
             includes its upstream's; \"other\" is the rest of the machine during the run (for Redis \
             and PostgreSQL, mostly their servers).",
            s.connections, s.dup_keys
        );
        if let Some(a) = &rep.anchor {
            let _ = write!(w, "{}", anchor::explain(a));
        }
        let _ = writeln!(w);
    }

    crate::mcp_report::section(w, rep);

    let _ = writeln!(w, "## Peak memory (VmHWM of each process over the whole run)\n");
    let _ = writeln!(w, "| process | serves | peak RSS MiB |");
    let _ = writeln!(w, "|---|---|--:|");
    for p in &rep.processes {
        let _ = writeln!(
            w,
            "| {} | {} | {} |",
            p.name,
            p.serves,
            p.peak_rss_mib.map_or("–".into(), |m| format!("{m:.1}"))
        );
    }
    let _ = writeln!(w);

    if !rep.skipped.is_empty() {
        let _ = writeln!(w, "## Skipped\n");
        for s in &rep.skipped {
            let _ = writeln!(w, "- {s}");
        }
        let _ = writeln!(w);
    }
    let _ = writeln!(w, "## Errors\n");
    if rep.problems.is_empty() {
        let _ = writeln!(w, "None: every answer checked was right and every counter matched.");
    } else {
        for p in &rep.problems {
            let _ = writeln!(w, "- {p}");
        }
    }
    if !rep.notes.is_empty() {
        let _ = writeln!(w, "\n## Notes\n");
        for n in &rep.notes {
            let _ = writeln!(w, "- {n}");
        }
    }
    o
}

/// The table of the shared scenarios (`rows`: the main table's or the shared view's), its
/// ratios and the access log's cost.
fn shared_table(w: &mut String, rep: &Report, rows: &[&Row]) {
    server_rows(w, rows, "request");
    let ratios: Vec<&Ratio> =
        rep.ratios.iter().filter(|x| rows.iter().any(|r| r.scenario == x.scenario)).collect();
    if ratios.is_empty() {
        return;
    }
    let _ = writeln!(
        w,
        "\n| scenario | oncerpc / jsonrpsee, req/s | oncerpc / floor, req/s | server CPU per request, oncerpc / jsonrpsee |"
    );
    let _ = writeln!(w, "|---|--:|--:|--:|");
    for r in &ratios {
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} |",
            r.title,
            ratio(r.oncerpc_per_jsonrpsee),
            ratio(r.oncerpc_per_floor),
            ratio(r.cpu_oncerpc_per_jsonrpsee)
        );
    }
    let warn: Vec<String> = rows
        .iter()
        .filter(|r| r.server == "oncerpc")
        .filter_map(|r| {
            rps(&rep.rows, &r.scenario, "oncerpc-warn")
                .map(|warn| format!("| {} | {} |", r.title, ratio(Some(r.req_per_s / warn))))
        })
        .collect();
    if !warn.is_empty() {
        let _ = writeln!(w, "\n| scenario | defaults / `--log-level warn` |\n|---|--:|\n{}", warn.join("\n"));
    }
    let _ = writeln!(
        w,
        "\nRatios of the medians. Methods: oncerpc's demo `sum` with params `[1,2]`, \
         jsonrpsee's `add` `[1,2]` (the same work); the floor is sent jsonrpsee's bodies and \
         answers a fixed `{{\"jsonrpc\":\"2.0\",\"result\":3,\"id\":1}}` (or the fixed 50-answer \
         array) after parsing the body. For the batch, req/s counts HTTP requests of 50 calls \
         each (calls/s = 50 × req/s). Server CPU per request: the server's CPU time during the \
         measured run ÷ the requests wrk counted."
    );
}

/// latest.md, latest.json and the charts of a report: `latest.png` in `out_dir`, and the
/// `--chart` path or, for a full run, docs/benchmarks.png.
pub fn write(rep: &Report, out_dir: &Path, root: &Path) -> Result<(), BoxError> {
    let args = &rep.meta.settings;
    let md = markdown(rep);
    std::fs::write(out_dir.join("latest.md"), &md)?;
    std::fs::write(out_dir.join("latest.json"), serde_json::to_string_pretty(rep)?)?;
    let mut charts = vec![out_dir.join("latest.png")];
    match &args.chart {
        Some(p) => charts.push(p.clone()),
        None if args.is_full() => charts.push(root.join("docs").join("benchmarks.png")),
        None => {}
    }
    let font = chart::load_font(args.font.as_deref());
    for c in &charts {
        if let Err(e) = chart::chart(rep, c, font) {
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
pub fn redraw(json: &Path) -> Result<bool, BoxError> {
    let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
    let rep: Report = serde_json::from_str(&text)?;
    let out_dir = json.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    write(&rep, &out_dir, &workspace_root())?;
    Ok(rep.clean)
}
