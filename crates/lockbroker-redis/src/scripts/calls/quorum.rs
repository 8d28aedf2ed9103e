//! The calls only quorum mode makes: a fence write-back, a node's epoch, and
//! a node's readmission after a restart without its data.

use lockbroker_core::{Fence, LeaseKind, LeaseToken, LockName, StoreError};

use super::super::{Reply, ScriptCall, ScriptContext, ScriptName};

/// `adopt_fence.lua`: writes a quorum grant's fence back to a node.
pub struct AdoptFenceCall<'a> {
    /// The lock.
    pub name: &'a LockName,
    /// The lease's token.
    pub token: &'a LeaseToken,
    /// The fence the majority's grant carries.
    pub fence: Fence,
    /// The node's epoch as the broker knows it.
    pub epoch: &'a str,
}

/// What a node said to a fence write-back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adoption {
    /// The node holds the lease and now carries the fence.
    Adopted,
    /// The node no longer holds the lease (expired or released there).
    NotHeld,
    /// The node restarted or is still out of majorities: it does not count.
    NotInStanding,
}

impl ScriptCall for AdoptFenceCall<'_> {
    type Output = Adoption;
    const SCRIPT: ScriptName = ScriptName::AdoptFence;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        let keys = &context.keys;
        let mut all = vec![keys.lease(self.name), keys.horizon(), keys.epoch()];
        if self.token.kind() != LeaseKind::Exclusive {
            all.push(keys.members(self.name));
        }
        all
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        vec![
            self.token.expose().to_owned(),
            self.fence.get().to_string(),
            context.fence_idle_ms.to_string(),
            self.epoch.to_owned(),
        ]
    }

    fn decode(&self, reply: &mut Reply) -> Result<Adoption, StoreError> {
        Ok(match reply.int()? {
            1 => Adoption::Adopted,
            0 => Adoption::NotHeld,
            _ => Adoption::NotInStanding,
        })
    }
}

/// `epoch.lua`: a node's epoch and lease horizon.
pub struct EpochCall<'a> {
    /// The epoch id to make if the node has none; empty to only read.
    pub fresh_id: &'a str,
    /// For a new epoch: how long the node stays out of majorities, ms.
    pub quarantine_ms: u64,
}

/// When a node's data began, and how long leases on it may last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Epoch {
    /// Made when the node was first seen empty; a new one means lost data.
    /// `None` when the node has none yet.
    pub id: Option<String>,
    /// Until when the node stays out of majorities, by its clock (ms).
    pub until_ms: u64,
    /// The node's clock now (ms).
    pub now_ms: u64,
    /// The latest instant a lease on the node may stay valid (ms; 0: none).
    pub horizon_ms: u64,
    /// The node restarted without its data and its fence floor has not been
    /// raised from the other nodes yet: it stays out of majorities.
    pub pending_marks: bool,
    /// The highest fence the node has issued or taken since its epoch began.
    pub max_fence: u64,
}

impl ScriptCall for EpochCall<'_> {
    type Output = Epoch;
    const SCRIPT: ScriptName = ScriptName::Epoch;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        vec![context.keys.epoch(), context.keys.horizon()]
    }

    fn args(&self, _: &ScriptContext) -> Vec<String> {
        vec![self.fresh_id.to_owned(), self.quarantine_ms.to_string()]
    }

    fn decode(&self, reply: &mut Reply) -> Result<Epoch, StoreError> {
        Ok(Epoch {
            id: reply.optional_text()?,
            until_ms: reply.uint()?,
            now_ms: reply.uint()?,
            horizon_ms: reply.uint()?,
            pending_marks: reply.int()? == 1,
            max_fence: reply.uint()?,
        })
    }
}

/// `readmit.lua`: raises a node's fence floor, after it restarted without its
/// data, to the highest fence the other nodes know, so its grants exceed
/// every fence issued before; then the node may count again once its time
/// out of majorities has passed.
pub struct ReadmitCall<'a> {
    /// The node's new epoch, as read from it.
    pub epoch: &'a str,
    /// The highest fence a majority of nodes reported.
    pub floor: u64,
}

impl ScriptCall for ReadmitCall<'_> {
    type Output = bool;
    const SCRIPT: ScriptName = ScriptName::Readmit;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        vec![context.keys.epoch()]
    }

    fn args(&self, _: &ScriptContext) -> Vec<String> {
        vec![self.epoch.to_owned(), self.floor.to_string()]
    }

    fn decode(&self, reply: &mut Reply) -> Result<bool, StoreError> {
        Ok(reply.int()? == 1)
    }
}
