//! # oncerpc-store-redis
//!
//! An idempotency store shared by many gateway replicas through one Redis server.
//!
//! * **Atomic, server-side**: claim, complete and release are Lua scripts, so the
//!   read-decide-write of a record is one atomic step inside Redis: no two replicas can both
//!   win a claim or a take-over.
//! * **One clock**: leases are measured with Redis's `TIME`, not the replicas' clocks.
//! * **Fencing**: every claim takes a token from one `INCR` counter, so tokens grow for a key
//!   across take-overs *and* expiry; `complete`/`release` only land with the current token.
//! * **TTL** is Redis expiry (`PEXPIRE`) on the record and on the event.
//! * **Namespacing**: record keys are `{prefix}:r:{len}:{tenant}{len}:{method}{key}` — the
//!   length prefixes make the (tenant, method, key) → Redis key mapping injective, so
//!   tenants and methods cannot collide whatever characters they contain.
//! * **Reconnects** through `redis::aio::ConnectionManager`; while Redis is unreachable every
//!   call fails fast with a `StoreError` (the gateway answers `-32004`), and the next call
//!   after Redis returns succeeds.
//! * Events: a hash per event and a sorted set of pending event ids (by creation time).

use std::time::Duration;

use oncerpc_core::BoxFuture;
use oncerpc_core::store::{
    AcquireKind, Claim, ClaimRequest, Event, EventStatus, Record, RecordKey, RecordState, Store, StoreError,
    StoredOutcome, now_ms,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script, Value};

/// The claim state machine of `oncerpc_core::store::decide`, in Lua.
const CLAIM: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'fp', 'state', 'outcome', 'lease')
local fp, state, outcome, lease = rec[1], rec[2], rec[3], rec[4]
local function acquire(kind)
  local token = redis.call('INCR', KEYS[2])
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'state', 'p', 'token', token,
             'lease', now + tonumber(ARGV[3]), 'expires', now + tonumber(ARGV[4]))
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {'acquired', token, kind}
end
if not fp then return acquire('fresh') end
if fp ~= ARGV[1] then return {'mismatch'} end
if state == 'p' then
  local l = tonumber(lease)
  if l > now then return {'inprogress', l - now} end
  return acquire('takeover')
end
if ARGV[2] == '1' then
  if state == 's' then return {'refused'} end
  return acquire('force')
end
return {'done', state, outcome}
"#;

/// Store an outcome if `token` still owns the processing record.
const COMPLETE: &str = r#"
local rec = redis.call('HMGET', KEYS[1], 'state', 'token')
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'outcome', ARGV[3], 'expires', now + tonumber(ARGV[4]))
redis.call('HDEL', KEYS[1], 'lease')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"#;

/// Drop the processing record if `token` still owns it.
const RELEASE: &str = r#"
local rec = redis.call('HMGET', KEYS[1], 'state', 'token')
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"#;

/// A Redis-backed [`Store`].
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    prefix: String,
    claim: Script,
    complete: Script,
    release: Script,
}

impl RedisStore {
    /// Connect to `url` (`redis://host:port[/db]`); keys are namespaced under `prefix`.
    pub async fn connect(url: &str, prefix: &str) -> Result<RedisStore, StoreError> {
        let client =
            redis::Client::open(url).map_err(|e| StoreError::new(format!("redis url {url}: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| StoreError::new(format!("redis {url}: {e}")))?;
        Ok(RedisStore {
            conn,
            prefix: prefix.to_owned(),
            claim: Script::new(CLAIM),
            complete: Script::new(COMPLETE),
            release: Script::new(RELEASE),
        })
    }

    fn record_key(&self, k: &RecordKey) -> String {
        format!("{}:r:{}:{}{}:{}{}", self.prefix, k.tenant.len(), k.tenant, k.method.len(), k.method, k.key)
    }

    fn token_key(&self) -> String {
        format!("{}:tokens", self.prefix)
    }

    fn event_key(&self, id: &str) -> String {
        format!("{}:e:{id}", self.prefix)
    }

    fn pending_key(&self) -> String {
        format!("{}:pending", self.prefix)
    }
}

fn err(e: redis::RedisError) -> StoreError {
    StoreError::new(format!("redis: {e}"))
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => text(other)?.parse().ok(),
    }
}

fn outcome(state: &str, json: String) -> StoredOutcome {
    if state == "s" { StoredOutcome::Succeeded(json) } else { StoredOutcome::Failed(json) }
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
            Claim::Done(outcome(&state, json))
        }
        _ => return Err(bad()),
    })
}

