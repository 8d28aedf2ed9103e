//! [`Lease`]: a granted lease or permit, its local deadline, and its end as
//! a [`CancellationToken`].
//!
//! The local deadline counts from when the request that granted or last
//! extended the lease was *sent*, plus the validity the broker answered, so
//! it never outlasts the broker's own. A background task per lease marks it
//! lost when that deadline passes and, once [`Lease::keep_alive`] is called,
//! renews it (see [`crate::renew`]). A lease taken under a session has no
//! task of its own: its session's keepalives move its deadline and end it
//! (see [`crate::session`]).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lockbroker_api::{FenceCheckResponse, ReleaseBody, ReleaseResponse, RenewalResponse};
use reqwest::Method;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::client::{route, Client, Family};
use crate::error::{Error, LostReason};
use crate::lock::AcquireOptions;

/// What a lease is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseKind {
    /// A lock lease that excludes every other.
    Exclusive,
    /// A lock lease beside other shared ones.
    Shared,
    /// A semaphore permit among at most `limit`.
    Permit {
        /// The semaphore's limit in force.
        limit: u32,
    },
}

/// How a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEnd {
    /// Its holder released it (or dropped it).
    Released,
    /// It was lost; see [`LostReason`].
    Lost(LostReason),
}

/// A successful release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// The released lease's fence.
    pub fence: u64,
    /// With a broker that waits for Redis replicas, whether enough of them
    /// acknowledged the release (see the README's replica acknowledgement).
    pub acknowledged: Option<bool>,
}

/// What an acquire answered, whichever route.
pub(crate) struct Grant {
    pub(crate) name: String,
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) owner: Option<String>,
    pub(crate) validity: Duration,
    pub(crate) expires_at_ms: u64,
    pub(crate) kind: LeaseKind,
}

/// A granted lease (or permit). Pass [`Lease::fence`] to what you write to.
///
/// [`Lease::lost`] completes, and [`Lease::cancellation`] tokens are
/// cancelled, the moment the lease ends: the broker said it is gone, it ran
/// out by the local clock, it reached its maximum hold, or it was released.
/// A lease that ended stays readable (its fence, its end, a fence check) but
/// is never extended. Dropping a lease stops its renewal and releases it in
/// the background.
pub struct Lease {
    pub(crate) shared: Arc<Shared>,
}

/// What the lease and its background task share.
pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) family: Family,
    pub(crate) name: String,
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) owner: Option<String>,
    pub(crate) kind: LeaseKind,
    /// The TTL renewals ask for.
    pub(crate) ttl: Duration,
    /// When the maximum hold ends.
    pub(crate) hold_until: Instant,
    /// Held under a session: never extended on its own.
    pub(crate) in_session: bool,
    pub(crate) state: Mutex<State>,
    /// Cancelled when the lease ends: its loss, as callers see it.
    pub(crate) ended: CancellationToken,
    /// Wakes the background task when the state changed under it.
    pub(crate) wake: Notify,
}

pub(crate) struct State {
    /// Local deadline, never later than the broker's expiry.
    pub(crate) deadline: Instant,
    pub(crate) expires_at_ms: u64,
    /// When the latest successful grant or extend was sent.
    pub(crate) last_sent: Instant,
    /// When to renew next; `None` while not renewing.
    pub(crate) next_renewal: Option<Instant>,
    /// Renewing stopped at a maximum hold: running out is `MaxHold`.
    pub(crate) at_max_hold: bool,
    /// A release was asked for: a session that finds the lease gone does
    /// not call it lost.
    pub(crate) releasing: bool,
    pub(crate) end: Option<LeaseEnd>,
}

impl Lease {
    /// The lease from a grant whose request was sent at `sent`, with its
    /// deadline task running.
    pub(crate) fn start(
        client: Client,
        family: Family,
        grant: Grant,
        options: &AcquireOptions,
        sent: Instant,
        held_from: Instant,
    ) -> Self {
        let shared = Arc::new(Shared {
            ttl: options.ttl,
            hold_until: held_from + options.max_hold,
            ..Shared::new(client, family, grant, sent)
        });
        tokio::spawn(crate::renew::run(Arc::clone(&shared)));
        Self { shared }
    }

    /// The lock's (or semaphore's) name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Strictly greater than every fence issued before for this name.
    pub fn fence(&self) -> u64 {
        self.shared.fence
    }

