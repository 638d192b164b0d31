//! # oncerpc-store-postgres
//!
//! A durable idempotency store shared by many gateway replicas through PostgreSQL.
//!
//! * **Claims**: `INSERT … ON CONFLICT DO NOTHING RETURNING` takes a fresh key in one
//!   statement; otherwise the row is locked (`SELECT … FOR UPDATE`) and the shared state
//!   machine (`oncerpc_core::store::decide`) decides inside that transaction, so exactly one
//!   replica wins a claim or a take-over.
//! * **One clock**: leases and expiry use the database server's `clock_timestamp()`.
//! * **Fencing**: tokens come from the sequence `oncerpc_tokens`, so they grow across
//!   take-overs, releases and expiry; `complete`/`release` match on the token.
//! * **Migrations** are embedded and applied under an advisory lock (replicas starting
//!   together do not race); expired rows are deleted once a minute.
//! * **Async events** live in `oncerpc_events`; any replica lists the pending ones, and the
//!   record claim (above) decides which one resumes each — the equivalent of
//!   `FOR UPDATE SKIP LOCKED`, held for the whole execution rather than one transaction.
//! * A `deadpool-postgres` pool with short connect/wait timeouts: while the database is
//!   unreachable calls fail fast (`-32004`), and new connections are made once it is back.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use oncerpc_core::BoxFuture;
use oncerpc_core::store::{
    AcquireKind, Claim, ClaimRequest, Event, EventStatus, Record, RecordKey, RecordState, Store, StoreError,
    StoredOutcome, decide,
};
use tokio_postgres::NoTls;

const NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// Applied in order; `oncerpc_schema.version` counts those applied.
const MIGRATIONS: &[&str] = &["CREATE SEQUENCE IF NOT EXISTS oncerpc_tokens;
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
        status      smallint NOT NULL,  -- 0 processing, 1 succeeded, 2 failed
        outcome     text,
        created_at  bigint   NOT NULL,
        updated_at  bigint   NOT NULL,
        expires_at  bigint   NOT NULL
    );
    CREATE INDEX IF NOT EXISTS oncerpc_events_pending ON oncerpc_events (created_at) WHERE status = 0;
    CREATE INDEX IF NOT EXISTS oncerpc_events_expires ON oncerpc_events (expires_at);"];

/// Serialises migrations across replicas.
const MIGRATION_LOCK: i64 = 0x006f_6e63_6572_7063; // "oncerpc" in ASCII

/// A PostgreSQL-backed [`Store`].
pub struct PgStore {
    pool: Pool,
    cleanup: tokio::task::JoinHandle<()>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.cleanup.abort();
    }
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError::new(format!("postgres: {e}"))
}

impl PgStore {
    /// Connect (`postgres://user@host:port/db`), apply migrations, start the cleanup task.
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| err(format!("url {url}: {e}")))?;
        config.connect_timeout(Duration::from_secs(2));
        let manager =
            Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(16)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(2)))
            .create_timeout(Some(Duration::from_secs(2)))
            .recycle_timeout(Some(Duration::from_secs(2)))
            .build()
            .map_err(err)?;
        migrate(&pool).await?;
        let cleanup = tokio::spawn(cleanup_loop(pool.clone()));
        Ok(PgStore { pool, cleanup })
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(err)
    }
}

