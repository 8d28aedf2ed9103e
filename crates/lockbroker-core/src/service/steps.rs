//! The steps on a lease once granted: extend, release (also of a grant
//! whose answer was lost), and an operator's force release.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{check_token_space, spawn_detached, LockService};
use crate::error::LockError;
use crate::events::{Change, ChangeKind};
use crate::lease::{LeaseToken, Principal, Renewal, Ttl};
use crate::name::LockName;
use crate::store::{ExtendOutcome, ForceReleaseOutcome, LockStore, Release, ReleaseOutcome};
use crate::validation::ValidationError;
use crate::wait::Wake;

impl<S: LockStore> LockService<S> {
    /// After an acquire whose answer was lost, the store may have granted a
    /// lease nobody will hear of, or may still grant it later (a re-sent
    /// command). Releases that token until the release finds the lease, for
    /// as long as the acquire could still arrive (the store's orphan window,
    /// bounded by the lease's own TTL).
    pub(super) fn release_orphan(self: &Arc<Self>, name: &LockName, token: &LeaseToken, ttl: Ttl) {
        let service = Arc::clone(self);
        let (name, token) = (name.clone(), token.clone());
        let window = self
            .store
            .orphan_window()
            .min(Duration::from_millis(ttl.as_millis()));
        spawn_detached(async move {
            let give_up = Instant::now() + window;
            let mut backoff = Duration::from_millis(50);
            loop {
                if let Ok(ReleaseOutcome::Released(_)) = service.store.release(&name, &token).await
                {
                    service.waiters.wake(&Wake::Released {
                        name: name.clone(),
                        next_fair: None,
                    });
                    return;
                }
                if Instant::now() + backoff > give_up {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        });
    }

    /// Sets the remaining TTL of the caller's lease to `ttl_ms` (replace, not
    /// add). A lease under a session is refused, naming `token`: it is valid
    /// exactly while its session is, so only the session's keepalives renew
    /// it (an extend of its own would let it outlive the session).
    pub async fn extend(
        self: &Arc<Self>,
        name: &LockName,
        token: &LeaseToken,
        ttl_ms: Option<u64>,
    ) -> Result<Renewal, LockError> {
        if token.is_under_session() {
            return Err(ValidationError::new(
                "token",
                "is a lease under a session: it is renewed by the session's keepalive \
                 (POST /v1/sessions/{id}/keepalive) and ends with the session, never extended \
                 on its own",
            )
            .into());
        }
        self.extend_lease(name, token, ttl_ms).await
    }

    /// [`LockService::extend`] for any lease, a session's own and those
    /// under it included: the keepalive's renewals.
    pub(super) async fn extend_lease(
        self: &Arc<Self>,
        name: &LockName,
        token: &LeaseToken,
        ttl_ms: Option<u64>,
    ) -> Result<Renewal, LockError> {
        let ttl = Ttl::parse_under(
            "ttl_ms",
            ttl_ms.unwrap_or(self.policy.default_ttl_ms),
            self.policy.max_ttl_ms,
            "locks.max_ttl_ms",
        )?;
        check_token_space(name, token)?;
        let max_hold_ms = self.policy.max_hold_ms.unwrap_or(0);
        let started = Instant::now();
        let outcome = self.store.extend(name, token, ttl, max_hold_ms).await?;
        self.extended(name, token, outcome, started)
    }

    /// What an extend of `token`'s lease on `name`, sent at `started`,
    /// answers: the renewal (its validity less the time the answer took,
    /// and told to the watchers), or why the lease is gone.
    pub(super) fn extended(
        self: &Arc<Self>,
        name: &LockName,
        token: &LeaseToken,
        outcome: ExtendOutcome,
        started: Instant,
    ) -> Result<Renewal, LockError> {
        match outcome {
            ExtendOutcome::Extended(mut renewal) => {
                let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                renewal.validity_ms = renewal.validity_ms.saturating_sub(elapsed);
                self.changed(|| Change {
                    name: name.clone(),
                    kind: ChangeKind::Extended,
                    mode: token.kind(),
                    fence: renewal.fence,
                    owner: renewal.owner.clone(),
                    expires_in_ms: renewal.ttl_ms,
                    expires_at_ms: Some(renewal.expires_at_ms),
                });
                Ok(renewal)
            }
            ExtendOutcome::Lost => Err(LockError::LeaseLost),
            ExtendOutcome::Released => Err(LockError::LeaseReleased),
            ExtendOutcome::ForceReleased { by } => Err(LockError::LeaseForceReleased { by }),
            ExtendOutcome::MaxHoldExceeded { expires_in_ms } => Err(LockError::MaxHoldExceeded {
                max_hold_ms: self.policy.max_hold_ms.unwrap_or(0),
                expires_in_ms,
            }),
        }
    }

    /// Gives the lock back at once and wakes this broker's waiters for it.
    pub async fn release(
        self: &Arc<Self>,
        name: &LockName,
        token: &LeaseToken,
    ) -> Result<Release, LockError> {
        check_token_space(name, token)?;
        match self.store.release(name, token).await? {
            ReleaseOutcome::Released(release) => {
                self.waiters.wake(&Wake::Released {
                    name: name.clone(),
                    next_fair: None,
                });
                // A re-sent release (no hold time) was told once already.
                if release.held_ms.is_some() {
                    self.changed(|| Change {
                        name: name.clone(),
                        kind: ChangeKind::Released,
                        mode: token.kind(),
                        fence: release.fence,
                        owner: None,
                        expires_in_ms: 0,
                        expires_at_ms: None,
                    });
                }
                Ok(release)
            }
            ReleaseOutcome::Lost => Err(LockError::LeaseLost),
            ReleaseOutcome::ForceReleased { by } => Err(LockError::LeaseForceReleased { by }),
        }
    }

    /// Ends whatever lease holds `name` (an operator override) on behalf of
    /// `by`, whom the former holders are told of, and wakes the lock's
    /// waiters exactly as a release does.
    pub async fn force_release(
        self: &Arc<Self>,
        name: &LockName,
        by: &Principal,
    ) -> Result<ForceReleaseOutcome, LockError> {
        let outcome = self.store.force_release(name, by).await?;
        if let ForceReleaseOutcome::Released {
            fence, owner, mode, ..
        } = &outcome
        {
            self.waiters.wake(&Wake::Released {
                name: name.clone(),
                next_fair: None,
            });
            self.changed(|| Change {
                name: name.clone(),
                kind: ChangeKind::ForceReleased,
                mode: *mode,
                fence: *fence,
                owner: owner.clone(),
                expires_in_ms: 0,
                expires_at_ms: None,
            });
        }
        Ok(outcome)
    }
}
