//! Answers of the MCP door as server-sent events: a call that sends notifications while it
//! runs (a flow's progress and log messages) answers with `text/event-stream` — each
//! notification an event as it happens, the response the last one — when the client accepts
//! it. Every other answer stays one JSON body: the choice is made lazily, by the first
//! notification, so a call that sends none costs nothing more.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use oncerpc_mcp::Outbox;
use tokio::sync::mpsc::Receiver;

/// Whether the request's `Accept` names `text/event-stream` (a media range of it, its
/// parameters aside; case-insensitive). Read as bytes: it is on every MCP request.
pub(crate) fn accepted(headers: &HeaderMap) -> bool {
    const STREAM: &[u8] = b"text/event-stream";
    fn trim(mut b: &[u8]) -> &[u8] {
        while let [b' ' | b'\t', rest @ ..] = b {
            b = rest;
        }
        while let [rest @ .., b' ' | b'\t'] = b {
            b = rest;
        }
        b
    }
    headers.get_all(header::ACCEPT).iter().any(|v| {
        v.as_bytes().split(|&b| b == b',').any(|range| {
            let media = range.split(|&b| b == b';').next().unwrap_or_default();
            trim(media).eq_ignore_ascii_case(STREAM)
        })
    })
}

/// One message as one event.
pub(crate) fn event(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 24);
    out.extend_from_slice(b"event: message\ndata: ");
    // JSON text written by this server has no raw newlines; one inside would end the event.
    out.extend(message.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

pub(crate) fn response(body: Body) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// Run an MCP answer with an outbox when the client takes events: `Ok` with what it gave when
/// it sent no notification (the caller answers one JSON body), `Err` with the answer as a
/// stream of events when it did (the first notification decides; `body` is the answer's last
/// event).
pub(crate) async fn respond<T: Send + 'static, F>(
    headers: &HeaderMap,
    answering: impl FnOnce(Option<Outbox>) -> F,
    body: fn(T) -> Option<Vec<u8>>,
) -> Result<T, Response>
where
    F: Future<Output = T> + Send + 'static,
{
    let (outbox, mut notes) = Outbox::channel();
    let mut answering = Box::pin(answering(accepted(headers).then_some(outbox)));
    let done = tokio::select! {
        biased;
        Some(first) = notes.recv() => {
            let rest = async move { body(answering.await) };
            return Err(streaming(first, notes, rest));
        }
        done = &mut answering => done,
    };
    if let Ok(first) = notes.try_recv() {
        let rest = std::iter::from_fn(|| notes.try_recv().ok());
        return Err(at_once(std::iter::once(first).chain(rest).chain(body(done))));
    }
    Ok(done)
}

/// Messages that are all known already (the call finished before the first was read).
fn at_once(messages: impl IntoIterator<Item = Vec<u8>>) -> Response {
    let mut out = Vec::new();
    for m in messages {
        out.extend_from_slice(&event(&m));
    }
    response(Body::from(out))
}

/// The call still runs: `first`, then each notification as it comes, then the answer
/// `answering` gives (none for a notification), then the end of the stream.
fn streaming<F>(first: Vec<u8>, notes: Receiver<Vec<u8>>, answering: F) -> Response
where
    F: Future<Output = Option<Vec<u8>>> + Send + 'static,
{
    enum State<F> {
        First(Vec<u8>, Receiver<Vec<u8>>, Pin<Box<F>>),
        Running(Receiver<Vec<u8>>, Pin<Box<F>>),
        Draining(Receiver<Vec<u8>>, Option<Vec<u8>>),
        Done,
    }
    let state = State::First(first, notes, Box::pin(answering));
    let stream = futures::stream::unfold(state, |state| async move {
        match state {
            State::First(first, notes, answering) => Some((event(&first), State::Running(notes, answering))),
            State::Running(mut notes, mut answering) => {
                tokio::select! {
                    biased;
                    Some(n) = notes.recv() => Some((event(&n), State::Running(notes, answering))),
                    answer = &mut answering => next_drained(notes, answer),
                }
            }
            State::Draining(notes, answer) => next_drained(notes, answer),
            State::Done => None,
        }
    });
    fn next_drained<F>(mut notes: Receiver<Vec<u8>>, answer: Option<Vec<u8>>) -> Option<(Bytes, State<F>)> {
        match notes.try_recv() {
            Ok(n) => Some((event(&n), State::Draining(notes, answer))),
            Err(_) => answer.map(|a| (event(&a), State::Done)),
        }
    }
    response(Body::from_stream(futures::StreamExt::map(stream, Ok::<_, Infallible>)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(values: &[&str]) -> bool {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        }
        accepted(&headers)
    }

    #[test]
    fn event_streams_are_accepted_by_media_range_only() {
        assert!(accept(&["application/json, text/event-stream"]));
        assert!(accept(&["application/json", " Text/Event-Stream ;q=0.5"]));
        assert!(accept(&["text/event-stream"]));
        assert!(!accept(&["application/json"]));
        assert!(!accept(&[]));
        assert!(!accept(&["text/event-streams, application/json"]));
        assert!(!accept(&["application/json;profile=text/event-stream"]));
    }
}
