//! The guides' shell blocks (docs/guide/gateway.md, webhooks.md, stdio.md) run as a reader
//! runs them: in page order, in one shell, in a fresh folder that has the repository's
//! `examples/`, against the real `oncerpc` and the examples' toy backend. Every output line a
//! block shows (its `# ` lines right under a command) must be printed by that command, in that
//! order; `…` in a shown line stands for any text, a `<- remark` is not output, and a shown line
//! that starts with a space continues the one above (a long line wrapped for reading).
//!
//! Three things differ from a reader's terminal, and only these: `oncerpc serve` runs in the
//! background on a free port (the page's `localhost:8080`; the reader starts it in another
//! terminal), stopping the one before it as the page asks; `pidof oncerpc` names that gateway
//! (not every oncerpc on the machine); and a command sent to the background has its output
//! kept out of the next command's. The production guide's blocks need a Debian host and a
//! database server of its own; the package test (`scripts/package-test.sh`) runs them.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use common::process::TempDir;

/// One command of a page and the lines the page shows it printing.
#[derive(Debug)]
struct Step {
    command: String,
    shown: Vec<String>,
}

/// The steps of every `sh` block of `page` (a path from the repository's root), in order.
fn steps(page: &str) -> Vec<Step> {
    let text = std::fs::read_to_string(root().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
    let mut steps: Vec<Step> = Vec::new();
    for block in text.split("```sh\n").skip(1) {
        let block = block.split("```").next().unwrap_or_default();
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
    }
    steps
}

/// A command goes on: its last line ends with `\`, or a single quote is still open.
fn continues(command: &str) -> bool {
    command.ends_with('\\') || command.chars().filter(|c| *c == '\'').count() % 2 == 1
}

/// `pattern` (a shown line) matches `line` whole; `…` matches any text.
fn matches(pattern: &str, line: &str) -> bool {
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

fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A bash that runs one command at a time and says when each has finished.
struct Shell {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

const DONE: &str = "@@guide-step-done@@";

impl Shell {
    fn start(work: &Path, port: u16) -> Shell {
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
        let mut shell = Shell { stdin: child.stdin.take().unwrap(), child, lines };
        let preamble = format!(
            r#"
PORT={port}
REAL_ONCERPC='{bin}'
wait_port() {{ for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "nothing listens on $1" >&2; }}
oncerpc() {{
  if [ "$1" = serve ]; then
    shift
    if [ -s gw.pid ]; then kill "$(cat gw.pid)" 2>/dev/null; sleep 0.3; fi
    "$REAL_ONCERPC" serve "$@" --listen "127.0.0.1:$PORT" >>gw.log 2>&1 &
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
    fn run(&mut self, command: &str) -> Vec<String> {
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
    }
}

/// `command` as the test runs it: `localhost:8080` is the gateway's port, and what a command
/// sends to the background (`… &`) prints nowhere.
fn as_run(command: &str, port: u16) -> String {
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

/// Run every step of `page`; a shown line that was not printed fails, naming it.
fn run_page(page: &str) {
    let steps = steps(page);
    assert!(!steps.is_empty(), "{page} has no shell blocks");
    let dir = TempDir::new("guide-page");
    std::os::unix::fs::symlink(root().join("examples"), dir.0.join("examples")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut shell = Shell::start(&dir.0, port);
    let mut checked = 0;
    for step in &steps {
        let printed = shell.run(&as_run(&step.command, port));
        let mut from = 0;
        for shown in &step.shown {
            match printed[from..].iter().position(|line| matches(shown, line)) {
                Some(at) => from += at + 1,
                None => panic!(
                    "{page}: the command\n{}\ndid not print\n{shown}\n(in this order); it printed:\n{}\n\
                     the gateway's log:\n{}",
                    step.command,
                    printed.join("\n"),
                    std::fs::read_to_string(dir.0.join("gw.log")).unwrap_or_default()
                ),
            }
            checked += 1;
        }
    }
    assert!(checked > 0, "{page}: no shown output was checked");
}

#[test]
fn the_gateway_guide_runs_as_shown() {
    run_page("docs/guide/gateway.md");
}

#[test]
fn the_webhooks_guide_runs_as_shown() {
    run_page("docs/guide/webhooks.md");
}

#[test]
fn the_stdio_guide_runs_as_shown() {
    run_page("docs/guide/stdio.md");
}

#[test]
fn a_shown_line_matches_with_its_elisions_only() {
    assert!(matches(r#"{"a":1,…,"z":2}"#, r#"{"a":1,"b":[1,2],"z":2}"#));
    assert!(matches("x-idempotency-status: new", "x-idempotency-status: new"));
    assert!(!matches("x-idempotency-status: new", "x-idempotency-status: duplicate"));
    assert!(matches("[{…},…", "[{\"id\":1},{\"id\":2}"));
    assert!(!matches("HTTP/1.1 200 OK", "HTTP/1.1 200 OK, and more"));
    let parsed = steps("docs/guide/gateway.md");
    let batch = parsed.iter().find(|s| s.command.contains(r#"{"foo":"boo"}"#)).expect("the batch");
    assert_eq!(batch.shown.len(), 1, "a wrapped line is one line: {batch:?}");
    assert_eq!(as_run("python3 x.py 9000 & UP=$!", 1), "python3 x.py 9000 >/dev/null 2>&1 & UP=$!");
    assert_eq!(as_run("a && b 2>&1", 1), "a && b 2>&1");
}
