//! Response serialisation. Ids are written back as the exact bytes received; results are
//! already-serialised JSON. Nothing is re-encoded.

use serde_json::value::RawValue;

use crate::error::RpcError;
use crate::request::Id;

/// The outcome of one request: a result or an error (never both).
#[derive(Debug, Clone)]
pub enum Outcome {
    Result(Box<RawValue>),
    Error(RpcError),
}

impl PartialEq for Outcome {
    /// Byte equality of the serialised outcome.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Outcome::Result(a), Outcome::Result(b)) => a.get() == b.get(),
            (Outcome::Error(a), Outcome::Error(b)) => a == b,
            _ => false,
        }
    }
}

impl Outcome {
    pub fn is_error(&self) -> bool {
        matches!(self, Outcome::Error(_))
    }

    /// The JSON text that goes after `"result":` or `"error":`.
    pub fn body_json(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Outcome::Result(r) => std::borrow::Cow::Borrowed(r.get()),
            Outcome::Error(e) => std::borrow::Cow::Owned(e.to_json().get().to_owned()),
        }
    }
}

/// `{"jsonrpc":"2.0","result":…,"id":…}`
pub fn write_result(out: &mut Vec<u8>, id: Option<Id<'_>>, result: &RawValue) {
    write_result_text(out, id, result.get());
}

/// [`write_result`] of a result that is JSON text already (the caller wrote it: nothing
/// checks it again).
pub fn write_result_text(out: &mut Vec<u8>, id: Option<Id<'_>>, result: &str) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"result\":");
    out.extend_from_slice(result.as_bytes());
    write_id_and_close(out, id);
}

/// `{"jsonrpc":"2.0","error":{…},"id":…}`; `id` `None` is written as `null`.
pub fn write_error(out: &mut Vec<u8>, id: Option<Id<'_>>, error: &RpcError) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"error\":");
    error.write_json(out);
    write_id_and_close(out, id);
}

/// Either of the above.
pub fn write_outcome(out: &mut Vec<u8>, id: Option<Id<'_>>, outcome: &Outcome) {
    match outcome {
        Outcome::Result(r) => write_result(out, id, r),
        Outcome::Error(e) => write_error(out, id, e),
    }
}

/// A whole single-error body (parse errors, batch-level rejections): `id` is `null`.
pub fn error_body(error: &RpcError) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    write_error(&mut out, None, error);
    out
}

fn write_id_and_close(out: &mut Vec<u8>, id: Option<Id<'_>>) {
    out.extend_from_slice(b",\"id\":");
    out.extend_from_slice(id.map_or("null", |i| i.raw()).as_bytes());
    out.push(b'}');
}
