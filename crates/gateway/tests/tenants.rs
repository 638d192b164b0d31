//! Per-tenant limits (SPEC §12, issue 10): `rate_per_sec`/`burst` (token bucket, `429` +
//! `Retry-After`, `-32008` on `/rpc`) and `max_in_flight` (`503`, `-32007`), so one tenant
//! cannot starve another. The rate attack runs against the real `oncerpc` binary on loopback
//! (issue "hold the edge"); the other tests against an in-process server.

mod common;

use std::time::{Duration, Instant};

use common::process::{Gateway, Http, TempDir};
use common::{Answer, TestServer, test_config};
use oncerpc::Config;
use oncerpc::config::Tenant;
use serde_json::json;

const LIMITED_KEY: &str = "limited-secret";
const OPEN_KEY: &str = "open-secret";
const NARROW_KEY: &str = "narrow-secret";

fn tenant(name: &str, key: &str) -> Tenant {
    Tenant { name: name.into(), api_keys: vec![key.into()], ..Tenant::default() }
}

fn config() -> Config {
    let mut cfg = test_config();
    cfg.tenants = vec![
        Tenant { rate_per_sec: Some(5.0), burst: Some(5), ..tenant("limited", LIMITED_KEY) },
        tenant("open", OPEN_KEY),
        Tenant { max_in_flight: Some(2), ..tenant("narrow", NARROW_KEY) },
    ];
    cfg
}

