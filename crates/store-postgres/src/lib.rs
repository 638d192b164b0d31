//! # oncerpc-store-postgres
//!
//! A durable idempotency store shared by many gateway replicas through PostgreSQL.
//!
//! * **Claims**: `INSERT … ON CONFLICT DO NOTHING RETURNING` takes a fresh key in one
//!   statement; otherwise the row is locked (`SELECT … FOR UPDATE`) and the shared state
//!   machine (`oncerpc_core::store::decide`) decides inside that transaction, so exactly one
//!   replica wins a claim or a take-over. The row is written back exactly as `decide` returns
//!   it.
//! * **Two-phase take-over**: a claim that finds an expired lease does not replace the owner:
//!   it records an unconfirmed take-over (`takeover_token`, `takeover_until`) beside the
//!   owner's `token`. Until the claimant confirms it with `renew`, the owner may still
//!   `complete` (which cancels the take-over) or `renew` (likewise); `release` with the
//!   take-over's token withdraws it.
//! * **Heartbeats**: `renew` extends a lease (and the row's expiry past it) in one
//!   `UPDATE … WHERE` statement; a processing row never expires before its lease.
//! * **One clock**: leases and expiry use the database server's `clock_timestamp()`.
//! * **Fencing**: tokens come from the sequence `oncerpc_tokens`, so they grow across
//!   take-overs, releases and expiry; `complete`, `renew` and `release` match on the token
//!   (`complete` again answers `true` when its outcome already landed under that token). Events
//!   carry the token of the execution that owns them: `finish_event` lands only with it,
//!   `restart_event` only with a newer one.
//! * **Migrations** are embedded and applied under an advisory lock (replicas starting
//!   together do not race); expired rows are deleted once a minute.
//! * **Async events** live in `oncerpc_events`; any replica pages through the pending ones
//!   (by `(created_at, id)`), and the record claim (above) decides which one resumes each —
//!   the equivalent of `FOR UPDATE SKIP LOCKED`, held for the whole execution rather than one
//!   transaction.
//! * A `deadpool-postgres` pool with short connect/wait timeouts: while the database is
//!   unreachable calls fail fast (`-32004`), and new connections are made once it is back.
//!
//! ## TLS
//!
//! Connections use rustls (ring) as libpq's `sslmode` in the URL asks: `disable`, `prefer`
//! (the default: TLS when the server offers it, unverified), `require` (TLS, unverified; with
//! `sslrootcert` it is `verify-ca`, as in libpq), `verify-ca` (the chain, not the host name) and
//! `verify-full` (chain and host name). `sslrootcert=PATH` names a PEM file of CA certificates,
//! `sslrootcert=system` the OS roots; without it the verifying modes read libpq's
//! `~/.postgresql/root.crt`. E.g.
//! `postgres://app:pw@db:5432/app?sslmode=verify-full&sslrootcert=/etc/oncerpc/pg-ca.pem`.
//! A certificate failure fails `connect` with rustls's reason (`invalid peer certificate:
//! UnknownIssuer`); no message carries the URL's password. See `tls.rs` for the details.
//!
//! Every replica builds its dispatcher on the same store, so a key claimed by one is a
//! duplicate on all:
//!
//! ```
//! use std::sync::Arc;
//! use oncerpc_core::{Dispatcher, DispatcherConfig, Registry, StoreError};
//! use oncerpc_store_postgres::PgStore;
//!
//! async fn dispatcher(registry: Registry, url: &str) -> Result<Dispatcher, StoreError> {
//!     let store = PgStore::connect(url).await?;
//!     Ok(Dispatcher::with_store(registry, DispatcherConfig::default(), Arc::new(store)))
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! // Nothing listens on port 1: connecting fails, and a gateway would not start. (The test
//! // suite runs the store against a real server: ONCERPC_TEST_POSTGRES_URL.)
//! assert!(dispatcher(Registry::new(), "postgres://postgres@127.0.0.1:1/oncerpc").await.is_err());
//! # });
//! ```
//!
//! Why one file of about 740 lines: it is the one `impl Store for PgStore`, each operation a
//! transaction next to the SQL it runs; the schema and migrations (`schema.rs`), row decoding
//! (`rows.rs`), batching (`group.rs`) and TLS (`tls.rs`) are apart already.

