//! How each answer becomes an [`Outcome`]: what the checker reads of it.

use lockbroker_api::{ErrorCode, ErrorDetail, HolderResponse, ReleaseAllResult};
use lockbroker_client::{Error, LostReason, VerbatimError};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::now_us;

/// What one lock request came back with.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Outcome {
    /// `200` to an acquire: a new lease.
    Granted {
        /// The lease's fence.
        fence: u64,
        /// Its validity from the grant, in ms.
        ttl_ms: u64,
        /// When it expires, Unix ms by the Redis clock.
        expires_at_ms: u64,
    },
    /// `200` to an extend.
    Renewed {
        /// The lease's fence (unchanged by an extend).
        fence: u64,
        /// The new remaining validity, in ms.
        ttl_ms: u64,
        /// The new expiry, Unix ms by the Redis clock.
        expires_at_ms: u64,
    },
    /// `200` to a release.
    Released {
        /// The released lease's fence.
        fence: u64,
    },
    /// `423`: another lease (or its lock-delay) holds the lock, or every
    /// permit is taken, or an earlier waiter is owed the name.
    Busy {
        /// The fence the answer names: the lease whose end lets the caller
        /// try again first, or the last fence issued when an earlier waiter
        /// is owed the name.
        fence: Option<u64>,
        /// The fences of the leases the answer says are in the way (its
        /// `holders`, and the named lease unless it stands for the queue).
        in_the_way: Vec<u64>,
    },
    /// `423` to an acquire-all, for a lock of it that was not the busy one:
    /// nothing was taken (the busy lock's own answer is [`Outcome::Busy`]).
    Refused,
    /// `409 lease_lost`: the token holds no valid lease.
    Lost,
    /// `200` to a status read.
    Status {
        /// Whether a valid lease (or permit) holds the name.
        held: bool,
        /// The last fence issued for the name.
        fence: Option<u64>,
        /// The fences of the leases the answer lists: the valid ones and
        /// those in their lock-delay. With shared leases or permits the last
        /// fence need not be a holder's, so only this list shows who holds.
        holders: Vec<u64>,
        /// Whether `holders` lists every valid lease (a long list is cut):
        /// only then does a lease missing from it prove it is not held.
        all_listed: bool,
    },
    /// Anything else: `status` 0 when no answer of the broker's API came
    /// (none at all, or one that is not its API).
    Failed {
        /// HTTP status, or 0 when there is none of the broker's.
        status: u16,
        /// `error.code` of the body, if any.
        code: String,
    },
}

impl Outcome {
    /// Whether the broker said it could not reach Redis (`503`), the one
    /// error a healthy broker gives under a store fault.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Failed { status: 503, .. })
    }
}

/// One request's outcome with its local send and receive times.
#[derive(Clone, Debug)]
pub struct Timed {
    /// Local clock when the request was sent, µs.
    pub send_us: i64,
    /// Local clock when the answer arrived, µs.
    pub recv_us: i64,
    /// The answer.
    pub outcome: Outcome,
}

/// `outcome`, answered now to a request sent at `send_us`.
pub(super) fn timed(send_us: i64, outcome: Outcome) -> Timed {
    Timed {
        send_us,
        recv_us: now_us(),
        outcome,
    }
}

/// A success body as `T`; `None` when it is not one.
pub(super) fn decode<T: DeserializeOwned>(body: Map<String, Value>) -> Option<T> {
    serde_json::from_value(Value::Object(body)).ok()
}

/// The outcome of a verbatim call that was not a success, with the
/// broker's error detail when it sent one: `Busy` on `423`, `Lost` on
/// `lease_lost`, else `Failed` with the answer's status (0 when no answer
/// of the broker's API came).
pub(super) fn refusal(error: VerbatimError) -> (Outcome, Option<ErrorDetail>) {
    let VerbatimError::Refused { status, error, .. } = error else {
        return (failed(0, None), None);
    };
    let detail: Option<ErrorDetail> = serde_json::from_value(Value::Object(error)).ok();
    let outcome = match (status, &detail) {
        (423, detail) => Outcome::Busy {
            fence: detail.as_ref().and_then(|e| e.fence),
            in_the_way: detail.as_ref().map(in_the_way).unwrap_or_default(),
        },
        (409, Some(detail)) if detail.code == ErrorCode::LeaseLost => Outcome::Lost,
        (status, detail) => failed(status, detail.as_ref().map(|e| e.code)),
    };
    (outcome, detail)
}

/// The outcome of a typed call's error: `Lost` when the broker said
/// `lease_lost`, else `Failed` with the status its code has (0 when no
/// answer of the broker's API came). Extends and status reads are never
/// busy.
pub(super) fn refused(error: &Error) -> Outcome {
    match error {
        Error::LeaseLost {
            reason: LostReason::LeaseLost,
        } => Outcome::Lost,
        error => {
            let code = error.code();
            failed(code.map_or(0, ErrorCode::status), code)
        }
    }
}

/// A success whose body is not the broker's API.
pub(super) fn not_the_api() -> Outcome {
    failed(0, None)
}

/// One lease's result in a release-all answer, as a single release of it
/// would have answered.
pub(super) fn release_result(result: ReleaseAllResult) -> Outcome {
    match result {
        ReleaseAllResult {
            released: true,
            fence: Some(fence),
            ..
        } => Outcome::Released { fence },
        ReleaseAllResult {
            error: Some(error), ..
        } if error.code == ErrorCode::LeaseLost => Outcome::Lost,
        ReleaseAllResult {
            error: Some(error), ..
        } => failed(error.code.status(), Some(error.code)),
        // Released without its fence, or not released without why: not
        // the broker's API.
        ReleaseAllResult { .. } => not_the_api(),
    }
}

/// A status answer's outcome: `valid` is how many valid leases it counts,
/// against which the listed `holders` are complete or cut.
pub(super) fn status_outcome(
    held: bool,
    fence: Option<u64>,
    holders: &[HolderResponse],
    valid: u64,
) -> Outcome {
    let listed_valid = holders.iter().filter(|h| h.expires_in_ms > 0).count();
    Outcome::Status {
        held,
        fence,
        holders: holders.iter().map(|h| h.fence).collect(),
        all_listed: u64::try_from(listed_valid).unwrap_or(u64::MAX) >= valid,
    }
}

/// The fences of the leases a `lock_busy` answer says are in the way. The
/// named holder is one of them unless it stands for an earlier waiter in
/// the queue: then it carries the last fence issued (perhaps of a lease
/// released since), no times and no holders. A broker that sends no
/// `holders` predates the queue stand-in, so its named holder is a lease.
pub(super) fn in_the_way(error: &ErrorDetail) -> Vec<u64> {
    let mut fences: Vec<u64> = error.holders.iter().flatten().map(|h| h.fence).collect();
    let named_is_lease = error.holders.is_none()
        || error.expires_in_ms.is_some_and(|ms| ms > 0)
        || error.available_in_ms.is_some_and(|ms| ms > 0);
    if let Some(fence) = error
        .fence
        .filter(|f| named_is_lease && !fences.contains(f))
    {
        fences.push(fence);
    }
    fences
}

pub(super) fn failed(status: u16, code: Option<ErrorCode>) -> Outcome {
    Outcome::Failed {
        status,
        code: code.map_or("", ErrorCode::as_str).to_owned(),
    }
}
