//! [`Error`]: every way a call can fail, typed by what the caller does next.
//!
//! The broker's `{"error": {...}}` body is read with the API crate's
//! [`ErrorResponse`] and its stable `code`, never by matching message text.
//! Nothing here carries a token or the API key: the broker's messages never
//! contain one, and transport errors are stripped of their URL.

use std::fmt;
use std::time::Duration;

use lockbroker_api::{ErrorCode, ErrorDetail, ErrorResponse, HolderResponse};

/// Why a lease ended without its holder releasing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LostReason {
    /// The broker said the token holds no valid lease (`lease_lost`): it
    /// expired there, or an operator force-released it.
    LeaseLost,
    /// The lease ran out by the local clock without a successful renewal
    /// (the broker unreachable, or refusing).
    Expired,
    /// The lease reached its maximum hold (the client's `max_hold`, or the
    /// broker's own `max_hold_exceeded`) and ran out.
    MaxHold,
    /// The session the lease was held under ended (`session_lost`): it
    /// expired, or was closed.
    SessionLost,
}

impl LostReason {
    /// The reason as the other clients name it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LeaseLost => "lease_lost",
            Self::Expired => "expired",
            Self::MaxHold => "max_hold",
            Self::SessionLost => "session_lost",
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What failed below HTTP, for [`Error::Transport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// No connection could be made.
    Connect,
    /// The exchange took longer than its timeout.
    Timeout,
    /// The TLS handshake failed (an untrusted or wrong certificate).
    Tls,
    /// The connection broke mid-exchange.
    Other,
}

/// Every way a call fails.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// `423 lock_busy`: other leases hold the lock (or all permits are taken)
    /// and the wait, if any, is over.
    Busy {
        /// For a step over several locks ([`Client::acquire_all`]), the lock
        /// that was busy; `None` for a single lock or semaphore.
        ///
        /// [`Client::acquire_all`]: crate::Client::acquire_all
        lock: Option<String>,
        /// Every lease in the way, the first to free first.
        holders: Vec<HolderResponse>,
        /// The label of the holder whose end lets this caller in first.
        owner: Option<String>,
        /// That holder's fence.
        fence: Option<u64>,
        /// How long until the lock can be acquired at the earliest.
        available_in: Option<Duration>,
        /// A semaphore's limit in force.
        limit: Option<u32>,
        /// The broker's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },
    /// The lease is gone: `409 lease_lost` from the broker, or a lease this
    /// client saw run out or reach its maximum hold.
    LeaseLost {
        /// Why.
        reason: LostReason,
    },
    /// This client released the lease: a released lease is never extended,
    /// and nothing is written under it.
    Released,
    /// `409 max_hold_exceeded`: the broker will not extend this lease further.
    MaxHoldExceeded {
        /// How long the lease stays valid without the extension.
        expires_in: Option<Duration>,
    },
    /// `409 contended` (quorum mode): no lease holds the lock, but other
    /// acquires in flight split the nodes' votes and none won; try again.
    Contended {
        /// The broker's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },
    /// `409 limit_conflict`: the semaphore's permits are held under another limit.
    LimitConflict {
        /// The limit in force: ask with it, or wait until no permit is held.
        limit: Option<u32>,
    },
    /// `429 too_many_streams`: the broker serves as many event streams as it allows.
    TooManyStreams {
        /// When to try again.
        retry_after: Option<Duration>,
    },
    /// Not now: `503` (Redis unreachable, draining, overloaded), `429` for
    /// waiters or a rate limit, `408`, `500`, or a 5xx from something in front.
    Unavailable {
        /// The broker's code, when it answered with its error body.
        code: Option<ErrorCode>,
        /// What went wrong, for people.
        message: String,
        /// When to try again, from `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// The request broke a rule: `400` (with the offending `field`), `404`,
    /// `405`, `413`, `414`, `415`, `431`, or `409 session_full`. Retrying the
    /// same request cannot help.
    Validation {
        /// The broker's code.
        code: ErrorCode,
        /// The request field that broke a rule (`name`, `ttl_ms`, `token`...).
        field: Option<String>,
        /// What went wrong, for people.
        message: String,
    },
    /// `401 unauthorized`: no API key, or one the broker does not accept.
    Unauthorized {
        /// Which of the two, for people.
        message: String,
    },
    /// `403 forbidden`: the API key lacks the scope or the name's prefix.
    Forbidden {
        /// What the key may not do, for people.
        message: String,
    },
    /// No answer: the connection failed, timed out, or broke.
    Transport {
        /// What failed.
        kind: TransportKind,
        /// The innermost cause, in words, without the request's URL.
        message: String,
    },
    /// An answer that is not the broker's API (a proxy's page, a body that
    /// does not decode).
    Protocol {
        /// What was wrong with it.
        message: String,
    },
    /// The client was set up wrong (a bad base URL, CA certificate or key).
    Config {
        /// What is wrong.
        message: String,
    },
}

impl Error {
    /// Worth retrying the same request later: no answer, or an answer that
    /// says "not now". A certificate that is not trusted now will not be in
    /// a second, so a TLS failure is not.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Transport { kind, .. } => *kind != TransportKind::Tls,
            Self::Unavailable { .. } | Self::TooManyStreams { .. } | Self::Contended { .. } => true,
            _ => false,
        }
    }

    /// The broker's `Retry-After`, when it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Busy { retry_after, .. }
            | Self::TooManyStreams { retry_after }
            | Self::Contended { retry_after }
            | Self::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The broker's error code, when the error came with its body.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Busy { .. } => Some(ErrorCode::LockBusy),
            Self::LeaseLost {
                reason: LostReason::LeaseLost,
            } => Some(ErrorCode::LeaseLost),
            Self::LeaseLost {
                reason: LostReason::SessionLost,
            } => Some(ErrorCode::SessionLost),
            Self::MaxHoldExceeded { .. } => Some(ErrorCode::MaxHoldExceeded),
            Self::LimitConflict { .. } => Some(ErrorCode::LimitConflict),
            Self::Contended { .. } => Some(ErrorCode::Contended),
            Self::TooManyStreams { .. } => Some(ErrorCode::TooManyStreams),
            Self::Unauthorized { .. } => Some(ErrorCode::Unauthorized),
            Self::Forbidden { .. } => Some(ErrorCode::Forbidden),
            Self::Validation { code, .. } => Some(*code),
            Self::Unavailable { code, .. } => *code,
            _ => None,
        }
    }

    /// An answer with HTTP `status` and `body` that is not a success.
    pub(crate) fn from_answer(status: u16, retry_after: Option<Duration>, body: &[u8]) -> Self {
        let Ok(ErrorResponse { error }) = serde_json::from_slice::<ErrorResponse>(body) else {
            if status >= 500 {
                return Self::Unavailable {
                    code: None,
                    message: format!("HTTP {status} without the broker's error body"),
                    retry_after,
                };
            }
            return Self::Protocol {
                message: format!(
                    "HTTP {status} without the broker's error body; is the URL a lockbroker?"
                ),
            };
        };
        Self::from_detail(error, retry_after)
    }

    /// The error a broker's error detail stands for: a whole answer's, or
    /// one lease's within a step over several.
    pub(crate) fn from_detail(error: ErrorDetail, retry_after: Option<Duration>) -> Self {
        let ms = |value: Option<u64>| value.map(Duration::from_millis);
        match error.code {
            ErrorCode::LockBusy => Self::Busy {
                lock: error.lock,
                holders: error.holders.unwrap_or_default(),
                owner: error.owner.flatten(),
                fence: error.fence,
                available_in: ms(error.available_in_ms),
                limit: error.limit,
                retry_after,
            },
            ErrorCode::LeaseLost => Self::LeaseLost {
                reason: LostReason::LeaseLost,
            },
            ErrorCode::SessionLost => Self::LeaseLost {
                reason: LostReason::SessionLost,
            },
            ErrorCode::MaxHoldExceeded => Self::MaxHoldExceeded {
                expires_in: ms(error.expires_in_ms),
            },
            ErrorCode::LimitConflict => Self::LimitConflict { limit: error.limit },
            ErrorCode::Contended => Self::Contended { retry_after },
            ErrorCode::TooManyStreams => Self::TooManyStreams { retry_after },
            ErrorCode::Unauthorized => Self::Unauthorized {
                message: error.message,
            },
            ErrorCode::Forbidden => Self::Forbidden {
                message: error.message,
            },
            code @ (ErrorCode::InvalidRequest
            | ErrorCode::SessionFull
            | ErrorCode::NotFound
            | ErrorCode::MethodNotAllowed
            | ErrorCode::PayloadTooLarge
            | ErrorCode::UnsupportedMediaType
            | ErrorCode::UriTooLong
            | ErrorCode::HeadersTooLarge) => Self::Validation {
                code,
                field: error.field,
                message: error.message,
            },
            code @ (ErrorCode::TooManyWaiters
            | ErrorCode::RateLimited
            | ErrorCode::TooManySessions
            | ErrorCode::RequestTimeout
            | ErrorCode::BackendUnavailable
            | ErrorCode::ShuttingDown
            | ErrorCode::Overloaded
            | ErrorCode::Internal) => Self::Unavailable {
                code: Some(code),
                message: error.message,
                retry_after,
            },
        }
    }

    /// A reqwest failure, told by its innermost cause, never by its URL.
    pub(crate) fn transport(error: reqwest::Error) -> Self {
        let error = error.without_url();
        let tls = crate::tls::find_error(&error).is_some();
        let mut innermost: &(dyn std::error::Error + 'static) = &error;
        while let Some(next) = innermost.source() {
            innermost = next;
        }
        let kind = if error.is_timeout() {
            TransportKind::Timeout
        } else if tls {
            TransportKind::Tls
        } else if error.is_connect() {
            TransportKind::Connect
        } else {
            TransportKind::Other
        };
        let message = match kind {
            TransportKind::Timeout => "timed out".to_owned(),
            _ => innermost.to_string(),
        };
        Self::Transport { kind, message }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Busy {
                lock,
                holders,
                owner,
                available_in,
                ..
            } => {
                match lock {
                    Some(lock) => write!(f, "the lock {lock:?} is busy")?,
                    None => write!(f, "the lock is busy")?,
                }
                if let Some(owner) = owner {
                    write!(f, ", held by {owner:?}")?;
                }
                if holders.len() > 1 {
                    write!(f, " ({} leases in the way)", holders.len())?;
                }
                if let Some(wait) = available_in {
                    write!(f, ", free in {} ms", wait.as_millis())?;
                }
                Ok(())
            }
            Self::LeaseLost { reason } => write!(f, "the lease is lost ({reason})"),
            Self::Released => write!(f, "the lease was released"),
            Self::MaxHoldExceeded { .. } => {
                write!(
                    f,
                    "the broker will not extend the lease past its maximum hold"
                )
            }
            Self::LimitConflict { limit: Some(limit) } => {
                write!(f, "the semaphore's permits are held under limit {limit}")
            }
            Self::LimitConflict { limit: None } => {
                write!(f, "the semaphore's permits are held under another limit")
            }
            Self::TooManyStreams { .. } => {
                write!(f, "the broker serves as many event streams as it allows")
            }
            Self::Contended { .. } => write!(
                f,
                "no lease holds the lock, but other acquires split the votes; try again"
            ),
            Self::Unavailable { code, message, .. } => match code {
                Some(code) => write!(f, "the broker is unavailable ({code}): {message}"),
                None => write!(f, "the broker is unavailable: {message}"),
            },
            Self::Validation {
                code,
                field,
                message,
            } => match field {
                Some(field) => write!(f, "invalid request ({code}, field {field}): {message}"),
                None => write!(f, "invalid request ({code}): {message}"),
            },
            Self::Unauthorized { message } => write!(f, "unauthorized: {message}"),
            Self::Forbidden { message } => write!(f, "forbidden: {message}"),
            Self::Transport { kind, message } => match kind {
                TransportKind::Connect => write!(f, "cannot connect to the broker: {message}"),
                TransportKind::Timeout => write!(f, "the broker did not answer in time"),
                TransportKind::Tls => write!(f, "TLS failure with the broker: {message}"),
                TransportKind::Other => write!(f, "the connection to the broker broke: {message}"),
            },
            Self::Protocol { message } => write!(f, "unexpected answer: {message}"),
            Self::Config { message } => write!(f, "client setup: {message}"),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_maps_to_its_variant() {
        let body = br#"{"error":{"code":"lock_busy","message":"busy","owner":null,"fence":4,
            "available_in_ms":20,"holders":[{"owner":"a","fence":4,"mode":"exclusive",
            "expires_in_ms":20,"available_in_ms":20}]}}"#;
        let Error::Busy {
            holders,
            owner,
            fence,
            available_in,
            ..
        } = Error::from_answer(423, None, body)
        else {
            panic!("busy")
        };
        assert_eq!((holders.len(), owner, fence), (1, None, Some(4)));
        assert_eq!(available_in, Some(Duration::from_millis(20)));

        let one_of_several = br#"{"error":{"code":"lock_busy","message":"busy","owner":"a",
            "fence":4,"lock":"ledger:b"}}"#;
        let busy = Error::from_answer(423, None, one_of_several);
        assert!(
            matches!(&busy, Error::Busy { lock: Some(lock), .. } if lock == "ledger:b"),
            "{busy:?}"
        );
        assert!(
            busy.to_string()
                .starts_with(r#"the lock "ledger:b" is busy"#),
            "{busy}"
        );

        let bad = br#"{"error":{"code":"invalid_request","message":"m","field":"ttl_ms"}}"#;
        assert!(matches!(
            Error::from_answer(400, None, bad),
            Error::Validation { field: Some(f), .. } if f == "ttl_ms"
        ));
        let gone = br#"{"error":{"code":"lease_lost","message":"m"}}"#;
        assert!(matches!(
            Error::from_answer(409, None, gone),
            Error::LeaseLost {
                reason: LostReason::LeaseLost
            }
        ));
        let proxy = Error::from_answer(502, Some(Duration::from_secs(1)), b"<html>");
        assert!(proxy.is_transient(), "{proxy}");
        assert!(matches!(
            Error::from_answer(404, None, b"nope"),
            Error::Protocol { .. }
        ));
    }
}
