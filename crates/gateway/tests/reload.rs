//! Reloading the whole configuration while serving (SPEC "Reloading the configuration"): a
//! real `oncerpc serve` process, real HTTP, its config file rewritten and `SIGHUP` sent, as
//! `systemctl reload` does. Under load nothing fails and no command runs twice; keys rotate
//! with no moment where neither works; a bad file changes nothing.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::reload::Reloadable;
use common::upstream::Upstream;
use serde_json::json;

const OLD_KEY: &str = "acme-old-key-0123456789";
const NEW_KEY: &str = "acme-new-key-9876543210";

/// A config: tenant `acme` with `keys`, the command flow `orders.create` (step `charge`) and
/// the query flow `orders.get` (step `lookup`) on `up`, and `extra` more lines.
fn config(up: &Upstream, keys: &[&str], extra: &str) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("\"{k}\"")).collect();
    format!(
        r#"
[store]
url = "memory://"

[[tenants]]
name = "acme"
api_keys = [{keys}]

[[methods]]
name = "orders.create"
kind = "command"

  [[methods.steps]]
  name = "charge"
  url = "{charge}"

[[methods]]
name = "orders.get"
kind = "query"

  [[methods.steps]]
  name = "lookup"
  url = "{lookup}"
{extra}
"#,
        keys = keys.join(", "),
        charge = up.url("charge"),
        lookup = up.url("lookup"),
    )
}

fn rpc(method: &str, id: u64) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": {"amount": 1}, "id": id}).to_string()
}

