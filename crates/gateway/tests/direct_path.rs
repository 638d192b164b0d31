//! `POST /rpc` is answered straight from the connection (`oncerpc_http::FrontDoor`), not
//! through the router: the two ways in must give the same answers. One app is served as the
//! binary serves it (the direct path), an identical one through its router alone, and the same
//! requests — good, broken, batched, keyed, refused — must come back with the same status, the
//! same headers and the same body from both.

mod common;

use common::{Answer, TestServer, test_config};
use oncerpc::App;

/// An app served through its router only (no direct path), on a loopback port.
async fn router_only() -> (String, tokio::sync::oneshot::Sender<()>) {
    let app = App::new(config()).await.expect("valid test config");
    let listener = app.bind().await.expect("bind loopback");
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let router = app.router();
    tokio::spawn(oncerpc_http::serve(listener, router, oncerpc_http::ServeConfig::default(), async move {
        let _ = rx.await;
    }));
    (format!("http://{addr}"), tx)
}

fn config() -> oncerpc::Config {
    let mut cfg = test_config();
    cfg.limits.max_body_bytes = 2048;
    cfg
}

async fn send(base: &str, method: &str, body: &str, headers: &[(&str, &str)]) -> Answer {
    let http = common::process::Http::new(base);
    match method {
        "GET" => http.get("/rpc", headers).await,
        _ => http.rpc(body.to_owned(), headers).await,
    }
}

/// What must agree: status, body, and every header but the date and a generated correlation id
/// (one the client did not send: a batch, for one, has an id of its own).
fn shape(a: &Answer, sent_cid: Option<&str>) -> (u16, Vec<(String, String)>, String) {
    let mut headers: Vec<(String, String)> = a
        .headers
        .iter()
        .filter(|(k, _)| *k != "date")
        .map(|(k, v)| {
            let v = v.to_str().unwrap_or("<bytes>").to_owned();
            let generated = *k == "x-correlation-id" && Some(v.as_str()) != sent_cid;
            let v = if generated { "<generated>".to_owned() } else { v };
            (k.to_string(), v)
        })
        .collect();
    headers.sort();
    (a.status, headers, a.body.clone())
}

/// HTTP method, body, extra headers.
type Case = (&'static str, String, Vec<(&'static str, &'static str)>);

#[tokio::test]
async fn the_direct_path_answers_as_the_router_does() {
    let direct = TestServer::start_with(config()).await;
    let direct_base = format!("http://{}", direct.addr);
    let (routed_base, stop) = router_only().await;
    let big = format!(r#"{{"jsonrpc":"2.0","method":"sum","params":[{}1],"id":1}}"#, "1,".repeat(1500));
    let cases: Vec<Case> = vec![
        ("POST", r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}"#.into(), vec![]),
        ("POST", r#"{"jsonrpc":"2.0","method":"sum","params":[1,2]}"#.into(), vec![]),
        ("POST", r#"[{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1},{"jsonrpc":"2.0","method":"nope","id":2}]"#.into(), vec![]),
        ("POST", "{not json".into(), vec![]),
        ("POST", "[]".into(), vec![]),
        ("POST", big, vec![]),
        ("POST", r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":2},"id":7}"#.into(), vec![("x-idempotency-key", "direct-path-1")]),
        ("POST", r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":2},"id":7}"#.into(), vec![("x-idempotency-key", "direct-path-1")]),
        ("POST", r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":3},"id":8}"#.into(), vec![("idempotency-key", "direct-path-1")]),
        ("POST", r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":1},"id":9}"#.into(), vec![("x-idempotency-key", "a"), ("idempotency-key", "b")]),
        ("POST", r#"[{"jsonrpc":"2.0","method":"sum","params":[1],"id":1}]"#.into(), vec![("x-idempotency-key", "k")]),
        ("POST", r#"[{"jsonrpc":"2.0","method":"sum","params":[1],"id":1}]"#.into(), vec![("x-force-retry", "true")]),
        ("POST", r#"{"jsonrpc":"2.0","method":"sum","params":[1],"id":1}"#.into(), vec![("x-force-retry", "maybe")]),
        ("GET", String::new(), vec![]),
    ];
    for (i, (method, body, mut headers)) in cases.into_iter().enumerate() {
        let cid = format!("direct-path-case-{i}");
        let sent = (i % 2 == 0).then_some(cid.as_str());
        if let Some(cid) = sent {
            headers.push(("x-correlation-id", cid));
        }
        let a = send(&direct_base, method, &body, &headers).await;
        let b = send(&routed_base, method, &body, &headers).await;
        assert_eq!(shape(&a, sent), shape(&b, sent), "case {i}: {method} {body:.80} {headers:?}");
    }
    let _ = stop.send(());
    direct.stop().await;
}
