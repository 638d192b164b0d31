//! The connection every call shares: one server (reconnecting) or a cluster (routing by key).

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

/// One server or a cluster, behind one [`ConnectionLike`]: scripts and commands route by
/// their first key in a cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Standalone(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Standalone(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Standalone(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// Run `cmd` on every primary: each node's name and its reply (or refusal).
    pub(crate) async fn on_every_primary(
        &mut self,
        cmd: &Cmd,
        standalone_name: &str,
    ) -> Result<Vec<(String, Result<Value, String>)>, RedisError> {
        match self {
            Conn::Standalone(c) => {
                Ok(vec![(standalone_name.to_owned(), cmd.query_async(c).await.map_err(|e| e.to_string()))])
            }
            Conn::Cluster(c) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let Value::Map(replies) = c.route_command(cmd.clone(), routing).await? else {
                    return Err(RedisError::from((ErrorKind::Client, "unexpected reply from the cluster")));
                };
                Ok(replies
                    .into_iter()
                    .map(|(node, reply)| {
                        let node = text(&node).unwrap_or_default();
                        match reply {
                            Value::ServerError(e) => (node, Err(e.to_string())),
                            v => (node, Ok(v)),
                        }
                    })
                    .collect())
            }
        }
    }
}

pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

pub(crate) fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => text(other)?.parse().ok(),
    }
}

/// `url` with `node` (`host:port`) in place of its host and port: credentials, database and
/// options kept.
pub(crate) fn node_url(url: &str, node: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (userinfo, hostpart) = match rest.rsplit_once('@') {
        Some((user, host)) if !user.contains('/') => (format!("{user}@"), host),
        _ => (String::new(), rest),
    };
    let tail = hostpart.find(['/', '?']).map_or("", |i| &hostpart[i..]);
    format!("{scheme}://{userinfo}{node}{tail}")
}
