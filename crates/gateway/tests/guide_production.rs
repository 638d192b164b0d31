//! The production guide's "TLS everywhere, secrets from the environment" example
//! (docs/guide/production.md) runs as shown: its `toml` block is written where its first line
//! says, and the `sh` block after it runs command by command in one shell (the parsing, the
//! shell and the matching of shown lines are `common/guide.rs`, as in tests/guide_pages.rs),
//! against the real `oncerpc` and the suite's PostgreSQL with TLS.
//!
//! Both blocks are taken from the page; these substitutions, and only these, are made in them:
//! - `/etc/oncerpc/` is a temporary folder holding `tls/fullchain.pem` and `tls/privkey.pem`
//!   (a certificate for `gateway.example` and its key, from a CA the test makes), `tls/ca.pem`
//!   (that CA), and `backends-ca.pem` and `db-ca.pem` (copies of the suite's test CA,
//!   `ONCERPC_TEST_TLS_CA`, which signed the database's certificate);
//! - `0.0.0.0:8443` (the config's `listen`) is a free loopback port, and `gateway.example:8443`
//!   in the curl command that port;
//! - curl resolves `gateway.example` to 127.0.0.1 (`--resolve`): the name is still the one the
//!   certificate is verified against;
//! - the store URL's user, password, host and database (`oncerpc:PASSWORD@db.internal:5432/
//!   oncerpc`) are those of `ONCERPC_TEST_POSTGRES_TLS_URL` (set by scripts/test.sh: a server
//!   certificate for 127.0.0.1 from the test CA, user postgres); its `sslmode=verify-full` and
//!   `sslrootcert` stay the page's;
//! - `oncerpc serve` runs in the background until it listens (the reader's stays in the
//!   foreground), as in tests/guide_pages.rs.
//!
//! Checked: `check-config` exits 0, shows `${ONCERPC_STORE_URL}` and never the URL's password;
//! `serve` starts and keeps running; curl prints the line the page shows (`…` standing for any
//! text); and the page's claim that the API key comes from the environment: `/rpc` refuses a
//! call without a key (401) and answers one with `$ACME_API_KEY` as the page exported it. The
//! method's backend (`orders.internal`) does not exist, so `orders.create` itself is not
//! called. The gateway's log never has the password either. In CI (`CI=true`) a missing TLS
//! PostgreSQL, test CA or curl is a failure; elsewhere the test skips, saying why.
//!
//! The page's first block (`package.sh`, `dpkg -i`, `systemctl enable`) is the package
//! test's (`scripts/package-test.sh`).

mod common;

use std::path::Path;

use common::guide::{Listen, Shell, Step, as_run, block_steps, blocks, expect_shown, page_text, section};
use common::pki::Pki;
use common::process::TempDir;
use oncerpc_core::testkit::service_url;

const PAGE: &str = "docs/guide/production.md";
const SECTION: &str = "TLS everywhere, secrets from the environment";

/// The page's store URL's `user:password@host:port/database`, and the test database's.
struct StoreSwap {
    page: String,
    test: String,
    password: String,
}

/// `url`'s `user:password@host:port/database` (everything between `://` and `?`).
fn authority_and_db(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('?').next().unwrap_or(rest)
}

impl StoreSwap {
    fn new(steps: &[Step], test_url: &str) -> StoreSwap {
        let export = steps
            .iter()
            .find(|s| s.command.starts_with("export ONCERPC_STORE_URL="))
            .expect("the page exports ONCERPC_STORE_URL");
        let page_url = export.command.split('\'').nth(1).expect("the URL in single quotes");
        assert!(page_url.starts_with("postgres://"), "{PAGE}: not a PostgreSQL URL: {page_url}");
        assert!(
            page_url.contains("sslmode=verify-full"),
            "{PAGE}: the store URL does not verify: {page_url}"
        );
        let test = authority_and_db(test_url).to_owned();
        let password = test
            .split_once('@')
            .and_then(|(user, _)| user.split_once(':'))
            .map(|(_, p)| p.to_owned())
            .filter(|p| !p.is_empty())
            .expect("ONCERPC_TEST_POSTGRES_TLS_URL has a password (scripts/test.sh gives one)");
        StoreSwap { page: authority_and_db(page_url).to_owned(), test, password }
    }
}

/// The documented substitutions (see the header) applied to `text`, a block or a command.
fn substituted(text: &str, etc: &Path, port: u16, store: &StoreSwap) -> String {
    let text = text
        .replace("/etc/oncerpc/", &format!("{}/", etc.display()))
        .replace("0.0.0.0:8443", &format!("127.0.0.1:{port}"))
        .replace("gateway.example:8443", &format!("gateway.example:{port}"))
        .replace(&store.page, &store.test);
    match text.strip_prefix("curl ") {
        Some(rest) => format!("curl --resolve gateway.example:{port}:127.0.0.1 {rest}"),
        None => text,
    }
}

