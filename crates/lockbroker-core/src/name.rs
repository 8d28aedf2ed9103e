//! Lock names: the one place that decides what a valid name is.

use std::fmt;

use crate::error::ValidationError;

/// The longest lock name accepted, in characters (all of them ASCII).
pub const MAX_NAME_LEN: usize = 200;

/// A validated lock name: 1 to 200 characters of `A-Z a-z 0-9 . _ - :`.
///
/// The alphabet leaves out `{` and `}` so a name can sit inside a Redis Cluster
/// hash tag, and leaves out `*`, `?`, `[` so it is never a glob pattern when an
/// operator lists locks by prefix.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(String);

impl LockName {
    /// Checks `raw` against the name rules; the error names the `name` field.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        if raw.is_empty() {
            return Err(ValidationError::new("name", "must not be empty"));
        }
        if raw.len() > MAX_NAME_LEN {
            return Err(ValidationError::new(
                "name",
                format!("must be at most {MAX_NAME_LEN} characters"),
            ));
        }
        if let Some(bad) = raw.chars().find(|c| !is_name_char(*c)) {
            return Err(ValidationError::new(
                "name",
                format!("may contain only A-Z a-z 0-9 . _ - : (found {bad:?})"),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        for ok in ["a", "job-1", "billing:invoice.42", "A_B", &"x".repeat(200)] {
            assert_eq!(LockName::parse(ok).expect(ok).as_str(), ok);
        }
    }

    #[test]
    fn rejects_everything_else_naming_the_field() {
        let long = "x".repeat(201);
        for bad in [
            "",
            "a b",
            "{tag}",
            "a*",
            "a?",
            "é",
            "a/b",
            "a%2Fb",
            long.as_str(),
        ] {
            let err = LockName::parse(bad).expect_err(bad);
            assert_eq!(err.field, "name", "{bad}");
        }
    }
}
