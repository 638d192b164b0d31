//! The store's operations as the writer thread runs them: one SQL transaction may apply many
//! (`writer.rs` groups them); each reads and writes through the rules of `oncerpc_core::store`.

use std::time::Duration;

use oncerpc_core::store::{
    Claim, ClaimRequest, Event, EventFilter, EventStatus, Record, RecordKey, RecordState, Release,
    StoredOutcome, TakeOver, decide, decide_complete, decide_release, decide_renew, decide_step, expiry,
    journal_from_json, journal_to_json, status_of,
};
use rusqlite::{CachedStatement, OptionalExtension, Statement, Transaction, params};

pub(crate) enum Op {
    Claim { key: RecordKey, fingerprint: String, force_retry: bool, lease: Duration, ttl: Duration },
    Renew { key: RecordKey, token: u64, lease: Duration },
    PutStep { key: RecordKey, token: u64, step: u32, output: String, lease: Duration },
    Complete { key: RecordKey, token: u64, outcome: StoredOutcome, ttl: Duration },
    Release { key: RecordKey, token: u64 },
    Get { key: RecordKey },
    PutEvent(Box<Event>),
    GetEvent(String),
    FinishEvent { id: String, token: u64, outcome: StoredOutcome },
    RestartEvent { id: String, token: u64 },
    PutEventSteps { id: String, token: u64, steps: String },
    PendingEvents { after: Option<(u64, String)>, limit: usize },
    ListEvents { tenant: String, filter: EventFilter, after: Option<(u64, String)>, limit: usize },
}

pub(crate) enum Done {
    Claim(Claim),
    Bool(bool),
    Record(Option<Record>),
    Events(Vec<Event>),
}

impl Done {
    pub(crate) fn claim(self) -> Option<Claim> {
        if let Done::Claim(c) = self { Some(c) } else { None }
    }

    pub(crate) fn bool(self) -> Option<bool> {
        if let Done::Bool(b) = self { Some(b) } else { None }
    }

    pub(crate) fn record(self) -> Option<Option<Record>> {
        if let Done::Record(r) = self { Some(r) } else { None }
    }

    pub(crate) fn events(self) -> Option<Vec<Event>> {
        if let Done::Events(v) = self { Some(v) } else { None }
    }
}

