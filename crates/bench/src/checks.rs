//! The checks around each measured run: a handful of requests sent and their answers judged
//! before it ([`judge_fixed`], [`judge_keyed`]), and oncerpc's counters read before and after
//! it and compared with what wrk counted ([`verify`], [`unrecorded`]).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use oncerpc_bench::{bodies, prom};

use crate::BoxError;
use crate::cli::Store;
use crate::client::{self, Resp};
use crate::record::CheckFailure;
use crate::scenarios::{FLOW, FLOW_PATH, KEY_HEADER, Scenario, Server};
use crate::state::{Bench, Target};

/// Requests sent and judged before each measured run.
pub const CHECK_REQUESTS: usize = 5;

/// Counters read before and after a measured run.
#[derive(Debug, Clone, Default)]
pub struct Snap {
    pub metrics: String,
    pub counter: Option<i64>,
    pub upstream_calls: Option<u64>,
}

impl Bench<'_> {
    /// Send the keyed request of a command (or flow) scenario; returns what was sent.
    pub fn send_keyed(
        &self,
        conn: &mut client::Conn,
        flows: bool,
        key: &str,
    ) -> Result<(String, Resp), BoxError> {
        if flows {
            let resp =
                self.client.send(conn, Method::POST, FLOW_PATH, &[(KEY_HEADER, key)], bodies::FLOW_BODY)?;
            Ok((format!("POST {FLOW_PATH} {KEY_HEADER}: {key} {}", bodies::FLOW_BODY), resp))
        } else {
            let body = bodies::increment(key);
            let resp = self.client.send(conn, Method::POST, "/rpc", &[], &body)?;
            Ok((format!("POST /rpc {body}"), resp))
        }
    }

    /// Send one request of an MCP-group scenario as wrk sends it to `t` (check number `i`);
    /// what was sent, the answer and its verdict.
    fn mcp_check(
        &self,
        conn: &mut client::Conn,
        rep: u32,
        sc: &Scenario,
        t: &Target,
        i: usize,
    ) -> Result<(String, Resp, Result<(), String>), BoxError> {
        let session = self.mcp.as_ref().and_then(|m| m.session.as_deref());
        let key = format!("{}-c{rep}-{}-{}-{i}", self.nonce, sc.id(), t.server.name());
        let (tool, body) = match (sc, t.server.mcp_era()) {
            (Scenario::McpAdd { .. }, None) => ("add", bodies::ADD_RPC.to_owned()),
            (_, None) => ("counter.increment", bodies::increment(&key)),
            (Scenario::McpAdd { .. }, Some(stateless)) => {
                ("add", bodies::mcp_call("add", bodies::ADD_ARGS, stateless))
            }
            (_, Some(stateless)) => ("counter.increment", bodies::mcp_increment(&key, stateless)),
        };
        let headers = match t.server.mcp_era() {
            Some(stateless) => bodies::mcp_headers(tool, session.filter(|_| !stateless)),
            None => Vec::new(),
        };
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let path = sc.path(t.server);
        let resp = self.client.send(conn, Method::POST, path, &h, &body)?;
        let verdict = match (sc, t.server.mcp_era()) {
            (Scenario::McpAdd { .. }, None) => judge_fixed(&resp, bodies::ADD_RPC_ANSWER),
            (_, None) => judge_keyed(false, "new", &resp, None),
            (Scenario::McpAdd { .. }, Some(_)) => judge_mcp(&resp, None),
            (_, Some(_)) => judge_mcp(&resp, Some("new")),
        };
        let shown: Vec<String> = headers.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        Ok((format!("POST {path} {} {body}", shown.join(" ")), resp, verdict))
    }

    /// Send [`CHECK_REQUESTS`] requests as the scenario sends them and judge the answers.
    pub fn precheck(&self, rep: u32, sc: &Scenario, t: &Target) -> (usize, Vec<CheckFailure>) {
        let addr = self.procs[t.proc_idx].addr;
        let mut failures = Vec::new();
        let mut conn = match self.client.connect(addr) {
            Ok(c) => c,
            Err(e) => {
                failures.push(CheckFailure {
                    request: format!("connect {addr}"),
                    status: None,
                    idempotency_status: None,
                    response: String::new(),
                    why: e.to_string(),
                });
                return (1, failures);
            }
        };
        for i in 0..CHECK_REQUESTS {
            let outcome: Result<(String, Resp, Result<(), String>), BoxError> = (|| match sc {
                Scenario::McpAdd { .. } | Scenario::McpCommand { .. } => {
                    self.mcp_check(&mut conn, rep, sc, t, i)
                }
                Scenario::Single { .. } | Scenario::Batch { .. } => {
                    let (body, expected) = match sc {
                        Scenario::Single { .. } => {
                            (bodies::single(t.server.method()), bodies::SINGLE_ANSWER.to_owned())
                        }
                        _ => (bodies::batch(t.server.method()), bodies::batch_answer()),
                    };
                    let resp = self.client.send(&mut conn, Method::POST, t.server.path(), &[], &body)?;
                    let verdict = judge_fixed(&resp, &expected);
                    Ok((format!("POST {} {body}", t.server.path()), resp, verdict))
                }
                Scenario::Unpinned { .. } => unreachable!("judged as its base scenario (run_one)"),
                Scenario::Command { dup, .. } | Scenario::Flow { dup } => {
                    let flows = matches!(sc, Scenario::Flow { .. });
                    let (key, stored) = if *dup {
                        let n = self.args.dup_keys as usize;
                        let k = (i * 997 + rep as usize * 13) % n;
                        let stored = self.dup_answers.get(&t.proc_idx).and_then(|a| a.get(k)).cloned();
                        (format!("{}-{k}", self.dup_prefix(flows)), stored)
                    } else {
                        (format!("{}-c{rep}-{}-{i}", self.nonce, sc.id()), None)
                    };
                    let (req, resp) = self.send_keyed(&mut conn, flows, &key)?;
                    let want = if *dup { "duplicate" } else { "new" };
                    let verdict = if *dup && stored.is_none() {
                        Err("the duplicate keys were not created (see the notes)".to_owned())
                    } else {
                        judge_keyed(flows, want, &resp, stored.as_ref())
                    };
                    Ok((req, resp, verdict))
                }
            })();
            match outcome {
                Ok((_, _, Ok(()))) => {}
                Ok((request, resp, Err(why))) => failures.push(CheckFailure {
                    request,
                    status: Some(resp.status),
                    idempotency_status: resp.idempotency.clone(),
                    response: resp.text(),
                    why,
                }),
                Err(e) => {
                    failures.push(CheckFailure {
                        request: format!("request {i} of the check"),
                        status: None,
                        idempotency_status: None,
                        response: String::new(),
                        why: e.to_string(),
                    });
                    match self.client.connect(addr) {
                        Ok(c) => conn = c,
                        Err(_) => return (i + 1, failures),
                    }
                }
            }
        }
        (CHECK_REQUESTS, failures)
    }

    /// oncerpc's metrics, and the demo counter or the upstream's calls.
    pub fn snapshot(&self, sc: &Scenario, t: &Target) -> Result<Snap, String> {
        if !t.server.is_oncerpc() {
            return Ok(Snap::default());
        }
        let addr = self.procs[t.proc_idx].addr;
        let get = |addr: SocketAddr, path: &str| -> Result<Resp, String> {
            let r =
                self.client.once(addr, Method::GET, path, &[], "").map_err(|e| format!("GET {path}: {e}"))?;
            if r.status == 200 { Ok(r) } else { Err(format!("GET {path}: HTTP {} {}", r.status, r.text())) }
        };
        let mut snap = Snap { metrics: get(addr, "/metrics")?.text(), ..Snap::default() };
        match sc {
            Scenario::Command { .. } | Scenario::McpCommand { .. } => {
                let body = r#"{"jsonrpc":"2.0","method":"counter.get","id":1}"#;
                let r = self
                    .client
                    .once(addr, Method::POST, "/rpc", &[], body)
                    .map_err(|e| format!("counter.get: {e}"))?;
                let total = r.json().and_then(|v| v["result"]["total"].as_i64());
                snap.counter =
                    Some(total.ok_or_else(|| format!("counter.get: HTTP {} {}", r.status, r.text()))?);
            }
            Scenario::Flow { .. } => {
                let up = self.procs[t.upstream.expect("flow has an upstream")].addr;
                let r = get(up, "/count")?;
                let calls = r.json().and_then(|v| v["calls"].as_u64());
                snap.upstream_calls = Some(calls.ok_or_else(|| format!("upstream /count: {}", r.text()))?);
            }
            _ => {}
        }
        Ok(snap)
    }

    /// The counters once requests left in flight by wrk's stop have finished: read until two
    /// reads agree (at most ~2 s).
    pub fn settled_snapshot(&self, sc: &Scenario, t: &Target) -> Result<Snap, String> {
        std::thread::sleep(Duration::from_millis(200));
        let key = |s: &Snap| {
            (
                prom::sum(&s.metrics, "oncerpc_requests_total", |_| true),
                prom::sum(&s.metrics, "oncerpc_idempotency_total", |_| true),
                s.counter,
                s.upstream_calls,
            )
        };
        let mut last = self.snapshot(sc, t)?;
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(200));
            let next = self.snapshot(sc, t)?;
            // The reads themselves (counter.get) are requests: compare without them.
            let (r0, i0, c0, u0) = key(&last);
            let (r1, i1, c1, u1) = key(&next);
            let own =
                if matches!(sc, Scenario::Command { .. } | Scenario::McpCommand { .. }) { 1.0 } else { 0.0 };
            if i0 == i1 && c0 == c1 && u0 == u1 && r1 - r0 <= own {
                return Ok(next);
            }
            last = next;
        }
        Ok(last)
    }
}

