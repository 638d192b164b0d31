//! The shipped examples run as the README and the guides (docs/guide/) say: every
//! `examples/*.toml` passes `check-config`, `oncerpc serve --config examples/gateway.toml`
//! starts and answers with the example's key,
//! and the command line's flags override a file before its own rules judge it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::process::{Gateway, TempDir};

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

/// The `${NAME}` variables a config file reads, each set to a value as a user would.
fn env_of(text: &str) -> Vec<(String, String)> {
    text.split("${")
        .skip(1)
        .filter_map(|rest| rest.split_once('}'))
        .map(|(name, _)| {
            let value = match name {
                // A Standard Webhooks secret has a form of its own: the webhooks guide's value.
                "PAYMENTS_WEBHOOK_SECRET" => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(),
                _ => format!("example-value-of-{}", name.to_lowercase()),
            };
            (name.to_owned(), value)
        })
        .collect()
}

#[test]
fn every_example_config_passes_check_config() {
    let files = examples();
    assert!(files.len() >= 2, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
            .arg("check-config")
            .arg(&file)
            .envs(env_of(&text))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_example_serves_as_the_guide_says() {
    let dir = TempDir::new("example-gateway");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway.toml");
    let store = format!("sqlite://{}", dir.file("gateway.db").display());
    let gw = Gateway::start(&["--config", &example.display().to_string(), "--store", &store]);
    let http = gw.http();
    assert_eq!(http.get("/healthz", &[]).await.status, 200);
    let unknown = http.get("/v2/events/evt_00000000000000000000000000000000", &[]).await;
    assert_eq!(unknown.status, 401, "the example has a tenant: {}", unknown.body);
    for key in ["acme-key-0123456789", "test"] {
        let mine = http.get("/v2/events/evt_00000000000000000000000000000000", &[("X-API-Key", key)]).await;
        assert_eq!(mine.status, 404, "{key}: the example's key is the tenant's: {}", mine.body);
    }
}

/// `--mode dev` on a file that production mode refuses (a short key): the flag applies first,
/// as documented, and the gateway starts; without it the file is refused, naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_override_the_file_before_it_is_validated() {
    let dir = TempDir::new("example-flags");
    let path = dir.file("prod.toml");
    let store = format!("sqlite://{}", dir.file("o.db").display());
    std::fs::write(
        &path,
        "mode = \"production\"\n[[tenants]]\nname = \"acme\"\napi_keys = [\"short-key\"]\n",
    )
    .unwrap();
    let path = path.display().to_string();
    let refused = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .args(["serve", "--listen", "127.0.0.1:0", "--store", &store, "--config", &path])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("tenants.acme.api_keys: a plaintext key must have at least 16 characters"),
        "{said}"
    );

    let gw = Gateway::start(&["--config", &path, "--store", &store, "--mode", "dev"]);
    let answer =
        gw.http().get("/v2/events/evt_00000000000000000000000000000000", &[("X-API-Key", "short-key")]).await;
    assert_eq!(answer.status, 404, "started in dev mode: {}", answer.body);
}

/// The fenced `lang` block of `file` (a path from the repository's root) that contains `marker`.
fn doc_block(file: &str, lang: &str, marker: &str) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    let fence = format!("```{lang}\n");
    text.split(fence.as_str())
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap_or_default())
        .find(|block| block.contains(marker))
        .unwrap_or_else(|| panic!("{file} has no {lang} block with {marker:?}"))
        .to_owned()
}

/// The output a shell block shows for its last command: its `# ` comment lines after the last
/// command line, each without the `# ` and any `<- …` remark.
fn shown_output(block: &str) -> String {
    let lines: Vec<&str> = block.lines().collect();
    let last_command = lines.iter().rposition(|l| !l.starts_with('#') && !l.trim().is_empty()).unwrap_or(0);
    lines[last_command + 1..]
        .iter()
        .filter_map(|l| l.strip_prefix("# "))
        .map(|l| l.split("  <-").next().unwrap_or(l).trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs a shell block against the gateway at `addr`, as a reader would paste it; its stdout.
fn run_shell(block: &str, addr: &str) -> String {
    let script = block.replace("localhost:8080", addr);
    let out = Command::new("bash").args(["-euo", "pipefail", "-c", &script]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    said
}

/// README "A five-minute tour", as a reader runs it in order against the embedded default: the
/// keyed curl calls, then the MCP shell block (a session opened, its id read, a keyed tool
/// call), whose answer must be exactly the one the README shows, then the client's
/// `oncerpc call` block; and the guide's Python SDK block (docs/guide/mcp.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_mcp_examples_run_as_shown() {
    let dir = TempDir::new("example-readme-mcp");
    let store = format!("sqlite://{}", dir.file("oncerpc.db").display());
    let gw = Gateway::start(&["--store", &store]);
    let addr = gw.addr.to_string();

    let keyed = doc_block("README.md", "sh", "\"idempotency_key\":\"tour-1\"");
    let said = run_shell(&keyed, &addr);
    assert!(said.trim_end().ends_with(&shown_output(&keyed)), "as the README shows: {said}");

    let mcp = doc_block("README.md", "sh", "SESSION=$(");
    let said = run_shell(&mcp, &addr);
    assert_eq!(said.trim_end(), shown_output(&mcp), "as the README shows");
    assert!(said.contains(r#""io.oncerpc/idempotency-status":"new""#), "{said}");

    // The client: `oncerpc call` (this gateway's URL given; stderr after stdout, as a
    // terminal shows them), every shown line printed, `…` standing for the correlation id.
    let client = doc_block("README.md", "sh", "oncerpc call counter.increment");
    let bin = env!("CARGO_BIN_EXE_oncerpc");
    let script = format!("oncerpc() {{ \"{bin}\" \"$1\" --url http://{addr} \"${{@:2}}\" 2>&1; }}\n{client}");
    let said = run_shell(&script, &addr);
    let printed: Vec<&str> = said.lines().collect();
    let shown: Vec<&str> = client
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .map(|l| l.split("  <-").next().unwrap_or(l).trim_end())
        .collect();
    assert_eq!(printed.len(), shown.len(), "{said}");
    for (p, s) in printed.iter().zip(&shown) {
        let ok = match s.split_once('…') {
            Some((start, end)) => p.starts_with(start) && p.ends_with(end),
            None => p == s,
        };
        assert!(ok, "shown {s:?}, printed {p:?}");
    }

    let Some(python) = common::mcp_clients::python_sdk() else { return };
    let script = doc_block("docs/guide/mcp.md", "python", "ClientSession").replace("127.0.0.1:8080", &addr);
    let out = Command::new(python).args(["-c", &script]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    let new = said.find("'io.oncerpc/idempotency-status': 'new'");
    let duplicate = said.find("'io.oncerpc/idempotency-status': 'duplicate'");
    assert!(new.is_some() && duplicate > new, "first new, then the stored result: {said}");
}
