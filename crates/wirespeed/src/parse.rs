//! The error of every `FromStr` of the project's values (fabrics, transports, port ranges).

/// Text that names no value of its kind: a fabric, a transport, a port range, a platform.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {input:?}: expected {expected}")]
pub struct ParseError {
    /// What the text was to name ("fabric", "transport").
    pub what: &'static str,
    /// The text as given.
    pub input: String,
    /// What would do.
    pub expected: String,
}

impl ParseError {
    /// `input` does not name a `what`; `expected` says what would.
    pub fn new(what: &'static str, input: &str, expected: impl Into<String>) -> Self {
        ParseError { what, input: input.to_string(), expected: expected.into() }
    }
}