/// A fixed-answer scenario: HTTP 200 and the expected JSON.
fn judge_fixed(resp: &Resp, expected: &str) -> Result<(), String> {
    if resp.status != 200 {
        return Err(format!("HTTP {} (expected 200)", resp.status));
    }
    let want: serde_json::Value = serde_json::from_str(expected).expect("valid expected answer");
    match resp.json() {
        Some(got) if got == want => Ok(()),
        Some(_) => Err(format!("unexpected body (expected {expected})")),
        None => Err("the body is not JSON".into()),
    }
}

/// An MCP `tools/call` answer: HTTP 200, one JSON body, a successful tool result; with
/// `status`, a command's: `structuredContent.total` and `_meta` `io.oncerpc/idempotency-status`
/// `status`; without, `add`'s: the text `3`.
pub fn judge_mcp(resp: &Resp, status: Option<&str>) -> Result<(), String> {
    if resp.status != 200 {
        return Err(format!("HTTP {} (expected 200)", resp.status));
    }
    let v = resp.json().ok_or("the body is not one JSON answer")?;
    match status {
        None => bodies::judge_tool_result(&v, Some("3")),
        Some(want) => {
            bodies::judge_tool_result(&v, None)?;
            if !v["result"]["structuredContent"]["total"].is_i64() {
                return Err("expected structuredContent {\"total\": N}".into());
            }
            let got = &v["result"]["_meta"]["io.oncerpc/idempotency-status"];
            if got != want {
                return Err(format!("_meta io.oncerpc/idempotency-status {got} (expected {want:?})"));
            }
            Ok(())
        }
    }
}

