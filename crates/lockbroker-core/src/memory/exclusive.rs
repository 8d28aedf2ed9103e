//! Exclusive leases in memory, following `acquire.lua`, `extend.lua` and
//! `release.lua` (with the memos of `memos.lua`) step for step.

use super::backend::{Backend, Memo, Record};
use super::{owner_of, MemoryStore, RELEASE_MEMO_MS};
use crate::error::StoreError;
use crate::lease::{Blockers, Fence, Holder, Lease, LeaseKind, Renewal, MAX_SHOWN_BLOCKERS};
use crate::name::LockName;
use crate::store::{AcquireOutcome, AcquireParams, ExtendOutcome, Release, ReleaseOutcome};
use crate::wait::Wake;
use crate::LeaseToken;

impl MemoryStore {
    /// An exclusive lease, as `acquire.lua` grants it.
    pub(super) fn acquire_exclusive(
        &self,
        backend: &mut Backend,
        params: &AcquireParams<'_>,
        now_us: u64,
    ) -> Result<AcquireOutcome, StoreError> {
        let now_ms = now_us / 1_000;
        let name = params.name;
        // As acquire.lua: a fair waiter joins whenever it is turned away,
        // another once a queue exists or shared leases block it.
        let wait_in_line = |backend: &mut Backend, blocked_by_shared: bool| {
            params
                .fair
                .filter(|fair| {
                    fair.always || blocked_by_shared || backend.queues.contains_key(name)
                })
                .map(|fair| backend.queue_join(name, fair.waiter_id, now_us, fair.entry_ttl_ms))
        };
        let current = backend.leases.get(name).filter(|r| !r.released).cloned();
        if let Some(cur) = &current {
            let available_in_ms = cur.kept_until_ms - now_ms;
            if cur.expires_ms > now_ms {
                let same_retry = params.request_id.is_some_and(|rid| {
                    cur.rid == rid.as_str()
                        && cur.owner == params.owner.map_or("", |o| o.as_str())
                        && cur.by == params.principal.as_str()
                });
                if cur.token == params.token.expose() || same_retry {
                    return Ok(AcquireOutcome::Granted(Lease {
                        name: name.clone(),
                        token: LeaseToken::parse(&cur.token)
                            .map_err(|_| StoreError::Protocol("stored token".into()))?,
                        fence: Fence::new(cur.fence),
                        ttl_ms: cur.expires_ms - now_ms,
                        expires_at_ms: cur.expires_ms,
                        validity_ms: cur.expires_ms - now_ms,
                        owner: owner_of(&cur.owner),
                    }));
                }
            }
            if params.waits && cur.expires_ms > now_ms {
                if let Some(record) = backend.leases.get_mut(name) {
                    record.watched = true;
                }
            }
            let expires_in_ms = cur.expires_ms.saturating_sub(now_ms);
            return Ok(AcquireOutcome::Busy {
                blockers: Blockers::one(Holder {
                    mode: LeaseKind::Exclusive,
                    owner: owner_of(&cur.owner),
                    fence: Fence::new(cur.fence),
                    expires_in_ms,
                    available_in_ms,
                }),
                queue_position: wait_in_line(backend, false),
            });
        }
        let last = backend.last_fence(name);
        // Shared leases (or their lock-delay) hold the lock: the last to free
        // decides when to look again.
        let shared = backend.holder_sets.get_mut(name).map(|set| {
            set.watched |= params.waits;
            set.occupying(now_ms, LeaseKind::Shared)
        });
        if let Some(mut holders) = shared {
            let last_to_free = holders.iter().max_by_key(|h| h.available_in_ms).cloned();
            holders.truncate(MAX_SHOWN_BLOCKERS);
            if let Some(holder) = last_to_free {
                return Ok(AcquireOutcome::Busy {
                    blockers: Blockers {
                        holder,
                        holders,
                        limit: None,
                    },
                    queue_position: wait_in_line(backend, true),
                });
            }
        }
        let waiter_id = params.fair.map(|f| f.waiter_id);
        if let Some(head) = backend.queue_head(name, now_ms) {
            if Some(head.as_str()) != waiter_id {
                return Ok(AcquireOutcome::Busy {
                    blockers: Blockers::queue(Fence::new(last)),
                    queue_position: wait_in_line(backend, false),
                });
            }
            backend.queue_leave(name, &head);
        }
        let fence = self.next_fence(last, now_us);
        let ttl_ms = params.ttl.as_millis();
        let expires_ms = now_ms + ttl_ms;
        backend.fences.insert(name.clone(), fence);
        backend
            .leases
            .insert(name.clone(), Record::granted(params, fence, now_ms));
        if waiter_id.is_some() {
            if let Some(next) = backend.queue_head(name, now_ms) {
                backend.announce(&self.broker_id, &Wake::Turn { waiter_id: next });
            }
        }
        Ok(AcquireOutcome::Granted(Lease {
            name: name.clone(),
            token: params.token.clone(),
            fence: Fence::new(fence),
            ttl_ms,
            expires_at_ms: expires_ms,
            validity_ms: ttl_ms,
            owner: params.owner.map(|o| o.as_str().to_owned()),
        }))
    }

