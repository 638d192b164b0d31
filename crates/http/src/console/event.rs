//! `GET /console/events/{id}`: one event — its params and outcome (pretty JSON, redacted at the
//! configured pointers), each step (attempts, times, status, output or error, step key) and a
//! timeline; `GET …/live`: the part that changes while the event runs (polled until it ends);
//! `POST …/redrive`: re-drive a failed event, as `POST /v2/events/{id}/retry` does.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use maud::{Markup, html};
use oncerpc_core::IdempotencyStatus;
use oncerpc_core::journal::{StepStatus, StepView};
use oncerpc_core::store::{Event, EventStatus, StoredOutcome};
use oncerpc_protocol::ErrorCode;

use super::view::{badge, json, page as frame, span, time};
use super::{check_csrf, console, form, guard, html as html_response, refused, see_other};
use crate::AppState;

/// The tenant's event `id`; otherwise the answer (`404` for a missing or another tenant's).
async fn tenant_event(st: &AppState, tenant: &str, id: &str) -> Result<Event, Response> {
    match st.dispatcher.store().get_event(id).await {
        Ok(Some(e)) if *e.record.tenant == *tenant => Ok(e),
        Ok(_) => Err(refused(st, StatusCode::NOT_FOUND, "not_found", "No such event.")),
        Err(e) => Err(super::status::store_down(st, &e)),
    }
}

