//! The Lua scripts: each record or event operation is one script, so its read-decide-write
//! is one atomic step inside Redis (see the crate's documentation for the rules they keep).

/// Helpers every script starts with.
macro_rules! lua_prelude {
    () => {
        r#"
-- Numbers as decimal text without exponent (tokens in µs exceed %.14g).
local function num(n) return string.format('%.0f', n) end
-- The store clock: (milliseconds, microseconds) since the epoch.
local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end
-- `a > b` for canonical decimal strings of any u64.
local function gt(a, b) return #a > #b or (#a == #b and a > b) end
-- Make the record expire at `at` (field and Redis expiry).
local function expire_at(key, at, now)
  redis.call('HSET', key, 'expires', num(at))
  redis.call('PEXPIRE', key, num(math.max(at - now, 1)))
end
"#
    };
}

/// The claim state machine of `oncerpc_core::store::decide`.
/// KEYS: record, token key. ARGV: fingerprint, force ('1'/'0'), lease ms, ttl ms,
/// take-over window ms, token key lifetime ms.
///
/// Every `redis.call` costs the server about as much as the command itself (measured in
/// docs/BENCHMARKS.md), so the fresh claim, the common path, makes five: `TIME`, `HMGET`, the
/// token key's `SET … GET` (Redis ≥ 6.2) and the record's `HSET` and `PEXPIRE`.
pub(crate) const CLAIM: &str = concat!(
    lua_prelude!(),
    r#"
local now, micros = clock()
local rec = redis.call('HMGET', KEYS[1], 'fp', 'state', 'outcome', 'lease', 'tu', 'expires')
local fp, state = rec[1], rec[2]
local lease, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
-- Above every token this key ever had: the token key outlives the record, and once it is
-- gone too the clock has moved past them. Read and written in one call: the clock is the
-- token unless the key's last one is not below it (then one more call).
local function next_token()
  local token = num(micros)
  local last = tonumber(redis.call('SET', KEYS[2], token, 'PX', ARGV[6], 'GET'))
  if last and last >= micros then
    token = num(last + 1)
    redis.call('SET', KEYS[2], token, 'PX', ARGV[6])
  end
  return token
end
-- One HSET with every field and one PEXPIRE; a fresh claim has no record to delete.
local function owned(kind)
  local token = next_token()
  local lease_end = now + lease
  local at = math.max(now + ttl, lease_end)
  if kind ~= 'fresh' then redis.call('DEL', KEYS[1]) end
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'state', 'p', 'token', token, 'lease', num(lease_end),
    'expires', num(at))
  redis.call('PEXPIRE', KEYS[1], num(math.max(at - now, 1)))
  return {'acquired', token, kind}
end
if not fp then return owned('fresh') end
if fp ~= ARGV[1] then return {'mismatch'} end
if state == 'p' then
  local lease_end = tonumber(rec[4])
  if lease_end > now then return {'inprogress', num(lease_end - now)} end
  local tu = tonumber(rec[5])
  if tu and tu > now then return {'inprogress', num(tu - now)} end
  local token = next_token()
  tu = now + tonumber(ARGV[5])
  redis.call('HSET', KEYS[1], 'tt', token, 'tu', num(tu))
  expire_at(KEYS[1], math.max(tonumber(rec[6]) or 0, tu), now)
  return {'acquired', token, 'takeover'}
end
if ARGV[2] == '1' then
  if state == 's' then return {'refused'} end
  return owned('force')
end
-- A finished record's expiry is its key's (its `expires` field is the processing one).
return {'done', state, rec[3], math.max(redis.call('PTTL', KEYS[1]), 0)}
"#
);

/// `decide_renew`: the owner's heartbeat or a take-over's confirmation.
/// KEYS: record. ARGV: token, lease ms.
pub(crate) const RENEW: &str = concat!(
    lua_prelude!(),
    r#"
local rec = redis.call('HMGET', KEYS[1], 'state', 'token', 'tt', 'expires')
if rec[1] ~= 'p' or (rec[2] ~= ARGV[1] and rec[3] ~= ARGV[1]) then return 0 end
local now = clock()
local lease_end = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'lease', num(lease_end))
redis.call('HDEL', KEYS[1], 'tt', 'tu')
expire_at(KEYS[1], math.max(tonumber(rec[4]) or 0, lease_end), now)
return 1
"#
);

