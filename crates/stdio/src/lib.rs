//! # oncerpc-stdio
//!
//! The stdio daemon (SPEC §5): the same registry, policy and idempotency as the HTTP door,
//! behind framed JSON-RPC on stdin/stdout ([`framing`]).
//!
//! * Only protocol frames are written to the output; logs go to stderr.
//! * Sequential: a request is answered (and flushed) before the next is handled, so answers
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

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;

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
        |_: &[u8]| false,
        input,
        output,
        max_body,
        shutdown,
    )
    .await
}

/// Messages a protocol sends while it is answering one (the MCP door's progress and log
/// notifications): each is written, framed, as soon as it is sent, before the answer.
///
/// Bounded: a notification is never worth memory. One that finds [`OUTBOX_CAPACITY`]
/// messages not yet written (a client that reads slowly or not at all, a server that floods
/// progress) is dropped; the answer itself never travels here, so it is never lost behind them.
#[derive(Clone, Debug)]
pub struct Outbox(mpsc::Sender<Vec<u8>>);

/// Notifications an [`Outbox`] holds before it drops new ones.
pub const OUTBOX_CAPACITY: usize = 64;

impl Outbox {
    /// An outbox and the receiving end its transport writes from.
    pub fn channel() -> (Outbox, mpsc::Receiver<Vec<u8>>) {
        let (tx, rx) = mpsc::channel(OUTBOX_CAPACITY);
        (Outbox(tx), rx)
    }

    /// Send a notification, or drop it when the outbox is full or its transport is gone
    /// (a client that left: the call runs on, its outcome is stored for the retry). Whether
    /// it was taken.
    pub fn send(&self, message: Vec<u8>) -> bool {
        self.0.try_send(message).is_ok()
    }
}

/// Frames read ahead while a message is being answered, at most; past it reading waits.
const READ_AHEAD: usize = 64;

/// A frame read, and the framing of the input (known once its first byte was seen).
type Read = (Result<Frame, ReadError>, Framing);

/// A read in progress: it owns the reader until the frame is in, and gives it back.
type Reading<'r, R> = Pin<Box<dyn Future<Output = (FrameReader<R>, Read)> + 'r>>;

/// The read in progress, started when there is none: it is kept across answers, so a frame
/// half read is never lost.
fn reading<'a, 'r, R: AsyncRead + Unpin + 'r>(
    idle: &mut Option<FrameReader<R>>,
    reading: &'a mut Option<Reading<'r, R>>,
) -> &'a mut Reading<'r, R> {
    reading.get_or_insert_with(|| {
        let mut reader = idle.take().expect("the reader is idle when no read is in progress");
        Box::pin(async move {
            let frame = reader.next().await;
            let framing = reader.framing().unwrap_or(Framing::Ndjson);
            (reader, (frame, framing))
        })
    })
}

/// The loop of [`run`] with another protocol behind it: `answer` gets each message's bytes
/// and returns what to send back (`None`: nothing); what it sends to the [`Outbox`] while it
/// runs is written first. The MCP door's stdio transport is this loop over its own server.
///
/// Messages are answered one at a time, in order. While one is being answered the next ones
/// are read ahead (up to a bound) and each is shown to `urgent`: one it takes (the MCP door's
/// `notifications/cancelled`, which must reach the call it names while that call runs) is
/// handled there and then; the others wait their turn.
pub async fn serve<R, W>(
    mut answer: impl AsyncFnMut(&[u8], &Outbox) -> Option<Vec<u8>>,
    mut urgent: impl FnMut(&[u8]) -> bool,
    input: R,
    mut output: W,
    max_body: usize,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<Exit>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut idle = Some(FrameReader::new(input, max_body));
    let mut shutdown = std::pin::pin!(shutdown);
    let mut out = Vec::with_capacity(4096);
    let (outbox, mut sent) = Outbox::channel();
    let mut in_progress: Option<Reading<'_, R>> = None;
    let mut pending: VecDeque<Read> = VecDeque::new();
    // EOF or unframeable input was read (and queued): nothing more to read.
    let mut ended = false;
    // The framing of the last message read: what a notification sent between two requests uses.
    let mut seen = Framing::Ndjson;
    loop {
        let (frame, framing) = match pending.pop_front() {
            Some(next) => next,
            // Waiting for input is the only place a signal interrupts; a request in hand is
            // always finished and answered first. A notification sent meanwhile (not a
            // call's: the session's own, such as a list that changed) is written at once.
            None => loop {
                tokio::select! {
                    biased;
                    (reader, next) = reading(&mut idle, &mut in_progress) => {
                        (idle, in_progress) = (Some(reader), None);
                        break next;
                    }
                    Some(note) = sent.recv() => {
                        out.clear();
                        seen.encode(&note, &mut out);
                        output.write_all(&out).await?;
                        output.flush().await?;
                    }
                    () = &mut shutdown => {
                        tracing::info!("shutdown signal: exiting after the last answer");
                        output.flush().await?;
                        return Ok(Exit::Clean);
                    }
                }
            },
        };
        seen = framing;
        if frame.is_err() {
            ended = true;
        }
        out.clear();
        match frame {
            Ok(Frame::Message(body)) => {
                let mut answering = std::pin::pin!(answer(&body, &outbox));
                let answered = loop {
                    let read_ahead = !ended && pending.len() < READ_AHEAD;
                    tokio::select! {
                        biased;
                        Some(early) = sent.recv() => {
                            framing.encode(&early, &mut out);
                            output.write_all(&out).await?;
                            output.flush().await?;
                            out.clear();
                        }
                        answered = &mut answering => break answered,
                        (reader, next) = reading(&mut idle, &mut in_progress), if read_ahead => {
                            (idle, in_progress) = (Some(reader), None);
                            match next {
                                (Ok(Frame::Message(b)), _) if urgent(&b) => {}
                                next => {
                                    ended |= next.0.is_err();
                                    pending.push_back(next);
                                }
                            }
                        }
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
