//! The file's schema: its migrations, and how a connection to it is opened.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};

/// Migrations, applied in order; `PRAGMA user_version` counts those applied.
pub(crate) const MIGRATIONS: &[&str] = &[
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
    // 8: the records keyed by (key, method, tenant): a B-tree search compares the column that
    // tells records apart first, instead of the tenant and method most records share
    // (docs/ARCHITECTURE.md, "The SQLite store's durability"). A WITHOUT ROWID table's key
    // cannot change in place: the records move to a new table in this one transaction.
    "CREATE TABLE idempotency_records_8 (
        key            TEXT    NOT NULL,
        method         TEXT    NOT NULL,
        tenant         TEXT    NOT NULL,
        fingerprint    TEXT    NOT NULL,
        state          INTEGER NOT NULL,  -- 0 processing, 1 succeeded, 2 failed
        outcome        TEXT,
        token          INTEGER NOT NULL,
        lease_until    INTEGER NOT NULL,
        expires_at     INTEGER NOT NULL,
        updated_at     INTEGER NOT NULL,
        takeover_token INTEGER,
        takeover_until INTEGER,
        steps          TEXT,
        PRIMARY KEY (key, method, tenant)
    ) WITHOUT ROWID;
    INSERT INTO idempotency_records_8 (key, method, tenant, fingerprint, state, outcome, token,
        lease_until, expires_at, updated_at, takeover_token, takeover_until, steps)
      SELECT key, method, tenant, fingerprint, state, outcome, token, lease_until, expires_at,
        updated_at, takeover_token, takeover_until, steps FROM idempotency_records;
    DROP TABLE idempotency_records;
    ALTER TABLE idempotency_records_8 RENAME TO idempotency_records;
    CREATE INDEX idempotency_records_expires ON idempotency_records (expires_at);",
    // 9: who submitted an event (the caller's subject; NULL: none, and every older event).
    "ALTER TABLE events ADD COLUMN created_by TEXT;",
];

/// Open the file in WAL mode and migrate it. Migrations commit with `synchronous = FULL`;
/// the store's own transactions then run with `NORMAL` and the writer syncs the WAL itself
/// (`writer.rs`).
pub(crate) fn open_connection(path: &Path) -> rusqlite::Result<Connection> {
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
    conn.pragma_update(None, "synchronous", "NORMAL")?;
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

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
