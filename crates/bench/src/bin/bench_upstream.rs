//! `bench-upstream`: the upstream of the sync-flow scenario. `POST /step` answers
//! `{"step":"reserve","n":N}` where N counts the calls (so a new execution gets a new body and a
//! duplicate the stored one); `GET /count` answers `{"calls":N}`, which the harness reads to check
//! that each new key ran the step exactly once and duplicates ran nothing. Anything else: 404.
//! tokio's default multi-thread runtime, `TCP_NODELAY`.
//!
//! Usage: `bench-upstream --listen 127.0.0.1:PORT`; stops on SIGTERM or Ctrl-C.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

#[derive(Parser)]
#[command(name = "bench-upstream", about = "Upstream of the sync-flow benchmark: POST /step → small JSON")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
}

fn json(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

async fn handle(req: Request<Incoming>, calls: Arc<AtomicU64>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    // Read the whole body, as a real upstream would.
    if body.collect().await.is_err() {
        return Ok(json(StatusCode::BAD_REQUEST, r#"{"error":"body"}"#.into()));
    }
    Ok(match (parts.method, parts.uri.path()) {
        (Method::POST, "/step") => {
            let n = calls.fetch_add(1, Ordering::Relaxed) + 1;
            json(StatusCode::OK, format!(r#"{{"step":"reserve","n":{n}}}"#))
        }
        (Method::GET, "/count") => {
            json(StatusCode::OK, format!(r#"{{"calls":{}}}"#, calls.load(Ordering::Relaxed)))
        }
        _ => json(StatusCode::NOT_FOUND, r#"{"error":"not found"}"#.into()),
    })
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    eprintln!("bench-upstream listening on {}", listener.local_addr()?);
    let calls = Arc::new(AtomicU64::new(0));
    let serve = async {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("accept: {e}");
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let calls = calls.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| handle(req, calls.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    };
    tokio::select! {
        () = serve => {}
        () = shutdown() => {}
    }
    Ok(())
}

async fn shutdown() {
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
