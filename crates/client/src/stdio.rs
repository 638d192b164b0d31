//! The stdio transport: `oncerpc stdio` (or any JSON-RPC daemon on stdin/stdout) as a child
//! process, newline-delimited JSON, one request at a time (SPEC §5).
//!
//! The daemon is started on the first call and started again when it has exited. An answer
//! is matched by its id: an answer to an earlier attempt that timed out is read and skipped.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

use crate::error::Error;
use crate::retry::Cause;
use crate::transport::{Failed, Reply};

/// Answers longer than this are refused (the server's own default body limit is 1 MiB).
const MAX_LINE: usize = 16 * 1024 * 1024;

pub(crate) struct StdioTransport {
    program: OsString,
    args: Vec<OsString>,
    daemon: Mutex<Option<Daemon>>,
}

struct Daemon {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl StdioTransport {
    pub(crate) fn new(program: OsString, args: Vec<OsString>) -> StdioTransport {
        StdioTransport { program, args, daemon: Mutex::new(None) }
    }

    fn spawn(&self) -> Result<Daemon, Failed> {
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                Failed::fatal(Error::Stdio(format!("cannot start {}: {e}", self.program.to_string_lossy())))
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(Failed::fatal(Error::Stdio("the daemon's pipes are missing".into())));
        };
        Ok(Daemon { child, stdin, stdout: BufReader::new(stdout) })
    }

    /// Send one frame and read the answer whose id is `id` (its JSON text).
    pub(crate) async fn exchange(
        &self,
        frame: Vec<u8>,
        id: &str,
        timeout: Duration,
    ) -> Result<Reply, Failed> {
        self.exchange_with(frame, timeout, |line| answers(line, id)).await
    }

    /// Send a batch and read its answer: an array, or one refusal with `id: null`.
    pub(crate) async fn exchange_batch(&self, frame: Vec<u8>, timeout: Duration) -> Result<Reply, Failed> {
        self.exchange_with(frame, timeout, |line| {
            line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') || answers(line, "null")
        })
        .await
    }

    async fn exchange_with(
        &self,
        frame: Vec<u8>,
        timeout: Duration,
        ours: impl Fn(&[u8]) -> bool,
    ) -> Result<Reply, Failed> {
        match tokio::time::timeout(timeout, self.exchange_inner(frame, ours)).await {
            Ok(r) => r,
            Err(_) => Err(Failed { cause: Some(Cause::Timeout), hint: None, error: Error::Timeout(timeout) }),
        }
    }

    async fn exchange_inner(
        &self,
        mut frame: Vec<u8>,
        ours: impl Fn(&[u8]) -> bool,
    ) -> Result<Reply, Failed> {
        let mut guard = self.daemon.lock().await;
        if let Some(d) = guard.as_mut()
            && !matches!(d.child.try_wait(), Ok(None))
        {
            *guard = None; // exited: start it again
        }
        if guard.is_none() {
            *guard = Some(self.spawn()?);
        }
        let Some(daemon) = guard.as_mut() else {
            return Err(Failed::fatal(Error::Stdio("no daemon".into())));
        };
        frame.push(b'\n');
        let sent = async {
            daemon.stdin.write_all(&frame).await?;
            daemon.stdin.flush().await
        }
        .await;
        if let Err(e) = sent {
            *guard = None;
            return Err(lost(format!("writing the request: {e}")));
        }
        loop {
            let mut line = Vec::new();
            let read = (&mut daemon.stdout).take(MAX_LINE as u64).read_until(b'\n', &mut line).await;
            match read {
                Ok(0) => {
                    *guard = None;
                    return Err(lost("the daemon closed its stdout".into()));
                }
                Err(e) => {
                    *guard = None;
                    return Err(lost(format!("reading the answer: {e}")));
                }
                Ok(_) if !line.ends_with(b"\n") => {
                    *guard = None;
                    return Err(Failed::fatal(Error::Stdio(format!(
                        "an answer longer than {MAX_LINE} bytes"
                    ))));
                }
                Ok(_) => {}
            }
            if ours(&line) {
                return Ok(Reply { body: line, ..Reply::default() });
            }
            // An answer to an earlier attempt that timed out, or a blank line: not ours.
            tracing::debug!(line = %String::from_utf8_lossy(&line).trim_end(), "stdio: skipped a frame");
        }
    }
}

fn lost(reason: String) -> Failed {
    Failed { cause: Some(Cause::Disconnected), hint: None, error: Error::Disconnected(reason) }
}

/// Whether `line` is a response whose id is `id`, or one with `id: null` (a refusal of a
/// frame the daemon could not read, which can only be the one just written).
fn answers(line: &[u8], id: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        id: &'a serde_json::value::RawValue,
    }
    match serde_json::from_slice::<Head>(line) {
        Ok(Head { id: got }) => got.get() == id || got.get() == "null",
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn answers_match_by_id() {
        assert!(super::answers(br#"{"jsonrpc":"2.0","result":1,"id":"a-1"}"#, r#""a-1""#));
        assert!(!super::answers(br#"{"jsonrpc":"2.0","result":1,"id":"a-0"}"#, r#""a-1""#));
        assert!(super::answers(
            br#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"x"},"id":null}"#,
            r#""a""#
        ));
        assert!(!super::answers(b"not json\n", r#""a""#));
        assert!(!super::answers(b"[1]", r#""a""#));
    }
}