pub(crate) fn apply<'c>(
    tx: &'c Transaction<'_>,
    group: &mut Group<'c>,
    op: &Op,
    now: u64,
) -> rusqlite::Result<Done> {
    let tokens = &mut group.tokens;
    match op {
        Op::Claim { key, fingerprint, force_retry, lease, ttl } => {
            let req = ClaimRequest { key, fingerprint, force_retry: *force_retry, lease: *lease, ttl: *ttl };
            // The common case in one statement: no record, the key is this claim's.
            let token = tokens.upcoming(tx)?;
            if let (claim, Some(rec)) = decide(None, &req, now, || token)
                && write(
                    cached(&mut group.insert, tx, INSERT_NEW)?,
                    key,
                    &rec,
                    rec.expires_at_ms + slack(*ttl),
                    now,
                )? == 1
            {
                tokens.take(token);
                return Ok(Done::Claim(claim));
            }
            let existing = load(tx, key)?;
            let (claim, new) = decide(existing.as_ref(), &req, now, || {
                tokens.take(token);
                token
            });
            if let Some(rec) = new {
                save(tx, key, &rec, now)?;
            }
            Ok(Done::Claim(claim))
        }
        Op::Renew { key, token, lease } => {
            let renewed = decide_renew(load(tx, key)?.as_ref(), *token, *lease, now);
            if let Some(rec) = &renewed {
                save(tx, key, rec, now)?;
            }
            Ok(Done::Bool(renewed.is_some()))
        }
        Op::PutStep { key, token, step, output, lease } => {
            let stored = decide_step(load(tx, key)?.as_ref(), *token, *step, output, *lease, now);
            if let Some(rec) = &stored {
                save(tx, key, rec, now)?;
            }
            Ok(Done::Bool(stored.is_some()))
        }
        Op::Complete { key, token, outcome, ttl } => {
            // The common case: the processing record is still this token's.
            if finish(tx, group, key, *token, outcome, *ttl, now)? {
                return Ok(Done::Bool(true));
            }
            match decide_complete(load(tx, key)?.as_ref(), *token, outcome, *ttl, now) {
                Some(Some(rec)) => {
                    save(tx, key, &rec, now)?;
                    Ok(Done::Bool(true))
                }
                // The same outcome already landed under this token.
                Some(None) => Ok(Done::Bool(true)),
                None => Ok(Done::Bool(false)),
            }
        }
        Op::Release { key, token } => match decide_release(load(tx, key)?.as_ref(), *token) {
            Release::Delete => {
                delete(tx, key)?;
                Ok(Done::Bool(true))
            }
            Release::Withdraw(rec) => {
                save(tx, key, &rec, now)?;
                Ok(Done::Bool(true))
            }
            Release::Refused => Ok(Done::Bool(false)),
        },
        Op::Get { key } => Ok(Done::Record(load(tx, key)?.filter(|r| r.expires_at_ms > now))),
        Op::PutEvent(e) => Ok(Done::Bool(put_event(tx, e, now)?)),
        Op::GetEvent(id) => {
            let sql = format!("{EVENT_SELECT} WHERE id = ?1 AND expires_at > ?2");
            let e = tx.prepare_cached(&sql)?.query_row(params![id, now as i64], event_row).optional()?;
            Ok(Done::Events(e.into_iter().collect()))
        }
        Op::FinishEvent { id, token, outcome } => {
            let (status, outcome) = event_columns(status_of(outcome), Some(outcome));
            let n = tx
                .prepare_cached(
                    "UPDATE events SET status = ?3, outcome = ?4, updated_at = ?5 WHERE id = ?1 AND token = ?2",
                )?
                .execute(params![id, *token as i64, status, outcome, now as i64])?;
            Ok(Done::Bool(n > 0))
        }
        Op::PutEventSteps { id, token, steps } => {
            let n = tx
                .prepare_cached("UPDATE events SET steps = ?3, updated_at = ?4 WHERE id = ?1 AND token = ?2")?
                .execute(params![id, *token as i64, steps, now as i64])?;
            Ok(Done::Bool(n == 1))
        }
        Op::RestartEvent { id, token } => {
            let n = tx
                .prepare_cached(
                    "UPDATE events SET status = 0, outcome = NULL, token = ?2, updated_at = ?3
                     WHERE id = ?1 AND token < ?2",
                )?
                .execute(params![id, *token as i64, now as i64])?;
            Ok(Done::Bool(n > 0))
        }
        Op::PendingEvents { after, limit } => {
            // After the cursor's (created_at, id); without one, from before the first possible.
            let (after_at, after_id) = after.as_ref().map_or((i64::MIN, ""), |(at, id)| (*at as i64, id));
            let sql = format!(
                "{EVENT_SELECT} WHERE status = 0 AND expires_at > ?1 AND (created_at, id) > (?2, ?3)
                 ORDER BY created_at, id LIMIT ?4"
            );
            let mut stmt = tx.prepare_cached(&sql)?;
            let rows = stmt.query_map(params![now as i64, after_at, after_id, *limit as i64], event_row)?;
            Ok(Done::Events(rows.collect::<rusqlite::Result<Vec<_>>>()?))
        }
        Op::ListEvents { tenant, filter, after, limit } => {
            // Before the cursor's (created_at, id); without one, from after the last possible.
            let (before_at, before_id) = after.as_ref().map_or((i64::MAX, ""), |(at, id)| (*at as i64, id));
            let sql = format!(
                "{EVENT_SELECT} WHERE tenant = ?1 AND expires_at > ?2
                   AND (created_at < ?3 OR (created_at = ?3 AND (?4 = '' OR id < ?4)))
                   AND (?5 IS NULL OR status = ?5) AND (?6 IS NULL OR method = ?6)
                   AND (?7 IS NULL OR EXISTS (SELECT 1 FROM json_each(events.tags) WHERE value = ?7))
                 ORDER BY created_at DESC, id DESC LIMIT ?8"
            );
            let mut stmt = tx.prepare_cached(&sql)?;
            let status = filter.status.map(|s| event_columns(s, None).0);
            let rows = stmt.query_map(
                params![
                    tenant,
                    now as i64,
                    before_at,
                    before_id,
                    status,
                    filter.method,
                    filter.tag,
                    *limit as i64 + 1
                ],
                event_row,
            )?;
            Ok(Done::Events(rows.collect::<rusqlite::Result<Vec<_>>>()?))
        }
    }
}

