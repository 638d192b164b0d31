//! `GET /console/events`: the tenant's events, newest first, filtered by status, flow, tag and
//! time range, a page at a time; `GET /console/counts`: the live counts per status under the
//! same filters (polled by the page).
//!
//! The time range rides on the store's listing: `to` starts the listing at a cursor just after
//! that instant, and the listing stops at the first event older than `from`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use maud::{Markup, html};
use oncerpc_core::store::{Event, EventFilter, EventStatus, list_cursor, parse_list_cursor};

use super::view::{badge, page as frame, time};
use super::{guard, html as html_response, refused};
use crate::{AppState, query_param};

/// Events per page.
const PAGE: usize = 50;
/// The most events a live count reads per status; past it the count shows `1000+`.
const COUNT_CAP: usize = 1000;
const STATUSES: [EventStatus; 3] = [EventStatus::Processing, EventStatus::Succeeded, EventStatus::Failed];

/// The filters of the page, as read from its query.
#[derive(Default, Clone)]
struct Filters {
    status: Option<EventStatus>,
    flow: Option<String>,
    tag: Option<String>,
    /// The range, as typed (RFC 3339 or a browser's `datetime-local`, read as UTC) and in ms.
    from: Option<(String, u64)>,
    to: Option<(String, u64)>,
    cursor: Option<String>,
}

impl Filters {
    fn parse(query: Option<&str>) -> Result<Filters, String> {
        let param =
            |name: &str| query_param(query, name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let status = match param("status") {
            None => None,
            Some(s) => Some(EventStatus::parse(&s).ok_or(format!("unknown status: {s}"))?),
        };
        let instant = |name: &str| -> Result<Option<(String, u64)>, String> {
            let Some(text) = param(name) else { return Ok(None) };
            let ms = parse_time(&text).ok_or(format!("{name}: not a time like 2026-01-31T18:30:00Z"))?;
            Ok(Some((text, ms)))
        };
        let cursor = match param("cursor") {
            Some(c) if parse_list_cursor(&c).is_none() => return Err("invalid cursor".to_owned()),
            c => c,
        };
        Ok(Filters {
            status,
            flow: param("flow"),
            tag: param("tag"),
            from: instant("from")?,
            to: instant("to")?,
            cursor,
        })
    }

    fn store_filter(&self, status: Option<EventStatus>) -> EventFilter {
        EventFilter { status, method: self.flow.clone(), tag: self.tag.clone() }
    }

    /// Where the listing starts: the page's cursor, else just after `to` (events at `to` are
    /// listed: a listing goes on with those older, or as old with a smaller id than "").
    fn start(&self) -> Option<String> {
        self.cursor
            .clone()
            .or_else(|| self.to.as_ref().map(|(_, ms)| format!("{:020}:", ms.saturating_add(1))))
    }

    /// The query of these filters (without the cursor), with `status` replaced.
    fn query(&self, status: Option<EventStatus>) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if let Some(s) = status {
            q.append_pair("status", s.as_str());
        }
        for (name, value) in [
            ("flow", self.flow.as_deref()),
            ("tag", self.tag.as_deref()),
            ("from", self.from.as_ref().map(|f| f.0.as_str())),
            ("to", self.to.as_ref().map(|t| t.0.as_str())),
        ] {
            if let Some(v) = value {
                q.append_pair(name, v);
            }
        }
        q.finish()
    }
}

/// RFC 3339, or without a zone (read as UTC), with or without seconds.
fn parse_time(text: &str) -> Option<u64> {
    let t = text.trim_end_matches('Z');
    let t = if t.len() == 16 { format!("{t}:00") } else { t.to_owned() };
    let at = humantime::parse_rfc3339_weak(&t).ok()?;
    Some(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as u64)
}

/// One page of events under `filters`, starting at `start`: the events and the next cursor.
async fn list(
    st: &AppState,
    tenant: &str,
    filter: &EventFilter,
    filters: &Filters,
    start: Option<String>,
    limit: usize,
) -> Result<(Vec<Event>, Option<String>), oncerpc_core::store::StoreError> {
    let (mut events, mut next) =
        st.dispatcher.store().list_events(tenant, filter, start.as_deref(), limit).await?;
    if let Some((_, from)) = filters.from
        && let Some(older) = events.iter().position(|e| e.created_at_ms < from)
    {
        events.truncate(older);
        next = None;
    }
    if next.is_none() && events.len() == limit {
        next = events.last().map(list_cursor);
    }
    Ok((events, next))
}