use std::time::Duration;

use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use oncerpc_core::BoxFuture;
use oncerpc_core::store::{
    AcquireKind, Claim, ClaimRequest, Event, EventFilter, Record, RecordKey, Store, StoreError,
    StoredOutcome, decide, journal_to_json, list_cursor, parse_list_cursor, parse_pending_cursor,
    pending_cursor, status_of,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

mod group;
mod rows;
mod schema;
mod tls;

use rows::{count, event_row, ms, outcome_state, row_record, state_columns, status_code};

const NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// The columns [`row_record`] reads.
const RECORD_COLUMNS: &str =
    "fingerprint, state, outcome, token, lease_until, expires_at, takeover_token, takeover_until, steps";

/// A PostgreSQL-backed [`Store`].
pub struct PgStore {
    pool: Pool,
    cleanup: tokio::task::JoinHandle<()>,
    /// Fresh claims of concurrent requests, one `INSERT` per batch (`group.rs`).
    fresh: group::Group<FreshClaim, Option<u64>>,
    /// Completions of concurrent executions, one `UPDATE` per batch.
    completions: group::Group<Completion, bool>,
    /// Step journal writes of concurrent executions, one `UPDATE` per batch.
    steps: group::Group<StepWrite, bool>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.cleanup.abort();
    }
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError::new(format!("postgres: {e}"))
}

/// `e` and its sources, each once (a source already quoted in the message is skipped): the
/// drivers' own `Display` leaves out the reason (`error performing TLS handshake`).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        source = s.source();
    }
    msg
}

/// [`err`] with the whole chain: for errors getting a connection (connect, TLS, auth).
fn conn_err(e: &(dyn std::error::Error + 'static)) -> StoreError {
    err(error_chain(e))
}

impl PgStore {
    /// Connect (`postgres://user:password@host:port/db?sslmode=…&sslrootcert=…`, or libpq's
    /// `key=value` form), apply migrations, start the cleanup task.
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        let target = tls::Target::parse(url).map_err(err)?;
        let connector = target.connector().map_err(err)?;
        let mut config = target.config.clone();
        config.connect_timeout(Duration::from_secs(2));
        let pool = build_pool(config.clone(), connector, 16)?;
        schema::migrate(&pool).await.map_err(|e| StoreError::new(target.explain(&e.0)))?;
        // The batch statements run on their own connections, planned for each batch's
        // arrays and the table as it is now (`group.rs` says why).
        let mut batch_config = config;
        let options = match batch_config.get_options() {
            Some(o) => format!("{o} -c plan_cache_mode=force_custom_plan"),
            None => "-c plan_cache_mode=force_custom_plan".to_owned(),
        };
        batch_config.options(&options);
        let batch_pool = build_pool(batch_config, target.connector().map_err(err)?, 3 * group::SLOTS)?;
        let cleanup = tokio::spawn(cleanup_loop(pool.clone()));
        let fresh = group::Group::start(batch_pool.clone(), claim_fresh);
        let completions = group::Group::start(batch_pool.clone(), complete_batch);
        let steps = group::Group::start(batch_pool, put_steps);
        Ok(PgStore { pool, cleanup, fresh, completions, steps })
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|e| conn_err(&e))
    }
}

/// A pool of at most `size` connections with short connect and wait timeouts: while the
/// database is unreachable calls fail fast.
fn build_pool(
    config: tokio_postgres::Config,
    connector: tokio_postgres_rustls::MakeRustlsConnect,
    size: usize,
) -> Result<Pool, StoreError> {
    let manager =
        Manager::from_config(config, connector, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(2)))
        .create_timeout(Some(Duration::from_secs(2)))
        .recycle_timeout(Some(Duration::from_secs(2)))
        .build()
        .map_err(err)
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

