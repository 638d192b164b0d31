//! # oncerpc-protocol
//!
//! JSON-RPC 2.0 on the wire, strictly (SPEC §1), with no async and no I/O:
//!
//! * [`parse`] reads a body (single request or batch) in one pass, borrowing from the input;
//!   ids and params stay `&RawValue` slices so ids are echoed byte for byte.
//! * [`write_result`] / [`write_error`] serialise responses without re-encoding ids.
//! * [`ErrorCode`] / [`RpcError`] hold the whole error-code table of SPEC §8.
//! * [`check_key`] is the idempotency key's format (SPEC §3), shared by server and client.
//!
//! ```
//! use oncerpc_protocol::{Entry, Message, RawValue, parse, write_error, write_result};
//!
//! let body = br#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1.0}"#;
//! let Ok(Message::Single(Entry::Valid(request))) = parse(body) else { panic!("a valid request") };
//! assert_eq!(request.method, "subtract");
//! let (a, b): (i64, i64) = serde_json::from_str(request.params.unwrap().get()).unwrap();
//! let result = RawValue::from_string((a - b).to_string()).unwrap();
//! let mut out = Vec::new();
//! write_result(&mut out, request.id, &result);
//! assert_eq!(out, br#"{"jsonrpc":"2.0","result":19,"id":1.0}"#); // the id as it was sent
//!
//! // Every error carries an id: `null` when none could be read.
//! let error = parse(b"{\"jsonrpc\":").unwrap_err();
//! let mut out = Vec::new();
//! write_error(&mut out, None, &error);
//! assert!(out.starts_with(br#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error""#));
//! assert!(out.ends_with(br#""id":null}"#));
//! ```

mod error;
mod key;
mod request;
mod response;

pub use error::{ErrorCode, RpcError};
pub use key::{KeyFormatError, check_key};
pub use request::{Entry, Id, MAX_DEPTH, Message, Request, check_depth, parse, parse_str};
pub use response::{Outcome, error_body, write_error, write_outcome, write_result, write_result_text};
pub use serde_json::value::RawValue;
