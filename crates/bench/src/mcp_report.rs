//! The MCP group's part of the report: its table and the door's ratios to `/rpc` and rmcp.

use std::fmt::Write;

use crate::cells::{ratio, server_rows};
use crate::record::{Report, Row, pinning};

/// (MCP door's server CPU per call ÷ `/rpc`'s, MCP door's req/s ÷ rmcp's) of an MCP row, per
/// scenario and door.
pub struct McpRatio {
    pub title: String,
    pub door: String,
    pub cpu_per_rpc: Option<f64>,
    pub rps_per_rpc: Option<f64>,
    pub rps_per_rmcp: Option<f64>,
    pub cpu_rmcp_per_door: Option<f64>,
}

pub fn mcp_ratios(rows: &[Row]) -> Vec<McpRatio> {
    let find = |scenario: &str, server: &str| {
        rows.iter().find(|r| r.scenario == scenario && r.server == server && r.req_per_s > 0.0)
    };
    let div = |a: f64, b: f64| (a.is_finite() && b.is_finite() && b > 0.0).then(|| a / b);
    rows.iter()
        .filter(|r| r.is_mcp() && r.server.starts_with("oncerpc /mcp"))
        .map(|r| {
            let rpc = find(&r.scenario, "oncerpc /rpc");
            let rmcp = find(&r.scenario, "rmcp");
            McpRatio {
                title: r.title.clone(),
                door: r.server.clone(),
                cpu_per_rpc: rpc.and_then(|b| div(r.server_cpu_us, b.server_cpu_us)),
                rps_per_rpc: rpc.and_then(|b| div(r.req_per_s, b.req_per_s)),
                rps_per_rmcp: rmcp.and_then(|b| div(r.req_per_s, b.req_per_s)),
                cpu_rmcp_per_door: rmcp.and_then(|b| div(b.server_cpu_us, r.server_cpu_us)),
            }
        })
        .collect()
}

pub fn section(w: &mut String, rep: &Report) {
    let s = &rep.meta.settings;
    let rows: Vec<&Row> = rep.rows.iter().filter(|r| r.is_mcp()).collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(w, "## The MCP door ({}, {} connections)\n", pinning(&rep.meta), s.connections);
    server_rows(w, &rows, "call");
    let ratios = mcp_ratios(&rep.rows);
    if !ratios.is_empty() {
        let _ = writeln!(
            w,
            "\n| scenario | door | server CPU per call, MCP / `/rpc` | req/s, MCP / `/rpc` | req/s, MCP / rmcp | server CPU per call, rmcp / MCP |"
        );
        let _ = writeln!(w, "|---|---|--:|--:|--:|--:|");
        for r in &ratios {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} |",
                r.title,
                r.door,
                ratio(r.cpu_per_rpc),
                ratio(r.rps_per_rpc),
                ratio(r.rps_per_rmcp),
                ratio(r.cpu_rmcp_per_door)
            );
        }
    }
    let _ = writeln!(
        w,
        "\nOne oncerpc process (defaults, `--store {}`) serves `/rpc` and `/mcp`; rmcp is `bench-rmcp` \
         (one `add` tool, stateless, JSON answers). `/mcp` rows are `tools/call` of the same method as the \
         `/rpc` row above them; stateless rows send `2026-07-28`'s headers (`MCP-Protocol-Version`, \
         `Mcp-Method`, `Mcp-Name`) and request `_meta`, the session row an `Mcp-Session-Id` from one \
         `initialize` before the runs. Server CPU per call: the server's CPU time during the measured \
         run ÷ the requests wrk counted (median of the repetitions); with the server alone on its core, \
         req/s ≈ 10⁶ ÷ that when the server is the bottleneck.\n",
        s.memory_url
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::tests::row;

    #[test]
    fn mcp_ratios_per_door() {
        let rows = vec![
            row("mcp-add-c64", "oncerpc /rpc", 100_000.0, 10.0),
            row("mcp-add-c64", "oncerpc /mcp", 80_000.0, 12.5),
            row("mcp-add-c64", "rmcp", 40_000.0, 25.0),
            row("mcp-cmd-new-c64", "oncerpc /rpc", 60_000.0, 16.0),
            row("mcp-cmd-new-c64", "oncerpc /mcp", 50_000.0, 20.0),
            row("single-c64", "oncerpc", 1.0, 1.0),
        ];
        let r = mcp_ratios(&rows);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].cpu_per_rpc, Some(1.25));
        assert_eq!(r[0].rps_per_rmcp, Some(2.0));
        assert_eq!(r[0].cpu_rmcp_per_door, Some(2.0));
        assert_eq!(r[1].cpu_per_rpc, Some(1.25));
        assert_eq!(r[1].rps_per_rmcp, None, "no rmcp row for the command");
    }
}
