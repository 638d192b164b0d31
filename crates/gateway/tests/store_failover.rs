//! Highly available stores failing over under load (SPEC §13, SCALING "Running HA stores"):
//! a Redis Cluster with replicas (`scripts/ha-stores.sh redis`: 127.0.0.1:7101-7106) with a
//! replica stopped, a primary killed and a slot moved; a PostgreSQL primary with a synchronous
//! standby (`scripts/ha-stores.sh postgres`: 5433 and 5434), the primary stopped and the
//! standby promoted while it still requires a synchronous standby of its own.
//!
//! Every test: keyed commands from 16 clients, each retried until answered; no step key sent
//! upstream twice, every key answered, and `/healthz` saying what is wrong without dropping
//! the gateway while most keys can be served. `ONCERPC_TEST_REDIS_HA_URL` and
//! `ONCERPC_TEST_POSTGRES_HA_URL` (set by `scripts/test.sh`) turn them on; unset, they skip
//! (and fail in CI).

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::process::{Gateway, TempDir, post, unique};
use common::upstream::Upstream;
use serde_json::{Value, json};

/// One failover at a time: the tests share the clusters.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const CLIENTS: usize = 16;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `scripts/ha-stores.sh ARGS`, which must succeed.
fn ha(args: &[&str]) {
    let status =
        Command::new(repo().join("scripts/ha-stores.sh")).args(args).status().expect("run ha-stores.sh");
    assert!(status.success(), "scripts/ha-stores.sh {args:?} failed");
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const REDIS_PORTS: [u16; 6] = [7101, 7102, 7103, 7104, 7105, 7106];

/// A node of the cluster as `CLUSTER NODES` shows it.
#[derive(Debug, Clone)]
struct Node {
    port: u16,
    id: String,
    /// The primary's id, for a replica.
    primary: Option<String>,
    slots: String,
}

fn nodes() -> Vec<Node> {
    let text = REDIS_PORTS
        .iter()
        .map(|p| redis_cli(*p, &["cluster", "nodes"]))
        .find(|t| t.lines().count() >= 6)
        .expect("a node that answers CLUSTER NODES");
    text.lines()
        .filter(|l| !l.contains("fail"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let port = f[1].split('@').next().unwrap().rsplit(':').next().unwrap().parse().unwrap();
            let primary = f[2].contains("slave").then(|| f[3].to_owned());
            let slots =
                f.iter().skip(8).filter(|s| !s.starts_with('[')).copied().collect::<Vec<_>>().join(",");
            Node { port, id: f[0].to_owned(), primary, slots }
        })
        .collect()
}

/// Whether `slots` (`0-5460,6000`) holds `slot`.
fn serves(slots: &str, slot: u16) -> bool {
    slots.split(',').filter(|r| !r.is_empty()).any(|r| match r.split_once('-') {
        Some((a, b)) => (a.parse().unwrap_or(u16::MAX)..=b.parse().unwrap_or(0)).contains(&slot),
        None => r.parse() == Ok(slot),
    })
}

fn pid_of(port: u16) -> i32 {
    let info = redis_cli(port, &["info", "server"]);
    info.lines().find_map(|l| l.strip_prefix("process_id:")).expect("process_id").trim().parse().unwrap()
}

fn signal(pid: i32, sig: &str) {
    assert!(
        Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success(),
        "kill {sig} {pid}"
    );
}

/// A replica stopped with SIGSTOP, continued when dropped (also when a test fails).
struct Stopped(i32);

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

/// A gateway config: `store` (with `extra` lines in `[store]`) and the flow `method` whose one
/// step `charge` goes to `up`.
fn config(dir: &TempDir, store: &str, extra: &str, method: &str, up: &Upstream) -> String {
    let path = dir.file("gateway.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[store]
url = "{store}"
lease_ms = 6000
resume_interval_ms = 500
redis_prefix = "{prefix}"
{extra}

[[methods]]
name = "{method}"
kind = "command"
timeout_ms = 2500

  [[methods.steps]]
  name = "charge"
  url = "{charge}"
"#,
            prefix = unique("oncerpc-ha"),
            charge = up.url("charge"),
        ),
    )
    .unwrap();
    path.display().to_string()
}

