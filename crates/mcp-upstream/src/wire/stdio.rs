//! A command oncerpc starts, speaking MCP as one JSON message a line on its stdin and
//! stdout (its stderr is oncerpc's). Three tasks: a writer fed by a channel, a reader routing
//! each line, and a watcher that closes the connection when the command exits and stops the
//! command when the connection is closed.

use std::process::Stdio;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use crate::shared::{Failure, MAX_MESSAGE, Shared};

#[derive(Clone)]
pub(crate) struct StdioWire {
    lines: mpsc::UnboundedSender<Vec<u8>>,
}

impl StdioWire {
    /// Start `command` and the tasks around it.
    pub(crate) fn open(
        command: &str,
        args: &[String],
        env: &[(String, String)],
        shared: Arc<Shared>,
    ) -> Result<StdioWire, String> {
        let mut cmd = tokio::process::Command::new(command);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| format!("cannot start {command:?}: {e}"))?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("cannot start {command:?}: no stdin or stdout"));
        };
        let (lines, mut out) = mpsc::unbounded_channel::<Vec<u8>>();
        let wire = StdioWire { lines: lines.clone() };

        let closing = shared.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    line = out.recv() => {
                        let Some(line) = line else { return };
                        if let Err(e) = stdin.write_all(&line).await {
                            closing.close(&format!("cannot write to the command: {e}"));
                            return;
                        }
                    }
                    _ = closing.closed() => return,
                }
            }
        });

        let reading = shared.clone();
        let replies = StdioWire { lines: lines.clone() };
        tokio::spawn(async move {
            let mut lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_MESSAGE));
            let why = loop {
                let line = tokio::select! {
                    line = lines.next() => line,
                    _ = reading.closed() => return,
                };
                match line {
                    None => break "the command's output ended".to_owned(),
                    Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                        break format!("the command wrote a line over {MAX_MESSAGE} bytes");
                    }
                    Some(Err(e)) => break format!("cannot read the command's output: {e}"),
                    Some(Ok(line)) if line.trim().is_empty() => {}
                    Some(Ok(line)) => match serde_json::from_str::<Value>(&line) {
                        Ok(message) => {
                            if let Some(reply) = reading.route(message) {
                                let _ = replies.send(&reply);
                            }
                        }
                        Err(_) => {
                            tracing::debug!("MCP upstream command wrote a line that is not JSON: ignored")
                        }
                    },
                }
            };
            reading.close(&why);
        });

        tokio::spawn(async move {
            tokio::select! {
                status = child.wait() => {
                    let why = match status {
                        Ok(s) => format!("the command exited ({s})"),
                        Err(e) => format!("the command cannot be waited for: {e}"),
                    };
                    shared.close(&why);
                }
                _ = shared.closed() => {
                    let _ = child.kill().await;
                }
            }
        });
        Ok(wire)
    }

    pub(crate) fn send(&self, message: &Value) -> Result<(), Failure> {
        let mut line = serde_json::to_vec(message).map_err(|e| Failure::Garbage(e.to_string()))?;
        line.push(b'\n');
        self.lines.send(line).map_err(|_| Failure::Closed("the command is gone".into()))
    }
}
