//! The guide pages' examples as a reader runs them (tests/guide_pages.rs,
//! tests/guide_production.rs): a page's fenced blocks, its `sh` blocks parsed into commands
//! and the output lines the page shows under each, a bash that runs one command at a time,
//! and the check that every shown line was printed.
//!
//! A command is a line of a block that is not a comment, with the lines it goes on to (its
//! last line ends with `\`, or a single quote is still open). The `# ` lines right under a
//! command (no blank line or other comment between) are what it prints, in that order: `…` in
//! a shown line stands for any text, a `  <- remark` is not output, and a shown line that
//! starts with a space continues the one above (a long line wrapped for reading).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

/// One command of a page and the lines the page shows it printing.
#[derive(Debug)]
pub struct Step {
    pub command: String,
    pub shown: Vec<String>,
}

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text of `page` (a path from the repository's root).
pub fn page_text(page: &str) -> String {
    std::fs::read_to_string(root().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"))
}

/// The bodies of the fenced blocks of `text` whose info string is `lang`, in order.
pub fn blocks<'a>(text: &'a str, lang: &str) -> Vec<&'a str> {
    let fence = format!("```{lang}\n");
    text.split(fence.as_str()).skip(1).map(|b| b.split("```").next().unwrap_or_default()).collect()
}

/// The part of `text` under the heading `## {heading}`, up to the next `## ` heading.
pub fn section<'a>(page: &str, text: &'a str, heading: &str) -> &'a str {
    let start = format!("\n## {heading}\n");
    let (_, rest) = text.split_once(start.as_str()).unwrap_or_else(|| panic!("{page}: no section {start:?}"));
    rest.split("\n## ").next().unwrap_or_default()
}

/// The steps of every `sh` block of `page` (a path from the repository's root), in order.
pub fn steps(page: &str) -> Vec<Step> {
    blocks(&page_text(page), "sh").into_iter().flat_map(|b| block_steps(page, b)).collect()
}

/// The steps of one `sh` block's body (of `page`, for the messages).
pub fn block_steps(page: &str, block: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut command = String::new();
    // Whether `# ` lines now are the output of the last command (no blank line between).
    let mut under_command = false;
    for line in block.lines() {
        if !command.is_empty() {
            command.push('\n');
            command.push_str(line);
            if !continues(&command) {
                steps.push(Step { command: std::mem::take(&mut command), shown: Vec::new() });
                under_command = true;
            }
            continue;
        }
        if line.trim().is_empty() {
            under_command = false;
        } else if let Some(shown) = line.strip_prefix("# ").filter(|_| under_command) {
            let shown = shown.split("  <-").next().unwrap_or(shown).trim_end();
            let last = &mut steps.last_mut().expect("a command above").shown;
            match (shown.starts_with(' '), last.last_mut()) {
                (true, Some(previous)) => previous.push_str(shown.trim_start()),
                _ => last.push(shown.to_owned()),
            }
        } else if line.starts_with('#') {
            under_command = false;
        } else {
            command = line.to_owned();
            if !continues(&command) {
                steps.push(Step { command: std::mem::take(&mut command), shown: Vec::new() });
                under_command = true;
            }
        }
    }
    assert!(command.is_empty(), "{page}: a command that does not end: {command}");
    steps
}

/// A command goes on: its last line ends with `\`, or a single quote is still open.
pub fn continues(command: &str) -> bool {
    command.ends_with('\\') || command.chars().filter(|c| *c == '\'').count() % 2 == 1
}

/// `pattern` (a shown line) matches `line` whole; `…` matches any text.
pub fn matches(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split('…');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = line.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Check that `printed` (what `step` printed) has every line `step` shows, in that order; a
/// missing one fails, naming it, with what was printed and `log` (the gateway's). The number
/// of lines checked.
pub fn expect_shown(page: &str, step: &Step, printed: &[String], log: &str) -> usize {
    let mut from = 0;
    for shown in &step.shown {
        match printed[from..].iter().position(|line| matches(shown, line)) {
            Some(at) => from += at + 1,
            None => panic!(
                "{page}: the command\n{}\ndid not print\n{shown}\n(in this order); it printed:\n{}\n\
                 the gateway's log:\n{log}",
                step.command,
                printed.join("\n"),
            ),
        }
    }
    step.shown.len()
}

/// How the shell's `oncerpc serve` listens.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// On the shell's port (`--listen 127.0.0.1:$PORT` added): the pages whose configs do
    /// not say where (the reader's `localhost:8080`).
    Port,
    /// Where the config says (a page whose `listen` the test has put on the shell's port).
    Config,
}

/// A bash that runs one command at a time and says when each has finished. `oncerpc` in it is
/// the real binary, except that `oncerpc serve` runs in the background (its output appended
/// to `gw.log`, its pid in `gw.pid`), stopping the one it started before; `wait_port N` waits
/// (bounded) until something listens on 127.0.0.1:N, and `pidof` names that gateway.
pub struct Shell {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    work: PathBuf,
}