type Param<'a> = &'a (dyn ToSql + Sync);

/// Prepare `sql` (cached per connection) and run it.
async fn query(client: &impl GenericClient, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
    let stmt = client.prepare_cached(sql).await.map_err(err)?;
    client.query(&stmt, params).await.map_err(err)
}

/// [`query`] with `$1`, `$2`, `$3` bound to the record key and `$4…` to `rest`.
async fn query_key(
    client: &impl GenericClient,
    sql: &str,
    key: &RecordKey,
    rest: &[Param<'_>],
) -> Result<Vec<Row>, StoreError> {
    let (tenant, method, k) = (&*key.tenant, &*key.method, &*key.key);
    let mut params: Vec<Param<'_>> = vec![&tenant, &method, &k];
    params.extend_from_slice(rest);
    query(client, sql, &params).await
}

impl PgStore {
    async fn claim_inner(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let fresh = || FreshClaim {
            key: req.key.clone(),
            fingerprint: req.fingerprint.to_owned(),
            lease: ms(req.lease),
            ttl: ms(req.ttl),
        };
        if let Some(token) = self.fresh.submit(fresh()).await? {
            return Ok(Claim::Acquired { token, kind: AcquireKind::Fresh });
        }
        let mut client = self.client().await?;
        for attempt in 0..3 {
            if attempt > 0
                && let Some(token) = self.fresh.submit(fresh()).await?
            {
                return Ok(Claim::Acquired { token, kind: AcquireKind::Fresh });
            }
            if let Some(claim) = claim_locked(&mut client, req).await? {
                return Ok(claim);
            }
            // Deleted in between (released or swept): try the insert again.
        }
        Err(StoreError::new("postgres: the record kept disappearing during the claim"))
    }
}

/// A fresh claim waiting for its batch.
struct FreshClaim {
    key: RecordKey,
    fingerprint: String,
    lease: i64,
    ttl: i64,
}

impl group::Keyed for FreshClaim {
    fn key(&self) -> &RecordKey {
        &self.key
    }
}

/// The record key's three columns of a batch of items, each as an array.
fn key_arrays<T: group::Keyed>(items: &[T]) -> [Vec<&str>; 3] {
    let keys = items.iter().map(group::Keyed::key);
    [
        keys.clone().map(|k| &*k.tenant).collect(),
        keys.clone().map(|k| &*k.method).collect(),
        keys.map(|k| &*k.key).collect(),
    ]
}

/// Rows by record key: the first three columns of each row are `tenant, method, key`.
fn by_key(rows: &[Row]) -> std::collections::HashMap<(&str, &str, &str), &Row> {
    rows.iter().map(|r| ((r.get(0), r.get(1), r.get(2)), r)).collect()
}

/// The fast path, for a batch: keys never seen (or deleted) are taken in one statement, one
/// commit. Each item's answer: its token, or `None` when its row exists. Items are written in
/// key order, so two batches that share keys wait on each other instead of deadlocking.
async fn claim_fresh(
    client: deadpool_postgres::Object,
    mut items: Vec<FreshClaim>,
) -> Result<Vec<Option<u64>>, StoreError> {
    let order = |c: &FreshClaim| (c.key.tenant.clone(), c.key.method.clone(), c.key.key.clone());
    let mut idx: Vec<usize> = (0..items.len()).collect();
    idx.sort_by_key(|&i| order(&items[i]));
    let sorted: Vec<FreshClaim> = {
        let mut slots: Vec<Option<FreshClaim>> = items.drain(..).map(Some).collect();
        idx.iter().map(|&i| slots[i].take().expect("each index once")).collect()
    };
    let [tenants, methods, keys] = key_arrays(&sorted);
    let fingerprints: Vec<&str> = sorted.iter().map(|c| c.fingerprint.as_str()).collect();
    let leases: Vec<i64> = sorted.iter().map(|c| c.lease).collect();
    let ttls: Vec<i64> = sorted.iter().map(|c| c.ttl).collect();
    // One reading of the clock; a processing row never expires before its lease.
    let sql = format!(
        "INSERT INTO oncerpc_records (tenant, method, key, fingerprint, state, token, lease_until, expires_at)
         SELECT i.tenant, i.method, i.key, i.fingerprint, 0, nextval('oncerpc_tokens'),
                c.now + i.lease, c.now + greatest(i.lease, i.ttl)
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[])
                WITH ORDINALITY AS i(tenant, method, key, fingerprint, lease, ttl, n),
              (SELECT {NOW} AS now) c
         ORDER BY i.n
         ON CONFLICT (tenant, method, key) DO NOTHING RETURNING tenant, method, key, token"
    );
    let rows = query(&client, &sql, &[&tenants, &methods, &keys, &fingerprints, &leases, &ttls]).await?;
    let taken = by_key(&rows);
    let mut answers = vec![None; sorted.len()];
    for (pos, &i) in idx.iter().enumerate() {
        answers[i] = taken.get(&(tenants[pos], methods[pos], keys[pos])).map(|r| r.get::<_, i64>(3) as u64);
    }
    Ok(answers)
}

