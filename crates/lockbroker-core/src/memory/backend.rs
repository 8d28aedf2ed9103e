//! The state behind [`super::MemoryStore`]: lease records as the Redis lease
//! hash holds them, fences, fair queues, and who hears announcements.

use std::collections::{BTreeMap, HashMap, VecDeque};

use tokio::sync::mpsc::UnboundedSender;

use super::holders::HolderSet;
use crate::events::Announcement;
use crate::lease::{Fence, LeaseToken, Principal};
use crate::name::LockName;
use crate::store::{AcquireParams, ExtendOutcome, Release, ReleaseOutcome};
use crate::wait::Wake;

/// One lock's lease record, as the Redis lease hash holds it.
#[derive(Clone)]
pub(super) struct Record {
    pub(super) token: String,
    pub(super) fence: u64,
    pub(super) owner: String,
    pub(super) rid: String,
    pub(super) by: String,
    pub(super) acquired_ms: u64,
    pub(super) expires_ms: u64,
    pub(super) delay_ms: u64,
    pub(super) released: bool,
    /// For a holder set's lease an operator force-released: by whom (as
    /// `hold_release.lua` reads the lease's `k`).
    pub(super) forced_by: Option<String>,
    /// A caller waits for this lease to end, so its release is announced.
    pub(super) watched: bool,
    /// When the record itself is forgotten (the key's TTL in Redis).
    pub(super) kept_until_ms: u64,
}

impl Record {
    /// The record of a lease `params` asked for, granted now with `fence`.
    pub(super) fn granted(params: &AcquireParams<'_>, fence: u64, now_ms: u64) -> Self {
        let expires_ms = now_ms + params.ttl.as_millis();
        Self {
            token: params.token.expose().to_owned(),
            fence,
            owner: params.owner.map_or("", |o| o.as_str()).to_owned(),
            rid: params.request_id.map_or("", |r| r.as_str()).to_owned(),
            by: params.principal.as_str().to_owned(),
            acquired_ms: now_ms,
            expires_ms,
            delay_ms: params.lock_delay.as_millis(),
            released: false,
            forced_by: None,
            watched: false,
            kept_until_ms: expires_ms + params.lock_delay.as_millis(),
        }
    }
}

/// How many released leases of one exclusive lock are remembered, as
/// `memos.lua` keeps them.
const MEMO_SLOTS: usize = 4;

/// The last few leases of a lock released by their holders or
/// force-released by an operator, as the Redis lease hash keeps them beside
/// the lease (`memos.lua`): a release or an extend re-sent after the next
/// grant still learns of its release.
#[derive(Default)]
pub(super) struct ReleaseMemos {
    /// The latest last.
    released: VecDeque<Memo>,
    /// When they are forgotten: the latest release plus the memo time.
    pub(super) until_ms: u64,
}

/// One remembered end of an exclusive lease.
#[derive(Clone)]
pub(super) struct Memo {
    pub(super) token: String,
    pub(super) fence: u64,
    /// Set when an operator force-released the lease: the principal (empty
    /// for anonymous) that did.
    pub(super) forced_by: Option<String>,
}

impl Memo {
    /// What an extend of the remembered lease answers.
    pub(super) fn extend_outcome(&self) -> ExtendOutcome {
        match &self.forced_by {
            Some(by) => ExtendOutcome::ForceReleased {
                by: Principal::from_stored(by),
            },
            None => ExtendOutcome::Released,
        }
    }

    /// What a release of the remembered lease answers: a re-sent release
    /// reports its release; a force-released lease never reads as released.
    pub(super) fn release_outcome(&self) -> ReleaseOutcome {
        match &self.forced_by {
            Some(by) => ReleaseOutcome::ForceReleased {
                by: Principal::from_stored(by),
            },
            None => ReleaseOutcome::Released(Release {
                fence: Fence::new(self.fence),
                held_ms: None,
                acknowledged: None,
            }),
        }
    }
}

/// A lock's fair queue: waiter id and entry expiry (ms) by arrival (µs, then
/// a sequence number that breaks ties).
pub(super) type FairQueue = BTreeMap<(u64, u64), (String, u64)>;