/// What the operations of one transaction share: the fencing-token counter, and the two
/// statements of a new key (its claim's insert, its completion's update) taken from
/// rusqlite's statement cache once per transaction instead of once per operation (each
/// lookup hashes the statement's text, and each return to the cache hashes it again).
#[derive(Default)]
pub(crate) struct Group<'c> {
    pub(crate) tokens: Tokens,
    insert: Option<CachedStatement<'c>>,
    keep: Option<CachedStatement<'c>>,
    finish: Option<CachedStatement<'c>>,
}

/// `slot`'s statement, taken from the cache at the first use in the transaction.
fn cached<'s, 'c>(
    slot: &'s mut Option<CachedStatement<'c>>,
    tx: &'c Transaction<'_>,
    sql: &str,
) -> rusqlite::Result<&'s mut CachedStatement<'c>> {
    if slot.is_none() {
        *slot = Some(tx.prepare_cached(sql)?);
    }
    Ok(slot.as_mut().expect("set above"))
}

/// The fencing tokens of one transaction: one counter for every key, so tokens never repeat,
/// whatever was deleted. Read at the first claim that needs it, counted here, and written back
/// once before the commit ([`Tokens::save`]): `BEGIN IMMEDIATE` holds the database's write
/// lock for the whole transaction, so no other writer can draw a token meanwhile.
#[derive(Default)]
pub(crate) struct Tokens {
    last: Option<u64>,
    drawn: bool,
}

impl Tokens {
    /// The token the next claim that acquires gets.
    fn upcoming(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<u64> {
        let last = match self.last {
            Some(last) => last,
            None => *self.last.insert(
                tx.prepare_cached("SELECT last FROM token_counter WHERE id = 0")?
                    .query_row([], |row| row.get::<_, i64>(0))? as u64,
            ),
        };
        Ok(last + 1)
    }

    /// `token` (the [`Tokens::upcoming`] one) is drawn.
    fn take(&mut self, token: u64) {
        self.last = Some(token);
        self.drawn = true;
    }

    /// Write the last token drawn back to the counter, in the transaction that drew it.
    pub(crate) fn save(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        if let (true, Some(last)) = (self.drawn, self.last) {
            tx.prepare_cached("UPDATE token_counter SET last = ?1 WHERE id = 0")?.execute([last as i64])?;
        }
        Ok(())
    }
}

const EVENT_SELECT: &str = "SELECT id, tenant, method, key, fingerprint, params, return_step, tags, status,
    outcome, created_at, updated_at, expires_at, token, steps, created_by FROM events";

/// [`Store::put_event`]: create, or replace an expired event or an older execution's (keeping
/// a live one's creation time and creator); whether it was written.
fn put_event(tx: &Transaction<'_>, e: &Event, now: u64) -> rusqlite::Result<bool> {
    let (status, outcome) = event_columns(e.status, e.outcome.as_ref());
    let tags = serde_json::to_string(&e.tags).unwrap_or_else(|_| "[]".into());
    let n = tx
        .prepare_cached(
            "INSERT INTO events (id, tenant, method, key, fingerprint, params, return_step, tags,
           status, outcome, created_at, updated_at, expires_at, token, steps, created_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?17)
         ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant, method = excluded.method,
           key = excluded.key, fingerprint = excluded.fingerprint, params = excluded.params,
           return_step = excluded.return_step, tags = excluded.tags, status = excluded.status,
           outcome = excluded.outcome,
           created_at = CASE WHEN events.expires_at > ?16 THEN events.created_at ELSE excluded.created_at END,
           created_by = CASE WHEN events.expires_at > ?16 THEN events.created_by ELSE excluded.created_by END,
           updated_at = excluded.updated_at, expires_at = excluded.expires_at, token = excluded.token,
           steps = excluded.steps
         WHERE events.expires_at <= ?16 OR events.token < excluded.token",
        )?
        .execute(params![
            e.id,
            &*e.record.tenant,
            &*e.record.method,
            &*e.record.key,
            e.fingerprint,
            e.params,
            e.return_step,
            tags,
            status,
            outcome,
            e.created_at_ms as i64,
            e.updated_at_ms as i64,
            e.expires_at_ms as i64,
            e.token as i64,
            e.steps,
            now as i64,
            e.created_by,
        ])?;
    Ok(n > 0)
}