/// Clients hammer keyed commands (each sent twice: the retry must be a duplicate) and
/// queries on kept-alive connections while the config is reloaded five times: every answer
/// is a result, and the upstream was called once per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_load_fail_nothing_and_run_no_command_twice() {
    let up = Upstream::start().await;
    up.set_delay(5, &["charge"]);
    let mut gw = Reloadable::start("reload-load", &config(&up, &[OLD_KEY], ""), &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..4u64 {
        let (http, stop) = (gw.gw.http(), stop.clone());
        clients.push(tokio::spawn(async move {
            let (mut keys, mut answers) = (Vec::new(), 0u64);
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) || i < 10 {
                i += 1;
                let key = format!("load-{c}-{i}");
                for attempt in 0..2 {
                    let a = http
                        .rpc(rpc("orders.create", i), &[("x-api-key", OLD_KEY), ("x-idempotency-key", &key)])
                        .await;
                    assert_eq!(a.status, 200, "{key}: {}", a.body);
                    assert!(a.json().get("result").is_some(), "{key}: {}", a.body);
                    let want = if attempt == 0 { "new" } else { "duplicate" };
                    assert_eq!(a.header("x-idempotency-status"), Some(want), "{key}: {}", a.body);
                    answers += 1;
                }
                keys.push(key);
                let q = http.rpc(rpc("orders.get", i), &[("x-api-key", OLD_KEY)]).await;
                assert_eq!(q.status, 200, "{}", q.body);
                assert!(q.json().get("result").is_some(), "{}", q.body);
                answers += 1;
            }
            (keys, answers)
        }));
    }
    for n in 1..=5 {
        // Each reload changes something every request reads: a limit and a new method.
        let extra = format!(
            "[limits]\nmax_body_bytes = {}\n\n[[methods]]\nname = \"extra.v{n}\"\nkind = \"query\"\n  [[methods.steps]]\n  name = \"s\"\n  url = \"{}\"\n",
            1_048_576 + n,
            up.url("s")
        );
        let last = gw.reload(&config(&up, &[OLD_KEY], &extra)).await;
        assert_eq!(last["outcome"], "ok", "{last}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut all = HashSet::new();
    let mut answers = 0;
    for c in clients {
        let (keys, n) = tokio::time::timeout(Duration::from_secs(60), c)
            .await
            .expect("no client hangs")
            .expect("no client failed");
        answers += n;
        all.extend(keys);
    }
    assert!(answers > 40, "the clients were busy across the reloads ({answers} answers)");
    assert_eq!(up.count("charge"), all.len(), "each command ran once upstream");
    let keyed: HashSet<String> = up
        .calls()
        .iter()
        .filter(|c| c.step == "charge")
        .map(|c| c.idempotency_key.clone().expect("a step key"))
        .collect();
    assert_eq!(keyed.len(), all.len(), "no key reached the upstream twice");
    assert_eq!(gw.metric("oncerpc_config_reloads_total{outcome=\"ok\"}").await, Some(5.0));
    assert_eq!(gw.metric("oncerpc_config_reloads_total{outcome=\"failed\"}").await, Some(0.0));
    let cfg = gw.config().await;
    let info = format!("oncerpc_config_info{{hash=\"{}\"}}", cfg["hash"].as_str().unwrap());
    assert_eq!(gw.metric(&info).await, Some(1.0), "the gauge names the loaded file");
    // The last reload's method is served, and listed.
    let d = gw.gw.http().rpc(rpc("rpc.discover", 1), &[("x-api-key", OLD_KEY)]).await.json();
    let names: Vec<&str> =
        d["result"]["methods"].as_array().unwrap().iter().filter_map(|m| m["name"].as_str()).collect();
    assert!(names.contains(&"extra.v5") && !names.contains(&"extra.v4"), "{names:?}");
}

/// Whether `key` is accepted (`200`) or refused (`401`); anything else fails the test.
async fn accepted(http: common::process::Http, key: &'static str) -> bool {
    let a = http.rpc(rpc("orders.get", 1), &[("x-api-key", key)]).await;
    match a.status {
        200 => true,
        401 => false,
        s => panic!("{key}: {s} {}", a.body),
    }
}

/// Key rotation: add the new key, then remove the old. Probes sent all along with both keys
/// show that at every moment at least one works, that the new one is never refused once
/// accepted, and the old one never accepted once refused — refused from the first request
/// after the reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_with_no_moment_where_neither_works() {
    let up = Upstream::start().await;
    let mut gw = Reloadable::start("reload-keys", &config(&up, &[OLD_KEY], ""), &[]);
    let http = gw.gw.http();
    let accepted = |key: &'static str| accepted(http.clone(), key);
    assert!(accepted(OLD_KEY).await);
    assert!(!accepted(NEW_KEY).await, "the new key is not configured yet");
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let (stop, http) = (stop.clone(), http.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let (old, new) = tokio::join!(
                    self::accepted(http.clone(), OLD_KEY),
                    self::accepted(http.clone(), NEW_KEY)
                );
                seen.push((old, new));
            }
            seen
        })
    };
    let both = gw.reload(&config(&up, &[OLD_KEY, NEW_KEY], "")).await;
    assert_eq!(both["outcome"], "ok", "{both}");
    assert!(accepted(NEW_KEY).await && accepted(OLD_KEY).await, "both work between the two reloads");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let only_new = gw.reload(&config(&up, &[NEW_KEY], "")).await;
    assert_eq!(only_new["outcome"], "ok", "{only_new}");
    assert!(!accepted(OLD_KEY).await, "the removed key is refused from the next request");
    assert!(accepted(NEW_KEY).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, Ordering::SeqCst);
    let seen = probe.await.expect("the probe ran");
    assert!(seen.len() > 4, "probed across both reloads: {seen:?}");
    assert!(seen.iter().all(|(old, new)| *old || *new), "a moment where neither key worked: {seen:?}");
    let first_new = seen.iter().position(|(_, new)| *new).expect("the new key was accepted");
    assert!(seen[first_new..].iter().all(|(_, new)| *new), "the new key was refused after: {seen:?}");
    if let Some(gone) = seen.iter().position(|(old, _)| !*old) {
        assert!(seen[gone..].iter().all(|(old, _)| !*old), "the old key came back: {seen:?}");
    }
    assert!(seen.iter().any(|(old, new)| *old && *new), "both keys worked for a while: {seen:?}");
}

