//! Events you can operate (SPEC §14, issue 14 part 3): `GET /v2/events` (tenant-scoped,
//! filtered, newest first, cursor pagination) and `POST /v2/events/{id}/retry` (re-drive a
//! failed event under the same id), against a real oncerpc server and a real upstream on
//! loopback.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::upstream::{Upstream, flow};
use common::{Answer, TestServer, test_config};
use oncerpc::Config;
use oncerpc::config::Tenant;
use serde_json::{Value, json};

const ACME_KEY: &str = "acme-secret";
const BETA_KEY: &str = "beta-secret";

/// Two flows, two tenants, the memory store.
fn config(up: &Upstream) -> Config {
    let mut cfg = test_config();
    cfg.methods =
        vec![flow("orders.create", up, &["reserve", "confirm"]), flow("orders.refund", up, &["refund"])];
    cfg.tenants = vec![
        Tenant { name: "acme".into(), api_keys: vec![ACME_KEY.into()], ..Tenant::default() },
        Tenant { name: "beta".into(), api_keys: vec![BETA_KEY.into()], ..Tenant::default() },
    ];
    cfg.store.resume_interval_ms = 100;
    cfg
}

async fn start() -> (TestServer, Upstream) {
    let up = Upstream::start().await;
    let s = TestServer::start_with(config(&up)).await;
    (s, up)
}

/// Submit an async execution; returns its event id.
async fn submit(s: &TestServer, flow: &str, query: &str, body: &str, headers: &[(&str, &str)]) -> String {
    let a = s.post_path(&format!("/v2/flows/{flow}{query}"), body.to_owned(), headers).await;
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()["event_id"].as_str().expect("an event id").to_owned()
}

