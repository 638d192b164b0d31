//! The arguments of a tool whose method takes positional params ([`crate::schema`]): MCP
//! arguments are an object, so the tool takes the params as one array argument
//! (`{"values": [1, 2, 4]}` → `[1, 2, 4]`), beside the members every command tool has.

use std::collections::HashMap;

use oncerpc_protocol::{RawValue, RpcError};

/// The method's params, and the call's own members read from beside them.
#[derive(Debug)]
pub(crate) struct Positional {
    pub params: Box<RawValue>,
    /// `idempotency_key`, when sent.
    pub key: Option<String>,
    /// `force_retry: true`.
    pub force_retry: bool,
}

/// Read `arguments` (an object) of a tool whose params are its argument `argument`. Another
/// member, or the argument missing or not an array, is an invalid call naming it.
pub(crate) fn positional(arguments: &RawValue, argument: &str) -> Result<Positional, RpcError> {
    let invalid = |why: String| RpcError::invalid_params(format!("invalid arguments: {why}"));
    let members: HashMap<String, &RawValue> =
        serde_json::from_str(arguments.get()).map_err(|e| invalid(e.to_string()))?;
    let mut params = None;
    let mut key = None;
    let mut force_retry = false;
    for (name, value) in members {
        match name.as_str() {
            n if n == argument => params = Some(value),
            "idempotency_key" if value.get().trim() == "null" => {}
            "idempotency_key" => match serde_json::from_str::<String>(value.get()) {
                Ok(k) => key = Some(k),
                Err(_) => return Err(invalid("idempotency_key must be a string".into())),
            },
            "force_retry" => force_retry = value.get().trim() == "true",
            other => {
                return Err(invalid(format!(
                    "{} is not an argument of this tool: it takes {argument} (an array)",
                    oncerpc_core::LogSafe(other)
                )));
            }
        }
    }
    let params = params
        .filter(|p| p.get().trim_start().starts_with('['))
        .ok_or_else(|| invalid(format!("{argument} is required: the values, an array")))?;
    Ok(Positional { params: params.to_owned(), key, force_retry })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(arguments: &str) -> Result<Positional, RpcError> {
        positional(&RawValue::from_string(arguments.to_owned()).unwrap(), "values")
    }

    #[test]
    fn the_array_argument_is_the_params_byte_for_byte() {
        let p = read(r#"{"values":[1, 2.50, 4],"idempotency_key":"k-1","force_retry":true}"#).unwrap();
        assert_eq!(p.params.get(), "[1, 2.50, 4]");
        assert_eq!((p.key.as_deref(), p.force_retry), (Some("k-1"), true));
        let bare = read(r#"{"values":[]}"#).unwrap();
        assert_eq!((bare.key, bare.force_retry), (None, false));
    }

    #[test]
    fn a_missing_array_or_another_argument_is_refused_naming_it() {
        for (arguments, says) in [
            (r#"{}"#, "values is required"),
            (r#"{"values":5}"#, "values is required"),
            (r#"{"values":[1],"extra":1}"#, "extra is not an argument of this tool"),
            (r#"{"values":[1],"idempotency_key":7}"#, "idempotency_key must be a string"),
        ] {
            let e = read(arguments).unwrap_err();
            assert!(e.message.contains(says), "{arguments}: {}", e.message);
        }
    }
}
