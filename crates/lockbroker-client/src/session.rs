//! Sessions: one keepalive that keeps many leases. [`Client::session`] opens
//! a [`Session`] and keeps it alive in the background; the leases, permits
//! and acquire-alls taken under it ([`Session::lock`], [`Session::semaphore`],
//! [`Session::acquire_all`]) have no TTL or renewal of their own: they are
//! valid while the session is, and end with it.
//!
//! The session's local deadline counts from when its opening or its latest
//! successful keepalive was *sent*, as a lease's does. When a keepalive
//! answers `session_lost`, or the deadline passes without one, the session
//! and every lease under it are lost ([`LostReason::SessionLost`] for the
//! leases); a close marks them released.
//!
//! The plain calls ([`Client::open_session`], [`Client::keep_session`],
//! [`Client::close_session`], [`Client::session_status`]) are the routes
//! themselves, for a process that kept a session's id and token rather than
//! the [`Session`].

mod acquire;
mod keepalive;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lockbroker_api::{
    ErrorCode, SessionClosedResponse, SessionOpenBody, SessionRenewalResponse, SessionResponse,
    SessionStatusResponse, SessionTokenBody,
};
use reqwest::Method;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::client::{encode, Client};
use crate::error::{Error, LostReason};
use crate::lease::{LeaseEnd, Shared};
use crate::lock::{default_owner, millis, DEFAULT_TTL};

pub use acquire::{SessionAcquireOptions, SessionLock, SessionSemaphore};

/// How [`Client::session`] opens a session. `..SessionOptions::default()`
/// fills in the rest: a 30 s TTL, `host:pid` as owner, and the broker's
/// lock-delay.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// How long the session, and every lease under it, stays valid after
    /// each keepalive; one is sent every TTL / 3.
    pub ttl: Duration,
    /// Who holds the session, shown on it and on its leases; `None` sends
    /// `host:pid`.
    pub owner: Option<String>,
    /// How long each lock of the session stays unavailable when the session
    /// expires (not when it closes); `None` for the broker's default.
    pub lock_delay: Option<Duration>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_TTL,
            owner: None,
            lock_delay: None,
        }
    }
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// Its holder closed it (or dropped it): its leases were released.
    Closed,
    /// It was lost: `SessionLost` when a keepalive was told so, `Expired`
    /// when it ran out by the local clock. Its leases were lost with it.
    Lost(LostReason),
}

/// An open session, kept alive in the background until closed or lost.
///
/// [`Session::lost`] completes, and [`Session::cancellation`] tokens are
/// cancelled, the moment the session ends; every lease under it ends at
/// the same moment (lost with [`LostReason::SessionLost`], or released by a
/// close). Dropping a session closes it in the background. Its `Debug`
/// never shows the token.
pub struct Session {
    pub(crate) shared: Arc<SessionShared>,
}

/// What the session, its leases' handles and its keepalive task share.
pub(crate) struct SessionShared {
    pub(crate) client: Client,
    pub(crate) id: String,
    pub(crate) token: String,
    pub(crate) owner: Option<String>,
    /// The TTL each keepalive gives, as the broker answered it.
    pub(crate) ttl: Duration,
    pub(crate) lock_delay: Duration,
    pub(crate) state: Mutex<State>,
    /// Cancelled when the session ends.
    pub(crate) ended: CancellationToken,
    /// Wakes the keepalive task when the state changed under it.
    pub(crate) wake: Notify,
}

pub(crate) struct State {
    /// Local deadline, never later than the broker's expiry.
    pub(crate) deadline: Instant,
    pub(crate) expires_at_ms: u64,
    /// When to send the next keepalive; `None` once they stopped.
    pub(crate) next_keepalive: Option<Instant>,
    /// A close was asked for: a keepalive told `session_lost` meanwhile
    /// leaves the end to the close's answer.
    pub(crate) closing: bool,
    pub(crate) end: Option<SessionEnd>,
    /// The leases taken under the session, as long as they exist.
    pub(crate) leases: Vec<Weak<Shared>>,
}

impl Client {
    /// `POST /v1/sessions`, then keeps the session alive in the background
    /// (one keepalive every TTL / 3) until it is closed, dropped or lost.
    /// An opening is not retried: a lost answer would leave a session
    /// behind, which then runs out on its own.
    pub async fn session(&self, options: SessionOptions) -> Result<Session, Error> {
        let sent = Instant::now();
        let opened = self.open_session(&options).await?;
        Ok(Session::start(self.clone(), opened, sent))
    }