/// `GET /console/events`.
pub(crate) async fn page(State(st): State<Arc<AppState>>, uri: Uri, headers: HeaderMap) -> Response {
    let (_admitted, session) = match guard(&st, &headers, true) {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let filters = match Filters::parse(uri.query()) {
        Ok(f) => f,
        Err(message) => return refused(&st, StatusCode::BAD_REQUEST, "bad_request", &message),
    };
    let filter = filters.store_filter(filters.status);
    let (events, next) = match list(&st, &session.tenant, &filter, &filters, filters.start(), PAGE).await {
        Ok(page) => page,
        Err(e) => return super::status::store_down(&st, &e),
    };
    let counts = counts_markup(&st, &session.tenant, &filters).await;
    let body = html! {
        h1 { "Events" }
        (form(&filters))
        (counts)
        @if events.is_empty() {
            p.empty { "No events match." }
        } @else {
            table.events {
                thead { tr { th { "Event" } th { "Flow" } th { "Status" } th { "Tags" } th { "Created (UTC)" } th { "Updated (UTC)" } } }
                tbody {
                    @for e in &events {
                        tr {
                            td { a.event href={ "/console/events/" (e.id) } { (e.id) } }
                            td { (e.record.method) }
                            td { (badge(e.status.as_str())) }
                            td.tags { @for t in &e.tags { span.tag { (t) } " " } }
                            td { (time(e.created_at_ms)) }
                            td { (time(e.updated_at_ms)) }
                        }
                    }
                }
            }
        }
        nav.pages {
            @if filters.cursor.is_some() { a href={ "/console/events?" (filters.query(filters.status)) } { "← Newest" } }
            @if let Some(c) = &next {
                a #older href={ "/console/events?" (with_cursor(&filters, c)) } { "Older →" }
            }
        }
    };
    html_response(StatusCode::OK, frame("Events", &session, "events", body))
}

fn with_cursor(filters: &Filters, cursor: &str) -> String {
    let mut q = filters.query(filters.status);
    let mut c = form_urlencoded::Serializer::new(String::new());
    c.append_pair("cursor", cursor);
    if !q.is_empty() {
        q.push('&');
    }
    q.push_str(&c.finish());
    q
}

fn form(f: &Filters) -> Markup {
    let text = |v: &Option<(String, u64)>| v.as_ref().map(|(t, _)| t.clone()).unwrap_or_default();
    html! {
        form.filters method="get" action="/console/events" {
            label { "Status "
                select name="status" {
                    option value="" selected[f.status.is_none()] { "any" }
                    @for s in STATUSES { option value=(s.as_str()) selected[f.status == Some(s)] { (s.as_str()) } }
                }
            }
            label { "Flow " input type="text" name="flow" value=(f.flow.clone().unwrap_or_default()); }
            label { "Tag " input type="text" name="tag" value=(f.tag.clone().unwrap_or_default()); }
            label { "From (UTC) " input type="datetime-local" step="1" name="from" value=(text(&f.from)); }
            label { "To (UTC) " input type="datetime-local" step="1" name="to" value=(text(&f.to)); }
            button #filter type="submit" { "Filter" }
        }
    }
}

/// `GET /console/counts`: the counts fragment (polled every few seconds by the page).
pub(crate) async fn counts(State(st): State<Arc<AppState>>, uri: Uri, headers: HeaderMap) -> Response {
    let (_admitted, session) = match guard(&st, &headers, false) {
        Ok(g) => g,
        Err(resp) => return *resp,
    };
    let filters = match Filters::parse(uri.query()) {
        Ok(f) => f,
        Err(message) => return refused(&st, StatusCode::BAD_REQUEST, "bad_request", &message),
    };
    html_response(StatusCode::OK, counts_markup(&st, &session.tenant, &filters).await)
}

/// The counts per status under the filters (the status filter aside), each a link to its
/// filter.
async fn counts_markup(st: &AppState, tenant: &str, filters: &Filters) -> Markup {
    let mut counts = Vec::new();
    for status in STATUSES {
        counts.push((status, count(st, tenant, filters, status).await));
    }
    let base = Filters { status: None, cursor: None, ..filters.clone() };
    html! {
        div #counts.counts hx-get={ "/console/counts?" (base.query(None)) } hx-trigger="every 3s" hx-swap="outerHTML" {
            @for (status, n) in &counts {
                a class={ "count " (status.as_str()) } href={ "/console/events?" (base.query(Some(*status))) } {
                    span.n data-status=(status.as_str()) {
                        @match n { Some((n, capped)) => { (n) @if *capped { "+" } } None => { "?" } }
                    }
                    " " (status.as_str())
                }
            }
        }
    }
}

/// How many events of `status` match (at most [`COUNT_CAP`], then `true`); `None` when the
/// store did not answer.
async fn count(st: &AppState, tenant: &str, filters: &Filters, status: EventStatus) -> Option<(usize, bool)> {
    let filter = filters.store_filter(Some(status));
    let (mut n, mut start) = (0, filters.to.as_ref().map(|(_, ms)| format!("{:020}:", ms.saturating_add(1))));
    loop {
        let (events, next) = list(st, tenant, &filter, filters, start, 200).await.ok()?;
        n += events.len();
        match next {
            Some(c) if n < COUNT_CAP => start = Some(c),
            Some(_) => return Some((n, true)),
            None => return Some((n, false)),
        }
    }
}
