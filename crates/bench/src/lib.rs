//! # oncerpc-bench (library part)
//!
//! The pieces of the load benchmark that are worth testing on their own: the request bodies
//! every server is sent and the answers they must give ([`bodies`]), the wrk Lua scripts
//! ([`lua`]), the parser of wrk's `--latency` output ([`wrk`]), the Prometheus text reader used
//! to cross-check what wrk counted ([`prom`]), `/proc` readers ([`procfs`]) and [`median`].
//!
//! The harness is `src/main.rs` and its modules (binary `oncerpc-bench`); the servers compared
//! with oncerpc are the binaries `bench-jsonrpsee` and `bench-floor`; `bench-upstream` is the
//! upstream of the sync-flow scenario.

/// Request bodies and the answers they must get.
pub mod bodies {
    /// Calls in the batch scenario (oncerpc's default `batch.max_size`).
    pub const BATCH_SIZE: usize = 50;

    /// The answer to [`single`]: what the floor server sends, byte for byte.
    pub const SINGLE_ANSWER: &str = r#"{"jsonrpc":"2.0","result":3,"id":1}"#;

    /// What the floor answers to a body it cannot parse.
    pub const PARSE_ERROR: &str =
        r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#;

    /// The flows-door body of the sync-flow scenario.
    pub const FLOW_BODY: &str = r#"{"sku":"A-1","qty":1}"#;

    /// `method` with params `[1,2]`, id 1.
    pub fn single(method: &str) -> String {
        format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":[1,2],"id":1}}"#)
    }

