//! Acquiring under a session: [`SessionLock`], [`SessionSemaphore`] and
//! [`Session::acquire_all`] send the session's token instead of a TTL and
//! lock-delay, with the retry rule of every acquire (see [`crate::lock`]).
//!
//! Each lease granted is an ordinary [`Lease`] (its own token and fence,
//! its own release) with no task of its own: its session's keepalives move
//! its deadline, and its session's end is its own.

use std::sync::Arc;
use std::time::Duration;

use lockbroker_api::{
    AcquireAllBody, AcquireAllResponse, AcquireBody, LeaseResponse, LockMode, PermitResponse,
    Secret, SemaphoreAcquireBody, SemaphoreStatusResponse, StatusResponse,
};

use super::{Session, SessionShared};
use crate::client::{route, Family};
use crate::error::Error;
use crate::lease::{Grant, Lease, Shared};
use crate::lock::{attempts, lease_grant, millis, owner, permit_grant, AcquireOptions, Timing};
use crate::multi::{answered_as_asked, ask_bodies, not_as_asked, LockAsk, ACQUIRE_ALL};

/// How an acquire under a session asks for its lease: the TTL, lock-delay
/// and renewal are the session's. `..SessionAcquireOptions::default()` fills
/// in the rest: no wait, the session's owner, exclusive, and a fresh
/// `request_id`.
#[derive(Debug, Clone, Default)]
pub struct SessionAcquireOptions {
    /// How long to wait in total for a busy lock; zero answers at once.
    pub wait: Duration,
    /// Who holds the lease, shown to others; `None` sends the session's
    /// owner (or `host:pid`).
    pub owner: Option<String>,
    /// Exclusive or shared; ignored by a semaphore and by
    /// [`Session::acquire_all`], whose [`LockAsk`]s say.
    pub mode: LockMode,
    /// With a wait, queue in the lock's fair queue shared by every broker;
    /// ignored by [`Session::acquire_all`].
    pub fair: bool,
    /// The idempotency key every attempt carries; `None` makes a fresh one.
    pub request_id: Option<String>,
}

impl SessionAcquireOptions {
    /// The options of the client's acquire loop: `wait`, `request_id`, and
    /// what the bodies take from them.
    fn for_session(&self, session: &SessionShared) -> AcquireOptions {
        AcquireOptions {
            wait: self.wait,
            owner: self.owner.clone().or_else(|| session.owner.clone()),
            mode: self.mode,
            fair: self.fair,
            request_id: self.request_id.clone(),
            ..AcquireOptions::default()
        }
    }
}

/// One lock's acquire under a session; from [`Session::lock`].
#[derive(Debug, Clone)]
pub struct SessionLock {
    session: Arc<SessionShared>,
    name: String,
}

/// One semaphore's acquire under a session; from [`Session::semaphore`].
#[derive(Debug, Clone)]
pub struct SessionSemaphore {
    session: Arc<SessionShared>,
    name: String,
    limit: u32,
}

impl Session {
    /// The lock `name`, to take leases on under this session.
    pub fn lock(&self, name: impl Into<String>) -> SessionLock {
        SessionLock {
            session: Arc::clone(&self.shared),
            name: name.into(),
        }
    }

    /// The semaphore `name` with `limit` permits, to take one of under this
    /// session.
    pub fn semaphore(&self, name: impl Into<String>, limit: u32) -> SessionSemaphore {
        SessionSemaphore {
            session: Arc::clone(&self.shared),
            name: name.into(),
            limit,
        }
    }

    /// `POST /v1/locks/acquire-all` under this session: a lease on every
    /// lock of `locks` or on none, in the order asked, as
    /// [`Client::acquire_all`](crate::Client::acquire_all) takes them (each
    /// name at most once; no locks answer no leases), each held while the
    /// session is.
    pub async fn acquire_all(
        &self,
        locks: &[LockAsk],
        options: SessionAcquireOptions,
    ) -> Result<Vec<Lease>, Error> {
        let session = &self.shared;
        session.check()?;
        if locks.is_empty() {
            return Ok(Vec::new());
        }
        let asks = ask_bodies(locks)?;
        let options = options.for_session(session);
        let client = &session.client;
        let (granted, timing) = attempts(client, ACQUIRE_ALL, &options, |o, id, wait| {
            serde_json::to_value(AcquireAllBody {
                session: Some(Secret(session.token.clone())),
                locks: Some(asks.clone()),
                ttl_ms: None,
                wait_ms: Some(millis(wait)),
                owner: Some(owner(o)),
                request_id: Some(id.to_owned()),
                lock_delay_ms: None,
            })
        })
        .await?;
        let AcquireAllResponse { leases: granted } = granted;
        let as_asked = answered_as_asked(&granted, locks);
        // Every grant becomes a lease first, so that any of them given up
        // below is released on drop instead of held until it expires.
        let leases: Vec<Result<Lease, Error>> = (granted.into_iter().zip(locks))
            .map(|(lease, ask)| join(session, Family::Locks, lease_grant(lease, ask.mode), timing))
            .collect();
        if !as_asked {
            return Err(not_as_asked());
        }
        leases.into_iter().collect()
    }
}

