//! Quorum mode: the steps a [`crate::quorum::QuorumStore`] takes on one
//! node besides the lock steps: a fence write-back, undoing a grant no
//! majority made, the node's epoch and its readmission.

use lockbroker_core::{FairEntry, LeaseToken, LockName, ReleaseOutcome, StoreError};

use super::RedisLockStore;
use crate::scripts::calls::{AdoptFenceCall, Adoption, Epoch, EpochCall, ReadmitCall};

impl RedisLockStore {
    /// Quorum mode: writes a majority grant's `fence` back to this node, if
    /// it still holds the lease; whether it did.
    pub async fn adopt_fence(&self, call: &AdoptFenceCall<'_>) -> Result<Adoption, StoreError> {
        self.call(call).await
    }

    /// Quorum mode: undoes a grant that no majority made: releases `token`
    /// and puts the fair waiter it went to back in line at its arrival.
    pub async fn undo_grant(
        &self,
        name: &LockName,
        token: &LeaseToken,
        waiter: Option<FairEntry<'_>>,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.release_call(self.client(), name, token, waiter).await
    }

    /// Quorum mode: raises this node's fence floor after it restarted
    /// without its data; whether the node's epoch was still `call.epoch`.
    pub async fn readmit(&self, call: &ReadmitCall<'_>) -> Result<bool, StoreError> {
        self.call(call).await
    }

    /// Quorum mode: this node's epoch (made now, as `call` says, if it has
    /// none) and lease horizon.
    pub async fn epoch(&self, call: &EpochCall<'_>) -> Result<Epoch, StoreError> {
        self.call(call).await
    }
}
