//! Why a document could not be imported: always naming the document and, where there is one,
//! the JSON pointer of the part at fault.

use std::fmt;

/// A document that cannot be imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenApiError {
    /// The `[[openapi]] name`.
    pub document: String,
    /// Where in the document (a JSON pointer, `""` for the whole of it).
    pub pointer: String,
    pub message: String,
    /// The document could not be fetched (a `spec` URL down): in dev mode a warning, not an
    /// error.
    pub unreachable: bool,
}

impl OpenApiError {
    pub(crate) fn at(document: &str, pointer: &str, message: impl Into<String>) -> OpenApiError {
        OpenApiError {
            document: document.to_owned(),
            pointer: pointer.to_owned(),
            message: message.into(),
            unreachable: false,
        }
    }
}

impl fmt::Display for OpenApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "openapi {:?}: {}", self.document, self.message)?;
        if !self.pointer.is_empty() {
            write!(f, " (at {})", self.pointer)?;
        }
        Ok(())
    }
}

impl std::error::Error for OpenApiError {}

/// `token` escaped for a JSON pointer (`~` → `~0`, `/` → `~1`).
pub(crate) fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}
