//! What the MCP tasks tests share: a config with a three-step command flow and a one-step
//! query, the tenants' API keys, and waiting for an upstream step.
#![allow(dead_code)]

use std::time::Duration;

use super::process::{TempDir, unique};
use super::upstream::Upstream;

pub const KEY_A: &str = "tenant-a-secret";
pub const KEY_B: &str = "tenant-b-secret";
/// The flow's steps, in order.
pub const STEPS: [&str; 3] = ["reserve", "pack", "send"];

/// The store `store_url`, the command flow `method` (three steps on `up`), the query `look`
/// and, with `tenants`, the tenants `a` and `b` (without: the default tenant, as `oncerpc
/// mcp` serves it).
pub fn config(dir: &TempDir, store_url: &str, up: &Upstream, method: &str, tenants: bool) -> String {
    let tenants = if tenants {
        format!(
            r#"
[[tenants]]
name = "a"
api_keys = ["{KEY_A}"]

[[tenants]]
name = "b"
api_keys = ["{KEY_B}"]
"#
        )
    } else {
        String::new()
    };
    let steps: String = STEPS
        .iter()
        .map(|s| format!("  [[methods.steps]]\n  name = \"{s}\"\n  url = \"{}\"\n", up.url(s)))
        .collect();
    let text = format!(
        r#"
demo = false

[store]
url = "{store_url}"
lease_ms = 2500
resume_interval_ms = 200
redis_prefix = "{prefix}"
{tenants}
[[methods]]
name = "{method}"
kind = "command"
timeout_ms = 1500
{steps}
[[methods]]
name = "look"
kind = "query"
timeout_ms = 1500
  [[methods.steps]]
  name = "look"
  url = "{look}"
"#,
        prefix = unique("oncerpc-tasks"),
        look = up.url("look"),
    );
    let path = dir.file(&format!("{}.toml", unique("tasks")));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Until `step` was called `n` times.
pub async fn wait_for(up: &Upstream, step: &str, n: usize) {
    for _ in 0..2000 {
        if up.count(step) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{step} was not called {n} times: {:?}", up.counts());
}

/// `GET /v2/events/{id}` on `gw` as `api_key`: the event as the events API shows it.
pub async fn event(gw: &super::process::Gateway, api_key: &str, id: &str) -> serde_json::Value {
    let resp = super::http_client().get(gw.url(&format!("/v2/events/{id}"))).bearer_auth(api_key).send();
    resp.await.unwrap().json().await.unwrap()
}
