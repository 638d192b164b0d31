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
        }
    }

    pub fn conns(&self, args: &RunArgs) -> u32 {
        match self {
            Scenario::Single { conns, .. } | Scenario::Batch { conns } => *conns,
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
    /// `dup_keys` keys.
    pub fn script(&self, server: Server, dup_keys: u64) -> String {
        let comment = format!("{} → {}", self.title(), server.name());
        match self {
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
pub fn scenarios(args: &RunArgs, stores: &[(Store, usize)], flows: bool) -> Vec<Scenario> {
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
}

impl Server {
    pub fn name(self) -> &'static str {
        match self {
            Server::Oncerpc => "oncerpc",
            Server::OncerpcWarn => "oncerpc-warn",
            Server::Jsonrpsee => "jsonrpsee",
            Server::Floor => "floor",
        }
    }

    /// The method doing `[1,2] → 3`: oncerpc's demo `sum`, jsonrpsee's `add` (the floor does not
    /// look, and is sent jsonrpsee's body).
    pub fn method(self) -> &'static str {
        match self {
            Server::Oncerpc | Server::OncerpcWarn => "sum",
            Server::Jsonrpsee | Server::Floor => "add",
        }
    }

    /// An oncerpc process: its counters can be read and cross-checked.
    pub fn is_oncerpc(self) -> bool {
        matches!(self, Server::Oncerpc | Server::OncerpcWarn)
    }

    pub fn path(self) -> &'static str {
        match self {
            Server::Oncerpc | Server::OncerpcWarn => "/rpc",
            Server::Jsonrpsee | Server::Floor => "/",
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
        let list = scenarios(&args, &[(Store::Memory, 3), (Store::Sqlite, 4)], true);
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
                "flow-dup"
            ]
        );
        let quick = Cli::try_parse_from(["oncerpc-bench", "--duration", "3", "--reps", "1"]).unwrap();
        assert!(!quick.run.is_full());
        let only =
            Cli::try_parse_from(["oncerpc-bench", "--groups", "commands", "--stores", "sqlite"]).unwrap();
        let list = scenarios(&only.run, &[(Store::Sqlite, 1)], false);
        assert_eq!(
            list[0],
            Scenario::Single { conns: 64, stalled: 0 },
            "the query baseline is always measured"
        );
        assert!(Cli::try_parse_from(["oncerpc-bench", "redraw", "latest.json"]).is_ok());
    }

    #[test]
    fn flow_config_is_valid() {
        let text = flow_config("memory://?capacity=5000000", "127.0.0.1:9000".parse().unwrap());
        let cfg = oncerpc::Config::from_toml(&text).unwrap();
        assert_eq!(cfg.methods.len(), 1);
        assert!(!cfg.demo_enabled());
    }
}