fn event_columns(status: EventStatus, outcome: Option<&StoredOutcome>) -> (i64, Option<&str>) {
    let code = match status {
        EventStatus::Processing => 0,
        EventStatus::Succeeded => 1,
        EventStatus::Failed => 2,
        EventStatus::Cancelled => 3,
    };
    (code, outcome.map(StoredOutcome::json))
}

fn event_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    let status: i64 = row.get(8)?;
    let outcome: Option<String> = row.get(9)?;
    let (status, outcome) = match (status, outcome) {
        (1, Some(o)) => (EventStatus::Succeeded, Some(StoredOutcome::Succeeded(o))),
        (2, Some(o)) => (EventStatus::Failed, Some(StoredOutcome::Failed(o))),
        (3, Some(o)) => (EventStatus::Cancelled, Some(StoredOutcome::Failed(o))),
        _ => (EventStatus::Processing, None),
    };
    let tags: String = row.get(7)?;
    Ok(Event {
        id: row.get(0)?,
        record: RecordKey::new(row.get::<_, String>(1)?, row.get::<_, String>(2)?, row.get::<_, String>(3)?),
        fingerprint: row.get(4)?,
        params: row.get(5)?,
        return_step: row.get(6)?,
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        status,
        outcome,
        created_at_ms: row.get::<_, i64>(10)? as u64,
        updated_at_ms: row.get::<_, i64>(11)? as u64,
        expires_at_ms: row.get::<_, i64>(12)? as u64,
        token: row.get::<_, i64>(13)? as u64,
        steps: row.get(14)?,
        created_by: row.get(15)?,
    })
}

fn load(tx: &Transaction<'_>, key: &RecordKey) -> rusqlite::Result<Option<Record>> {
    tx.prepare_cached(
        "SELECT fingerprint, state, outcome, token, lease_until, expires_at, takeover_token, takeover_until,
                steps
         FROM idempotency_records WHERE tenant = ?1 AND method = ?2 AND key = ?3",
    )?
    .query_row(params![&*key.tenant, &*key.method, &*key.key], |row| {
        let state: i64 = row.get(1)?;
        let outcome: Option<String> = row.get(2)?;
        let lease_until: i64 = row.get(4)?;
        let state = match (state, outcome) {
            (1, Some(o)) => RecordState::Done(StoredOutcome::Succeeded(o)),
            (2, Some(o)) => RecordState::Done(StoredOutcome::Failed(o)),
            _ => RecordState::Processing { lease_until_ms: lease_until as u64 },
        };
        let takeover = match (row.get::<_, Option<i64>>(6)?, row.get::<_, Option<i64>>(7)?) {
            (Some(token), Some(until)) => Some(TakeOver { token: token as u64, until_ms: until as u64 }),
            _ => None,
        };
        Ok(Record {
            fingerprint: row.get(0)?,
            state,
            token: row.get::<_, i64>(3)? as u64,
            expires_at_ms: row.get::<_, i64>(5)? as u64,
            takeover,
            steps: journal_from_json(row.get::<_, Option<String>>(8)?.as_deref()),
        })
    })
    .optional()
}

/// The columns of a record and their placeholders, for [`write`].
macro_rules! record_columns {
    () => {
        " (tenant, method, key, fingerprint, state, outcome, token, lease_until, expires_at, updated_at,
            takeover_token, takeover_until, steps)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
    };
}

/// Insert or replace `key`'s record.
fn save(tx: &Transaction<'_>, key: &RecordKey, rec: &Record, now: u64) -> rusqlite::Result<()> {
    const UPSERT: &str = concat!(
        "INSERT INTO idempotency_records",
        record_columns!(),
        " ON CONFLICT (key, method, tenant) DO UPDATE SET
           fingerprint = excluded.fingerprint, state = excluded.state, outcome = excluded.outcome,
           token = excluded.token, lease_until = excluded.lease_until,
           expires_at = excluded.expires_at, updated_at = excluded.updated_at,
           takeover_token = excluded.takeover_token, takeover_until = excluded.takeover_until,
           steps = excluded.steps"
    );
    write(&mut *tx.prepare_cached(UPSERT)?, key, rec, rec.expires_at_ms, now).map(drop)
}

/// Insert a record if its key has none (not even an expired one). A fresh claim's record goes in
/// with an expiry [`slack`] later than its own, so that a completion within the slack keeps it
/// ([`FINISH_KEEP`]).
const INSERT_NEW: &str = concat!(
    "INSERT INTO idempotency_records",
    record_columns!(),
    " ON CONFLICT (key, method, tenant) DO NOTHING"
);