/// A keyed command or flow answer: HTTP 200, the idempotency status `want`, the right shape, and
/// for a duplicate the stored answer byte for byte.
pub fn judge_keyed(flows: bool, want: &str, resp: &Resp, stored: Option<&Bytes>) -> Result<(), String> {
    if resp.status != 200 {
        return Err(format!("HTTP {} (expected 200)", resp.status));
    }
    if resp.idempotency.as_deref() != Some(want) {
        return Err(format!("X-Idempotency-Status {:?} (expected {want:?})", resp.idempotency));
    }
    let v = resp.json().ok_or("the body is not JSON")?;
    let shape_ok = if flows {
        v["step"] == "reserve" && v["n"].is_u64()
    } else {
        v["jsonrpc"] == "2.0" && v["id"] == 1 && v["result"]["total"].is_i64() && v.get("error").is_none()
    };
    if !shape_ok {
        return Err(if flows {
            "expected the upstream's {\"step\":\"reserve\",\"n\":N}".into()
        } else {
            "expected {\"jsonrpc\":\"2.0\",\"result\":{\"total\":N},\"id\":1}".into()
        });
    }
    if let Some(stored) = stored
        && stored != &resp.body
    {
        return Err(format!(
            "not the stored answer byte for byte (stored: {})",
            String::from_utf8_lossy(stored)
        ));
    }
    Ok(())
}

/// Side effects beyond the `new` executions in the metrics (new-key scenarios).
pub fn unrecorded(sc: &Scenario, before: &Snap, after: &Snap) -> u64 {
    let (method, effect) = match sc {
        Scenario::Command { dup: false, .. } | Scenario::McpCommand { .. } => {
            ("counter.increment", after.counter.unwrap_or(0) - before.counter.unwrap_or(0))
        }
        Scenario::Flow { dup: false } => {
            (FLOW, after.upstream_calls.unwrap_or(0) as i64 - before.upstream_calls.unwrap_or(0) as i64)
        }
        _ => return 0,
    };
    let labels = [("method", method), ("status", "new")];
    let new = prom::value(&after.metrics, "oncerpc_idempotency_total", &labels)
        - prom::value(&before.metrics, "oncerpc_idempotency_total", &labels);
    u64::try_from(effect - new as i64).unwrap_or(0)
}