    /// [`BATCH_SIZE`] calls of `method` `[1,2]`, ids 1..=50.
    pub fn batch(method: &str) -> String {
        let calls: Vec<String> = (1..=BATCH_SIZE)
            .map(|id| format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":[1,2],"id":{id}}}"#))
            .collect();
        format!("[{}]", calls.join(","))
    }

    /// The answer to [`batch`]: results 3, ids 1..=50 in order (the floor's fixed batch answer).
    pub fn batch_answer() -> String {
        let answers: Vec<String> =
            (1..=BATCH_SIZE).map(|id| format!(r#"{{"jsonrpc":"2.0","result":3,"id":{id}}}"#)).collect();
        format!("[{}]", answers.join(","))
    }

    /// `counter.increment` by 1 with idempotency key `key`.
    pub fn increment(key: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","method":"counter.increment","params":{{"by":1,"idempotency_key":"{key}"}},"id":1}}"#
        )
    }

    /// The two halves of [`increment`] around the key (for the Lua scripts).
    pub fn increment_halves() -> (String, String) {
        halves(&increment("\u{1}"))
    }

    fn halves(whole: &str) -> (String, String) {
        let (a, b) = whole.split_once('\u{1}').expect("marker present");
        (a.to_owned(), b.to_owned())
    }

    /// The MCP revision of the stateless rows: no session, `_meta` and headers on every request.
    pub const MCP_STATELESS: &str = "2026-07-28";
    /// The revision the session-era row negotiates with `initialize`.
    pub const MCP_SESSION: &str = "2025-11-25";

    /// `add` `{a:1,b:2}` on `/rpc` (oncerpc's demo `add`, the same tool MCP calls).
    pub const ADD_RPC: &str = r#"{"jsonrpc":"2.0","method":"add","params":{"a":1,"b":2},"id":1}"#;
    /// The answer to [`ADD_RPC`].
    pub const ADD_RPC_ANSWER: &str = r#"{"jsonrpc":"2.0","result":3,"id":1}"#;
    /// `tools/call` `add`'s arguments.
    pub const ADD_ARGS: &str = r#"{"a":1,"b":2}"#;

    /// `tools/call` of `tool` with `arguments` (JSON), id 1; `stateless`: with the
    /// `2026-07-28` request `_meta` (protocol version and client capabilities).
    pub fn mcp_call(tool: &str, arguments: &str, stateless: bool) -> String {
        let meta = if stateless {
            format!(
                r#","_meta":{{"io.modelcontextprotocol/protocolVersion":"{MCP_STATELESS}","io.modelcontextprotocol/clientCapabilities":{{}}}}"#
            )
        } else {
            String::new()
        };
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}{meta}}}}}"#
        )
    }

    /// `tools/call` `counter_increment` (the method `counter.increment`) by 1 with
    /// `arguments.idempotency_key` = `key`.
    pub fn mcp_increment(key: &str, stateless: bool) -> String {
        mcp_call("counter_increment", &format!(r#"{{"by":1,"idempotency_key":"{key}"}}"#), stateless)
    }

    /// The two halves of [`mcp_increment`] around the key.
    pub fn mcp_increment_halves(stateless: bool) -> (String, String) {
        halves(&mcp_increment("\u{1}", stateless))
    }

    /// The headers of an MCP `tools/call` of `tool` over Streamable HTTP: `Accept` (both types,
    /// as the transport requires), and the revision's headers: for `2026-07-28` the ones that
    /// mirror the body (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`), in the session era
    /// `MCP-Protocol-Version` and the session's id.
    pub fn mcp_headers(tool: &str, session: Option<&str>) -> Vec<(String, String)> {
        let mut h = vec![("Accept".to_owned(), "application/json, text/event-stream".to_owned())];
        match session {
            None => {
                h.push(("MCP-Protocol-Version".into(), MCP_STATELESS.into()));
                h.push(("Mcp-Method".into(), "tools/call".into()));
                h.push(("Mcp-Name".into(), tool.into()));
            }
            Some(id) => {
                h.push(("MCP-Protocol-Version".into(), MCP_SESSION.into()));
                h.push(("Mcp-Session-Id".into(), id.into()));
            }
        }
        h
    }

    /// The session era's `initialize`.
    pub fn mcp_initialize() -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{MCP_SESSION}","capabilities":{{}},"clientInfo":{{"name":"oncerpc-bench","version":"1"}}}}}}"#
        )
    }

    /// Whether `v` is a JSON-RPC answer (id 1) carrying a successful tool result whose text is
    /// `text` (and whose `structuredContent`, when there is one, is `{"result": text}` or
    /// equal to `text`'s JSON); `Err` says what is wrong.
    pub fn judge_tool_result(v: &serde_json::Value, text: Option<&str>) -> Result<(), String> {
        if v["jsonrpc"] != "2.0" || v["id"] != 1 || v.get("error").is_some() {
            return Err("expected a JSON-RPC result with id 1".into());
        }
        let r = &v["result"];
        if r["isError"] != false {
            return Err(format!("isError is {} (expected false)", r["isError"]));
        }
        let got = r["content"][0]["text"].as_str();
        if r["content"][0]["type"] != "text" || got.is_none() {
            return Err("expected a text content item".into());
        }
        if let Some(want) = text {
            if got != Some(want) {
                return Err(format!("content text {got:?} (expected {want:?})"));
            }
            if let Some(sc) = r.get("structuredContent") {
                let want_v: serde_json::Value = serde_json::from_str(want).unwrap_or_default();
                if sc["result"] != want_v && *sc != want_v {
                    return Err(format!("structuredContent {sc} (expected {{\"result\":{want}}})"));
                }
            }
        }
        Ok(())
    }
}

/// wrk Lua scripts. Every script sends `POST` with `Content-Type: application/json`; the URL
/// (and so the path) is given on wrk's command line, the key prefix as the script argument
/// (`wrk … URL -- PREFIX`).
pub mod lua {
    use std::fmt::Write;

    /// A Lua long string holding `s` verbatim.
    fn long_string(s: &str) -> String {
        let mut level = 1;
        while s.contains(&format!("]{}]", "=".repeat(level))) {
            level += 1;
        }
        let eq = "=".repeat(level);
        format!("[{eq}[{s}]{eq}]")
    }

