//! What a store's health check found, for `GET /healthz` (SPEC §12): every part serving,
//! some parts not (the others still served), or none.

/// The result of [`Store::health`](crate::Store::health).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Every part of the store answers and can confirm writes.
    Ok,
    /// Some parts cannot serve (a Redis Cluster shard whose primary is unreachable, or that
    /// has fewer replicas than `store.redis_wait_replicas`): keys elsewhere are served, so
    /// the gateway stays routable. Each entry is one part.
    Degraded(Vec<Part>),
    /// The store cannot serve any key: why, for the log (never for a client).
    Down(String),
}

/// One part of a store that cannot serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Which keys it holds, as a client may be shown (`slots 0-5460`): never an address.
    pub keys: String,
    /// Why, as a word a client may be shown.
    pub problem: Problem,
    /// For the log only: the node's address and the error.
    pub detail: String,
}

/// Why a part of a store cannot serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// It does not answer.
    Unreachable,
    /// It answers, but has fewer replicas than a write must reach.
    Replicas,
    /// Its writes did not finish within `store.op_timeout_ms`.
    Timeout,
}

impl Problem {
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::Unreachable => "unreachable",
            Problem::Replicas => "replicas",
            Problem::Timeout => "timeout",
        }
    }
}

impl Health {
    /// From the parts found wanting out of `total`: none is `Ok`, all is `Down`.
    pub fn of_parts(parts: Vec<Part>, total: usize) -> Health {
        if parts.is_empty() {
            Health::Ok
        } else if parts.len() >= total {
            let why = parts.iter().map(|p| format!("{}: {}", p.keys, p.detail)).collect::<Vec<_>>();
            Health::Down(why.join("; "))
        } else {
            Health::Degraded(parts)
        }
    }
}
