//! # oncerpc-store-sqlite
//!
//! The embedded default idempotency store: one SQLite file in WAL mode.
//!
//! * **Never blocks the async runtime**: one dedicated OS thread owns the connection; async
//!   callers send it operations over a channel and await a oneshot reply.
//! * **Group commit**: the thread drains every queued operation into one `BEGIN IMMEDIATE`
//!   transaction, commits once (one fsync), then replies. Under load many claims share a
//!   commit; alone, an operation commits by itself.
//! * **Durable against `kill -9`** (and power loss): `synchronous = FULL`; a reply is only
//!   sent after its transaction committed.
//! * **Several processes may share a file**: `BEGIN IMMEDIATE` takes SQLite's write lock, so
//!   a claim's read-modify-write is atomic across processes too (busy timeout 5 s).
//! * Embedded migrations keyed on `PRAGMA user_version`; expired records are swept by the
//!   writer thread once a minute.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use oncerpc_core::BoxFuture;
use oncerpc_core::store::{
    Claim, ClaimRequest, Event, EventStatus, Record, RecordKey, RecordState, Store, StoreError,
    StoredOutcome, decide, decide_complete, may_release, now_ms,
};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
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
        status      INTEGER NOT NULL,  -- 0 processing, 1 succeeded, 2 failed
        outcome     TEXT,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS events_pending ON events (status, created_at);
    CREATE INDEX IF NOT EXISTS events_expires ON events (expires_at);",
];

enum Op {
    Claim { key: RecordKey, fingerprint: String, force_retry: bool, lease: Duration, ttl: Duration },
    Complete { key: RecordKey, token: u64, outcome: StoredOutcome, ttl: Duration },
    Release { key: RecordKey, token: u64 },
    Get { key: RecordKey },
    PutEvent(Box<Event>),
    GetEvent(String),
    FinishEvent { id: String, outcome: StoredOutcome },
    RestartEvent(String),
    PendingEvents(usize),
}

enum Done {
    Claim(Claim),
    Bool(bool),
    Record(Option<Record>),
    Unit,
    Events(Vec<Event>),
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

    async fn call(&self, op: Op) -> Result<Done, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send((op, reply)).map_err(|_| StoreError::new("the SQLite writer thread has stopped"))?;
        rx.await.map_err(|_| StoreError::new("the SQLite writer thread dropped the request"))?
    }
}

fn open_connection(path: &Path) -> rusqlite::Result<Connection> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    let version: usize = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i + 1)?;
        tx.commit()?;
    }
    Ok(conn)
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
        let now = now_ms();
        let results = run_group(&mut conn, &group, now);
        for ((_, reply), result) in group.into_iter().zip(results) {
            let _ = reply.send(result);
        }
        if last_sweep.elapsed() >= SWEEP_EVERY {
            last_sweep = Instant::now();
            match conn.execute("DELETE FROM idempotency_records WHERE expires_at <= ?1", params![now as i64])
            {
                Ok(n) if n > 0 => tracing::debug!(deleted = n, "expired idempotency records swept"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "sweeping expired records failed"),
            }
        }
    }
    tracing::debug!("SQLite writer thread stopped");
}

/// One transaction for the whole group; nobody is answered before it commits.
fn run_group(conn: &mut Connection, group: &[(Op, Reply)], now: u64) -> Vec<Result<Done, StoreError>> {
    let fail_all = |e: rusqlite::Error| -> Vec<Result<Done, StoreError>> {
        tracing::error!(error = %e, "SQLite transaction failed");
        group.iter().map(|_| Err(StoreError::new(format!("sqlite: {e}")))).collect()
    };
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return fail_all(e),
    };
    let results: Vec<Result<Done, StoreError>> = group
        .iter()
        .map(|(op, _)| apply(&tx, op, now).map_err(|e| StoreError::new(format!("sqlite: {e}"))))
        .collect();
    match tx.commit() {
        Ok(()) => results,
        Err(e) => fail_all(e),
    }
}

