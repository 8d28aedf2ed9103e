//! What outlives one step of [`super::LockService`]: a grant on its way to
//! its caller, a waiter's place in the store's queue, and the checks and
//! clean-up they share.

use std::future::Future;
use std::sync::Arc;

use super::LockService;
use crate::lease::{Lease, LeaseKind, LeaseToken};
use crate::name::{LockName, Space};
use crate::store::LockStore;
use crate::validation::ValidationError;

/// A granted lease on its way to the caller. If it is dropped before
/// [`Grant::delivered`] (the caller went away while the grant was in flight),
/// the lease is released at once so nobody waits for a holder that never was.
pub struct Grant<S: LockStore> {
    pub(super) lease: Lease,
    pub(super) service: Arc<LockService<S>>,
    pub(super) armed: bool,
}

impl<S: LockStore> Grant<S> {
    /// The lease granted.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The lease reached the caller: keep it.
    pub fn delivered(mut self) {
        self.armed = false;
    }
}

impl<S: LockStore> Drop for Grant<S> {
    fn drop(&mut self) {
        if self.armed {
            let service = Arc::clone(&self.service);
            let name = self.lease.name.clone();
            let token = self.lease.token.clone();
            spawn_detached(async move {
                let _ = service.release(&name, &token).await;
            });
        }
    }
}

/// Takes a fair waiter out of the store's queue if it gives up (deadline,
/// disconnect, shutdown), so it does not block the line until its entry expires.
pub(super) struct QueueExit<'a, S: LockStore> {
    pub(super) service: &'a Arc<LockService<S>>,
    pub(super) name: &'a LockName,
    pub(super) waiter_id: &'a str,
    pub(super) armed: bool,
}

impl<S: LockStore> Drop for QueueExit<'_, S> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let service = Arc::clone(self.service);
        let name = self.name.clone();
        let waiter_id = self.waiter_id.to_owned();
        spawn_detached(async move {
            let _ = service.store.leave_queue(&name, &waiter_id).await;
        });
    }
}

/// A token names the kind of its lease: a permit's token belongs to a
/// semaphore, any other to a lock. Sent to the other kind of name, it is a
/// caller's mistake, told as such rather than as a lost lease.
pub(super) fn check_token_space(
    name: &LockName,
    token: &LeaseToken,
) -> Result<(), ValidationError> {
    let space = match token.kind() {
        LeaseKind::Permit => Space::Semaphore,
        // A session is an exclusive lease in a space of its own.
        LeaseKind::Exclusive if name.space() == Space::Session => Space::Session,
        LeaseKind::Exclusive | LeaseKind::Shared => Space::Lock,
    };
    if space == name.space() {
        return Ok(());
    }
    Err(ValidationError::new(
        "token",
        format!(
            "is a {}'s token, not a {}'s; send it to its {} routes",
            space.noun(),
            name.space().noun(),
            space.noun()
        ),
    ))
}

/// Runs clean-up work from a `Drop`, if a runtime is there to run it.
pub(super) fn spawn_detached(work: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(work);
    }
}