    fn header(comment: &str) -> String {
        format!(
            "-- generated by oncerpc-bench: {comment}\n\
             wrk.method = \"POST\"\n\
             wrk.headers[\"Content-Type\"] = \"application/json\"\n"
        )
    }

    /// `script` with `headers` set on every request (after its own header lines, before any
    /// function: wrk reads `wrk.headers` when it builds a request).
    pub fn with_headers(script: &str, headers: &[(String, String)]) -> String {
        let cut = script
            .find("\nwrk.headers[\"Content-Type\"]")
            .and_then(|i| script[i + 1..].find('\n').map(|j| i + 1 + j + 1));
        let cut = cut.unwrap_or(0);
        let mut lines = String::new();
        for (k, v) in headers {
            // Header names and values are plain ASCII here: a Rust debug string is a Lua string.
            writeln!(lines, "wrk.headers[{k:?}] = {v:?}").expect("write to string");
        }
        format!("{}{lines}{}", &script[..cut], &script[cut..])
    }

    /// Threads get ids 1, 2, … (`tid`), for per-thread key prefixes.
    const THREAD_IDS: &str = "local threads = 0\n\
        function setup(thread)\n  threads = threads + 1\n  thread:set(\"tid\", threads)\nend\n";

    /// The same body on every request: wrk builds the request once (no Lua per request).
    pub fn fixed(comment: &str, body: &str) -> String {
        let mut s = header(comment);
        writeln!(s, "wrk.body = {}", long_string(body)).expect("write to string");
        s
    }

    /// `head .. KEY .. tail` with a new key per request: `PREFIX-TID-N`, N = 1, 2, …
    pub fn new_key_body(comment: &str, head: &str, tail: &str) -> String {
        let mut s = header(comment);
        s.push_str(THREAD_IDS);
        write!(
            s,
            "local head = {}\nlocal tail = {}\nlocal prefix = \"\"\nlocal n = 0\n\
             function init(args)\n  prefix = args[1] .. \"-\" .. tid .. \"-\"\nend\n\
             function request()\n  n = n + 1\n  return wrk.format(nil, nil, nil, head .. prefix .. n .. tail)\nend\n",
            long_string(head),
            long_string(tail)
        )
        .expect("write to string");
        s
    }

    /// `head .. KEY .. tail` cycling through the keys `PREFIX-0` … `PREFIX-(keys-1)`; thread
    /// `t` starts `(t-1)·keys/threads` further on.
    pub fn cycled_key_body(comment: &str, head: &str, tail: &str, keys: u64) -> String {
        let mut s = header(comment);
        s.push_str(THREAD_IDS);
        write!(
            s,
            "local head = {}\nlocal tail = {}\nlocal prefix = \"\"\nlocal keys = {keys}\nlocal i = 0\n\
             function init(args)\n  prefix = args[1] .. \"-\"\n  i = ((tid - 1) * math.floor(keys / 2)) % keys\nend\n\
             function request()\n  i = (i + 1) % keys\n  return wrk.format(nil, nil, nil, head .. prefix .. i .. tail)\nend\n",
            long_string(head),
            long_string(tail)
        )
        .expect("write to string");
        s
    }

    /// A fixed body, with header `name` set to a new key per request (`PREFIX-TID-N`).
    pub fn new_key_header(comment: &str, name: &str, body: &str) -> String {
        let mut s = fixed(comment, body);
        s.push_str(THREAD_IDS);
        write!(
            s,
            "local prefix = \"\"\nlocal n = 0\n\
             function init(args)\n  prefix = args[1] .. \"-\" .. tid .. \"-\"\nend\n\
             function request()\n  n = n + 1\n  wrk.headers[\"{name}\"] = prefix .. n\n  return wrk.format()\nend\n"
        )
        .expect("write to string");
        s
    }

