//! Writes that wait for replicas (`store.redis_wait_replicas`): each on a connection of its
//! own to the record's primary, following a cluster's redirections.
//!
//! `WAIT` blocks the connection it is sent on until the replicas acknowledge or its second
//! passes: on the connection every call shares, each `WAIT` would hold up every command behind
//! it (other keys' claims, health checks), and with one shard short of replicas all traffic to
//! that node would queue a second per call. So a waited write borrows a plain connection to the
//! one node that holds its record (opened on demand, at most [`MAX_WAITING`] writes at once,
//! kept for reuse once the call finished): it never waits behind another call, and never
//! touches another node (opening a whole cluster connection would wait on every node, a stalled
//! replica included).
//!
//! In a cluster the record's node comes from the slot map (`CLUSTER SLOTS`, read at start and
//! again after a `MOVED`); the slot is the CRC16 of the key's hash tag, as Redis computes it.
//! An answer of `MOVED` or `ASK` means the script did not run: the pipeline goes to the node
//! named (`ASK`: preceded by `ASKING`), and the map is read again. `TRYAGAIN` and `CLUSTERDOWN`
//! (a failover under way) are sent again after a short pause, a few times.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ErrorKind, FromRedisValue, RedisError, ScriptInvocation, ServerErrorKind, Value,
};
use tokio::sync::Semaphore;

use crate::conn::{Conn, int, text};

/// How long `WAIT` waits for the replicas' acknowledgements.
pub(crate) const WAIT_TIMEOUT_MS: u64 = 1000;

/// Waited writes in flight at once (each on its own connection); more wait for a place.
pub const MAX_WAITING: usize = 64;

/// How many times a pipeline answered with a redirection is sent again.
const REDIRECTS: u32 = 4;

/// Where a key's record lives: the one server, or a cluster's slot map.
enum Router {
    Standalone(String),
    /// `(first slot, last slot, host:port)` of each range; the shared connection reads it.
    Cluster(RwLock<Vec<(u16, u16, String)>>, Conn),
}

/// Connections for writes that `WAIT`, per node.
pub(crate) struct Waiters {
    /// The store URL: each node's URL is it with the node's `host:port`.
    url: String,
    ca_file: Option<PathBuf>,
    router: Router,
    idle: Mutex<HashMap<String, Vec<MultiplexedConnection>>>,
    places: Semaphore,
}

impl Waiters {
    /// For the server of `url`, or (with `cluster`) for the cluster it belongs to.
    pub(crate) async fn new(
        url: &str,
        ca_file: Option<PathBuf>,
        server: &str,
        cluster: Option<Conn>,
    ) -> Result<Waiters, RedisError> {
        let router = match cluster {
            None => Router::Standalone(server.to_owned()),
            Some(mut conn) => Router::Cluster(RwLock::new(slot_map(&mut conn).await?), conn),
        };
        Ok(Waiters {
            url: url.to_owned(),
            ca_file,
            router,
            idle: Mutex::new(HashMap::new()),
            places: Semaphore::new(MAX_WAITING),
        })
    }

