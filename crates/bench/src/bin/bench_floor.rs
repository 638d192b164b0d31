//! `bench-floor`: the floor of the load benchmark. A bare hyper 1.x HTTP/1.1 server that reads
//! the whole body, parses it into a `serde_json::Value` and answers a fixed JSON-RPC response
//! (`{"jsonrpc":"2.0","result":3,"id":1}`, or for an array the fixed answer of the 50-call
//! batch). No routing, no method lookup, no dispatch: what every JSON-RPC-over-HTTP server must
//! at least pay. tokio's default multi-thread runtime, `TCP_NODELAY` on every connection.
//!
//! Usage: `bench-floor --listen 127.0.0.1:PORT`; stops on SIGTERM or Ctrl-C.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use oncerpc_bench::bodies;

#[derive(Parser)]
#[command(name = "bench-floor", about = "Bare hyper JSON-RPC floor: parse the body, answer a fixed response")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:8082")]
    listen: SocketAddr,
}

async fn handle(req: Request<Incoming>, batch: Bytes) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = StatusCode::BAD_REQUEST;
            return Ok(r);
        }
    };
    let answer = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(serde_json::Value::Array(_)) => batch,
        Ok(_) => Bytes::from_static(bodies::SINGLE_ANSWER.as_bytes()),
        Err(_) => Bytes::from_static(bodies::PARSE_ERROR.as_bytes()),
    };
    let mut r = Response::new(Full::new(answer));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(r)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    eprintln!("bench-floor listening on {}", listener.local_addr()?);
    let batch = Bytes::from(bodies::batch_answer());
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
            let batch = batch.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| handle(req, batch.clone()));
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
