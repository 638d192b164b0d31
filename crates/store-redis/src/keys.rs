//! Redis keys: a record's and its token key's (one hash tag, so one slot), an event's, a
//! tenant's listing index. Written into one allocation each (docs/BENCHMARKS.md: `format!`
//! with a hex digit per `write!` cost more than the rest of the client's work per key).

use oncerpc_core::idempotency::hex;
use oncerpc_core::store::RecordKey;
use sha2::{Digest, Sha256};

use crate::RedisStore;

impl RedisStore {
    /// The record key and the token key of `k`: one hash tag, so one slot.
    pub(crate) fn record_keys(&self, k: &RecordKey) -> (String, String) {
        let scope = scope_of(k);
        let tag = hash_tag(&scope);
        (self.tagged(&tag, "r", &scope), self.tagged(&tag, "t", &scope))
    }

    /// The record key of `k` alone.
    pub(crate) fn record_key(&self, k: &RecordKey) -> String {
        let scope = scope_of(k);
        self.tagged(&hash_tag(&scope), "r", &scope)
    }

    pub(crate) fn event_key(&self, id: &str) -> String {
        self.tagged(&hash_tag(id), "e", id)
    }

    /// The index of one tenant's events for [`Store::list_events`]: a sorted set whose
    /// members are the events' list cursors (`list_cursor`: zero-padded creation time, id),
    /// all of score 0, so that it reads in listing order by lexicographic range.
    pub(crate) fn listed_key(&self, tenant: &str) -> String {
        let scope = format!("{}:{tenant}", tenant.len());
        self.tagged(&hash_tag(&format!("l:{scope}")), "l", &scope)
    }

    /// `{prefix}:{<tag>}:<kind>:<rest>`, written into one allocation: the keys of every
    /// record operation are built twice per new key, and `format!` with a hex digit per
    /// `write!` cost more than the rest of the Redis client's work (docs/BENCHMARKS.md).
    pub(crate) fn tagged(&self, tag: &str, kind: &str, rest: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + tag.len() + kind.len() + rest.len() + 6);
        key.push_str(&self.prefix);
        key.push_str(":{");
        key.push_str(tag);
        key.push_str("}:");
        key.push_str(kind);
        key.push(':');
        key.push_str(rest);
        key
    }

    pub(crate) fn pending_key(&self) -> String {
        format!("{}:pending", self.prefix)
    }
}

/// 16 hex digits of SHA-256: a hash tag without braces, spread evenly over the slots.
pub(crate) fn hash_tag(s: &str) -> String {
    hex(&Sha256::digest(s.as_bytes())[..8])
}

/// A record's scope `{len}:{tenant}{len}:{method}{key}`: the lengths make the mapping from
/// (tenant, method, key) injective.
fn scope_of(k: &RecordKey) -> String {
    let (mut tenant_len, mut method_len) = (itoa::Buffer::new(), itoa::Buffer::new());
    let (tenant_len, method_len) = (tenant_len.format(k.tenant.len()), method_len.format(k.method.len()));
    let mut scope = String::with_capacity(
        tenant_len.len() + method_len.len() + 2 + k.tenant.len() + k.method.len() + k.key.len(),
    );
    for part in [tenant_len, ":", &k.tenant, method_len, ":", &k.method, &k.key] {
        scope.push_str(part);
    }
    scope
}

#[cfg(test)]
mod tests {
    use redis::aio::{ConnectionManager, ConnectionManagerConfig};

    use super::*;
    use crate::Scripts;
    use crate::conn::Conn;

    /// The keys are what they were when `format!` built them: records and events written by
    /// an earlier version are found.
    #[tokio::test]
    async fn keys_keep_their_layout() {
        let Ok(client) = redis::Client::open("redis://127.0.0.1:1") else { panic!("a URL") };
        let Ok(conn) = ConnectionManager::new_lazy_with_config(client, ConnectionManagerConfig::new()) else {
            panic!("a lazy connection")
        };
        let store = RedisStore {
            conn: Conn::Standalone(conn),
            prefix: "oncerpc".into(),
            wait_replicas: 0,
            scripts: std::sync::Arc::new(Scripts::new()),
            waiters: None,
        };
        let old_tag = |s: &str| -> String {
            Sha256::digest(s.as_bytes())[..8].iter().map(|b| format!("{b:02x}")).collect()
        };
        for (tenant, method, key) in
            [("t", "m", "k"), ("acme:{x}", "counter.increment", "ordér-1"), ("", "", "")]
        {
            let k = RecordKey::new(tenant, method, key);
            let scope = format!("{}:{}{}:{}{}", tenant.len(), tenant, method.len(), method, key);
            let tag = old_tag(&scope);
            let (record, tokens) = store.record_keys(&k);
            assert_eq!(record, format!("oncerpc:{{{tag}}}:r:{scope}"));
            assert_eq!(tokens, format!("oncerpc:{{{tag}}}:t:{scope}"));
            assert_eq!(store.record_key(&k), record);
            assert_eq!(store.event_key(key), format!("oncerpc:{{{}}}:e:{key}", old_tag(key)));
            let listed = format!("{}:{tenant}", tenant.len());
            assert_eq!(
                store.listed_key(tenant),
                format!("oncerpc:{{{}}}:l:{listed}", old_tag(&format!("l:{listed}")))
            );
        }
    }
}
