//! The guides' shell blocks (docs/guide/gateway.md, webhooks.md, stdio.md) run as a reader
//! runs them: in page order, in one shell, in a fresh folder that has the repository's
//! `examples/`, against the real `oncerpc` and the examples' toy backend. Every output line a
//! block shows (its `# ` lines right under a command) must be printed by that command, in that
//! order; `…` in a shown line stands for any text, a `<- remark` is not output, and a shown line
//! that starts with a space continues the one above (a long line wrapped for reading). The
//! parsing, the shell and the matching are `common/guide.rs`, shared with the production
//! guide's test.
//!
//! Three things differ from a reader's terminal, and only these: `oncerpc serve` runs in the
//! background on a free port (the page's `localhost:8080`; the reader starts it in another
//! terminal), stopping the one before it as the page asks; `pidof oncerpc` names that gateway
//! (not every oncerpc on the machine); and a command sent to the background has its output
//! kept out of the next command's. The production guide's TLS example (its config and the
//! commands that serve it) runs in `tests/guide_production.rs`, against a TLS PostgreSQL; its
//! package block (`package.sh`, `dpkg -i`, `systemctl`) is the package test's
//! (`scripts/package-test.sh`), which needs root and a Debian host.

mod common;

use common::guide::{Listen, Shell, as_run, expect_shown, matches, root, steps};
use common::process::TempDir;

/// Run every step of `page`; a shown line that was not printed fails, naming it.
fn run_page(page: &str) {
    let steps = steps(page);
    assert!(!steps.is_empty(), "{page} has no shell blocks");
    let dir = TempDir::new("guide-page");
    std::os::unix::fs::symlink(root().join("examples"), dir.0.join("examples")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut shell = Shell::start(&dir.0, port, Listen::Port);
    let mut checked = 0;
    for step in &steps {
        let printed = shell.run(&as_run(&step.command, port));
        checked += expect_shown(page, step, &printed, &shell.gateway_log());
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