    /// Whether this lease still holds with its fence at the broker now (a
    /// fence check: see [`Client::check_fence`]).
    pub async fn check_fence(&self) -> Result<FenceCheckResponse, Error> {
        let shared = &self.shared;
        (shared.client)
            .fence_check(shared.family, &shared.name, shared.fence)
            .await
    }

    /// The holder's label.
    pub fn owner(&self) -> Option<&str> {
        self.shared.owner.as_deref()
    }

    /// Exclusive, shared, or a permit.
    pub fn kind(&self) -> LeaseKind {
        self.shared.kind
    }

    /// The secret that extends and releases the lease. Keep it out of logs
    /// and URLs; Debug output leaves it out.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The broker's expiry, in Unix milliseconds of the Redis clock.
    pub fn expires_at_ms(&self) -> u64 {
        self.shared.state().expires_at_ms
    }

    /// How long the lease stays valid by the local clock unless renewed;
    /// zero once ended.
    pub fn remaining(&self) -> Duration {
        let state = self.shared.state();
        match state.end {
            Some(_) => Duration::ZERO,
            None => state.deadline.saturating_duration_since(Instant::now()),
        }
    }

    /// How the lease ended; `None` while held.
    pub fn end(&self) -> Option<LeaseEnd> {
        self.shared.state().end
    }

    /// Why the lease was lost; `None` while held or once released.
    pub fn lost_reason(&self) -> Option<LostReason> {
        match self.end() {
            Some(LeaseEnd::Lost(reason)) => Some(reason),
            _ => None,
        }
    }

    /// Completes the moment the lease ends: `select!` on it beside the work
    /// that needs the lock, so that work is cancelled when the lock is gone.
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.shared.ended.cancelled()
    }

    /// A token cancelled the moment the lease ends, for tasks that outlive a
    /// borrow of the lease. Cancelling it does not end the lease.
    pub fn cancellation(&self) -> CancellationToken {
        self.shared.ended.child_token()
    }

    /// [`Error::LeaseLost`] once the lease was lost, [`Error::Released`]
    /// once released: to stop before a write.
    pub fn check(&self) -> Result<(), Error> {
        self.end().map_or(Ok(()), |end| Err(end.error()))
    }

    /// Renews the lease in the background every TTL / 3 until it is
    /// released, lost, or reaches its maximum hold. Calling it again changes
    /// nothing, and neither does calling it on a lease under a session,
    /// which its session's keepalives renew.
    pub fn keep_alive(&self) {
        let mut state = self.shared.state();
        if !self.shared.in_session
            && state.end.is_none()
            && state.next_renewal.is_none()
            && !state.at_max_hold
        {
            state.next_renewal = Some(state.last_sent + self.shared.ttl / 3);
            drop(state);
            self.shared.wake.notify_one();
        }
    }

    /// A deadline counted from `counted` moves back to count from `sent`:
    /// for a grant whose request was sent at `sent` and answered at
    /// `counted`, when no extend since could confirm it.
    pub(crate) fn count_from(&self, sent: Instant, counted: Instant) {
        {
            let mut state = self.shared.state();
            if state.last_sent == counted {
                state.deadline -= counted.saturating_duration_since(sent);
                state.last_sent = sent;
            }
        }
        self.shared.wake.notify_one();
    }

    /// `POST .../extend`: the lease's remaining validity becomes `ttl` from
    /// now. A lease that ended is never extended: that answers
    /// [`Error::LeaseLost`] or [`Error::Released`] at once. Nor is a lease
    /// under a session, whose validity is the session's: that answers
    /// [`Error::Validation`] without asking.
    pub async fn extend(&self, ttl: Duration) -> Result<RenewalResponse, Error> {
        self.shared
            .extend(ttl, self.shared.client.inner.timeout)
            .await
            .map(|(renewal, _)| renewal)
    }

    /// `POST .../release`: stops renewing and gives the lease back. A lease
    /// the broker already called lost answers [`Error::LeaseLost`]; one that
    /// ran out by the local clock is still released if the broker has it
    /// (then nobody else held it meanwhile). Asking again asks the broker
    /// again, which answers a token's second release as it did the first.
    pub async fn release(&self) -> Result<Released, Error> {
        let shared = &self.shared;
        if let Some(lost) = shared.stop_renewing() {
            return lost;
        }
        let answer = shared.release_call().await.map(|answer| Released {
            fence: answer.fence,
            acknowledged: answer.acknowledged,
        });
        shared.settle(answer)
    }
}

