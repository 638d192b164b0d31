//! The batch statements stay on the primary key as the table grows (`group.rs`): a plan
//! chosen while the table was empty must not follow the store for the connection's life.
//!
//! The store runs in a schema of its own (`search_path` in the URL's `options`), so the
//! table's scan counters are this test's alone. Autovacuum is off for the table, as on the
//! machine where the fault was found: nothing re-plans the statements behind the store's back.
use std::time::Duration;

use oncerpc_core::store::{Claim, ClaimRequest, RecordKey, Store, StoredOutcome};
use oncerpc_store_postgres::PgStore;
use tokio_postgres::NoTls;

const TTL: Duration = Duration::from_secs(3600);

async fn claim_and_complete(store: &PgStore, key: &str) {
    let key = RecordKey::new("t", "m", key);
    let req = ClaimRequest { key: &key, fingerprint: "fp", force_retry: false, lease: TTL, ttl: TTL };
    let token = match store.claim(req).await.expect("claim") {
        Claim::Acquired { token, .. } => token,
        other => panic!("a new key is acquired, got {other:?}"),
    };
    let outcome = StoredOutcome::Succeeded(r#"{"n":1}"#.into());
    assert!(store.complete(&key, token, &outcome, TTL).await.expect("complete"));
}

/// `(seq_scan, idx_scan)` of the schema's records table, once the store's idle backends have
/// flushed their counters (PostgreSQL 15 flushes an idle backend's within about a second).
async fn scans(admin: &tokio_postgres::Client, schema: &str) -> (i64, i64) {
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let row = admin
        .query_one(
            "SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0) FROM pg_stat_user_tables
             WHERE schemaname = $1 AND relname = 'oncerpc_records'",
            &[&schema],
        )
        .await
        .expect("read the table's scan counters");
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_use_the_primary_key_after_the_table_grew() {
    let Some(url) = oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_URL", "PostgreSQL") else {
        return;
    };
    let (admin, conn) = tokio_postgres::connect(&url, NoTls).await.expect("connect");
    tokio::spawn(conn);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos();
    let schema = format!("plans_{}_{nanos}", std::process::id());
    admin.batch_execute(&format!("CREATE SCHEMA {schema}")).await.expect("create the schema");
    let sep = if url.contains('?') { '&' } else { '?' };
    let store_url = format!("{url}{sep}options=-c%20search_path%3D{schema}");
    let store = PgStore::connect(&store_url).await.expect("connect the store");
    admin
        .batch_execute(&format!("ALTER TABLE {schema}.oncerpc_records SET (autovacuum_enabled = false)"))
        .await
        .expect("autovacuum off for the table");

    // Enough executions on the empty table for PostgreSQL to settle on a generic plan.
    for n in 0..8 {
        claim_and_complete(&store, &format!("small-{n}")).await;
    }
    admin
        .batch_execute(&format!(
            "INSERT INTO {schema}.oncerpc_records
               (tenant, method, key, fingerprint, state, outcome, token, lease_until, expires_at)
             SELECT 't', 'm', 'bulk-' || g, 'fp', 1, '{{}}', g, 0, 9000000000000
             FROM generate_series(1, 200000) g"
        ))
        .await
        .expect("grow the table");

    let (seq_before, idx_before) = scans(&admin, &schema).await;
    for n in 0..6 {
        claim_and_complete(&store, &format!("large-{n}")).await;
    }
    let (seq_after, idx_after) = scans(&admin, &schema).await;
    drop(store);
    let _ = admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await;

    assert!(idx_after > idx_before, "the completions' index scans were counted ({idx_before} → {idx_after})");
    assert_eq!(
        seq_after - seq_before,
        0,
        "completions on a 200k-row table scanned it sequentially {} times",
        seq_after - seq_before
    );
}
