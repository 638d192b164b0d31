//! The scenarios: what each one sends, to which server, with which wrk script, in which order.
//! How an answer is judged and what the counters must show afterwards is in `checks.rs`.

use std::net::SocketAddr;

use oncerpc_bench::{bodies, lua};
use serde::{Deserialize, Serialize};

use crate::cli::{Group, RunArgs, Store};

/// The flow of the sync-flow scenario, and its door.
pub const FLOW: &str = "orders.create";
pub const FLOW_PATH: &str = "/v2/flows/orders.create?sync=true";
pub const KEY_HEADER: &str = "X-Idempotency-Key";

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
    /// The MCP group: `add` {a:1,b:2} on `/rpc`, `/mcp` and rmcp.
    McpAdd {
        conns: u32,
    },
    /// The MCP group: `counter.increment` with a new key per request on `/rpc` and `/mcp`
    /// (memory store).
    McpCommand {
        conns: u32,
    },
    /// The shared view: `Single` (or `Batch`) at `conns` again, on the unpinned servers.
    Unpinned {
        batch: bool,
        conns: u32,
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
            Scenario::McpAdd { conns } => format!("mcp-add-c{conns}"),
            Scenario::McpCommand { conns } => format!("mcp-cmd-new-c{conns}"),
            Scenario::Unpinned { .. } => format!("unpinned-{}", self.base().id()),
        }
    }

    /// What the scenario sends and how its answers are judged: the pinned scenario an
    /// `Unpinned` one repeats, any other itself.
    pub fn base(&self) -> Scenario {
        match *self {
            Scenario::Unpinned { batch: false, conns } => Scenario::Single { conns, stalled: 0 },
            Scenario::Unpinned { batch: true, conns } => Scenario::Batch { conns },
            other => other,
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
            Scenario::McpAdd { conns } => {
                format!("`add` {{a:1,b:2}}, {conns} {}", plural(*conns))
            }
            Scenario::McpCommand { conns } => {
                format!("`counter.increment`, new key per request, memory, {conns} {}", plural(*conns))
            }
            Scenario::Unpinned { .. } => format!("{}, nothing pinned", self.base().title()),
        }
    }

    pub fn conns(&self, args: &RunArgs) -> u32 {
        match self {
            Scenario::Single { conns, .. }
            | Scenario::Batch { conns }
            | Scenario::McpAdd { conns }
            | Scenario::McpCommand { conns }
            | Scenario::Unpinned { conns, .. } => *conns,
            _ => args.connections,
        }
    }

    /// The path wrk sends to on `server`.
    pub fn path(&self, server: Server) -> &'static str {
        match self {
            Scenario::Flow { .. } => FLOW_PATH,
            _ => server.path(),
        }
    }

    /// The wrk Lua script of (scenario, server); the duplicate-key scenarios cycle through
    /// `dup_keys` keys; `session`: the MCP session of the session-era row.
    pub fn script(&self, server: Server, dup_keys: u64, session: Option<&str>) -> String {
        let comment = format!("{} → {}", self.title(), server.name());
        match self {
            Scenario::Unpinned { .. } => self.base().script(server, dup_keys, session),
            Scenario::McpAdd { .. } => match server.mcp_era() {
                None => lua::fixed(&comment, bodies::ADD_RPC),
                Some(stateless) => lua::with_headers(
                    &lua::fixed(&comment, &bodies::mcp_call("add", bodies::ADD_ARGS, stateless)),
                    &bodies::mcp_headers("add", session.filter(|_| !stateless)),
                ),
            },
            Scenario::McpCommand { .. } => match server.mcp_era() {
                None => {
                    let (head, tail) = bodies::increment_halves();
                    lua::new_key_body(&comment, &head, &tail)
                }
                Some(stateless) => {
                    let (head, tail) = bodies::mcp_increment_halves(stateless);
                    lua::with_headers(
                        &lua::new_key_body(&comment, &head, &tail),
                        &bodies::mcp_headers("counter_increment", session.filter(|_| !stateless)),
                    )
                }
            },
            Scenario::Single { .. } => lua::fixed(&comment, &bodies::single(server.method())),
            Scenario::Batch { .. } => lua::fixed(&comment, &bodies::batch(server.method())),
            Scenario::Command { dup: false, .. } => {
                let (head, tail) = bodies::increment_halves();
                lua::new_key_body(&comment, &head, &tail)
            }
            Scenario::Command { dup: true, .. } => {
                let (head, tail) = bodies::increment_halves();
                lua::cycled_key_body(&comment, &head, &tail, dup_keys)
            }
            Scenario::Flow { dup: false } => lua::new_key_header(&comment, KEY_HEADER, bodies::FLOW_BODY),
            Scenario::Flow { dup: true } => {
                lua::cycled_key_header(&comment, KEY_HEADER, bodies::FLOW_BODY, dup_keys)
            }
        }
    }
}

