//! A store stall longer than the lease must not run a command twice (issue "the promise
//! without holes", item 9), on three real replicas with a 3 s lease:
//!
//! A is inside its upstream call when the store stalls for 3 s (Redis `CLIENT PAUSE`, a
//! PostgreSQL table lock, and a lock on the record's row). A retry reaches B during the stall; its claim lands only after A's
//! lease ran out. A must still record its outcome (B's late claim is an unconfirmed take-over
//! that B gives up on), B must not run, and every later retry on every replica gets A's one
//! success. The stall hits a private Redis server / a private database, so tests running in
//! parallel are not stalled with it.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::process::{Gateway, TempDir, replica_config, sync_flow, unique};
use common::upstream::Upstream;

/// (status, x-idempotency-status or "", body) of a sync flow call.
async fn pay(client: &reqwest::Client, gw: &Gateway, key: &str) -> (u16, String, String) {
    let (status, idem, body) = sync_flow(client, gw, key).await;
    (status, idem.unwrap_or_default(), body)
}

/// The scenario; `stall(key)` stalls the store (for that key) for 3 s and returns at once.
async fn stall_longer_than_the_lease_runs_once(store_url: &str, stall: impl FnOnce(&str)) {
    let up = Upstream::start().await;
    up.set_delay(1500, &["charge"]);
    let dir = TempDir::new("stall");
    let cfg = replica_config(&dir, store_url, &up, 3000, 2000);
    let replicas: Arc<Vec<Gateway>> = Arc::new((0..3).map(|_| Gateway::start(&["--config", &cfg])).collect());
    let client = common::http_client();
    let key = unique("stall");

    let a = {
        let (client, replicas, key) = (client.clone(), replicas.clone(), key.clone());
        tokio::spawn(async move { pay(&client, &replicas[0], &key).await })
    };
    for _ in 0..1000 {
        if up.count("charge") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(up.count("charge"), 1, "A is inside its upstream call");
    stall(&key);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // B's retry, during the stall.
    let b = pay(&client, &replicas[1], &key).await;
    let a = a.await.unwrap();
    assert_eq!((a.0, a.1.as_str()), (200, "new"), "A answers its success: {a:?}");
    assert!(a.2.contains(r#""step":"charge""#), "{a:?}");
    // B never presents another success: A's, or an error saying it did not run.
    match b.0 {
        200 if b.1 == "processing" => assert_eq!(b.2, "{}"),
        200 => assert_eq!(b.2, a.2, "B answers A's success: {b:?}"),
        503 => assert!(b.2.contains("32004") || b.2.contains("unavailable"), "{b:?}"),
        _ => panic!("unexpected answer for B: {b:?}"),
    }
    // Past any take-over window: every replica answers A's outcome, and nothing ran again.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    for gw in replicas.iter() {
        let c = pay(&client, gw, &key).await;
        assert_eq!((c.0, c.1.as_str(), c.2.as_str()), (200, "duplicate", a.2.as_str()), "{c:?}");
    }
    assert_eq!(up.count("charge"), 1, "one upstream call");
}

/// A private `redis-server` on a free loopback port, killed on drop.
struct PrivateRedis {
    child: Child,
    url: String,
}

impl PrivateRedis {
    fn start(dir: &TempDir) -> PrivateRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir.0)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/test.sh installs it)");
        // Owned from here on: a panic below still kills it (Drop).
        let redis = PrivateRedis { child, url: format!("redis://127.0.0.1:{port}") };
        for _ in 0..200 {
            if redis_cli(&redis.url, &["PING"]) {
                return redis;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("the private redis-server did not come up");
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis_cli(url: &str, args: &[&str]) -> bool {
    Command::new("redis-cli").arg("-u").arg(url).args(args).output().is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_client_pause_longer_than_the_lease_runs_once() {
    if oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_URL", "Redis").is_none() {
        return;
    }
    let dir = TempDir::new("stall-redis");
    let redis = PrivateRedis::start(&dir);
    let url = redis.url.clone();
    stall_longer_than_the_lease_runs_once(&redis.url, move |_| {
        assert!(redis_cli(&url, &["CLIENT", "PAUSE", "3000", "ALL"]), "CLIENT PAUSE");
    })
    .await;
}

/// Run the scenario on a database of its own (the lock stalls only this test); `lock_sql(key)`
/// is what a background psql runs to hold the lock for 3 s.
async fn postgres_stall(lock_sql: fn(&str) -> String) {
    let Some(base) = oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_URL", "PostgreSQL") else {
        return;
    };
    let db = unique("stall").replace('-', "_");
    let psql = |url: &str, sql: &str| {
        let out =
            Command::new("psql").args([url, "-v", "ON_ERROR_STOP=1", "-qc", sql]).output().expect("psql");
        assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
    };
    psql(&base, &format!("CREATE DATABASE {db}"));
    let url = format!("{}/{db}", base.rsplit_once('/').unwrap().0);
    let lock_url = url.clone();
    stall_longer_than_the_lease_runs_once(&url, move |key| {
        let mut lock = Command::new("psql")
            .args([lock_url.as_str(), "-qc", &lock_sql(key)])
            .stdout(Stdio::null())
            .spawn()
            .expect("psql");
        std::thread::spawn(move || lock.wait());
    })
    .await;
    psql(&base, &format!("DROP DATABASE {db} WITH (FORCE)"));
}

/// The stall as reported: a 3 s table lock. Every waiter is released at once, so whether B's
/// claim or A's outcome lands first is a race.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_table_lock_longer_than_the_lease_runs_once() {
    postgres_stall(|_| {
        "BEGIN; LOCK TABLE oncerpc_records IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(3); COMMIT;".into()
    })
    .await;
}

/// The same stall with its worst order made certain: a 3 s lock on the record's row, whose
/// waiters get it in arrival order, so B's late claim is decided before A's outcome lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_row_lock_longer_than_the_lease_runs_once() {
    postgres_stall(|key| {
        format!(
            "BEGIN; SELECT 1 FROM oncerpc_records WHERE key = '{key}' FOR UPDATE; SELECT pg_sleep(3); COMMIT;"
        )
    })
    .await;
}
