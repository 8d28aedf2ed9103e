//! What the cases are written with: unique lock names, [`Ask`], an
//! acquire built up field by field, and waiting for an announcement.

use std::time::Duration;

use crate::lease::{
    Blockers, Fence, Holder, LeaseKind, LeaseToken, LockDelay, Owner, Principal, RequestId, Ttl,
};
use crate::name::{LockName, Space};
use crate::store::{AcquireOutcome, AcquireParams, FairEntry, LockStore, ReleaseOutcome};

pub(super) fn name(prefix: &str, lock: &str) -> LockName {
    LockName::parse(&format!("conf-{prefix}-{lock}")).expect("valid lock name")
}

pub(super) fn semaphore(prefix: &str, name: &str) -> LockName {
    LockName::parse_in(Space::Semaphore, &format!("conf-{prefix}-{name}")).expect("valid name")
}

pub(super) fn ttl(ms: u64) -> Ttl {
    Ttl::parse("ttl_ms", ms, u64::MAX).expect("valid ttl")
}

/// A unique prefix per case run, so cases can share a backend.
pub(super) fn run_id() -> String {
    crate::lease::random_hex::<4>()
}

/// The parameters of a plain acquire by `principal`.
pub(super) struct Ask {
    pub(super) token: LeaseToken,
    ttl: Ttl,
    owner: Option<Owner>,
    request_id: Option<RequestId>,
    principal: Principal,
    lock_delay: LockDelay,
    fair: Option<String>,
    /// A fair waiter joins the queue whenever it is turned away; another
    /// waiter with an id only once the queue exists or shared leases block it.
    always: bool,
    arrived_at_us: u64,
    waits: bool,
    kind: LeaseKind,
    limit: Option<u32>,
}

impl Ask {
    pub(super) fn new(ttl_ms: u64) -> Self {
        Self {
            token: LeaseToken::generate(),
            ttl: ttl(ttl_ms),
            owner: None,
            request_id: None,
            principal: Principal::ANONYMOUS,
            lock_delay: LockDelay::default(),
            fair: None,
            always: false,
            arrived_at_us: 0,
            waits: false,
            kind: LeaseKind::Exclusive,
            limit: None,
        }
    }

    /// A shared lease on a lock.
    pub(super) fn shared(ttl_ms: u64) -> Self {
        Self {
            token: LeaseToken::generate_for(LeaseKind::Shared),
            kind: LeaseKind::Shared,
            ..Self::new(ttl_ms)
        }
    }

    /// A permit of a semaphore with `limit`.
    pub(super) fn permit(ttl_ms: u64, limit: u32) -> Self {
        Self {
            token: LeaseToken::generate_for(LeaseKind::Permit),
            kind: LeaseKind::Permit,
            limit: Some(limit),
            ..Self::new(ttl_ms)
        }
    }

    pub(super) fn owner(mut self, owner: &str) -> Self {
        self.owner = Some(Owner::parse(owner).expect("valid owner"));
        self
    }

    pub(super) fn request_id(mut self, id: &str, principal: Principal) -> Self {
        self.request_id = Some(RequestId::parse(id).expect("valid request id"));
        self.principal = principal;
        self
    }

    pub(super) fn lock_delay(mut self, ms: u64) -> Self {
        self.lock_delay = LockDelay::parse(ms, u64::MAX).expect("valid delay");
        self
    }

    /// A caller that waits for the lock when it is busy.
    pub(super) fn waiting(mut self) -> Self {
        self.waits = true;
        self
    }

    /// A fair waiter that arrived now.
    pub(super) fn fair(mut self, waiter_id: &str) -> Self {
        self.fair = Some(waiter_id.to_owned());
        self.always = true;
        self.arrived_at_us = crate::lease::unix_micros();
        self
    }

    /// A waiter that is not fair, under `waiter_id`: it joins the queue only
    /// once the queue exists or shared leases block it.
    pub(super) fn waiting_as(mut self, waiter_id: &str) -> Self {
        self.fair = Some(waiter_id.to_owned());
        self.always = self.kind != LeaseKind::Exclusive;
        self.arrived_at_us = crate::lease::unix_micros();
        self.waits = true;
        self
    }

    pub(super) async fn on<S: LockStore>(&self, store: &S, lock: &LockName) -> AcquireOutcome {
        store
            .acquire(self.params(lock))
            .await
            .expect("the store answers")
    }

    /// This acquire of `lock`, as the store is asked it.
    pub(super) fn params<'a>(&'a self, lock: &'a LockName) -> AcquireParams<'a> {
        AcquireParams {
            name: lock,
            kind: self.kind,
            limit: self.limit,
            token: &self.token,
            ttl: self.ttl,
            owner: self.owner.as_ref(),
            request_id: self.request_id.as_ref(),
            principal: &self.principal,
            lock_delay: self.lock_delay,
            fair: self.fair.as_deref().map(|waiter_id| FairEntry {
                waiter_id,
                always: self.always,
                entry_ttl_ms: 5_000,
                arrived_at_us: self.arrived_at_us,
            }),
            waits: self.waits || self.fair.is_some(),
        }
    }
}

/// The fence of a grant; panics on any other answer.
pub(super) fn granted(outcome: AcquireOutcome, what: &str) -> Fence {
    match outcome {
        AcquireOutcome::Granted(lease) => lease.fence,
        other => panic!("{what}: not granted but {other:?}"),
    }
}

/// The holder and queue position of a busy answer; panics on any other answer.
pub(super) fn busy(outcome: AcquireOutcome, what: &str) -> (Holder, Option<u64>) {
    let (blockers, position) = blocked(outcome, what);
    (blockers.holder, position)
}

/// Every lease in the way, and the queue position, of a busy answer.
pub(super) fn blocked(outcome: AcquireOutcome, what: &str) -> (Blockers, Option<u64>) {
    match outcome {
        AcquireOutcome::Busy {
            blockers,
            queue_position,
        } => (blockers, queue_position),
        other => panic!("{what}: not busy but {other:?}"),
    }
}

pub(super) async fn release<S: LockStore>(store: &S, lock: &LockName, ask: &Ask) -> ReleaseOutcome {
    store
        .release(lock, &ask.token)
        .await
        .expect("the store answers")
}

pub(super) async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// The lock of the next release announcement heard, skipping other wakes;
/// `None` if none arrives within 5 s.
pub(super) async fn next_release_heard(
    wakes: &mut tokio::sync::mpsc::UnboundedReceiver<crate::wait::Wake>,
) -> Option<LockName> {
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match wakes.recv().await {
                Some(crate::wait::Wake::Released { name, .. }) => return name,
                Some(_) => continue,
                None => panic!("the announcements ended"),
            }
        }
    })
    .await
    .ok()
}
