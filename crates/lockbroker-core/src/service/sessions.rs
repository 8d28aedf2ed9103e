//! Sessions: open, keep alive, close, read, and acquires under a session.
//!
//! A session is an exclusive lease on its id ([`Space::Session`](crate::Space)),
//! with a record of its terms and of the leases taken under it. A lease
//! taken under a session is an ordinary lease (its own token and fence)
//! whose TTL is what is left of the session's, and which every keepalive
//! renews to the session's TTL right after renewing the session: so it
//! ends with the session (the keepalive that stops coming, or the close),
//! by the same expiry, lock-delay and wake-up rules as any lease.

use std::sync::Arc;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{Grant, LockService};

mod book;
mod ended;
mod renew;

use crate::error::{LockError, StoreError};
use crate::lease::{LockDelay, Principal, Ttl};
use crate::name::LockName;
use crate::policy::AcquireRequest;
use crate::session::{
    SessionEntry, SessionId, SessionMember, SessionTerms, SessionToken, SessionWrite,
};
use crate::store::LockStore;
use crate::validation::ValidationError;
pub(super) use book::SessionBook;
use ended::lease_end;
pub use ended::{EndedLease, LeaseEnd};

/// A session as a transport received its opening.
#[derive(Clone, Debug, Default)]
pub struct SessionRequest {
    /// How long the session (and each lease under it) stays valid after a
    /// keepalive; the policy's default TTL when absent.
    pub ttl_ms: Option<u64>,
    /// Free-form label of who holds the session, shown on its leases.
    pub owner: Option<String>,
    /// The lock-delay of every lease under the session.
    pub lock_delay_ms: Option<u64>,
    /// Who opens it.
    pub principal: Principal,
}

/// A session just opened: the only answer that shows its token.
#[derive(Debug)]
pub struct OpenedSession {
    /// The session's id.
    pub id: SessionId,
    /// The secret that keeps, closes and takes leases under the session.
    pub token: SessionToken,
    /// The validity each keepalive gives.
    pub ttl_ms: u64,
    /// When the session expires without a keepalive, in Unix milliseconds
    /// of the store's clock.
    pub expires_at_ms: u64,
    /// How long the session is sure to stay valid, as for a lease.
    pub validity_ms: u64,
    /// The lock-delay of its leases.
    pub lock_delay_ms: u64,
    /// The label given.
    pub owner: Option<String>,
}

/// What a keepalive did.
#[derive(Debug)]
pub struct KeptSession {
    /// The validity given to the session and its leases.
    pub ttl_ms: u64,
    /// When the session, and every lease renewed with it, is sure to be
    /// valid until, in Unix milliseconds of the store's clock: the earliest
    /// of their expiries.
    pub expires_at_ms: u64,
    /// How long the session and every lease renewed with it are sure to
    /// stay valid.
    pub validity_ms: u64,
    /// The leases renewed with it.
    pub leases: u64,
    /// Leases of the session that had ended (released by their holder,
    /// force-released, past their max hold or lost): taken out of the
    /// session, each with why.
    pub ended: Vec<EndedLease>,
}

/// A session as anyone may read it: never its token.
#[derive(Debug)]
pub struct SessionState {
    /// Whether the session's lease is valid now.
    pub open: bool,
    /// The label of its holder.
    pub owner: Option<String>,
    /// How long it stays valid without a keepalive (0 when not open).
    pub expires_in_ms: u64,
    /// Its terms, while its record is kept.
    pub terms: Option<SessionTerms>,
    /// The leases its record holds.
    pub leases: u64,
}

/// The shortest TTL a session may have: shorter ones would run out on
/// their way to the caller.
const MIN_SESSION_TTL_MS: u64 = 100;

/// How far past its session a lease may end before it is shortened: the
/// time of the steps between reading the session and granting the lease.
const OVERHANG_MS: u64 = 20;

/// A lease's end, told to a session's holder as the session's.
fn as_session(error: LockError) -> LockError {
    match error {
        LockError::LeaseLost | LockError::LeaseReleased | LockError::LeaseForceReleased { .. } => {
            LockError::SessionLost
        }
        other => other,
    }
}