fn call_body(method: &str, key: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"amount": 42, "idempotency_key": key}})
        .to_string()
}

/// What the clients saw: every answer's error code (0: a result), and each key's result.
#[derive(Default)]
struct Seen {
    codes: Mutex<HashMap<i64, usize>>,
    results: Mutex<HashMap<String, Value>>,
}

/// Send `key` until it is answered with a result (`-32004`, `-32001` and `-32005` are retried
/// after a pause, as a client would); anything else fails the test.
async fn until_answered(client: &reqwest::Client, gw: &str, method: &str, key: &str, seen: &Seen) {
    let give_up = Instant::now() + Duration::from_secs(90);
    loop {
        let (_, _, body) = post(client, gw, &call_body(method, key)).await;
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}"));
        let code = v["error"]["code"].as_i64().unwrap_or(0);
        *seen.codes.lock().unwrap().entry(code).or_default() += 1;
        match code {
            0 => {
                let previous = seen.results.lock().unwrap().insert(key.to_owned(), v["result"].clone());
                assert!(previous.is_none(), "{key} answered twice");
                return;
            }
            -32004 | -32001 | -32005 => {}
            _ => panic!("{key}: unexpected answer {v}"),
        }
        assert!(Instant::now() < give_up, "{key} not answered in 90 s: last {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `CLIENTS` clients, each sending new keys one after another (each until answered, then a
/// 50 ms pause) until `stop` is set: every key sent.
async fn clients(gw: &str, method: &str, stop: Arc<AtomicBool>, seen: &Arc<Seen>) -> Vec<String> {
    let client = common::http_client();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (client, gw, method, seen, stop) =
            (client.clone(), gw.to_owned(), method.to_owned(), seen.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let key = unique(&format!("ha-{c}-{}", mine.len()));
                until_answered(&client, &gw, &method, &key, &seen).await;
                mine.push(key);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            mine
        }));
    }
    let mut keys = Vec::new();
    for t in tasks {
        keys.extend(t.await.expect("a client"));
    }
    keys
}

/// Every key's step sent upstream exactly once, and a retry of every key now answers its
/// stored result.
async fn each_ran_once(up: &Upstream, gw: &str, method: &str, keys: &[String], seen: &Seen) {
    let mut per_step_key = HashMap::<String, usize>::new();
    for call in up.calls() {
        *per_step_key.entry(call.idempotency_key.expect("a step key")).or_default() += 1;
    }
    let twice: Vec<_> = per_step_key.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "steps sent more than once: {twice:?}");
    assert_eq!(per_step_key.len(), keys.len(), "one step per key");
    let client = common::http_client();
    for key in keys {
        let (_, idem, body) = post(&client, gw, &call_body(method, key)).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(idem.as_deref(), Some("duplicate"), "{key}: {body}");
        assert_eq!(Some(&v["result"]), seen.results.lock().unwrap().get(key), "{key}: one answer");
    }
}

