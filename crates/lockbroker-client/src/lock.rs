//! Acquiring: [`LockHandle`] and [`SemaphoreHandle`], [`AcquireOptions`],
//! and the retry rule every acquire follows.
//!
//! Every attempt of one acquire carries the same `request_id`, so one re-sent
//! after a lost answer gets the same lease back instead of `lock_busy`. A busy
//! answer is asked again until the caller's `wait` is over (the broker caps how
//! long it holds one request), and so is a broker that is briefly unavailable.

use std::future::Future;
use std::time::Duration;

use lockbroker_api::{
    AcquireBody, LeaseResponse, LockMode, PermitResponse, SemaphoreAcquireBody,
    SemaphoreStatusResponse, StatusResponse,
};
use reqwest::Method;
use tokio::time::Instant;

use crate::client::{route, Client, Family};
use crate::error::{Error, TransportKind};
use crate::lease::{Grant, Lease, LeaseKind};

/// TTL of a lease when none is given.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// How long [`Lease::keep_alive`] renews a lease at most, from its grant.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(3600);
/// A grant that took longer than this share of the TTL (it waited in the
/// broker) is extended at once, so the local deadline counts from a recent send.
const RESYNC_SHARE: u32 = 10;

/// How an acquire asks for its lease. `..AcquireOptions::default()` fills in
/// the rest: a 30 s TTL, no wait, `host:pid` as owner, exclusive, a one-hour
/// maximum hold, and a fresh `request_id`.
#[derive(Debug, Clone)]
pub struct AcquireOptions {
    /// How long the lease is valid; renewals ask for as much again.
    pub ttl: Duration,
    /// How long to wait in total for a busy lock; zero answers at once.
    pub wait: Duration,
    /// Who holds the lease, shown to others; `None` sends `host:pid`.
    pub owner: Option<String>,
    /// Exclusive or shared; ignored by a semaphore.
    pub mode: LockMode,
    /// How long the lock stays unavailable if this lease expires
    /// unreleased; `None` for the broker's default.
    pub lock_delay: Option<Duration>,
    /// With a wait, queue in the lock's fair queue shared by every broker.
    pub fair: bool,
    /// The idempotency key every attempt carries; `None` makes a fresh one.
    /// Give your own to retry an acquire across restarts of your process.
    pub request_id: Option<String>,
    /// The longest [`Lease::keep_alive`] keeps the lease, from its grant:
    /// a hung job loses the lock instead of keeping it.
    pub max_hold: Duration,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_TTL,
            wait: Duration::ZERO,
            owner: None,
            mode: LockMode::Exclusive,
            lock_delay: None,
            fair: false,
            request_id: None,
            max_hold: DEFAULT_MAX_HOLD,
        }
    }
}

/// One lock's routes; from [`Client::lock`].
#[derive(Debug, Clone)]
pub struct LockHandle {
    client: Client,
    name: String,
}

impl LockHandle {
    pub(crate) fn new(client: Client, name: String) -> Self {
        Self { client, name }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `POST /v1/locks/{name}/acquire`, asked again until granted or
    /// `options.wait` is over. The lease is not renewed: call
    /// [`Lease::keep_alive`], or use [`LockHandle::lock`].
    pub async fn acquire(&self, options: AcquireOptions) -> Result<Lease, Error> {
        let path = route(Family::Locks, &self.name, "/acquire");
        let (lease, timing) = attempts(&self.client, &path, &options, |o, id, wait| {
            serde_json::to_value(AcquireBody {
                session: None,
                ttl_ms: Some(millis(o.ttl)),
                wait_ms: Some(millis(wait)),
                owner: Some(owner(o)),
                request_id: Some(id.to_owned()),
                lock_delay_ms: o.lock_delay.map(millis),
                fair: o.fair.then_some(true),
                // An exclusive acquire sends no mode, the broker's default.
                mode: (o.mode == LockMode::Shared).then_some(LockMode::Shared),
            })
        })
        .await?;
        let grant = lease_grant(lease, options.mode);
        finish(&self.client, Family::Locks, grant, &options, timing).await
    }

    /// [`LockHandle::acquire`], then [`Lease::keep_alive`]: the lease is
    /// renewed in the background until released, lost, or `max_hold`.
    pub async fn lock(&self, options: AcquireOptions) -> Result<Lease, Error> {
        let lease = self.acquire(options).await?;
        lease.keep_alive();
        Ok(lease)
    }

    /// `GET /v1/locks/{name}`.
    pub async fn status(&self) -> Result<StatusResponse, Error> {
        self.client.status(&self.name).await
    }
}

/// One semaphore's routes and its limit; from [`Client::semaphore`].
#[derive(Debug, Clone)]
pub struct SemaphoreHandle {
    client: Client,
    name: String,
    limit: u32,
}

impl SemaphoreHandle {
    pub(crate) fn new(client: Client, name: String, limit: u32) -> Self {
        Self {
            client,
            name,
            limit,
        }
    }