/// Compare what oncerpc counted during a measured run with what wrk counted: `requests`
/// completed answers, up to `conns` more left in flight when wrk stopped; `server`: the door
/// the MCP group's rows were sent to.
pub fn verify(
    sc: &Scenario,
    server: Server,
    requests: u64,
    conns: u64,
    before: &Snap,
    after: &Snap,
) -> (bool, String) {
    match (sc, server.mcp_era()) {
        // `/rpc` rows of the MCP group: the checks of the shared query and the command rows.
        (Scenario::McpAdd { .. }, None) => return verify_query("add", 1, requests, conns, before, after),
        (Scenario::McpCommand { .. }, None) => {
            let sc = Scenario::Command { store: Store::Memory, dup: false };
            return verify(&sc, server, requests, conns, before, after);
        }
        (Scenario::McpAdd { .. } | Scenario::McpCommand { .. }, Some(_)) => {
            return verify_mcp(sc, requests, conns, before, after);
        }
        _ => {}
    }
    let d = |name: &str, labels: &[(&str, &str)]| {
        prom::value(&after.metrics, name, labels) - prom::value(&before.metrics, name, labels)
    };
    // Δ oncerpc_requests_total of `method` over the outcomes `keep` accepts.
    let by_outcome = |method: &str, keep: fn(&str) -> bool| {
        let f = |t: &str| {
            prom::sum(t, "oncerpc_requests_total", |l| {
                l.contains(&("method", method)) && l.iter().any(|&(k, v)| k == "outcome" && keep(v))
            })
        };
        f(&after.metrics) - f(&before.metrics)
    };
    // Answered with an error: not ok, and not client_closed (a request still in flight when
    // wrk stopped and closed its connection).
    let bad = |method: &str| by_outcome(method, |o| o != "ok" && o != "client_closed");
    let closed = |method: &str| by_outcome(method, |o| o == "client_closed");
    let within = |x: f64, lo: u64, hi: u64| x >= lo as f64 && x <= hi as f64;
    let mut problems = Vec::new();
    let text = match sc {
        Scenario::Single { .. } | Scenario::Batch { .. } => {
            let per = if matches!(sc, Scenario::Batch { .. }) { bodies::BATCH_SIZE as u64 } else { 1 };
            return verify_query("sum", per, requests, conns, before, after);
        }
        Scenario::McpAdd { .. } | Scenario::McpCommand { .. } => unreachable!("handled above"),
        Scenario::Unpinned { .. } => unreachable!("verified as its base scenario (run_one)"),
        Scenario::Command { dup, .. } | Scenario::Flow { dup } => {
            let method = if matches!(sc, Scenario::Flow { .. }) { FLOW } else { "counter.increment" };
            let st = |s: &str| d("oncerpc_idempotency_total", &[("method", method), ("status", s)]);
            let (new, duplicate, processing) = (st("new"), st("duplicate"), st("processing"));
            let errors = bad(method);
            let cut = closed(method);
            if cut > conns as f64 {
                problems.push(format!("client_closed +{cut}: more than the {conns} connections"));
            }
            let (main, other, main_name) =
                if *dup { (duplicate, new, "duplicate") } else { (new, duplicate, "new") };
            if !within(main, requests, requests + conns) {
                problems.push(format!("{main_name} +{main}, wrk counted {requests}"));
            }
            if other != 0.0 {
                problems.push(format!("{} +{other}", if *dup { "new" } else { "duplicate" }));
            }
            if processing != 0.0 {
                problems.push(format!("processing +{processing}"));
            }
            if errors != 0.0 {
                problems.push(format!("{errors} `{method}` calls answered with an error"));
            }
            // Runs once: the side effect moved by the new executions, plus at most one execution
            // per request left in flight when wrk stopped: those ran and were stored, but their
            // client had gone, so they are counted as client_closed, not as `new`.
            let (effect, effect_name) = match sc {
                Scenario::Flow { .. } => (
                    after.upstream_calls.unwrap_or(0) as f64 - before.upstream_calls.unwrap_or(0) as f64,
                    "upstream calls",
                ),
                _ => (after.counter.unwrap_or(0) as f64 - before.counter.unwrap_or(0) as f64, "counter"),
            };
            if *dup && effect != 0.0 {
                problems.push(format!("{effect_name} +{effect} for duplicates (nothing may run)"));
            } else if !*dup && (effect < new || effect > (requests + conns) as f64) {
                problems.push(format!(
                    "{effect_name} +{effect}: expected between the new executions ({new}) and the requests sent ({requests} + at most {conns} in flight)"
                ));
            }
            let unrecorded = if !*dup && effect > new {
                format!(
                    " ({} executions of requests whose connection wrk closed at its stop ran; the metrics count {cut} client_closed)",
                    effect - new
                )
            } else {
                String::new()
            };
            format!(
                "new +{new}, duplicate +{duplicate}, processing +{processing}, errors +{errors}, {effect_name} +{effect}; wrk counted {requests}{unrecorded}"
            )
        }
    };
    if problems.is_empty() { (true, text) } else { (false, format!("{}: {text}", problems.join("; "))) }
}