/// `/healthz` polled every 100 ms until stopped: each (status, body) seen.
struct HealthLog {
    seen: Arc<Mutex<Vec<(u16, Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl HealthLog {
    fn start(gw: &str) -> HealthLog {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (log, url) = (seen.clone(), format!("{gw}/healthz"));
        let task = tokio::spawn(async move {
            let client = common::http_client();
            loop {
                if let Ok(resp) = client.get(&url).timeout(Duration::from_secs(10)).send().await {
                    let status = resp.status().as_u16();
                    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
                    log.lock().unwrap().push((status, body));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        HealthLog { seen, task }
    }

    fn stop(self) -> Vec<(u16, Value)> {
        self.task.abort();
        self.seen.lock().unwrap().clone()
    }
}

async fn health(gw: &str) -> (u16, Value) {
    let resp = common::http_client().get(format!("{gw}/healthz")).send().await.expect("healthz");
    (resp.status().as_u16(), resp.json().await.expect("JSON"))
}

/// Poll `/healthz` until `pred` holds (up to 30 s).
async fn health_until(gw: &str, what: &str, pred: impl Fn(u16, &Value) -> bool) -> (u16, Value) {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = health(gw).await;
        if pred(status, &body) {
            return (status, body);
        }
        assert!(Instant::now() < give_up, "/healthz never showed {what}: last {status} {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn redis_ha_url() -> Option<String> {
    oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_HA_URL", "a Redis Cluster with replicas")
}

/// A shard whose replica stops acknowledging, with `redis_wait_replicas = 1`: `/healthz` stays
/// `200` and names that shard (`degraded`); its keys answer `-32004` within `WAIT`'s second
/// (the `WAIT`s do not queue behind each other) and their claims are given back at once (a
/// retry is `-32004` again, never `-32001`); the other shards' keys are served throughout;
/// once the replica is back every key runs, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_shard_without_its_replica_degrades_only_its_keys() {
    let Some(_) = redis_ha_url() else { return };
    let _serial = SERIAL.lock().await;
    ha(&["redis"]);
    let up = Upstream::start().await;
    let dir = TempDir::new("ha-redis-replica");
    let method = unique("pay");
    let cfg = config(&dir, "redis://127.0.0.1:7101", "redis_wait_replicas = 1", &method, &up);
    let gw = Gateway::start(&["--config", &cfg]);
    let base = gw.url("");
    let base = base.trim_end_matches('/');
    health_until(base, "ok", |s, b| s == 200 && b["status"] == "ok").await;

    let all = nodes();
    let replica = all.iter().find(|n| n.primary.is_some()).expect("a replica").clone();
    let primary = all.iter().find(|n| Some(&n.id) == replica.primary.as_ref()).expect("its primary").clone();
    let stopped = Stopped(pid_of(replica.port));
    signal(stopped.0, "-STOP");
    let (status, body) = health_until(base, "the shard degraded", |_, b| b["status"] == "degraded").await;
    assert_eq!(status, 200, "one shard of three short: still routable: {body}");
    assert_eq!(
        body["shards"],
        json!([{"keys": format!("slots {}", primary.slots), "problem": "replicas"}]),
        "{body}"
    );

    // Each key sent once: the shard's keys fail, the others' succeed.
    let client = common::http_client();
    let keys: Vec<String> = (0..CLIENTS * 4).map(|i| unique(&format!("ha-r-{i}"))).collect();
    let mut tasks = Vec::new();
    for key in keys.clone() {
        let (client, base, method) = (client.clone(), base.to_owned(), method.clone());
        tasks.push(tokio::spawn(async move {
            let (_, _, body) = post(&client, &base, &call_body(&method, &key)).await;
            (key, serde_json::from_str::<Value>(&body).unwrap())
        }));
    }
    let seen = Seen::default();
    let mut failed = Vec::new();
    for t in tasks {
        let (key, v) = t.await.unwrap();
        match v["error"]["code"].as_i64() {
            None => drop(seen.results.lock().unwrap().insert(key, v["result"].clone())),
            Some(-32004) => failed.push(key),
            _ => panic!("{key}: {v}"),
        }
    }
    assert!(!failed.is_empty() && failed.len() < keys.len(), "some keys on the short shard: {failed:?}");
    // The answers may reach us before the reader of the gateway's stderr has seen its lines.
    let wait_said = gw
        .wait_log(Duration::from_secs(10), |l| l.contains("written to 0 of 1 replicas within 1000 ms"))
        .await;
    let log = gw.log().join("\n");
    assert!(wait_said.is_some(), "the WAIT's own answer is logged:\n{log}");
    assert!(!log.contains("timed out"), "no call waited behind another's WAIT:\n{log}");
    // The claims of the failed calls were given back: a retry is not `-32001 in progress`.
    for key in &failed {
        let (_, _, body) = post(&client, base, &call_body(&method, key)).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], -32004, "{key}: {v}\n{}", gw.log().join("\n"));
    }
    let given_back = gw
        .wait_log(Duration::from_secs(10), |l| l.contains("claim not confirmed: given back, command not run"))
        .await;
    assert!(given_back.is_some(), "{}", gw.log().join("\n"));

    drop(stopped);
    health_until(base, "ok again", |s, b| s == 200 && b["status"] == "ok").await;
    for key in &failed {
        until_answered(&client, base, &method, key, &seen).await;
    }
    each_ran_once(&up, base, &method, &keys, &seen).await;
}

/// A primary killed (`kill -9`) under 16 clients with `redis_wait_replicas = 1`, the store
/// URL naming that very node: its replica is promoted, the gateway follows (its other nodes
/// are seeds), `/healthz` stays `200` naming the shard while it cannot serve, and once the
/// killed node is back (now a replica) every key has run exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_primary_killed_fails_over_and_nothing_runs_twice() {
    let Some(_) = redis_ha_url() else { return };
    let _serial = SERIAL.lock().await;
    ha(&["redis"]);
    let victim = nodes().into_iter().find(|n| n.primary.is_none()).expect("a primary");
    let up = Upstream::start().await;
    let dir = TempDir::new("ha-redis-kill");
    let method = unique("pay");
    let store = format!("redis://127.0.0.1:{}", victim.port);
    let cfg = config(&dir, &store, "redis_wait_replicas = 1", &method, &up);
    let gw = Gateway::start(&["--config", &cfg]);
    let base = gw.url("");
    let base = base.trim_end_matches('/').to_owned();
    health_until(&base, "ok", |s, b| s == 200 && b["status"] == "ok").await;
    let health = HealthLog::start(&base);

    let (seen, stop) = (Arc::new(Seen::default()), Arc::new(AtomicBool::new(false)));
    let load = {
        let (base, method, seen, stop) = (base.clone(), method.clone(), seen.clone(), stop.clone());
        tokio::spawn(async move { clients(&base, &method, stop, &seen).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    signal(pid_of(victim.port), "-9");
    // The cluster notices within its node timeout (2 s) and promotes the replica; the node
    // then comes back, as a replica of its successor.
    tokio::time::sleep(Duration::from_secs(5)).await;
    ha(&["redis-node", &victim.port.to_string()]);
    ha(&["redis"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    let keys = load.await.expect("the clients");
    health_until(&base, "ok again", |s, b| s == 200 && b["status"] == "ok").await;
    let seen_health = health.stop();

    assert!(
        seen.codes.lock().unwrap().get(&-32004).is_some(),
        "the failover cost some -32004s: {:?}\n{}",
        seen.codes.lock().unwrap(),
        gw.log().join("\n")
    );
    assert!(seen_health.iter().all(|(s, _)| *s == 200), "never 503 while two shards serve: {seen_health:?}");
    assert!(
        seen_health
            .iter()
            .any(|(_, b)| b["status"] == "degraded" && b["shards"].as_array().is_some_and(|s| s.len() == 1)),
        "the shard that failed over was named: {seen_health:?}"
    );
    each_ran_once(&up, &base, &method, &keys, &seen).await;
    let log = gw.log().join("\n");
    assert!(!log.contains("Moved"), "redirections are followed, never answered:\n{log}");
}

/// A slot moved to another primary (as a resharding or a failover does) while a waited write's
/// connection still has the old slot map: the `MOVED` answer is followed, the key's retry
/// replays its outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_moved_slot_is_followed() {
    let Some(_) = redis_ha_url() else { return };
    let _serial = SERIAL.lock().await;
    ha(&["redis"]);
    let up = Upstream::start().await;
    let dir = TempDir::new("ha-redis-moved");
    let method = unique("pay");
    let cfg = config(&dir, "redis://127.0.0.1:7101", "redis_wait_replicas = 1", &method, &up);
    let prefix = std::fs::read_to_string(&cfg)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("redis_prefix = ").map(|p| p.trim_matches('"').to_owned()))
        .unwrap();
    let gw = Gateway::start(&["--config", &cfg]);
    let base = gw.url("");
    let base = base.trim_end_matches('/');
    let client = common::http_client();
    let key = unique("moved");
    let (_, idem, first) = post(&client, base, &call_body(&method, &key)).await;
    assert_eq!(idem.as_deref(), Some("new"), "{first}");

    // The record's slot, the primary that serves it, and another primary to move it to.
    let all = nodes();
    let record = all
        .iter()
        .find_map(|n| {
            redis_cli(n.port, &["--raw", "keys", &format!("{prefix}:*:r:*")])
                .lines()
                .next()
                .map(str::to_owned)
        })
        .expect("the record");
    let slot = redis_cli(all[0].port, &["cluster", "keyslot", &record]).trim().to_owned();
    let n: u16 = slot.parse().expect("a slot");
    let primaries: Vec<Node> = all.into_iter().filter(|n| n.primary.is_none()).collect();
    let owner = primaries.iter().find(|p| serves(&p.slots, n)).expect("the slot's primary").clone();
    let target = primaries.iter().find(|n| n.id != owner.id).unwrap();
    redis_cli(target.port, &["cluster", "setslot", &slot, "importing", &owner.id]);
    redis_cli(owner.port, &["cluster", "setslot", &slot, "migrating", &target.id]);
    let in_slot = redis_cli(owner.port, &["--raw", "cluster", "getkeysinslot", &slot, "100"]);
    let port = target.port.to_string();
    let mut migrate = vec!["migrate", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    migrate.extend(in_slot.lines());
    let migrated = redis_cli(owner.port, &migrate);
    assert!(migrated.contains("OK"), "keys migrated: {migrated:?} ({migrate:?}, {owner:?})");
    for n in &primaries {
        redis_cli(n.port, &["cluster", "setslot", &slot, "node", &target.id]);
    }

    let (_, idem, again) = post(&client, base, &call_body(&method, &key)).await;
    assert_eq!(idem.as_deref(), Some("duplicate"), "{again}");
    assert_eq!(again, first, "the stored outcome, from its new node");
    assert_eq!(up.count("charge"), 1);
}

fn postgres_ha_url() -> Option<String> {
    oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_HA_URL", "a PostgreSQL primary with a standby")
}

/// The primary stopped (`immediate`) under 16 clients and the standby promoted — but the
/// standby still requires a synchronous standby of its own, so every commit hangs. Each store
/// call gives up at `store.op_timeout_ms`: `-32004`, nothing run, `/healthz` `503`. Once the
/// setting is fixed (no restart of anything) every key runs, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_promoted_standby_that_hangs_is_a_store_that_fails() {
    let Some(url) = postgres_ha_url() else { return };
    let _serial = SERIAL.lock().await;
    ha(&["postgres"]);
    let up = Upstream::start().await;
    let dir = TempDir::new("ha-postgres");
    let method = unique("pay");
    let cfg = config(&dir, &url, "", &method, &up);
    let gw = Gateway::start(&["--config", &cfg]);
    let base = gw.url("");
    let base = base.trim_end_matches('/').to_owned();
    health_until(&base, "ok", |s, b| s == 200 && b["status"] == "ok").await;
    let health = HealthLog::start(&base);

    let (seen, stop) = (Arc::new(Seen::default()), Arc::new(AtomicBool::new(false)));
    let load = {
        let (base, method, seen, stop) = (base.clone(), method.clone(), seen.clone(), stop.clone());
        tokio::spawn(async move { clients(&base, &method, stop, &seen).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    ha(&["pg-ctl", "primary", "stop", "-m", "immediate"]);
    ha(&["pg-ctl", "standby", "promote", "-w"]);
    // The promoted standby waits for a synchronous standby that does not exist: the gateway
    // must say so rather than hang.
    let hang = tokio::time::timeout(
        Duration::from_secs(30),
        health_until(&base, "503 while commits hang", |s, _| s == 503),
    )
    .await;
    if hang.is_err() {
        panic!("no 503: codes {:?}\n{}", seen.codes.lock().unwrap(), gw.log().join("\n"));
    }
    let hung = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", "5434", "-U", "postgres", "-d", "postgres", "-qc"])
        .arg("ALTER SYSTEM SET synchronous_standby_names = ''")
        .status()
        .unwrap();
    assert!(hung.success());
    Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            "5434",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-qAtc",
            "SELECT pg_reload_conf()",
        ])
        .status()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    let keys = load.await.expect("the clients");
    health_until(&base, "ok again", |s, b| s == 200 && b["status"] == "ok").await;
    health.stop();

    assert!(seen.codes.lock().unwrap().get(&-32004).is_some(), "the hang was answered -32004");
    let named = gw
        .wait_log(Duration::from_secs(10), |l| {
            l.contains("did not answer within 3000 ms (store.op_timeout_ms)")
        })
        .await;
    assert!(named.is_some(), "the bound is named in the log:\n{}", gw.log().join("\n"));
    each_ran_once(&up, &base, &method, &keys, &seen).await;
}