    /// `POST /v1/sessions`: opens a session and answers it, token included
    /// (a secret: its `Debug` leaves it out). Nothing keeps it alive: see
    /// [`Client::session`].
    pub async fn open_session(&self, options: &SessionOptions) -> Result<SessionResponse, Error> {
        let body = SessionOpenBody {
            ttl_ms: Some(millis(options.ttl)),
            owner: Some(options.owner.clone().unwrap_or_else(default_owner)),
            lock_delay_ms: options.lock_delay.map(millis),
        };
        let timeout = self.inner.timeout;
        self.call(Method::POST, "/v1/sessions", Some(&body), timeout)
            .await
    }

    /// `POST /v1/sessions/{id}/keepalive`: the session `token` holds, and
    /// every lease under it, stay valid its TTL from now.
    /// [`Error::LeaseLost`] with [`LostReason::SessionLost`] when the
    /// session is not open.
    pub async fn keep_session(
        &self,
        id: &str,
        token: &str,
    ) -> Result<SessionRenewalResponse, Error> {
        self.keep_token(id, token, self.inner.timeout).await
    }

    /// One keepalive within `timeout`.
    pub(crate) async fn keep_token(
        &self,
        id: &str,
        token: &str,
        timeout: Duration,
    ) -> Result<SessionRenewalResponse, Error> {
        let path = format!("/v1/sessions/{}/keepalive", encode(id));
        let body = SessionTokenBody::new(token);
        self.call(Method::POST, &path, Some(&body), timeout).await
    }

    /// `POST /v1/sessions/{id}/close`: ends the session and releases every
    /// lease under it. Asking again answers the same while the broker
    /// remembers the release.
    pub async fn close_session(
        &self,
        id: &str,
        token: &str,
    ) -> Result<SessionClosedResponse, Error> {
        let path = format!("/v1/sessions/{}/close", encode(id));
        let body = SessionTokenBody::new(token);
        let timeout = self.inner.timeout;
        self.call(Method::POST, &path, Some(&body), timeout).await
    }

    /// `GET /v1/sessions/{id}`: whether the session is open, for how long,
    /// and how many leases it holds. Never its token.
    pub async fn session_status(&self, id: &str) -> Result<SessionStatusResponse, Error> {
        let path = format!("/v1/sessions/{}", encode(id));
        self.call(Method::GET, &path, None::<&()>, self.inner.timeout)
            .await
    }
}

impl Session {
    /// The session from its opening, sent at `sent`, with its keepalive
    /// task running.
    fn start(client: Client, opened: SessionResponse, sent: Instant) -> Self {
        let ttl = Duration::from_millis(opened.ttl_ms);
        let validity = Duration::from_millis(opened.validity_ms.min(opened.ttl_ms));
        let shared = Arc::new(SessionShared {
            client,
            id: opened.id,
            token: opened.token,
            owner: opened.owner,
            ttl,
            lock_delay: Duration::from_millis(opened.lock_delay_ms),
            state: Mutex::new(State {
                deadline: sent + validity,
                expires_at_ms: opened.expires_at_ms,
                next_keepalive: Some(sent + ttl / 3),
                closing: false,
                end: None,
                leases: Vec::new(),
            }),
            ended: CancellationToken::new(),
            wake: Notify::new(),
        });
        tokio::spawn(keepalive::run(Arc::clone(&shared)));
        Self { shared }
    }

    /// The session's id, for its routes. Not a secret.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The secret that keeps, closes and takes leases under the session.
    /// Keep it out of logs and URLs; Debug output leaves it out.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The holder's label, as the broker answered it.
    pub fn owner(&self) -> Option<&str> {
        self.shared.owner.as_deref()
    }

    /// The validity each keepalive gives the session and its leases.
    pub fn ttl(&self) -> Duration {
        self.shared.ttl
    }

    /// The lock-delay of every lease under the session.
    pub fn lock_delay(&self) -> Duration {
        self.shared.lock_delay
    }

    /// The broker's expiry, in Unix milliseconds of the Redis clock.
    pub fn expires_at_ms(&self) -> u64 {
        self.shared.state().expires_at_ms
    }

    /// How long the session stays valid by the local clock unless kept
    /// alive; zero once ended.
    pub fn remaining(&self) -> Duration {
        let state = self.shared.state();
        match state.end {
            Some(_) => Duration::ZERO,
            None => state.deadline.saturating_duration_since(Instant::now()),
        }
    }

    /// How the session ended; `None` while open.
    pub fn end(&self) -> Option<SessionEnd> {
        self.shared.state().end
    }

