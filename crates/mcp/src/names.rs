//! Tool names a model API accepts.
//!
//! Model APIs (OpenAI's, Anthropic's) take tool names matching `^[a-zA-Z0-9_-]{1,64}$`, and the
//! agent frameworks pass an MCP tool's name to them unchanged. So by default
//! ([`ToolNames::ModelSafe`]) a method's tool is named with every other character made `_`
//! (`counter.increment` → `counter_increment`); the method's own name stays in the tool's
//! `_meta` ([`META_METHOD`]) and, when it has no title of its own, in its `title`. Two methods
//! whose tool names would be one, or a name over [`MAX_LEN`], is a [`ToolNameError`]: the
//! gateway refuses such a config at start. [`ToolNames::Method`] keeps the methods' own names,
//! for hosts that want them.
//!
//! A call may still name a tool by its method's own name (the names before this rule), for one
//! release: [`crate::Tools::get`] finds it by either.

use std::borrow::Cow;
use std::collections::HashMap;

/// `_meta` member of a listed tool: the method it calls (its own name, dots and all).
pub const META_METHOD: &str = "io.oncerpc/method";

/// The longest tool name model APIs accept.
pub const MAX_LEN: usize = 64;

/// How tools are named.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolNames {
    /// `^[a-zA-Z0-9_-]{1,64}$`: every other character of the method's name made `_`.
    #[default]
    ModelSafe,
    /// The method's own name, as it is (dots kept).
    Method,
}

/// Two methods with one tool name, or a tool name too long for model APIs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolNameError {
    #[error(
        "methods {first:?} and {second:?} would both be the MCP tool {name:?} (a tool name keeps \
         letters, digits, '_' and '-', and every other character becomes '_'): rename one of them, \
         keep one off MCP (mcp = false), or name tools by their methods ([mcp] tool_names = \"method\")"
    )]
    Clash { name: String, first: String, second: String },
    #[error(
        "method {method:?} would be the MCP tool {name:?}, {len} characters: model APIs take tool \
         names of at most {MAX_LEN}; shorten it, keep it off MCP (mcp = false), or name tools by \
         their methods ([mcp] tool_names = \"method\")",
        len = .name.len()
    )]
    TooLong { method: String, name: String },
}

/// Whether `name` is a tool name model APIs accept.
pub fn is_model_safe(name: &str) -> bool {
    (1..=MAX_LEN).contains(&name.len()) && name.bytes().all(allowed)
}

fn allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// `name` with every character outside `[a-zA-Z0-9_-]` made `_` (one `_` per character).
pub fn model_safe(name: &str) -> Cow<'_, str> {
    if name.bytes().all(allowed) {
        return Cow::Borrowed(name);
    }
    Cow::Owned(name.chars().map(|c| if c.is_ascii() && allowed(c as u8) { c } else { '_' }).collect())
}

impl ToolNames {
    /// The tool name of method (or re-exported tool) `method`.
    pub fn tool_name(self, method: &str) -> Result<String, ToolNameError> {
        match self {
            ToolNames::Method => Ok(method.to_owned()),
            ToolNames::ModelSafe => {
                let name = model_safe(method).into_owned();
                if name.len() > MAX_LEN {
                    return Err(ToolNameError::TooLong { method: method.to_owned(), name });
                }
                Ok(name)
            }
        }
    }

    /// The tool names of `methods`, in their order; the first clash or name too long is the
    /// error (naming both methods of a clash, in the order given).
    pub fn assign<'a>(
        self,
        methods: impl IntoIterator<Item = &'a str>,
    ) -> Result<Vec<String>, ToolNameError> {
        let mut seen: HashMap<String, &str> = HashMap::new();
        let mut names = Vec::new();
        for method in methods {
            let name = self.tool_name(method)?;
            if let Some(first) = seen.insert(name.clone(), method) {
                return Err(ToolNameError::Clash {
                    name,
                    first: first.to_owned(),
                    second: method.to_owned(),
                });
            }
            names.push(name);
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_safe_name_keeps_letters_digits_dash_and_underscore() {
        assert_eq!(model_safe("counter.increment"), "counter_increment");
        assert_eq!(model_safe("a-b_C9"), "a-b_C9");
        assert_eq!(model_safe("mail/send.v2"), "mail_send_v2");
        assert_eq!(model_safe("café"), "caf_", "one '_' per character, not per byte");
        for m in ["counter.increment", "x", "a.b.c-d_e"] {
            assert!(is_model_safe(&ToolNames::ModelSafe.tool_name(m).unwrap()), "{m}");
        }
        assert!(!is_model_safe("") && !is_model_safe("a.b") && !is_model_safe(&"a".repeat(65)));
        assert_eq!(ToolNames::Method.tool_name("counter.increment").unwrap(), "counter.increment");
    }

    #[test]
    fn a_clash_names_both_methods_and_a_long_name_is_refused() {
        let err = ToolNames::ModelSafe.assign(["a.b", "c", "a_b"]).unwrap_err();
        assert_eq!(
            err,
            ToolNameError::Clash { name: "a_b".into(), first: "a.b".into(), second: "a_b".into() }
        );
        let text = err.to_string();
        assert!(text.contains(r#""a.b""#) && text.contains(r#""a_b""#), "{text}");
        assert_eq!(ToolNames::Method.assign(["a.b", "a_b"]).unwrap(), ["a.b", "a_b"]);
        let long = format!("billing.{}", "x".repeat(57));
        assert!(matches!(ToolNames::ModelSafe.tool_name(&long), Err(ToolNameError::TooLong { .. })));
        assert!(ToolNames::ModelSafe.tool_name(&long[..64]).is_ok(), "64 is the limit");
        assert!(ToolNames::ModelSafe.tool_name(&long).unwrap_err().to_string().contains("65 characters"));
    }
}
