//! The atomic steps a lock backend provides. Each method is one indivisible
//! read-modify-write on the backend, safe to re-send with the same token.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use crate::error::StoreError;
use crate::events::Announcement;
use crate::lease::{
    Blockers, Fence, Lease, LeaseKind, LeaseToken, LockDelay, LockStatus, Owner, Principal,
    Renewal, RequestId, Ttl,
};
use crate::listing::{ListRequest, LockPage};
use crate::name::LockName;
use crate::session::{SessionEntry, SessionRecord, SessionWrite};
use crate::wait::Wake;

/// Everything the store needs to try one grant.
#[derive(Clone, Copy, Debug)]
pub struct AcquireParams<'a> {
    /// The lock (or semaphore) to take.
    pub name: &'a LockName,
    /// The kind of lease asked for: exclusive or shared on a lock, a permit
    /// on a semaphore.
    pub kind: LeaseKind,
    /// For a permit: the semaphore's limit, which must match the one in
    /// force while any permit takes a place.
    pub limit: Option<u32>,
    /// The token the lease will carry if granted.
    pub token: &'a LeaseToken,
    /// The lease duration.
    pub ttl: Ttl,
    /// The holder's label.
    pub owner: Option<&'a Owner>,
    /// The caller's idempotency key: a live lease taken with the same key,
    /// owner and principal is returned as-is instead of a busy answer.
    pub request_id: Option<&'a RequestId>,
    /// Who is asking; a `request_id` retry from another principal is an
    /// ordinary acquire.
    pub principal: &'a Principal,
    /// How long the lock stays unavailable if this lease expires unreleased.
    pub lock_delay: LockDelay,
    /// Set for a caller that waits: its id in the lock's queue in the store,
    /// and how long that queue entry lives without being refreshed. A fair
    /// waiter joins the queue whenever it is turned away; another joins
    /// once the queue exists or shared leases are in the way, so that a
    /// waiting exclusive request is never passed by newer shared ones.
    pub fair: Option<FairEntry<'a>>,
    /// The caller waits for the lock if it is busy. A busy answer then marks
    /// the holder's lease so that its release is announced to every broker;
    /// a release nobody waits for is not announced, which spares the store
    /// a publish and every broker a message per lock cycle.
    pub waits: bool,
}

/// A fair waiter's place in a lock's queue in the store.
#[derive(Clone, Copy, Debug)]
pub struct FairEntry<'a> {
    /// The waiter's id, unique per waiting request.
    pub waiter_id: &'a str,
    /// Whether the waiter joins the queue whenever it is turned away
    /// (`fair: true`, and every waiting shared or permit request).
    pub always: bool,
    /// The entry expires unless refreshed within this, so a waiter whose broker
    /// died stops blocking the line.
    pub entry_ttl_ms: u64,
    /// When the waiter arrived, in Unix microseconds by the broker's clock.
    /// A store that keeps one queue on one server orders by its own clock
    /// instead; a store that keeps a copy of the queue on each of several
    /// servers orders every copy by this, so all copies agree on who is first.
    pub arrived_at_us: u64,
}

/// The result of one grant attempt.
#[derive(Debug)]
pub enum AcquireOutcome {
    /// The lock is ours (or already was, for a retried request).
    Granted(Lease),
    /// Another lease, its lock-delay, or an earlier waiter in the queue is
    /// in the way.
    Busy {
        /// The leases in the way.
        blockers: Blockers,
        /// For a waiter in the queue: how many waiters are ahead of it.
        queue_position: Option<u64>,
    },
    /// Permits of the semaphore take places under another limit.
    LimitConflict {
        /// The limit in force.
        limit: u32,
    },
    /// No lease holds the lock, yet other acquires in flight took the
    /// places this one needed (a quorum's split vote): trying again soon,
    /// after a random back-off, may succeed. Only a store that counts votes
    /// answers this.
    Contended,
}

/// One lease of a renewal of several ([`LockStore::extend_together`]).
#[derive(Clone, Copy, Debug)]
pub struct ExtendStep<'a> {
    /// The lock, semaphore or session.
    pub name: &'a LockName,
    /// The lease's token.
    pub token: &'a LeaseToken,
    /// The new remaining TTL.
    pub ttl: Ttl,
    /// No expiry past acquisition plus this; 0 for no limit.
    pub max_hold_ms: u64,
}

/// The answer of [`LockStore::acquire_together`].
#[derive(Debug)]
pub enum Together {
    /// Every lease was granted, in the order asked.
    Granted(Vec<Lease>),
    /// The lease at `at` (in the order asked) was refused, for the reason
    /// its own acquire would give; nothing was granted.
    Refused {
        /// Its place in the order asked.
        at: usize,
        /// What its acquire answered (never a grant).
        outcome: AcquireOutcome,
    },
}