const EVENT_FIELDS: [&str; 11] = [
    "tenant",
    "method",
    "key",
    "fp",
    "params",
    "return_step",
    "tags",
    "status",
    "outcome",
    "created",
    "updated",
];

impl Store for RedisStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let reply: Value = self
                .claim
                .key(self.record_key(req.key))
                .key(self.token_key())
                .arg(req.fingerprint)
                .arg(if req.force_retry { "1" } else { "0" })
                .arg(req.lease.as_millis() as u64)
                .arg(req.ttl.as_millis().max(1) as u64)
                .invoke_async(&mut conn)
                .await
                .map_err(err)?;
            parse_claim(reply)
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
            let mut conn = self.conn.clone();
            let state = match outcome {
                StoredOutcome::Succeeded(_) => "s",
                StoredOutcome::Failed(_) => "f",
            };
            let done: i64 = self
                .complete
                .key(self.record_key(key))
                .arg(token)
                .arg(state)
                .arg(outcome.json())
                .arg(ttl.as_millis().max(1) as u64)
                .invoke_async(&mut conn)
                .await
                .map_err(err)?;
            Ok(done == 1)
        })
    }

    fn release<'a>(&'a self, key: &'a RecordKey, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let done: i64 = self
                .release
                .key(self.record_key(key))
                .arg(token)
                .invoke_async(&mut conn)
                .await
                .map_err(err)?;
            Ok(done == 1)
        })
    }

    fn get<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let v: Vec<Value> = redis::cmd("HMGET")
                .arg(self.record_key(key))
                .arg(&["fp", "state", "outcome", "token", "lease", "expires"][..])
                .query_async(&mut conn)
                .await
                .map_err(err)?;
            let Some(fingerprint) = v.first().and_then(text) else { return Ok(None) };
            let state = v.get(1).and_then(text).unwrap_or_default();
            let state = match state.as_str() {
                "p" => RecordState::Processing { lease_until_ms: v.get(4).and_then(int).unwrap_or(0) },
                s => RecordState::Done(outcome(s, v.get(2).and_then(text).unwrap_or_default())),
            };
            Ok(Some(Record {
                fingerprint,
                state,
                token: v.get(3).and_then(int).unwrap_or(0),
                expires_at_ms: v.get(5).and_then(int).unwrap_or(0),
            }))
        })
    }

    fn put_event<'a>(&'a self, e: &'a Event) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let key = self.event_key(&e.id);
            let ttl = e.expires_at_ms.saturating_sub(now_ms()).max(1);
            let (status, out) = event_status(e.status, e.outcome.as_ref());
            let tags = serde_json::to_string(&e.tags).unwrap_or_else(|_| "[]".into());
            let mut pipe = redis::pipe();
            pipe.atomic().del(&key).hset_multiple(
                &key,
                &[
                    ("tenant", e.record.tenant.to_string()),
                    ("method", e.record.method.to_string()),
                    ("key", e.record.key.to_string()),
                    ("fp", e.fingerprint.clone()),
                    ("tags", tags),
                    ("status", status.to_owned()),
                    ("created", e.created_at_ms.to_string()),
                    ("updated", e.updated_at_ms.to_string()),
                    ("expires", e.expires_at_ms.to_string()),
                ],
            );
            if let Some(p) = &e.params {
                pipe.hset(&key, "params", p);
            }
            if let Some(r) = &e.return_step {
                pipe.hset(&key, "return_step", r);
            }
            if let Some(o) = out {
                pipe.hset(&key, "outcome", o);
            }
            pipe.pexpire(&key, ttl as i64);
            if e.status == EventStatus::Processing {
                pipe.zadd(self.pending_key(), &e.id, e.created_at_ms);
            } else {
                pipe.zrem(self.pending_key(), &e.id);
            }
            pipe.query_async::<()>(&mut conn).await.map_err(err)
        })
    }

    fn get_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            load_event(&mut conn, &self.event_key(id), id).await
        })
    }

    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        outcome: &'a StoredOutcome,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let key = self.event_key(id);
            let (status, out) = event_status(oncerpc_core::store::status_of(outcome), Some(outcome));
            // Only an existing event is updated (HSET on a missing key would create one
            // without expiry).
            let exists: bool = conn.exists(&key).await.map_err(err)?;
            if exists {
                redis::pipe()
                    .atomic()
                    .hset(&key, "status", status)
                    .hset(&key, "outcome", out.unwrap_or_default())
                    .hset(&key, "updated", now_ms())
                    .zrem(self.pending_key(), id)
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(err)?;
            } else {
                let _: () = conn.zrem(self.pending_key(), id).await.map_err(err)?;
            }
            Ok(())
        })
    }

    fn restart_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let key = self.event_key(id);
            let created: Option<u64> = conn.hget(&key, "created").await.map_err(err)?;
            if let Some(created) = created {
                redis::pipe()
                    .atomic()
                    .hset(&key, "status", "processing")
                    .hdel(&key, "outcome")
                    .hset(&key, "updated", now_ms())
                    .zadd(self.pending_key(), id, created)
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(err)?;
            }
            Ok(())
        })
    }

    fn pending_events(&self, limit: usize) -> BoxFuture<'_, Result<Vec<Event>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let ids: Vec<String> =
                conn.zrange(self.pending_key(), 0, limit.saturating_sub(1) as isize).await.map_err(err)?;
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                match load_event(&mut conn, &self.event_key(&id), &id).await? {
                    Some(e) if e.status == EventStatus::Processing => out.push(e),
                    // Expired or finished: drop it from the index.
                    _ => {
                        let _: () = conn.zrem(self.pending_key(), &id).await.map_err(err)?;
                    }
                }
            }
            Ok(out)
        })
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
}

