//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, the 0.1 line: the
//! session era) against `oncerpc serve`'s `/mcp`, with a fixtures config: the tools the
//! scenarios call, as flows on upstreams this test runs (nothing of it ships in the gateway).
//! Every scenario passes except those in `conformance/expected-failures.yml`, each with its
//! reason; the suite's baseline is strict, so a listed scenario that passes fails too.
//!
//! `scripts/test.sh` installs the suite and a Node that runs it (the npm package `node`: the
//! suite needs Node ≥ 22) from `conformance/package-lock.json` into `target/node-conformance`
//! and sets `ONCERPC_CONFORMANCE_DIR`. Without it the test skips with a reason, or fails in CI.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::process::{Gateway, TempDir};
use common::upstream::Upstream;

/// The tools the scenarios call that oncerpc can offer: text results, an error result, and a
/// JSON Schema 2020-12 input schema kept as written.
fn fixtures(ok: &Upstream, failing: &Upstream) -> String {
    format!(
        r##"
demo = false

[store]
url = "memory://"

[[methods]]
name = "test_simple_text"
kind = "query"
description = "Answers with text"
  [[methods.steps]]
  name = "text"
  url = "{text}"

[[methods]]
name = "test_error_handling"
kind = "query"
description = "Fails: its upstream answers 500"
  [[methods.steps]]
  name = "fail"
  url = "{fail}"

{logging}
{progress}
[[methods]]
name = "json_schema_2020_12_tool"
kind = "query"
description = "Tool with JSON Schema 2020-12 features"
params_schema = {{ "$schema" = "https://json-schema.org/draft/2020-12/schema", type = "object", "$defs" = {{ address = {{ type = "object", properties = {{ street = {{ type = "string" }}, city = {{ type = "string" }} }} }} }}, properties = {{ name = {{ type = "string" }}, address = {{ "$ref" = "#/$defs/address" }} }}, additionalProperties = false }}
  [[methods.steps]]
  name = "echo"
  url = "{echo}"
"##,
        text = ok.url("text"),
        fail = failing.url("fail"),
        echo = ok.url("echo"),
        logging = three_steps("test_tool_with_logging", ok),
        progress = three_steps("test_tool_with_progress", ok),
    )
}

/// A flow of three steps: each finished step is a log message and a progress notification.
fn three_steps(name: &str, ok: &Upstream) -> String {
    let mut flow =
        format!("[[methods]]\nname = \"{name}\"\nkind = \"query\"\ndescription = \"Three steps\"\n");
    for step in ["first", "second", "third"] {
        flow += &format!("  [[methods.steps]]\n  name = \"{step}\"\n  url = \"{}\"\n", ok.url(step));
    }
    flow
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suite_passes_but_for_the_expected_failures() {
    let Some(dir) = common::mcp_clients::node_dir() else { return };
    let bin = dir.join("node_modules/.bin");
    let ok = Upstream::start().await;
    let failing = Upstream::start().await;
    failing.set_fail(true);
    let tmp = TempDir::new("mcp-conformance");
    let gw = Gateway::with_config(&tmp, &fixtures(&ok, &failing));
    let url = gw.url("/mcp");
    let baseline = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/expected-failures.yml");
    let results = tmp.file("results");
    let out = tokio::task::spawn_blocking(move || {
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        Command::new(bin.join("conformance"))
            .args(["server", "--suite", "all", "--url", &url, "--expected-failures"])
            .arg(&baseline)
            .arg("-o")
            .arg(&results)
            .env("PATH", path)
            .output()
            .expect("the conformance CLI runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.rsplit_once("=== SUMMARY ===").map_or(&*stdout, |(_, s)| s);
    assert!(out.status.success(), "{summary}\n{}", String::from_utf8_lossy(&out.stderr));
    for passing in [
        "server-initialize",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-error",
        "json-schema-2020-12",
        "tools-call-with-logging",
        "tools-call-with-progress",
    ] {
        assert!(summary.lines().any(|l| l.contains(&format!("✓ {passing}:"))), "{passing} passes: {summary}");
    }
}
