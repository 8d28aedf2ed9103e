//! The values a lease is made of, each constructed only through its checks.

use std::fmt;

use rand::RngCore;

use crate::name::LockName;
use crate::validation::{check_visible, ValidationError};

mod check;
mod seen;

pub use check::FenceCheck;
pub use seen::{Blockers, Holder, LockStatus, MAX_SHOWN_BLOCKERS, MAX_SHOWN_HOLDERS};

/// A lease duration in milliseconds, at least 1 and never "forever".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ttl(u64);

impl Ttl {
    /// Accepts `ms` in `1..=max_ms`; the error names `field`.
    pub fn parse(field: &'static str, ms: u64, max_ms: u64) -> Result<Self, ValidationError> {
        Self::parse_under(field, ms, max_ms, "the configured maximum")
    }

    /// Accepts `ms` in `1..=max_ms`, where `max_ms` comes from the setting
    /// `setting`, which a refusal names so the caller knows what limits it.
    pub fn parse_under(
        field: &'static str,
        ms: u64,
        max_ms: u64,
        setting: &'static str,
    ) -> Result<Self, ValidationError> {
        if ms == 0 {
            return Err(ValidationError::new(field, "must be at least 1"));
        }
        if ms > max_ms {
            return Err(ValidationError::new(
                field,
                format!("must be at most {max_ms} ({setting})"),
            ));
        }
        Ok(Self(ms))
    }

    /// The duration in milliseconds.
    pub fn as_millis(self) -> u64 {
        self.0
    }
}

/// How long a lock stays unavailable after a lease *expires* (not after a
/// release), so a stalled holder can notice before the next one starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockDelay(u64);

impl LockDelay {
    /// Accepts `ms` in `0..=max_ms`.
    pub fn parse(ms: u64, max_ms: u64) -> Result<Self, ValidationError> {
        if ms > max_ms {
            return Err(ValidationError::new(
                "lock_delay_ms",
                format!("must be at most {max_ms} (locks.max_lock_delay_ms)"),
            ));
        }
        Ok(Self(ms))
    }

    /// The delay in milliseconds.
    pub fn as_millis(self) -> u64 {
        self.0
    }
}

/// A fence number: strictly greater than every fence issued before it for the
/// same lock, and below 2^53 so JSON readers in every language keep it exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(u64);

impl Fence {
    /// Wraps a fence read back from the store.
    pub fn new(value: u64) -> Self {
        Self(value)
    }

    /// The fence as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a lease allows beside it: it decides who else may hold the name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LeaseKind {
    /// A lock's only lease: nothing else holds the lock meanwhile.
    #[default]
    Exclusive,
    /// One of a lock's shared leases: they coexist, and no exclusive lease
    /// is granted while any is valid.
    Shared,
    /// One of a semaphore's permits: at most its limit are valid at once.
    Permit,
}

impl LeaseKind {
    /// The kind as the API names it: `exclusive`, `shared` or `permit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Shared => "shared",
            Self::Permit => "permit",
        }
    }

    /// The kind as metrics label it: `lock`, `shared` or `semaphore`.
    pub fn metric_label(self) -> &'static str {
        match self {
            Self::Exclusive => "lock",
            Self::Shared => "shared",
            Self::Permit => "semaphore",
        }
    }

    /// How a token of this kind begins, so that a token sent to the wrong
    /// route is told apart without asking the store. An exclusive token
    /// is bare hex, as it always was.
    fn token_prefix(self) -> &'static str {
        match self {
            Self::Exclusive => "",
            Self::Shared => "r-",
            Self::Permit => "s-",
        }
    }
}

/// Bytes of randomness in a lease token (128 bits).
const TOKEN_BYTES: usize = 16;

/// What a lease token under a session starts with, before its kind's prefix.
const UNDER_SESSION: &str = "u-";

/// The secret that proves a caller holds a lease.
///
/// `Debug` and `Display` print a redaction, so a token cannot reach a log line
/// by accident; only [`LeaseToken::expose`] yields the text.
#[derive(Clone, PartialEq, Eq)]
pub struct LeaseToken(String);

impl LeaseToken {
    /// A fresh token: 128 bits from a CSPRNG, as lowercase hex ([`random_hex`]).
    pub fn generate() -> Self {
        Self(random_hex::<TOKEN_BYTES>())
    }

    /// A fresh token for a lease of `kind`, which [`LeaseToken::kind`] reads back.
    pub fn generate_for(kind: LeaseKind) -> Self {
        match kind {
            LeaseKind::Exclusive => Self::generate(),
            _ => Self(format!(
                "{}{}",
                kind.token_prefix(),
                random_hex::<TOKEN_BYTES>()
            )),
        }
    }

    /// A fresh token for a lease of `kind` taken under a session, which
    /// [`LeaseToken::is_under_session`] reads back: such a lease is renewed
    /// only by its session's keepalives, never extended on its own.
    pub fn generate_under_session(kind: LeaseKind) -> Self {
        Self(format!("{UNDER_SESSION}{}", Self::generate_for(kind).0))
    }

    /// Whether this token was made for a lease under a session.
    pub fn is_under_session(&self) -> bool {
        self.0.starts_with(UNDER_SESSION)
    }

    /// The kind of lease this token was made for.
    pub fn kind(&self) -> LeaseKind {
        let text = self.0.strip_prefix(UNDER_SESSION).unwrap_or(&self.0);
        [LeaseKind::Shared, LeaseKind::Permit]
            .into_iter()
            .find(|kind| text.starts_with(kind.token_prefix()))
            .unwrap_or(LeaseKind::Exclusive)
    }

