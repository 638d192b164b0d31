//! # oncerpc-store-redis
//!
//! An idempotency store shared by many gateway replicas through one Redis server or one
//! Redis Cluster.
//!
//! * **Atomic, server-side**: every record operation (claim, renew, complete, release) is one
//!   Lua script, so the read-decide-write of a record is one atomic step inside Redis: no two
//!   replicas can both win a claim or a take-over.
//! * **Redis 6.2 or newer** (the claim reads and bumps a token key with one `SET … GET`);
//!   `connect` refuses an older server by the version its `INFO` tells.
//! * **One clock**: leases, take-over windows and expiry are measured with Redis's `TIME`,
//!   not the replicas' clocks.
//! * **Two-phase take-over**: a claim that finds a processing record whose lease ran out gets
//!   a new token as an *unconfirmed* take-over (fields `tt`/`tu`): it must `renew` with it
//!   before executing, and the previous owner's `complete` or `renew` cancels it. Until `tu`
//!   (at most 5 s) other claimants see the record in progress.
//! * **Keys**: a record is `{prefix}:{<tag>}:r:{len}:{tenant}{len}:{method}{key}` and its
//!   token key `{prefix}:{<tag>}:t:…` (same scope). The length prefixes make the (tenant,
//!   method, key) → Redis key mapping injective; `<tag>` is 16 hex digits of the SHA-256 of
//!   that scope, a Redis Cluster *hash tag*, so a record and its token key always share a
//!   slot, whatever `{` or `}` tenant and method names contain. (Keep braces out of the prefix:
//!   one there would put every key in one slot — still correct, no longer spread.)
//! * **Redis Cluster**: every script touches the keys of one record only, so it runs on the
//!   record's primary. `connect` asks the server (`INFO cluster`); on `cluster_enabled:1` it
//!   uses a cluster connection (slot map, `MOVED`/`ASK` redirections) from the same URL.
//! * **Fencing tokens** grow strictly per key, also across deletion and expiry, without a
//!   global counter: a claim takes `max(last token of this key + 1, TIME in µs)` and keeps the
//!   last token in the token key, which `release` does not delete and which lives `ttl + lease
//!   + 1 day` past each claim. Once it too has expired, the clock has moved past every older
//!   token. `complete`/`release` only land with the current token; `complete` is idempotent.
//! * **Expiry** is Redis expiry (`PEXPIRE`): a processing record lives `max(ttl, lease)`, so it
//!   never expires under a running execution; a finished one `ttl`.
//! * **Memory policy**: an evicting `maxmemory-policy` would silently drop records (a command
//!   could then run twice). `connect` reads it on every primary: in production anything but
//!   `noeviction` is refused, in development it is a warning; a server that refuses `CONFIG`
//!   (managed services rename it) is a warning that it could not be checked.
//! * **Replication and failover**: Redis replicates asynchronously, so a primary that fails
//!   right after acknowledging a claim or a completion can lose it: the promoted replica never
//!   saw it, and the command can run a second time (or its outcome be forgotten). With
//!   `wait_replicas = N` (`store.redis_wait_replicas`) every claim, renewal and completion is
//!   pipelined with `WAIT N 1000` on a connection of its own (in a cluster: to the record's
//!   primary; see `wait.rs`: a `WAIT` blocks its connection, so it never shares one with other
//!   calls), and fewer than `N` acknowledgements within a second is a `StoreError` — the
//!   gateway answers `-32004` rather than promise what a failover could undo. A claim that fell
//!   short is answered [`Claim::Unconfirmed`]: the gateway gives it back at once, so a retry
//!   runs without waiting for its lease. The price: a round trip to the replicas on every call,
//!   and while a shard's replicas are missing every call to its keys waits the full second and
//!   fails (other shards' keys are served, and health says which shard is short). Even then a
//!   failover can still lose writes that `WAIT` had not yet confirmed (the call failed, so no
//!   outcome was promised), and `WAIT` is not consensus: a replica that acknowledged can itself
//!   be lost before promotion. `release` and the event calls are not waited for.
//! * **Redirections**: a `MOVED` or `ASK` answered to a waited pipeline (after a failover or a
//!   resharding) is followed: the script did not run, the slot map is refreshed and the
//!   pipeline sent again.
//! * **Health** ([`Store::health`]): in a cluster, each primary is asked (`INFO replication`,
//!   1 s each); a shard that does not answer, or has fewer live replicas than `wait_replicas`,
//!   is reported by its slots, and the store is degraded (not down) while another shard serves.
//! * **Reconnects** through `redis::aio::ConnectionManager` (or the cluster connection); while
//!   Redis is unreachable every call fails fast with a `StoreError` (the gateway answers
//!   `-32004`), and the next call after Redis returns succeeds.
//! * **Events**: a hash per event (`{prefix}:{<tag of id>}:e:<id>`, expiring with the event)
//!   and one sorted set of pending event ids (`{prefix}:pending`, score = creation time), in
//!   its own slot. Index and hash are therefore separate commands: a creation writes the index
//!   entry first, a finish updates the hash (fenced by the event's token) and then removes the
//!   entry, re-adding it if the event turned processing meanwhile. A listing drops an entry whose
//!   hash is gone only once it is older than [`PENDING_GRACE_MS`], so an event being created is
//!   never lost.
//! * **TLS**: a `rediss://[user:password@]host:port[/db]` URL speaks TLS (rustls, ring) to the
//!   server and, in a cluster, to every node (at the addresses the cluster announces: their
//!   certificates must name them). The certificate is verified — name and chain — against the
//!   platform's root certificates, or with [`RedisOptions::ca_file`] (`store.ca_file`, a PEM
//!   file) against that private CA only; `ca_file` with a plain `redis://` URL is refused, as
//!   is a file without a PEM certificate. No client certificate is sent. `connect` sends a
//!   `PING`, so a wrong or missing password fails there. Errors name the server or the file,
//!   never the URL's password.
//!
//! Upgrading from the layout with one global `{prefix}:tokens` counter: the record keys moved,
//! so drain in-flight commands first (records of the old layout are no longer read).
//!
//! Every replica builds its dispatcher on the same store, so a key claimed by one is a
//! duplicate on all:
//!
//! ```
//! use std::sync::Arc;
//! use oncerpc_core::{Dispatcher, DispatcherConfig, Registry, StoreError};
//! use oncerpc_store_redis::RedisStore;
//!
//! async fn dispatcher(registry: Registry, url: &str) -> Result<Dispatcher, StoreError> {
//!     let store = RedisStore::connect(url, "oncerpc").await?;
//!     Ok(Dispatcher::with_store(registry, DispatcherConfig::default(), Arc::new(store)))
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! // Nothing listens on port 1: connecting fails, and a gateway would not start. (The test
//! // suite runs the store against a real server: ONCERPC_TEST_REDIS_URL.)
//! assert!(dispatcher(Registry::new(), "redis://127.0.0.1:1").await.is_err());
//! # });
//! ```