/// A query row: `method` answered ok `per` times per request wrk counted, never an error.
fn verify_query(
    method: &str,
    per: u64,
    requests: u64,
    conns: u64,
    before: &Snap,
    after: &Snap,
) -> (bool, String) {
    let f = |t: &str, keep: &dyn Fn(&str) -> bool| {
        prom::sum(t, "oncerpc_requests_total", |l| {
            l.contains(&("method", method)) && l.iter().any(|&(k, v)| k == "outcome" && keep(v))
        })
    };
    let d = |keep: &dyn Fn(&str) -> bool| f(&after.metrics, keep) - f(&before.metrics, keep);
    let ok = d(&|o| o == "ok");
    let errors = d(&|o| o != "ok" && o != "client_closed");
    let mut problems = Vec::new();
    if ok < (requests * per) as f64 || ok > ((requests + conns) * per) as f64 {
        problems.push(format!("`{method}` answered ok {ok} times, wrk counted {requests} × {per}"));
    }
    if errors != 0.0 {
        problems.push(format!("{errors} `{method}` calls answered with an error"));
    }
    let text = format!("{method} ok +{ok} for wrk's {requests} × {per}; errors +{errors}");
    if problems.is_empty() { (true, text) } else { (false, format!("{}: {text}", problems.join("; "))) }
}

/// How much the samples of `name` that `keep` accepts moved from `before` to `after`.
fn delta(before: &Snap, after: &Snap, name: &str, keep: impl Fn(&[(&str, &str)]) -> bool) -> f64 {
    prom::sum(&after.metrics, name, &keep) - prom::sum(&before.metrics, name, &keep)
}

/// An MCP-door row: `tools/call` answered `ok` once per request wrk counted (up to `conns` more
/// in flight at its stop), no other outcome, no refusal; for the command, the demo counter moved
/// by the calls and no key was a duplicate.
fn verify_mcp(sc: &Scenario, requests: u64, conns: u64, before: &Snap, after: &Snap) -> (bool, String) {
    let calls = |want: &dyn Fn(&str) -> bool| {
        delta(before, after, "oncerpc_mcp_requests_total", |l| {
            l.contains(&("method", "tools/call")) && l.iter().any(|&(k, v)| k == "outcome" && want(v))
        })
    };
    let ok = calls(&|o| o == "ok");
    let other = calls(&|o| o != "ok" && o != "client_closed");
    let refused = delta(before, after, "oncerpc_mcp_refusals_total", |_| true);
    let within = |x: f64| x >= requests as f64 && x <= (requests + conns) as f64;
    let mut problems = Vec::new();
    if !within(ok) {
        problems.push(format!("tools/call ok +{ok}, wrk counted {requests}"));
    }
    if other != 0.0 {
        problems.push(format!("tools/call with another outcome +{other}"));
    }
    if refused != 0.0 {
        problems.push(format!("refusals +{refused}"));
    }
    let mut text =
        format!("tools/call ok +{ok} for wrk's {requests}; other outcomes +{other}; refusals +{refused}");
    if matches!(sc, Scenario::McpCommand { .. }) {
        let st = |s: &str| {
            delta(before, after, "oncerpc_idempotency_total", |l| {
                l.contains(&("method", "counter.increment")) && l.contains(&("status", s))
            })
        };
        let (new, duplicate) = (st("new"), st("duplicate"));
        let effect = after.counter.unwrap_or(0) as f64 - before.counter.unwrap_or(0) as f64;
        if !within(effect) {
            problems.push(format!("counter +{effect}, wrk counted {requests} new keys"));
        }
        if duplicate != 0.0 {
            problems.push(format!("duplicate +{duplicate} (every key was new)"));
        }
        text += &format!("; counter +{effect}, idempotency new +{new}, duplicate +{duplicate}");
    }
    if problems.is_empty() { (true, text) } else { (false, format!("{}: {text}", problems.join("; "))) }
}

#[cfg(test)]
mod tests;