impl SessionLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `POST /v1/locks/{name}/acquire` with the session's token, asked again
    /// until granted or `options.wait` is over. [`Error::LeaseLost`] with
    /// [`LostReason::SessionLost`](crate::LostReason::SessionLost) when the
    /// session is not open (this side found it ended, or the broker says so).
    pub async fn acquire(&self, options: SessionAcquireOptions) -> Result<Lease, Error> {
        let session = &self.session;
        session.check()?;
        let options = options.for_session(session);
        let path = route(Family::Locks, &self.name, "/acquire");
        let client = &session.client;
        let (lease, timing) = attempts(client, &path, &options, |o, id, wait| {
            serde_json::to_value(AcquireBody {
                session: Some(Secret(session.token.clone())),
                ttl_ms: None,
                wait_ms: Some(millis(wait)),
                owner: Some(owner(o)),
                request_id: Some(id.to_owned()),
                lock_delay_ms: None,
                fair: o.fair.then_some(true),
                mode: (o.mode == LockMode::Shared).then_some(LockMode::Shared),
            })
        })
        .await?;
        let lease: LeaseResponse = lease;
        join(
            session,
            Family::Locks,
            lease_grant(lease, options.mode),
            timing,
        )
    }

    /// `GET /v1/locks/{name}`.
    pub async fn status(&self) -> Result<StatusResponse, Error> {
        self.session.client.status(&self.name).await
    }
}

impl SessionSemaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `POST /v1/semaphores/{name}/acquire` with the session's token: one
    /// permit among at most `limit`, as [`SessionLock::acquire`] takes a
    /// lease.
    pub async fn acquire(&self, options: SessionAcquireOptions) -> Result<Lease, Error> {
        let session = &self.session;
        session.check()?;
        let options = options.for_session(session);
        let path = route(Family::Semaphores, &self.name, "/acquire");
        let limit = self.limit;
        let client = &session.client;
        let (permit, timing) = attempts(client, &path, &options, |o, id, wait| {
            serde_json::to_value(SemaphoreAcquireBody {
                session: Some(Secret(session.token.clone())),
                limit: Some(u64::from(limit)),
                ttl_ms: None,
                wait_ms: Some(millis(wait)),
                owner: Some(owner(o)),
                request_id: Some(id.to_owned()),
                lock_delay_ms: None,
                fair: o.fair.then_some(true),
            })
        })
        .await?;
        let permit: PermitResponse = permit;
        join(session, Family::Semaphores, permit_grant(permit), timing)
    }

    /// `GET /v1/semaphores/{name}`.
    pub async fn status(&self) -> Result<SemaphoreStatusResponse, Error> {
        self.session.client.semaphore_status(&self.name).await
    }
}

/// The lease from a grant under `session`, taken into the session. Its
/// deadline counts from the grant's send, and never past the session's.
/// A session that ended meanwhile gives the lease back in the background
/// and answers that it is lost.
fn join(
    session: &SessionShared,
    family: Family,
    grant: Grant,
    timing: Timing,
) -> Result<Lease, Error> {
    let sent = timing.sent;
    let shared = Shared {
        in_session: true,
        ttl: session.ttl,
        ..Shared::new(session.client.clone(), family, grant, sent)
    };
    {
        let mut state = shared.state();
        state.deadline = state.deadline.min(session.state().deadline);
    }
    let lease = Lease {
        shared: Arc::new(shared),
    };
    if session.join(&lease.shared) {
        return Ok(lease);
    }
    // Dropping the lease releases it in the background.
    drop(lease);
    Err(super::session_lost())
}