const DONE: &str = "@@guide-step-done@@";
const STATUS: &str = "@@guide-step-status@@ ";

impl Shell {
    /// A shell in `work`, with `$PORT` the gateway's port.
    pub fn start(work: &Path, port: u16, listen: Listen) -> Shell {
        let mut child = Command::new("bash")
            .current_dir(work)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(work.join("shell.err")).unwrap())
            .spawn()
            .expect("bash");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shell = Shell { stdin: child.stdin.take().unwrap(), child, lines, work: work.to_owned() };
        let serve_args = match listen {
            Listen::Port => r#"(--listen "127.0.0.1:$PORT")"#,
            Listen::Config => "()",
        };
        let preamble = format!(
            r#"
PORT={port}
REAL_ONCERPC='{bin}'
SERVE_ARGS={serve_args}
wait_port() {{ for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "nothing listens on $1" >&2; }}
oncerpc() {{
  if [ "$1" = serve ]; then
    shift
    if [ -s gw.pid ]; then kill "$(cat gw.pid)" 2>/dev/null; sleep 0.3; fi
    "$REAL_ONCERPC" serve "$@" "${{SERVE_ARGS[@]}}" >>gw.log 2>&1 &
    echo $! > gw.pid
    return 0
  fi
  "$REAL_ONCERPC" "$@"
}}
pidof() {{ cat gw.pid; }}
"#,
            bin = env!("CARGO_BIN_EXE_oncerpc"),
        );
        let said = shell.run(&preamble);
        assert!(said.is_empty(), "the preamble printed {said:?}");
        shell
    }

    fn send(&mut self, script: &str) {
        writeln!(self.stdin, "{script}\nprintf '\\n{DONE}\\n'").expect("bash's stdin");
        self.stdin.flush().unwrap();
    }

    /// Run `command`; what it printed, one line each (no `\r`, no trailing blank lines).
    pub fn run(&mut self, command: &str) -> Vec<String> {
        self.send(command);
        let mut out = Vec::new();
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) if line == DONE => break,
                Ok(line) => out.push(line.trim_end_matches('\r').trim_end().to_owned()),
                Err(_) => panic!("no end within 60 s: {command}\nprinted so far: {out:#?}"),
            }
        }
        while out.last().is_some_and(|l| l.is_empty()) {
            out.pop();
        }
        out
    }

    /// [`run`](Self::run), and `command`'s exit status.
    pub fn run_status(&mut self, command: &str) -> (Vec<String>, i32) {
        let mut printed = self.run(&format!("{command}\nprintf '\\n{STATUS}%d\\n' \"$?\""));
        let status = printed.pop().and_then(|l| l.strip_prefix(STATUS)?.parse().ok());
        while printed.last().is_some_and(|l| l.is_empty()) {
            printed.pop();
        }
        (printed, status.unwrap_or_else(|| panic!("no exit status from {command}")))
    }

    /// What the gateways this shell started have logged so far.
    pub fn gateway_log(&self) -> String {
        std::fs::read_to_string(self.work.join("gw.log")).unwrap_or_default()
    }

    /// What the shell's commands wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.work.join("shell.err")).unwrap_or_default()
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        // The gateway and the backends it started.
        let _ = writeln!(
            self.stdin,
            "[ -s gw.pid ] && kill \"$(cat gw.pid)\"; kill $(jobs -p) 2>/dev/null; exit"
        );
        let _ = self.stdin.flush();
        let _ = self.child.wait();
        // The gateways' log, kept for the run's secret scan (scripts/test.sh).
        if let Some(mut kept) = super::process::kept_log(format_args!("guide-{}", self.child.id())) {
            let _ = kept.write_all(self.gateway_log().as_bytes());
        }
    }
}

/// `command` as the test runs it: `localhost:8080` is the gateway's port, and what a command
/// sends to the background (`… &`) prints nowhere.
pub fn as_run(command: &str, port: u16) -> String {
    let command = command.replace("localhost:8080", &format!("localhost:{port}"));
    let mut out = String::new();
    let chars: Vec<char> = command.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        let background = *c == '&'
            && i > 0
            && chars[i - 1] == ' '
            && chars.get(i + 1).is_none_or(|n| *n == ' ' || *n == '\n')
            && !(i > 1 && chars[i - 2] == '&');
        if background {
            out.push_str(">/dev/null 2>&1 ");
        }
        out.push(*c);
    }
    // A gateway or a backend started by this command listens before the next one runs.
    if command.contains("oncerpc serve") {
        out.push_str("\nwait_port $PORT");
    }
    if command.contains("examples/upstream.py 9000") {
        out.push_str("\nwait_port 9000");
    }
    out
}
