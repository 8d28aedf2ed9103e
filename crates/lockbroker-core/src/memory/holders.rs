//! Holder sets in memory: a lock's shared leases and a semaphore's permits,
//! following `holders.lua`, `hold.lua`, `hold_extend.lua` and
//! `hold_release.lua` step for step.

use std::collections::{HashMap, VecDeque};

use super::backend::{Backend, Record};
use super::{owner_of, MemoryStore, RELEASE_MEMO_MS};
use crate::error::StoreError;
use crate::lease::{
    Blockers, Fence, Holder, Lease, LeaseKind, LeaseToken, Principal, Renewal, MAX_SHOWN_BLOCKERS,
};
use crate::name::LockName;
use crate::store::{AcquireOutcome, AcquireParams, ExtendOutcome, Release, ReleaseOutcome};
use crate::wait::Wake;

/// How many released leases of one holder set are remembered at most, as
/// `holders.lua` keeps them.
const HOLDER_MEMOS: usize = 64;

/// The leases of one name that many may hold at once.
#[derive(Default)]
pub(super) struct HolderSet {
    /// By token; released ones stay as memos until `kept_until_ms`.
    pub(super) leases: HashMap<String, Record>,
    /// A semaphore's limit in force while any permit takes a place.
    pub(super) limit: Option<u32>,
    /// The tokens of the released leases remembered, the oldest first.
    released: VecDeque<String>,
    /// A caller that waits was turned away: releases are announced.
    pub(super) watched: bool,
}

impl HolderSet {
    /// Drops leases that stopped taking a place and memos past their time.
    pub(super) fn prune(&mut self, now_ms: u64) {
        self.leases.retain(|_, r| r.kept_until_ms > now_ms);
    }

    /// Remembers that `token` was released, forgetting the oldest released
    /// lease beyond [`HOLDER_MEMOS`], as `hold_release.lua` does.
    pub(super) fn remember_release(&mut self, token: &str) {
        self.released.retain(|t| self.leases.contains_key(t));
        self.released.push_back(token.to_owned());
        if self.released.len() > HOLDER_MEMOS {
            if let Some(oldest) = self.released.pop_front() {
                self.leases.remove(&oldest);
            }
        }
    }

    /// The leases taking a place at `now_ms` (valid or in their lock-delay),
    /// the first to free first.
    pub(super) fn occupying(&self, now_ms: u64, kind: LeaseKind) -> Vec<Holder> {
        let mut holders: Vec<Holder> = (self.leases.values())
            .filter(|r| !r.released && r.kept_until_ms > now_ms)
            .map(|r| Holder {
                mode: kind,
                owner: owner_of(&r.owner),
                fence: Fence::new(r.fence),
                expires_in_ms: r.expires_ms.saturating_sub(now_ms),
                available_in_ms: r.kept_until_ms - now_ms,
            })
            .collect();
        holders.sort_by_key(|h| (h.available_in_ms, h.fence));
        holders
    }
}

