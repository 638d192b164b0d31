//! # oncerpc-store-sqlite
//!
//! The embedded default idempotency store: one SQLite file in WAL mode.
//!
//! * **Never blocks the async runtime**: one dedicated OS thread owns the connection; async
//!   callers send it operations over a channel and await a oneshot reply.
//! * **Group commit**: the thread drains every queued operation into one `BEGIN IMMEDIATE`
//!   transaction, commits once (one fsync), then replies. Under load many claims share a
//!   commit; alone, an operation commits by itself. The operations' clock (`now`) is read
//!   once the transaction holds the write lock, so a wait for another process's lock never
//!   shortens a lease.
//! * **Durable against `kill -9`** (and power loss): `synchronous = FULL`; a reply is only
//!   sent after its transaction committed.
//! * **Several processes may share a file**: `BEGIN IMMEDIATE` takes SQLite's write lock, so
//!   a claim's read-modify-write is atomic across processes too (busy timeout 5 s).
//! * **Fencing tokens** come from a one-row counter table (`token_counter`), bumped in the
//!   claim's transaction: they grow strictly for every key, also after its record was
//!   released or swept.
//! * **Take-over and renew**: an expired lease is taken over in two steps (the claim records
//!   an unconfirmed take-over next to the owner; `renew` with its token confirms it), and the
//!   live owner's `renew` extends its lease (the rules are `oncerpc_core::store`'s).
//! * Embedded migrations keyed on `PRAGMA user_version`; expired records are swept by the
//!   writer thread once a minute (a processing record never expires before its lease).
//!
//! A command answered from the file by the next process (here: the next dispatcher):
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use oncerpc_core::{Context, Dispatcher, DispatcherConfig, MethodSpec, Registry, RequestMeta, typed};
//! use oncerpc_core::protocol::RpcError;
//! use oncerpc_store_sqlite::SqliteStore;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = std::env::temp_dir().join(format!("oncerpc-sqlite-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let call = br#"{"jsonrpc":"2.0","method":"ship","params":{"order":7,"idempotency_key":"ship-7"},"id":1}"#;
//! for run in 1..=2 {
//!     let mut registry = Registry::new();
//!     let ship = typed(move |_: Context, _order: serde_json::Value| async move { Ok::<_, RpcError>(run) });
//!     registry.register("ship", MethodSpec::command(), ship).unwrap();
//!     let store = Arc::new(SqliteStore::open(dir.join("oncerpc.db")).unwrap());
//!     let dispatcher = Dispatcher::with_store(registry, DispatcherConfig::default(), store);
//!     let reply = dispatcher.handle(call, &RequestMeta::default()).await;
//!     // Both runs answer the first run's outcome: it shipped once.
//!     assert_eq!(reply.body.unwrap(), br#"{"jsonrpc":"2.0","result":1,"id":1}"#);
//!     dispatcher.shutdown(Duration::from_secs(5)).await;
//! }
//! std::fs::remove_dir_all(&dir).unwrap();
//! # });
//! ```

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use oncerpc_core::BoxFuture;
use oncerpc_core::store::{
    Claim, ClaimRequest, Event, EventFilter, EventStatus, Record, RecordKey, RecordState, Release, Store,
    StoreError, StoredOutcome, TakeOver, decide, decide_complete, decide_release, decide_renew, decide_step,
    journal_from_json, journal_to_json, list_cursor, now_ms, parse_list_cursor, parse_pending_cursor,
    pending_cursor, status_of,
};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::oneshot;