/// The page's `/etc/oncerpc/`: the listener's certificate, key and CA, and the CAs of the
/// backends and the database (the suite's test CA).
fn etc_oncerpc(test_ca: &str) -> (TempDir, Pki) {
    let etc = TempDir::new("guide-production-etc");
    let pki = Pki::new("gateway-example");
    let listener = pki.issue_for("gateway.example", "listener");
    let tls = etc.file("tls");
    std::fs::create_dir(&tls).unwrap();
    let leaf = std::fs::read_to_string(&listener.cert).unwrap();
    let ca = std::fs::read_to_string(&pki.ca_file).unwrap();
    std::fs::write(tls.join("fullchain.pem"), format!("{leaf}{ca}")).unwrap();
    std::fs::copy(&listener.key, tls.join("privkey.pem")).unwrap();
    std::fs::copy(&pki.ca_file, tls.join("ca.pem")).unwrap();
    std::fs::copy(test_ca, etc.file("backends-ca.pem")).unwrap();
    std::fs::copy(test_ca, etc.file("db-ca.pem")).unwrap();
    (etc, pki)
}

fn has_curl() -> bool {
    std::process::Command::new("curl").arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn the_tls_and_secrets_example_runs_as_shown() {
    let Some(pg) = service_url("ONCERPC_TEST_POSTGRES_TLS_URL", "PostgreSQL with TLS") else { return };
    let Some(test_ca) = service_url("ONCERPC_TEST_TLS_CA", "the test CA") else { return };
    if !has_curl() {
        common::mcp_clients::skip("curl");
        return;
    }

    let text = page_text(PAGE);
    let section = section(PAGE, &text, SECTION);
    let (tomls, shs) = (blocks(section, "toml"), blocks(section, "sh"));
    assert_eq!((tomls.len(), shs.len()), (1, 1), "{PAGE}: {SECTION:?} has one config and one shell block");
    let steps = block_steps(PAGE, shs[0]);
    assert!(steps.len() >= 5, "{PAGE}: the shell block has the exports, check-config, serve and curl");
    let store = StoreSwap::new(&steps, &pg);

    let (etc, _pki) = etc_oncerpc(&test_ca);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = substituted(tomls[0], &etc.0, port, &store);
    let path = config
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# "))
        .expect("the config block's first line names its file")
        .to_owned();
    assert!(path.starts_with(&etc.0.display().to_string()), "the config goes under /etc/oncerpc/: {path}");
    std::fs::write(&path, &config).unwrap();

    let work = TempDir::new("guide-production");
    let mut shell = Shell::start(&work.0, port, Listen::Config);
    let (mut checked, mut checked_config, mut served) = (0, false, false);
    for step in &steps {
        let command = substituted(&step.command, &etc.0, port, &store);
        let (printed, status) = shell.run_status(&as_run(&command, port));
        let (log, stderr) = (shell.gateway_log(), shell.stderr());
        let context =
            || format!("{command}\nprinted:\n{}\nstderr:\n{stderr}\nlog:\n{log}", printed.join("\n"));
        if step.command.starts_with("oncerpc check-config") {
            assert_eq!(status, 0, "check-config refused the page's config: {}", context());
            let out = printed.join("\n");
            assert!(
                out.contains("${ONCERPC_STORE_URL}"),
                "check-config does not show the variable: {}",
                context()
            );
            assert!(
                !out.contains(&store.password) && !stderr.contains(&store.password),
                "check-config showed the store's password: {}",
                context()
            );
            checked_config = true;
        }
        if step.command.starts_with("oncerpc serve") {
            // Its port is open; the line saying so may follow a moment later.
            let listening = (0..200).any(|_| {
                let said = shell.gateway_log().contains("oncerpc listening on");
                said || {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    false
                }
            });
            let (_, alive) = shell.run_status(r#"kill -0 "$(cat gw.pid)""#);
            assert!(listening && alive == 0, "oncerpc serve did not start: {}", context());
            served = true;
        }
        if step.command.starts_with("curl") {
            assert_eq!(status, 0, "curl failed: {}", context());
        }
        checked += expect_shown(PAGE, step, &printed, &log);
    }
    assert!(checked_config && served, "{PAGE}: the block does not check the config and serve it");
    assert!(checked > 0, "{PAGE}: no shown output was checked");

    // The key comes from the environment: refused without it, served with it (the config's
    // method is the tenant's).
    let rpc = |key: &str| {
        format!(
            "curl -sS -w '\\n%{{http_code}}\\n' --resolve gateway.example:{port}:127.0.0.1 \
             --cacert '{ca}' -H 'content-type: application/json' {key} \
             -d '{{\"jsonrpc\":\"2.0\",\"method\":\"rpc.discover\",\"id\":1}}' https://gateway.example:{port}/rpc",
            ca = etc.file("tls/ca.pem").display(),
        )
    };
    let (without, _) = shell.run_status(&rpc(""));
    assert_eq!(without.last().map(String::as_str), Some("401"), "a call without the API key: {without:?}");
    let (with, _) = shell.run_status(&rpc(r#"-H "X-API-Key: $ACME_API_KEY""#));
    assert_eq!(with.last().map(String::as_str), Some("200"), "a call with $ACME_API_KEY: {with:?}");
    assert!(with[0].contains(r#""name":"orders.create""#), "rpc.discover does not list the method: {with:?}");

    let log = shell.gateway_log();
    assert!(!log.contains(&store.password), "the store's password is in the gateway's log:\n{log}");
}
