//! # oncerpc-stdio
//!
//! The stdio daemon (SPEC §5): the same registry, policy and idempotency as the HTTP door,
//! behind framed JSON-RPC on stdin/stdout ([`framing`]).
//!
//! * Only protocol frames are written to the output; logs go to stderr.
//! * Sequential: a request is answered (and flushed) before the next is read, so answers
//!   come in request order. Notifications are never answered (but the fail-fast policy
//!   still answers a refused one with `-32600`, `id: null`).
//! * EOF, SIGTERM or SIGINT: the request in hand is finished, the output flushed, and
//!   [`run`] returns [`Exit::Clean`].
//!
//! ```
//! use oncerpc_core::{Context, Dispatcher, DispatcherConfig, MethodSpec, Registry, typed};
//! use oncerpc_core::protocol::RpcError;
//! use oncerpc_stdio::{Exit, run};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let mut registry = Registry::new();
//! let sum = typed(|_: Context, xs: Vec<i64>| async move { Ok::<_, RpcError>(xs.iter().sum::<i64>()) });
//! registry.register("sum", MethodSpec::query(), sum).unwrap();
//! let dispatcher = Dispatcher::new(registry, DispatcherConfig::default());
//! // A daemon passes tokio::io::stdin() and stdout(); any reader and writer will do.
//! let input: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"sum\",\"params\":[1,2,4],\"id\":1}\n";
//! let mut output = Vec::new();
//! let exit = run(&dispatcher, input, &mut output, 1 << 20, std::future::pending()).await.unwrap();
//! assert_eq!(exit, Exit::Clean); // at EOF
//! assert_eq!(output, b"{\"jsonrpc\":\"2.0\",\"result\":7,\"id\":1}\n"); // same framing as the input
//! # });
//! ```

pub mod framing;

use std::future::Future;

use oncerpc_core::{Dispatcher, RequestMeta};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

pub use framing::{Frame, FrameReader, Framing, ReadError};

/// How the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    /// EOF or a shutdown signal between requests.
    Clean,
    /// The input could not be framed any more (the reason was logged to stderr).
    Unframeable(String),
}

/// Serve frames from `input` to `output` until EOF, `shutdown`, or unframeable input.
pub async fn run<R, W>(
    dispatcher: &Dispatcher,
    input: R,
    output: W,
    max_body: usize,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<Exit>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let meta = RequestMeta::default();
    serve(
        async |body: &[u8], _: &Outbox| dispatcher.handle(body, &meta).await.body,
        input,
        output,
        max_body,
        shutdown,
    )
    .await
}

/// Messages a protocol sends while it is answering one (the MCP door's progress and log
/// notifications): each is written, framed, as soon as it is sent, before the answer.
pub type Outbox = mpsc::UnboundedSender<Vec<u8>>;

/// The loop of [`run`] with another protocol behind it: `answer` gets each message's bytes
/// and returns what to send back (`None`: nothing); what it sends to the [`Outbox`] while it
/// runs is written first. The MCP door's stdio transport is this loop over its own server.
pub async fn serve<R, W>(
    mut answer: impl AsyncFnMut(&[u8], &Outbox) -> Option<Vec<u8>>,
    input: R,
    mut output: W,
    max_body: usize,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<Exit>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = FrameReader::new(input, max_body);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut out = Vec::with_capacity(4096);
    let (outbox, mut sent) = mpsc::unbounded_channel::<Vec<u8>>();
    loop {
        // Waiting for input is the only place a signal interrupts; a request in hand is
        // always finished and answered first.
        let frame = tokio::select! {
            biased;
            frame = reader.next() => frame,
            () = &mut shutdown => {
                tracing::info!("shutdown signal: exiting after the last answer");
                output.flush().await?;
                return Ok(Exit::Clean);
            }
        };
        let framing = reader.framing().unwrap_or(Framing::Ndjson);
        out.clear();
        match frame {
            Ok(Frame::Message(body)) => {
                let mut answering = std::pin::pin!(answer(&body, &outbox));
                let answered = loop {
                    tokio::select! {
                        biased;
                        Some(early) = sent.recv() => {
                            framing.encode(&early, &mut out);
                            output.write_all(&out).await?;
                            output.flush().await?;
                            out.clear();
                        }
                        answered = &mut answering => break answered,
                    }
                };
                while let Ok(early) = sent.try_recv() {
                    framing.encode(&early, &mut out);
                }
                if let Some(body) = answered {
                    framing.encode(&body, &mut out);
                }
            }
            Ok(Frame::Bad(err)) => {
                tracing::info!(error = %err, "bad frame");
                framing.encode(&oncerpc_protocol::error_body(&err), &mut out);
            }
            Err(ReadError::Eof) => {
                output.flush().await?;
                return Ok(Exit::Clean);
            }
            Err(ReadError::Fatal { reason, answer }) => {
                if let Some(err) = answer {
                    framing.encode(&oncerpc_protocol::error_body(&err), &mut out);
                    output.write_all(&out).await?;
                }
                output.flush().await?;
                tracing::error!(%reason, "stdin cannot be framed any more");
                return Ok(Exit::Unframeable(reason));
            }
        }
        if !out.is_empty() {
            output.write_all(&out).await?;
            output.flush().await?;
        }
    }
}
