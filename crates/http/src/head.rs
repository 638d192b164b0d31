//! The first request head of a connection, read before hyper takes the connection over.
//!
//! hyper gives every connection two 8 KiB buffers (read and write) as soon as it starts
//! serving it. A connection that sends nothing, or sends its head slowly (a slow-loris
//! client), would hold both until the header timeout. Here it holds only what it sent, in a
//! buffer that starts at [`FIRST_READ`] bytes: 3,000 such connections cost a few MiB instead of
//! ~45. Once the head is complete (its empty line has arrived), or past [`MAX_HEAD`] bytes,
//! the bytes read so far are handed to hyper in front of the connection ([`Prefixed`]), and
//! hyper parses them as if it had read them itself: every rule of the request line and the
//! headers stays hyper's.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The first read's buffer; it doubles while the head is longer.
const FIRST_READ: usize = 1024;
/// Past this many bytes without the end of the head, hyper reads the rest, within the
/// connection's idle timer (`serve.rs`).
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// Read the connection's first request head within `timeout`. `None`: the peer closed the
/// connection before sending anything, the read failed, or the head did not arrive in time
/// (the connection is then closed).
pub(crate) async fn first<I: AsyncRead + Unpin>(io: &mut I, timeout: Duration) -> Option<Vec<u8>> {
    let read = async {
        let mut buf = Vec::with_capacity(FIRST_READ);
        loop {
            if buf.len() == buf.capacity() {
                if buf.len() >= MAX_HEAD {
                    return Some(buf);
                }
                buf.reserve(buf.len());
            }
            let before = buf.len();
            match io.read_buf(&mut buf).await {
                Ok(0) => return (!buf.is_empty()).then_some(buf),
                Ok(_) if ends_head(&buf, before) => return Some(buf),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    };
    tokio::time::timeout(timeout, read).await.ok().flatten()
}

/// Whether `buf` (of which `buf[..before]` was searched already) holds an empty line, the end
/// of a head: `\n\n` or `\n\r\n` (hyper, like the HTTP RFC's robustness rule, accepts a bare
/// LF as a line end). Leading empty lines before the request line end it early: hyper then
/// reads the rest itself, which is only less frugal.
fn ends_head(buf: &[u8], before: usize) -> bool {
    let tail = &buf[before.saturating_sub(2)..];
    memchr::memchr_iter(b'\n', tail).any(|i| matches!(&tail[i + 1..], [b'\n', ..] | [b'\r', b'\n', ..]))
}

/// A connection with bytes already read from it in front: reads return those first.
pub(crate) struct Prefixed<I> {
    head: Vec<u8>,
    at: usize,
    io: I,
}

impl<I> Prefixed<I> {
    pub(crate) fn new(head: Vec<u8>, io: I) -> Self {
        Prefixed { head, at: 0, io }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Prefixed<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.head.len() {
            let n = (this.head.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.head[this.at..this.at + n]);
            this.at += n;
            if this.at == this.head.len() {
                // Consumed: give the memory back for the connection's lifetime.
                this.head = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Prefixed<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    #[test]
    fn the_end_of_a_head_is_an_empty_line() {
        assert!(ends_head(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", 0));
        assert!(ends_head(b"GET / HTTP/1.1\nhost: x\n\n", 0));
        assert!(!ends_head(b"GET / HTTP/1.1\r\nhost: x\r\n", 0));
        // The empty line split across two reads.
        let head = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";
        assert!(ends_head(head, head.len() - 1));
        assert!(ends_head(head, head.len() - 2));
    }

    #[tokio::test]
    async fn a_head_sent_in_pieces_is_read_whole_and_replayed_in_front() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let sent = b"POST /rpc HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";
        let writer = tokio::spawn(async move {
            for piece in sent.chunks(7) {
                client.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            client
        });
        let head = first(&mut server, Duration::from_secs(5)).await.expect("a head");
        assert!(head.windows(4).any(|w| w == b"\r\n\r\n"), "{head:?}");
        let client = writer.await.unwrap();
        drop(client);
        let mut all = Vec::new();
        Prefixed::new(head, server).read_to_end(&mut all).await.unwrap();
        assert_eq!(all, sent, "every byte once, in order");
    }

    #[tokio::test]
    async fn a_head_that_never_ends_times_out_and_a_long_one_is_handed_over() {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client.write_all(b"POST /rpc HTT").await.unwrap();
        assert_eq!(first(&mut server, Duration::from_millis(50)).await, None);
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        let long = [b'a'; MAX_HEAD + 100];
        client.write_all(&long).await.unwrap();
        let head = first(&mut server, Duration::from_secs(5)).await.expect("handed over");
        assert!(head.len() >= MAX_HEAD && head.iter().all(|b| *b == b'a'));
        drop(client);
        let (_client, mut server) = tokio::io::duplex(64);
        drop(_client);
        assert_eq!(first(&mut server, Duration::from_secs(5)).await, None, "closed before a byte");
    }
}
