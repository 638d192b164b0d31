//! Secrets from the environment (SPEC §13, item 5): `"${NAME}"` anywhere a string goes,
//! against the real binary: the value is used, `check-config` shows `${NAME}` and never the
//! value, and a missing variable is an error naming it and the key.

mod common;

use std::process::{Command, Output};

use common::process::TempDir;

fn oncerpc(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oncerpc"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run oncerpc");
    common::process::keep_output(&out);
    out
}

const PASSWORD: &str = "pg-s3cr3t-password-from-the-env";
const API_KEY: &str = "tenant-s3cr3t-key-from-the-environment";

fn config(dir: &TempDir, text: &str) -> String {
    let path = dir.file("oncerpc.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn check_config_shows_the_variable_never_its_value() {
    let dir = TempDir::new("secrets-check");
    let db = format!("sqlite://{}", dir.file("o.db").display());
    let path = config(
        &dir,
        "listen = \"${ONCERPC_T_LISTEN}\"\n[store]\nurl = \"${ONCERPC_T_STORE}\"\n\
         [[tenants]]\nname = \"acme\"\napi_keys = [\"${ONCERPC_T_KEY}\"]\n",
    );
    let listen = "127.0.0.1:18099";
    let out = oncerpc(
        &["check-config", &path],
        &[("ONCERPC_T_LISTEN", listen), ("ONCERPC_T_STORE", &db), ("ONCERPC_T_KEY", API_KEY)],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("${ONCERPC_T_STORE}") && stdout.contains("${ONCERPC_T_LISTEN}"), "{stdout}");
    for secret in [db.as_str(), listen, API_KEY] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} printed:\n{stdout}\n{stderr}"
        );
    }
}

#[test]
fn a_missing_variable_is_an_error_naming_it_and_the_key() {
    let dir = TempDir::new("secrets-missing");
    let path = config(&dir, "[store]\nurl = \"${ONCERPC_T_UNSET_STORE}\"\n");
    let out = oncerpc(&["check-config", &path], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ONCERPC_T_UNSET_STORE") && stderr.contains("store.url"), "{stderr}");
    // `serve` refuses the same way, before listening.
    let out = oncerpc(&["serve", "--config", &path, "--listen", "127.0.0.1:0"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ONCERPC_T_UNSET_STORE"));
}

#[test]
fn a_store_password_from_the_environment_is_never_printed_even_in_an_error() {
    // An unreachable PostgreSQL whose URL (with its password) comes from the environment:
    // serve exits 2 with the reason, and neither stream carries the password.
    let dir = TempDir::new("secrets-pg");
    let path = config(&dir, "[store]\nurl = \"${ONCERPC_T_PG}\"\n");
    let url = format!("postgres://app:{PASSWORD}@127.0.0.1:1/db");
    let out = oncerpc(&["serve", "--config", &path, "--listen", "127.0.0.1:0"], &[("ONCERPC_T_PG", &url)]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!all.contains(PASSWORD), "{all}");
}

#[tokio::test]
async fn an_api_key_from_the_environment_authenticates() {
    let dir = TempDir::new("secrets-serve");
    let path = config(
        &dir,
        "[store]\nurl = \"memory://\"\n[[tenants]]\nname = \"acme\"\napi_keys = [\"${ONCERPC_T_API_KEY}\"]\n",
    );
    // Gateway::start inherits this process's environment: set the key for the child only.
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .args(["serve", "--config", &path, "--listen", "127.0.0.1:0"])
        .env("ONCERPC_T_API_KEY", API_KEY)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let addr = {
        use std::io::{BufRead, BufReader};
        let mut found = None;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(a) = line.split("listening on ").nth(1) {
                found = a.split_whitespace().next().map(str::to_owned);
                break;
            }
        }
        found.expect("the gateway listens")
    };
    let client = common::http_client();
    let body = r#"{"jsonrpc":"2.0","method":"rpc.discover","id":1}"#;
    let ok = client
        .post(format!("http://{addr}/rpc"))
        .header("X-API-Key", API_KEY)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let literal = client
        .post(format!("http://{addr}/rpc"))
        .header("X-API-Key", "${ONCERPC_T_API_KEY}")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(literal.status(), 401, "the reference itself is not a key");
    let _ = child.kill();
    let _ = child.wait();
}
