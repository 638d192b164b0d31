//! The ranges of the durations a configuration sets for the store, its methods and steps and
//! webhook tolerances: more than zero where zero can never work, and at most ten years, so
//! that no clock reading plus a configured duration can overflow (an `Instant` in a flow, a
//! millisecond timestamp in a store). `[limits]` is checked where it is defined.

use crate::config::{Config, ConfigError};

/// The longest duration any of these keys may set: ten years, in seconds.
pub const MAX_SECS: u64 = 10 * 365 * 86_400;
/// The same, in milliseconds.
pub const MAX_MS: u64 = MAX_SECS * 1_000;

/// `value` of `key` is within `min..=max` (`unit`: what the number counts).
fn range(key: &str, value: u64, min: u64, max: u64, unit: &str) -> Result<(), ConfigError> {
    if value < min {
        return Err(ConfigError::Invalid(format!("{key} must be greater than {}", min - 1)));
    }
    if value > max {
        return Err(ConfigError::Invalid(format!(
            "{key} ({value}) must be at most {max} {unit} (ten years)"
        )));
    }
    Ok(())
}

/// Every duration of `cfg` outside `[limits]` is within its range.
pub fn check(cfg: &Config) -> Result<(), ConfigError> {
    range("store.ttl_secs", cfg.store.ttl_secs, 1, MAX_SECS, "seconds")?;
    range("store.lease_ms", cfg.store.lease_ms, 0, MAX_MS, "ms")?;
    range("store.resume_interval_ms", cfg.store.resume_interval_ms, 1, MAX_MS, "ms")?;
    if let Some(ms) = cfg.store.op_timeout_ms {
        range("store.op_timeout_ms", ms, 1, MAX_MS, "ms")?;
    }
    for (i, m) in cfg.methods.iter().enumerate() {
        let key = |k: &str| format!("methods[{i}].{k}");
        if let Some(ms) = m.timeout_ms {
            range(&key("timeout_ms"), ms, 0, MAX_MS, "ms")?;
        }
        if let Some(secs) = m.verify.as_ref().and_then(|v| v.tolerance_secs) {
            range(&key("verify.tolerance_secs"), secs, 0, MAX_SECS, "seconds")?;
        }
        for (j, s) in m.steps.iter().enumerate() {
            let key = |k: &str| format!("methods[{i}].steps[{j}].{k}");
            if let Some(ms) = s.timeout_ms {
                range(&key("timeout_ms"), ms, 0, MAX_MS, "ms")?;
            }
            range(&key("retry.backoff_ms"), s.retry.backoff_ms, 0, MAX_MS, "ms")?;
            range(&key("retry.max_backoff_ms"), s.retry.max_backoff_ms, 0, MAX_MS, "ms")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(toml: &str) -> Result<Config, ConfigError> {
        Config::from_toml(toml)
    }

    const FLOW: &str = "[[methods]]\nname = \"m\"\nkind = \"command\"\n";

    /// Durations past ten years are refused at load with the key named: with them a clock
    /// reading plus the duration overflowed (an `Instant` panicked, a store timestamp wrapped).
    #[test]
    fn durations_past_ten_years_are_refused_with_the_key_named() {
        let huge = u64::MAX;
        let step = "  [[methods.steps]]\n  name = \"s\"\n  url = \"http://127.0.0.1:9/s\"\n";
        for (toml, key) in [
            (format!("[store]\nttl_secs = {huge}\n"), "store.ttl_secs"),
            (format!("[store]\nlease_ms = {huge}\nttl_secs = {MAX_SECS}\n"), "store.lease_ms"),
            (format!("[store]\nresume_interval_ms = {huge}\n"), "store.resume_interval_ms"),
            (
                format!(
                    "[store]\nlease_ms = {MAX_MS}\nttl_secs = {MAX_SECS}\n{FLOW}timeout_ms = {huge}\n{step}"
                ),
                "methods[0].timeout_ms",
            ),
            (format!("{FLOW}{step}  timeout_ms = {huge}\n"), "methods[0].steps[0].timeout_ms"),
            (
                format!(
                    "{FLOW}{step}  retry = {{ attempts = 2, backoff_ms = {huge}, max_backoff_ms = {huge} }}\n"
                ),
                "methods[0].steps[0].retry.backoff_ms",
            ),
        ] {
            let e = load(&toml).expect_err(&toml).to_string();
            assert!(e.contains(key) && e.contains("ten years"), "{key}: {e}");
        }
        let e = load("[store]\nttl_secs = 0\n").unwrap_err().to_string();
        assert!(e.contains("store.ttl_secs must be greater than 0"), "{e}");
        let e = load("[store]\nresume_interval_ms = 0\n").unwrap_err().to_string();
        assert!(e.contains("store.resume_interval_ms must be greater than 0"), "{e}");
        assert!(load(&format!("[store]\nttl_secs = {MAX_SECS}\n")).is_ok());
    }
}
