//! Health shard by shard: a Redis Cluster whose one shard has lost its primary, or has fewer
//! replicas than a write must reach (`store.redis_wait_replicas`), still serves every key of
//! the other shards, so it is [`Health::Degraded`] (and the gateway stays routable), not down.

use std::time::Duration;

use oncerpc_core::store::{Health, Part, Problem};
use redis::Value;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use crate::RedisStore;
use crate::conn::{Conn, text};

/// How long one node may take to answer the health check.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// A replica counts when its last acknowledgement is at most this many seconds old (replicas
/// acknowledge every second).
const REPLICA_LAG_SECS: u64 = 2;

/// One primary of the cluster: where it is, which slots it serves, whether the cluster
/// thinks it failed.
struct Primary {
    addr: String,
    slots: String,
    failed: bool,
}

impl RedisStore {
    /// Every shard's state ([`oncerpc_core::Store::health`]).
    pub(crate) async fn shard_health(&self) -> Health {
        let mut conn = self.conn.clone();
        let primaries = match &mut conn {
            Conn::Standalone(_) => {
                vec![Primary { addr: "the server".into(), slots: "all keys".into(), failed: false }]
            }
            Conn::Cluster(c) => {
                let nodes = c
                    .route_command(
                        redis::cmd("CLUSTER").arg("NODES").clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
                    )
                    .await;
                match nodes.as_ref().ok().and_then(text) {
                    Some(nodes) => primaries(&nodes),
                    None => return Health::Down(format!("redis cluster: CLUSTER NODES: {nodes:?}")),
                }
            }
        };
        let mut parts = Vec::new();
        for p in &primaries {
            let problem = if p.failed {
                Some((Problem::Unreachable, format!("{}: marked failed by the cluster", p.addr)))
            } else {
                self.node_problem(&mut conn, &p.addr).await
            };
            if let Some((problem, detail)) = problem {
                parts.push(Part { keys: p.slots.clone(), problem, detail });
            }
        }
        Health::of_parts(parts, primaries.len())
    }

    /// What keeps one primary from serving, if anything: no answer, or too few replicas.
    async fn node_problem(&self, conn: &mut Conn, addr: &str) -> Option<(Problem, String)> {
        let mut info = redis::cmd("INFO");
        info.arg("replication");
        let asked = match conn {
            Conn::Standalone(c) => tokio::time::timeout(NODE_TIMEOUT, info.query_async::<Value>(c)).await,
            Conn::Cluster(c) => {
                let (host, port) = addr.rsplit_once(':')?;
                let route =
                    SingleNodeRoutingInfo::ByAddress { host: host.to_owned(), port: port.parse().ok()? };
                tokio::time::timeout(NODE_TIMEOUT, c.route_command(info, RoutingInfo::SingleNode(route)))
                    .await
            }
        };
        let info = match asked {
            Err(_) => {
                return Some((Problem::Unreachable, format!("{addr}: no answer within {NODE_TIMEOUT:?}")));
            }
            Ok(Err(e)) => return Some((Problem::Unreachable, format!("{addr}: {e}"))),
            Ok(Ok(v)) => text(&v).unwrap_or_default(),
        };
        let live = live_replicas(&info);
        (live < self.wait_replicas as usize).then(|| {
            (
                Problem::Replicas,
                format!("{addr}: {live} live replicas, store.redis_wait_replicas = {}", self.wait_replicas),
            )
        })
    }
}

/// The primaries that serve slots, from `CLUSTER NODES`.
fn primaries(nodes: &str) -> Vec<Primary> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = *fields.get(2)?;
            if !flags.split(',').any(|f| f == "master") {
                return None;
            }
            // Slot ranges; `[slot->-node]` entries are migrations in progress.
            let slots: Vec<&str> = fields.iter().skip(8).filter(|f| !f.starts_with('[')).copied().collect();
            if slots.is_empty() {
                return None;
            }
            Some(Primary {
                addr: fields.get(1)?.split('@').next()?.to_owned(),
                slots: format!("slots {}", slots.join(",")),
                failed: flags.split(',').any(|f| f == "fail"),
            })
        })
        .collect()
}

/// How many replicas `INFO replication` shows online and acknowledging.
fn live_replicas(info: &str) -> usize {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains(':') && l.contains("state=online"))
        .filter(|l| {
            l.split(',')
                .find_map(|kv| kv.strip_prefix("lag="))
                .and_then(|lag| lag.trim().parse::<u64>().ok())
                .is_some_and(|lag| lag <= REPLICA_LAG_SECS)
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_and_replication_are_read() {
        let nodes = "\
a1 127.0.0.1:7101@17101 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7102@17102 master,fail - 0 0 2 disconnected
a3 127.0.0.1:7103@17103 master - 0 0 3 connected 10923-16383 [5461->-a4]
a4 127.0.0.1:7104@17104 master - 0 0 7 connected 5461-10922
b1 127.0.0.1:7105@17105 slave a1 0 0 1 connected
";
        let p = primaries(nodes);
        let shown: Vec<_> = p.iter().map(|p| (p.addr.as_str(), p.slots.as_str(), p.failed)).collect();
        assert_eq!(
            shown,
            [
                ("127.0.0.1:7101", "slots 0-5460", false),
                ("127.0.0.1:7103", "slots 10923-16383", false),
                ("127.0.0.1:7104", "slots 5461-10922", false),
            ]
        );
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
slave0:ip=127.0.0.1,port=7105,state=online,offset=10,lag=0\r\n\
slave1:ip=127.0.0.1,port=7106,state=online,offset=10,lag=9\r\n\
slave2:ip=127.0.0.1,port=7107,state=wait_bgsave,offset=0,lag=0\r\nmaster_repl_offset:10\r\n";
        assert_eq!(live_replicas(info), 1, "a replica 9 s behind or still syncing does not count");
    }
}
