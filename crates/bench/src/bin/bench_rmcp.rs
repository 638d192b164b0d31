//! `bench-rmcp`: the official Rust MCP SDK (rmcp 3.11) serving one tool, `add` (`{a, b}` →
//! `a + b`, answered as the text `3`), over Streamable HTTP at `/mcp`, the peer of oncerpc's MCP
//! door in the load benchmark. rmcp's defaults, except `legacy_session_mode: false` (no session
//! per request: the `2026-07-28` revision is stateless anyway, and older ones are then served
//! without one) and `json_response: true` (one JSON body per answer, as oncerpc sends, instead
//! of a one-event SSE stream). axum's `serve`, tokio's default multi-thread runtime.
//!
//! Usage: `bench-rmcp --listen 127.0.0.1:PORT`; stops on SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_router};
use serde::Deserialize;

#[derive(Parser)]
#[command(
    name = "bench-rmcp",
    about = "rmcp Streamable HTTP server with one `add` tool, for the load benchmark"
)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:8082")]
    listen: SocketAddr,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct AddParams {
    a: i64,
    b: i64,
}

#[derive(Clone)]
struct Adder;

#[tool_router(server_handler)]
impl Adder {
    #[tool(description = "Adds two numbers")]
    fn add(&self, Parameters(AddParams { a, b }): Parameters<AddParams>) -> String {
        a.wrapping_add(b).to_string()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut config = StreamableHttpServerConfig::default();
    config.legacy_session_mode = false;
    config.json_response = true;
    let stop = config.cancellation_token.clone();
    let service = StreamableHttpService::new(|| Ok(Adder), Arc::new(LocalSessionManager::default()), config);
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    eprintln!("bench-rmcp listening on {}", listener.local_addr()?);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            stop.cancel();
        })
        .await?;
    Ok(())
}