/// A completion waiting for its batch.
struct Completion {
    key: RecordKey,
    token: i64,
    state: i16,
    outcome: String,
    ttl: i64,
}

impl group::Keyed for Completion {
    fn key(&self) -> &RecordKey {
        &self.key
    }
}

/// Completions, for a batch, in one statement and one commit. Per item, as before: `cur`
/// locks the row if the outcome may land (processing under the item's token) or already did
/// (done under that token with this outcome); a concurrent writer is waited for and the
/// condition checked again on its version, so a retry racing its own first attempt still
/// answers `true`. Only a processing row is written. Rows are locked in key order.
async fn complete_batch(
    client: deadpool_postgres::Object,
    items: Vec<Completion>,
) -> Result<Vec<bool>, StoreError> {
    let [tenants, methods, keys] = key_arrays(&items);
    let tokens: Vec<i64> = items.iter().map(|c| c.token).collect();
    let states: Vec<i16> = items.iter().map(|c| c.state).collect();
    let outcomes: Vec<&str> = items.iter().map(|c| c.outcome.as_str()).collect();
    let ttls: Vec<i64> = items.iter().map(|c| c.ttl).collect();
    let sql = format!(
        "WITH i AS (
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::int2[], $6::text[], $7::int8[])
             AS i(tenant, method, key, token, state, outcome, ttl)
         ), cur AS (
           SELECT r.tenant, r.method, r.key, r.state FROM oncerpc_records r
           JOIN i ON r.tenant = i.tenant AND r.method = i.method AND r.key = i.key
           WHERE r.token = i.token AND (r.state = 0 OR (r.state = i.state AND r.outcome = i.outcome))
           ORDER BY r.tenant, r.method, r.key
           FOR UPDATE OF r
         ), landed AS (
           UPDATE oncerpc_records r SET state = i.state, outcome = i.outcome, lease_until = 0,
             expires_at = {NOW} + i.ttl, takeover_token = NULL, takeover_until = NULL, steps = NULL
           FROM cur JOIN i ON cur.tenant = i.tenant AND cur.method = i.method AND cur.key = i.key
           WHERE cur.state = 0 AND r.tenant = cur.tenant AND r.method = cur.method AND r.key = cur.key
         )
         SELECT tenant, method, key FROM cur"
    );
    let rows = query(&client, &sql, &[&tenants, &methods, &keys, &tokens, &states, &outcomes, &ttls]).await?;
    let landed = by_key(&rows);
    Ok((0..items.len()).map(|n| landed.contains_key(&(tenants[n], methods[n], keys[n]))).collect())
}

/// A step journal write waiting for its batch.
struct StepWrite {
    key: RecordKey,
    token: i64,
    lease: i64,
    step: String,
    output: String,
}

impl group::Keyed for StepWrite {
    fn key(&self) -> &RecordKey {
        &self.key
    }
}