    /// `POST /v1/semaphores/{name}/acquire`: one permit among at most
    /// `limit`, asked again until granted or `options.wait` is over.
    pub async fn acquire(&self, options: AcquireOptions) -> Result<Lease, Error> {
        let path = route(Family::Semaphores, &self.name, "/acquire");
        let limit = self.limit;
        let (permit, timing) = attempts(&self.client, &path, &options, |o, id, wait| {
            serde_json::to_value(SemaphoreAcquireBody {
                session: None,
                limit: Some(u64::from(limit)),
                ttl_ms: Some(millis(o.ttl)),
                wait_ms: Some(millis(wait)),
                owner: Some(owner(o)),
                request_id: Some(id.to_owned()),
                lock_delay_ms: o.lock_delay.map(millis),
                fair: o.fair.then_some(true),
            })
        })
        .await?;
        let grant = permit_grant(permit);
        finish(&self.client, Family::Semaphores, grant, &options, timing).await
    }

    /// [`SemaphoreHandle::acquire`], then [`Lease::keep_alive`].
    pub async fn lock(&self, options: AcquireOptions) -> Result<Lease, Error> {
        let permit = self.acquire(options).await?;
        permit.keep_alive();
        Ok(permit)
    }

    /// `GET /v1/semaphores/{name}`.
    pub async fn status(&self) -> Result<SemaphoreStatusResponse, Error> {
        self.client.semaphore_status(&self.name).await
    }
}

/// When the attempt that was granted was sent and answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) sent: Instant,
    pub(crate) received: Instant,
}

impl Timing {
    /// Whether the grant took longer than a tenth of the TTL (it waited in
    /// the broker), so a deadline from its send would count from too early.
    fn waited(self, options: &AcquireOptions) -> bool {
        self.received - self.sent > options.ttl / RESYNC_SHARE
    }
}

/// A failed attempt of an acquire, for a retry rule to judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// How long the attempt took to be answered (or to fail).
    pub answered_in: Duration,
    /// How much of the caller's wait is left.
    pub left: Duration,
}

/// Sends the acquire until granted or the wait is over; answers the grant
/// and when its attempt was sent and answered.
pub(crate) async fn attempts<T, B>(
    client: &Client,
    path: &str,
    options: &AcquireOptions,
    body: B,
) -> Result<(T, Timing), Error>
where
    T: serde::de::DeserializeOwned,
    B: Fn(&AcquireOptions, &str, Duration) -> serde_json::Result<serde_json::Value>,
{
    let request_id = options.request_id.clone().unwrap_or_else(new_request_id);
    let send = |left: Duration| {
        let json = body(options, &request_id, left);
        async move {
            let json = json.map_err(|e| Error::Protocol {
                message: format!("acquire body: {e}"),
            })?;
            let timeout = client.inner.timeout + left;
            client.call(Method::POST, path, Some(&json), timeout).await
        }
    };
    retried(options.wait, send, retry_rule).await
}

/// The client's retry rule: a busy lock and a broker briefly unavailable
/// are asked again while the wait lasts.
fn retry_rule(error: &Error, attempt: Attempt) -> Option<Duration> {
    if attempt.left.is_zero() {
        return None;
    }
    let pause = match error {
        // A busy answer that came back at once would make this a busy loop.
        Error::Busy { .. } if attempt.answered_in < Duration::from_millis(50) => {
            Duration::from_millis(50)
        }
        Error::Busy { .. } => Duration::ZERO,
        // Nobody holds it: ask again after a short pause.
        Error::Contended { .. } => Duration::from_millis(10),
        Error::Transport {
            kind: TransportKind::Tls,
            ..
        } => return None,
        error if error.is_transient() => error
            .retry_after()
            .unwrap_or(Duration::from_millis(500))
            .min(Duration::from_secs(1)),
        _ => return None,
    };
    Some(pause.min(attempt.left))
}