/// Most operations folded into one transaction.
const MAX_GROUP: usize = 512;
/// How often expired records are deleted.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Migrations, applied in order; `PRAGMA user_version` counts those applied.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS idempotency_records (
        tenant      TEXT    NOT NULL,
        method      TEXT    NOT NULL,
        key         TEXT    NOT NULL,
        fingerprint TEXT    NOT NULL,
        state       INTEGER NOT NULL,  -- 0 processing, 1 succeeded, 2 failed
        outcome     TEXT,
        token       INTEGER NOT NULL,
        lease_until INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL,
        PRIMARY KEY (tenant, method, key)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS idempotency_records_expires ON idempotency_records (expires_at);",
    "CREATE TABLE IF NOT EXISTS events (
        id          TEXT    NOT NULL PRIMARY KEY,
        tenant      TEXT    NOT NULL,
        method      TEXT    NOT NULL,
        key         TEXT    NOT NULL,
        fingerprint TEXT    NOT NULL,
        params      TEXT,
        return_step TEXT,
        tags        TEXT    NOT NULL,  -- JSON array of strings
        status      INTEGER NOT NULL,  -- 0 processing, 1 succeeded, 2 failed, 3 cancelled
        outcome     TEXT,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS events_pending ON events (status, created_at);
    CREATE INDEX IF NOT EXISTS events_expires ON events (expires_at);",
    // 3: an unconfirmed take-over of a processing record (both NULL: none).
    "ALTER TABLE idempotency_records ADD COLUMN takeover_token INTEGER;
    ALTER TABLE idempotency_records ADD COLUMN takeover_until INTEGER;",
    // 4: fencing tokens from one counter, so they keep growing after a record is deleted.
    // Seeded past every token in use, so that upgraded databases stay monotonic.
    "CREATE TABLE token_counter (
        id   INTEGER NOT NULL PRIMARY KEY CHECK (id = 0),
        last INTEGER NOT NULL
    );
    INSERT INTO token_counter (id, last) SELECT 0, COALESCE(MAX(token), 0) FROM idempotency_records;",
    // 5: the token that owns an event; pending events paged by (created_at, id).
    "ALTER TABLE events ADD COLUMN token INTEGER NOT NULL DEFAULT 0;
    DROP INDEX IF EXISTS events_pending;
    CREATE INDEX events_pending ON events (status, created_at, id);",
    // 6: the step journal of a processing execution (JSON, `journal_to_json`; NULL: none).
    "ALTER TABLE idempotency_records ADD COLUMN steps TEXT;
    CREATE INDEX events_by_tenant ON events (tenant, created_at, id);",
    // 7: the step views of a flow's event (JSON text, NULL: none yet).
    "ALTER TABLE events ADD COLUMN steps TEXT;",
];

enum Op {
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

enum Done {
    Claim(Claim),
    Bool(bool),
    Record(Option<Record>),
    Events(Vec<Event>),
}

impl Done {
    fn claim(self) -> Option<Claim> {
        if let Done::Claim(c) = self { Some(c) } else { None }
    }

    fn bool(self) -> Option<bool> {
        if let Done::Bool(b) = self { Some(b) } else { None }
    }

    fn record(self) -> Option<Option<Record>> {
        if let Done::Record(r) = self { Some(r) } else { None }
    }

    fn events(self) -> Option<Vec<Event>> {
        if let Done::Events(v) = self { Some(v) } else { None }
    }
}

type Reply = oneshot::Sender<Result<Done, StoreError>>;

/// A SQLite-backed [`Store`].
pub struct SqliteStore {
    tx: mpsc::Sender<(Op, Reply)>,
    path: PathBuf,
}

impl SqliteStore {
    /// Open (creating if needed) the database at `path` and start its writer thread.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        let conn = open_connection(&path).map_err(|e| StoreError::new(format!("{}: {e}", path.display())))?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("oncerpc-sqlite".into())
            .spawn(move || writer(conn, rx))
            .map_err(|e| StoreError::new(format!("cannot start the SQLite writer thread: {e}")))?;
        Ok(SqliteStore { tx, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `op` on the writer thread; `unpack` takes the answer out of its reply.
    async fn call<T>(&self, op: Op, unpack: fn(Done) -> Option<T>) -> Result<T, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send((op, reply)).map_err(|_| StoreError::new("the SQLite writer thread has stopped"))?;
        let done =
            rx.await.map_err(|_| StoreError::new("the SQLite writer thread dropped the request"))??;
        unpack(done).ok_or_else(|| StoreError::new("unexpected reply from the SQLite writer thread"))
    }
}

fn open_connection(path: &Path) -> rusqlite::Result<Connection> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    // Switching a new file to WAL can answer SQLITE_BUSY without consulting the busy handler
    // while another process does the same: retry within the busy timeout.
    let started = Instant::now();
    while let Err(e) = conn.pragma_update(None, "journal_mode", "WAL") {
        let busy = e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy);
        if !busy || started.elapsed() > Duration::from_secs(5) {
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    migrate(&mut conn)?;
    Ok(conn)
}

/// Apply pending migrations, each in its own transaction. The version is read inside each write transaction: processes
/// opening one new file at the same moment apply every migration once (some, like
/// `ALTER TABLE … ADD COLUMN`, cannot run twice).
fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    for (i, sql) in MIGRATIONS.iter().enumerate() {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version: usize = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version <= i {
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", i + 1)?;
        }
        tx.commit()?;
    }
    Ok(())
}

fn writer(mut conn: Connection, rx: mpsc::Receiver<(Op, Reply)>) {
    let mut last_sweep = Instant::now();
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(op) => group.push(op),
                Err(_) => break,
            }
        }
        let results = run_group(&mut conn, &group);
        for ((_, reply), result) in group.into_iter().zip(results) {
            let _ = reply.send(result);
        }
        if last_sweep.elapsed() >= SWEEP_EVERY {
            last_sweep = Instant::now();
            match sweep(&mut conn) {
                Ok(n) if n > 0 => tracing::debug!(deleted = n, "expired idempotency records swept"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "sweeping expired records failed"),
            }
        }
    }
    tracing::debug!("SQLite writer thread stopped");
}

