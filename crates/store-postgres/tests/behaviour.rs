//! The shared store behaviour suite against a real PostgreSQL server (`ONCERPC_TEST_POSTGRES_URL`).
use std::sync::Arc;

use oncerpc_core::Store;
use oncerpc_store_postgres::PgStore;

async fn make_store() -> Option<Arc<dyn Store>> {
    let url = oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_URL", "PostgreSQL")?;
    Some(Arc::new(PgStore::connect(&url).await.expect("connect to PostgreSQL")))
}

oncerpc_core::store_suite!(make_store);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_starting_together_migrate_once_without_errors() {
    let Some(url) = oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_URL", "PostgreSQL") else {
        return;
    };
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move { PgStore::connect(&url).await.map(|_| ()) }));
    }
    for t in tasks {
        t.await.unwrap().expect("every replica connects and finds the schema ready");
    }
}