    /// Accepts a token sent back by a caller: exactly the shape
    /// [`LeaseToken::generate_for`] makes (an optional kind prefix, then 32
    /// lowercase hex digits), so a mistyped or altered token is told apart
    /// from a lease that was lost. The error never repeats the input.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        if raw.is_empty() {
            return Err(ValidationError::new("token", "must not be empty"));
        }
        let kinded = raw.strip_prefix(UNDER_SESSION).unwrap_or(raw);
        let digits = [LeaseKind::Shared, LeaseKind::Permit]
            .into_iter()
            .find_map(|kind| kinded.strip_prefix(kind.token_prefix()))
            .unwrap_or(kinded);
        let issued = digits.len() == TOKEN_BYTES * 2
            && digits
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !issued {
            return Err(ValidationError::new(
                "token",
                "is not a token this broker issued (32 lowercase hex digits, after `r-` for \
                 a shared lease or `s-` for a permit, and `u-` before those for a lease under \
                 a session): send the token of the acquire's answer unchanged",
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The secret text, for the acquirer's response and the store only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The wall clock in Unix microseconds (0 for a clock set before 1970).
pub fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

/// `N` bytes from the thread's CSPRNG (ChaCha, seeded and reseeded from the
/// operating system's) as lowercase hex: a token costs no system call.
pub fn random_hex<const N: usize>() -> String {
    let mut bytes = [0u8; N];
    rand::thread_rng().fill_bytes(&mut bytes);
    let mut text = String::with_capacity(N * 2);
    for byte in bytes {
        text.push(HEX[usize::from(byte >> 4)] as char);
        text.push(HEX[usize::from(byte & 0x0f)] as char);
    }
    text
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseToken(<redacted>)")
    }
}

/// A free-form label of who holds a lease, shown to other callers and operators.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner(Box<str>);

/// The longest owner label accepted, in characters.
pub const MAX_OWNER_LEN: usize = 256;

impl Owner {
    /// Accepts up to 256 characters without control characters.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        check_text("owner", raw, MAX_OWNER_LEN).map(|text| Self(text.into()))
    }

    /// The label as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A caller-chosen idempotency key: an acquire retried with the same one gets the
/// lease it already holds instead of `lock_busy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestId(Box<str>);

/// The longest request id accepted, in characters.
pub const MAX_REQUEST_ID_LEN: usize = 128;

impl RequestId {
    /// Accepts 1 to 128 characters without control characters.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        if raw.is_empty() {
            return Err(ValidationError::new("request_id", "must not be empty"));
        }
        check_text("request_id", raw, MAX_REQUEST_ID_LEN).map(|text| Self(text.into()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Free text a caller chooses for `field`: at most `max_len` characters and
/// no hidden characters (see [`check_visible`]).
fn check_text(field: &'static str, raw: &str, max_len: usize) -> Result<String, ValidationError> {
    if raw.chars().count() > max_len {
        return Err(ValidationError::new(
            field,
            format!("must be at most {max_len} characters"),
        ));
    }
    check_visible(field, raw)?;
    Ok(raw.to_owned())
}

/// Who asked for a lease, as far as `request_id` retries are concerned: a
/// retry gets the lease back only when it comes from the same principal.
///
/// With API keys this is the key's id. Without keys every caller is the same
/// anonymous principal, so a `request_id` (with the owner) is all that tells
/// one caller's retry from another caller's acquire.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Principal(String);

impl Principal {
    /// The anonymous principal of a broker without API keys.
    pub const ANONYMOUS: Self = Self(String::new());

    /// The principal of the API key with this id.
    pub fn key(id: &str) -> Self {
        Self(id.to_owned())
    }

    /// The principal as stored beside a lease; empty for anonymous.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The principal [`Principal::as_str`] stored (empty for anonymous).
    pub fn from_stored(text: &str) -> Self {
        Self(text.to_owned())
    }

    /// Whether this is the anonymous principal of a broker without API keys.
    pub fn is_anonymous(&self) -> bool {
        self.0.is_empty()
    }
}

/// A granted lease, as the acquirer sees it.
#[derive(Clone, Debug)]
pub struct Lease {
    /// The lock this lease holds.
    pub name: LockName,
    /// The secret that extends or releases the lease.
    pub token: LeaseToken,
    /// The fence to present to the protected resource.
    pub fence: Fence,
    /// How long the lease is valid from now, in milliseconds.
    pub ttl_ms: u64,
    /// When the lease expires, in Unix milliseconds of the store's clock.
    pub expires_at_ms: u64,
    /// How long the lease is sure to stay valid, in milliseconds: `ttl_ms`
    /// less what the store knows it may have lost (in quorum mode, the time
    /// the nodes took and the clock drift allowance). The service takes off
    /// the time the answer took to arrive.
    pub validity_ms: u64,
    /// The holder's label, if it gave one.
    pub owner: Option<String>,
}

/// A lease after a successful extend: same fence, new expiry.
#[derive(Clone, Debug)]
pub struct Renewal {
    /// The fence of the lease, unchanged by the extend.
    pub fence: Fence,
    /// How long the lease is valid from now, in milliseconds.
    pub ttl_ms: u64,
    /// When the lease now expires, in Unix milliseconds of the store's clock.
    pub expires_at_ms: u64,
    /// How long the lease is sure to stay valid, as for [`Lease::validity_ms`].
    pub validity_ms: u64,
    /// The holder's label, if it gave one.
    pub owner: Option<String>,
    /// For a permit: its semaphore's limit in force (a quorum needs it to
    /// know how many nodes must keep the permit).
    pub limit: Option<u32>,
}

#[cfg(test)]
mod tests;
