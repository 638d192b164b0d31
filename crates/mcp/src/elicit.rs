//! Elicitation (SPEC §16): a flow's `ask` step asks the tool's caller a question.
//!
//! * **Session era** (`2025-11-25`, `2025-06-18`, and stdio): when the client declared the
//!   `elicitation` capability at `initialize` and the call's answer can carry messages (SSE,
//!   stdio), the server sends an `elicitation/create` request on the call's stream and waits
//!   for the client's response, which the client sends with the same session (HTTP: a `POST`
//!   with its `Mcp-Session-Id`, answered `202`; stdio: a line). The method's deadline bounds
//!   the wait. The response must reach the process that asked (the waiting question is kept
//!   here): a replicated gateway routes a session's `POST`s to one replica, or its clients
//!   use `2026-07-28`.
//! * **`2026-07-28`** (multi round-trip requests): the answer is looked up in the request's
//!   `inputResponses` under the step's name; without it the call answers `resultType:
//!   "input_required"` naming the question, the execution stops unrecorded (its journal
//!   kept), and the client's next call with the answer and the same key resumes it there.
//!
//! A client without the capability gets an `isError` result and nothing runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use oncerpc_core::{Ask, Asked, Question};
use serde_json::{Map, Value, json};

use oncerpc_stdio::Outbox;

/// Questions waiting for an answer, at most; past it a question is not sent (the call stops
/// unrecorded and asks again when retried).
const MAX_WAITING: usize = 10_000;

/// The id prefix of oncerpc's own requests to a client.
const ID_PREFIX: &str = "oncerpc-ask-";

/// The text a tool result gives a client that cannot answer questions.
pub const NEEDS_ELICITATION: &str = "This tool asks the user a question while it runs (MCP elicitation), \
    and this client cannot answer questions: call it from a client that declares the elicitation \
    capability (and, over HTTP in the session era, accepts text/event-stream answers). Nothing ran.";

type Reply = tokio::sync::oneshot::Sender<Result<Value, String>>;

/// The session era's questions waiting for their answers, by request id; shared by a server
/// and its successors (a reload), so an answer reaches a call that started before it.
#[derive(Default)]
pub(crate) struct Waiting {
    questions: Mutex<HashMap<String, (String, Reply)>>,
}

impl Waiting {
    /// An [`Ask`] that sends each question to `outbox` as `elicitation/create` and waits for
    /// the response of the session `scope` (its `Mcp-Session-Id`; `""` on stdio).
    pub(crate) fn asker(self: &Arc<Self>, outbox: Outbox, scope: Arc<str>, version: &'static str) -> Ask {
        let waiting = self.clone();
        Ask::new(move |q: Question| Box::pin(waiting.clone().ask(outbox.clone(), scope.clone(), version, q)))
    }

    async fn ask(
        self: Arc<Self>,
        outbox: Outbox,
        scope: Arc<str>,
        version: &'static str,
        q: Question,
    ) -> Asked {
        let id = format!("{ID_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let Ok(mut questions) = self.questions.lock() else {
                return Asked::Pending("the server could not keep the question".into());
            };
            if questions.len() >= MAX_WAITING {
                return Asked::Pending("too many questions are waiting for answers".into());
            }
            questions.insert(id.clone(), (scope.to_string(), tx));
        }
        // Forgotten however the wait ends (answered, deadline, client gone).
        let _forget = Forget(&self, &id);
        let mut params = json!({ "message": message(&q), "requestedSchema": q.schema });
        if version == "2025-11-25" {
            params["mode"] = json!("form");
        }
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": params });
        if !outbox.send(request.to_string().into_bytes()) {
            return Asked::Pending("the question could not be sent: the client's stream is gone".into());
        }
        match rx.await {
            Ok(Ok(answer)) => Asked::Answered(answer),
            Ok(Err(error)) => Asked::Failed(error),
            Err(_) => Asked::Pending("the question was dropped before it was answered".into()),
        }
    }

    /// A client's message that is a JSON-RPC response (no `method`, an `id`, a `result` or an
    /// `error`): `Some(answered)` — whether it answered a question of `scope` waiting here;
    /// `None`: not a response.
    pub(crate) fn deliver(&self, body: &[u8], scope: &str) -> Option<bool> {
        // Cheap test first: every request has a method.
        let text = std::str::from_utf8(body).ok()?;
        if !text.contains("\"result\"") && !text.contains("\"error\"") {
            return None;
        }
        let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(text) else { return None };
        if message.contains_key("method") || !message.contains_key("id") {
            return None;
        }
        let answer = match (message.remove("result"), message.remove("error")) {
            (Some(result), None) => Ok(result),
            (None, Some(error)) => Err(format!(
                "it answered with an error: {}",
                error.get("message").and_then(Value::as_str).map_or_else(|| error.to_string(), str::to_owned)
            )),
            _ => return None,
        };
        let Some(id) = message.get("id").and_then(Value::as_str) else { return Some(false) };
        let Ok(mut questions) = self.questions.lock() else { return Some(false) };
        // Another session's question is as unknown as none.
        if questions.get(id).is_none_or(|(s, _)| s != scope) {
            return Some(false);
        }
        let (_, reply) = questions.remove(id)?;
        Some(reply.send(answer).is_ok())
    }
}

