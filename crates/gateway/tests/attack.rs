//! Slow-loris at the scale against the real binary (issue "hold the edge"): 2,000
//! connections stalled in their headers and 1,100 stalled in their bodies while a well-behaved
//! client sends 1,000 requests. Every good request is answered correctly, and the stalled
//! connections are closed by the timeouts (the stalled bodies with a 408 JSON answer).

mod common;

use std::time::{Duration, Instant};

use common::process::{Gateway, TempDir};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HEADER_STALLS: usize = 2_000;
const BODY_STALLS: usize = 1_100;
const GOOD: usize = 1_000;

/// Read until the server closes the connection (bounded); what it sent.
async fn closed_by_server(mut tcp: TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_stalled_connections_do_not_starve_a_well_behaved_client() {
    let dir = TempDir::new("attack");
    let config = dir.file("oncerpc.toml");
    std::fs::write(
        &config,
        "[store]\nurl = \"memory://\"\n\n[limits]\nheader_timeout_ms = 6000\nbody_timeout_ms = 6000\n",
    )
    .unwrap();
    let gw = Gateway::start(&["--config", &config.display().to_string()]);

    let mut stalled = Vec::with_capacity(HEADER_STALLS + BODY_STALLS);
    for i in 0..HEADER_STALLS + BODY_STALLS {
        let mut tcp = TcpStream::connect(gw.addr).await.expect("connect");
        let part: &[u8] = if i < HEADER_STALLS {
            b"POST /rpc HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        } else {
            b"POST /rpc HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 99\r\n\r\n{"
        };
        tcp.write_all(part).await.expect("write");
        stalled.push(tcp);
    }
    let opened = Instant::now();

    // The well-behaved client, 32 requests at a time, while all of them are still open.
    let client = reqwest::Client::new();
    let url = gw.url("/rpc");
    let answers = futures::stream::iter(0..GOOD)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                let body = json!({"jsonrpc":"2.0","method":"sum","params":[i, 1],"id": i}).to_string();
                let resp =
                    client.post(url).header("content-type", "application/json").body(body).send().await;
                let resp = resp.expect("answered");
                (i, resp.status().as_u16(), resp.json::<Value>().await.expect("JSON"))
            }
        })
        .buffer_unordered(32);
    let answers: Vec<(usize, u16, Value)> = answers.collect().await;
    assert!(opened.elapsed() < Duration::from_secs(6), "the good requests ran while the stalls were open");
    assert_eq!(answers.len(), GOOD);
    for (i, status, v) in answers {
        assert_eq!(status, 200, "{v}");
        assert_eq!(v, json!({"jsonrpc":"2.0","result": i + 1,"id": i}));
    }

    // The timeouts close every stalled connection; stalled bodies get a 408 JSON answer first.
    let closes = futures::future::join_all(
        stalled.into_iter().map(|tcp| closed_by_server(tcp, Duration::from_secs(20))),
    )
    .await;
    for (i, got) in closes.into_iter().enumerate() {
        let got = got.unwrap_or_else(|| panic!("stalled connection {i} was never closed"));
        if i >= HEADER_STALLS {
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 408"), "stalled body {i}: {text:?}");
        }
    }
}