/// How long to wait before trying again after the `tries`-th
/// [`AcquireOutcome::Contended`] answer in a row (counted from 0): a random
/// time up to 2 ms, doubling with each try up to 32 ms, so that contenders
/// that met try again at different times, the more apart the more of them
/// there are, and one of them finds the places free.
pub fn contended_back_off(tries: u32) -> Duration {
    use rand::Rng;
    let most_us = 2_000u64 << tries.min(4);
    Duration::from_micros(rand::thread_rng().gen_range(250..=most_us))
}

/// The result of an extend.
#[derive(Debug)]
pub enum ExtendOutcome {
    /// The lease is valid for the new TTL from now.
    Extended(Renewal),
    /// The token does not hold a valid lease on this lock.
    Lost,
    /// The token's lease was released by its holder (the store still
    /// remembers the release).
    Released,
    /// An operator force-released the token's lease (the store still
    /// remembers it): another holder may have run since.
    ForceReleased {
        /// Who force-released it.
        by: Principal,
    },
    /// The new expiry would pass the lease's acquisition time plus `max_hold_ms`.
    MaxHoldExceeded {
        /// How long the lease stays valid as it is.
        expires_in_ms: u64,
    },
}

/// A successful release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    /// The fence of the released lease.
    pub fence: Fence,
    /// How long the lease was held, by the store's clock; `None` when this was
    /// a re-sent release of a lease already released.
    pub held_ms: Option<u64>,
    /// When the store waits for replicas to acknowledge what changes a lease:
    /// whether as many as it requires acknowledged this release. `None` for
    /// a store that does not wait.
    pub acknowledged: Option<bool>,
}

/// The result of a release.
#[derive(Debug)]
pub enum ReleaseOutcome {
    /// The lease was released; the lock is free now.
    Released(Release),
    /// The token does not hold a valid lease on this lock.
    Lost,
    /// An operator force-released the token's lease (the store still
    /// remembers it): the lease is gone, and another holder may have run.
    ForceReleased {
        /// Who force-released it.
        by: Principal,
    },
}

/// The result of a force release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForceReleaseOutcome {
    /// Leases (or a lock-delay) were in place and are gone now.
    Released {
        /// The highest fence of the leases that were ended.
        fence: Fence,
        /// The exclusive holder's label, if it gave one.
        owner: Option<String>,
        /// How many leases were ended.
        leases_ended: u64,
        /// Their kind: exclusive when an exclusive lease (or its lock-delay)
        /// was among them.
        mode: LeaseKind,
    },
    /// Nothing held the lock.
    NotHeld,
}