/// [`submit`], a few milliseconds after the previous one: listings order by creation time
/// (milliseconds), then id, so events made in the same millisecond have no submission order.
async fn submit_apart(
    s: &TestServer,
    flow: &str,
    query: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> String {
    tokio::time::sleep(Duration::from_millis(3)).await;
    submit(s, flow, query, body, headers).await
}

async fn get_event(s: &TestServer, id: &str, key: &str) -> Answer {
    s.get_with(&format!("/v2/events/{id}"), &[("X-API-Key", key)]).await
}

/// Poll an event until it is no longer processing (bounded).
async fn finished_event(s: &TestServer, id: &str, key: &str) -> Value {
    for _ in 0..200 {
        let a = get_event(s, id, key).await;
        assert_eq!(a.status, 200, "{}", a.body);
        let v = a.json();
        if v["status"] != "processing" {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("event {id} did not finish");
}

async fn list(s: &TestServer, query: &str, key: &str) -> Answer {
    s.get_with(&format!("/v2/events{query}"), &[("X-API-Key", key)]).await
}

/// The ids of one listing page (asserting a `200`).
async fn list_ids(s: &TestServer, query: &str, key: &str) -> Vec<String> {
    let a = list(s, query, key).await;
    assert_eq!(a.status, 200, "{query}: {}", a.body);
    ids_of(&a.json())
}

fn ids_of(page: &Value) -> Vec<String> {
    page["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Owned ids, to compare with a page's.
fn v(ids: &[&String]) -> Vec<String> {
    ids.iter().map(|s| (*s).clone()).collect()
}

/// Follow `next_cursor` from the first page to the last; every listed event, in order.
async fn list_all(s: &TestServer, query: &str, key: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1_000 {
        let q = match &cursor {
            None => query.to_owned(),
            Some(c) => format!("{query}&cursor={c}"),
        };
        let a = list(s, &q, key).await;
        assert_eq!(a.status, 200, "{q}: {}", a.body);
        let page = a.json();
        all.extend(page["events"].as_array().expect("events").iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => {
                assert!(page["next_cursor"].is_null(), "{page}");
                return all;
            }
        }
    }
    panic!("the listing did not end");
}

#[tokio::test]
async fn listing_filters_by_status_flow_and_tag_and_shows_the_event_view() {
    let (s, up) = start().await;
    let acme = [("X-API-Key", ACME_KEY)];
    let created_web = submit_apart(&s, "orders.create", "?tags=web", r#"{"sku":"A"}"#, &acme).await;
    let refund_eu = submit_apart(&s, "orders.refund", "?tags=eu", r#"{"sku":"B"}"#, &acme).await;
    finished_event(&s, &created_web, ACME_KEY).await;
    finished_event(&s, &refund_eu, ACME_KEY).await;
    up.set_fail(true);
    let failed_web_eu = submit_apart(&s, "orders.create", "?tags=web,eu", r#"{"sku":"C"}"#, &acme).await;
    assert_eq!(finished_event(&s, &failed_web_eu, ACME_KEY).await["status"], "failed");
    up.set_fail(false);
    // The other tenant's events match every filter below: none may be listed.
    let beta = [("X-API-Key", BETA_KEY)];
    let beta_id = submit_apart(&s, "orders.create", "?tags=web,eu", r#"{"sku":"A"}"#, &beta).await;
    finished_event(&s, &beta_id, BETA_KEY).await;
    // And one acme event still running.
    up.set_delay(1_500, &["refund"]);
    let running = submit_apart(&s, "orders.refund", "?tags=slow", r#"{"sku":"D"}"#, &acme).await;

    // Newest first, everything of acme's, nothing of beta's.
    assert_eq!(list_ids(&s, "", ACME_KEY).await, v(&[&running, &failed_web_eu, &refund_eu, &created_web]));
    assert_eq!(list_ids(&s, "", BETA_KEY).await, v(&[&beta_id]));

    assert_eq!(list_ids(&s, "?status=failed", ACME_KEY).await, v(&[&failed_web_eu]));
    assert_eq!(list_ids(&s, "?status=succeeded", ACME_KEY).await, v(&[&refund_eu, &created_web]));
    assert_eq!(list_ids(&s, "?status=processing", ACME_KEY).await, v(&[&running]));
    assert_eq!(list_ids(&s, "?flow=orders.refund", ACME_KEY).await, v(&[&running, &refund_eu]));
    assert_eq!(list_ids(&s, "?flow=orders.create", ACME_KEY).await, v(&[&failed_web_eu, &created_web]));
    assert!(list_ids(&s, "?flow=orders.unknown", ACME_KEY).await.is_empty());
    assert_eq!(list_ids(&s, "?tag=eu", ACME_KEY).await, v(&[&failed_web_eu, &refund_eu]));
    assert_eq!(list_ids(&s, "?tag=web", ACME_KEY).await, v(&[&failed_web_eu, &created_web]));
    assert!(list_ids(&s, "?tag=nope", ACME_KEY).await.is_empty());
    // Every condition holds at once; empty parameters count as absent; unknown ones are ignored.
    assert_eq!(
        list_ids(&s, "?flow=orders.create&tag=eu&status=failed", ACME_KEY).await,
        v(&[&failed_web_eu])
    );
    assert!(list_ids(&s, "?flow=orders.refund&tag=web", ACME_KEY).await.is_empty());
    assert_eq!(list_ids(&s, "?status=&flow=&tag=&cursor=&limit=&color=red", ACME_KEY).await.len(), 4);

    // Each item is the view of GET /v2/events/{id}.
    let page = list(&s, "?status=failed", ACME_KEY).await.json();
    assert_eq!(page["next_cursor"], Value::Null);
    let single = get_event(&s, &failed_web_eu, ACME_KEY).await.json();
    assert_eq!(page["events"][0], single);
    assert_eq!(single["flow"], "orders.create");
    assert_eq!(single["tags"], json!(["web", "eu"]));
    assert_eq!(single["error"]["data"]["status"], 500, "{single}");
    let page = list(&s, "?flow=orders.refund&status=succeeded", ACME_KEY).await.json();
    assert_eq!(page["events"][0], get_event(&s, &refund_eu, ACME_KEY).await.json());
    assert!(page["events"][0]["result"].is_object(), "{page}");

    // A small page has a cursor that leads to the rest.
    let first = list(&s, "?limit=3", ACME_KEY).await.json();
    assert_eq!(ids_of(&first), v(&[&running, &failed_web_eu, &refund_eu]));
    let cursor = first["next_cursor"].as_str().expect("a next page").to_owned();
    assert_eq!(list_ids(&s, &format!("?limit=3&cursor={cursor}"), ACME_KEY).await, v(&[&created_web]));

    // Bad input: a 400 in the flows door's error style.
    for bad in [
        "?status=done",
        "?status=FAILED",
        "?limit=0",
        "?limit=201",
        "?limit=-1",
        "?limit=ten",
        "?limit=2.5",
        "?cursor=not-a-cursor!",
        "?cursor=Zm9v",   // base64url of "foo": not a listing cursor
        "?cursor=%FF%FE", // not even base64
    ] {
        let a = list(&s, bad, ACME_KEY).await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
        assert_eq!(a.json()["code"], "400", "{bad}");
        assert!(a.json()["message"].as_str().is_some_and(|m| !m.is_empty()), "{bad}");
    }
    assert_eq!(event_api_count(&s, "list", "400").await, 10, "each refusal is counted");
    assert_eq!(list_ids(&s, "?limit=200", ACME_KEY).await.len(), 4, "200 is allowed");
    assert_eq!(list_ids(&s, "?limit=1", ACME_KEY).await, v(&[&running]), "1 is allowed");
    // No key, a wrong key: 401.
    assert_eq!(s.get("/v2/events").await.status, 401);
    assert_eq!(list(&s, "", "wrong").await.status, 401);
    assert_eq!(finished_event(&s, &running, ACME_KEY).await["status"], "succeeded");
}

#[tokio::test]
async fn pagination_over_250_events_across_two_tenants_lists_each_once_newest_first() {
    let (s, _up) = start().await;
    let mut mine: Vec<String> = Vec::new();
    let mut theirs: Vec<String> = Vec::new();
    for i in 0..250 {
        // Interleaved, so both tenants' events are spread over the same time range.
        let (key, ids) = if i % 5 < 3 { (ACME_KEY, &mut mine) } else { (BETA_KEY, &mut theirs) };
        let flow = if i % 2 == 0 { "orders.create" } else { "orders.refund" };
        let (body, headers) = (format!(r#"{{"sku":"P-{i}"}}"#), [("X-API-Key", key)]);
        // The last few apart, so that each tenant's last one is known to be its newest.
        let id = if i < 245 {
            submit(&s, flow, "?tags=bulk", &body, &headers).await
        } else {
            submit_apart(&s, flow, "?tags=bulk", &body, &headers).await
        };
        ids.push(id);
    }
    assert_eq!((mine.len(), theirs.len()), (150, 100));
    let mine_set: HashSet<String> = mine.iter().cloned().collect();
    let theirs_set: HashSet<String> = theirs.iter().cloned().collect();
    assert_eq!(mine_set.len() + theirs_set.len(), 250, "250 distinct events");

    for (key, own, other) in [(ACME_KEY, &mine_set, &theirs_set), (BETA_KEY, &theirs_set, &mine_set)] {
        for query in ["?limit=7", "?limit=100", "?tag=bulk&limit=7", "?", "?limit=200"] {
            let listed = list_all(&s, query, key).await;
            let ids: Vec<&str> = listed.iter().map(|e| e["event_id"].as_str().unwrap()).collect();
            assert!(ids.iter().all(|id| !other.contains(*id)), "{query}: another tenant's event was listed");
            let unique: HashSet<&str> = ids.iter().copied().collect();
            assert_eq!(unique.len(), ids.len(), "{query}: an event was listed twice");
            assert_eq!(unique.len(), own.len(), "{query}: every event of the tenant is listed");
            assert!(ids.iter().all(|id| own.contains(*id)), "{query}");
            // Newest first: by creation time (RFC 3339, same format: sorts as text), then id.
            for w in listed.windows(2) {
                let a = (w[0]["created_at"].as_str().unwrap(), w[0]["event_id"].as_str().unwrap());
                let b = (w[1]["created_at"].as_str().unwrap(), w[1]["event_id"].as_str().unwrap());
                assert!(a > b, "{query}: {a:?} listed before {b:?}");
            }
        }
        // The first page is the newest: the tenant's last submission leads it.
        let newest = if key == ACME_KEY { mine.last() } else { theirs.last() };
        assert_eq!(list_ids(&s, "?limit=7", key).await[0], *newest.unwrap());
    }
    // A filter that splits the events: every refund of acme's, once, and only those.
    let refunds = list_all(&s, "?flow=orders.refund&limit=7", ACME_KEY).await;
    assert_eq!(refunds.len(), 75);
    assert!(refunds.iter().all(|e| e["flow"] == "orders.refund"));
    // A cursor made for beta's listing shows acme nothing of beta's.
    let beta_page = list(&s, "?limit=7", BETA_KEY).await.json();
    let c = beta_page["next_cursor"].as_str().unwrap();
    let ids = list_ids(&s, &format!("?limit=200&cursor={c}"), ACME_KEY).await;
    assert!(ids.iter().all(|id| mine_set.contains(id)));
}

#[tokio::test]
async fn a_failed_event_is_redriven_to_success_under_the_same_id() {
    let (s, up) = start().await;
    up.set_fail(true);
    let acme = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "redrive-1")];
    let id = submit(&s, "orders.create", "?tags=web", r#"{"sku":"R-1"}"#, &acme).await;
    let failed = finished_event(&s, &id, ACME_KEY).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!((up.count("reserve"), up.count("confirm")), (1, 0));
    let retry = |key: &'static str, id: String| {
        let s = &s;
        async move { s.post_path(&format!("/v2/events/{id}/retry"), String::new(), &[("X-API-Key", key)]).await }
    };

    // Another tenant's event and an unknown one are 404; nothing runs, nothing changes.
    let other = retry(BETA_KEY, id.clone()).await;
    assert_eq!(other.status, 404, "{}", other.body);
    assert_eq!(other.json()["code"], "404");
    assert_eq!(retry(ACME_KEY, "evt_00000000000000000000000000000000".into()).await.status, 404);
    assert_eq!(retry(ACME_KEY, "nope".into()).await.status, 404);
    let no_key = s.post_path(&format!("/v2/events/{id}/retry"), String::new(), &[]).await;
    assert_eq!(no_key.status, 401);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(up.count("reserve"), 1, "a refused retry runs nothing");
    assert_eq!(get_event(&s, &id, ACME_KEY).await.json(), failed);

    // Fixed upstream: the re-drive runs the event again, under the same id.
    up.set_fail(false);
    let a = retry(ACME_KEY, id.clone()).await;
    assert_eq!(a.status, 202, "{}", a.body);
    assert_eq!(a.json(), json!({"event_id": id, "status": "processing"}));
    assert!(a.header("x-correlation-id").is_some());
    let done = finished_event(&s, &id, ACME_KEY).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["event_id"], id);
    assert!(done["result"].is_object(), "{done}");
    assert!(done.get("error").is_none(), "{done}");
    assert_eq!(done["tags"], json!(["web"]));
    assert_eq!(done["created_at"], failed["created_at"], "a re-drive keeps the creation time");
    // The upstream got the step again, with the same step key, and the params as sent.
    let reserves: Vec<_> = up.calls().into_iter().filter(|c| c.step == "reserve").collect();
    assert_eq!(reserves.len(), 2);
    let expected = oncerpc_core::idempotency::upstream_key("acme", "orders.create", "redrive-1", "reserve");
    assert!(reserves.iter().all(|c| c.idempotency_key.as_deref() == Some(expected.as_str())), "{reserves:?}");
    assert_eq!(reserves[1].body, reserves[0].body);
    assert_eq!(up.count("confirm"), 1);
    // Still one event, now listed as succeeded.
    assert_eq!(list_ids(&s, "", ACME_KEY).await, v(&[&id]));
    assert_eq!(list_ids(&s, "?status=succeeded", ACME_KEY).await, v(&[&id]));
    assert!(list_ids(&s, "?status=failed", ACME_KEY).await.is_empty());
    // The client's own duplicate now gets the stored success.
    let dup = s.post_path("/v2/flows/orders.create?sync=true", r#"{"sku":"R-1"}"#.to_owned(), &acme).await;
    assert_eq!(dup.status, 200, "{}", dup.body);
    assert_eq!(dup.header("x-idempotency-status"), Some("duplicate"));

    // A succeeded event is not re-driven: 409, nothing runs.
    let again = retry(ACME_KEY, id.clone()).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(again.json()["code"], "409");
    assert_eq!(again.json()["status"], "succeeded");
    assert_eq!(event_api_count(&s, "retry", "409").await, 1, "the refusal is counted");
    assert_eq!(event_api_count(&s, "retry", "202").await, 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!((up.count("reserve"), up.count("confirm")), (2, 1));
    assert_eq!(retry(BETA_KEY, id.clone()).await.status, 404, "still not beta's");
}

#[tokio::test]
async fn a_keyless_failed_event_is_redriven_and_a_running_one_is_409() {
    let (s, up) = start().await;
    let acme = [("X-API-Key", ACME_KEY)];
    // No idempotency key: the event is guarded by a synthetic one, which the re-drive reuses.
    up.set_fail(true);
    let id = submit(&s, "orders.refund", "", r#"{"sku":"K-1"}"#, &acme).await;
    assert_eq!(finished_event(&s, &id, ACME_KEY).await["status"], "failed");
    up.set_fail(false);
    up.set_delay(1_000, &["refund"]);
    let path = format!("/v2/events/{id}/retry");
    let a = s.post_path(&path, String::new(), &acme).await;
    assert_eq!(a.status, 202, "{}", a.body);
    assert_eq!(get_event(&s, &id, ACME_KEY).await.json()["status"], "processing");
    // While it runs, a second retry is refused: 409, and it runs once.
    let busy = s.post_path(&path, String::new(), &acme).await;
    assert_eq!(busy.status, 409, "{}", busy.body);
    assert_eq!(busy.json()["status"], "processing");
    assert_eq!(finished_event(&s, &id, ACME_KEY).await["status"], "succeeded");
    assert_eq!(up.count("refund"), 2, "the failed run and one re-drive");
    let keys: HashSet<_> = up.calls().into_iter().map(|c| c.idempotency_key).collect();
    assert_eq!(keys.len(), 1, "same step key both times: {keys:?}");
    assert!(keys.iter().all(Option::is_some));
}

/// `oncerpc_event_api_total{op,status}` from `/metrics` (0 when absent).
async fn event_api_count(s: &TestServer, op: &str, status: &str) -> u64 {
    let text = s.get("/metrics").await.body;
    let want = format!(r#"oncerpc_event_api_total{{op="{op}",status="{status}"}} "#);
    text.lines().find_map(|l| l.strip_prefix(want.as_str())).map_or(0, |v| v.trim().parse().unwrap())
}