struct Forget<'a>(&'a Waiting, &'a str);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Ok(mut questions) = self.0.questions.lock() {
            questions.remove(self.1);
        }
    }
}

/// The question a `2026-07-28` call could not answer from its `inputResponses`: the step's
/// name (the key the client answers under) and the `elicitation/create` request.
pub(crate) type Unanswered = Arc<Mutex<Option<(String, Value)>>>;

/// A `2026-07-28` call's [`Ask`]: the answer under the step's name in `responses`, else the
/// question noted in `unanswered` for the `input_required` result.
pub(crate) fn stateless_asker(responses: Map<String, Value>, unanswered: Unanswered) -> Ask {
    let responses = Arc::new(responses);
    Ask::new(move |q: Question| {
        // Asked again (the answer did not fit): the answer in this request is that one.
        let answer = if q.again.is_some() { None } else { responses.get(&q.step).cloned() };
        let unanswered = unanswered.clone();
        Box::pin(async move {
            if let Some(answer) = answer {
                return Asked::Answered(answer);
            }
            let params = json!({ "mode": "form", "message": message(&q), "requestedSchema": q.schema });
            let request = json!({ "method": "elicitation/create", "params": params });
            if let Ok(mut slot) = unanswered.lock() {
                *slot = Some((q.step, request));
            }
            Asked::Pending("its answer comes with the next call, in inputResponses".into())
        })
    })
}

/// The text the user is shown: the question, and why it is asked again if it is.
fn message(q: &Question) -> String {
    match &q.again {
        None => q.message.clone(),
        Some(why) => format!("{} ({why}: please answer again)", q.message),
    }
}

/// The `input_required` result naming the question of `unanswered`, if it has one.
pub(crate) fn input_required(unanswered: &Unanswered) -> Option<String> {
    let (step, request) = unanswered.lock().ok()?.take()?;
    let mut requests = Map::new();
    requests.insert(step, request);
    Some(json!({ "resultType": "input_required", "inputRequests": requests }).to_string())
}

/// Whether a `2026-07-28` request's `clientCapabilities` declare `elicitation` (form mode: an
/// object, empty or with `form`).
pub(crate) fn declared(capabilities: Option<&serde_json::value::RawValue>) -> bool {
    let Some(raw) = capabilities else { return false };
    let Ok(Value::Object(c)) = serde_json::from_str::<Value>(raw.get()) else { return false };
    c.get("elicitation").is_some_and(form_mode)
}

/// An `elicitation` capability that takes form questions: `{}` or one naming `form`.
pub(crate) fn form_mode(capability: &Value) -> bool {
    match capability.as_object() {
        Some(c) => c.is_empty() || c.contains_key("form"),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_question_is_sent_and_answered_by_its_sessions_response_only() {
        let waiting = Arc::new(Waiting::default());
        let (outbox, mut sent) = Outbox::channel();
        let ask = waiting.asker(outbox, Arc::from("s-1"), "2025-11-25");
        let question = Question {
            step: "size".into(),
            message: "Which?".into(),
            schema: json!({"type":"object"}),
            again: None,
        };
        let asking = tokio::spawn(async move { ask.ask(question).await });
        let request: Value = serde_json::from_slice(&sent.recv().await.unwrap()).unwrap();
        assert_eq!(
            (request["method"].as_str(), request["params"]["mode"].as_str()),
            (Some("elicitation/create"), Some("form"))
        );
        let id = request["id"].as_str().unwrap();
        let answer =
            json!({"jsonrpc":"2.0","id":id,"result":{"action":"accept","content":{"s":"M"}}}).to_string();
        assert_eq!(waiting.deliver(answer.as_bytes(), "s-2"), Some(false), "another session's");
        assert_eq!(waiting.deliver(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, "s-1"), None);
        assert_eq!(waiting.deliver(answer.as_bytes(), "s-1"), Some(true));
        match asking.await.unwrap() {
            Asked::Answered(a) => assert_eq!(a["action"], "accept"),
            other => panic!("{other:?}"),
        }
        assert!(waiting.questions.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_stateless_call_answers_from_input_responses_or_names_the_question() {
        let slot = Unanswered::default();
        let q = || Question {
            step: "size".into(),
            message: "Which?".into(),
            schema: json!({"type":"object"}),
            again: None,
        };
        let ask = stateless_asker(Map::new(), slot.clone());
        assert!(matches!(ask.ask(q()).await, Asked::Pending(_)));
        let result: Value = serde_json::from_str(&input_required(&slot).unwrap()).unwrap();
        assert_eq!(result["resultType"], "input_required");
        assert_eq!(result["inputRequests"]["size"]["method"], "elicitation/create");
        let mut answers = Map::new();
        answers.insert("size".into(), json!({"action":"decline"}));
        assert!(matches!(stateless_asker(answers, slot).ask(q()).await, Asked::Answered(_)));
    }
}
