//! Upgrading a file made by an older version: migration 9 (who submitted an event).

use oncerpc_core::Store;
use oncerpc_core::store::{Event, EventStatus, now_ms};
use rusqlite::Connection;

use crate::SqliteStore;

/// A version-8 file's events read with no creator and keep every other column; events
/// written after the upgrade keep theirs, and a newer execution's write keeps it.
#[tokio::test]
async fn events_of_a_version_8_file_read_without_a_creator() {
    let dir = std::env::temp_dir().join(format!("oncerpc-sqlite-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("v8.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    {
        let conn = Connection::open(&path).unwrap();
        for sql in &super::MIGRATIONS[..8] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 8).unwrap();
        conn.execute_batch(
            "INSERT INTO events (id, tenant, method, key, fingerprint, params, return_step, tags, status,
               outcome, created_at, updated_at, expires_at, token, steps)
             VALUES ('evt_old', 't', 'flow', 'k', 'fp', '{\"n\":1}', NULL, '[\"a\"]', 2, '{\"code\":1}',
               5, 6, 9000000000000, 3, '[]');",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let old = store.get_event("evt_old").await.unwrap().expect("kept");
    assert_eq!(
        (old.created_by.as_deref(), old.status, old.token, old.created_at_ms),
        (None, EventStatus::Failed, 3, 5)
    );
    assert_eq!((old.params.as_deref(), &old.tags[..]), (Some("{\"n\":1}"), &["a".to_owned()][..]));
    let again = Event { token: 4, status: EventStatus::Processing, outcome: None, ..old.clone() };
    let again = Event { created_by: Some("alice".into()), updated_at_ms: now_ms(), ..again };
    assert!(store.put_event(&again).await.unwrap());
    let got = store.get_event("evt_old").await.unwrap().unwrap();
    assert_eq!((got.token, got.created_by), (4, None), "a re-written event keeps its (absent) creator");
    drop(store);
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, super::MIGRATIONS.len() as i64);
}