fn apply(tx: &rusqlite::Transaction<'_>, op: &Op, now: u64) -> rusqlite::Result<Done> {
    match op {
        Op::Claim { key, fingerprint, force_retry, lease, ttl } => {
            let existing = load(tx, key)?;
            let req = ClaimRequest { key, fingerprint, force_retry: *force_retry, lease: *lease, ttl: *ttl };
            let (claim, new) = decide(existing.as_ref(), &req, now);
            if let Some(rec) = new {
                save(tx, key, &rec, now)?;
            }
            Ok(Done::Claim(claim))
        }
        Op::Complete { key, token, outcome, ttl } => {
            let existing = load(tx, key)?;
            match decide_complete(existing.as_ref(), *token, outcome, *ttl, now) {
                Some(rec) => {
                    save(tx, key, &rec, now)?;
                    Ok(Done::Bool(true))
                }
                None => Ok(Done::Bool(false)),
            }
        }
        Op::Release { key, token } => {
            let existing = load(tx, key)?;
            let ok = may_release(existing.as_ref(), *token);
            if ok {
                tx.prepare_cached(
                    "DELETE FROM idempotency_records WHERE tenant = ?1 AND method = ?2 AND key = ?3",
                )?
                .execute(params![&*key.tenant, &*key.method, &*key.key])?;
            }
            Ok(Done::Bool(ok))
        }
        Op::Get { key } => Ok(Done::Record(load(tx, key)?.filter(|r| r.expires_at_ms > now))),
        Op::PutEvent(e) => {
            let (status, outcome) = event_columns(e.status, e.outcome.as_ref());
            let tags = serde_json::to_string(&e.tags).unwrap_or_else(|_| "[]".into());
            tx.prepare_cached(
                "INSERT OR REPLACE INTO events (id, tenant, method, key, fingerprint, params, return_step, tags,
                   status, outcome, created_at, updated_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
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
            ])?;
            Ok(Done::Unit)
        }
        Op::GetEvent(id) => {
            let sql = format!("{EVENT_SELECT} WHERE id = ?1 AND expires_at > ?2");
            let e = tx.prepare_cached(&sql)?.query_row(params![id, now as i64], event_row).optional()?;
            Ok(Done::Events(e.into_iter().collect()))
        }
        Op::FinishEvent { id, outcome } => {
            let (status, outcome) = event_columns(oncerpc_core::store::status_of(outcome), Some(outcome));
            tx.prepare_cached("UPDATE events SET status = ?2, outcome = ?3, updated_at = ?4 WHERE id = ?1")?
                .execute(params![id, status, outcome, now as i64])?;
            Ok(Done::Unit)
        }
        Op::RestartEvent(id) => {
            tx.prepare_cached("UPDATE events SET status = 0, outcome = NULL, updated_at = ?2 WHERE id = ?1")?
                .execute(params![id, now as i64])?;
            Ok(Done::Unit)
        }
        Op::PendingEvents(limit) => {
            let sql =
                format!("{EVENT_SELECT} WHERE status = 0 AND expires_at > ?1 ORDER BY created_at LIMIT ?2");
            let mut stmt = tx.prepare_cached(&sql)?;
            let rows = stmt.query_map(params![now as i64, *limit as i64], event_row)?;
            Ok(Done::Events(rows.collect::<rusqlite::Result<Vec<_>>>()?))
        }
    }
}

const EVENT_SELECT: &str = "SELECT id, tenant, method, key, fingerprint, params, return_step, tags, status,
    outcome, created_at, updated_at, expires_at FROM events";

fn event_columns(status: EventStatus, outcome: Option<&StoredOutcome>) -> (i64, Option<&str>) {
    let code = match status {
        EventStatus::Processing => 0,
        EventStatus::Succeeded => 1,
        EventStatus::Failed => 2,
    };
    (code, outcome.map(StoredOutcome::json))
}

