//! The database's schema: its migrations, applied once across replicas.

use deadpool_postgres::Pool;
use oncerpc_core::store::StoreError;

use crate::{conn_err, err};

/// Applied in order; `oncerpc_schema.version` counts those applied.
pub(crate) const MIGRATIONS: &[&str] = &[
    "CREATE SEQUENCE IF NOT EXISTS oncerpc_tokens;
    CREATE TABLE IF NOT EXISTS oncerpc_records (
        tenant      text     NOT NULL,
        method      text     NOT NULL,
        key         text     NOT NULL,
        fingerprint text     NOT NULL,
        state       smallint NOT NULL,  -- 0 processing, 1 succeeded, 2 failed
        outcome     text,
        token       bigint   NOT NULL,
        lease_until bigint   NOT NULL,  -- ms since the epoch, database clock
        expires_at  bigint   NOT NULL,
        PRIMARY KEY (tenant, method, key)
    );
    CREATE INDEX IF NOT EXISTS oncerpc_records_expires ON oncerpc_records (expires_at);
    CREATE TABLE IF NOT EXISTS oncerpc_events (
        id          text     PRIMARY KEY,
        tenant      text     NOT NULL,
        method      text     NOT NULL,
        key         text     NOT NULL,
        fingerprint text     NOT NULL,
        params      text,
        return_step text,
        tags        text     NOT NULL,  -- JSON array of strings
        status      smallint NOT NULL,  -- 0 processing, 1 succeeded, 2 failed, 3 cancelled
        outcome     text,
        created_at  bigint   NOT NULL,
        updated_at  bigint   NOT NULL,
        expires_at  bigint   NOT NULL
    );
    CREATE INDEX IF NOT EXISTS oncerpc_events_pending ON oncerpc_events (created_at) WHERE status = 0;
    CREATE INDEX IF NOT EXISTS oncerpc_events_expires ON oncerpc_events (expires_at);",
    // Two-phase take-over (both NULL: none), event fencing tokens, and the pending events
    // index in page order.
    "ALTER TABLE oncerpc_records
        ADD COLUMN IF NOT EXISTS takeover_token bigint,
        ADD COLUMN IF NOT EXISTS takeover_until bigint;  -- ms since the epoch, database clock
    ALTER TABLE oncerpc_events ADD COLUMN IF NOT EXISTS token bigint NOT NULL DEFAULT 0;
    DROP INDEX IF EXISTS oncerpc_events_pending;
    CREATE INDEX oncerpc_events_pending ON oncerpc_events (created_at, id) WHERE status = 0;",
    // The step journal of a processing execution (JSON, `journal_to_json`; NULL: none).
    "ALTER TABLE oncerpc_records ADD COLUMN IF NOT EXISTS steps text;
    CREATE INDEX IF NOT EXISTS oncerpc_events_by_tenant ON oncerpc_events (tenant, created_at, id);",
    // The step views of a flow's event (JSON text; NULL: none yet).
    "ALTER TABLE oncerpc_events ADD COLUMN IF NOT EXISTS steps text;",
    // Who submitted an event (the caller's subject; NULL: none, and every older event).
    "ALTER TABLE oncerpc_events ADD COLUMN IF NOT EXISTS created_by text;",
];

/// Serialises migrations across replicas.
const MIGRATION_LOCK: i64 = 0x006f_6e63_6572_7063; // "oncerpc" in ASCII

/// Apply the pending migrations, each in its own transaction, under an advisory lock that
/// serialises replicas starting at once.
pub(crate) async fn migrate(pool: &Pool) -> Result<(), StoreError> {
    let mut client = pool.get().await.map_err(|e| conn_err(&e))?;
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await.map_err(err)?;
    let result = async {
        client
            .batch_execute("CREATE TABLE IF NOT EXISTS oncerpc_schema (version integer NOT NULL)")
            .await
            .map_err(err)?;
        let version: i32 = client
            .query_opt("SELECT version FROM oncerpc_schema", &[])
            .await
            .map_err(err)?
            .map_or(0, |r| r.get(0));
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = client.transaction().await.map_err(err)?;
            tx.batch_execute(sql).await.map_err(err)?;
            tx.execute("DELETE FROM oncerpc_schema", &[]).await.map_err(err)?;
            tx.execute("INSERT INTO oncerpc_schema (version) VALUES ($1)", &[&(i as i32 + 1)])
                .await
                .map_err(err)?;
            tx.commit().await.map_err(err)?;
        }
        Ok(())
    }
    .await;
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]).await;
    result
}
