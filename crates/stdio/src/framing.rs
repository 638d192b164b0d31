//! Framing of JSON-RPC messages on a byte stream (SPEC §5).
//!
//! Two framings, chosen from the first non-blank byte of the input and kept for the whole
//! session; answers use the same framing:
//!
//! * **Content-Length** (LSP, Emacs `jsonrpc.el`): `Name: value\r\n` header lines (names
//!   case-insensitive; `Content-Type` and any other header accepted and ignored; a bare `\n`
//!   is tolerated), a blank line, then exactly `Content-Length` bytes of body.
//! * **Newline-delimited JSON**: one message per line (a batch is one line); blank lines are
//!   ignored; a last line without `\n` at EOF is still a message.
//!
//! A bad frame is reported as a [`Frame::Bad`] error to answer with `id: null`; when the
//! next frame can still be found (the body length is known, or the line ends), reading goes
//! on. When it cannot, [`ReadError::Fatal`] says why.

use oncerpc_protocol::{ErrorCode, RpcError};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// The longest header line accepted (a Content-Length header block is tiny).
const MAX_HEADER_LINE: usize = 8 * 1024;
/// The most header lines in one block.
const MAX_HEADERS: usize = 32;

/// The framing of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    ContentLength,
    Ndjson,
}

impl Framing {
    /// Frame an answer body.
    pub fn encode(self, body: &[u8], out: &mut Vec<u8>) {
        match self {
            Framing::ContentLength => {
                out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
                out.extend_from_slice(body);
            }
            Framing::Ndjson => {
                // Raw line breaks in valid JSON can only be insignificant whitespace (inside
                // strings they are escaped), so a pretty-printed result becomes one line.
                out.extend(body.iter().map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b }));
                out.push(b'\n');
            }
        }
    }
}

/// One read from the stream.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A message body to dispatch.
    Message(Vec<u8>),
    /// A frame that could not be read: answer it with this error (`id: null`) and go on.
    Bad(RpcError),
}

/// Why reading stopped.
#[derive(Debug, PartialEq)]
pub enum ReadError {
    /// The input ended cleanly, between frames.
    Eof,
    /// The input cannot be framed any more. `answer`, if any, is sent before stopping.
    Fatal { reason: String, answer: Option<RpcError> },
}

/// Reads frames from an async byte stream.
pub struct FrameReader<R> {
    reader: BufReader<R>,
    framing: Option<Framing>,
    max_body: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(reader: R, max_body: usize) -> Self {
        FrameReader { reader: BufReader::with_capacity(64 * 1024, reader), framing: None, max_body }
    }

    /// The session's framing, once the first byte was seen.
    pub fn framing(&self) -> Option<Framing> {
        self.framing
    }

    /// The next frame.
    pub async fn next(&mut self) -> Result<Frame, ReadError> {
        let framing = match self.framing {
            Some(f) => f,
            None => {
                let f = self.detect().await?;
                self.framing = Some(f);
                f
            }
        };
        match framing {
            Framing::ContentLength => self.next_content_length().await,
            Framing::Ndjson => self.next_line().await,
        }
    }

    /// Skip leading blanks and look at the first byte: `{` or `[` → NDJSON, else headers.
    async fn detect(&mut self) -> Result<Framing, ReadError> {
        loop {
            let buf = self.reader.fill_buf().await.map_err(io_fatal)?;
            let Some(&first) = buf.first() else { return Err(ReadError::Eof) };
            if first.is_ascii_whitespace() {
                self.reader.consume(1);
                continue;
            }
            return Ok(if first == b'{' || first == b'[' { Framing::Ndjson } else { Framing::ContentLength });
        }
    }

    async fn next_line(&mut self) -> Result<Frame, ReadError> {
        loop {
            let mut line = Vec::new();
            // Read at most max_body + 1 bytes of the line; longer means too large.
            let n = (&mut self.reader)
                .take(self.max_body as u64 + 1)
                .read_until(b'\n', &mut line)
                .await
                .map_err(io_fatal)?;
            if n == 0 {
                return Err(ReadError::Eof);
            }
            if line.last() != Some(&b'\n') && line.len() > self.max_body {
                // Too long: discard the rest of the line, answer, and go on.
                skip_line(&mut self.reader).await?;
                return Ok(Frame::Bad(too_large(self.max_body)));
            }
            while matches!(line.last(), Some(b'\n' | b'\r')) {
                line.pop();
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Frame::Message(line));
        }
    }