fn millis_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl<S: LockStore> LockService<S> {
    /// Opens the session `id` (fresh from [`SessionId::generate`]): its own
    /// lease, then its terms in its record.
    pub async fn open_session(
        self: &Arc<Self>,
        id: SessionId,
        request: SessionRequest,
    ) -> Result<OpenedSession, LockError> {
        let lock_delay = LockDelay::parse(
            request
                .lock_delay_ms
                .unwrap_or(self.policy.default_lock_delay_ms),
            self.policy.max_lock_delay_ms,
        )?;
        if request.ttl_ms.is_some_and(|ms| ms < MIN_SESSION_TTL_MS) {
            return Err(ValidationError::new(
                "ttl_ms",
                format!("must be at least {MIN_SESSION_TTL_MS} for a session"),
            )
            .into());
        }
        let max = self.policy.max_sessions_per_key;
        if !self.sessions.may_open(&request.principal, max) {
            return Err(LockError::TooManySessions { max });
        }
        let principal = request.principal.clone();
        let name = id.lease_name();
        let grant = self
            .acquire_plain(
                &name,
                AcquireRequest {
                    ttl_ms: request.ttl_ms,
                    owner: request.owner,
                    principal: request.principal,
                    ..AcquireRequest::default()
                },
                false,
            )
            .await?;
        let lease = grant.lease().clone();
        let terms = SessionTerms {
            ttl: Ttl::parse("ttl_ms", lease.ttl_ms, u64::MAX)?,
            lock_delay,
        };
        match (self.store)
            .session_write(&name, &lease.token, SessionEntry::Terms(terms))
            .await?
        {
            SessionWrite::Written { .. } => {}
            // Only a lease that ran out before its terms were written (the
            // store answered slowly): the grant is given back.
            SessionWrite::NotOpen | SessionWrite::Full => {
                return Err(LockError::Store(StoreError::Unavailable(
                    "the session's lease ran out before its terms were written; retry, or ask \
                     a longer ttl_ms"
                        .into(),
                )))
            }
        }
        grant.delivered();
        self.sessions.kept(&id, &principal, lease.validity_ms);
        Ok(OpenedSession {
            token: SessionToken::new(id.clone(), lease.token),
            id,
            ttl_ms: lease.ttl_ms,
            expires_at_ms: lease.expires_at_ms,
            validity_ms: lease.validity_ms,
            lock_delay_ms: lock_delay.as_millis(),
            owner: lease.owner,
        })
    }

    /// Renews the session `id`, then each lease under it, to the session's
    /// TTL: one step for the session and one per lease, the leases' all at
    /// once. A lease that ended meanwhile is taken out of the session and
    /// named. If a lease's step fails, the answer is that error (the
    /// session itself was renewed): a keepalive is safe to re-send.
    /// `principal` (who asks) counts the session against its key's limit
    /// on this broker if this broker did not know it yet.
    pub async fn keep_session(
        self: &Arc<Self>,
        id: &SessionId,
        token: &SessionToken,
        principal: &Principal,
    ) -> Result<KeptSession, LockError> {
        if token.id() != id {
            return Err(LockError::SessionLost);
        }
        let name = id.lease_name();
        let record = self.store.session_read(&name, Some(token.lease())).await?;
        let (Some(_), Some(terms)) = (record.valid_for_ms, record.terms) else {
            return Err(LockError::SessionLost);
        };
        let (renewal, renewed) = match self
            .renew_together(&name, token.lease(), record.members.clone(), terms.ttl)
            .await
        {
            Some(together) => together?,
            None => {
                self.renew_one_by_one(&name, token, record.members, terms.ttl)
                    .await?
            }
        };
        let (mut leases, mut ended, mut ended_tokens, mut failure) =
            (0, Vec::new(), Vec::new(), None);
        // The answer promises every lease it renewed until the earliest of
        // their expiries and the session's: a lease renewed a little after
        // the session (from the time the session had left) may end first.
        let (mut expires_at_ms, mut validity_ms) = (renewal.expires_at_ms, renewal.validity_ms);
        for (member, renewed) in renewed {
            match renewed {
                Ok(lease) => {
                    leases += 1;
                    expires_at_ms = expires_at_ms.min(lease.expires_at_ms);
                    validity_ms = validity_ms.min(lease.validity_ms);
                }
                Err(error) => match lease_end(&error) {
                    Some(end) => {
                        ended.push(EndedLease {
                            name: member.name,
                            end,
                        });
                        ended_tokens.push(member.token);
                    }
                    None => failure = Some(error),
                },
            }
        }
        if !ended_tokens.is_empty() {
            self.store
                .session_forget(&name, Some(&ended_tokens))
                .await?;
        }
        if let Some(error) = failure {
            return Err(error);
        }
        self.sessions.kept(id, principal, renewal.validity_ms);
        ended.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(KeptSession {
            ttl_ms: renewal.ttl_ms,
            expires_at_ms,
            validity_ms,
            leases,
            ended,
        })
    }

    /// Closes the session `id`: its lease first (after which nothing joins
    /// it), then every lease under it, all at once. Answers how many leases
    /// it released. Safe to re-send while the store remembers the release.
    pub async fn close_session(
        self: &Arc<Self>,
        id: &SessionId,
        token: &SessionToken,
    ) -> Result<u64, LockError> {
        if token.id() != id {
            return Err(LockError::SessionLost);
        }
        let name = id.lease_name();
        self.release(&name, token.lease())
            .await
            .map_err(as_session)?;
        self.sessions.ended(id);
        let record = self.store.session_read(&name, None).await?;
        let mut releases = JoinSet::new();
        for member in record.members {
            let service = Arc::clone(self);
            releases.spawn(async move { service.release(&member.name, &member.token).await });
        }
        let (mut released, mut failure) = (0, None);
        while let Some(joined) = releases.join_next().await {
            match joined {
                Ok(Ok(release)) if release.held_ms.is_some() => released += 1,
                Ok(Ok(_) | Err(LockError::LeaseLost | LockError::LeaseForceReleased { .. })) => {}
                Ok(Err(error)) => failure = Some(error),
                Err(_) => {}
            }
        }
        if let Some(error) = failure {
            return Err(error);
        }
        self.store.session_forget(&name, None).await?;
        Ok(released)
    }

    /// Reads the session `id`: whether it is open, for how long, and how
    /// many leases it holds. Never its token.
    pub async fn session_state(&self, id: &SessionId) -> Result<SessionState, LockError> {
        let name = id.lease_name();
        let status = self.store.status(&name).await?;
        let record = self.store.session_read(&name, None).await?;
        Ok(SessionState {
            open: status.held,
            owner: status.owner,
            expires_in_ms: if status.held { status.expires_in_ms } else { 0 },
            terms: record.terms,
            leases: record.members.len() as u64,
        })
    }

    /// Sessions open and sessions expired as this broker knows them (those
    /// it opened or last kept alive).
    pub fn session_counts(&self) -> (u64, u64) {
        self.sessions.counts()
    }

    /// An acquire under the session whose token is `session`: the lease's
    /// TTL is what is left of the session's, its lock-delay the session's,
    /// and it joins the session's record, or is given back.
    pub(super) async fn acquire_in_session(
        self: &Arc<Self>,
        name: &LockName,
        mut request: AcquireRequest,
        session: &str,
    ) -> Result<Grant<S>, LockError> {
        for (given, field) in [
            (request.ttl_ms.is_some(), "ttl_ms"),
            (request.lock_delay_ms.is_some(), "lock_delay_ms"),
        ] {
            if given {
                return Err(ValidationError::new(
                    field,
                    "is the session's for a lease under a session: leave it out, or leave out \
                     `session`",
                )
                .into());
            }
        }
        let token = SessionToken::parse("session", session)?;
        let session = token.id().lease_name();
        let record = self
            .store
            .session_read(&session, Some(token.lease()))
            .await?;
        let (Some(valid_for_ms), Some(terms)) = (record.valid_for_ms, record.terms) else {
            return Err(LockError::SessionLost);
        };
        let max = self.policy.max_leases_per_session;
        if record.members.len() >= max as usize {
            return Err(LockError::SessionFull { max });
        }
        request.ttl_ms = Some(valid_for_ms.min(terms.ttl.as_millis()));
        // A lease that names no holder carries its session's.
        if request.owner.is_none() {
            request.owner = record.owner;
        }
        request.lock_delay_ms = Some(terms.lock_delay.as_millis());
        let mut grant = self.acquire_plain(name, request, true).await?;
        let granted = Instant::now();
        let member = SessionMember {
            name: name.clone(),
            token: grant.lease.token.clone(),
        };
        let entry = SessionEntry::Member {
            member: &member,
            max_members: max,
        };
        let (valid_for_ms, session_ends_ms) = match self
            .store
            .session_write(&session, token.lease(), entry)
            .await?
        {
            SessionWrite::Written {
                valid_for_ms,
                expires_at_ms,
            } => (valid_for_ms, expires_at_ms),
            // Dropping the grant gives it back.
            SessionWrite::NotOpen => return Err(LockError::SessionLost),
            SessionWrite::Full => return Err(LockError::SessionFull { max }),
        };
        // `ttl_ms` stays counted from the grant, as every grant's is
        // (`expires_at_ms - ttl_ms` dates it).
        let lease = &mut grant.lease;
        let granted_at = lease.expires_at_ms.saturating_sub(lease.ttl_ms);
        // A grant after a wait got the TTL the session had when the wait
        // began: it is shortened to end with the session.
        let overhang = (lease.ttl_ms)
            .saturating_sub(millis_since(granted))
            .saturating_sub(valid_for_ms);
        if overhang > OVERHANG_MS {
            let renewal =
                Box::pin(self.extend_lease(name, &member.token, Some(valid_for_ms.max(1)))).await?;
            let lease = &mut grant.lease;
            lease.expires_at_ms = renewal.expires_at_ms;
            lease.validity_ms = lease.validity_ms.min(renewal.validity_ms);
        }
        // The answer never promises the lease past its session's end; the
        // lease itself may hold its name for the time of the steps between
        // the session's read and the grant (at most `OVERHANG_MS`) longer.
        let lease = &mut grant.lease;
        let ends = lease.expires_at_ms.min(session_ends_ms);
        lease.validity_ms = (lease.validity_ms).saturating_sub(lease.expires_at_ms - ends);
        lease.expires_at_ms = ends;
        lease.ttl_ms = ends.saturating_sub(granted_at).max(1);
        Ok(grant)
    }
}
