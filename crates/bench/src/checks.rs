//! The checks around each measured run: a handful of requests sent and their answers judged
//! before it ([`judge_fixed`], [`judge_keyed`]), and oncerpc's counters read before and after
//! it and compared with what wrk counted ([`verify`], [`unrecorded`]).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use oncerpc_bench::{bodies, prom};
use serde::{Deserialize, Serialize};

use crate::BoxError;
use crate::client::{self, Resp};
use crate::run::{Bench, Target};
use crate::scenarios::{FLOW, FLOW_PATH, KEY_HEADER, Scenario};

/// Requests sent and judged before each measured run.
pub const CHECK_REQUESTS: usize = 5;

/// A body sent before the measured run that did not get the right answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckFailure {
    pub request: String,
    pub status: Option<u16>,
    pub idempotency_status: Option<String>,
    pub response: String,
    pub why: String,
}

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
            Scenario::Command { .. } => {
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
            let own = if matches!(sc, Scenario::Command { .. }) { 1.0 } else { 0.0 };
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
        Scenario::Command { dup: false, .. } => {
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
/// completed answers, up to `conns` more left in flight when wrk stopped.
pub fn verify(sc: &Scenario, requests: u64, conns: u64, before: &Snap, after: &Snap) -> (bool, String) {
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
            let ok = d("oncerpc_requests_total", &[("method", "sum"), ("outcome", "ok")]);
            let errors = bad("sum");
            if !within(ok, requests * per, (requests + conns) * per) {
                problems.push(format!("`sum` answered ok {ok} times, wrk counted {requests} × {per}"));
            }
            if errors != 0.0 {
                problems.push(format!("{errors} `sum` calls answered with an error"));
            }
            format!("sum ok +{ok} for wrk's {requests} × {per}; errors +{errors}")
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Store;

    fn snap(new: u64, dup: u64, counter: i64) -> Snap {
        Snap {
            metrics: format!(
                "oncerpc_idempotency_total{{method=\"counter.increment\",status=\"new\"}} {new}\n\
                 oncerpc_idempotency_total{{method=\"counter.increment\",status=\"duplicate\"}} {dup}\n\
                 oncerpc_requests_total{{method=\"counter.increment\",kind=\"command\",outcome=\"ok\"}} {}\n",
                new + dup
            ),
            counter: Some(counter),
            upstream_calls: None,
        }
    }

    #[test]
    fn verification_of_new_keys() {
        let sc = Scenario::Command { store: Store::Memory, dup: false };
        // wrk counted 1000; 3 more were in flight when it stopped.
        let (ok, text) = verify(&sc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1013));
        assert!(ok, "{text}");
        // Requests in flight at wrk's stop may run without being counted in the metrics.
        let (ok, text) = verify(&sc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1020));
        assert!(ok && text.contains("7 executions"), "{text}");
        // More executions than requests sent: something ran twice.
        let (ok, text) = verify(&sc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1080));
        assert!(!ok && text.contains("counter"), "{text}");
        // Fewer executions than counted as new.
        let (ok, _) = verify(&sc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1012));
        assert!(!ok);
        // Fewer new than wrk answered.
        let (ok, _) = verify(&sc, 1000, 64, &snap(10, 5, 10), &snap(900, 5, 900));
        assert!(!ok);
    }

    #[test]
    fn verification_of_duplicates() {
        let sc = Scenario::Command { store: Store::Sqlite, dup: true };
        let (ok, text) = verify(&sc, 500, 64, &snap(1000, 0, 1000), &snap(1000, 520, 1000));
        assert!(ok, "{text}");
        let (ok, text) = verify(&sc, 500, 64, &snap(1000, 0, 1000), &snap(1001, 520, 1001));
        assert!(!ok && text.contains("new +1"), "{text}");
    }

    #[test]
    fn verification_of_batches() {
        let m = |ok: u64| Snap {
            metrics: format!("oncerpc_requests_total{{method=\"sum\",kind=\"query\",outcome=\"ok\"}} {ok}\n"),
            ..Snap::default()
        };
        let sc = Scenario::Batch { conns: 64 };
        assert!(verify(&sc, 100, 64, &m(0), &m(5000)).0);
        assert!(!verify(&sc, 100, 64, &m(0), &m(4999)).0);
    }

    #[test]
    fn judges_answers() {
        let resp = |status: u16, idem: Option<&str>, body: &str| Resp {
            status,
            idempotency: idem.map(str::to_owned),
            body: Bytes::from(body.to_owned()),
        };
        assert!(
            judge_fixed(&resp(200, None, r#"{"id":1,"jsonrpc":"2.0","result":3}"#), bodies::SINGLE_ANSWER)
                .is_ok()
        );
        assert!(
            judge_fixed(&resp(200, None, r#"{"jsonrpc":"2.0","result":4,"id":1}"#), bodies::SINGLE_ANSWER)
                .is_err()
        );
        assert!(judge_fixed(&resp(500, None, bodies::SINGLE_ANSWER), bodies::SINGLE_ANSWER).is_err());
        let ok = r#"{"jsonrpc":"2.0","result":{"total":7},"id":1}"#;
        assert!(judge_keyed(false, "new", &resp(200, Some("new"), ok), None).is_ok());
        assert!(judge_keyed(false, "duplicate", &resp(200, Some("new"), ok), None).is_err());
        let stored = Bytes::from_static(br#"{"jsonrpc":"2.0","result":{"total":6},"id":1}"#);
        assert!(judge_keyed(false, "duplicate", &resp(200, Some("duplicate"), ok), Some(&stored)).is_err());
        let flow = r#"{"step":"reserve","n":3}"#;
        assert!(judge_keyed(true, "new", &resp(200, Some("new"), flow), None).is_ok());
        assert!(judge_keyed(true, "new", &resp(200, Some("new"), "{}"), None).is_err());
    }
}