impl Shared {
    /// A lease from a grant whose request was sent at `sent`, not under a
    /// session, whose renewals (none run yet) would ask for what the grant
    /// gave and end at its deadline: the caller sets its own terms.
    pub(crate) fn new(client: Client, family: Family, grant: Grant, sent: Instant) -> Self {
        Self {
            client,
            family,
            name: grant.name,
            token: grant.token,
            fence: grant.fence,
            owner: grant.owner,
            kind: grant.kind,
            ttl: grant.validity,
            hold_until: sent + grant.validity,
            in_session: false,
            state: Mutex::new(State {
                deadline: sent + grant.validity,
                expires_at_ms: grant.expires_at_ms,
                last_sent: sent,
                next_renewal: None,
                at_max_hold: false,
                releasing: false,
                end: None,
            }),
            ended: CancellationToken::new(),
            wake: Notify::new(),
        }
    }

    /// The first half of a release: renewing stops, and a lease the broker
    /// (or its session) already called lost answers so without asking again.
    pub(crate) fn stop_renewing(&self) -> Option<Result<Released, Error>> {
        let end = {
            let mut state = self.state();
            state.next_renewal = None;
            state.releasing = true;
            state.end
        };
        self.wake.notify_one();
        match end {
            Some(LeaseEnd::Lost(reason @ (LostReason::LeaseLost | LostReason::SessionLost))) => {
                Some(Err(Error::LeaseLost { reason }))
            }
            _ => None,
        }
    }

    /// The second half of a release: the lease ends by the broker's answer
    /// about it. Released, or lost if the broker said so; any other failure
    /// leaves it to run out unrenewed, which nobody else can overlap.
    pub(crate) fn settle(&self, answer: Result<Released, Error>) -> Result<Released, Error> {
        self.finish(match &answer {
            Err(Error::LeaseLost { reason }) => LeaseEnd::Lost(*reason),
            _ => LeaseEnd::Released,
        });
        answer
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: use it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the first end and cancels the token.
    pub(crate) fn finish(&self, end: LeaseEnd) {
        {
            let mut state = self.state();
            if state.end.is_some() {
                return;
            }
            state.end = Some(end);
            state.next_renewal = None;
        }
        self.ended.cancel();
        self.wake.notify_one();
    }

    /// One extend within `timeout`; on success the deadline moves to its
    /// send time plus the answered validity. Answers when it was sent.
    pub(crate) async fn extend(
        &self,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<(RenewalResponse, Instant), Error> {
        let end = self.state().end;
        if let Some(end) = end {
            return Err(end.error());
        }
        if self.in_session {
            return Err(crate::session::not_extended());
        }
        let sent = Instant::now();
        let answer = (self.client)
            .extend_token(self.family, &self.name, &self.token, ttl, timeout)
            .await;
        match answer {
            Ok(renewal) => {
                let mut state = self.state();
                // Ended while the extend was in flight: it stays ended.
                if let Some(end) = state.end {
                    return Err(end.error());
                }
                let validity = renewal.validity_ms.min(renewal.ttl_ms);
                state.deadline = sent + Duration::from_millis(validity);
                state.expires_at_ms = renewal.expires_at_ms;
                state.last_sent = sent;
                drop(state);
                self.wake.notify_one();
                Ok((renewal, sent))
            }
            Err(Error::LeaseLost { reason }) => {
                self.finish(LeaseEnd::Lost(reason));
                Err(Error::LeaseLost { reason })
            }
            Err(error) => Err(error),
        }
    }

    pub(crate) async fn release_call(&self) -> Result<ReleaseResponse, Error> {
        let path = route(self.family, &self.name, "/release");
        let body = ReleaseBody::new(self.token.as_str());
        let timeout = self.client.inner.timeout;
        self.client
            .call(Method::POST, &path, Some(&body), timeout)
            .await
    }
}

impl LeaseEnd {
    /// What a call on a lease that ended this way answers.
    fn error(self) -> Error {
        match self {
            Self::Released => Error::Released,
            Self::Lost(reason) => Error::LeaseLost { reason },
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let held = self.shared.state().end.is_none();
        if held {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let shared = Arc::clone(&self.shared);
                runtime.spawn(async move {
                    let _ = shared.release_call().await;
                });
            }
        }
        self.shared.finish(LeaseEnd::Released);
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.shared.name)
            .field("fence", &self.shared.fence)
            .field("owner", &self.shared.owner)
            .field("kind", &self.shared.kind)
            .field("token", &"<redacted>")
            .field("remaining", &self.remaining())
            .field("end", &self.end())
            .finish()
    }
}