    /// Run `inv` (whose first key is `key`) and `WAIT replicas` on the node of `key`: the
    /// script's answer and how many replicas acknowledged it.
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
        key: &str,
        replicas: u32,
    ) -> Result<(T, i64), RedisError> {
        let _place = self.places.acquire().await.expect("the semaphore is never closed");
        let mut node = self.node_of(key);
        let mut asking = false;
        for attempt in 0..=REDIRECTS {
            let mut pipe = redis::pipe();
            if asking {
                pipe.cmd("ASKING").ignore();
            }
            pipe.invoke_script(inv).cmd("WAIT").arg(replicas).arg(WAIT_TIMEOUT_MS);
            let mut conn = match self.connection(&node).await {
                Ok(conn) => conn,
                Err(e) => {
                    self.refresh().await;
                    return Err(e);
                }
            };
            let sent = match pipe.query_async::<(T, i64)>(&mut conn).await {
                // A pipeline does not load scripts: the script did not run, load it and retry.
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    inv.load_async(&mut conn).await?;
                    pipe.query_async(&mut conn).await
                }
                other => other,
            };
            // Only a connection whose call finished goes back: one dropped mid-`WAIT` (its
            // call timed out) would still be blocked, and a broken one (its node restarted)
            // stays broken.
            match &sent {
                Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => {}
                _ => self.give_back(&node, conn),
            }
            let e = match sent {
                // A node that is gone (a failover under way): the next call asks the new map.
                Err(e) if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() => {
                    self.refresh().await;
                    return Err(e);
                }
                Err(e) if attempt < REDIRECTS => first_of(e),
                other => return other,
            };
            asking = false;
            match e.kind() {
                ErrorKind::Server(ServerErrorKind::Moved) | ErrorKind::Server(ServerErrorKind::Ask) => {
                    let Some((host, port)) = e.redirect_node() else { return Err(e) };
                    asking = e.kind() == ErrorKind::Server(ServerErrorKind::Ask);
                    node = format!("{host}:{port}");
                    if !asking {
                        self.refresh().await;
                    }
                    tracing::debug!(node = %node, asking, "redis: waited write redirected");
                }
                ErrorKind::Server(ServerErrorKind::TryAgain)
                | ErrorKind::Server(ServerErrorKind::ClusterDown) => {
                    tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                    self.refresh().await;
                    node = self.node_of(key);
                }
                _ => return Err(e),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// The `host:port` of the primary that holds `key`.
    fn node_of(&self, key: &str) -> String {
        match &self.router {
            Router::Standalone(server) => server.clone(),
            Router::Cluster(map, _) => {
                let slot = slot_of(key.as_bytes());
                let map = map.read().unwrap_or_else(|p| p.into_inner());
                map.iter()
                    .find(|(first, last, _)| (*first..=*last).contains(&slot))
                    .or(map.first())
                    .map(|(_, _, node)| node.clone())
                    .unwrap_or_default()
            }
        }
    }

    /// Read the cluster's slot map again (a failure keeps the old one).
    async fn refresh(&self) {
        if let Router::Cluster(map, conn) = &self.router {
            match slot_map(&mut conn.clone()).await {
                Ok(fresh) if !fresh.is_empty() => *map.write().unwrap_or_else(|p| p.into_inner()) = fresh,
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "redis: could not read the slot map"),
            }
        }
    }

    /// An idle connection to `node`, or a new one.
    async fn connection(&self, node: &str) -> Result<MultiplexedConnection, RedisError> {
        if let Some(conn) = self.idle.lock().ok().and_then(|mut idle| idle.get_mut(node)?.pop()) {
            return Ok(conn);
        }
        let url = crate::conn::node_url(&self.url, node);
        let target = crate::tls::Target::new(&url, self.ca_file.as_deref())
            .map_err(|e| RedisError::from((ErrorKind::Client, "redis node", e.to_string())))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)));
        target.client.get_multiplexed_async_connection_with_config(&config).await
    }

    fn give_back(&self, node: &str, conn: MultiplexedConnection) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.entry(node.to_owned()).or_default().push(conn);
        }
    }
}

/// A pipeline's failure as the error of its first failed command (the script's: a `MOVED`
/// carries its redirection there), any other error as it is.
fn first_of(e: RedisError) -> RedisError {
    match e.clone().into_server_errors() {
        Some(errors) if !errors.is_empty() => RedisError::from(errors[0].1.clone()),
        _ => e,
    }
}

/// The primaries' slot ranges, from `CLUSTER SLOTS`.
async fn slot_map(conn: &mut Conn) -> Result<Vec<(u16, u16, String)>, RedisError> {
    let Value::Array(ranges) = redis::cmd("CLUSTER").arg("SLOTS").query_async::<Value>(conn).await? else {
        return Ok(Vec::new());
    };
    Ok(ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(fields) = range else { return None };
            let Some(Value::Array(primary)) = fields.get(2) else { return None };
            let (first, last) = (int(fields.first()?)?, int(fields.get(1)?)?);
            let node = format!("{}:{}", text(primary.first()?)?, int(primary.get(1)?)?);
            Some((u16::try_from(first).ok()?, u16::try_from(last).ok()?, node))
        })
        .collect())
}

/// A key's cluster slot: CRC16 (XMODEM) of its hash tag (or the whole key), modulo 16384.
fn slot_of(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|b| *b == b'{').and_then(|open| {
        let close = key[open + 1..].iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &key[open + 1..open + 1 + close])
    });
    let mut crc: u16 = 0;
    for byte in tagged.unwrap_or(key) {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    /// The slots Redis itself gives (`CLUSTER KEYSLOT`).
    #[test]
    fn slots_are_redis_own() {
        assert_eq!(super::slot_of(b"foo"), 12182);
        assert_eq!(super::slot_of(b"{user1000}.following"), super::slot_of(b"user1000"));
        assert_eq!(super::slot_of(b"123456789"), 0x31c3, "the CRC16/XMODEM check value");
    }
}
