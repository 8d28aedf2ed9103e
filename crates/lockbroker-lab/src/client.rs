//! [`BrokerClient`]: the steps the load takes, through the project's Rust
//! client ([`lockbroker_client`]), each answer reduced to an [`Outcome`] with
//! the local times it was sent and received; acquire-all and release-all
//! answer one outcome per lock they concern. Locks (exclusive or shared
//! leases) and semaphores (permits) take the same steps on routes of their
//! own; a [`LeaseKind`] or [`Family`] says which.
//!
//! Every step is one request, never retried, and no lease is renewed or
//! released behind the load's back: the checker must see every answer, and
//! only those. Acquires and releases, single or several at once, are sent
//! with [`Client::send_verbatim`], which keeps the broker's status and
//! error detail; extends and status reads are the client's typed calls.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockbroker_api::{
    AcquireAllBody, AcquireAllResponse, AcquireBody, ErrorCode, ErrorDetail, HolderResponse,
    LeaseRefBody, LeaseResponse, LockAskBody, LockMode, PermitResponse, ReleaseAllBody,
    ReleaseAllResponse, ReleaseAllResult, ReleaseBody, ReleaseResponse, RenewalResponse,
    SemaphoreAcquireBody,
};
use lockbroker_client::{Client, Error, Family, LeaseKind, LostReason, Route, VerbatimError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::history::family;

/// Microseconds since the Unix epoch by this machine's clock.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// What one lock request came back with.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// A client for one broker's lock and semaphore routes.
#[derive(Clone)]
pub struct BrokerClient {
    client: Client,
    timeout: Duration,
}

impl BrokerClient {
    /// A client for the broker at `base` (`http://host:port`) whose requests
    /// give up after `timeout` (a waiting acquire: after its wait too), or
    /// why there can be none.
    pub fn new(base: &str, timeout: Duration) -> Result<Self, String> {
        let client = Client::builder(base)
            .timeout(timeout)
            .user_agent(concat!("lockbroker-lab/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("a client of {base}: {e}"))?;
        Ok(Self { client, timeout })
    }

    /// The broker's base URL.
    pub fn base(&self) -> &str {
        self.client.base_url()
    }

    /// `POST /v1/locks/{lock}/acquire` of an exclusive lease; on a grant,
    /// the token comes back too.
    pub async fn acquire(&self, lock: &str, ttl_ms: u64, wait_ms: u64) -> (Timed, Option<String>) {
        self.acquire_kind(lock, LeaseKind::Exclusive, ttl_ms, wait_ms)
            .await
    }

    /// Acquires a lease of `kind` on `name`: `POST /v1/locks/{name}/acquire`
    /// (with `"mode": "shared"` for a shared lease; an exclusive one sends
    /// no mode, as before shared leases existed) or
    /// `POST /v1/semaphores/{name}/acquire` with the permit's limit. On a
    /// grant, the token comes back too.
    pub async fn acquire_kind(
        &self,
        name: &str,
        kind: LeaseKind,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> (Timed, Option<String>) {
        let route = Route::Acquire(family(kind), name);
        let mut token = None;
        let timed = match kind {
            LeaseKind::Exclusive | LeaseKind::Shared => {
                let body = AcquireBody {
                    mode: (kind == LeaseKind::Shared).then_some(LockMode::Shared),
                    ttl_ms: Some(ttl_ms),
                    wait_ms: Some(wait_ms),
                    ..AcquireBody::default()
                };
                self.once(route, &body, wait_ms, |lease: LeaseResponse| {
                    token = Some(lease.token);
                    Outcome::Granted {
                        fence: lease.fence,
                        ttl_ms: lease.ttl_ms,
                        expires_at_ms: lease.expires_at_ms,
                    }
                })
                .await
            }
            LeaseKind::Permit { limit } => {
                let body = SemaphoreAcquireBody {
                    limit: Some(u64::from(limit)),
                    ttl_ms: Some(ttl_ms),
                    wait_ms: Some(wait_ms),
                    ..SemaphoreAcquireBody::default()
                };
                self.once(route, &body, wait_ms, |permit: PermitResponse| {
                    token = Some(permit.token);
                    Outcome::Granted {
                        fence: permit.fence,
                        ttl_ms: permit.ttl_ms,
                        expires_at_ms: permit.expires_at_ms,
                    }
                })
                .await
            }
        };
        (timed, token)
    }

    /// `POST /v1/locks/{lock}/extend`.
    pub async fn extend(&self, lock: &str, token: &str, ttl_ms: u64) -> Timed {
        self.extend_in(Family::Locks, lock, token, ttl_ms).await
    }

    /// `POST /v1/{locks|semaphores}/{name}/extend`.
    pub async fn extend_in(&self, family: Family, name: &str, token: &str, ttl_ms: u64) -> Timed {
        let ttl = Duration::from_millis(ttl_ms);
        let send_us = now_us();
        let answer = match family {
            Family::Locks => self.client.extend(name, token, ttl).await,
            Family::Semaphores => self.client.extend_permit(name, token, ttl).await,
        };
        let outcome = match answer {
            Ok(RenewalResponse {
                fence,
                ttl_ms,
                expires_at_ms,
                ..
            }) => Outcome::Renewed {
                fence,
                ttl_ms,
                expires_at_ms,
            },
            Err(error) => refused(&error),
        };
        timed(send_us, outcome)
    }

    /// `POST /v1/locks/{lock}/release`.
    pub async fn release(&self, lock: &str, token: &str) -> Timed {
        self.release_in(Family::Locks, lock, token).await
    }

    /// `POST /v1/{locks|semaphores}/{name}/release`.
    pub async fn release_in(&self, family: Family, name: &str, token: &str) -> Timed {
        let route = Route::Release(family, name);
        let body = ReleaseBody::new(token);
        self.once(route, &body, 0, |release: ReleaseResponse| {
            Outcome::Released {
                fence: release.fence,
            }
        })
        .await
    }

    /// `POST /v1/locks/acquire-all` of a lease on every lock of `locks` (each
    /// exclusive or shared), or none: one answer per lock in the order
    /// asked, each with the request's times. A grant answers every lock
    /// `Granted` with its token; `423` answers the lock it names `Busy` and
    /// the others `Refused`; any other answer (none at all included) is the
    /// same `Failed` for every lock, whose outcome is unknown.
    pub async fn acquire_all(
        &self,
        locks: &[(String, LeaseKind)],
        ttl_ms: u64,
        wait_ms: u64,
    ) -> Vec<(Timed, Option<String>)> {
        let body = AcquireAllBody {
            locks: Some(
                (locks.iter())
                    .map(|(name, kind)| LockAskBody {
                        name: Some(name.clone()),
                        mode: (*kind == LeaseKind::Shared).then_some(LockMode::Shared),
                    })
                    .collect(),
            ),
            ttl_ms: Some(ttl_ms),
            wait_ms: Some(wait_ms),
            ..AcquireAllBody::default()
        };
        let send_us = now_us();
        let answer = self.send(Route::AcquireAll, &body, wait_ms).await;
        let answers: Vec<(Outcome, Option<String>)> = match answer {
            Ok(body) => match decode::<AcquireAllResponse>(body) {
                Some(AcquireAllResponse { leases })
                    if leases.len() == locks.len()
                        && (leases.iter().zip(locks)).all(|(l, (name, _))| l.name == *name) =>
                {
                    (leases.into_iter())
                        .map(|lease| {
                            let granted = Outcome::Granted {
                                fence: lease.fence,
                                ttl_ms: lease.ttl_ms,
                                expires_at_ms: lease.expires_at_ms,
                            };
                            (granted, Some(lease.token))
                        })
                        .collect()
                }
                _ => locks.iter().map(|_| (not_the_api(), None)).collect(),
            },
            Err(error) => {
                let (outcome, detail) = refusal(error);
                let named = detail.and_then(|d| d.lock);
                (locks.iter())
                    .map(|(name, _)| match (&outcome, &named) {
                        (Outcome::Busy { .. }, Some(lock)) if lock != name => {
                            (Outcome::Refused, None)
                        }
                        (Outcome::Busy { .. }, None) => (Outcome::Refused, None),
                        _ => (outcome.clone(), None),
                    })
                    .collect()
            }
        };
        let recv_us = now_us();
        (answers.into_iter())
            .map(|(outcome, token)| {
                let timed = Timed {
                    send_us,
                    recv_us,
                    outcome,
                };
                (timed, token)
            })
            .collect()
    }

    /// `POST /v1/locks/release-all` of the lock leases `leases` (name and
    /// token): one answer per lease in the order given, each read as a
    /// single release's would be, with the request's times. An answer for
    /// the whole request that is not `200` is every lease's.
    pub async fn release_all(&self, leases: &[(&str, &str)]) -> Vec<Timed> {
        let body = ReleaseAllBody {
            leases: Some(
                (leases.iter())
                    .map(|(name, token)| LeaseRefBody {
                        name: Some((*name).to_owned()),
                        token: Some((*token).to_owned()),
                    })
                    .collect(),
            ),
        };
        let send_us = now_us();
        let outcomes: Vec<Outcome> = match self.send(Route::ReleaseAll, &body, 0).await {
            Ok(body) => match decode::<ReleaseAllResponse>(body) {
                Some(ReleaseAllResponse { results })
                    if results.len() == leases.len()
                        && (results.iter().zip(leases)).all(|(r, (name, _))| r.name == *name) =>
                {
                    results.into_iter().map(release_result).collect()
                }
                _ => leases.iter().map(|_| not_the_api()).collect(),
            },
            Err(error) => {
                let (outcome, _) = refusal(error);
                leases.iter().map(|_| outcome.clone()).collect()
            }
        };
        let recv_us = now_us();
        (outcomes.into_iter())
            .map(|outcome| Timed {
                send_us,
                recv_us,
                outcome,
            })
            .collect()
    }

    /// `GET /v1/locks/{lock}`.
    pub async fn status(&self, lock: &str) -> Timed {
        self.status_in(Family::Locks, lock).await
    }

    /// `GET /v1/{locks|semaphores}/{name}`.
    pub async fn status_in(&self, family: Family, name: &str) -> Timed {
        let send_us = now_us();
        let outcome = match family {
            Family::Locks => match self.client.status(name).await {
                Ok(status) => status_outcome(
                    status.held,
                    status.fence,
                    &status.holders,
                    status.holder_count,
                ),
                Err(error) => refused(&error),
            },
            Family::Semaphores => match self.client.semaphore_status(name).await {
                Ok(status) => {
                    status_outcome(status.held > 0, status.fence, &status.holders, status.held)
                }
                Err(error) => refused(&error),
            },
        };
        timed(send_us, outcome)
    }

    /// `GET /readyz` answered `200`.
    pub async fn ready(&self) -> bool {
        self.client.ready().await.is_ok()
    }

    /// Sends `body` to `route` once; a `200` answer decodes as `T` and
    /// becomes an outcome through `granted`.
    async fn once<T: DeserializeOwned>(
        &self,
        route: Route<'_>,
        body: &impl Serialize,
        wait_ms: u64,
        granted: impl FnOnce(T) -> Outcome,
    ) -> Timed {
        let send_us = now_us();
        let outcome = match self.send(route, body, wait_ms).await {
            Ok(body) => decode(body).map_or_else(not_the_api, granted),
            Err(error) => refusal(error).0,
        };
        timed(send_us, outcome)
    }

    /// One exchange with the broker, answered as it sent it; a request that
    /// may wait `wait_ms` in the broker gets that on top of the timeout.
    async fn send(
        &self,
        route: Route<'_>,
        body: &impl Serialize,
        wait_ms: u64,
    ) -> Result<Map<String, Value>, VerbatimError> {
        let timeout = self.timeout + Duration::from_millis(wait_ms);
        self.client.send_verbatim(route, Some(body), timeout).await
    }
}

/// `outcome`, answered now to a request sent at `send_us`.
fn timed(send_us: i64, outcome: Outcome) -> Timed {
    Timed {
        send_us,
        recv_us: now_us(),
        outcome,
    }
}

/// A success body as `T`; `None` when it is not one.
fn decode<T: DeserializeOwned>(body: Map<String, Value>) -> Option<T> {
    serde_json::from_value(Value::Object(body)).ok()
}

/// The outcome of a verbatim call that was not a success, with the
/// broker's error detail when it sent one: `Busy` on `423`, `Lost` on
/// `lease_lost`, else `Failed` with the answer's status (0 when no answer
/// of the broker's API came).
fn refusal(error: VerbatimError) -> (Outcome, Option<ErrorDetail>) {
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
fn refused(error: &Error) -> Outcome {
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
fn not_the_api() -> Outcome {
    failed(0, None)
}

/// One lease's result in a release-all answer, as a single release of it
/// would have answered.
fn release_result(result: ReleaseAllResult) -> Outcome {
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
fn status_outcome(
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
fn in_the_way(error: &ErrorDetail) -> Vec<u64> {
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

fn failed(status: u16, code: Option<ErrorCode>) -> Outcome {
    Outcome::Failed {
        status,
        code: code.map_or("", ErrorCode::as_str).to_owned(),
    }
}
