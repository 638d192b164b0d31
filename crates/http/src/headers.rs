//! The names of the headers the doors read and write (SPEC §3, §4, §7, §15), in one place: the
//! doors and the OpenAPI document of `/openapi.json` use these.

/// Response header carrying the request's correlation id (SPEC §7).
pub const CORRELATION_HEADER: &str = "x-correlation-id";
/// Request/response header with the idempotency key (SPEC §3, §4).
pub const KEY_HEADER: &str = "x-idempotency-key";
/// The IETF draft's spelling, accepted on requests.
pub const IETF_KEY_HEADER: &str = "idempotency-key";
/// Response header with `new | processing | duplicate`.
pub const STATUS_HEADER: &str = "x-idempotency-status";
/// Request header asking to re-execute a failed command.
pub const FORCE_RETRY_HEADER: &str = "x-force-retry";
/// Request header with a tenant's API key (or `?key=`).
pub const API_KEY_HEADER: &str = "x-api-key";
/// Response header saying where the idempotency key came from: `client`, `derived`,
/// `hashed` (SPEC §15).
pub const KEY_SOURCE_HEADER: &str = "x-idempotency-key-source";
