//! `bench-jsonrpsee`: the jsonrpsee HTTP server the load benchmark compares oncerpc with.
//! Methods `add` (`[a, b]` → `a + b`) and `echo` (returns its params). jsonrpsee's default
//! settings, except `max_connections` (default 100, raised to 10,000) and the batch limit (set
//! to 50 calls, oncerpc's default `batch.max_size`; jsonrpsee's default is unlimited). tokio's
//! default multi-thread runtime; jsonrpsee sets `TCP_NODELAY` by default.
//!
//! Usage: `bench-jsonrpsee --listen 127.0.0.1:PORT`; JSON-RPC on `POST /`; stops on SIGTERM or
//! Ctrl-C.

use std::net::SocketAddr;

use clap::Parser;
use jsonrpsee::RpcModule;
use jsonrpsee::server::{BatchRequestConfig, Server, ServerConfig};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use oncerpc_bench::bodies::BATCH_SIZE;

#[derive(Parser)]
#[command(
    name = "bench-jsonrpsee",
    about = "jsonrpsee HTTP server with `add` and `echo`, for the load benchmark"
)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: SocketAddr,
}

fn add(params: Params<'_>) -> Result<i64, ErrorObjectOwned> {
    let (a, b): (i64, i64) = params.parse()?;
    a.checked_add(b).ok_or_else(|| ErrorObjectOwned::owned(-32602, "overflow", None::<()>))
}

fn echo(params: Params<'_>) -> Result<serde_json::Value, ErrorObjectOwned> {
    if params.as_str().is_none() {
        return Ok(serde_json::Value::Null);
    }
    params.parse()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let config = ServerConfig::builder()
        .max_connections(10_000)
        .set_batch_request_config(BatchRequestConfig::Limit(BATCH_SIZE as u32))
        .build();
    let server = Server::builder().set_config(config).build(args.listen).await?;
    let mut module = RpcModule::new(());
    module.register_method("add", |params, _, _| add(params))?;
    module.register_method("echo", |params, _, _| echo(params))?;
    eprintln!("bench-jsonrpsee listening on {}", server.local_addr()?);
    let handle = server.start(module);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        () = handle.clone().stopped() => {}
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let _ = handle.stop();
    handle.stopped().await;
    Ok(())
}
