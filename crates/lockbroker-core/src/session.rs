//! Sessions: one heartbeat that keeps many leases.
//!
//! A session is itself an exclusive lease, on its id in a space of its own
//! ([`Space::Session`]), so it is granted, renewed, released and expires
//! with every guarantee a lease has in each mode. Beside it the store keeps
//! the session's record ([`LockStore::session_write`]): its terms (the TTL
//! each keepalive renews, the lock-delay of its leases) and the leases taken
//! under it, which a keepalive renews and a close releases.
//!
//! [`LockStore::session_write`]: crate::LockStore::session_write

use std::fmt;

use crate::lease::{random_hex, LeaseToken, LockDelay, Ttl};
use crate::name::{LockName, Space};
use crate::validation::ValidationError;

/// The bytes of a session id: 16 lowercase hex digits.
const ID_BYTES: usize = 8;

/// A session's id: 16 lowercase hex digits chosen by the broker. Not a
/// secret: it names the session in paths and events.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

impl SessionId {
    /// A fresh id.
    pub fn generate() -> Self {
        Self(random_hex::<ID_BYTES>())
    }

    /// Accepts an id as [`SessionId::generate`] makes them; the error names
    /// `id`.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        if is_hex(raw, ID_BYTES * 2) {
            Ok(Self(raw.to_owned()))
        } else {
            Err(ValidationError::new(
                "id",
                "is not a session id (16 lowercase hex digits, as the session's opening \
                 answered)",
            ))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name of the session's own lease.
    pub fn lease_name(&self) -> LockName {
        LockName::parse_in(Space::Session, &self.0).expect("a session id is a valid name")
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.0)
    }
}

/// What a session's holder presents to keep it, close it, or take leases
/// under it: `<id>.<secret>`, where the secret is the token of the
/// session's own lease. A secret like any lease token: never logged, never
/// in a URL, shown only to whoever opened the session.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionToken {
    id: SessionId,
    lease: LeaseToken,
}

impl SessionToken {
    /// The token of session `id`, whose own lease is `lease`'s.
    pub fn new(id: SessionId, lease: LeaseToken) -> Self {
        Self { id, lease }
    }

    /// Accepts a token as [`SessionToken::expose`] wrote it; the error names
    /// `field` and never repeats the input.
    pub fn parse(field: &'static str, raw: &str) -> Result<Self, ValidationError> {
        let refused = || {
            ValidationError::new(
                field,
                "is not a session token this broker issued (16 hex digits, `.`, 32 hex \
                 digits): send the token of the session's opening answer unchanged",
            )
        };
        let (id, secret) = raw.split_once('.').ok_or_else(refused)?;
        let id = SessionId::parse(id).map_err(|_| refused())?;
        if !is_hex(secret, 32) {
            return Err(refused());
        }
        let lease = LeaseToken::parse(secret).map_err(|_| refused())?;
        Ok(Self { id, lease })
    }

    /// The session this token keeps.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The token of the session's own lease.
    pub fn lease(&self) -> &LeaseToken {
        &self.lease
    }

    /// The secret text, for the opener's answer only.
    pub fn expose(&self) -> String {
        format!("{}.{}", self.id, self.lease.expose())
    }
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionToken({}.<redacted>)", self.id)
    }
}

fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What a session was opened with and every keepalive applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionTerms {
    /// The validity each keepalive gives the session and its leases.
    pub ttl: Ttl,
    /// The lock-delay of every lease taken under the session: how long its
    /// lock stays unavailable when the session expires rather than closes.
    pub lock_delay: LockDelay,
}

/// A lease taken under a session, as the session's record keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionMember {
    /// The lock or semaphore.
    pub name: LockName,
    /// The lease's token.
    pub token: LeaseToken,
}

/// What [`LockStore::session_write`](crate::LockStore::session_write) writes
/// into a session's record.
#[derive(Clone, Copy, Debug)]
pub enum SessionEntry<'a> {
    /// The session's terms, written once when it opens.
    Terms(SessionTerms),
    /// A lease taken under the session, refused once the record holds
    /// `max_members` leases.
    Member {
        /// The lease.
        member: &'a SessionMember,
        /// The most leases one session may hold.
        max_members: u32,
    },
}

/// The answer of [`LockStore::session_write`](crate::LockStore::session_write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionWrite {
    /// Written; the session's lease stays valid this long.
    Written {
        /// Milliseconds of validity left to the session's lease.
        valid_for_ms: u64,
        /// When the session's lease expires, Unix ms by the store's clock.
        expires_at_ms: u64,
    },
    /// The session is not open: its lease expired, was closed, or the token
    /// is not its. Nothing was written.
    NotOpen,
    /// The session holds as many leases as it may. Nothing was written.
    Full,
}

/// A session's record as the store holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionRecord {
    /// When read with the session's token: how long its lease stays valid,
    /// `None` when that token holds no valid lease.
    pub valid_for_ms: Option<u64>,
    /// When read with the session's token and it holds the session: the
    /// label its opener gave, if any.
    pub owner: Option<String>,
    /// The terms, `None` once the record is gone (the session ended long
    /// enough ago, or never opened).
    pub terms: Option<SessionTerms>,
    /// The leases taken under the session and not yet forgotten.
    pub members: Vec<SessionMember>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_token_carries_its_id_and_never_shows_its_secret() {
        let id = SessionId::generate();
        let token = SessionToken::new(id.clone(), LeaseToken::generate());
        let text = token.expose();
        let read = SessionToken::parse("session", &text).expect("own token");
        assert_eq!(read, token);
        assert_eq!(read.id(), &id);
        assert!(!format!("{token:?}").contains(token.lease().expose()));
        assert_eq!(id.lease_name().space(), Space::Session);
    }

    #[test]
    fn a_mistyped_session_token_is_refused_by_field_without_repeating_it() {
        let good = SessionToken::new(SessionId::generate(), LeaseToken::generate()).expose();
        for bad in [
            String::new(),
            good.replace('.', ""),
            format!("{good}0"),
            good.to_uppercase(),
            format!("r-{good}"),
        ] {
            let error = SessionToken::parse("session", &bad).expect_err("refused");
            assert_eq!(error.field, "session");
            assert!(bad.is_empty() || !error.message.contains(&bad));
        }
        assert_eq!(SessionId::parse("xyz").expect_err("bad").field, "id");
    }
}
