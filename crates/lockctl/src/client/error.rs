//! [`BrokerError`]: why a call did not return a success body, the exit code
//! that goes with it, and how it reads on stderr.

use std::fmt;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::exit;

/// Why a call did not return a success body.
#[derive(Debug)]
pub enum BrokerError {
    /// The broker answered with its `{"error": {...}}` body.
    Rejected {
        /// HTTP status.
        status: u16,
        /// The `error` object as sent (code, message, holder details).
        error: Map<String, Value>,
        /// The `Retry-After` header, if any.
        retry_after: Option<Duration>,
    },
    /// No answer: connection refused, reset, or timed out.
    Unreachable {
        /// The broker's base URL, without credentials.
        url: String,
        /// What happened, in words.
        cause: String,
    },
    /// The TLS handshake failed: an untrusted or wrong certificate, or a
    /// broker that does not speak TLS.
    Tls {
        /// The broker's base URL, without credentials.
        url: String,
        /// Why, in words.
        reason: String,
    },
    /// An answer that is not this API (wrong URL, a proxy's error page).
    Unexpected(String),
}

impl BrokerError {
    /// The broker's stable error code, or lockctl's own for failures with no answer.
    pub fn code(&self) -> &str {
        match self {
            Self::Rejected { error, .. } => error.get("code").and_then(Value::as_str).unwrap_or(""),
            Self::Unreachable { .. } => "broker_unreachable",
            Self::Tls { .. } => "tls_failure",
            Self::Unexpected(_) => "unexpected_reply",
        }
    }

    /// Whether the lock was not to be had now: held by another lease
    /// (`lock_busy`), or, in quorum mode, held by nobody while other
    /// acquires split the votes (`contended`); both end a wait the same way.
    pub fn is_busy(&self) -> bool {
        matches!(self.code(), "lock_busy" | "contended")
    }

    /// What a step over several leases (release-all) reports for one of
    /// them: the error object that lease's own call would have answered,
    /// with the HTTP status that goes with its code.
    pub fn of_lease(error: Map<String, Value>) -> Self {
        let status = error
            .get("code")
            .cloned()
            .and_then(|code| serde_json::from_value::<lockbroker_api::ErrorCode>(code).ok())
            .map_or(500, |code| code.status());
        Self::Rejected {
            status,
            error,
            retry_after: None,
        }
    }

    /// The exit code for this failure (see [`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        let status = match self {
            Self::Rejected { status, .. } => *status,
            Self::Unreachable { .. } | Self::Tls { .. } => return exit::UNAVAILABLE,
            Self::Unexpected(_) => return exit::SOFTWARE,
        };
        match self.code() {
            "lock_busy" | "contended" => exit::BUSY,
            "lease_lost" | "session_lost" => exit::LEASE_LOST,
            "max_hold_exceeded" => exit::MAX_HOLD,
            // A --limit other than the one in force is the caller's to fix,
            // like an invalid request: retrying the same command cannot help.
            "invalid_request"
            | "payload_too_large"
            | "unsupported_media_type"
            | "limit_conflict" => exit::USAGE,
            _ if status == 401 || status == 403 => exit::NO_PERMISSION,
            _ if self.is_transient() => exit::UNAVAILABLE,
            _ => exit::SOFTWARE,
        }
    }

    /// Worth retrying: no answer, or an answer that says "not now". A
    /// certificate that is not trusted now will not be trusted in a second.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Tls { .. } | Self::Unexpected(_) => false,
            // 429, 502, 503, 504.
            Self::Rejected { status, .. } => matches!(*status, 429 | 502 | 503 | 504),
        }
    }

    /// The `Retry-After` the broker asked for.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Rejected { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A number the error object carries, e.g. `expires_in_ms`.
    pub fn detail_u64(&self, key: &str) -> Option<u64> {
        match self {
            Self::Rejected { error, .. } => error.get(key).and_then(Value::as_u64),
            _ => None,
        }
    }

    /// A string the error object carries, e.g. `field`.
    pub fn detail_str(&self, key: &str) -> Option<&str> {
        match self {
            Self::Rejected { error, .. } => error.get(key).and_then(Value::as_str),
            _ => None,
        }
    }

    /// The error in the API's own shape, for `--json` output.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Rejected { error, .. } => json!({ "error": error }),
            other => json!({ "error": { "code": other.code(), "message": other.to_string() } }),
        }
    }
}

