//! [`BrokerClient`]: acquire, extend, release and status over HTTP, each answer
//! reduced to an [`Outcome`] with the local times it was sent and received.
//! Locks (exclusive or shared leases) and semaphores (permits) take the same
//! steps on routes of their own; a [`Kind`] or [`Space`] says which.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockbroker_api::{
    AcquireBody, ErrorCode, ErrorDetail, ErrorResponse, ExtendBody, HolderResponse, LeaseResponse,
    LockMode, PermitResponse, ReleaseBody, ReleaseResponse, RenewalResponse, SemaphoreAcquireBody,
    SemaphoreStatusResponse, StatusResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::history::{Kind, Space};

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
    /// Anything else: `status` 0 when no HTTP answer came at all.
    Failed {
        /// HTTP status, or 0 for a transport error.
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

/// A client for one broker's lock routes.
#[derive(Clone)]
pub struct BrokerClient {
    http: reqwest::Client,
    base: String,
}

impl BrokerClient {
    /// A client for the broker at `base` (`http://host:port`) whose requests
    /// give up after `timeout`.
    pub fn new(base: &str, timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .unwrap_or_default();
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    /// The broker's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/locks/{lock}/acquire` of an exclusive lease; on a grant,
    /// the token comes back too.
    pub async fn acquire(&self, lock: &str, ttl_ms: u64, wait_ms: u64) -> (Timed, Option<String>) {
        self.acquire_kind(lock, Kind::Exclusive, ttl_ms, wait_ms)
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
        kind: Kind,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> (Timed, Option<String>) {
        let mut token = None;
        let timed = match kind {
            Kind::Exclusive | Kind::Shared => {
                let body = AcquireBody {
                    mode: (kind == Kind::Shared).then_some(LockMode::Shared),
                    ttl_ms: Some(ttl_ms),
                    wait_ms: Some(wait_ms),
                    ..AcquireBody::default()
                };
                self.post(
                    Space::Lock,
                    name,
                    "acquire",
                    &body,
                    |lease: LeaseResponse| {
                        token = Some(lease.token);
                        Outcome::Granted {
                            fence: lease.fence,
                            ttl_ms: lease.ttl_ms,
                            expires_at_ms: lease.expires_at_ms,
                        }
                    },
                )
                .await
            }
            Kind::Permit { limit } => {
                let body = SemaphoreAcquireBody {
                    limit: Some(u64::from(limit)),
                    ttl_ms: Some(ttl_ms),
                    wait_ms: Some(wait_ms),
                    ..SemaphoreAcquireBody::default()
                };
                let granted = |permit: PermitResponse| {
                    token = Some(permit.token);
                    Outcome::Granted {
                        fence: permit.fence,
                        ttl_ms: permit.ttl_ms,
                        expires_at_ms: permit.expires_at_ms,
                    }
                };
                self.post(Space::Semaphore, name, "acquire", &body, granted)
                    .await
            }
        };
        (timed, token)
    }

    /// `POST /v1/locks/{lock}/extend`.
    pub async fn extend(&self, lock: &str, token: &str, ttl_ms: u64) -> Timed {
        self.extend_in(Space::Lock, lock, token, ttl_ms).await
    }

    /// `POST /v1/{locks|semaphores}/{name}/extend`.
    pub async fn extend_in(&self, space: Space, name: &str, token: &str, ttl_ms: u64) -> Timed {
        let body = ExtendBody::new(token, Some(ttl_ms));
        self.post(space, name, "extend", &body, |renewal: RenewalResponse| {
            Outcome::Renewed {
                fence: renewal.fence,
                ttl_ms: renewal.ttl_ms,
                expires_at_ms: renewal.expires_at_ms,
            }
        })
        .await
    }

    /// `POST /v1/locks/{lock}/release`.
    pub async fn release(&self, lock: &str, token: &str) -> Timed {
        self.release_in(Space::Lock, lock, token).await
    }

    /// `POST /v1/{locks|semaphores}/{name}/release`.
    pub async fn release_in(&self, space: Space, name: &str, token: &str) -> Timed {
        let body = ReleaseBody::new(token);
        self.post(space, name, "release", &body, |release: ReleaseResponse| {
            Outcome::Released {
                fence: release.fence,
            }
        })
        .await
    }

    /// `GET /v1/locks/{lock}`.
    pub async fn status(&self, lock: &str) -> Timed {
        self.status_in(Space::Lock, lock).await
    }

    /// `GET /v1/{locks|semaphores}/{name}`.
    pub async fn status_in(&self, space: Space, name: &str) -> Timed {
        let send_us = now_us();
        let sent = self
            .http
            .get(format!("{}/v1/{}/{name}", self.base, space.route()))
            .send()
            .await;
        let outcome = match space {
            Space::Lock => {
                answer(sent, |status: StatusResponse| {
                    status_outcome(
                        status.held,
                        status.fence,
                        &status.holders,
                        status.holder_count,
                    )
                })
                .await
            }
            Space::Semaphore => {
                answer(sent, |status: SemaphoreStatusResponse| {
                    status_outcome(status.held > 0, status.fence, &status.holders, status.held)
                })
                .await
            }
        };
        Timed {
            send_us,
            recv_us: now_us(),
            outcome,
        }
    }

    /// `GET /readyz` answered `200`.
    pub async fn ready(&self) -> bool {
        matches!(
            self.http.get(format!("{}/readyz", self.base)).send().await,
            Ok(reply) if reply.status().is_success()
        )
    }

    /// Sends `body` to the `step` route of `name` in `space`; a `200`
    /// answer decodes as `T` and becomes an outcome through `granted`.
    async fn post<T: DeserializeOwned>(
        &self,
        space: Space,
        name: &str,
        step: &str,
        body: &impl Serialize,
        granted: impl FnOnce(T) -> Outcome,
    ) -> Timed {
        let send_us = now_us();
        let sent = self
            .http
            .post(format!("{}/v1/{}/{name}/{step}", self.base, space.route()))
            .json(body)
            .send()
            .await;
        let outcome = answer(sent, granted).await;
        Timed {
            send_us,
            recv_us: now_us(),
            outcome,
        }
    }
}

/// The outcome of one answer: `granted` of its body on `200`, else what the
/// error body says.
async fn answer<T: DeserializeOwned>(
    sent: reqwest::Result<reqwest::Response>,
    granted: impl FnOnce(T) -> Outcome,
) -> Outcome {
    let Ok(reply) = sent else {
        return failed(0, None);
    };
    let status = reply.status().as_u16();
    let Ok(bytes) = reply.bytes().await else {
        return failed(0, None);
    };
    if status == 200 {
        return match serde_json::from_slice(&bytes) {
            Ok(body) => granted(body),
            Err(_) => failed(status, None),
        };
    }
    let error = serde_json::from_slice::<ErrorResponse>(&bytes)
        .ok()
        .map(|body| body.error);
    match (status, error) {
        (423, error) => Outcome::Busy {
            fence: error.as_ref().and_then(|e| e.fence),
            in_the_way: error.as_ref().map(in_the_way).unwrap_or_default(),
        },
        (409, Some(error)) if error.code == ErrorCode::LeaseLost => Outcome::Lost,
        (status, error) => failed(status, error.map(|e| e.code)),
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