    /// A fixed body, with header `name` cycling through `PREFIX-0` … `PREFIX-(keys-1)`.
    pub fn cycled_key_header(comment: &str, name: &str, body: &str, keys: u64) -> String {
        let mut s = fixed(comment, body);
        s.push_str(THREAD_IDS);
        write!(
            s,
            "local prefix = \"\"\nlocal keys = {keys}\nlocal i = 0\n\
             function init(args)\n  prefix = args[1] .. \"-\"\n  i = ((tid - 1) * math.floor(keys / 2)) % keys\nend\n\
             function request()\n  i = (i + 1) % keys\n  wrk.headers[\"{name}\"] = prefix .. i\n  return wrk.format()\nend\n"
        )
        .expect("write to string");
        s
    }
}

/// wrk's report (`wrk --latency`).
pub mod wrk {
    use serde::Serialize;

    /// What one wrk run reports.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
    pub struct WrkStats {
        /// Completed requests (any status).
        pub requests: u64,
        /// Seconds wrk ran.
        pub duration_s: f64,
        /// `Requests/sec:`.
        pub req_per_s: f64,
        pub p50_ms: f64,
        pub p75_ms: f64,
        pub p90_ms: f64,
        pub p99_ms: f64,
        /// `Non-2xx or 3xx responses:` (answers with a status ≥ 400).
        pub non_2xx: u64,
        /// `Socket errors:` connect, read, write, timeout.
        pub connect_errors: u64,
        pub read_errors: u64,
        pub write_errors: u64,
        pub timeouts: u64,
    }

    impl WrkStats {
        pub fn socket_errors(&self) -> u64 {
            self.connect_errors + self.read_errors + self.write_errors + self.timeouts
        }
    }

    /// `1.23ms`, `456.78us`, `1.02s`, `2.00m` → milliseconds.
    pub fn duration_ms(s: &str) -> Option<f64> {
        let s = s.trim();
        let split = s.find(|c: char| c.is_ascii_alphabetic())?;
        let (num, unit) = s.split_at(split);
        let n: f64 = num.parse().ok()?;
        let factor = match unit {
            "us" => 0.001,
            "ms" => 1.0,
            "s" => 1000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            _ => return None,
        };
        Some(n * factor)
    }

    /// `10.00s` (the run length on the `requests in` line) → seconds.
    fn seconds(s: &str) -> Option<f64> {
        duration_ms(s.trim_end_matches(',')).map(|ms| ms / 1000.0)
    }

    /// Parse wrk's standard output (run with `--latency`).
    pub fn parse(out: &str) -> Result<WrkStats, String> {
        let mut st = WrkStats::default();
        let mut seen_requests = false;
        let mut seen_rps = false;
        let mut in_distribution = false;
        for line in out.lines() {
            let t = line.trim();
            if t.starts_with("Latency Distribution") {
                in_distribution = true;
                continue;
            }
            if in_distribution {
                if let Some((pct, value)) = t.split_once('%') {
                    let ms = duration_ms(value);
                    match (pct.trim(), ms) {
                        ("50", Some(v)) => st.p50_ms = v,
                        ("75", Some(v)) => st.p75_ms = v,
                        ("90", Some(v)) => st.p90_ms = v,
                        ("99", Some(v)) => st.p99_ms = v,
                        _ => in_distribution = false,
                    }
                    continue;
                }
                in_distribution = false;
            }
            if let Some((n, rest)) = t.split_once(" requests in ") {
                st.requests = n.trim().parse().map_err(|e| format!("requests count {n:?}: {e}"))?;
                let d = rest.split_whitespace().next().unwrap_or_default();
                st.duration_s = seconds(d).ok_or_else(|| format!("run length {d:?}"))?;
                seen_requests = true;
            } else if let Some(v) = t.strip_prefix("Requests/sec:") {
                st.req_per_s = v.trim().parse().map_err(|e| format!("Requests/sec {v:?}: {e}"))?;
                seen_rps = true;
            } else if let Some(v) = t.strip_prefix("Non-2xx or 3xx responses:") {
                st.non_2xx = v.trim().parse().map_err(|e| format!("Non-2xx {v:?}: {e}"))?;
            } else if let Some(v) = t.strip_prefix("Socket errors:") {
                for part in v.split(',') {
                    let mut it = part.split_whitespace();
                    let (Some(name), Some(n)) = (it.next(), it.next()) else { continue };
                    let n: u64 = n.parse().map_err(|e| format!("socket errors {part:?}: {e}"))?;
                    match name {
                        "connect" => st.connect_errors = n,
                        "read" => st.read_errors = n,
                        "write" => st.write_errors = n,
                        "timeout" => st.timeouts = n,
                        _ => {}
                    }
                }
            }
        }
        if !seen_requests || !seen_rps {
            return Err("no `requests in` or `Requests/sec:` line in wrk's output".into());
        }
        if st.p50_ms == 0.0 && st.requests > 0 {
            return Err("no latency distribution in wrk's output (run with --latency)".into());
        }
        Ok(st)
    }
}