async fn counter_get(h: &Http, key: &str) -> Answer {
    h.rpc(r#"{"jsonrpc":"2.0","method":"counter.get","id":7}"#, &[("X-API-Key", key)]).await
}

fn retry_after(a: &Answer) -> u64 {
    a.header("retry-after")
        .unwrap_or_else(|| panic!("429 without Retry-After: {:?}", a.headers))
        .parse()
        .expect("Retry-After is whole seconds")
}

#[tokio::test]
async fn a_tenant_over_its_rate_gets_429_while_another_tenant_is_served() {
    let dir = TempDir::new("tenants-rate");
    let gw = Gateway::with_config(
        &dir,
        &format!(
            r#"
[store]
url = "memory://"

[[tenants]]
name = "limited"
api_keys = ["{LIMITED_KEY}"]
rate_per_sec = 5
burst = 5

[[tenants]]
name = "open"
api_keys = ["{OPEN_KEY}"]
"#
        ),
    );
    let s = gw.http();
    let started = Instant::now();
    let (limited, open) = tokio::join!(
        futures::future::join_all((0..20).map(|_| counter_get(&s, LIMITED_KEY))),
        futures::future::join_all((0..20).map(|_| counter_get(&s, OPEN_KEY))),
    );
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(5), "refusals are immediate");

    // The other tenant, at the same moment: every request served.
    for a in &open {
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.json()["result"]["total"], 0, "{}", a.body);
    }

    let ok = limited.iter().filter(|a| a.status == 200).count();
    let refused: Vec<&Answer> = limited.iter().filter(|a| a.status == 429).collect();
    assert_eq!(ok + refused.len(), 20, "only 200 or 429");
    // The burst of 5, plus the tokens replenished (one per 200 ms) while the 20 arrived.
    let most = 6.0 + elapsed.as_secs_f64() * 5.0;
    assert!(ok >= 5 && ok as f64 <= most, "{ok} served in {elapsed:?}");
    for a in &refused {
        assert!(retry_after(a) >= 1);
        let v = a.json();
        assert_eq!(v["jsonrpc"], "2.0", "{}", a.body);
        assert_eq!(v["error"]["code"], -32008, "{}", a.body);
        assert_eq!(v["id"], serde_json::Value::Null, "{}", a.body);
        assert!(a.header("x-correlation-id").is_some());
    }

    // After waiting as told, the tenant is served again.
    let wait = refused.iter().map(|a| retry_after(a)).max().unwrap();
    assert!(wait <= 2, "one token comes back within 200 ms: Retry-After {wait}");
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let again = counter_get(&s, LIMITED_KEY).await;
    assert_eq!(again.status, 200, "{}", again.body);

    let m = s.get("/metrics", &[]).await.body;
    let line = format!(
        r#"oncerpc_tenant_refusals_total{{reason="rate_limited",tenant="limited"}} {}"#,
        refused.len()
    );
    assert!(m.contains(&line), "{line} not in\n{m}");
    assert!(!m.contains(r#"tenant="open""#), "{m}");
}

#[tokio::test]
async fn the_flows_door_answers_429_with_its_own_shape() {
    let mut cfg = test_config();
    cfg.tenants = vec![Tenant { rate_per_sec: Some(0.5), burst: Some(1), ..tenant("limited", LIMITED_KEY) }];
    let s = TestServer::start_with(cfg).await;
    let h = [("X-API-Key", LIMITED_KEY)];
    // The one token: the request passes the limiter (and then finds no such flow).
    let first = s.post_path("/v2/flows/nope", "{}".to_owned(), &h).await;
    assert_eq!(first.status, 404, "{}", first.body);
    let a = s.post_path("/v2/flows/nope", "{}".to_owned(), &h).await;
    assert_eq!(a.status, 429, "{}", a.body);
    assert_eq!(a.json(), json!({"code": "429", "message": "rate limited"}));
    let secs = retry_after(&a);
    assert!((1..=2).contains(&secs), "a token every 2 s: Retry-After {secs}");
    assert!(a.header("x-correlation-id").is_some());
    let m = s.get("/metrics").await.body;
    assert!(m.contains(r#"oncerpc_tenant_refusals_total{reason="rate_limited",tenant="limited"} 1"#), "{m}");
}

#[tokio::test]
async fn a_tenant_over_its_max_in_flight_gets_503_and_others_are_unaffected() {
    let s = TestServer::start_with(config()).await;
    let sleep = |i: usize, key: &'static str| {
        let body = json!({"jsonrpc":"2.0","method":"demo.sleep",
            "params":{"ms":800,"idempotency_key":format!("{key}-{i}")},"id":i})
        .to_string();
        let s = &s;
        async move { s.post_with(body, &[("X-API-Key", key)]).await }
    };
    let (narrow, open) = tokio::join!(
        futures::future::join_all((0..5).map(|i| sleep(i, NARROW_KEY))),
        futures::future::join_all((0..5).map(|i| sleep(i, OPEN_KEY))),
    );
    let ran: Vec<&Answer> = narrow.iter().filter(|a| a.status == 200).collect();
    let refused: Vec<&Answer> = narrow.iter().filter(|a| a.status == 503).collect();
    assert_eq!(ran.len(), 2, "{:?}", narrow.iter().map(|a| &a.body).collect::<Vec<_>>());
    assert_eq!(refused.len(), 3);
    for a in &ran {
        assert_eq!(a.json()["result"]["slept_ms"], 800, "{}", a.body);
    }
    for a in &refused {
        let v = a.json();
        assert_eq!(v["error"]["code"], -32007, "{}", a.body);
        assert_eq!(v["id"], serde_json::Value::Null);
        assert_eq!(a.header("retry-after"), Some("1"), "every 503 says when to come back");
    }
    for a in &open {
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.json()["result"]["slept_ms"], 800, "{}", a.body);
    }
    // The slots come back when the requests end.
    let after = sleep(99, NARROW_KEY).await;
    assert_eq!(after.status, 200, "{}", after.body);

    let m = s.get("/metrics").await.body;
    assert!(m.contains(r#"oncerpc_tenant_refusals_total{reason="overloaded",tenant="narrow"} 3"#), "{m}");
    assert!(!m.contains(r#"tenant="open""#), "{m}");
    // The global limit was never reached.
    assert!(!m.contains("oncerpc_overloaded_total{"), "{m}");
}

#[test]
fn bad_tenant_limits_are_refused_naming_the_key() {
    let cases: [(Tenant, &str); 6] = [
        (Tenant { rate_per_sec: Some(0.0), ..tenant("acme", LIMITED_KEY) }, "tenants.acme.rate_per_sec"),
        (Tenant { rate_per_sec: Some(-1.0), ..tenant("acme", LIMITED_KEY) }, "tenants.acme.rate_per_sec"),
        (Tenant { rate_per_sec: Some(f64::NAN), ..tenant("acme", LIMITED_KEY) }, "tenants.acme.rate_per_sec"),
        (
            Tenant { rate_per_sec: Some(1.0), burst: Some(0), ..tenant("acme", LIMITED_KEY) },
            "tenants.acme.burst",
        ),
        (Tenant { burst: Some(3), ..tenant("acme", LIMITED_KEY) }, "tenants.acme.burst"),
        (Tenant { max_in_flight: Some(0), ..tenant("acme", LIMITED_KEY) }, "tenants.acme.max_in_flight"),
    ];
    for (t, key) in cases {
        let mut cfg = test_config();
        cfg.tenants = vec![t];
        let err = cfg.validate().expect_err(key).to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
    let mut cfg = test_config();
    cfg.tenants = vec![Tenant {
        rate_per_sec: Some(0.5),
        burst: Some(2),
        max_in_flight: Some(1),
        ..tenant("acme", LIMITED_KEY)
    }];
    cfg.validate().expect("valid limits");
}

#[test]
fn tenant_limits_parse_from_toml_integers_and_fractions() {
    let cfg: Config = toml::from_str(
        r#"
        [[tenants]]
        name = "a"
        api_keys = ["a-key"]
        rate_per_sec = 5
        [[tenants]]
        name = "b"
        api_keys = ["b-key"]
        rate_per_sec = 0.5
        burst = 3
        max_in_flight = 4
        "#,
    )
    .expect("parses");
    assert_eq!(cfg.tenants[0].rate_per_sec, Some(5.0));
    assert_eq!(cfg.tenants[0].burst, None);
    assert_eq!(cfg.tenants[1].rate_per_sec, Some(0.5));
    assert_eq!(cfg.tenants[1].burst, Some(3));
    assert_eq!(cfg.tenants[1].max_in_flight, Some(4));
    let bad: Result<Config, _> =
        toml::from_str("[[tenants]]\nname = \"a\"\napi_keys = [\"k\"]\nburst = -1\n");
    assert!(bad.is_err());
}

/// Background work counts against the tenant that made it (issue "events you can trust",
/// finding 4): with `limits.max_background = 4` and two tenants, each has an equal share of 2.
/// A tenant that fills its share with async events is refused itself (`503`, counted per
/// tenant); the other tenant's events are still accepted; an explicit share overrides.
#[tokio::test]
async fn a_tenant_filling_the_background_pool_is_refused_and_the_others_are_not() {
    let mut cfg = test_config();
    cfg.limits.max_background = 4;
    cfg.tenants = vec![tenant("greedy", LIMITED_KEY), tenant("patient", OPEN_KEY)];
    let s = TestServer::start_with(cfg).await;
    let sleep = |key: &'static str, n: usize| {
        let idem = format!("{key}-{n}");
        let s = &s;
        async move {
            let headers = [("X-API-Key", key), ("X-Idempotency-Key", idem.as_str())];
            s.post_path("/v2/flows/demo.sleep", r#"{"ms":3000}"#, &headers).await
        }
    };
    let mut greedy = Vec::new();
    for n in 0..5 {
        greedy.push(sleep(LIMITED_KEY, n).await.status);
    }
    assert_eq!(greedy, [200, 200, 503, 503, 503], "the greedy tenant gets its share only");
    for n in 0..2 {
        let a = sleep(OPEN_KEY, n).await;
        assert_eq!(a.status, 200, "the other tenant keeps its share: {}", a.body);
    }
    let metrics = s.get("/metrics").await.body;
    assert!(
        metrics.lines().any(|l| l.starts_with("oncerpc_tenant_refusals_total")
            && l.contains(r#"tenant="greedy""#)
            && l.contains(r#"reason="background""#)
            && l.ends_with(" 3")),
        "three refusals counted against the greedy tenant"
    );

    // An explicit share: the greedy tenant may hold 3 of the 4.
    let mut cfg = test_config();
    cfg.limits.max_background = 4;
    cfg.tenants = vec![Tenant { max_background: Some(3), ..tenant("greedy", LIMITED_KEY) }];
    let s = TestServer::start_with(cfg).await;
    let mut statuses = Vec::new();
    for n in 0..4 {
        let headers = [("X-API-Key", LIMITED_KEY), ("X-Idempotency-Key", &*format!("share-{n}"))];
        statuses.push(s.post_path("/v2/flows/demo.sleep", r#"{"ms":3000}"#, &headers).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 503]);
}
