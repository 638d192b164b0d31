//! `GET /console/status`: the gateway's health as an operator reads it — the store (does it
//! answer, how fast), requests in flight, the background queue (`limits.max_background`),
//! request and error rates, and the most frequent errors. These figures are the process's
//! (shared by every tenant); the events pages are the tenant's own. `GET …/live` is the same
//! panel, polled by the page.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use maud::{Markup, html};
use oncerpc_core::store::StoreError;
use tokio::time::Instant;

use super::view::page as frame;
use super::{console, guard, html as html_response, refused};
use crate::AppState;

/// Samples of the request counters, for rates over the last minute or so.
#[derive(Default)]
pub(crate) struct Rates {
    samples: Mutex<VecDeque<(Instant, Totals)>>,
}

/// How far back a rate looks.
const WINDOW: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Default)]
struct Totals {
    requests: f64,
    errors: f64,
}

impl Rates {
    /// Record `now`'s totals; the rates (per second) since the oldest sample in the window.
    fn observe(&self, totals: Totals) -> Option<(f64, f64, Duration)> {
        let now = Instant::now();
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        while samples.len() > 1 && samples.front().is_some_and(|(at, _)| now.duration_since(*at) > WINDOW) {
            samples.pop_front();
        }
        let rate = samples.front().and_then(|(at, then)| {
            let secs = now.duration_since(*at).as_secs_f64();
            (secs >= 1.0).then(|| {
                (
                    (totals.requests - then.requests) / secs,
                    (totals.errors - then.errors) / secs,
                    now.duration_since(*at),
                )
            })
        });
        samples.push_back((now, totals));
        if samples.len() > 600 {
            samples.pop_front();
        }
        rate
    }
}

/// A store that did not answer: `503`, the error text to the log only.
pub(crate) fn store_down(st: &AppState, e: &StoreError) -> Response {
    tracing::error!(error = %e, "console: event store unavailable");
    refused(
        st,
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        "The store is not answering: try again shortly.",
    )
}

/// `GET /console/status`.
pub(crate) async fn page(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let (_admitted, session) = match guard(&st, &headers, true) {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let body = html! { h1 { "Status" } (panel(&st).await) };
    html_response(StatusCode::OK, frame("Status", &session, "status", body))
}

/// `GET /console/status/live`.
pub(crate) async fn live(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(resp) = guard(&st, &headers, false) {
        return *resp;
    }
    html_response(StatusCode::OK, panel(&st).await)
}

/// The request counters by (method, outcome), summed over kinds.
fn requests(st: &AppState) -> HashMap<(String, String), f64> {
    let mut out = HashMap::new();
    for family in st.dispatcher.metrics().families() {
        if family.name() != "oncerpc_requests_total" {
            continue;
        }
        for m in family.get_metric() {
            let label =
                |name: &str| m.get_label().iter().find(|l| l.name() == name).map(|l| l.value().to_owned());
            let key = (label("method").unwrap_or_default(), label("outcome").unwrap_or_default());
            *out.entry(key).or_insert(0.0) += m.get_counter().get_value();
        }
    }
    out
}

fn is_error(outcome: &str) -> bool {
    outcome != "ok" && outcome != "client_closed"
}

async fn panel(st: &AppState) -> Markup {
    let store = st.dispatcher.store();
    let started = Instant::now();
    let ping = store.ping().await;
    let ping_ms = started.elapsed().as_secs_f64() * 1000.0;
    if let Err(e) = &ping {
        tracing::warn!(store = store.name(), error = %e, "console status: store unavailable");
    }
    let metrics = st.dispatcher.metrics();
    let in_flight = metrics.in_flight.get();
    let (background, max_background) = st.dispatcher.background();
    let counters = requests(st);
    let total: f64 = counters.values().sum();
    let errors: f64 = counters.iter().filter(|((_, o), _)| is_error(o)).map(|(_, n)| n).sum();
    let rates = console(st).rates.observe(Totals { requests: total, errors });
    let mut top: Vec<_> = counters.iter().filter(|((_, o), n)| is_error(o) && **n > 0.0).collect();
    top.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
    top.truncate(10);
    html! {
        section #panel hx-get="/console/status/live" hx-trigger="every 5s" hx-swap="outerHTML" {
            div.cards {
                div.card {
                    h3 { "Store" }
                    @match &ping {
                        Ok(()) => { p #store-health { span.badge.succeeded { "ok" } } p { (store.name()) " · answered in " (format!("{ping_ms:.1}")) " ms" } }
                        Err(_) => { p #store-health { span.badge.failed { "unavailable" } } p { (store.name()) " is not answering (details in the log)" } }
                    }
                }
                div.card { h3 { "In flight" } p.big #in-flight { (in_flight) } p { "requests being served (this page included)" } }
                div.card {
                    h3 { "Background queue" }
                    p.big #background { (background) " / " (max_background) }
                    p { "keyed executions and async events running (limits.max_background)" }
                }
                div.card {
                    h3 { "Rates" }
                    @match rates {
                        Some((req, err, over)) => {
                            p.big #rate { (format!("{req:.2}")) " req/s" }
                            p { (format!("{err:.2}")) " errors/s over the last " (over.as_secs()) " s" }
                        }
                        None => { p.big #rate { "—" } p { "measuring (needs two samples a second apart)" } }
                    }
                    p { (total) " requests, " (errors) " errors since start" }
                }
            }
            (configuration(st))
            h2 { "Top errors" }
            @if top.is_empty() { p.empty #top-errors { "No errors since start." } } @else {
                table #top-errors {
                    thead { tr { th { "Method" } th { "Outcome (error code)" } th { "Count" } } }
                    tbody { @for ((method, outcome), n) in &top { tr { td { (method) } td { (outcome) } td { (n) } } } }
                }
            }
        }
    }
}

/// The configuration served and the last reload's outcome (what `/healthz` shows as
/// `"config"`): its hash, when it was loaded, and whether the last `SIGHUP` swapped a new one
/// in or changed nothing (why: in the log).
fn configuration(st: &AppState) -> Markup {
    let Some(report) = st.config.config_report.get() else { return html! {} };
    let text = |v: &serde_json::Value, k: &str| v.get(k).and_then(|v| v.as_str()).unwrap_or("").to_owned();
    let hash = text(&report, "hash");
    let last = report.get("last_reload");
    html! {
        div.cards #configuration {
            div.card {
                h3 { "Configuration" }
                p #config-hash { code { (hash.get(..12).unwrap_or(&hash)) } }
                p { "loaded " (text(&report, "loaded_at")) }
            }
            div.card {
                h3 { "Last reload" }
                @match last {
                    None => { p #last-reload { "none since start" } }
                    Some(l) if text(l, "outcome") == "ok" => {
                        p #last-reload { span.badge.succeeded { "ok" } }
                        p { "#" (l["seq"]) " at " (text(l, "at")) ": swapped in" }
                    }
                    Some(l) => {
                        p #last-reload { span.badge.failed { "failed" } " " (text(l, "error")) }
                        p { "#" (l["seq"]) " at " (text(l, "at")) ": nothing changed, the running configuration stays (why: in the log)" }
                    }
                }
            }
        }
    }
}