impl fmt::Display for BrokerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rejected { status, error, .. } => {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message");
                write!(f, "{message} ({}, HTTP {status})", self.code())?;
                match self.code() {
                    "lock_busy" => self.fmt_busy(f, error),
                    // The broker's message says how to ask in JSON; say it
                    // in lockctl's own terms too.
                    "limit_conflict" => match self.detail_u64("limit") {
                        Some(limit) => write!(
                            f,
                            "; the limit in force is {limit}: ask with --limit {limit}, or wait \
                             until no permit is held"
                        ),
                        None => Ok(()),
                    },
                    _ => Ok(()),
                }
            }
            Self::Unreachable { url, cause } => write!(f, "broker unreachable at {url}: {cause}"),
            Self::Tls { url, reason } => {
                write!(f, "TLS failure with the broker at {url}: {reason}")
            }
            Self::Unexpected(what) => write!(f, "unexpected answer: {what}"),
        }
    }
}

impl BrokerError {
    /// The details of a `lock_busy`: the lease whose end lets this caller try
    /// first, and, when several shared leases or permits stand in the way,
    /// how many (their list is in `--json`).
    fn fmt_busy(&self, f: &mut fmt::Formatter<'_>, error: &Map<String, Value>) -> fmt::Result {
        let owner = error
            .get("owner")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        write!(f, "; holder: owner {owner}")?;
        if let Some(fence) = self.detail_u64("fence") {
            write!(f, ", fence {fence}")?;
        }
        if let Some(ms) = self.detail_u64("available_in_ms") {
            write!(f, ", available in {ms} ms")?;
        }
        let in_the_way = error.get("holders").and_then(Value::as_array).map(Vec::len);
        if let Some(count) = in_the_way.filter(|count| *count > 1) {
            write!(f, "; {count} leases in the way")?;
        }
        if let Some(limit) = self.detail_u64("limit") {
            write!(f, "; semaphore limit {limit}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(status: u16, error: Value) -> BrokerError {
        let Value::Object(error) = error else {
            panic!("an object")
        };
        BrokerError::Rejected {
            status,
            error,
            retry_after: None,
        }
    }

    #[test]
    fn a_limit_conflict_is_bad_usage_and_names_the_limit_in_force() {
        let error = rejected(
            409,
            json!({"code": "limit_conflict", "message": "semaphore \"x\" has limit 3", "limit": 3}),
        );
        assert_eq!(error.exit_code(), exit::USAGE);
        let text = error.to_string();
        assert!(text.contains("limit_conflict, HTTP 409"), "{text}");
        assert!(text.contains("--limit 3"), "{text}");
    }

    #[test]
    fn lease_lost_keeps_its_own_exit_code_although_also_409() {
        let error = rejected(409, json!({"code": "lease_lost", "message": "gone"}));
        assert_eq!(error.exit_code(), exit::LEASE_LOST);
    }

    #[test]
    fn a_busy_semaphore_says_how_many_are_in_the_way_and_its_limit() {
        let error = rejected(
            423,
            json!({"code": "lock_busy", "message": "busy", "owner": null, "fence": 4,
                   "available_in_ms": 20, "limit": 2,
                   "holders": [{"owner": null, "fence": 3}, {"owner": "b", "fence": 4}]}),
        );
        assert_eq!(error.exit_code(), exit::BUSY);
        let text = error.to_string();
        assert!(
            text.contains("owner unknown, fence 4, available in 20 ms"),
            "{text}"
        );
        assert!(
            text.contains("2 leases in the way; semaphore limit 2"),
            "{text}"
        );
    }
}
