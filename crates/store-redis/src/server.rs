//! What `connect` asks the server before it serves: its version and whether it runs a cluster
//! (`INFO`), and its eviction policy on every primary (`CONFIG GET`).

use oncerpc_core::store::StoreError;
use redis::Value;
use redis::aio::ConnectionManager;

use crate::conn::{Conn, text};
use crate::{RedisStore, err};

impl RedisStore {
    /// `INFO` (its default sections hold `server` and `cluster`): whether the server runs a
    /// cluster (`cluster_enabled:1`), after refusing a version older than [`MIN_VERSION`], which
    /// lacks a command the scripts use (`SET … GET`). A server that refuses `INFO` is taken as a
    /// standalone one of a version it does not tell.
    pub(crate) async fn server_info(conn: &mut ConnectionManager, server: &str) -> Result<bool, StoreError> {
        match redis::cmd("INFO").query_async::<String>(conn).await {
            Ok(info) => {
                let field = |name: &str| info.lines().find_map(|l| l.trim().strip_prefix(name));
                if let Some(version) = field("redis_version:")
                    && too_old(version)
                {
                    return Err(StoreError::new(format!(
                        "redis {server} is version {version}: oncerpc needs Redis {}.{} or newer",
                        MIN_VERSION.0, MIN_VERSION.1
                    )));
                }
                Ok(field("cluster_enabled:") == Some("1"))
            }
            Err(e) => {
                tracing::warn!(%server, error = %e, "redis: INFO refused, assuming a standalone server");
                Ok(false)
            }
        }
    }
}

/// The oldest Redis the scripts run on: 6.2 added `SET … GET`.
const MIN_VERSION: (u32, u32) = (6, 2);

/// Whether `major.minor[.patch]` is older than [`MIN_VERSION`]; a version it cannot read is not.
fn too_old(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor) < MIN_VERSION,
        _ => false,
    }
}

impl Conn {
    /// Refuse (production) or warn about (development) an evicting `maxmemory-policy`.
    pub(crate) async fn check_eviction_policy(
        &mut self,
        server: &str,
        production: bool,
    ) -> Result<(), StoreError> {
        let get = redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy").clone();
        let replies = self.on_every_primary(&get, server).await.map_err(err)?;
        for (node, reply) in replies {
            match reply.and_then(|v| config_value(&v).ok_or_else(|| format!("unexpected reply {v:?}"))) {
                Ok(policy) if policy == "noeviction" => {}
                Ok(policy) => {
                    let msg = format!(
                        "redis {node}: maxmemory-policy is {policy:?}, which evicts keys under memory \
                         pressure and would silently drop idempotency records (a command could run twice): \
                         set `maxmemory-policy noeviction`"
                    );
                    if production {
                        return Err(StoreError::new(msg));
                    }
                    tracing::warn!("{msg} (refused in production mode)");
                }
                Err(e) => tracing::warn!(
                    %node, error = %e,
                    "redis: could not check maxmemory-policy (CONFIG refused?): make sure it is noeviction, \
                     or records may be evicted"
                ),
            }
        }
        Ok(())
    }
}

/// The value of a `CONFIG GET` reply (RESP2 array or RESP3 map).
fn config_value(v: &Value) -> Option<String> {
    match v {
        Value::Array(items) => items.get(1).and_then(text),
        Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::too_old;

    #[test]
    fn versions_before_6_2_are_too_old_and_unreadable_ones_are_not() {
        for old in ["6.0.16", "6.1.0", "5.0.7", "2.8"] {
            assert!(too_old(old), "{old}");
        }
        for ok in ["6.2.0", "6.2.14", "7.0.15", "7.4.1", "10.0", "8"] {
            assert!(!too_old(ok), "{ok}");
        }
        assert!(!too_old("unknown"));
    }
}