impl MemoryStore {
    /// A shared lease or a permit, as `hold.lua` grants it.
    pub(super) fn acquire_place(
        &self,
        backend: &mut Backend,
        params: &AcquireParams<'_>,
        now_us: u64,
    ) -> Result<AcquireOutcome, StoreError> {
        let now_ms = now_us / 1_000;
        let name = params.name;
        let set = backend.holder_sets.entry(name.clone()).or_default();
        set.prune(now_ms);
        let occupying = set.occupying(now_ms, params.kind);
        if let (Some(limit), Some(in_force)) = (params.limit, set.limit) {
            if !occupying.is_empty() && limit != in_force {
                return Ok(AcquireOutcome::LimitConflict { limit: in_force });
            }
        }
        let owner = params.owner.map_or("", |o| o.as_str());
        let by = params.principal.as_str();
        let retried = set.leases.iter().find(|(token, r)| {
            !r.released
                && r.expires_ms > now_ms
                && (token.as_str() == params.token.expose()
                    || params
                        .request_id
                        .is_some_and(|rid| r.rid == rid.as_str() && r.owner == owner && r.by == by))
        });
        if let Some((token, r)) = retried {
            return Ok(AcquireOutcome::Granted(lease_of(name, token, r, now_ms)?));
        }
        // As hold.lua: a waiter joins whenever it is turned away, or (not
        // asked to) once the queue exists.
        let wait_in_line = |backend: &mut Backend| {
            params
                .fair
                .filter(|fair| fair.always || backend.queues.contains_key(name))
                .map(|fair| backend.queue_join(name, fair.waiter_id, now_us, fair.entry_ttl_ms))
        };
        if let Some(cur) = backend.leases.get_mut(name).filter(|r| !r.released) {
            if cur.kept_until_ms > now_ms {
                if params.waits && cur.expires_ms > now_ms {
                    cur.watched = true;
                }
                let holder = Holder {
                    mode: LeaseKind::Exclusive,
                    owner: owner_of(&cur.owner),
                    fence: Fence::new(cur.fence),
                    expires_in_ms: cur.expires_ms.saturating_sub(now_ms),
                    available_in_ms: cur.kept_until_ms - now_ms,
                };
                return Ok(AcquireOutcome::Busy {
                    blockers: Blockers::one(holder),
                    queue_position: wait_in_line(backend),
                });
            }
        }
        let last = backend.last_fence(name);
        if params
            .limit
            .is_some_and(|limit| occupying.len() >= limit as usize)
        {
            if let Some(set) = backend.holder_sets.get_mut(name) {
                set.watched |= params.waits;
            }
            let mut holders = occupying;
            holders.truncate(MAX_SHOWN_BLOCKERS);
            let blockers = Blockers {
                holder: holders[0].clone(),
                holders,
                limit: None,
            };
            return Ok(AcquireOutcome::Busy {
                blockers,
                queue_position: wait_in_line(backend),
            });
        }
        let waiter_id = params.fair.map(|f| f.waiter_id);
        if let Some(head) = backend.queue_head(name, now_ms) {
            if Some(head.as_str()) != waiter_id {
                let mut holders = occupying;
                holders.truncate(MAX_SHOWN_BLOCKERS);
                return Ok(AcquireOutcome::Busy {
                    blockers: Blockers {
                        holders,
                        ..Blockers::queue(Fence::new(last))
                    },
                    queue_position: wait_in_line(backend),
                });
            }
            backend.queue_leave(name, &head);
        }
        let fence = self.next_fence(last, now_us);
        backend.fences.insert(name.clone(), fence);
        let record = Record::granted(params, fence, now_ms);
        let lease = lease_of(name, params.token.expose(), &record, now_ms)?;
        let set = backend.holder_sets.entry(name.clone()).or_default();
        set.leases.insert(params.token.expose().to_owned(), record);
        if let Some(limit) = params.limit {
            set.limit = Some(limit);
        }
        if waiter_id.is_some() {
            if let Some(next) = backend.queue_head(name, now_ms) {
                backend.announce(&self.broker_id, &Wake::Turn { waiter_id: next });
            }
        }
        Ok(AcquireOutcome::Granted(lease))
    }

    /// As `hold_extend.lua`.
    pub(super) fn extend_place(
        backend: &mut Backend,
        name: &LockName,
        token: &LeaseToken,
        ttl_ms: u64,
        max_hold_ms: u64,
        now_ms: u64,
    ) -> ExtendOutcome {
        let Some(set) = backend.holder_sets.get_mut(name) else {
            return ExtendOutcome::Lost;
        };
        let limit = set.limit;
        let Some(cur) = (set.leases.get_mut(token.expose())).filter(|r| r.kept_until_ms > now_ms)
        else {
            return ExtendOutcome::Lost;
        };
        if cur.released {
            return match &cur.forced_by {
                Some(by) => ExtendOutcome::ForceReleased {
                    by: Principal::from_stored(by),
                },
                None => ExtendOutcome::Released,
            };
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
            limit,
        })
    }

    /// As `hold_release.lua`.
    pub(super) fn release_place(
        &self,
        backend: &mut Backend,
        name: &LockName,
        token: &LeaseToken,
        now_ms: u64,
    ) -> ReleaseOutcome {
        let Some(set) = backend.holder_sets.get_mut(name) else {
            return ReleaseOutcome::Lost;
        };
        let watched = set.watched;
        let Some(cur) = (set.leases.get_mut(token.expose())).filter(|r| r.kept_until_ms > now_ms)
        else {
            return ReleaseOutcome::Lost;
        };
        let fence = Fence::new(cur.fence);
        if let Some(by) = &cur.forced_by {
            return ReleaseOutcome::ForceReleased {
                by: Principal::from_stored(by),
            };
        }
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
        set.remember_release(token.expose());
        let next_fair = backend.queue_head(name, now_ms);
        // As hold_release.lua: with no lease left, nobody waits for one.
        if let Some(set) = backend.holder_sets.get_mut(name) {
            if set.occupying(now_ms, LeaseKind::Shared).is_empty() {
                set.watched = false;
            }
        }
        if watched || next_fair.is_some() {
            let wake = Wake::Released {
                name: name.clone(),
                next_fair,
            };
            backend.announce(&self.broker_id, &wake);
        }
        ReleaseOutcome::Released(Release {
            fence,
            held_ms: Some(held_ms),
            acknowledged: None,
        })
    }
}

/// The lease `record` grants under `token`, as its acquirer sees it.
fn lease_of(
    name: &LockName,
    token: &str,
    record: &Record,
    now_ms: u64,
) -> Result<Lease, StoreError> {
    let ttl_ms = record.expires_ms - now_ms;
    Ok(Lease {
        name: name.clone(),
        token: LeaseToken::parse(token).map_err(|_| StoreError::Protocol("stored token".into()))?,
        fence: Fence::new(record.fence),
        ttl_ms,
        expires_at_ms: record.expires_ms,
        validity_ms: ttl_ms,
        owner: owner_of(&record.owner),
    })
}
