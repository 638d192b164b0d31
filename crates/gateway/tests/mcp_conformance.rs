//! The official MCP conformance suite (`@modelcontextprotocol/conformance`) against
//! `oncerpc serve`'s `/mcp`, once per protocol era on the same endpoint: the 0.1 line for the
//! session era, and the 0.2 line with `--spec-version 2026-07-28` for the stateless revision.
//! A fixtures config gives the tools the scenarios call, as flows on upstreams this test runs
//! (nothing of it ships in the gateway). Every scenario passes except those in
//! `conformance/expected-failures.yml` (0.1) and `conformance-2026/expected-failures.yml` (0.2),
//! each with its reason; the suite's baseline is strict, so a listed scenario (or check) that
//! passes fails too.
//!
//! `scripts/test.sh` installs each suite and a Node that runs it (the npm package `node`: the
//! suite needs Node ≥ 22) from `conformance/package-lock.json` into `target/node-conformance`
//! (`ONCERPC_CONFORMANCE_DIR`) and from `conformance-2026/package-lock.json` into
//! `target/node-conformance-2026` (`ONCERPC_CONFORMANCE_2026_DIR`). Without one its test skips
//! with a reason, or fails in CI.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::process::{Gateway, TempDir};
use common::upstream::Upstream;

/// The tools the scenarios call that oncerpc can offer: text results, an error result, flows
/// of three steps (logging, progress), and a JSON Schema 2020-12 input schema kept as written
/// (with the composition, conditional and `$anchor` keywords the 0.2 line looks for).
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
params_schema = {{ "$schema" = "https://json-schema.org/draft/2020-12/schema", type = "object", "$defs" = {{ address = {{ "$anchor" = "addressDef", type = "object", properties = {{ street = {{ type = "string" }}, city = {{ type = "string" }} }} }} }}, properties = {{ name = {{ type = "string" }}, address = {{ "$ref" = "#/$defs/address" }}, contactMethod = {{ type = "string", enum = ["phone", "email"] }}, phone = {{ type = "string" }}, email = {{ type = "string" }} }}, allOf = [{{ anyOf = [{{ required = ["phone"] }}, {{ required = ["email"] }}] }}], if = {{ properties = {{ contactMethod = {{ const = "phone" }} }}, required = ["contactMethod"] }}, then = {{ required = ["phone"] }}, else = {{ required = ["email"] }}, additionalProperties = false }}
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

/// The 2026-07-28 scenarios' diagnostic tools that oncerpc can offer (on top of [`fixtures`]):
/// a logging tool and a streaming one (oncerpc sends no log message without a `logLevel`, and
/// never a request of its own on a response), and a tool with an argument mirrored into an
/// `Mcp-Param-Region` header (`x-mcp-header`), which the door checks against the body.
fn fixtures_2026(ok: &Upstream, failing: &Upstream) -> String {
    format!(
        r##"{base}
[[methods]]
name = "test_logging_tool"
kind = "query"
description = "Answers with text (and sends no log message)"
  [[methods.steps]]
  name = "text"
  url = "{text}"

[[methods]]
name = "test_streaming_elicitation"
kind = "query"
description = "Answers with text (and asks the client nothing)"
  [[methods.steps]]
  name = "text"
  url = "{text}"

[[methods]]
name = "test_x_mcp_header"
kind = "query"
description = "Echoes its arguments; region travels in the Mcp-Param-Region header too"
params_schema = {{ type = "object", properties = {{ region = {{ type = "string", "x-mcp-header" = "Region" }} }} }}
  [[methods.steps]]
  name = "echo"
  url = "{echo}"
"##,
        base = fixtures(ok, failing),
        text = ok.url("text"),
        echo = ok.url("echo"),
    )
}

/// Run the suite in `dir` against a gateway with `config`; its summary (asserted successful).
async fn run_suite(dir: PathBuf, config: &str, baseline: &str, extra_args: &[&str]) -> String {
    let bin = dir.join("node_modules/.bin");
    let tmp = TempDir::new("mcp-conformance");
    let gw = Gateway::with_config(&tmp, config);
    let url = gw.url("/mcp");
    let baseline = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(baseline);
    let results = tmp.file("results");
    let extra: Vec<String> = extra_args.iter().map(|a| a.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        Command::new(bin.join("conformance"))
            .args(["server", "--suite", "all", "--url", &url])
            .args(&extra)
            .arg("--expected-failures")
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
    let summary = stdout.rsplit_once("=== SUMMARY ===").map_or(&*stdout, |(_, s)| s).to_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{summary}");
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suite_passes_but_for_the_expected_failures() {
    let Some(dir) = common::mcp_clients::node_dir() else { return };
    let ok = Upstream::start().await;
    let failing = Upstream::start().await;
    failing.set_fail(true);
    let summary =
        run_suite(dir, &fixtures(&ok, &failing), "tests/conformance/expected-failures.yml", &[]).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suite_for_2026_07_28_passes_but_for_the_expected_failures() {
    let Some(dir) = common::mcp_clients::node_dir_2026() else { return };
    let ok = Upstream::start().await;
    let failing = Upstream::start().await;
    failing.set_fail(true);
    let summary = run_suite(
        dir,
        &fixtures_2026(&ok, &failing),
        "tests/conformance-2026/expected-failures.yml",
        &["--spec-version", "2026-07-28"],
    )
    .await;
    // server-stateless fails only its two checks that need a client capability to be missing
    // (baselined: oncerpc asks clients for nothing).
    let stateless =
        summary.lines().find(|l| l.contains(" server-stateless: ")).expect("server-stateless ran");
    assert!(stateless.ends_with(" 2 failed"), "{summary}");
    for passing in [
        "tools-list",
        "tools-call-simple-text",
        "tools-call-error",
        "json-schema-2020-12",
        "dns-rebinding-protection",
        "http-header-validation",
        "http-custom-header-server-validation",
        "tools-call-with-progress",
    ] {
        assert!(summary.lines().any(|l| l.contains(&format!("✓ {passing}:"))), "{passing} passes: {summary}");
    }
}
