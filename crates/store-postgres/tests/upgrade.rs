//! Upgrading a database made by an older version: the migration that adds who submitted an
//! event (`created_by`). The store runs in a schema of its own (`search_path` in the URL's
//! `options`), brought back to the version before that migration with an event in it.
use oncerpc_core::store::{Event, EventStatus, Store, now_ms};
use oncerpc_store_postgres::PgStore;
use tokio_postgres::NoTls;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_an_older_database_read_without_a_creator() {
    let Some(url) = oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_URL", "PostgreSQL") else {
        return;
    };
    let (admin, conn) = tokio_postgres::connect(&url, NoTls).await.expect("connect");
    tokio::spawn(conn);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos();
    let schema = format!("upgrade_{}_{nanos}", std::process::id());
    admin.batch_execute(&format!("CREATE SCHEMA {schema}")).await.expect("create the schema");
    let sep = if url.contains('?') { '&' } else { '?' };
    let store_url = format!("{url}{sep}options=-c%20search_path%3D{schema}");
    drop(PgStore::connect(&store_url).await.expect("make the schema"));
    let version: i32 = admin
        .query_one(&format!("SELECT version FROM {schema}.oncerpc_schema"), &[])
        .await
        .expect("the schema's version")
        .get(0);
    admin
        .batch_execute(&format!(
            "ALTER TABLE {schema}.oncerpc_events DROP COLUMN created_by;
             UPDATE {schema}.oncerpc_schema SET version = {};
             INSERT INTO {schema}.oncerpc_events (id, tenant, method, key, fingerprint, params,
               return_step, tags, status, outcome, created_at, updated_at, expires_at, token, steps)
             VALUES ('evt_old', 't', 'flow', 'k', 'fp', '{{\"n\":1}}', NULL, '[\"a\"]', 2,
               '{{\"code\":1}}', 5, 6, 9000000000000, 3, '[]')",
            version - 1
        ))
        .await
        .expect("bring the schema back to the version before");

    let store = PgStore::connect(&store_url).await.expect("upgrade");
    let old = store.get_event("evt_old").await.expect("read").expect("kept");
    assert_eq!(
        (old.created_by.as_deref(), old.status, old.token, old.created_at_ms),
        (None, EventStatus::Failed, 3, 5)
    );
    assert_eq!((old.params.as_deref(), &old.tags[..]), (Some("{\"n\":1}"), &["a".to_owned()][..]));
    let again = Event { token: 4, status: EventStatus::Processing, outcome: None, ..old.clone() };
    let again = Event { created_by: Some("alice".into()), updated_at_ms: now_ms(), ..again };
    assert!(store.put_event(&again).await.expect("write"));
    let got = store.get_event("evt_old").await.expect("read").expect("kept");
    assert_eq!((got.token, got.created_by), (4, None), "a re-written event keeps its (absent) creator");
    let fresh = Event { id: "evt_new".into(), token: 1, created_by: Some("bob".into()), ..again };
    assert!(store.put_event(&fresh).await.expect("write"));
    let got = store.get_event("evt_new").await.expect("read").expect("kept");
    assert_eq!(got.created_by.as_deref(), Some("bob"));
    let upgraded: i32 = admin
        .query_one(&format!("SELECT version FROM {schema}.oncerpc_schema"), &[])
        .await
        .expect("the schema's version")
        .get(0);
    drop(store);
    let _ = admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await;
    assert_eq!(upgraded, version, "migrated to the latest version");
}
