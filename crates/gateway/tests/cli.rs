//! The command line as a user meets it: `--version`, shell completions, the generated man page,
//! and what bad input prints and exits with.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_oncerpc");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).env_remove("RUST_LOG").output().expect("run oncerpc")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn version_prints_the_crate_version() {
    let out = run(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout).trim(), format!("oncerpc {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn completions_for_each_shell_complete_the_subcommands() {
    for (shell, marker) in
        [("bash", "complete -F"), ("zsh", "#compdef oncerpc"), ("fish", "complete -c oncerpc")]
    {
        let out = run(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}: no `{marker}` in:\n{script}");
        for word in ["serve", "stdio", "check-config", "listen", "call", "flow", "auto-key"] {
            assert!(script.contains(word), "{shell}: `{word}` is not completed:\n{script}");
        }
    }
}

#[test]
fn completions_for_an_unknown_shell_are_refused_with_the_choices() {
    let out = run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = text(&out.stderr);
    assert!(err.contains("tcsh") && err.contains("bash") && err.contains("zsh"), "{err}");
}

#[test]
fn the_man_page_is_roff_generated_from_the_command_line() {
    let out = run(&["manpage"]);
    assert!(out.status.success(), "{out:?}");
    let roff = text(&out.stdout);
    assert!(roff.contains(".TH oncerpc 1"), "no .TH header:\n{roff}");
    assert!(roff.contains(env!("CARGO_PKG_VERSION")), "no version:\n{roff}");
    for word in ["serve", "stdio", "check\\-config", "completions", "call", "flow"] {
        assert!(roff.contains(word), "the man page does not mention `{word}`:\n{roff}");
    }
    // Rendered by man(1) when it is installed, as `man -l` would show it.
    let page = tempfile::Builder::new().suffix(".1").tempfile().expect("temp file");
    std::fs::write(page.path(), &roff).expect("write the page");
    match Command::new("man").arg("-l").arg(page.path()).env("MANWIDTH", "80").env("MANPAGER", "cat").output()
    {
        Ok(man) => {
            assert!(man.status.success(), "man -l failed: {}", text(&man.stderr));
            let shown = text(&man.stdout);
            assert!(
                shown.contains("NAME") && shown.contains("SYNOPSIS") && shown.contains("serve"),
                "{shown}"
            );
            assert!(!shown.contains(".TH"), "roff left unrendered:\n{shown}");
        }
        Err(e) => eprintln!("man is not installed ({e}): checked the roff text only"),
    }
}

#[test]
fn an_unknown_subcommand_prints_the_usage_and_exits_2() {
    let out = run(&["serv"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = text(&out.stderr);
    assert!(err.contains("unrecognized subcommand 'serv'") && err.contains("Usage: oncerpc"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn an_unknown_flag_prints_the_usage_and_exits_2() {
    for args in [&["--frobnicate"][..], &["serve", "--listne", "127.0.0.1:0"][..]] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = text(&out.stderr);
        assert!(err.contains("unexpected argument") && err.contains("Usage: oncerpc"), "{args:?}: {err}");
    }
}

#[test]
fn no_subcommand_prints_the_usage_and_exits_2() {
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("Usage: oncerpc"));
}

#[test]
fn a_missing_config_file_is_named() {
    let missing = std::env::temp_dir().join(format!("oncerpc-no-such-{}.toml", std::process::id()));
    let missing = missing.to_str().expect("UTF-8 temp dir");
    for args in [
        &["serve", "--config", missing, "--listen", "127.0.0.1:0", "--store", "memory://"][..],
        &["stdio", "--config", missing, "--store", "memory://"][..],
        &["check-config", missing][..],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = text(&out.stderr);
        assert!(err.contains(&format!("cannot read {missing}")), "{args:?}: {err}");
    }
}

#[test]
fn call_refuses_bad_input_before_sending_anything() {
    // Nothing listens on port 9 of loopback: a refusal that needed the network would be exit 3.
    for (args, needle) in [
        (
            &["call", "--url", "http://127.0.0.1:9", "counter.increment", "{}", "--key", "a b"][..],
            "invalid characters",
        ),
        (&["call", "--url", "http://127.0.0.1:9", "sum", "[1,"][..], "not JSON"),
        (&["call", "--url", "ftp://127.0.0.1:9", "sum"][..], "scheme"),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(text(&out.stderr).contains(needle), "{args:?}: {}", text(&out.stderr));
        assert!(out.stdout.is_empty());
    }
    let out = run(&["call", "sum", "--key", "k-1", "--auto-key"]);
    assert_eq!(out.status.code(), Some(2), "--key and --auto-key conflict: {out:?}");
}
