//! The settings a reload cannot change (docs/CONFIG.md, "Reloading"): they belong to the
//! listener, the store, the process-wide pools or a part that is built once. A reload whose
//! file changes one keeps the running value — never half of a change — and names it.

use serde::Serialize;

use crate::Config;

/// The restart-only settings `new` changes, set back to `old`'s values; their names.
pub(crate) fn keep(old: &Config, new: &mut Config) -> Vec<String> {
    let mut kept = Vec::new();
    macro_rules! keep_running {
        ($name:literal, $($field:tt)+) => {
            if !same(&old.$($field)+, &new.$($field)+) {
                kept.push($name.to_owned());
                new.$($field)+ = old.$($field)+.clone();
            }
        };
    }
    keep_running!("mode", mode);
    keep_running!("listen", listen);
    keep_running!("[store]", store);
    keep_running!("[tls] (the files' paths: their contents reload)", tls);
    keep_running!("[telemetry]", telemetry);
    keep_running!("mcp.enabled", mcp.enabled);
    keep_running!("mcp.session_secret", mcp.session_secret);
    keep_running!("mcp.session_idle_secs", mcp.session_idle_secs);
    keep_running!("limits.max_in_flight", limits.max_in_flight);
    keep_running!("limits.max_background", limits.max_background);
    keep_running!("limits.max_connections", limits.max_connections);
    keep_running!("limits.header_timeout_ms", limits.header_timeout_ms);
    keep_running!("limits.idle_timeout_ms", limits.idle_timeout_ms);
    keep_running!("limits.shutdown_grace_ms", limits.shutdown_grace_ms);
    // A tenant's share of the background budget is set when the budget is made.
    for t in &mut new.tenants {
        let before = old.tenants.iter().find(|o| o.name == t.name).and_then(|o| o.max_background);
        if t.max_background != before {
            kept.push(format!("tenants.{}.max_background", t.name));
            t.max_background = before;
        }
    }
    kept
}

/// The top-level sections (and settings) whose values differ: what a reload changed. Names
/// only, never values.
pub(crate) fn changed(old: &Config, new: &Config) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return Vec::new();
    };
    let mut names: Vec<String> =
        a.keys().chain(b.keys()).filter(|k| a.get(*k) != b.get(*k)).cloned().collect();
    names.sort();
    names.dedup();
    names
}

fn same<T: Serialize>(a: &T, b: &T) -> bool {
    serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml: &str) -> Config {
        Config::from_toml_with_env(toml, &|_| None).expect("valid")
    }

    #[test]
    fn restart_only_settings_keep_their_running_values_and_are_named() {
        let old = config("listen = \"127.0.0.1:1\"\n[limits]\nmax_body_bytes = 100\n");
        let mut new = config(
            "listen = \"127.0.0.1:2\"\n[limits]\nmax_body_bytes = 200\nmax_in_flight = 7\n[store]\nurl = \"memory://\"\n",
        );
        let kept = keep(&old, &mut new);
        assert_eq!(kept, ["listen", "[store]", "limits.max_in_flight"]);
        assert_eq!(new.listen, "127.0.0.1:1");
        assert_eq!(new.store.url, old.store.url);
        assert_eq!(new.limits.max_in_flight, old.limits.max_in_flight);
        assert_eq!(new.limits.max_body_bytes, 200, "a reloadable limit changes");
        assert_eq!(changed(&old, &new), ["limits"]);
        assert!(keep(&old, &mut old.clone()).is_empty());
    }
}
