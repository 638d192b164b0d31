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
    let client = common::http_client();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_open_file_soft_limit_is_raised_so_stalled_connections_cannot_exhaust_it() {
    use std::os::unix::process::CommandExt;
    // Started with a soft limit of 256 descriptors (far below max_connections), as a process
    // of a default systemd unit or shell often is; the hard limit is left as it is.
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
    if hard < 2_048 {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "CI needs a hard open-file limit of at least 2,048 (it is {hard})");
        eprintln!("SKIPPED: the hard open-file limit ({hard}) is too low to show the raise");
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // Stalls are not closed during the test (60 s header timeout): only the raised limit lets
    // the well-behaved calls in.
    let dir = TempDir::new("nofile");
    let config = dir.file("oncerpc.toml");
    std::fs::write(&config, "[store]\nurl = \"memory://\"\n[limits]\nheader_timeout_ms = 60000\n").unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_oncerpc"));
    cmd.args(["serve", "--config", &config.display().to_string(), "--listen", &format!("127.0.0.1:{port}")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || rlimit::setrlimit(rlimit::Resource::NOFILE, 256, hard));
    }
    let mut child = cmd.spawn().expect("spawn oncerpc");
    let client = common::http_client_builder().timeout(Duration::from_secs(15)).build().unwrap();
    let url = format!("http://127.0.0.1:{port}/rpc");
    let call = |i: usize| {
        let body = json!({"jsonrpc":"2.0","method":"sum","params":[i, 1],"id": i}).to_string();
        client.post(&url).header("content-type", "application/json").body(body).send()
    };
    let mut up = false;
    for _ in 0..200 {
        if call(0).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the gateway did not start");

    // 600 stalled connections: more than 256 descriptors' worth.
    let mut stalled = Vec::new();
    for _ in 0..600 {
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
        tcp.write_all(b"POST /rpc HTTP/1.1\r\nhost: x\r\n").await.unwrap();
        stalled.push(tcp);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 1..=20 {
        let v: Value = call(i).await.expect("answered beside 600 stalled connections").json().await.unwrap();
        assert_eq!(v, json!({"jsonrpc":"2.0","result": i + 1,"id": i}));
    }
    drop(stalled);
    let _ = child.kill();
    let _ = child.wait();
}

/// The server's resident set, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A connection stalled in its first request head holds the bytes it sent, not hyper's two
/// 8 KiB buffers (the head is read before hyper takes the connection), and no huge page
/// (mimalloc is built without them): 1,000 such connections cost a few MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_stalled_in_their_first_head_hold_a_few_kib_each() {
    const N: usize = 1_000;
    let gw = Gateway::start(&["--store", "memory://"]);
    let addr = gw.url("").trim_start_matches("http://").to_owned();
    // One connection served first, so the runtime's own start-up is not counted.
    let mut warm = TcpStream::connect(&addr).await.unwrap();
    warm.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 512];
    assert!(warm.read(&mut buf).await.unwrap() > 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_kib(gw.pid());
    let mut stalled = Vec::with_capacity(N);
    for _ in 0..N {
        let mut tcp = TcpStream::connect(&addr).await.unwrap();
        tcp.write_all(b"POST /rpc HTTP/1.1\r\nhost: x\r\ncontent-type: appl").await.unwrap();
        stalled.push(tcp);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let per_connection = (rss_kib(gw.pid()).saturating_sub(before)) as f64 / N as f64;
    assert!(per_connection < 8.0, "{per_connection:.1} KiB per stalled connection");
    // Still serving.
    warm.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    assert!(warm.read(&mut buf).await.unwrap() > 0);
    drop(stalled);
}