#[derive(Default)]
pub(super) struct Backend {
    pub(super) leases: BTreeMap<LockName, Record>,
    /// Shared leases and permits, by name.
    pub(super) holder_sets: BTreeMap<LockName, HolderSet>,
    /// The last fence issued per lock.
    pub(super) fences: HashMap<LockName, u64>,
    /// The release memos of each exclusive lock released lately.
    pub(super) memos: HashMap<LockName, ReleaseMemos>,
    /// The fair queue of each lock that has one.
    pub(super) queues: HashMap<LockName, FairQueue>,
    /// Each session's record, by the name of the session's lease.
    pub(super) sessions: HashMap<LockName, super::sessions::Kept>,
    pub(super) arrivals: u64,
    /// Every handle's announcements, by handle id.
    pub(super) subscribers: Vec<(String, UnboundedSender<(String, Wake)>)>,
    /// Every handle's announcements about watching.
    pub(super) watchers: Vec<UnboundedSender<Announcement>>,
    pub(super) unavailable: bool,
}

impl Backend {
    /// The last fence issued for `name`, as far as the backend remembers.
    pub(super) fn last_fence(&self, name: &LockName) -> u64 {
        let recorded = self.leases.get(name).map_or(0, |r| r.fence);
        self.fences.get(name).copied().unwrap_or(0).max(recorded)
    }

    /// The record of `name` if `token` took it (released or not).
    pub(super) fn record_of(&mut self, name: &LockName, token: &LeaseToken) -> Option<&mut Record> {
        self.leases
            .get_mut(name)
            .filter(|record| record.token == token.expose())
    }

    /// Remembers the end of a lease of `name` until `until_ms`, in place of
    /// the oldest memo when all are taken.
    pub(super) fn remember_release(&mut self, name: &LockName, memo: Memo, until_ms: u64) {
        let memos = self.memos.entry(name.clone()).or_default();
        if memos.released.len() == MEMO_SLOTS {
            memos.released.pop_front();
        }
        memos.released.push_back(memo);
        memos.until_ms = until_ms;
    }

    /// The memo of `token`'s lease on `name` if it was released or
    /// force-released and the memo lasts.
    pub(super) fn memo_of(&self, name: &LockName, token: &LeaseToken, now_ms: u64) -> Option<Memo> {
        let memos = self.memos.get(name).filter(|m| m.until_ms > now_ms)?;
        (memos.released.iter())
            .find(|memo| memo.token == token.expose())
            .cloned()
    }

    /// The first live fair waiter of `name`, pruning expired entries.
    pub(super) fn queue_head(&mut self, name: &LockName, now_ms: u64) -> Option<String> {
        let queue = self.queues.get_mut(name)?;
        queue.retain(|_, (_, expires)| *expires > now_ms);
        let head = queue.values().next().map(|(id, _)| id.clone());
        if queue.is_empty() {
            self.queues.remove(name);
        }
        head
    }

    /// Joins (keeping the first arrival) or refreshes; the waiters ahead.
    pub(super) fn queue_join(
        &mut self,
        name: &LockName,
        id: &str,
        now_us: u64,
        entry_ttl_ms: u64,
    ) -> u64 {
        let expires = now_us / 1_000 + entry_ttl_ms;
        self.arrivals += 1;
        let arrival = (now_us, self.arrivals);
        let queue = self.queues.entry(name.clone()).or_default();
        let at = match queue.iter().find(|(_, (w, _))| w == id).map(|(k, _)| *k) {
            Some(at) => at,
            None => arrival,
        };
        queue.insert(at, (id.to_owned(), expires));
        queue.range(..at).count() as u64
    }

    pub(super) fn queue_leave(&mut self, name: &LockName, id: &str) {
        if let Some(queue) = self.queues.get_mut(name) {
            queue.retain(|_, (w, _)| w != id);
            if queue.is_empty() {
                self.queues.remove(name);
            }
        }
    }

    pub(super) fn announce(&self, origin: &str, wake: &Wake) {
        for (_, subscriber) in &self.subscribers {
            let _ = subscriber.send((origin.to_owned(), wake.clone()));
        }
    }
}
