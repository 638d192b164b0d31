//! `GET /openapi.json`: the REST doors as an OpenAPI 3.1 document, generated from the registry
//! the way `rpc.discover`'s OpenRPC document is (SPEC §21): `POST /v2/flows/{method}` for every
//! method, its params schema as the body; `GET /v2/events`, `GET /v2/events/{id}` and
//! `POST /v2/events/{id}/retry`; the idempotency headers; and every error body. The statuses an
//! error can have come from the error-code table (`ErrorCode::http_status`), not from here.

use std::collections::{BTreeSet, HashMap};

use oncerpc_core::Registry;

use crate::headers::{
    API_KEY_HEADER, CORRELATION_HEADER, FORCE_RETRY_HEADER, IETF_KEY_HEADER, KEY_HEADER, STATUS_HEADER,
};
use oncerpc_protocol::ErrorCode;
use serde_json::{Map, Value, json};

/// Statuses the doors answer themselves, besides the error-code table's: a bad body or query
/// (`400`), no or a wrong API key (`401`), an unknown flow or event (`404`), a body too slow
/// (`408`) or too large (`413`).
const DOOR_STATUSES: [u16; 5] = [400, 401, 404, 408, 413];

/// The document, methods in name order so it is stable; `flow_steps` (each flow's step names)
/// are the values `?return_step=` takes.
pub fn document(registry: &Registry, flow_steps: &HashMap<String, Vec<String>>, version: &str) -> Value {
    let mut paths = Map::new();
    let mut names: Vec<&str> = registry.names().into_iter().filter(|n| !n.starts_with("rpc.")).collect();
    names.sort_unstable();
    for name in names {
        let Some(spec) = registry.spec(name) else { continue };
        let body = spec.params_schema.clone().unwrap_or_else(|| json!({"type": "object"}));
        let mut op = json!({
            "operationId": format!("flow_{}", operation_id(name)),
            "summary": format!("{} {name}", spec.kind.as_str()),
            "tags": ["flows"],
            "parameters": [
                {"$ref": "#/components/parameters/Sync"},
                {"$ref": "#/components/parameters/Tags"},
                {"$ref": "#/components/parameters/IdempotencyKey"},
                {"$ref": "#/components/parameters/ForceRetry"},
            ],
            "requestBody": {"required": false, "content": {"application/json": {"schema": body}}},
            "responses": errors(json!({
                "200": {
                    "description": "With ?sync=true: the method's result ({} while the same key is still processing). Else the event submitted: {\"event_id\"}.",
                    "headers": idempotency_headers(),
                    "content": {"application/json": {"schema": {}}}
                }
            })),
        });
        if let Some(d) = &spec.description {
            op["description"] = json!(d);
        }
        if let Some(steps) = flow_steps.get(name).filter(|s| !s.is_empty())
            && let Some(params) = op["parameters"].as_array_mut()
        {
            params.push(json!({"name": "return_step", "in": "query",
                "description": "With ?sync=true: answer this step's output instead of the last step's",
                "schema": {"type": "string", "enum": steps}}));
        }
        if !spec.scopes.is_empty() {
            op["x-scopes"] = json!(spec.scopes);
        }
        paths.insert(format!("/v2/flows/{name}"), json!({ "post": op }));
    }
    paths.insert("/v2/events".into(), json!({"get": {
        "operationId": "events_list",
        "summary": "The tenant's events, newest first, a page at a time",
        "tags": ["events"],
        "parameters": [
            {"name": "status", "in": "query", "schema": {"type": "string", "enum": ["processing", "succeeded", "failed", "cancelled"]}},
            {"name": "flow", "in": "query", "schema": {"type": "string"}},
            {"name": "tag", "in": "query", "schema": {"type": "string"}},
            {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": crate::flows::MAX_LIST_LIMIT}},
            {"name": "cursor", "in": "query", "description": "next_cursor of the previous page, as it is", "schema": {"type": "string"}}
        ],
        "responses": errors(json!({"200": {"description": "A page of events", "content": {"application/json": {"schema": {
            "type": "object", "required": ["events", "next_cursor"],
            "properties": {
                "events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}},
                "next_cursor": {"type": ["string", "null"]}
            }}}}}})),
    }}));
    paths.insert("/v2/events/{event_id}".into(), json!({"get": {
        "operationId": "events_get",
        "summary": "One event: its status, steps and outcome",
        "tags": ["events"],
        "parameters": [{"$ref": "#/components/parameters/EventId"}],
        "responses": errors(json!({"200": {"description": "The event", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Event"}}}}})),
    }}));
    paths.insert("/v2/events/{event_id}/retry".into(), json!({"post": {
        "operationId": "events_retry",
        "summary": "Re-drive a failed event (409 unless it failed)",
        "tags": ["events"],
        "parameters": [{"$ref": "#/components/parameters/EventId"}],
        "responses": errors(json!({
            "202": {"description": "Re-driven", "content": {"application/json": {"schema": {
                "type": "object", "required": ["event_id", "status"],
                "properties": {"event_id": {"type": "string"}, "status": {"const": "processing"}}}}}},
            "409": {"description": "Not a failed event", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        })),
    }}));
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "oncerpc REST doors",
            "version": version,
            "description": "The flows door and the events API of this gateway: a command sent again with the same Idempotency-Key runs once and gets the stored outcome.",
        },
        "paths": paths,
        "security": [{}, {"bearer": []}, {"apiKey": []}],
        "components": components(),
    })
}

/// `name` as an operationId: `[A-Za-z0-9_]`, every other character `_`.
fn operation_id(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

/// `responses` with every error status a door can answer, each with the error body.
fn errors(mut responses: Value) -> Value {
    let mut statuses: BTreeSet<u16> = ErrorCode::TABLE.iter().map(|c| c.http_status()).collect();
    statuses.extend(DOOR_STATUSES);
    for status in statuses.into_iter().filter(|s| *s >= 400) {
        let key = status.to_string();
        if responses.get(&key).is_none() {
            responses[key] = json!({"$ref": "#/components/responses/Error"});
        }
    }
    responses
}

fn idempotency_headers() -> Value {
    json!({
        KEY_HEADER: {"description": "The key of the execution (a command's)", "schema": {"type": "string"}},
        STATUS_HEADER: {"description": "new, processing or duplicate", "schema": {"type": "string", "enum": ["new", "processing", "duplicate"]}},
        CORRELATION_HEADER: {"schema": {"type": "string"}}
    })
}

fn components() -> Value {
    json!({
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": "An API key or an access token"},
            "apiKey": {"type": "apiKey", "in": "header", "name": API_KEY_HEADER}
        },
        "parameters": {
            "Sync": {"name": "sync", "in": "query", "description": "true: answer the result; else submit an event", "schema": {"type": "string", "enum": ["true", "false", "1", "0"]}},
            "Tags": {"name": "tags", "in": "query", "description": "Comma-separated tags of the event", "schema": {"type": "string"}},
            "IdempotencyKey": {"name": IETF_KEY_HEADER, "in": "header", "description": format!("A command's key ({KEY_HEADER} too): sent again with it, the command runs once"), "schema": {"type": "string", "minLength": 1, "maxLength": 255}},
            "ForceRetry": {"name": FORCE_RETRY_HEADER, "in": "header", "description": "true: run a failed command again under its key", "schema": {"type": "string", "enum": ["true", "false"]}},
            "EventId": {"name": "event_id", "in": "path", "required": true, "schema": {"type": "string"}}
        },
        "responses": {
            "Error": {"description": "An error (the JSON-RPC error's code and data when it had them)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        },
        "schemas": {
            "Error": {
                "type": "object", "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string", "description": "The HTTP status"},
                    "message": {"type": "string"},
                    "rpc_code": {"type": "integer"},
                    "data": {},
                    "event_id": {"type": "string"},
                    "status": {"type": "string"}
                }
            },
            "Event": {
                "type": "object",
                "required": ["event_id", "flow", "status", "tags", "created_at", "updated_at", "steps"],
                "properties": {
                    "event_id": {"type": "string"},
                    "flow": {"type": "string"},
                    "status": {"type": "string", "enum": ["processing", "succeeded", "failed", "cancelled"]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "created_at": {"type": "string", "format": "date-time"},
                    "updated_at": {"type": "string", "format": "date-time"},
                    "created_by": {"type": ["string", "null"]},
                    "steps": {"type": "array", "items": {"type": "object", "required": ["name", "status", "attempts", "started_at"],
                        "properties": {"name": {"type": "string"}, "status": {"type": "string"}, "attempts": {"type": "integer"},
                            "started_at": {"type": "string"}, "finished_at": {"type": "string"}}}},
                    "result": {},
                    "error": {}
                }
            }
        }
    })
}
