//! Reading and overriding a name's state in memory: status, the listing and
//! force release, as `status.lua`, the listing and `force_release.lua` do.

use super::backend::{Backend, Memo};
use super::{owner_of, MemoryStore, RELEASE_MEMO_MS};
use crate::lease::{Fence, Holder, LeaseKind, LockStatus, Principal, MAX_SHOWN_HOLDERS};
use crate::listing::{ListCursor, ListRequest, LockEntry, LockPage};
use crate::name::{LockName, Space};
use crate::store::ForceReleaseOutcome;
use crate::wait::Wake;

impl MemoryStore {
    /// A name's state at `now_ms`.
    pub(super) fn status_of(backend: &Backend, name: &LockName, now_ms: u64) -> LockStatus {
        let last = backend.last_fence(name);
        let fence = (backend.fences.contains_key(name) || backend.leases.contains_key(name))
            .then_some(Fence::new(last));
        let mut status = LockStatus::free(fence);
        status.waiting = backend
            .queues
            .get(name)
            .map_or(0, |queue| queue.len() as u64);
        let kind = match name.space() {
            Space::Lock | Space::Session => LeaseKind::Shared,
            Space::Semaphore => LeaseKind::Permit,
        };
        if let Some(set) = backend.holder_sets.get(name) {
            let holders = set.occupying(now_ms, kind);
            let valid = holders.iter().filter(|h| h.expires_in_ms > 0).count() as u64;
            if let (Some(first), Some(last_to_free)) = (
                holders.first(),
                holders.iter().map(|h| h.available_in_ms).max(),
            ) {
                status.first_free_in_ms = first.available_in_ms;
                status.available_in_ms = last_to_free;
                status.expires_in_ms = holders.iter().map(|h| h.expires_in_ms).max().unwrap_or(0);
                status.limit = set.limit;
            }
            status.held = valid > 0;
            status.mode = status.held.then_some(kind);
            status.holder_count = valid;
            status.occupied = holders.len() as u64;
            status.holders = holders;
            status.holders.truncate(MAX_SHOWN_HOLDERS);
        }
        if let Some(r) = backend.leases.get(name).filter(|r| !r.released) {
            if r.expires_ms > now_ms {
                let holder = Holder {
                    mode: LeaseKind::Exclusive,
                    owner: owner_of(&r.owner),
                    fence: Fence::new(r.fence),
                    expires_in_ms: r.expires_ms - now_ms,
                    available_in_ms: r.kept_until_ms - now_ms,
                };
                status.held = true;
                status.owner = holder.owner.clone();
                status.expires_in_ms = holder.expires_in_ms;
                status.available_in_ms = holder.available_in_ms;
                status.mode = Some(LeaseKind::Exclusive);
                status.holder_count = 1;
                status.holders = vec![holder];
            } else {
                status.available_in_ms = status.available_in_ms.max(r.kept_until_ms - now_ms);
            }
        }
        status
    }

    /// One page of the names in `request`'s space that are held or wait out
    /// a lock-delay; the cursor is a position in name order.
    pub(super) fn page(backend: &Backend, request: &ListRequest, now_ms: u64) -> LockPage {
        let mut names: Vec<&LockName> = (backend.leases.keys())
            .chain(backend.holder_sets.keys())
            .filter(|name| name.space() == request.space && request.prefix.matches(name))
            .collect();
        names.sort();
        names.dedup();
        let start = usize::try_from(request.cursor.get()).unwrap_or(usize::MAX);
        let end = start.saturating_add(request.limit.get()).min(names.len());
        let locks = (names.get(start..end).unwrap_or(&[]).iter())
            .map(|name| LockEntry {
                name: (*name).clone(),
                status: Self::status_of(backend, name, now_ms),
            })
            .filter(|entry| entry.status.held || entry.status.available_in_ms > 0)
            .collect();
        LockPage {
            locks,
            next_cursor: (end < names.len()).then(|| ListCursor::new(end as u64)),
        }
    }

    /// Ends every lease of `name`, exclusive or not, for `by`, and announces
    /// it. Each valid lease ended leaves a memo naming `by`, as
    /// `force_release.lua` does: the lock's memos for an exclusive lease, a
    /// released place marked forced for a shared lease or a permit.
    pub(super) fn end_all(
        &self,
        backend: &mut Backend,
        name: &LockName,
        by: &Principal,
        now_ms: u64,
    ) -> ForceReleaseOutcome {
        let (mut ended, mut fence, mut owner) = (0, 0, None);
        let mut mode = match name.space() {
            Space::Lock | Space::Session => LeaseKind::Shared,
            Space::Semaphore => LeaseKind::Permit,
        };
        let until_ms = now_ms + RELEASE_MEMO_MS;
        if let Some(cur) = backend.leases.get(name).filter(|r| !r.released).cloned() {
            backend.leases.remove(name);
            // A lease past its expiry (only its lock-delay left) was lost
            // before: its holder hears "lost", not of this force release.
            if cur.expires_ms > now_ms {
                let memo = Memo {
                    token: cur.token.clone(),
                    fence: cur.fence,
                    forced_by: Some(by.as_str().to_owned()),
                };
                backend.remember_release(name, memo, until_ms);
            }
            (ended, fence, owner) = (1, cur.fence, owner_of(&cur.owner));
            mode = LeaseKind::Exclusive;
        }
        if let Some(set) = backend.holder_sets.get_mut(name) {
            let mut forced = Vec::new();
            set.leases.retain(|token, record| {
                if record.released {
                    return true;
                }
                if record.kept_until_ms > now_ms {
                    ended += 1;
                    fence = fence.max(record.fence);
                }
                if record.expires_ms <= now_ms {
                    return false;
                }
                record.released = true;
                record.forced_by = Some(by.as_str().to_owned());
                record.expires_ms = now_ms;
                record.kept_until_ms = until_ms;
                forced.push(token.clone());
                true
            });
            for token in forced {
                set.remember_release(&token);
            }
            set.limit = None;
            set.watched = false;
        }
        if ended == 0 {
            return ForceReleaseOutcome::NotHeld;
        }
        let next_fair = backend.queue_head(name, now_ms);
        let wake = Wake::Released {
            name: name.clone(),
            next_fair,
        };
        backend.announce(&self.broker_id, &wake);
        ForceReleaseOutcome::Released {
            fence: Fence::new(fence),
            owner,
            leases_ended: ended,
            mode,
        }
    }
}