/// A file with a syntax error, an unknown key, or a `${NAME}` whose variable is not set
/// changes nothing: the old key and methods keep working, the failure is counted, logged at
/// error (without the file's quoted line) and shown on /healthz by kind. A setting that needs
/// a restart is named and left as it was while the rest applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_changes_nothing_and_is_counted() {
    let up = Upstream::start().await;
    let good = config(&up, &[OLD_KEY], "");
    let mut gw = Reloadable::start("reload-bad", &good, &[]);
    let loaded = gw.config().await;
    assert_eq!(loaded["hash"].as_str().map(str::len), Some(64), "{loaded}");
    assert!(loaded.get("last_reload").is_none(), "{loaded}");
    let bad = [
        ("parse", good.replace(&format!("[\"{OLD_KEY}\"]"), "[\"leaked-secret-text\"")),
        ("parse", good.replace("kind = \"query\"", "kind = \"query\"\nsurprise = true")),
        ("invalid", good.replace(OLD_KEY, "${ONCERPC_TEST_RELOAD_UNSET_VARIABLE}")),
        ("invalid", format!("{good}\n[[methods]]\nname = \"rpc.reserved\"\nkind = \"query\"\n")),
    ];
    for (n, (kind, text)) in bad.iter().enumerate() {
        let last = gw.reload(text).await;
        assert_eq!(last["outcome"], "failed", "{n}: {last}");
        assert_eq!(last["error"], *kind, "{n}: {last}");
        let a = gw.gw.http().rpc(rpc("orders.get", 1), &[("x-api-key", OLD_KEY)]).await;
        assert_eq!(a.status, 200, "{n}: the running config still serves: {}", a.body);
        assert_eq!(gw.config().await["hash"], loaded["hash"], "{n}: the loaded config is the same");
    }
    assert_eq!(gw.metric("oncerpc_config_reloads_total{outcome=\"failed\"}").await, Some(bad.len() as f64));
    assert_eq!(gw.metric("oncerpc_config_reloads_total{outcome=\"ok\"}").await, Some(0.0));
    let log = gw.gw.log().join("\n");
    assert_eq!(log.matches("configuration not reloaded").count(), bad.len(), "{log}");
    assert!(log.contains("ONCERPC_TEST_RELOAD_UNSET_VARIABLE"), "the missing variable is named: {log}");
    assert!(log.contains("surprise"), "the unknown key is named: {log}");
    assert!(!log.contains("leaked-secret-text"), "the file's quoted line stays out of the log");
    // A restart-only change ([store]) is named and kept; the rest (a new key) applies.
    let mixed = config(&up, &[OLD_KEY, NEW_KEY], "").replace("memory://", "memory://?capacity=5");
    let last = gw.reload(&mixed).await;
    assert_eq!(last["outcome"], "ok", "{last}");
    assert_ne!(gw.config().await["hash"], loaded["hash"]);
    let a = gw.gw.http().rpc(rpc("orders.get", 1), &[("x-api-key", NEW_KEY)]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let warned = gw.gw.wait_log(Duration::from_secs(5), |l| l.contains("need a restart")).await;
    assert!(warned.is_some_and(|l| l.contains("[store]")), "{:#?}", gw.gw.log());
    // The store was kept: more than 5 records still fit.
    for i in 0..8 {
        let key = format!("fit-{i}");
        let a = gw
            .gw
            .http()
            .rpc(rpc("orders.create", i), &[("x-api-key", NEW_KEY), ("x-idempotency-key", &key)])
            .await;
        assert!(a.json().get("result").is_some(), "{}", a.body);
    }
}

