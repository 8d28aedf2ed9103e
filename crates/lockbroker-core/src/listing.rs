//! Listing locks for operators: a name prefix, a page size and a cursor, each
//! checked once here, and the page a store hands back.

use crate::lease::LockStatus;
use crate::name::{LockName, LockPrefix, Space};
use crate::validation::ValidationError;

/// The largest page an operator may ask for.
pub const MAX_LIST_LIMIT: usize = 1_000;
/// The page size when the request names none.
pub const DEFAULT_LIST_LIMIT: usize = 100;

/// How many keys one page of a listing visits: 1 to [`MAX_LIST_LIMIT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListLimit(usize);

impl ListLimit {
    /// Accepts `1..=1000`; the error names `limit`.
    pub fn parse(raw: u64) -> Result<Self, ValidationError> {
        match usize::try_from(raw) {
            Ok(n) if (1..=MAX_LIST_LIMIT).contains(&n) => Ok(Self(n)),
            _ => Err(ValidationError::new(
                "limit",
                format!("must be between 1 and {MAX_LIST_LIMIT}"),
            )),
        }
    }

    /// The page size.
    pub fn get(self) -> usize {
        self.0
    }
}

impl Default for ListLimit {
    fn default() -> Self {
        Self(DEFAULT_LIST_LIMIT)
    }
}

/// Where a listing resumes: the opaque cursor of the previous page, `0` to start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListCursor(u64);

impl ListCursor {
    /// The start of a listing.
    pub const START: Self = Self(0);

    /// Accepts the decimal text a previous page returned (`0`, or up to 19
    /// digits without a leading zero); the error names `cursor`.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        let canonical = raw == "0"
            || (!raw.is_empty()
                && raw.len() <= 19
                && !raw.starts_with('0')
                && raw.bytes().all(|b| b.is_ascii_digit()));
        let invalid =
            || ValidationError::new("cursor", "must be the next_cursor of a previous page");
        if !canonical {
            return Err(invalid());
        }
        raw.parse().map(Self).map_err(|_| invalid())
    }

    /// Wraps a cursor the store produced.
    pub fn new(value: u64) -> Self {
        Self(value)
    }

    /// The cursor as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// One page to list.
#[derive(Clone, Debug, Default)]
pub struct ListRequest {
    /// Locks or semaphores.
    pub space: Space,
    /// Only names starting with this.
    pub prefix: LockPrefix,
    /// How many keys the page visits at most (a hint, as with Redis `SCAN`).
    pub limit: ListLimit,
    /// Where to resume.
    pub cursor: ListCursor,
}

/// A lock that is held or waiting out its lock-delay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockEntry {
    /// The lock.
    pub name: LockName,
    /// Its state at the moment it was read. Never a token.
    pub status: LockStatus,
}

/// One page of a listing.
#[derive(Clone, Debug, Default)]
pub struct LockPage {
    /// The locks found on this page, by name. May be empty even when more
    /// pages follow.
    pub locks: Vec<LockEntry>,
    /// Where the next page starts; `None` once the listing is complete.
    pub next_cursor: Option<ListCursor>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_cursors_are_checked() {
        assert!(ListLimit::parse(0).is_err());
        assert!(ListLimit::parse(1_001).is_err());
        assert!(ListLimit::parse(u64::MAX).is_err());
        assert_eq!(ListLimit::parse(1_000).map(ListLimit::get), Ok(1_000));
        assert_eq!(ListCursor::parse("42"), Ok(ListCursor::new(42)));
        assert_eq!(ListCursor::parse("0"), Ok(ListCursor::START));
        for bad in ["", "-1", "1.5", "abc", "99999999999999999999", " 1", "007"] {
            assert_eq!(ListCursor::parse(bad).expect_err(bad).field, "cursor");
        }
    }
}