/// A backend that keeps lock state and changes it atomically.
///
/// Implementations must never grant a lock that a valid lease holds, must keep
/// fences strictly increasing per lock even if they lose their data, and must
/// answer an error (never a guess) when the backend cannot be reached.
pub trait LockStore: Send + Sync + 'static {
    /// Grants the lock if it is free, or reports who holds it.
    fn acquire(
        &self,
        params: AcquireParams<'_>,
    ) -> impl Future<Output = Result<AcquireOutcome, StoreError>> + Send;

    /// Grants every lease of `all` or none, in one atomic step, so no other
    /// caller ever sees a part of them held: possible where every name
    /// lives on one server. `None` when this store cannot (its names live
    /// on several servers): the caller takes them one by one instead.
    fn acquire_together(
        &self,
        all: &[AcquireParams<'_>],
    ) -> impl Future<Output = Option<Result<Together, StoreError>>> + Send {
        let _ = all;
        async { None }
    }

    /// Renews every lease of `all` in one step, each answering as its own
    /// extend would: possible where every lease lives on one server. `None`
    /// when this store cannot: the caller extends them one by one.
    fn extend_together(
        &self,
        all: &[ExtendStep<'_>],
    ) -> impl Future<Output = Option<Result<Vec<ExtendOutcome>, StoreError>>> + Send {
        let _ = all;
        async { None }
    }

    /// Sets the remaining TTL of a held lease to `ttl`. `max_hold_ms` of 0
    /// means no limit on the total hold time.
    fn extend(
        &self,
        name: &LockName,
        token: &LeaseToken,
        ttl: Ttl,
        max_hold_ms: u64,
    ) -> impl Future<Output = Result<ExtendOutcome, StoreError>> + Send;

    /// Frees a held lock at once. Re-sending a release that already succeeded
    /// reports the same release.
    fn release(
        &self,
        name: &LockName,
        token: &LeaseToken,
    ) -> impl Future<Output = Result<ReleaseOutcome, StoreError>> + Send;

    /// Reads a lock's state without changing it.
    fn status(
        &self,
        name: &LockName,
    ) -> impl Future<Output = Result<LockStatus, StoreError>> + Send;

    /// Succeeds when the backend answers and is ready to run lock steps.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Lists the locks whose names start with `request.prefix` and that are
    /// held or waiting out a lock-delay, one bounded page at a time. Never
    /// reveals a token, and never blocks the backend for long.
    fn list(
        &self,
        request: &ListRequest,
    ) -> impl Future<Output = Result<LockPage, StoreError>> + Send;

    /// Frees a lock whoever holds it (an operator override), on behalf of
    /// `by`. The former holders' tokens stop working at once: while the
    /// store remembers releases, their extend and release answer that `by`
    /// force-released them (then lost). Re-sending it reports that nothing
    /// was held.
    fn force_release(
        &self,
        name: &LockName,
        by: &Principal,
    ) -> impl Future<Output = Result<ForceReleaseOutcome, StoreError>> + Send;

    /// Removes a fair waiter that gave up from the lock's queue, and announces
    /// the next one if the lock is free.
    fn leave_queue(
        &self,
        name: &LockName,
        waiter_id: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Makes sure announcements of `name` reach this broker's stream
    /// ([`LockStore::take_wakes`]) from the moment this returns, for as long
    /// as any watch of it lasts: the service calls it before a waiter's first
    /// attempt and pairs it with one [`LockStore::unwatch`] (through
    /// [`Watch`]). A store whose one subscription carries every lock's
    /// announcements has nothing to do; one that subscribes per lock (a
    /// Redis Cluster's sharded channels) subscribes here.
    fn watch(&self, name: &LockName) -> impl Future<Output = ()> + Send {
        let _ = name;
        async {}
    }

    /// Ends one [`LockStore::watch`] of `name`.
    fn unwatch(&self, name: &LockName) {
        let _ = name;
    }

    /// The stream of release announcements from every broker sharing this
    /// store, taken once by the service that owns the store. `None` for a
    /// store that cannot announce releases (waiters then wake on expiry only).
    fn take_wakes(&self) -> Option<UnboundedReceiver<Wake>>;

    /// Tells every broker sharing the store (this one's own stream of
    /// announcements included) of a change or of watching streams. Best
    /// effort: a lost announcement costs a watcher an event, never a lease.
    fn announce(&self, announcement: &Announcement) -> impl Future<Output = ()> + Send {
        let _ = announcement;
        async {}
    }

    /// The announcements of every broker sharing this store, taken once by
    /// the service that owns the store; `None` for a store that carries none.
    fn take_announcements(&self) -> Option<UnboundedReceiver<Announcement>> {
        None
    }

    /// Writes `entry` into the record of the session whose lease on
    /// `session` is `token`'s, in one atomic step with the check that this
    /// lease is valid now: once the session's lease has ended, nothing more
    /// joins its record, so a close (or an expiry) never misses a lease.
    fn session_write(
        &self,
        session: &LockName,
        token: &LeaseToken,
        entry: SessionEntry<'_>,
    ) -> impl Future<Output = Result<SessionWrite, StoreError>> + Send;

    /// Reads a session's record; with `token`, also how long the session's
    /// lease stays valid if `token` holds it (and the record is kept as long
    /// as the lease, plus a grace).
    fn session_read(
        &self,
        session: &LockName,
        token: Option<&LeaseToken>,
    ) -> impl Future<Output = Result<SessionRecord, StoreError>> + Send;

    /// Takes the leases of `tokens` out of a session's record, or, given
    /// `None`, removes the whole record (after a close).
    fn session_forget(
        &self,
        session: &LockName,
        tokens: Option<&[LeaseToken]>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// How long after an acquire answered [`StoreError::OutcomeUnknown`] the
    /// backend may still run it (a client library re-sends commands after a
    /// reconnect). The service keeps releasing such an orphaned token for this
    /// long, or until the lease's TTL, whichever is shorter.
    fn orphan_window(&self) -> Duration;
}

/// One waiter's watch on a lock's announcements, ended when dropped.
pub struct Watch<'a, S: LockStore> {
    store: &'a S,
    name: &'a LockName,
}

impl<'a, S: LockStore> Watch<'a, S> {
    /// Watches `name` on `store` until the returned value is dropped.
    pub async fn start(store: &'a S, name: &'a LockName) -> Self {
        store.watch(name).await;
        Self { store, name }
    }
}

impl<S: LockStore> Drop for Watch<'_, S> {
    fn drop(&mut self) {
        self.store.unwatch(self.name);
    }
}
