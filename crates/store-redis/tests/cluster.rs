//! The Redis store against a three-primary Redis Cluster (`ONCERPC_TEST_REDIS_CLUSTER_URL`,
//! started by `scripts/test.sh`): the behaviour suite, three stores racing for one key, keys
//! spread over every primary, and `WAIT` reaching the record's own primary.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use oncerpc_core::Store;
use oncerpc_core::store::{AcquireKind, Claim, ClaimRequest, RecordKey, StoredOutcome};
use oncerpc_store_redis::{RedisOptions, RedisStore};

fn url() -> Option<String> {
    oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_CLUSTER_URL", "Redis Cluster")
}

fn prefix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "oncerpc-ctest-{}-{}-{}",
        std::process::id(),
        oncerpc_core::store::now_ms(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn connect(url: &str, opts: RedisOptions) -> RedisStore {
    let store = RedisStore::connect_with(url, opts).await.expect("connect to the Redis Cluster");
    assert!(store.is_cluster(), "ONCERPC_TEST_REDIS_CLUSTER_URL must point at a cluster node");
    store
}

async fn make_store() -> Option<Arc<dyn Store>> {
    let url = url()?;
    Some(Arc::new(connect(&url, RedisOptions::new(prefix())).await))
}

oncerpc_core::store_suite!(make_store);

const TTL: Duration = Duration::from_secs(600);

fn claim_req(key: &RecordKey) -> ClaimRequest<'_> {
    ClaimRequest { key, fingerprint: "fp", force_retry: false, lease: Duration::from_secs(60), ttl: TTL }
}

/// The primaries of the cluster, each with a plain connection.
async fn primaries(url: &str) -> Vec<(String, redis::aio::MultiplexedConnection)> {
    let mut seed = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut seed).await.unwrap();
    let mut out = Vec::new();
    for line in nodes.lines().filter(|l| l.contains("master")) {
        let addr = line.split_whitespace().nth(1).unwrap().split('@').next().unwrap().to_owned();
        let conn = redis::Client::open(format!("redis://{addr}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        out.push((addr, conn));
    }
    assert_eq!(out.len(), 3, "a three-primary cluster");
    out
}

/// How many keys under `prefix` each primary holds.
async fn keys_per_node(url: &str, prefix: &str) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for (addr, mut conn) in primaries(url).await {
        let keys: Vec<String> =
            redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut conn).await.unwrap();
        out.insert(addr, keys.len());
    }
    out
}

/// Three gateway replicas (three stores, three connections) send 300 identical commands at
/// once: one executes, and every replica then answers its outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_300_identical_claims_one_winner() {
    let Some(url) = url() else { return };
    let prefix = prefix();
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(Arc::new(connect(&url, RedisOptions::new(prefix.clone())).await));
    }
    let key = Arc::new(oncerpc_core::testkit::fresh_key("orders.create", "k-300"));
    let mut tasks = Vec::new();
    for i in 0..300 {
        let (store, key) = (stores[i % 3].clone(), key.clone());
        tasks.push(tokio::spawn(async move { store.claim(claim_req(&key)).await.unwrap() }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Claim::Acquired { token, kind: AcquireKind::Fresh } => winners.push(token),
            Claim::InProgress { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one execution across the replicas");
    let ok = StoredOutcome::Succeeded(r#"{"order":1}"#.into());
    assert!(stores[1].complete(&key, winners[0], &ok, TTL).await.unwrap());
    for store in &stores {
        assert!(matches!(store.claim(claim_req(&key)).await.unwrap(), Claim::Done(o, _) if o == ok));
    }
}

/// Records spread over every primary (hash tags per record, not one global key), and every
/// operation works whichever slot a record is in.
#[tokio::test]
async fn records_spread_over_every_primary() {
    let Some(url) = url() else { return };
    let prefix = prefix();
    let store = connect(&url, RedisOptions::new(prefix.clone())).await;
    for i in 0..48 {
        let key = RecordKey::new(format!("tenant-{{{i}}}"), "m}{", format!("k-{i}"));
        let token = match store.claim(claim_req(&key)).await.unwrap() {
            Claim::Acquired { token, .. } => token,
            other => panic!("{other:?}"),
        };
        assert!(store.renew(&key, token, Duration::from_secs(30)).await.unwrap());
        if i % 2 == 0 {
            assert!(store.release(&key, token).await.unwrap());
        } else {
            assert!(store.complete(&key, token, &StoredOutcome::Succeeded("1".into()), TTL).await.unwrap());
        }
    }
    let spread = keys_per_node(&url, &prefix).await;
    assert!(spread.values().all(|&n| n > 0), "keys on every primary: {spread:?}");
}

/// With `wait_replicas`, `WAIT` is pipelined with the script and so reaches the primary that
/// holds the record (not every primary, not a random one); without replicas it fails closed.
#[tokio::test]
async fn wait_reaches_the_records_primary() {
    let Some(url) = url() else { return };
    let prefix = prefix();
    let store = connect(&url, RedisOptions { wait_replicas: 1, ..RedisOptions::new(prefix.clone()) }).await;
    let waits = async || {
        let mut out = HashMap::new();
        for (addr, mut conn) in primaries(&url).await {
            let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await.unwrap();
            let calls = info
                .lines()
                .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |n| n.parse::<u64>().unwrap());
            out.insert(addr, calls);
        }
        out
    };
    let before = waits().await;
    let key = oncerpc_core::testkit::fresh_key("m", "wait");
    match store.claim(claim_req(&key)).await.expect("a claim") {
        Claim::Unconfirmed { error, .. } => assert!(error.contains("written to 0 of 1 replicas"), "{error}"),
        c => panic!("no replica acknowledges: {c:?}"),
    }
    let after = waits().await;
    let waited: Vec<&String> = after.keys().filter(|a| after[*a] > before[*a]).collect();
    assert_eq!(waited.len(), 1, "WAIT ran on one primary: {before:?} → {after:?}");
    // Twice when the node had to load the script first (the failed pipeline's WAIT ran too).
    assert!((1..=2).contains(&(after[waited[0]] - before[waited[0]])), "{before:?} → {after:?}");
    let holders: Vec<String> =
        keys_per_node(&url, &prefix).await.into_iter().filter(|(_, n)| *n > 0).map(|(a, _)| a).collect();
    assert_eq!(holders, vec![waited[0].clone()], "the primary that WAITed holds the record");
}
