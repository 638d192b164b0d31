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

#[test]
fn processes_opening_one_new_file_together_all_start() {
    // Each open is its own connection, as separate processes' are: all must migrate cleanly.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let opens: Vec<_> = (0..8)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || oncerpc_store_sqlite::SqliteStore::open(path).map(|_| ()))
        })
        .collect();
    for open in opens {
        open.join().unwrap().expect("every concurrent open succeeds");
    }
}
