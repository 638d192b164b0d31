//! # oncerpc-protocol
//!
//! JSON-RPC 2.0 on the wire, strictly (DESIGN §1), with no async and no I/O:
//!
//! * [`parse`] reads a body (single request or batch) in one pass, borrowing from the input;
//!   ids and params stay `&RawValue` slices so ids are echoed byte for byte.
//! * [`write_result`] / [`write_error`] serialise responses without re-encoding ids.
//! * [`ErrorCode`] / [`RpcError`] hold the whole error-code table of DESIGN §8.

mod error;
mod request;
mod response;

pub use error::{ErrorCode, RpcError};
pub use request::{Entry, Id, MAX_DEPTH, Message, Request, check_depth, parse, parse_str};
pub use response::{Outcome, error_body, write_error, write_outcome, write_result};
pub use serde_json::value::RawValue;
