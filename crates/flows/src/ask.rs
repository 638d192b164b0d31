//! `ask` steps (SPEC §16): a step that asks the flow's client a question (MCP elicitation)
//! instead of calling an upstream. Its output is the client's answer, `{"action": "accept",
//! "content": {…}}`, journaled like any step's output (a retry or a take-over never asks
//! again) and given to the next step as its input. A decline or a cancel ends the flow with a
//! stored `-32012`; an error answer too.

use oncerpc_core::{Asked, Context, Question};
use oncerpc_protocol::{ErrorCode, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// `[[methods.steps]] ask = { message = "…", schema = { type = "object", properties = … } }`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AskStep {
    /// What the user is asked (MCP's `message`).
    pub message: String,
    /// The answer's shape (MCP's `requestedSchema`): an object whose properties are all
    /// primitive (string, number, integer, boolean, or an enum of strings). Absent: an empty
    /// object (a confirmation: accept or decline).
    #[serde(default = "empty_object")]
    pub schema: Value,
}

fn empty_object() -> Value {
    json!({ "type": "object", "properties": {} })
}

impl AskStep {
    /// What is wrong with this `ask`, for `check-config`; `None` when nothing is.
    pub fn problem(&self) -> Option<String> {
        if self.message.trim().is_empty() {
            return Some("ask.message must say what the user is asked".into());
        }
        let Some(schema) = self.schema.as_object() else {
            return Some("ask.schema must be an object schema (MCP's requestedSchema)".into());
        };
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Some("ask.schema must have type = \"object\"".into());
        }
        let properties = match schema.get("properties") {
            None => &Map::new(),
            Some(Value::Object(p)) => p,
            Some(_) => return Some("ask.schema.properties must be a table of properties".into()),
        };
        for (name, p) in properties {
            let kind = p.get("type").and_then(Value::as_str);
            let primitive = matches!(kind, Some("string" | "number" | "integer" | "boolean"));
            let string_enum =
                p.get("enum").and_then(Value::as_array).is_some_and(|e| e.iter().all(Value::is_string));
            if !primitive || p.get("properties").is_some() || p.get("items").is_some() {
                return Some(format!(
                    "ask.schema.properties.{name}: MCP asks only for primitive values (type = \"string\", \
                     \"number\", \"integer\" or \"boolean\"), no objects or arrays"
                ));
            }
            if p.get("enum").is_some() && (kind != Some("string") || !string_enum) {
                return Some(format!("ask.schema.properties.{name}: an enum is a list of strings"));
            }
        }
        match schema.get("required") {
            None => None,
            Some(Value::Array(r)) => r
                .iter()
                .find(|n| !n.as_str().is_some_and(|n| properties.contains_key(n)))
                .map(|n| format!("ask.schema.required: {n} is not one of its properties")),
            Some(_) => Some("ask.schema.required must be a list of property names".into()),
        }
    }

    /// The `elicitation/create` params of this question (form mode).
    pub fn params(&self) -> Value {
        json!({ "message": self.message, "requestedSchema": self.schema })
    }
}

/// Run an `ask` step: the client's accepted answer as the step's output.
pub(crate) async fn run(ctx: &Context, step: &str, ask: &AskStep) -> Result<String, RpcError> {
    let Some(asker) = &ctx.ask else { return Err(no_client(step)) };
    let mut again = None;
    // An answer that does not fit is asked for again (MCP: re-request what is missing), a
    // few times.
    for _ in 0..ROUNDS {
        let question = Question {
            step: step.to_owned(),
            message: ask.message.clone(),
            schema: ask.schema.clone(),
            again: again.take(),
        };
        let asked = asker.ask(question).await;
        tracing::info!(correlation_id = %ctx.correlation_id, step, asked = asked.label(), "flow step asked its client");
        match asked {
            Asked::Answered(answer) => match output(ask, &answer) {
                Ok((out, Action::Accept)) => return Ok(out),
                Ok((_, action)) => return Err(declined(step, action)),
                Err(why) => again = Some(why),
            },
            Asked::Pending(why) => return Err(pending(step, &why)),
            Asked::Failed(why) => return Err(unanswered(step, &why)),
        }
    }
    Err(pending(step, again.as_deref().unwrap_or("no answer fitted the question")))
}

/// How often one call asks a question whose answers do not fit.
const ROUNDS: usize = 3;

/// How a client answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Accept,
    Decline,
    Cancel,
}

