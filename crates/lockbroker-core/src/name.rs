//! Lock names: the one place that decides what a valid name is.

use std::fmt;

use crate::validation::ValidationError;

/// The longest lock name accepted, in characters (all of them ASCII).
pub const MAX_NAME_LEN: usize = 200;

/// Names no lock may have: the routes over several locks take their place
/// under `/v1/locks/`.
pub const RESERVED_LOCK_NAMES: [&str; 2] = ["acquire-all", "release-all"];

/// Which namespace a name belongs to: locks (exclusive and shared leases)
/// and semaphores (permits) are apart, so a lock and a semaphore may share
/// a name without sharing any state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// `/v1/locks/{name}`.
    #[default]
    Lock,
    /// `/v1/semaphores/{name}`.
    Semaphore,
    /// `/v1/sessions/{id}`: a session is an exclusive lease on its id in
    /// a space of its own, which no lock route can name.
    Session,
}

impl Space {
    /// What one thing of this space is called in messages.
    pub fn noun(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Semaphore => "semaphore",
            Self::Session => "session",
        }
    }
}

/// Marks a semaphore's name where names of both spaces travel together (the
/// release announcements); `/` is outside the name alphabet.
const SEMAPHORE_MARK: &str = "s/";
/// Marks a session's id the same way.
const SESSION_MARK: &str = "session/";

/// A validated name of a lock or a semaphore: 1 to 200 characters of
/// `A-Z a-z 0-9 . _ - :`, in its [`Space`].
///
/// The alphabet leaves out `{` and `}` so a name can sit inside a Redis Cluster
/// hash tag, and leaves out `*`, `?`, `[` so it is never a glob pattern when an
/// operator lists locks by prefix.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName {
    space: Space,
    text: String,
}

impl LockName {
    /// Checks `raw` against the name rules for a lock; the error names the
    /// `name` field.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        Self::parse_in(Space::Lock, raw)
    }

    /// Checks `raw` against the name rules, as a name of `space`.
    pub fn parse_in(space: Space, raw: &str) -> Result<Self, ValidationError> {
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
        // `/v1/locks/acquire-all` and `/v1/locks/release-all` are routes.
        if space == Space::Lock && RESERVED_LOCK_NAMES.contains(&raw) {
            return Err(ValidationError::new(
                "name",
                format!("{raw:?} names a route over several locks, not a lock"),
            ));
        }
        Ok(Self {
            space,
            text: raw.to_owned(),
        })
    }

    /// The name as text, without its space.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this names a lock or a semaphore.
    pub fn space(&self) -> Space {
        self.space
    }

    /// The name with its space, as release announcements carry it: the text
    /// for a lock, `s/` and the text for a semaphore, `session/` and the id
    /// for a session.
    pub fn wire(&self) -> String {
        match self.space {
            Space::Lock => self.text.clone(),
            Space::Semaphore => format!("{SEMAPHORE_MARK}{}", self.text),
            Space::Session => format!("{SESSION_MARK}{}", self.text),
        }
    }

    /// Reads back what [`LockName::wire`] wrote.
    pub fn from_wire(raw: &str) -> Result<Self, ValidationError> {
        if let Some(text) = raw.strip_prefix(SEMAPHORE_MARK) {
            return Self::parse_in(Space::Semaphore, text);
        }
        match raw.strip_prefix(SESSION_MARK) {
            Some(text) => Self::parse_in(Space::Session, text),
            None => Self::parse(raw),
        }
    }
}

/// The start of lock names, for listing locks by family: 0 to 200 characters of
/// the lock name alphabet, so it can never be a glob pattern or leave its hash
/// tag. The empty prefix matches every name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockPrefix(String);

impl LockPrefix {
    /// Checks `raw` against the name alphabet; the error names `field`.
    pub fn parse(field: &'static str, raw: &str) -> Result<Self, ValidationError> {
        if raw.len() > MAX_NAME_LEN {
            return Err(ValidationError::new(
                field,
                format!("must be at most {MAX_NAME_LEN} characters"),
            ));
        }
        if let Some(bad) = raw.chars().find(|c| !is_name_char(*c)) {
            return Err(ValidationError::new(
                field,
                format!("may contain only A-Z a-z 0-9 . _ - : (found {bad:?})"),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The prefix as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `name` starts with this prefix.
    pub fn matches(&self, name: &LockName) -> bool {
        name.as_str().starts_with(&self.0)
    }

    /// Whether every name this prefix matches is also matched by `outer`.
    pub fn within(&self, outer: &LockPrefix) -> bool {
        self.0.starts_with(&outer.0)
    }
}

impl fmt::Display for LockPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.text
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
    fn prefixes_use_the_name_alphabet_and_may_be_empty() {
        let all = LockPrefix::parse("prefix", "").expect("empty");
        let billing = LockPrefix::parse("prefix", "billing:").expect("valid");
        let name = LockName::parse("billing:42").expect("valid");
        assert!(all.matches(&name) && billing.matches(&name));
        assert!(billing.within(&all) && !all.within(&billing));
        for bad in ["a*", "{", "a b", "é", &"x".repeat(201)] {
            assert_eq!(
                LockPrefix::parse("prefix", bad).expect_err(bad).field,
                "prefix"
            );
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

    #[test]
    fn a_lock_and_a_semaphore_of_one_name_are_apart_and_survive_the_wire() {
        let lock = LockName::parse("backups").expect("valid");
        let semaphore = LockName::parse_in(Space::Semaphore, "backups").expect("valid");
        let session = LockName::parse_in(Space::Session, "backups").expect("valid");
        assert_ne!(lock, semaphore);
        assert_ne!(lock, session);
        assert_eq!(lock.as_str(), semaphore.as_str());
        for name in [lock, semaphore, session] {
            assert_eq!(LockName::from_wire(&name.wire()).expect("wire"), name);
        }
        assert!(LockName::from_wire("s/a b").is_err());
    }
}