/// The scenarios of one repetition, in order.
/// `pinned`: whether the run pins (the `unpinned` group runs only then).
pub fn scenarios(args: &RunArgs, stores: &[(Store, usize)], flows: bool, pinned: bool) -> Vec<Scenario> {
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
    if args.has(Group::Mcp) {
        out.push(Scenario::McpAdd { conns: args.connections });
        out.push(Scenario::McpCommand { conns: args.connections });
    }
    if args.has(Group::Unpinned) && pinned {
        out.push(Scenario::Unpinned { batch: false, conns: args.connections });
        out.push(Scenario::Unpinned { batch: true, conns: args.connections });
    }
    out
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
    /// oncerpc's MCP door, revision `2026-07-28` (stateless).
    OncerpcMcp,
    /// oncerpc's MCP door, session era (`initialize` first, `Mcp-Session-Id` on every call).
    OncerpcMcpSession,
    /// rmcp, the official Rust MCP SDK (`bench-rmcp`), stateless.
    Rmcp,
}

impl Server {
    pub fn name(self) -> &'static str {
        match self {
            Server::Oncerpc => "oncerpc",
            Server::OncerpcWarn => "oncerpc-warn",
            Server::Jsonrpsee => "jsonrpsee",
            Server::Floor => "floor",
            Server::OncerpcMcp => "oncerpc-mcp",
            Server::OncerpcMcpSession => "oncerpc-mcp-session",
            Server::Rmcp => "rmcp",
        }
    }

    /// MCP servers: `Some(stateless)`; `None` for JSON-RPC over HTTP.
    pub fn mcp_era(self) -> Option<bool> {
        match self {
            Server::OncerpcMcp | Server::Rmcp => Some(true),
            Server::OncerpcMcpSession => Some(false),
            _ => None,
        }
    }

    /// The method doing `[1,2] → 3`: oncerpc's demo `sum`, jsonrpsee's `add` (the floor does not
    /// look, and is sent jsonrpsee's body).
    pub fn method(self) -> &'static str {
        match self {
            Server::Oncerpc | Server::OncerpcWarn => "sum",
            Server::Jsonrpsee
            | Server::Floor
            | Server::OncerpcMcp
            | Server::OncerpcMcpSession
            | Server::Rmcp => "add",
        }
    }

    /// An oncerpc process: its counters can be read and cross-checked.
    pub fn is_oncerpc(self) -> bool {
        matches!(self, Server::Oncerpc | Server::OncerpcWarn | Server::OncerpcMcp | Server::OncerpcMcpSession)
    }

    pub fn path(self) -> &'static str {
        match self {
            Server::Oncerpc | Server::OncerpcWarn => "/rpc",
            Server::Jsonrpsee | Server::Floor => "/",
            Server::OncerpcMcp | Server::OncerpcMcpSession | Server::Rmcp => "/mcp",
        }
    }
}