    async fn next_content_length(&mut self) -> Result<Frame, ReadError> {
        let mut length: Option<Result<usize, String>> = None;
        let mut malformed: Option<String> = None;
        let mut lines = 0;
        loop {
            let mut line = Vec::new();
            let n = (&mut self.reader)
                .take(MAX_HEADER_LINE as u64)
                .read_until(b'\n', &mut line)
                .await
                .map_err(io_fatal)?;
            if n == 0 {
                return if lines == 0 {
                    Err(ReadError::Eof)
                } else {
                    Err(fatal("the input ended inside a header block", parse_error("truncated header block")))
                };
            }
            if line.last() != Some(&b'\n') {
                if n == MAX_HEADER_LINE {
                    return Err(fatal(
                        format!(
                            "a header line is longer than {MAX_HEADER_LINE} bytes: cannot find the next frame"
                        ),
                        parse_error("header line too long"),
                    ));
                }
                return Err(fatal(
                    "the input ended inside a header line",
                    parse_error("truncated header block"),
                ));
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\r', '\n']);
            if text.is_empty() {
                if lines == 0 {
                    continue; // blank lines between frames
                }
                break;
            }
            lines += 1;
            if lines > MAX_HEADERS {
                return Err(fatal(
                    format!("more than {MAX_HEADERS} header lines: cannot find the next frame"),
                    parse_error("too many header lines"),
                ));
            }
            match text.split_once(':') {
                Some((name, value)) if name.trim().eq_ignore_ascii_case("content-length") => {
                    let parsed = value.trim().parse::<usize>().map_err(|_| value.trim().to_owned());
                    length = Some(parsed);
                }
                Some((name, _)) if !name.trim().is_empty() && !name.contains(char::is_whitespace) => {}
                _ => {
                    malformed.get_or_insert_with(|| format!("malformed header line {text:?}"));
                }
            }
        }
        let len = match length {
            Some(Ok(len)) => len,
            Some(Err(v)) => {
                return Err(fatal(
                    format!("Content-Length {v:?} is not a number: cannot find the next frame"),
                    parse_error(format!("invalid Content-Length {v:?}")),
                ));
            }
            None => {
                return Err(fatal(
                    "a header block without Content-Length: cannot find the next frame",
                    parse_error("missing Content-Length header"),
                ));
            }
        };
        if len > self.max_body {
            // The length is known: skip the body without holding it, answer, go on.
            let skipped = tokio::io::copy(&mut (&mut self.reader).take(len as u64), &mut tokio::io::sink())
                .await
                .map_err(io_fatal)?;
            if (skipped as usize) < len {
                return Err(fatal("the input ended inside a frame body", too_large(self.max_body)));
            }
            return Ok(Frame::Bad(too_large(self.max_body)));
        }
        let mut body = vec![0u8; len];
        let mut filled = 0;
        while filled < len {
            let n = self.reader.read(&mut body[filled..]).await.map_err(io_fatal)?;
            if n == 0 {
                return Err(fatal(
                    format!("the input ended inside a frame body ({filled} of {len} bytes)"),
                    parse_error(format!("truncated frame: {filled} of {len} bytes")),
                ));
            }
            filled += n;
        }
        if let Some(reason) = malformed {
            return Ok(Frame::Bad(parse_error(reason)));
        }
        Ok(Frame::Message(body))
    }
}

async fn skip_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<(), ReadError> {
    loop {
        let buf = reader.fill_buf().await.map_err(io_fatal)?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}

fn too_large(max: usize) -> RpcError {
    RpcError::with_message(
        ErrorCode::InvalidRequest,
        format!("Request too large: the limit is {max} bytes (limits.max_body_bytes)"),
    )
}

fn parse_error(reason: impl std::fmt::Display) -> RpcError {
    RpcError::parse_error(reason)
}

fn fatal(reason: impl Into<String>, answer: RpcError) -> ReadError {
    ReadError::Fatal { reason: reason.into(), answer: Some(answer) }
}

fn io_fatal(e: std::io::Error) -> ReadError {
    ReadError::Fatal { reason: format!("reading stdin failed: {e}"), answer: None }
}