/// One transaction for the whole group; nobody is answered before it commits.
fn run_group(conn: &mut Connection, group: &[(Op, Reply)]) -> Vec<Result<Done, StoreError>> {
    let fail_all = |e: rusqlite::Error| -> Vec<Result<Done, StoreError>> {
        tracing::error!(error = %e, "SQLite transaction failed");
        group.iter().map(|_| Err(StoreError::new(format!("sqlite: {e}")))).collect()
    };
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return fail_all(e),
    };
    // Only now: `BEGIN IMMEDIATE` may have waited (up to the busy timeout) for another
    // process's write lock, and a lease granted from an earlier clock would end early.
    let now = now_ms();
    let results: Vec<Result<Done, StoreError>> = group
        .iter()
        .map(|(op, _)| apply(&tx, op, now).map_err(|e| StoreError::new(format!("sqlite: {e}"))))
        .collect();
    match tx.commit() {
        Ok(()) => results,
        Err(e) => fail_all(e),
    }
}

/// Delete expired records. A processing record expires no earlier than its lease (its
/// `expires_at` is always past `lease_until`), so a live execution's record is never swept.
fn sweep(conn: &mut Connection) -> rusqlite::Result<usize> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let now = now_ms() as i64;
    let mut n = tx.execute("DELETE FROM idempotency_records WHERE expires_at <= ?1", params![now])?;
    n += tx.execute("DELETE FROM events WHERE expires_at <= ?1", params![now])?;
    tx.commit()?;
    Ok(n)
}