/// `decide_step`: the owner of a live processing record adds a step's output to its journal
/// (field `steps`, a JSON object of step index → output string) and renews as RENEW does.
/// KEYS: record. ARGV: token, lease ms, step index, output JSON.
pub(crate) const PUT_STEP: &str = concat!(
    lua_prelude!(),
    r#"
local rec = redis.call('HMGET', KEYS[1], 'state', 'token', 'expires', 'steps')
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then return 0 end
local now = clock()
local lease_end = now + tonumber(ARGV[2])
local steps = {}
if rec[4] then steps = cjson.decode(rec[4]) end
steps[ARGV[3]] = ARGV[4]
redis.call('HSET', KEYS[1], 'lease', num(lease_end), 'steps', cjson.encode(steps))
redis.call('HDEL', KEYS[1], 'tt', 'tu')
expire_at(KEYS[1], math.max(tonumber(rec[3]) or 0, lease_end), now)
return 1
"#
);

/// `decide_complete`: store the outcome if `token` owns the processing record; 1 again when
/// the same outcome already landed under it. The processing fields are left in place (a
/// finished record's `lease` and `expires` are never read: its expiry is the key's own, set
/// relative to now, so the completion needs no `TIME`); a take-over's and a journal's are
/// deleted, in a call made only when they are there. Three calls on the common path.
/// KEYS: record. ARGV: token, state ('s'/'f'), outcome JSON, ttl ms.
pub(crate) const COMPLETE: &str = r#"
local rec = redis.call('HMGET', KEYS[1], 'state', 'token', 'outcome', 'tt', 'steps')
if rec[2] ~= ARGV[1] then return 0 end
if rec[1] == 'p' then
  redis.call('HSET', KEYS[1], 'state', ARGV[2], 'outcome', ARGV[3])
  if rec[4] or rec[5] then redis.call('HDEL', KEYS[1], 'tt', 'tu', 'steps') end
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return 1
end
if rec[1] == ARGV[2] and rec[3] == ARGV[3] then return 1 end
return 0
"#;

/// `decide_release`: the owner drops the record (its token key stays); an unconfirmed
/// take-over is withdrawn. KEYS: record. ARGV: token.
pub(crate) const RELEASE: &str = concat!(
    lua_prelude!(),
    r#"
local rec = redis.call('HMGET', KEYS[1], 'state', 'token', 'tt')
if rec[1] ~= 'p' then return 0 end
if rec[2] == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if rec[3] == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'tt', 'tu')
  return 1
end
return 0
"#
);

/// Create an event, or replace an older execution's (keeping its creation time and creator); nil when a
/// live event of a token at least as high is there. KEYS: event. ARGV: ttl ms, token, creation
/// time, then field/value pairs. Returns the creation time kept.
pub(crate) const PUT_EVENT: &str = concat!(
    lua_prelude!(),
    r#"
local cur = redis.call('HMGET', KEYS[1], 'token', 'created', 'created_by')
if cur[1] and not gt(ARGV[2], cur[1]) then return false end
local created = cur[2] or ARGV[3]
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'token', ARGV[2], 'created', created, unpack(ARGV, 4))
if cur[2] then
  -- A live event keeps its creator (or its lack of one) with its creation time.
  if cur[3] then redis.call('HSET', KEYS[1], 'created_by', cur[3])
  else redis.call('HDEL', KEYS[1], 'created_by') end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return created
"#
);

/// Finish an event if `token` is its token. KEYS: event. ARGV: token, status, outcome, updated.
pub(crate) const FINISH_EVENT: &str = concat!(
    lua_prelude!(),
    r#"
local rec = redis.call('HMGET', KEYS[1], 'status', 'token')
if not rec[1] or (rec[2] or '0') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'outcome', ARGV[3], 'updated', ARGV[4])
return 1
"#
);

/// Add an event to its tenant's listing index and make the index live at least as long as
/// the event (`PEXPIRE … GT` without needing Redis 7). KEYS: index. ARGV: member, ttl ms.
pub(crate) const INDEX_LISTED: &str = r#"
redis.call('ZADD', KEYS[1], 0, ARGV[1])
local left = redis.call('PTTL', KEYS[1])
if left < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"#;

/// Replace an event's step views if `token` is its token. KEYS: event. ARGV: token, steps,
/// updated.
pub(crate) const PUT_EVENT_STEPS: &str = concat!(
    lua_prelude!(),
    r#"
local token = redis.call('HGET', KEYS[1], 'token')
if not token or token ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'steps', ARGV[2], 'updated', ARGV[3])
return 1
"#
);

/// Run an event again under a newer token. KEYS: event. ARGV: token, updated.
pub(crate) const RESTART_EVENT: &str = concat!(
    lua_prelude!(),
    r#"
local rec = redis.call('HMGET', KEYS[1], 'status', 'token')
if not rec[1] or not gt(ARGV[1], rec[2] or '0') then return 0 end
redis.call('HSET', KEYS[1], 'status', 'processing', 'token', ARGV[1], 'updated', ARGV[2])
redis.call('HDEL', KEYS[1], 'outcome')
return 1
"#
);