fn event_status(status: EventStatus, outcome: Option<&StoredOutcome>) -> (&'static str, Option<&str>) {
    (status.as_str(), outcome.map(StoredOutcome::json))
}

async fn load_event(conn: &mut ConnectionManager, key: &str, id: &str) -> Result<Option<Event>, StoreError> {
    let v: Vec<Option<String>> =
        redis::cmd("HMGET").arg(key).arg(&EVENT_FIELDS[..]).query_async(conn).await.map_err(err)?;
    let field = |i: usize| v.get(i).cloned().flatten();
    let Some(tenant) = field(0) else { return Ok(None) };
    let status = field(7).and_then(|s| EventStatus::parse(&s)).unwrap_or(EventStatus::Processing);
    let outcome = field(8).filter(|o| !o.is_empty()).map(|o| match status {
        EventStatus::Failed => StoredOutcome::Failed(o),
        _ => StoredOutcome::Succeeded(o),
    });
    let expires: Option<u64> = conn.hget(key, "expires").await.map_err(err)?;
    Ok(Some(Event {
        id: id.to_owned(),
        record: RecordKey::new(tenant, field(1).unwrap_or_default(), field(2).unwrap_or_default()),
        fingerprint: field(3).unwrap_or_default(),
        params: field(4),
        return_step: field(5),
        tags: field(6).and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default(),
        status,
        outcome: if status == EventStatus::Processing { None } else { outcome },
        created_at_ms: field(9).and_then(|c| c.parse().ok()).unwrap_or(0),
        updated_at_ms: field(10).and_then(|c| c.parse().ok()).unwrap_or(0),
        expires_at_ms: expires.unwrap_or(0),
    }))
}
