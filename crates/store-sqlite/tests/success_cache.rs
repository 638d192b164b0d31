//! The dispatcher's cache of succeeded records (in front of every store but memory) never
//! answers for a record past that record's own remaining life: a replica whose TTL is longer
//! than the record's must not keep answering it after the store forgot it.
use std::sync::Arc;
use std::time::Duration;

use oncerpc_core::{
    Context, Dispatcher, DispatcherConfig, IdempotencyConfig, MethodSpec, Mode, Registry, RequestMeta, Store,
    typed,
};
use oncerpc_store_sqlite::SqliteStore;

fn dispatcher(store: Arc<dyn Store>, ttl: Duration) -> Dispatcher {
    let mut registry = Registry::new();
    registry
        .register(
            "pay",
            MethodSpec::command().timeout(Duration::from_millis(100)),
            typed(|_ctx: Context, p: serde_json::Value| async move {
                Ok::<_, oncerpc_core::protocol::RpcError>(p["amount"].clone())
            }),
        )
        .unwrap();
    let idempotency =
        IdempotencyConfig { mode: Mode::Dev, lease: Duration::from_millis(1200), ttl, ..Default::default() };
    Dispatcher::with_store(registry, DispatcherConfig { idempotency, ..DispatcherConfig::default() }, store)
}

async fn pay(d: &Dispatcher, amount: u32) -> String {
    let body = format!(
        r#"{{"jsonrpc":"2.0","method":"pay","params":{{"amount":{amount},"idempotency_key":"k-1"}},"id":1}}"#
    );
    String::from_utf8(d.handle(body.as_bytes(), &RequestMeta::default()).await.body.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_success_dies_with_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("o.db")).unwrap());
    // Replica A writes records that live 1.5 s; replica B's own TTL is an hour.
    let a = dispatcher(store.clone(), Duration::from_millis(1500));
    let b = dispatcher(store.clone(), Duration::from_secs(3600));
    assert!(pay(&a, 5).await.contains(r#""result":5"#));
    // B learns of the success (and caches it) while the record lives.
    assert!(pay(&b, 5).await.contains(r#""result":5"#));
    assert!(pay(&b, 6).await.contains("-32002"), "other params while the record lives: key reused");
    // The record expires in the store: B must not answer from its cache any more.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let fresh = pay(&b, 6).await;
    assert!(fresh.contains(r#""result":6"#), "the key is free again: {fresh}");
}
