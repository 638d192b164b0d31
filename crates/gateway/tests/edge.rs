//! The edge (SPEC §12): header, body and idle timeouts and the connection limit, against
//! the real server on a loopback port, with raw TCP clients.

mod common;

use std::time::Duration;

use common::{TestServer, test_config};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn edge_config(max_connections: usize) -> oncerpc::Config {
    let mut cfg = test_config();
    cfg.limits.header_timeout_ms = 300;
    cfg.limits.body_timeout_ms = 300;
    cfg.limits.idle_timeout_ms = 500;
    cfg.limits.max_connections = max_connections;
    cfg
}

/// Read until the server closes (EOF or error), within `within`; what was read.
async fn read_to_close(tcp: &mut TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(within, async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok().map(|()| String::from_utf8_lossy(&out).into_owned())
}

/// A connection to `server` with one request answered on it, kept alive.
async fn kept_alive(server: &TestServer) -> TcpStream {
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await.unwrap().unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    tcp
}

fn body_of(answer: &str) -> serde_json::Value {
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {answer:?}"))
}

const SLOW_BODY: &[u8] =
    b"POST /rpc HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 99\r\n\r\n{";

#[tokio::test]
async fn half_sent_headers_are_closed_after_the_header_timeout() {
    let server = TestServer::start_with(edge_config(50)).await;
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(b"POST /rpc HT").await.unwrap();
    let started = std::time::Instant::now();
    let got = read_to_close(&mut tcp, Duration::from_secs(5)).await;
    assert!(got.is_some(), "the connection was not closed");
    assert!(started.elapsed() >= Duration::from_millis(200), "closed too early: {:?}", started.elapsed());
    server.stop().await;
}

#[tokio::test]
async fn a_slow_body_gets_408_on_both_doors() {
    let server = TestServer::start_with(edge_config(50)).await;
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(SLOW_BODY).await.unwrap();
    let got = read_to_close(&mut tcp, Duration::from_secs(5)).await.expect("answered and closed");
    assert!(got.starts_with("HTTP/1.1 408"), "{got:?}");
    let body = body_of(&got);
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["id"], serde_json::Value::Null);

    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(b"POST /v2/flows/sum HTTP/1.1\r\nhost: x\r\ncontent-length: 99\r\n\r\n{").await.unwrap();
    let got = read_to_close(&mut tcp, Duration::from_secs(5)).await.expect("answered and closed");
    assert!(got.starts_with("HTTP/1.1 408"), "{got:?}");
    assert_eq!(body_of(&got)["code"], "408");

    let metrics = server.get("/metrics").await.body;
    assert!(metrics.contains(r#"oncerpc_overloaded_total{door="body_timeout"} 2"#), "{metrics}");
    server.stop().await;
}

#[tokio::test]
async fn stalled_connections_do_not_starve_good_clients() {
    let mut cfg = edge_config(1000);
    // Long enough that the stalled bodies are still pending while the good requests run.
    cfg.limits.body_timeout_ms = 10_000;
    cfg.limits.header_timeout_ms = 10_000;
    cfg.limits.max_in_flight = 16;
    let server = TestServer::start_with(cfg).await;
    let mut stalled = Vec::new();
    for _ in 0..200 {
        let mut tcp = TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(SLOW_BODY).await.unwrap();
        stalled.push(tcp);
    }
    let calls = (0..200).map(|i| {
        let server = &server;
        async move {
            let a = server
                .post(json!({"jsonrpc": "2.0", "id": i, "method": "sum", "params": [i, 1]}).to_string())
                .await;
            assert_eq!(a.status, 200, "{}", a.body);
            let v = a.json();
            assert_eq!(v["id"], i, "{v}");
            assert_eq!(v["result"], i + 1, "{v}");
        }
    });
    futures::future::join_all(calls).await;
    drop(stalled);
    server.stop().await;
}

#[tokio::test]
async fn connections_over_the_limit_get_503_and_the_limit_frees() {
    let mut cfg = edge_config(20);
    cfg.limits.header_timeout_ms = 10_000;
    cfg.limits.idle_timeout_ms = 10_000;
    let server = TestServer::start_with(cfg).await;
    let mut open = Vec::new();
    for _ in 0..20 {
        let mut tcp = TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await.unwrap().unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&buf[..n]));
        open.push(tcp); // kept alive: still holds its slot
    }
    let mut extra = TcpStream::connect(server.addr).await.unwrap();
    extra.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let got = read_to_close(&mut extra, Duration::from_secs(5)).await.expect("refused and closed");
    assert!(got.starts_with("HTTP/1.1 503"), "{got:?}");
    assert!(got.to_ascii_lowercase().contains("connection: close"), "{got:?}");
    assert!(got.to_ascii_lowercase().contains("content-type: application/json"), "{got:?}");
    assert_eq!(body_of(&got)["error"]["code"], -32007);

    drop(open);
    // The slots free as the server sees the closes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let a = server.client.get(server.url("/metrics")).send().await;
        if let Ok(a) = a
            && a.status() == 200
        {
            let text = a.text().await.unwrap();
            assert!(text.contains(r#"oncerpc_overloaded_total{door="connections"}"#), "{text}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the connection slots never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let mut cfg = edge_config(50);
    cfg.limits.header_timeout_ms = 10_000;
    let server = TestServer::start_with(cfg).await;
    let mut tcp = kept_alive(&server).await;
    let started = std::time::Instant::now();
    let got = read_to_close(&mut tcp, Duration::from_secs(5)).await;
    assert_eq!(got.as_deref(), Some(""), "the idle connection was not closed");
    assert!(started.elapsed() >= Duration::from_millis(300), "closed too early: {:?}", started.elapsed());
    server.stop().await;
}

/// A kept-alive connection that then sends `then` (nothing, or part of a head) is closed by
/// the header timeout (300 ms), well within 5 s, however long the idle timeout (60 s).
async fn closed_by_the_header_timeout(then: &[u8], what: &str) {
    let mut cfg = edge_config(50);
    cfg.limits.idle_timeout_ms = 60_000;
    let server = TestServer::start_with(cfg).await;
    let mut tcp = kept_alive(&server).await;
    tcp.write_all(then).await.unwrap();
    let got = read_to_close(&mut tcp, Duration::from_secs(5)).await;
    assert_eq!(got.as_deref(), Some(""), "{what} was not closed");
    server.stop().await;
}

#[tokio::test]
async fn the_header_timeout_also_bounds_the_wait_for_the_next_request() {
    closed_by_the_header_timeout(b"", "the kept-alive connection").await;
}

/// A kept-alive connection's *second* head, half sent, is held to the header timeout too
/// (the first head is read before hyper takes the connection; the later ones are bounded by
/// the connection's idle timer).
#[tokio::test]
async fn a_half_sent_later_head_is_closed_after_the_header_timeout() {
    closed_by_the_header_timeout(b"POST /rpc HTTP/1.1\r\nhost: x\r\ncontent-", "the half-sent head").await;
}