/// The oncerpc config of the sync-flow process: one command flow, one step to the upstream.
pub fn flow_config(memory_url: &str, upstream: SocketAddr) -> String {
    format!(
        "# generated by oncerpc-bench: the sync-flow scenario\n\
         demo = false\n\n[store]\nurl = {memory_url:?}\n\n\
         [[methods]]\nname = \"{FLOW}\"\nkind = \"command\"\n\n  \
         [[methods.steps]]\n  name = \"reserve\"\n  url = \"http://{upstream}/step\"\n"
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    #[test]
    fn scenario_order_and_ids() {
        let cli = Cli::try_parse_from(["oncerpc-bench"]).unwrap();
        let args = cli.run;
        assert!(args.is_full());
        let list = scenarios(&args, &[(Store::Memory, 3), (Store::Sqlite, 4)], true, true);
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
                "flow-dup",
                "mcp-add-c64",
                "mcp-cmd-new-c64",
                "unpinned-single-c64",
                "unpinned-batch50-c64"
            ]
        );
        let shared_cpus = scenarios(&args, &[], false, false);
        assert!(shared_cpus.iter().all(|s| !matches!(s, Scenario::Unpinned { .. })), "{shared_cpus:?}");
        let unpinned = Scenario::Unpinned { batch: true, conns: 64 };
        assert_eq!(unpinned.base(), Scenario::Batch { conns: 64 });
        assert_eq!(
            unpinned.script(Server::Jsonrpsee, 1, None),
            unpinned.base().script(Server::Jsonrpsee, 1, None)
        );
        assert!(unpinned.title().ends_with("nothing pinned"), "{}", unpinned.title());
        let quick = Cli::try_parse_from(["oncerpc-bench", "--duration", "3", "--reps", "1"]).unwrap();
        assert!(!quick.run.is_full());
        let only =
            Cli::try_parse_from(["oncerpc-bench", "--groups", "commands", "--stores", "sqlite"]).unwrap();
        let list = scenarios(&only.run, &[(Store::Sqlite, 1)], false, true);
        assert_eq!(
            list[0],
            Scenario::Single { conns: 64, stalled: 0 },
            "the query baseline is always measured"
        );
        assert!(Cli::try_parse_from(["oncerpc-bench", "redraw", "latest.json"]).is_ok());
    }

    #[test]
    fn mcp_group_alone() {
        let cli = Cli::try_parse_from(["oncerpc-bench", "--groups", "mcp"]).unwrap();
        let list = scenarios(&cli.run, &[], false, true);
        assert_eq!(list, [Scenario::McpAdd { conns: 64 }, Scenario::McpCommand { conns: 64 }]);
        assert_eq!((cli.run.server_cpu, cli.run.wrk_cpu), (0, 1));
        assert!(cli.run.pinned(2) && !cli.run.pinned(1));
        let off = Cli::try_parse_from(["oncerpc-bench", "--pin", "off"]).unwrap();
        assert!(!off.run.pinned(8));
        let old =
            Cli::try_parse_from(["oncerpc-bench", "--mcp-server-cpu", "1", "--mcp-wrk-cpu", "0"]).unwrap();
        assert_eq!((old.run.server_cpu, old.run.wrk_cpu), (1, 0));
        let add = Scenario::McpAdd { conns: 64 };
        assert_eq!(add.path(Server::Oncerpc), "/rpc");
        assert_eq!(add.path(Server::OncerpcMcp), "/mcp");
        assert_eq!(add.path(Server::Rmcp), "/mcp");
        assert_eq!(add.title(), "`add` {a:1,b:2}, 64 connections");
    }

    #[test]
    fn mcp_scripts() {
        let add = Scenario::McpAdd { conns: 64 };
        let rpc = add.script(Server::Oncerpc, 1000, None);
        assert!(rpc.contains(bodies::ADD_RPC) && !rpc.contains("Mcp-"), "{rpc}");
        let mcp = add.script(Server::OncerpcMcp, 1000, None);
        for want in [
            r#"wrk.headers["Mcp-Method"] = "tools/call""#,
            r#"wrk.headers["Mcp-Name"] = "add""#,
            r#"wrk.headers["MCP-Protocol-Version"] = "2026-07-28""#,
        ] {
            assert!(mcp.contains(want), "{want} in {mcp}");
        }
        assert!(mcp.contains("io.modelcontextprotocol/protocolVersion"), "{mcp}");
        assert_eq!(
            add.script(Server::Rmcp, 1000, None),
            mcp.replace("oncerpc-mcp", "rmcp"),
            "the same request"
        );
        let session = add.script(Server::OncerpcMcpSession, 1000, Some("sid-1"));
        assert!(
            session.contains(r#"wrk.headers["Mcp-Session-Id"] = "sid-1""#) && !session.contains("_meta"),
            "{session}"
        );
        let cmd = Scenario::McpCommand { conns: 64 };
        let s = cmd.script(Server::OncerpcMcp, 1000, None);
        assert!(
            s.contains("function request()")
                && s.contains(r#"wrk.headers["Mcp-Name"] = "counter_increment""#),
            "{s}"
        );
        assert!(s.contains("idempotency_key"), "{s}");
        let s = cmd.script(Server::Oncerpc, 1000, None);
        assert!(s.contains(r#""method":"counter.increment""#) && !s.contains("Mcp-"), "{s}");
    }

    #[test]
    fn flow_config_is_valid() {
        let text = flow_config("memory://?capacity=5000000", "127.0.0.1:9000".parse().unwrap());
        let cfg = oncerpc::Config::from_toml(&text).unwrap();
        assert_eq!(cfg.methods.len(), 1);
        assert!(!cfg.demo_enabled());
    }
}