/// Step journal writes (`decide_step`), for a batch, in one statement and one commit: per
/// item, the owner of a live processing row adds the step's output (a JSON string, so its
/// bytes are kept) and renews as `renew` does. Rows are locked in key order, as completions
/// lock them.
async fn put_steps(
    client: deadpool_postgres::Object,
    items: Vec<StepWrite>,
) -> Result<Vec<bool>, StoreError> {
    let [tenants, methods, keys] = key_arrays(&items);
    let tokens: Vec<i64> = items.iter().map(|c| c.token).collect();
    let leases: Vec<i64> = items.iter().map(|c| c.lease).collect();
    let steps: Vec<&str> = items.iter().map(|c| c.step.as_str()).collect();
    let outputs: Vec<&str> = items.iter().map(|c| c.output.as_str()).collect();
    let sql = format!(
        "WITH i AS (
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[], $6::text[], $7::text[])
             AS i(tenant, method, key, token, lease, step, output)
         ), c AS (SELECT {NOW} AS now), cur AS (
           SELECT r.tenant, r.method, r.key FROM oncerpc_records r
           JOIN i ON r.tenant = i.tenant AND r.method = i.method AND r.key = i.key, c
           WHERE r.token = i.token AND r.state = 0 AND r.expires_at > c.now
           ORDER BY r.tenant, r.method, r.key
           FOR UPDATE OF r
         ), written AS (
           UPDATE oncerpc_records r SET lease_until = c.now + i.lease,
             expires_at = greatest(r.expires_at, c.now + i.lease), takeover_token = NULL, takeover_until = NULL,
             steps = (coalesce(r.steps::jsonb, '{{}}'::jsonb) || jsonb_build_object(i.step, i.output))::text
           FROM cur JOIN i ON cur.tenant = i.tenant AND cur.method = i.method AND cur.key = i.key, c
           WHERE r.tenant = cur.tenant AND r.method = cur.method AND r.key = cur.key
         )
         SELECT tenant, method, key FROM cur"
    );
    let rows = query(&client, &sql, &[&tenants, &methods, &keys, &tokens, &leases, &steps, &outputs]).await?;
    let written = by_key(&rows);
    Ok((0..items.len()).map(|n| written.contains_key(&(tenants[n], methods[n], keys[n]))).collect())
}

/// The locked path: lock the row, let [`decide`] rule, write back what it returns. `None`:
/// the row is gone.
async fn claim_locked(
    client: &mut deadpool_postgres::Object,
    req: &ClaimRequest<'_>,
) -> Result<Option<Claim>, StoreError> {
    let tx = client.transaction().await.map_err(err)?;
    // The clock is read and the next token drawn once the row is locked (the outer select
    // runs after the inner one's lock): a token drawn later is always greater, so tokens grow
    // per key in the order of the claims.
    let sql = format!(
        "SELECT r.*, {NOW} AS now, nextval('oncerpc_tokens') AS next_token
         FROM (SELECT {RECORD_COLUMNS} FROM oncerpc_records
               WHERE tenant = $1 AND method = $2 AND key = $3 FOR UPDATE) r"
    );
    let Some(row) = query_key(&tx, &sql, req.key, &[]).await?.pop() else {
        tx.rollback().await.map_err(err)?;
        return Ok(None);
    };
    let (now, next_token) = (row.get::<_, i64>("now") as u64, row.get::<_, i64>("next_token") as u64);
    let (claim, new) = decide(Some(&row_record(&row)), req, now, || next_token);
    if let Some(rec) = new {
        write_record(&tx, req.key, &rec).await?;
    }
    tx.commit().await.map_err(err)?;
    Ok(Some(claim))
}