    /// As `extend.lua`.
    pub(super) fn extend_exclusive(
        backend: &mut Backend,
        name: &LockName,
        token: &LeaseToken,
        ttl_ms: u64,
        max_hold_ms: u64,
        now_ms: u64,
    ) -> ExtendOutcome {
        // Released (or force-released), and the lock granted again since:
        // the memo tells.
        if let Some(memo) = backend.memo_of(name, token, now_ms) {
            return memo.extend_outcome();
        }
        let Some(cur) = backend.record_of(name, token) else {
            return ExtendOutcome::Lost;
        };
        if cur.released {
            return ExtendOutcome::Released;
        }
        if cur.expires_ms <= now_ms {
            return ExtendOutcome::Lost;
        }
        let new_expiry = now_ms + ttl_ms;
        if max_hold_ms > 0 && new_expiry > cur.acquired_ms + max_hold_ms {
            return ExtendOutcome::MaxHoldExceeded {
                expires_in_ms: cur.expires_ms - now_ms,
            };
        }
        cur.expires_ms = new_expiry;
        cur.kept_until_ms = new_expiry + cur.delay_ms;
        ExtendOutcome::Extended(Renewal {
            fence: Fence::new(cur.fence),
            ttl_ms,
            expires_at_ms: new_expiry,
            validity_ms: ttl_ms,
            owner: owner_of(&cur.owner),
            limit: None,
        })
    }

    /// As `release.lua`.
    pub(super) fn release_exclusive(
        &self,
        backend: &mut Backend,
        name: &LockName,
        token: &LeaseToken,
        now_ms: u64,
    ) -> ReleaseOutcome {
        // Released (or force-released) already, and the lock perhaps granted
        // again since.
        if let Some(memo) = backend.memo_of(name, token, now_ms) {
            return memo.release_outcome();
        }
        let Some(cur) = backend.record_of(name, token) else {
            return ReleaseOutcome::Lost;
        };
        let fence = Fence::new(cur.fence);
        if cur.released {
            return ReleaseOutcome::Released(Release {
                fence,
                held_ms: None,
                acknowledged: None,
            });
        }
        if cur.expires_ms <= now_ms {
            return ReleaseOutcome::Lost;
        }
        let held_ms = now_ms - cur.acquired_ms;
        cur.released = true;
        cur.expires_ms = now_ms;
        cur.kept_until_ms = now_ms + RELEASE_MEMO_MS;
        let watched = cur.watched;
        let memo = Memo {
            token: token.expose().to_owned(),
            fence: fence.get(),
            forced_by: None,
        };
        backend.remember_release(name, memo, now_ms + RELEASE_MEMO_MS);
        let next_fair = backend.queue_head(name, now_ms);
        // As in Redis: only a release that somebody waits for is announced.
        if watched || next_fair.is_some() {
            backend.announce(
                &self.broker_id,
                &Wake::Released {
                    name: name.clone(),
                    next_fair,
                },
            );
        }
        ReleaseOutcome::Released(Release {
            fence,
            held_ms: Some(held_ms),
            acknowledged: None,
        })
    }
}