use std::path::PathBuf;
use std::time::Duration;

use oncerpc_core::BoxFuture;
use oncerpc_core::store::{
    AcquireKind, Claim, ClaimRequest, Event, EventFilter, Record, RecordKey, RecordState, Store, StoreError,
    StoredOutcome, TakeOver, journal_from_json, now_ms, status_of, takeover_window,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::{FromRedisValue, RedisError, Script, ScriptInvocation, Value};

mod conn;
mod events;
mod health;
mod keys;
mod scripts;
mod server;
mod tls;
mod wait;

use conn::{Conn, int, text};
use scripts::*;
pub use wait::MAX_WAITING;
use wait::{WAIT_TIMEOUT_MS, Waiters};

/// A pending-index entry whose event hash is missing is dropped only once its creation time is
/// this old: the index entry of a new event is written just before its hash.
pub const PENDING_GRACE_MS: u64 = 60_000;

/// How long a token key outlives the last claim beyond the record's own `ttl + lease`.
const TOKEN_KEEP_MS: u64 = 24 * 3600 * 1000;

/// How a store connects: [`RedisStore::connect_with`].
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Namespace of every key: gateways sharing records use the same.
    pub prefix: String,
    /// `WAIT` for this many replicas after every claim, renewal and completion (0: don't).
    pub wait_replicas: u32,
    /// Production mode: refuse to start on an evicting `maxmemory-policy` (else: warn).
    pub production: bool,
    /// A PEM file of a private CA (`store.ca_file`): with a `rediss://` URL the server's
    /// certificate must chain to it (instead of the platform's roots). Needs `rediss://`.
    pub ca_file: Option<PathBuf>,
}

impl RedisOptions {
    /// Development defaults: no `WAIT`, an evicting memory policy is a warning, the platform's
    /// roots for `rediss://`.
    pub fn new(prefix: impl Into<String>) -> Self {
        RedisOptions { prefix: prefix.into(), wait_replicas: 0, production: false, ca_file: None }
    }
}

struct Scripts {
    claim: Script,
    renew: Script,
    put_step: Script,
    complete: Script,
    release: Script,
    put_event: Script,
    finish_event: Script,
    put_event_steps: Script,
    index_listed: Script,
    restart_event: Script,
}