    /// Completes the moment the session ends (lost or closed), when every
    /// lease under it ends too.
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.shared.ended.cancelled()
    }

    /// A token cancelled the moment the session ends. Cancelling it does
    /// not end the session.
    pub fn cancellation(&self) -> CancellationToken {
        self.shared.ended.child_token()
    }

    /// [`Error::LeaseLost`] with [`LostReason::SessionLost`] once the
    /// session ended: to stop before a write.
    pub fn check(&self) -> Result<(), Error> {
        self.shared.check()
    }

    /// `GET /v1/sessions/{id}`: the session as the broker has it now.
    pub async fn status(&self) -> Result<SessionStatusResponse, Error> {
        self.shared.client.session_status(&self.shared.id).await
    }

    /// `POST /v1/sessions/{id}/close`: stops the keepalives, ends the
    /// session and releases every lease under it, which then read released.
    /// A session already found lost answers [`Error::LeaseLost`] without
    /// asking; one the broker says is not open ends lost. Any other failure
    /// ends it here too, and the broker's copy runs out at its TTL, which
    /// nobody else can overlap. Asking again asks the broker again.
    pub async fn close(&self) -> Result<SessionClosedResponse, Error> {
        let shared = &self.shared;
        {
            let mut state = shared.state();
            if let Some(SessionEnd::Lost(_)) = state.end {
                return Err(session_lost());
            }
            state.closing = true;
            state.next_keepalive = None;
        }
        shared.wake.notify_one();
        let answer = shared.client.close_session(&shared.id, &shared.token).await;
        shared.finish(match &answer {
            Err(Error::LeaseLost { .. }) => SessionEnd::Lost(LostReason::SessionLost),
            _ => SessionEnd::Closed,
        });
        answer
    }
}

impl SessionShared {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: use it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What a call under the session answers once it ended.
    pub(crate) fn check(&self) -> Result<(), Error> {
        match self.state().end {
            Some(_) => Err(session_lost()),
            None => Ok(()),
        }
    }

    /// Takes `lease` into the session, which from now on moves its deadline
    /// and ends it; `false` if the session already ended.
    pub(crate) fn join(&self, lease: &Arc<Shared>) -> bool {
        let mut state = self.state();
        if state.end.is_some() {
            return false;
        }
        state.leases.retain(|lease| lease.strong_count() > 0);
        state.leases.push(Arc::downgrade(lease));
        true
    }

    /// Records the first end, ends every lease under the session the same
    /// way, and cancels the token.
    pub(crate) fn finish(&self, end: SessionEnd) {
        let leases = {
            let mut state = self.state();
            if state.end.is_some() {
                return;
            }
            state.end = Some(end);
            state.next_keepalive = None;
            std::mem::take(&mut state.leases)
        };
        let lease_end = match end {
            SessionEnd::Closed => LeaseEnd::Released,
            SessionEnd::Lost(_) => LeaseEnd::Lost(LostReason::SessionLost),
        };
        for lease in leases.iter().filter_map(Weak::upgrade) {
            lease.finish(lease_end);
        }
        self.ended.cancel();
        self.wake.notify_one();
    }
}

/// What a call under a session that ended answers.
pub(crate) fn session_lost() -> Error {
    Error::LeaseLost {
        reason: LostReason::SessionLost,
    }
}

/// What extending a lease under a session answers: its validity is the
/// session's.
pub(crate) fn not_extended() -> Error {
    Error::Validation {
        code: ErrorCode::InvalidRequest,
        field: Some("session".to_owned()),
        message: "a lease under a session is renewed by the session's keepalives".to_owned(),
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let open = self.shared.state().end.is_none();
        if open {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let shared = Arc::clone(&self.shared);
                runtime.spawn(async move {
                    let _ = shared.client.close_session(&shared.id, &shared.token).await;
                });
            }
        }
        self.shared.finish(SessionEnd::Closed);
    }
}

impl fmt::Debug for SessionShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .field("ttl", &self.ttl)
            .field("token", &"<redacted>")
            .field("leases", &state.leases.len())
            .field("end", &state.end)
            .finish()
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_never_shows_its_token() {
        let client = Client::new("http://127.0.0.1:1").expect("client");
        let opened = SessionResponse {
            id: "0123456789abcdef".to_owned(),
            token: "0123456789abcdef.sekrit".to_owned(),
            ttl_ms: 3_000,
            expires_at_ms: 1,
            validity_ms: 3_000,
            lock_delay_ms: 0,
            owner: Some("batch-7".to_owned()),
        };
        let session = Session::start(client, opened, Instant::now());
        let shown = format!("{session:?}");
        assert!(!shown.contains("sekrit"), "{shown}");
        assert!(shown.contains("0123456789abcdef"), "{shown}");
        let lock = session.lock("ledger:a");
        assert!(!format!("{lock:?}").contains("sekrit"), "{lock:?}");
        session.shared.finish(SessionEnd::Closed);
    }
}