/// Overwrite the row of `key` with `rec`, every column.
async fn write_record(client: &impl GenericClient, key: &RecordKey, rec: &Record) -> Result<(), StoreError> {
    let (state, outcome, lease_until) = state_columns(&rec.state);
    let (takeover_token, takeover_until) = match rec.takeover {
        Some(t) => (Some(t.token as i64), Some(t.until_ms as i64)),
        None => (None, None),
    };
    query_key(
        client,
        "UPDATE oncerpc_records SET fingerprint = $4, state = $5, outcome = $6, token = $7, lease_until = $8,
           expires_at = $9, takeover_token = $10, takeover_until = $11, steps = $12
         WHERE tenant = $1 AND method = $2 AND key = $3",
        key,
        &[
            &rec.fingerprint,
            &state,
            &outcome,
            &(rec.token as i64),
            &lease_until,
            &(rec.expires_at_ms as i64),
            &takeover_token,
            &takeover_until,
            &journal_to_json(&rec.steps),
        ],
    )
    .await?;
    Ok(())
}

impl Store for PgStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(async move { self.claim_inner(&req).await })
    }

    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            // `decide_renew`: the owner or the unconfirmed take-over of a live processing row.
            let sql = format!(
                "UPDATE oncerpc_records SET token = $4, lease_until = c.now + $5,
                   expires_at = greatest(expires_at, c.now + $5), takeover_token = NULL, takeover_until = NULL
                 FROM (SELECT {NOW} AS now) c
                 WHERE tenant = $1 AND method = $2 AND key = $3 AND state = 0 AND expires_at > c.now
                   AND (token = $4 OR takeover_token = $4)
                 RETURNING 1"
            );
            let rows = query_key(&client, &sql, key, &[&(token as i64), &ms(lease)]).await?;
            Ok(!rows.is_empty())
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
            let item = StepWrite {
                key: key.clone(),
                token: token as i64,
                lease: ms(lease),
                step: step.to_string(),
                output: output.to_owned(),
            };
            self.steps.submit(item).await
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
            let item = Completion {
                key: key.clone(),
                token: token as i64,
                state: outcome_state(outcome),
                outcome: outcome.json().to_owned(),
                ttl: ms(ttl),
            };
            self.completions.submit(item).await
        })
    }

    fn release<'a>(&'a self, key: &'a RecordKey, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            // The owner deletes the row; an unconfirmed take-over is withdrawn (the row stays).
            // Tokens are unique, so at most one of the two matches.
            let sql = "WITH deleted AS (
                   DELETE FROM oncerpc_records
                   WHERE tenant = $1 AND method = $2 AND key = $3 AND state = 0 AND token = $4 RETURNING 1
                 ), withdrawn AS (
                   UPDATE oncerpc_records SET takeover_token = NULL, takeover_until = NULL
                   WHERE tenant = $1 AND method = $2 AND key = $3 AND state = 0 AND takeover_token = $4
                   RETURNING 1
                 )
                 SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM withdrawn)";
            Ok(count(&query_key(&client, sql, key, &[&(token as i64)]).await?) == 1)
        })
    }

    fn get<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let sql = format!(
                "SELECT {RECORD_COLUMNS} FROM oncerpc_records
                 WHERE tenant = $1 AND method = $2 AND key = $3 AND expires_at > {NOW}"
            );
            Ok(query_key(&client, &sql, key, &[]).await?.first().map(row_record))
        })
    }

    fn put_event<'a>(&'a self, e: &'a Event) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let tags = serde_json::to_string(&e.tags).unwrap_or_else(|_| "[]".into());
            // Created, or replacing an expired event or an older execution's; a live one keeps
            // its creation time (its place in the listing) and its creator.
            let sql = format!(
                "INSERT INTO oncerpc_events AS old (tenant, method, key, id, fingerprint, params, return_step,
                   tags, status, outcome, created_at, updated_at, expires_at, token, steps, created_by)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
                 ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant, method = excluded.method,
                   key = excluded.key, fingerprint = excluded.fingerprint, params = excluded.params,
                   return_step = excluded.return_step, tags = excluded.tags, status = excluded.status,
                   outcome = excluded.outcome,
                   created_at = CASE WHEN old.expires_at > {NOW} THEN old.created_at ELSE excluded.created_at END,
                   created_by = CASE WHEN old.expires_at > {NOW} THEN old.created_by ELSE excluded.created_by END,
                   updated_at = excluded.updated_at, expires_at = excluded.expires_at, token = excluded.token,
                   steps = excluded.steps
                 WHERE old.expires_at <= {NOW} OR old.token < excluded.token
                 RETURNING 1"
            );
            let rows = query_key(
                &client,
                &sql,
                &e.record,
                &[
                    &e.id,
                    &e.fingerprint,
                    &e.params,
                    &e.return_step,
                    &tags,
                    &status_code(e.status),
                    &e.outcome.as_ref().map(StoredOutcome::json),
                    &(e.created_at_ms as i64),
                    &(e.updated_at_ms as i64),
                    &(e.expires_at_ms as i64),
                    &(e.token as i64),
                    &e.steps,
                    &e.created_by,
                ],
            )
            .await?;
            Ok(!rows.is_empty())
        })
    }

    fn get_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let sql = format!("SELECT * FROM oncerpc_events WHERE id = $1 AND expires_at > {NOW}");
            Ok(query(&client, &sql, &[&id]).await?.first().map(event_row))
        })
    }

    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        outcome: &'a StoredOutcome,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let sql = format!(
                "UPDATE oncerpc_events SET status = $3, outcome = $4, updated_at = {NOW}
                 WHERE id = $1 AND token = $2 RETURNING 1"
            );
            let rows = query(
                &client,
                &sql,
                &[&id, &(token as i64), &status_code(status_of(outcome)), &outcome.json()],
            )
            .await?;
            Ok(!rows.is_empty())
        })
    }

    fn put_event_steps<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        steps: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let sql = format!(
                "UPDATE oncerpc_events SET steps = $3, updated_at = {NOW} WHERE id = $1 AND token = $2 RETURNING 1"
            );
            let rows = query(&client, &sql, &[&id, &(token as i64), &steps]).await?;
            Ok(!rows.is_empty())
        })
    }

    fn restart_event<'a>(&'a self, id: &'a str, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let sql = format!(
                "UPDATE oncerpc_events SET status = 0, outcome = NULL, token = $2, updated_at = {NOW}
                 WHERE id = $1 AND token < $2 RETURNING 1"
            );
            Ok(!query(&client, &sql, &[&id, &(token as i64)]).await?.is_empty())
        })
    }

    fn pending_events<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<Event>, Option<String>), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            // No (or a malformed) cursor: from before every event.
            let (after_at, after_id) =
                cursor.and_then(parse_pending_cursor).map_or((i64::MIN, ""), |(at, id)| (at as i64, id));
            let sql = format!(
                "SELECT * FROM oncerpc_events
                 WHERE status = 0 AND (created_at, id) > ($1, $2) AND expires_at > {NOW}
                 ORDER BY created_at, id LIMIT $3"
            );
            let limit_param = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = query(&client, &sql, &[&after_at, &after_id, &limit_param]).await?;
            let page: Vec<Event> = rows.iter().map(event_row).collect();
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
        Box::pin(async move {
            let client = self.client().await?;
            // No (or a malformed) cursor: from after every event.
            let (before_at, before_id) =
                cursor.and_then(parse_list_cursor).map_or((i64::MAX, ""), |(at, id)| (at as i64, id));
            let sql = format!(
                "SELECT * FROM oncerpc_events
                 WHERE tenant = $1 AND (created_at, id) < ($2, $3) AND expires_at > {NOW}
                   AND ($4::int2 IS NULL OR status = $4) AND ($5::text IS NULL OR method = $5)
                   AND ($6::text IS NULL OR tags::jsonb ? $6)
                 ORDER BY created_at DESC, id DESC LIMIT $7"
            );
            let status = filter.status.map(status_code);
            // One more than a page: whether there is a next one.
            let limit_param = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
            let params: [Param<'_>; 7] =
                [&tenant, &before_at, &before_id, &status, &filter.method, &filter.tag, &limit_param];
            let rows = query(&client, &sql, &params).await?;
            let mut page: Vec<Event> = rows.iter().map(event_row).collect();
            let more = page.len() > limit;
            page.truncate(limit);
            let next = if more { page.last().map(list_cursor) } else { None };
            Ok((page, next))
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