impl Scripts {
    fn new() -> Self {
        Scripts {
            claim: Script::new(CLAIM),
            renew: Script::new(RENEW),
            put_step: Script::new(PUT_STEP),
            complete: Script::new(COMPLETE),
            release: Script::new(RELEASE),
            put_event: Script::new(PUT_EVENT),
            finish_event: Script::new(FINISH_EVENT),
            put_event_steps: Script::new(PUT_EVENT_STEPS),
            index_listed: Script::new(INDEX_LISTED),
            restart_event: Script::new(RESTART_EVENT),
        }
    }
}

/// A Redis-backed [`Store`].
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    prefix: String,
    wait_replicas: u32,
    scripts: std::sync::Arc<Scripts>,
    /// With `wait_replicas > 0`: the connections of writes that `WAIT`.
    waiters: Option<std::sync::Arc<Waiters>>,
}

impl RedisStore {
    /// Connect to `url` (`redis://[user:password@]host:port[/db]`, or `rediss://…` for TLS; a
    /// standalone server or any node of a cluster); keys are namespaced under `prefix`.
    /// Development defaults (see [`RedisOptions::new`]).
    pub async fn connect(url: &str, prefix: &str) -> Result<RedisStore, StoreError> {
        RedisStore::connect_with(url, RedisOptions::new(prefix)).await
    }

    /// Connect with explicit options: checks the server answers (`PING`: a wrong or missing
    /// password fails here), detects a cluster, checks `maxmemory-policy`. A
    /// `rediss://` URL speaks TLS, verified against the platform's roots or, with
    /// [`RedisOptions::ca_file`], that CA only.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<RedisStore, StoreError> {
        let target = tls::Target::new(url, options.ca_file.as_deref())?;
        let server = target.server.clone();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let mut manager = ConnectionManager::new_with_config(target.client.clone(), config)
            .await
            .map_err(|e| target.error(&format!("redis {server}"), &e))?;
        // A server that wants a password accepts the connection without one: ask, so that a
        // missing password fails here rather than at the first claim.
        redis::cmd("PING")
            .query_async::<()>(&mut manager)
            .await
            .map_err(|e| target.error(&format!("redis {server}"), &e))?;
        let mut conn = if RedisStore::server_info(&mut manager, &server).await? {
            let cluster_err = |e: RedisError| target.error(&format!("redis cluster {server}"), &e);
            let client = |seeds: Vec<String>| {
                let mut builder = ClusterClient::builder(seeds)
                    .connection_timeout(Duration::from_secs(2))
                    .response_timeout(Duration::from_secs(2))
                    .retries(3)
                    .max_retry_wait(500);
                if let Some(certs) = target.certs.clone() {
                    builder = builder.certs(certs);
                }
                builder.build()
            };
            let first = client(vec![url.to_owned()]).map_err(cluster_err)?;
            let mut cluster = first.get_async_connection().await.map_err(cluster_err)?;
            // Every node the cluster knows is a seed: a client that must reconnect from its
            // seeds (or open a new connection) still can when the node of the URL is gone.
            let nodes = redis::cmd("CLUSTER").arg("NODES").query_async::<String>(&mut cluster).await;
            let seeds = nodes.map(|n| cluster_seeds(url, &n)).unwrap_or_default();
            if seeds.len() > 1 {
                cluster =
                    client(seeds).map_err(cluster_err)?.get_async_connection().await.map_err(cluster_err)?;
            }
            tracing::info!(node = %server, "redis: cluster mode");
            Conn::Cluster(cluster)
        } else {
            Conn::Standalone(manager)
        };
        conn.check_eviction_policy(&server, options.production).await?;
        let waiters = match options.wait_replicas {
            0 => None,
            _ => {
                let cluster = matches!(conn, Conn::Cluster(_)).then(|| conn.clone());
                let waiters = Waiters::new(url, options.ca_file.clone(), &server, cluster)
                    .await
                    .map_err(|e| target.error(&format!("redis cluster {server}: CLUSTER SLOTS"), &e))?;
                Some(std::sync::Arc::new(waiters))
            }
        };
        Ok(RedisStore {
            conn,
            prefix: options.prefix,
            wait_replicas: options.wait_replicas,
            scripts: std::sync::Arc::new(Scripts::new()),
            waiters,
        })
    }

    /// Whether the store talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// Run a script (on its first key's node). With `wait: Some(key)` (its first key) and
    /// `wait_replicas > 0` it is pipelined with `WAIT` on a connection of its own
    /// ([`Waiters`]), and the acknowledgements returned.
    async fn eval<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
        wait: Option<&str>,
    ) -> Result<(T, Option<i64>), StoreError> {
        match (wait, &self.waiters) {
            (Some(key), Some(waiters)) => {
                let (value, acks) = waiters.run(inv, key, self.wait_replicas).await.map_err(err)?;
                Ok((value, Some(acks)))
            }
            _ => {
                let mut conn = self.conn.clone();
                inv.invoke_async(&mut conn).await.map(|v| (v, None)).map_err(err)
            }
        }
    }

    /// Whether `wait_replicas` replicas acknowledged a write: `Err` says how many did.
    fn short_of_replicas(&self, acks: Option<i64>) -> Result<(), String> {
        let n = self.wait_replicas;
        match acks {
            Some(k) if k < i64::from(n) => Err(format!(
                "redis: written to {k} of {n} replicas within {WAIT_TIMEOUT_MS} ms \
                 (store.redis_wait_replicas = {n}): a failover could lose it"
            )),
            _ => Ok(()),
        }
    }

    /// A write is only answered once `wait_replicas` replicas acknowledged it.
    fn replicated(&self, acks: Option<i64>) -> Result<(), StoreError> {
        self.short_of_replicas(acks).map_err(StoreError::new)
    }
}