/// The Prometheus text format, as far as the harness reads it.
pub mod prom {
    /// The labels of a sample line `name{a="x",b="y"} value`, and its value; `None` for
    /// comments, other metrics and unparsable lines.
    pub fn sample<'a>(line: &'a str, name: &str) -> Option<(Vec<(&'a str, &'a str)>, f64)> {
        let rest = line.strip_prefix(name)?;
        let (labels, value) = if let Some(r) = rest.strip_prefix('{') {
            let (l, v) = r.split_once('}')?;
            (l, v)
        } else if rest.starts_with(' ') {
            ("", rest)
        } else {
            return None;
        };
        let value: f64 = value.split_whitespace().next()?.parse().ok()?;
        let mut out = Vec::new();
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=')?;
            out.push((k.trim(), v.trim().trim_matches('"')));
        }
        Some((out, value))
    }

    /// The sum of the samples of `name` whose labels satisfy `keep`.
    pub fn sum(text: &str, name: &str, keep: impl Fn(&[(&str, &str)]) -> bool) -> f64 {
        text.lines().filter_map(|l| sample(l, name)).filter(|(l, _)| keep(l)).map(|(_, v)| v).sum()
    }

    /// The sum of the samples of `name` that carry every label of `want`.
    pub fn value(text: &str, name: &str, want: &[(&str, &str)]) -> f64 {
        sum(text, name, |labels| want.iter().all(|w| labels.contains(w)))
    }
}

/// `/proc` readers.
pub mod procfs {
    /// `VmHWM` (peak resident set) of a `/proc/PID/status` text, in KiB.
    pub fn vm_hwm_kib(status: &str) -> Option<u64> {
        field_kib(status, "VmHWM:")
    }

    /// `VmRSS` (resident set now) of a `/proc/PID/status` text, in KiB.
    pub fn vm_rss_kib(status: &str) -> Option<u64> {
        field_kib(status, "VmRSS:")
    }

    fn field_kib(status: &str, field: &str) -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(field))?;
        line[field.len()..].split_whitespace().next()?.parse().ok()
    }

    /// utime + stime (clock ticks) of a `/proc/PID/stat` text.
    pub fn cpu_ticks(stat: &str) -> Option<u64> {
        // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    }

    /// (busy, total) clock ticks of all CPUs from the first line of `/proc/stat`; idle and
    /// iowait are not busy.
    pub fn machine_ticks(stat: &str) -> Option<(u64, u64)> {
        let line = stat.lines().next()?.strip_prefix("cpu ")?;
        let v: Vec<u64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal (guest fields are inside user/nice).
        let total: u64 = v.iter().take(8).sum();
        let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
        Some((total - idle, total))
    }

    /// `used_cpu_user` + `used_cpu_sys` of Redis's `INFO cpu` answer, seconds.
    pub fn redis_cpu(info: &str) -> Option<f64> {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':')?.trim().parse::<f64>().ok())
        };
        Some(field("used_cpu_user")? + field("used_cpu_sys")?)
    }
}

/// The median of `values` (the mean of the middle two for an even count); `NaN` when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

#[cfg(test)]
mod tests;
