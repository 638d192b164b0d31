//! `oncerpc mcp`: the MCP door on stdin/stdout, newline-delimited JSON (one message a line),
//! logs only on stderr, for desktop hosts that start the server as a command. One process is
//! one session of the default tenant, and answers `2026-07-28` (stateless) messages too, each
//! on its own; the loop, framing and signal handling are the stdio
//! daemon's ([`oncerpc_stdio::serve`]). The re-exported resources' and prompts'
//! list-changed notifications are written as they happen, between answers too.

use std::future::Future;

use oncerpc_stdio::{Exit, Outbox};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{McpServer, Session};

/// Serve one MCP session from `input` to `output` until EOF or `shutdown`.
pub async fn run<R, W>(
    server: &McpServer,
    input: R,
    output: W,
    max_body: usize,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<Exit>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut session = Session::new(oncerpc_core::DEFAULT_TENANT);
    // One process is one session: a cancellation names a request of this pipe.
    let scope = Session::new(oncerpc_core::DEFAULT_TENANT);
    // From the client's first message on, the re-exported resources' and prompts'
    // list-changed notifications go to it (between answers too).
    let mut following: Option<tokio::task::JoinHandle<()>> = None;
    let offers = server.tools().external().offers().clone();
    let result = oncerpc_stdio::serve(
        async |body: &[u8], outbox: &Outbox| {
            if following.is_none() {
                following = Some(tokio::spawn(follow(offers.clone(), outbox.clone())));
            }
            // A message whose _meta names its protocol version is 2026-07-28's (stateless).
            if crate::stateless::is_stateless(body, None) {
                return server
                    .stateless_with(body, Session::new(session.tenant.clone()), None, Some(outbox.clone()))
                    .await
                    .body;
            }
            server.answer_with(body, &mut session, Some(outbox.clone())).await.body
        },
        |body: &[u8]| server.urgent(body, &scope),
        input,
        output,
        max_body,
        shutdown,
    )
    .await;
    if let Some(f) = following {
        f.abort();
    }
    result
}

/// Pass every list-changed notification of `offers` to `outbox` until the server closes.
async fn follow(offers: crate::offers::Offers, outbox: Outbox) {
    use tokio::sync::broadcast::error::RecvError;
    let mut changes = offers.subscribe();
    loop {
        tokio::select! {
            change = changes.recv() => match change {
                Ok(message) => {
                    outbox.send(message.as_bytes().to_vec());
                }
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
            () = offers.closed() => return,
        }
    }
}