/// `url` once for each node `CLUSTER NODES` lists (its host and port in place of the URL's,
/// credentials and options kept), the URL's own first.
fn cluster_seeds(url: &str, nodes: &str) -> Vec<String> {
    let mut seeds = vec![url.to_owned()];
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else { continue };
        let addr = addr.split('@').next().unwrap_or("");
        if addr.starts_with(':') || flags.contains("noaddr") || flags.contains("handshake") {
            continue;
        }
        let seed = conn::node_url(url, addr);
        if !seeds.contains(&seed) {
            seeds.push(seed);
        }
    }
    seeds
}

fn err(e: RedisError) -> StoreError {
    StoreError::new(format!("redis: {e}"))
}

fn outcome(state: &str, json: String) -> StoredOutcome {
    if state == "s" { StoredOutcome::Succeeded(json) } else { StoredOutcome::Failed(json) }
}

fn state_code(outcome: &StoredOutcome) -> &'static str {
    match outcome {
        StoredOutcome::Succeeded(_) => "s",
        StoredOutcome::Failed(_) => "f",
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

fn parse_claim(v: Value) -> Result<Claim, StoreError> {
    let Value::Array(items) = v else { return Err(StoreError::new("redis: unexpected claim reply")) };
    let tag = items.first().and_then(text).unwrap_or_default();
    let bad = || StoreError::new(format!("redis: malformed claim reply {items:?}"));
    Ok(match tag.as_str() {
        "acquired" => {
            let token = items.get(1).and_then(int).ok_or_else(bad)?;
            let kind = match items.get(2).and_then(text).as_deref() {
                Some("takeover") => AcquireKind::TakeOver,
                Some("force") => AcquireKind::ForceRetry,
                _ => AcquireKind::Fresh,
            };
            Claim::Acquired { token, kind }
        }
        "inprogress" => Claim::InProgress { retry_after_ms: items.get(1).and_then(int).ok_or_else(bad)? },
        "mismatch" => Claim::FingerprintMismatch,
        "refused" => Claim::ForceRetryRefused,
        "done" => {
            let state = items.get(1).and_then(text).ok_or_else(bad)?;
            let json = items.get(2).and_then(text).ok_or_else(bad)?;
            let left = items.get(3).and_then(int).ok_or_else(bad)?;
            Claim::Done(outcome(&state, json), left)
        }
        _ => return Err(bad()),
    })
}

impl Store for RedisStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(async move {
            let (record, tokens) = self.record_keys(req.key);
            let mut inv = self.scripts.claim.prepare_invoke();
            inv.key(&record)
                .key(tokens)
                .arg(req.fingerprint)
                .arg(if req.force_retry { "1" } else { "0" })
                .arg(ms(req.lease))
                .arg(ms(req.ttl).max(1))
                .arg(ms(takeover_window(req.lease)))
                .arg(ms(req.ttl).saturating_add(ms(req.lease)).saturating_add(TOKEN_KEEP_MS));
            let (reply, acks) = self.eval::<Value>(&inv, Some(&record)).await?;
            Ok(match parse_claim(reply)? {
                // Written, but a failover could undo it: the caller gives it back at once.
                Claim::Acquired { token, kind } => match self.short_of_replicas(acks) {
                    Ok(()) => Claim::Acquired { token, kind },
                    Err(error) => Claim::Unconfirmed { token, kind, error },
                },
                other => other,
            })
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut inv = self.scripts.renew.prepare_invoke();
            let record = self.record_key(key);
            inv.key(&record).arg(token).arg(ms(lease));
            let (done, acks) = self.eval::<i64>(&inv, Some(&record)).await?;
            if done == 1 {
                self.replicated(acks)?;
            }
            Ok(done == 1)
        })
    }

    fn put_step<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        step: u32,
        output: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut inv = self.scripts.put_step.prepare_invoke();
            let record = self.record_key(key);
            inv.key(&record).arg(token).arg(ms(lease)).arg(step).arg(output);
            let (done, acks) = self.eval::<i64>(&inv, Some(&record)).await?;
            if done == 1 {
                self.replicated(acks)?;
            }
            Ok(done == 1)
        })
    }

    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        outcome: &'a StoredOutcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut inv = self.scripts.complete.prepare_invoke();
            let record = self.record_key(key);
            inv.key(&record).arg(token).arg(state_code(outcome)).arg(outcome.json()).arg(ms(ttl).max(1));
            let (done, acks) = self.eval::<i64>(&inv, Some(&record)).await?;
            if done == 1 {
                self.replicated(acks)?;
            }
            Ok(done == 1)
        })
    }

    fn release<'a>(&'a self, key: &'a RecordKey, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut inv = self.scripts.release.prepare_invoke();
            inv.key(self.record_key(key)).arg(token);
            Ok(self.eval::<i64>(&inv, None).await?.0 == 1)
        })
    }

    fn get<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let record = self.record_key(key);
            // A finished record's expiry is its key's: the completion sets it relative to
            // the store's clock and leaves the processing `expires` field behind.
            let (v, left): (Vec<Value>, i64) = redis::pipe()
                .cmd("HMGET")
                .arg(&record)
                .arg(&["fp", "state", "outcome", "token", "lease", "expires", "tt", "tu", "steps"][..])
                .cmd("PTTL")
                .arg(&record)
                .query_async(&mut conn)
                .await
                .map_err(err)?;
            let number = |i: usize| v.get(i).and_then(int);
            let Some(fingerprint) = v.first().and_then(text) else { return Ok(None) };
            let state = v.get(1).and_then(text).unwrap_or_default();
            let state = match state.as_str() {
                "p" => RecordState::Processing { lease_until_ms: number(4).unwrap_or(0) },
                s => RecordState::Done(outcome(s, v.get(2).and_then(text).unwrap_or_default())),
            };
            let takeover = match (number(6), number(7)) {
                (Some(token), Some(until_ms)) => Some(TakeOver { token, until_ms }),
                _ => None,
            };
            Ok(Some(Record {
                fingerprint,
                state,
                token: number(3).unwrap_or(0),
                expires_at_ms: match u64::try_from(left) {
                    Ok(left) => now_ms() + left,
                    Err(_) => number(5).unwrap_or(0),
                },
                takeover,
                steps: journal_from_json(v.get(8).and_then(text).as_deref()),
            }))
        })
    }

    fn put_event<'a>(&'a self, e: &'a Event) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.write_event(e))
    }

    fn get_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>> {
        Box::pin(self.load_event(id))
    }

    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        outcome: &'a StoredOutcome,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut inv = self.scripts.finish_event.prepare_invoke();
            inv.key(self.event_key(id))
                .arg(token)
                .arg(status_of(outcome).as_str())
                .arg(outcome.json())
                .arg(now_ms());
            let landed = self.eval::<i64>(&inv, None).await?.0 == 1;
            if landed {
                self.unindex_pending(id).await?;
            }
            Ok(landed)
        })
    }

    fn put_event_steps<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        steps: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut inv = self.scripts.put_event_steps.prepare_invoke();
            inv.key(self.event_key(id)).arg(token).arg(steps).arg(now_ms());
            Ok(self.eval::<i64>(&inv, None).await?.0 == 1)
        })
    }

    fn restart_event<'a>(&'a self, id: &'a str, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.rerun_event(id, token))
    }

    fn list_events<'a>(
        &'a self,
        tenant: &'a str,
        filter: &'a EventFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<Event>, Option<String>), StoreError>> {
        Box::pin(self.list_page(tenant, filter, cursor, limit))
    }

    fn pending_events<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<Event>, Option<String>), StoreError>> {
        Box::pin(self.pending_page(cursor, limit))
    }

    fn name(&self) -> &'static str {
        "redis"
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            redis::cmd("PING").query_async::<String>(&mut conn).await.map(|_| ()).map_err(err)
        })
    }

    fn health(&self) -> BoxFuture<'_, oncerpc_core::store::Health> {
        Box::pin(self.shard_health())
    }
}

#[cfg(test)]
mod tests;