/// Without `[tls]` and without a config file a `SIGHUP` used to end the process at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighup_never_ends_the_process() {
    let mut gw = common::process::Gateway::start(&["--store", "memory://"]);
    for _ in 0..3 {
        let status = std::process::Command::new("kill")
            .args(["-HUP", &gw.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }
    let reloaded = gw.wait_log(Duration::from_secs(10), |l| l.contains("configuration reloaded")).await;
    assert!(reloaded.is_some(), "{:#?}", gw.log());
    assert!(gw.child.try_wait().expect("try_wait").is_none(), "the process is alive");
    let a = gw.http().rpc(rpc("rpc.discover", 1), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    gw.sigterm();
    assert!(gw.wait_exit(Duration::from_secs(20)).success());
}

/// A reload keeps a tenant's rate bucket when its limits are the same (a reload is no way
/// around a rate limit), and starts a fresh one when they changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_a_tenants_rate_bucket_unless_its_limits_changed() {
    let up = Upstream::start().await;
    // One request per ~3 hours: the bucket never refills during the test.
    let limited = |burst: u32| {
        config(&up, &[OLD_KEY], "").replace(
            "name = \"acme\"\n",
            &format!("name = \"acme\"\nrate_per_sec = 0.0001\nburst = {burst}\n"),
        )
    };
    let mut gw = Reloadable::start("reload-rate", &limited(1), &[]);
    let http = gw.gw.http();
    let status = |http: common::process::Http| async move {
        http.rpc(rpc("orders.get", 1), &[("x-api-key", OLD_KEY)]).await.status
    };
    assert_eq!(status(http.clone()).await, 200);
    assert_eq!(status(http.clone()).await, 429, "the bucket is empty");
    // Something else changes (a method): the tenant's bucket stays empty.
    let more = format!(
        "{}\n[[methods]]\nname = \"x.y\"\nkind = \"query\"\n  [[methods.steps]]\n  name = \"s\"\n  url = \"{}\"\n",
        limited(1),
        up.url("s")
    );
    assert_eq!(gw.reload(&more).await["outcome"], "ok");
    assert_eq!(status(http.clone()).await, 429, "a reload does not refill the bucket");
    // Its limits change: a new bucket of the new size.
    assert_eq!(gw.reload(&limited(2)).await["outcome"], "ok");
    assert_eq!(status(http.clone()).await, 200);
    assert_eq!(status(http.clone()).await, 200);
    assert_eq!(status(http.clone()).await, 429);
}

/// The access lines of `orders.get` in `gw`'s log so far.
fn access_lines(gw: &Reloadable) -> usize {
    gw.gw.log().iter().filter(|l| l.contains(": request ") && l.contains("method=orders.get")).count()
}

/// Call `orders.get` and wait (bounded) until the log holds `want` of its access lines.
async fn access_lines_become(gw: &Reloadable, want: usize) -> usize {
    let a = gw.gw.http().rpc(rpc("orders.get", 1), &[("x-api-key", OLD_KEY)]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while access_lines(gw) != want && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    access_lines(gw)
}

/// `[log] level` reloads: at `warn` a request writes no access line, back at `info` it does;
/// a level the file may not hold is refused and changes nothing. `RUST_LOG` fixes the level:
/// a reload's `[log] level` is then named in the log and left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_level_reloads_unless_rust_log_fixes_it() {
    let up = Upstream::start().await;
    let level = |l: &str| config(&up, &[OLD_KEY], &format!("\n[log]\nlevel = \"{l}\"\n"));
    let mut gw = Reloadable::start("reload-log", &level("info"), &[]);
    assert_eq!(access_lines_become(&gw, 1).await, 1, "info: the access line");
    assert_eq!(gw.reload(&level("warn")).await["outcome"], "ok");
    assert!(gw.gw.wait_log(Duration::from_secs(5), |l| l.contains("log level changed")).await.is_some());
    // Two requests at warn, then one back at info: only the last is logged.
    gw.gw.http().rpc(rpc("orders.get", 1), &[("x-api-key", OLD_KEY)]).await;
    assert_eq!(access_lines_become(&gw, 2).await, 1, "warn: no access line");
    assert_eq!(gw.reload(&level("info")).await["outcome"], "ok");
    assert_eq!(access_lines_become(&gw, 2).await, 2, "info again: the access line");
    let last = gw.reload(&level("warn,oncerpc=loudest")).await;
    assert_eq!(
        (last["outcome"].as_str(), last["error"].as_str()),
        (Some("failed"), Some("invalid")),
        "{last}"
    );
    assert_eq!(access_lines_become(&gw, 3).await, 3, "the refused level changed nothing");

    let mut fixed = Reloadable::start("reload-log-fixed", &level("info"), &[("RUST_LOG", "info")]);
    assert_eq!(fixed.reload(&level("warn")).await["outcome"], "ok");
    let named =
        fixed.gw.wait_log(Duration::from_secs(5), |l| l.contains("the level is set by RUST_LOG")).await;
    assert!(named.is_some(), "{:#?}", fixed.gw.log());
    assert_eq!(access_lines_become(&fixed, 1).await, 1, "still info");
}