/// `GET /console/events/{id}`.
pub(crate) async fn page(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let (_admitted, session) = match guard(&st, &headers, true) {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let event = match tenant_event(&st, &session.tenant, &id).await {
        Ok(e) => e,
        Err(resp) => return resp,
    };
    let redact = &console(&st).config.redact;
    let body = html! {
        p.crumbs { a href="/console/events" { "← Events" } }
        h1 { "Event " code { (event.id) } }
        dl.facts {
            dt { "Flow" } dd #flow { (event.record.method) }
            dt { "Tags" } dd.tags { @for t in &event.tags { span.tag { (t) } " " } }
            dt { "Created (UTC)" } dd { (time(event.created_at_ms)) }
            dt { "Created by" } dd #created-by { @match &event.created_by { Some(by) => code { (by) }, None => span.empty { "—" } } }
        }
        h2 { "Params" }
        @match &event.params { Some(p) => (json(p, redact)), None => p.empty { "none" } }
        (live_markup(&event, &session.csrf, redact))
    };
    html_response(StatusCode::OK, frame(&format!("Event {}", event.id), &session, "events", body))
}

/// `GET /console/events/{id}/live`: the status, steps, timeline and outcome.
pub(crate) async fn live(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let (_admitted, session) = match guard(&st, &headers, false) {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    match tenant_event(&st, &session.tenant, &id).await {
        Ok(event) => {
            html_response(StatusCode::OK, live_markup(&event, &session.csrf, &console(&st).config.redact))
        }
        Err(resp) => resp,
    }
}

/// The changing part of an event's page; while the event runs it asks for itself again.
fn live_markup(event: &Event, csrf: &str, redact: &[String]) -> Markup {
    let steps: Vec<StepView> =
        event.steps.as_deref().and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
    let running = event.status == EventStatus::Processing;
    let url = format!("/console/events/{}/live", event.id);
    html! {
        section #live hx-get=[running.then_some(&url)] hx-trigger=[running.then_some("every 1s")] hx-swap="outerHTML" {
            p.status { "Status " span #status { (badge(event.status.as_str())) } " · updated " (time(event.updated_at_ms)) }
            @if event.status == EventStatus::Failed { (redrive_form(event, csrf)) }
            h2 { "Steps" }
            @if steps.is_empty() { p.empty { "No step has started." } } @else { (steps_table(&steps, redact)) }
            h2 { "Timeline" }
            (timeline(event, &steps))
            @match (&event.status, &event.outcome) {
                (EventStatus::Succeeded, Some(StoredOutcome::Succeeded(r))) => { h2 { "Result" } div #result { (json(r, redact)) } }
                (EventStatus::Failed, Some(StoredOutcome::Failed(e))) => { h2 { "Error" } div #error { (json(e, redact)) } }
                _ => {}
            }
        }
    }
}

fn steps_table(steps: &[StepView], redact: &[String]) -> Markup {
    html! {
        table.steps {
            thead { tr { th { "Step" } th { "Status" } th { "Attempts" } th { "Started (UTC)" } th { "Took" } th { "Step key" } th { "Output" } } }
            tbody {
                @for v in steps {
                    tr.step data-step=(v.name) {
                        td { (v.name) }
                        td { (badge(step_status(v))) }
                        td.attempts { (v.attempts) }
                        td { (time(v.started_at_ms)) }
                        td { @if let Some(done) = v.finished_at_ms { (span(v.started_at_ms, done)) } @else { "…" } }
                        td { @if let Some(k) = &v.key { code.key title=(k) { (k.get(..12).unwrap_or(k)) "…" } } @else { "—" } }
                        td {
                            @if let Some(o) = &v.output { details { summary { "output" } (json(o, redact)) } }
                            @if let Some(e) = &v.error { span.error { (e) } }
                        }
                    }
                }
            }
        }
    }
}

fn step_status(v: &StepView) -> &'static str {
    match v.status {
        StepStatus::Running => "running",
        StepStatus::Succeeded => "succeeded",
        StepStatus::Failed => "failed",
    }
}

/// Created, each step's start and end, and the event's last change, in order of time.
fn timeline(event: &Event, steps: &[StepView]) -> Markup {
    let mut points: Vec<(u64, String)> = vec![(event.created_at_ms, "event created".to_owned())];
    for v in steps {
        points.push((v.started_at_ms, format!("step {} started", v.name)));
        if let Some(done) = v.finished_at_ms {
            points
                .push((done, format!("step {} {} after {} attempt(s)", v.name, step_status(v), v.attempts)));
        }
    }
    if event.status != EventStatus::Processing {
        points.push((event.updated_at_ms, format!("event {}", event.status.as_str())));
    }
    points.sort_by_key(|(at, _)| *at);
    html! {
        ol.timeline {
            @for (at, what) in &points {
                li { span.at { "+" (span(event.created_at_ms, *at)) } " " (what) }
            }
        }
    }
}

/// The re-drive confirmation: opening it shows what a re-drive does and the button.
fn redrive_form(event: &Event, csrf: &str) -> Markup {
    html! {
        details.redrive {
            summary #redrive { "Re-drive…" }
            p { "Run this flow again under the same event id, as a force retry of its record. Steps that already succeeded upstream receive the same step keys." }
            form method="post" action={ "/console/events/" (event.id) "/redrive" }
                hx-post={ "/console/events/" (event.id) "/redrive" } hx-target="#live" hx-swap="outerHTML" {
                input type="hidden" name="csrf" value=(csrf);
                button #confirm-redrive type="submit" { "Confirm re-drive" }
            }
        }
    }
}

/// `POST /console/events/{id}/redrive` (`csrf`): re-drive a failed event. From htmx the answer
/// is the live part (the outcome then appears without a reload); otherwise back to the event.
pub(crate) async fn redrive(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The body first: waiting for it holds no in-flight permit (SPEC §12).
    let fields = match form(&st, body, &headers).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let (_admitted, session) = match guard(&st, &headers, false) {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    if let Err(resp) = check_csrf(&st, &fields, &session) {
        return *resp;
    }
    let event = match tenant_event(&st, &session.tenant, &id).await {
        Ok(e) => e,
        Err(resp) => return resp,
    };
    let conflict = |message: &str| refused(&st, StatusCode::CONFLICT, "conflict", message);
    let cid = oncerpc_core::generated_id();
    match st.dispatcher.redrive(event, cid.clone(), None).await {
        Ok(IdempotencyStatus::New) => {
            tracing::info!(correlation_id = %cid, event_id = %id, tenant = %oncerpc_core::LogSafe(&session.tenant), "console: event re-driven");
        }
        Ok(IdempotencyStatus::Processing) => {
            return conflict("The event is still processing: only a failed event can be re-driven.");
        }
        Ok(IdempotencyStatus::Duplicate) => {
            return conflict("The event's record holds a finished outcome that a re-drive does not re-run.");
        }
        Err(e) if e.code == ErrorCode::ForceRetryRefused => {
            return conflict("The event succeeded: only a failed event can be re-driven.");
        }
        Err(e) if e.code == ErrorCode::MethodNotFound => {
            return conflict("The event's flow is not served by this gateway.");
        }
        Err(e) => {
            let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            return refused(&st, status, "redrive_failed", &e.message);
        }
    }
    if headers.contains_key("hx-request") {
        return match tenant_event(&st, &session.tenant, &id).await {
            Ok(event) => {
                html_response(StatusCode::OK, live_markup(&event, &session.csrf, &console(&st).config.redact))
            }
            Err(resp) => resp,
        };
    }
    see_other(&format!("/console/events/{id}"))
}