/// How much longer than its TTL a finished record may be kept: 1 % of the TTL, at most a
/// minute. A fresh claim's record expires this much after `now + ttl`; an outcome stored
/// within this time of its claim keeps that expiry, so the completion's `UPDATE` leaves the
/// `expires_at` index alone (docs/ARCHITECTURE.md, "SQLite expiry slack").
fn slack(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64 / 100).min(60_000)
}

/// [`finish`]'s statement.
const FINISH: &str =
    "UPDATE idempotency_records SET state = ?5, outcome = ?6, lease_until = 0, expires_at = ?7,
               updated_at = ?8, takeover_token = NULL, takeover_until = NULL, steps = NULL
             WHERE tenant = ?1 AND method = ?2 AND key = ?3 AND token = ?4 AND state = 0";

/// [`FINISH`] for a record whose expiry already lies between `now + ttl` (`?7`) and the slack
/// after it (`?9`): kept, so the `expires_at` index is not rewritten.
const FINISH_KEEP: &str = "UPDATE idempotency_records SET state = ?5, outcome = ?6, lease_until = 0,
               updated_at = ?8, takeover_token = NULL, takeover_until = NULL, steps = NULL
             WHERE tenant = ?1 AND method = ?2 AND key = ?3 AND token = ?4 AND state = 0
               AND expires_at BETWEEN ?7 AND ?9";

/// `decide_complete`'s common case: the record is processing under `token`; whether it was.
/// The columns written are those `save` writes for the finished record. Stored within the
/// slack of its claim, the outcome keeps the claim's expiry ([`FINISH_KEEP`], which leaves the
/// index of expiries alone); else its expiry is written ([`FINISH`]).
fn finish<'c>(
    tx: &'c Transaction<'_>,
    group: &mut Group<'c>,
    key: &RecordKey,
    token: u64,
    outcome: &StoredOutcome,
    ttl: Duration,
    now: u64,
) -> rusqlite::Result<bool> {
    let (state, outcome) = done_columns(outcome);
    let (tenant, method, k) = (&*key.tenant, &*key.method, &*key.key);
    let (token, expires_at) = (token as i64, expiry(now, 0, ttl));
    let (at, until, now) = (expires_at as i64, (expires_at + slack(ttl)) as i64, now as i64);
    let keep = cached(&mut group.keep, tx, FINISH_KEEP)?;
    if keep.execute(params![tenant, method, k, token, state, outcome, at, now, until])? == 1 {
        return Ok(true);
    }
    let write = cached(&mut group.finish, tx, FINISH)?;
    Ok(write.execute(params![tenant, method, k, token, state, outcome, at, now])? == 1)
}

/// A finished record's `state` column (1 succeeded, 2 failed; 0 is processing) and outcome.
fn done_columns(outcome: &StoredOutcome) -> (i64, &str) {
    match outcome {
        StoredOutcome::Succeeded(o) => (1, o),
        StoredOutcome::Failed(o) => (2, o),
    }
}

/// Run `sql` (an insert of [`record_columns`]) with `rec`'s values and `expires_at`; the rows it
/// changed.
fn write(
    stmt: &mut Statement<'_>,
    key: &RecordKey,
    rec: &Record,
    expires_at: u64,
    now: u64,
) -> rusqlite::Result<usize> {
    let (state, outcome, lease_until) = match &rec.state {
        RecordState::Processing { lease_until_ms } => (0i64, None, *lease_until_ms as i64),
        RecordState::Done(done) => {
            let (state, outcome) = done_columns(done);
            (state, Some(outcome), 0)
        }
    };
    stmt.execute(params![
        &*key.tenant,
        &*key.method,
        &*key.key,
        rec.fingerprint,
        state,
        outcome,
        rec.token as i64,
        lease_until,
        expires_at as i64,
        now as i64,
        rec.takeover.map(|t| t.token as i64),
        rec.takeover.map(|t| t.until_ms as i64),
        journal_to_json(&rec.steps),
    ])
}

fn delete(tx: &Transaction<'_>, key: &RecordKey) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM idempotency_records WHERE tenant = ?1 AND method = ?2 AND key = ?3")?
        .execute(params![&*key.tenant, &*key.method, &*key.key])?;
    Ok(())
}