fn event_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    let status: i64 = row.get(8)?;
    let outcome: Option<String> = row.get(9)?;
    let (status, outcome) = match (status, outcome) {
        (1, Some(o)) => (EventStatus::Succeeded, Some(StoredOutcome::Succeeded(o))),
        (2, Some(o)) => (EventStatus::Failed, Some(StoredOutcome::Failed(o))),
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
    })
}

fn load(tx: &rusqlite::Transaction<'_>, key: &RecordKey) -> rusqlite::Result<Option<Record>> {
    tx.prepare_cached(
        "SELECT fingerprint, state, outcome, token, lease_until, expires_at FROM idempotency_records
         WHERE tenant = ?1 AND method = ?2 AND key = ?3",
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
        Ok(Record {
            fingerprint: row.get(0)?,
            state,
            token: row.get::<_, i64>(3)? as u64,
            expires_at_ms: row.get::<_, i64>(5)? as u64,
        })
    })
    .optional()
}

fn save(tx: &rusqlite::Transaction<'_>, key: &RecordKey, rec: &Record, now: u64) -> rusqlite::Result<()> {
    let (state, outcome, lease_until) = match &rec.state {
        RecordState::Processing { lease_until_ms } => (0i64, None, *lease_until_ms as i64),
        RecordState::Done(StoredOutcome::Succeeded(o)) => (1, Some(o.as_str()), 0),
        RecordState::Done(StoredOutcome::Failed(o)) => (2, Some(o.as_str()), 0),
    };
    tx.prepare_cached(
        "INSERT INTO idempotency_records
           (tenant, method, key, fingerprint, state, outcome, token, lease_until, expires_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (tenant, method, key) DO UPDATE SET
           fingerprint = excluded.fingerprint, state = excluded.state, outcome = excluded.outcome,
           token = excluded.token, lease_until = excluded.lease_until,
           expires_at = excluded.expires_at, updated_at = excluded.updated_at",
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
    ])?;
    Ok(())
}

impl Store for SqliteStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(async move {
            let op = Op::Claim {
                key: req.key.clone(),
                fingerprint: req.fingerprint.to_owned(),
                force_retry: req.force_retry,
                lease: req.lease,
                ttl: req.ttl,
            };
            match self.call(op).await? {
                Done::Claim(c) => Ok(c),
                _ => Err(StoreError::new("unexpected reply")),
            }
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
            match self.call(Op::Complete { key: key.clone(), token, outcome: outcome.clone(), ttl }).await? {
                Done::Bool(b) => Ok(b),
                _ => Err(StoreError::new("unexpected reply")),
            }
        })
    }

    fn release<'a>(&'a self, key: &'a RecordKey, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            match self.call(Op::Release { key: key.clone(), token }).await? {
                Done::Bool(b) => Ok(b),
                _ => Err(StoreError::new("unexpected reply")),
            }
        })
    }

    fn get<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(async move {
            match self.call(Op::Get { key: key.clone() }).await? {
                Done::Record(r) => Ok(r),
                _ => Err(StoreError::new("unexpected reply")),
            }
        })
    }

    fn put_event<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.call(Op::PutEvent(Box::new(event.clone()))).await.map(|_| ()) })
    }

    fn get_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>> {
        Box::pin(async move {
            match self.call(Op::GetEvent(id.to_owned())).await? {
                Done::Events(mut v) => Ok(v.pop()),
                _ => Err(StoreError::new("unexpected reply")),
            }
        })
    }

    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        outcome: &'a StoredOutcome,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.call(Op::FinishEvent { id: id.to_owned(), outcome: outcome.clone() }).await.map(|_| ())
        })
    }

    fn restart_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.call(Op::RestartEvent(id.to_owned())).await.map(|_| ()) })
    }

    fn pending_events(&self, limit: usize) -> BoxFuture<'_, Result<Vec<Event>, StoreError>> {
        Box::pin(async move {
            match self.call(Op::PendingEvents(limit)).await? {
                Done::Events(v) => Ok(v),
                _ => Err(StoreError::new("unexpected reply")),
            }
        })
    }

    fn name(&self) -> &'static str {
        "sqlite"
    }
}
