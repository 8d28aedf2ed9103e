//! [`ValidationError`]: what every checked constructor returns, kept apart
//! from the other errors so that the value types depend on nothing else.

use std::borrow::Cow;

/// A request field that broke a rule; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// The field as the API spells it, e.g. `ttl_ms`.
    pub field: &'static str,
    /// What the rule is, phrased for the caller.
    pub message: Cow<'static, str>,
}

impl ValidationError {
    /// A rejection of `field` with a human-readable rule.
    pub fn new(field: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}