async fn migrate(pool: &Pool) -> Result<(), StoreError> {
    let mut client = pool.get().await.map_err(err)?;
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

async fn cleanup_loop(pool: Pool) {
    loop {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let Ok(client) = pool.get().await else { continue };
        for table in ["oncerpc_records", "oncerpc_events"] {
            let sql = format!("DELETE FROM {table} WHERE expires_at <= {NOW}");
            match client.execute(sql.as_str(), &[]).await {
                Ok(n) if n > 0 => tracing::debug!(table, deleted = n, "expired rows deleted"),
                Ok(_) => {}
                Err(e) => tracing::warn!(table, error = %e, "deleting expired rows failed"),
            }
        }
    }
}

fn ms(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

fn row_record(row: &tokio_postgres::Row) -> Record {
    let state: i16 = row.get("state");
    let outcome: Option<String> = row.get("outcome");
    let state = match (state, outcome) {
        (1, Some(o)) => RecordState::Done(StoredOutcome::Succeeded(o)),
        (2, Some(o)) => RecordState::Done(StoredOutcome::Failed(o)),
        _ => RecordState::Processing { lease_until_ms: row.get::<_, i64>("lease_until") as u64 },
    };
    Record {
        fingerprint: row.get("fingerprint"),
        state,
        token: row.get::<_, i64>("token") as u64,
        expires_at_ms: row.get::<_, i64>("expires_at") as u64,
    }
}

fn state_columns(state: &RecordState) -> (i16, Option<&str>, i64) {
    match state {
        RecordState::Processing { lease_until_ms } => (0, None, *lease_until_ms as i64),
        RecordState::Done(StoredOutcome::Succeeded(o)) => (1, Some(o.as_str()), 0),
        RecordState::Done(StoredOutcome::Failed(o)) => (2, Some(o.as_str()), 0),
    }
}

fn event_row(row: &tokio_postgres::Row) -> Event {
    let status = match row.get::<_, i16>("status") {
        1 => EventStatus::Succeeded,
        2 => EventStatus::Failed,
        _ => EventStatus::Processing,
    };
    let outcome: Option<String> = row.get("outcome");
    let outcome = match (status, outcome) {
        (EventStatus::Succeeded, Some(o)) => Some(StoredOutcome::Succeeded(o)),
        (EventStatus::Failed, Some(o)) => Some(StoredOutcome::Failed(o)),
        _ => None,
    };
    let tags: String = row.get("tags");
    Event {
        id: row.get("id"),
        record: RecordKey::new(
            row.get::<_, String>("tenant"),
            row.get::<_, String>("method"),
            row.get::<_, String>("key"),
        ),
        fingerprint: row.get("fingerprint"),
        params: row.get("params"),
        return_step: row.get("return_step"),
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        status,
        outcome,
        created_at_ms: row.get::<_, i64>("created_at") as u64,
        updated_at_ms: row.get::<_, i64>("updated_at") as u64,
        expires_at_ms: row.get::<_, i64>("expires_at") as u64,
    }
}

fn status_code(status: EventStatus) -> i16 {
    match status {
        EventStatus::Processing => 0,
        EventStatus::Succeeded => 1,
        EventStatus::Failed => 2,
    }
}

impl PgStore {
    async fn claim_inner(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let mut client = self.client().await?;
        let k = req.key;
        let (lease, ttl) = (ms(req.lease), ms(req.ttl));
        for _ in 0..3 {
            // Fast path: a key never seen (or deleted) is taken in one statement.
            let insert = client
                .prepare_cached(&format!(
                    "INSERT INTO oncerpc_records (tenant, method, key, fingerprint, state, token, lease_until, expires_at)
                     VALUES ($1, $2, $3, $4, 0, nextval('oncerpc_tokens'), {NOW} + $5, {NOW} + $6)
                     ON CONFLICT (tenant, method, key) DO NOTHING RETURNING token"
                ))
                .await
                .map_err(err)?;
            let rows = client
                .query(&insert, &[&&*k.tenant, &&*k.method, &&*k.key, &req.fingerprint, &lease, &ttl])
                .await
                .map_err(err)?;
            if let Some(row) = rows.first() {
                return Ok(Claim::Acquired { token: row.get::<_, i64>(0) as u64, kind: AcquireKind::Fresh });
            }
            // The row exists: lock it and decide.
            let tx = client.transaction().await.map_err(err)?;
            let select = tx
                .prepare_cached(&format!(
                    "SELECT fingerprint, state, outcome, token, lease_until, expires_at, {NOW} AS now
                     FROM oncerpc_records WHERE tenant = $1 AND method = $2 AND key = $3 FOR UPDATE"
                ))
                .await
                .map_err(err)?;
            let Some(row) =
                tx.query_opt(&select, &[&&*k.tenant, &&*k.method, &&*k.key]).await.map_err(err)?
            else {
                // Deleted in between (released or swept): try the insert again.
                tx.rollback().await.map_err(err)?;
                continue;
            };
            let now = row.get::<_, i64>("now") as u64;
            let existing = row_record(&row);
            let (claim, new) = decide(Some(&existing), req, now);
            let claim = match (claim, new) {
                (Claim::Acquired { kind, .. }, Some(rec)) => {
                    let (state, outcome, lease_until) = state_columns(&rec.state);
                    let update = tx
                        .prepare_cached(
                            "UPDATE oncerpc_records SET fingerprint = $4, state = $5, outcome = $6,
                               token = nextval('oncerpc_tokens'), lease_until = $7, expires_at = $8
                             WHERE tenant = $1 AND method = $2 AND key = $3 RETURNING token",
                        )
                        .await
                        .map_err(err)?;
                    let row = tx
                        .query_one(
                            &update,
                            &[
                                &&*k.tenant,
                                &&*k.method,
                                &&*k.key,
                                &rec.fingerprint,
                                &state,
                                &outcome,
                                &lease_until,
                                &(rec.expires_at_ms as i64),
                            ],
                        )
                        .await
                        .map_err(err)?;
                    Claim::Acquired { token: row.get::<_, i64>(0) as u64, kind }
                }
                (claim, _) => claim,
            };
            tx.commit().await.map_err(err)?;
            return Ok(claim);
        }
        Err(StoreError::new("postgres: the record kept disappearing during the claim"))
    }
}

impl Store for PgStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(async move { self.claim_inner(&req).await })
    }

    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        outcome: &'a StoredOutcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let state: i16 = match outcome {
                StoredOutcome::Succeeded(_) => 1,
                StoredOutcome::Failed(_) => 2,
            };
            let stmt = client
                .prepare_cached(&format!(
                    "UPDATE oncerpc_records SET state = $5, outcome = $6, lease_until = 0, expires_at = {NOW} + $7
                     WHERE tenant = $1 AND method = $2 AND key = $3 AND token = $4 AND state = 0"
                ))
                .await
                .map_err(err)?;
            let n = client
                .execute(
                    &stmt,
                    &[
                        &&*key.tenant,
                        &&*key.method,
                        &&*key.key,
                        &(token as i64),
                        &state,
                        &outcome.json(),
                        &ms(ttl),
                    ],
                )
                .await
                .map_err(err)?;
            Ok(n == 1)
        })
    }

    fn release<'a>(&'a self, key: &'a RecordKey, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "DELETE FROM oncerpc_records WHERE tenant = $1 AND method = $2 AND key = $3 AND token = $4 AND state = 0",
                )
                .await
                .map_err(err)?;
            let n = client
                .execute(&stmt, &[&&*key.tenant, &&*key.method, &&*key.key, &(token as i64)])
                .await
                .map_err(err)?;
            Ok(n == 1)
        })
    }

    fn get<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT fingerprint, state, outcome, token, lease_until, expires_at FROM oncerpc_records
                     WHERE tenant = $1 AND method = $2 AND key = $3 AND expires_at > {NOW}"
                ))
                .await
                .map_err(err)?;
            let row =
                client.query_opt(&stmt, &[&&*key.tenant, &&*key.method, &&*key.key]).await.map_err(err)?;
            Ok(row.as_ref().map(row_record))
        })
    }

    fn put_event<'a>(&'a self, e: &'a Event) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "INSERT INTO oncerpc_events (id, tenant, method, key, fingerprint, params, return_step, tags,
                       status, outcome, created_at, updated_at, expires_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                     ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant, method = excluded.method,
                       key = excluded.key, fingerprint = excluded.fingerprint, params = excluded.params,
                       return_step = excluded.return_step, tags = excluded.tags, status = excluded.status,
                       outcome = excluded.outcome, created_at = excluded.created_at,
                       updated_at = excluded.updated_at, expires_at = excluded.expires_at",
                )
                .await
                .map_err(err)?;
            let tags = serde_json::to_string(&e.tags).unwrap_or_else(|_| "[]".into());
            client
                .execute(
                    &stmt,
                    &[
                        &e.id,
                        &&*e.record.tenant,
                        &&*e.record.method,
                        &&*e.record.key,
                        &e.fingerprint,
                        &e.params,
                        &e.return_step,
                        &tags,
                        &status_code(e.status),
                        &e.outcome.as_ref().map(StoredOutcome::json),
                        &(e.created_at_ms as i64),
                        &(e.updated_at_ms as i64),
                        &(e.expires_at_ms as i64),
                    ],
                )
                .await
                .map_err(err)?;
            Ok(())
        })
    }

    fn get_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(&format!("SELECT * FROM oncerpc_events WHERE id = $1 AND expires_at > {NOW}"))
                .await
                .map_err(err)?;
            Ok(client.query_opt(&stmt, &[&id]).await.map_err(err)?.as_ref().map(event_row))
        })
    }

    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        outcome: &'a StoredOutcome,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(&format!(
                    "UPDATE oncerpc_events SET status = $2, outcome = $3, updated_at = {NOW} WHERE id = $1"
                ))
                .await
                .map_err(err)?;
            let status = status_code(oncerpc_core::store::status_of(outcome));
            client.execute(&stmt, &[&id, &status, &outcome.json()]).await.map_err(err)?;
            Ok(())
        })
    }

    fn restart_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(&format!(
                    "UPDATE oncerpc_events SET status = 0, outcome = NULL, updated_at = {NOW} WHERE id = $1"
                ))
                .await
                .map_err(err)?;
            client.execute(&stmt, &[&id]).await.map_err(err)?;
            Ok(())
        })
    }

    fn pending_events(&self, limit: usize) -> BoxFuture<'_, Result<Vec<Event>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT * FROM oncerpc_events WHERE status = 0 AND expires_at > {NOW}
                     ORDER BY created_at LIMIT $1"
                ))
                .await
                .map_err(err)?;
            let rows = client.query(&stmt, &[&(limit as i64)]).await.map_err(err)?;
            Ok(rows.iter().map(event_row).collect())
        })
    }

    fn name(&self) -> &'static str {
        "postgres"
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            client.simple_query("SELECT 1").await.map_err(err)?;
            Ok(())
        })
    }
}