/// The loop of every acquire: `send` asks with the wait left (every attempt
/// with the same `request_id`) until granted, or until `rule` gives up on a
/// failure; otherwise it pauses as long as `rule` says. Answers the grant
/// and when its attempt was sent and answered.
pub(crate) async fn retried<T, E, Fut>(
    wait: Duration,
    send: impl Fn(Duration) -> Fut,
    mut rule: impl FnMut(&E, Attempt) -> Option<Duration>,
) -> Result<(T, Timing), E>
where
    Fut: Future<Output = Result<T, E>>,
{
    let give_up_at = Instant::now() + wait;
    loop {
        let left = give_up_at.saturating_duration_since(Instant::now());
        let sent = Instant::now();
        let error = match send(left).await {
            Ok(grant) => {
                let received = Instant::now();
                return Ok((grant, Timing { sent, received }));
            }
            Err(error) => error,
        };
        let now = Instant::now();
        let attempt = Attempt {
            answered_in: now - sent,
            left: give_up_at.saturating_duration_since(now),
        };
        match rule(&error, attempt) {
            Some(pause) => tokio::time::sleep(pause).await,
            None => return Err(error),
        }
    }
}

/// The lease from a grant; after a grant that waited, one extend right away
/// so the local deadline counts from a send after the grant.
async fn finish(
    client: &Client,
    family: Family,
    grant: Grant,
    options: &AcquireOptions,
    timing: Timing,
) -> Result<Lease, Error> {
    let lease = start(client, family, grant, options, timing);
    resync(lease, options, timing).await
}

/// The lease from a grant, its deadline task running; nothing is sent.
pub(crate) fn start(
    client: &Client,
    family: Family,
    grant: Grant,
    options: &AcquireOptions,
    timing: Timing,
) -> Lease {
    let Timing { sent, received } = timing;
    // max_hold counts from the grant: its send time, unless it waited. A
    // grant that waited may have been given a whole TTL after its send:
    // counted from the send, its deadline could be past already. Until
    // [`resync`] asks the broker, it counts from the answer.
    let from = if timing.waited(options) {
        received
    } else {
        sent
    };
    Lease::start(client.clone(), family, grant, options, from, from)
}

/// After a grant that waited, one extend of `lease` right away, so its local
/// deadline counts from a send after the grant. When the broker cannot say
/// (no answer, or the lease is at its maximum hold), the deadline counts
/// from the grant's send after all, the earliest the grant can have been.
pub(crate) async fn resync(
    lease: Lease,
    options: &AcquireOptions,
    timing: Timing,
) -> Result<Lease, Error> {
    if timing.waited(options) {
        match lease.extend(options.ttl).await {
            Ok(_) => {}
            Err(error)
                if error.is_transient() || matches!(error, Error::MaxHoldExceeded { .. }) =>
            {
                lease.count_from(timing.sent, timing.received);
            }
            Err(error) => return Err(error),
        }
    }
    Ok(lease)
}

/// What a lock's grant says about its lease, granted as `mode`.
pub(crate) fn lease_grant(lease: LeaseResponse, mode: LockMode) -> Grant {
    Grant {
        name: lease.name,
        token: lease.token,
        fence: lease.fence,
        owner: lease.owner,
        validity: Duration::from_millis(lease.validity_ms.min(lease.ttl_ms)),
        expires_at_ms: lease.expires_at_ms,
        kind: match mode {
            LockMode::Exclusive => LeaseKind::Exclusive,
            LockMode::Shared => LeaseKind::Shared,
        },
    }
}

/// What a semaphore's grant says about its permit.
pub(crate) fn permit_grant(permit: PermitResponse) -> Grant {
    Grant {
        name: permit.name,
        token: permit.token,
        fence: permit.fence,
        owner: permit.owner,
        validity: Duration::from_millis(permit.validity_ms.min(permit.ttl_ms)),
        expires_at_ms: permit.expires_at_ms,
        kind: LeaseKind::Permit {
            limit: permit.limit,
        },
    }
}

/// A fresh idempotency key: 128 random bits as hex. Every attempt of one
/// acquire carries the same, so a retry after a lost answer gets the same
/// lease back.
pub fn new_request_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The owner label to send: the caller's, or `host:pid`.
pub(crate) fn owner(options: &AcquireOptions) -> String {
    options.owner.clone().unwrap_or_else(default_owner)
}

/// `host:pid`, so a `lock_busy` answer says who holds the lock.
pub fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    let label = format!("{host}:{}", std::process::id());
    label.chars().take(256).collect()
}

/// A duration as whole milliseconds on the wire.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