/// The step's output for the client's `answer` (an `ElicitResult`), and its action; an
/// answer that is not one, or whose content does not fit the schema, is the error.
pub(crate) fn output(ask: &AskStep, answer: &Value) -> Result<(String, Action), String> {
    let action = match answer.get("action").and_then(Value::as_str) {
        Some("accept") => Action::Accept,
        Some("decline") => Action::Decline,
        Some("cancel") => Action::Cancel,
        _ => return Err("the answer's action must be accept, decline or cancel".into()),
    };
    if action != Action::Accept {
        let name = if action == Action::Decline { "decline" } else { "cancel" };
        return Ok((json!({ "action": name }).to_string(), action));
    }
    let content = match answer.get("content") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(c)) => c.clone(),
        Some(_) => return Err("an accepted answer's content must be an object".into()),
    };
    let properties = ask.schema.get("properties").and_then(Value::as_object);
    if let Some(required) = ask.schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !content.contains_key(name) {
                return Err(format!("the answer lacks {name:?}, which the question requires"));
            }
        }
    }
    for (name, value) in &content {
        let kind = properties.and_then(|p| p.get(name)).and_then(|p| p.get("type")).and_then(Value::as_str);
        let fits = match kind {
            Some("string") => value.is_string(),
            Some("number") => value.is_number(),
            Some("integer") => value.is_i64() || value.is_u64(),
            Some("boolean") => value.is_boolean(),
            // A member the question did not ask for is ignored (MCP: servers ignore extras).
            _ => true,
        };
        if !fits {
            return Err(format!("the answer's {name:?} is not a {}", kind.unwrap_or("value")));
        }
    }
    Ok((json!({ "action": "accept", "content": content }).to_string(), action))
}

/// The stored failure of a question the user declined or cancelled, for a model to read.
pub(crate) fn declined(step: &str, action: Action) -> RpcError {
    let (did, what) = match action {
        Action::Decline => ("declined", "decline"),
        _ => ("cancelled", "cancel"),
    };
    RpcError::with_message(
        ErrorCode::Declined,
        format!(
            "The user {did} the question of step {step:?}, so the tool stopped there and did nothing \
             after it. Calling it again with the same idempotency key gives this answer again; to ask \
             again, call it with force_retry: true (or a new idempotency key)."
        ),
    )
    .data(json!({ "step": step, "action": what }))
}

/// The stored failure of a question the client could not answer (an error response, or an
/// answer that is no `ElicitResult`).
pub(crate) fn unanswered(step: &str, why: &str) -> RpcError {
    RpcError::with_message(
        ErrorCode::Declined,
        format!("The client did not answer the question of step {step:?}: {why}. The tool stopped there."),
    )
    .data(json!({ "step": step }))
}

/// An execution that stops until its client answers (never stored).
pub(crate) fn pending(step: &str, why: &str) -> RpcError {
    RpcError::with_message(
        ErrorCode::InputRequired,
        format!(
            "Step {step:?} waits for the user's answer ({why}): call the tool again with the same \
             arguments and idempotency key to be asked again; the steps before it do not run again."
        ),
    )
    .data(json!({ "step": step }))
}

/// A flow run by a door that cannot ask (an event re-driven without its client).
pub(crate) fn no_client(step: &str) -> RpcError {
    RpcError::invalid_params(format!(
        "step {step:?} asks the caller a question (an `ask` step): this call has nobody to ask; call \
         the tool over MCP from a client that supports elicitation"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(schema: Value) -> AskStep {
        AskStep { message: "Which size?".into(), schema }
    }

    #[test]
    fn a_flat_object_of_primitives_is_a_question_and_nothing_else_is() {
        let ok = ask(json!({"type":"object","properties":{"size":{"type":"string","enum":["S","M"]},
            "n":{"type":"integer"}},"required":["size"]}));
        assert_eq!(ok.problem(), None);
        assert_eq!(ask(empty_object()).problem(), None);
        let nested = ask(json!({"type":"object","properties":{"a":{"type":"object","properties":{}}}}));
        assert!(nested.problem().unwrap().contains("primitive"));
        let array =
            ask(json!({"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}}}));
        assert!(array.problem().is_some());
        assert!(ask(json!({"type":"string"})).problem().is_some());
        assert!(ask(json!({"type":"object","properties":{},"required":["x"]})).problem().is_some());
        assert!(AskStep { message: " ".into(), schema: empty_object() }.problem().is_some());
    }

    #[test]
    fn answers_are_checked_against_the_question() {
        let q = ask(json!({"type":"object","properties":{"size":{"type":"string"}},"required":["size"]}));
        let (out, action) = output(&q, &json!({"action":"accept","content":{"size":"M"}})).unwrap();
        assert_eq!((out.as_str(), action), (r#"{"action":"accept","content":{"size":"M"}}"#, Action::Accept));
        assert_eq!(output(&q, &json!({"action":"decline"})).unwrap().1, Action::Decline);
        assert!(output(&q, &json!({"action":"accept","content":{}})).is_err(), "required");
        assert!(output(&q, &json!({"action":"accept","content":{"size":3}})).is_err(), "type");
        assert!(output(&q, &json!({"action":"maybe"})).is_err());
        assert!(output(&q, &json!("accept")).is_err());
    }
}
