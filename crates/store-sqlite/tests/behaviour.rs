//! The shared store behaviour suite against a real SQLite file.
use std::sync::Arc;

use oncerpc_core::Store;
use oncerpc_store_sqlite::SqliteStore;

async fn make_store() -> Option<Arc<dyn Store>> {
    let dir = std::env::temp_dir().join(format!("oncerpc-sqlite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.db", uuid_like()));
    Some(Arc::new(SqliteStore::open(path).expect("open sqlite")))
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

oncerpc_core::store_suite!(make_store);
