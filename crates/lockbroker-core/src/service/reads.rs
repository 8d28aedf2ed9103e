//! The reads of [`LockService`]: a lock's status, a fence check, and the
//! operators' listing, one bounded page at a time.

use super::LockService;
use crate::error::{LockError, StoreError};
use crate::lease::{Fence, FenceCheck, LockStatus};
use crate::listing::{ListRequest, LockPage};
use crate::name::LockName;
use crate::store::LockStore;

impl<S: LockStore> LockService<S> {
    /// Reads a lock's state; never reveals a token. `waiting` counts the
    /// store's queue and this broker's own line for the lock (other
    /// brokers' lines are theirs to count).
    pub async fn status(&self, name: &LockName) -> Result<LockStatus, LockError> {
        let mut status = self.store.status(name).await?;
        status.waiting += self.waiters.in_line(name) as u64;
        Ok(status)
    }

    /// Whether a valid lease on `name` carries exactly `fence` now, for a
    /// resource that keeps no state: one status read, so as linearizable
    /// as the store's status (a single Redis) or a majority's (quorum).
    pub async fn check_fence(
        &self,
        name: &LockName,
        fence: Fence,
    ) -> Result<FenceCheck, LockError> {
        let status = self.store.status(name).await?;
        Ok(FenceCheck::of(&status, fence))
    }

    /// Lists held locks for an operator, one bounded page at a time; each
    /// `waiting` counts as in [`LockService::status`]. A page reads every
    /// name it finds, so pages beyond [`LockPolicy::max_concurrent_listings`]
    /// are refused at once rather than queued behind the ones being read.
    pub async fn list(&self, request: &ListRequest) -> Result<LockPage, StoreError> {
        let Ok(_permit) = self.listings.try_acquire() else {
            return Err(StoreError::Overloaded(format!(
                "{} listing pages are being read already",
                self.policy.max_concurrent_listings
            )));
        };
        self.read_page(request).await
    }

    /// Reads one page as [`LockService::list`] does, without its limit, for
    /// callers that bound their own reads (an event stream's opening state
    /// waits its turn among `http.max_stream_state_reads`).
    pub async fn read_page(&self, request: &ListRequest) -> Result<LockPage, StoreError> {
        let mut page = self.store.list(request).await?;
        for entry in &mut page.locks {
            entry.status.waiting += self.waiters.in_line(&entry.name) as u64;
        }
        Ok(page)
    }
}