fn apply(tx: &Transaction<'_>, op: &Op, now: u64) -> rusqlite::Result<Done> {
    match op {
        Op::Claim { key, fingerprint, force_retry, lease, ttl } => {
            let existing = load(tx, key)?;
            let req = ClaimRequest { key, fingerprint, force_retry: *force_retry, lease: *lease, ttl: *ttl };
            // `decide` draws a token through an infallible closure: keep the SQL error for after.
            let mut failed = None;
            let (claim, new) = decide(existing.as_ref(), &req, now, || {
                next_token(tx).unwrap_or_else(|e| {
                    failed = Some(e);
                    0
                })
            });
            if let Some(e) = failed {
                return Err(e);
            }
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

/// The next fencing token: one counter for every key, so tokens never repeat, whatever was
/// deleted. Called inside the claim's transaction.
fn next_token(tx: &Transaction<'_>) -> rusqlite::Result<u64> {
    tx.prepare_cached("UPDATE token_counter SET last = last + 1 WHERE id = 0 RETURNING last")?
        .query_row([], |row| row.get::<_, i64>(0))
        .map(|t| t as u64)
}

const EVENT_SELECT: &str = "SELECT id, tenant, method, key, fingerprint, params, return_step, tags, status,
    outcome, created_at, updated_at, expires_at, token, steps FROM events";

/// [`Store::put_event`]: create, or replace an expired event or an older execution's (keeping
/// a live one's creation time); whether it was written.
fn put_event(tx: &Transaction<'_>, e: &Event, now: u64) -> rusqlite::Result<bool> {
    let (status, outcome) = event_columns(e.status, e.outcome.as_ref());
    let tags = serde_json::to_string(&e.tags).unwrap_or_else(|_| "[]".into());
    let n = tx
        .prepare_cached(
            "INSERT INTO events (id, tenant, method, key, fingerprint, params, return_step, tags,
           status, outcome, created_at, updated_at, expires_at, token, steps)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
         ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant, method = excluded.method,
           key = excluded.key, fingerprint = excluded.fingerprint, params = excluded.params,
           return_step = excluded.return_step, tags = excluded.tags, status = excluded.status,
           outcome = excluded.outcome,
           created_at = CASE WHEN events.expires_at > ?16 THEN events.created_at ELSE excluded.created_at END,
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

fn save(tx: &Transaction<'_>, key: &RecordKey, rec: &Record, now: u64) -> rusqlite::Result<()> {
    let (state, outcome, lease_until) = match &rec.state {
        RecordState::Processing { lease_until_ms } => (0i64, None, *lease_until_ms as i64),
        RecordState::Done(StoredOutcome::Succeeded(o)) => (1, Some(o.as_str()), 0),
        RecordState::Done(StoredOutcome::Failed(o)) => (2, Some(o.as_str()), 0),
    };
    tx.prepare_cached(
        "INSERT INTO idempotency_records
           (tenant, method, key, fingerprint, state, outcome, token, lease_until, expires_at, updated_at,
            takeover_token, takeover_until, steps)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
         ON CONFLICT (tenant, method, key) DO UPDATE SET
           fingerprint = excluded.fingerprint, state = excluded.state, outcome = excluded.outcome,
           token = excluded.token, lease_until = excluded.lease_until,
           expires_at = excluded.expires_at, updated_at = excluded.updated_at,
           takeover_token = excluded.takeover_token, takeover_until = excluded.takeover_until,
           steps = excluded.steps",
    )?
    .execute(params![
        &*key.tenant,
        &*key.method,
        &*key.key,
        rec.fingerprint,
        state,
        outcome,
        rec.token as i64,
        lease_until,
        rec.expires_at_ms as i64,
        now as i64,
        rec.takeover.map(|t| t.token as i64),
        rec.takeover.map(|t| t.until_ms as i64),
        journal_to_json(&rec.steps),
    ])?;
    Ok(())
}

fn delete(tx: &Transaction<'_>, key: &RecordKey) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM idempotency_records WHERE tenant = ?1 AND method = ?2 AND key = ?3")?
        .execute(params![&*key.tenant, &*key.method, &*key.key])?;
    Ok(())
}

impl Store for SqliteStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let op = Op::Claim {
            key: req.key.clone(),
            fingerprint: req.fingerprint.to_owned(),
            force_retry: req.force_retry,
            lease: req.lease,
            ttl: req.ttl,
        };
        Box::pin(self.call(op, Done::claim))
    }

    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.call(Op::Renew { key: key.clone(), token, lease }, Done::bool))
    }

    fn put_step<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        step: u32,
        output: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let op = Op::PutStep { key: key.clone(), token, step, output: output.to_owned(), lease };
        Box::pin(self.call(op, Done::bool))
    }

    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        outcome: &'a StoredOutcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let op = Op::Complete { key: key.clone(), token, outcome: outcome.clone(), ttl };
        Box::pin(self.call(op, Done::bool))
    }

    fn release<'a>(&'a self, key: &'a RecordKey, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.call(Op::Release { key: key.clone(), token }, Done::bool))
    }

    fn get<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(self.call(Op::Get { key: key.clone() }, Done::record))
    }

    fn put_event<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.call(Op::PutEvent(Box::new(event.clone())), Done::bool))
    }

    fn get_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>> {
        Box::pin(async move { Ok(self.call(Op::GetEvent(id.to_owned()), Done::events).await?.pop()) })
    }

    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        outcome: &'a StoredOutcome,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let op = Op::FinishEvent { id: id.to_owned(), token, outcome: outcome.clone() };
        Box::pin(self.call(op, Done::bool))
    }

    fn put_event_steps<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        steps: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let op = Op::PutEventSteps { id: id.to_owned(), token, steps: steps.to_owned() };
        Box::pin(self.call(op, Done::bool))
    }

    fn restart_event<'a>(&'a self, id: &'a str, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.call(Op::RestartEvent { id: id.to_owned(), token }, Done::bool))
    }

    fn pending_events<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<Event>, Option<String>), StoreError>> {
        // A malformed cursor starts over (the contract of `parse_pending_cursor`).
        let after = cursor.and_then(parse_pending_cursor).map(|(at, id)| (at, id.to_owned()));
        Box::pin(async move {
            let page = self.call(Op::PendingEvents { after, limit }, Done::events).await?;
            let next = if page.len() == limit { page.last().map(pending_cursor) } else { None };
            Ok((page, next))
        })
    }

    fn list_events<'a>(
        &'a self,
        tenant: &'a str,
        filter: &'a EventFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<Event>, Option<String>), StoreError>> {
        let after = cursor.and_then(parse_list_cursor).map(|(at, id)| (at, id.to_owned()));
        let op = Op::ListEvents { tenant: tenant.to_owned(), filter: filter.clone(), after, limit };
        Box::pin(async move {
            // One more than a page is read: whether there is a next page.
            let mut page = self.call(op, Done::events).await?;
            let more = page.len() > limit;
            page.truncate(limit);
            let next = if more { page.last().map(list_cursor) } else { None };
            Ok((page, next))
        })
    }

    fn name(&self) -> &'static str {
        "sqlite"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use oncerpc_core::store::AcquireKind;

    use super::*;

    fn temp_db(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("oncerpc-sqlite-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.db"));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        path
    }

    async fn claim(store: &SqliteStore, key: &RecordKey, lease: Duration) -> Claim {
        let req =
            ClaimRequest { key, fingerprint: "fp", force_retry: false, lease, ttl: Duration::from_secs(60) };
        store.claim(req).await.unwrap()
    }

    /// A database made before the token counter: its tokens keep growing, its events read
    /// with token 0.
    #[tokio::test]
    async fn upgraded_database_keeps_tokens_growing() {
        let path = temp_db("upgrade");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.execute_batch(MIGRATIONS[1]).unwrap();
            conn.pragma_update(None, "user_version", 2).unwrap();
            conn.execute_batch(
                "INSERT INTO idempotency_records VALUES ('t', 'm', 'old', 'fp', 1, '1', 41, 0, 1, 1);
                 INSERT INTO events VALUES ('evt_old', 't', 'm', 'old', 'fp', NULL, NULL, '[]', 0, NULL,
                   5, 5, 9223372036854775807);",
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        // The old record has expired: a fresh claim, with a token past every old one.
        let old = RecordKey::new("t", "m", "old");
        assert_eq!(
            claim(&store, &old, Duration::from_secs(60)).await,
            Claim::Acquired { token: 42, kind: AcquireKind::Fresh }
        );
        let other = RecordKey::new("t", "m", "other");
        assert_eq!(
            claim(&store, &other, Duration::from_secs(60)).await,
            Claim::Acquired { token: 43, kind: AcquireKind::Fresh }
        );
        let ev = store.get_event("evt_old").await.unwrap().expect("old event");
        assert_eq!((ev.token, ev.status), (0, EventStatus::Processing));
        assert!(store.restart_event("evt_old", 42).await.unwrap());
        let (pending, next) = store.pending_events(None, 10).await.unwrap();
        assert_eq!((pending.len(), pending[0].token, next), (1, 42, None));
    }

    /// Issue: the clock was read before `BEGIN IMMEDIATE` waited for another process's write
    /// lock, so the lease granted after the wait ended early by the length of the wait.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lease_starts_after_the_write_lock_wait() {
        let path = temp_db("lock-wait");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let key = RecordKey::new("t", "m", "k");
        let lease = Duration::from_secs(2);
        let task = tokio::spawn({
            let (store, key) = (store.clone(), key.clone());
            async move { claim(&store, &key, lease).await }
        });
        tokio::time::sleep(Duration::from_millis(700)).await;
        let unlocked_at = now_ms();
        other.execute_batch("COMMIT").unwrap();
        assert!(matches!(task.await.unwrap(), Claim::Acquired { kind: AcquireKind::Fresh, .. }));
        match store.get(&key).await.unwrap().map(|r| r.state) {
            Some(RecordState::Processing { lease_until_ms }) => assert!(
                lease_until_ms >= unlocked_at + 2000,
                "lease ends at {lease_until_ms}, before {} (lock released + lease)",
                unlocked_at + 2000
            ),
            other => panic!("expected a processing record, got {other:?}"),
        }
    }
}
