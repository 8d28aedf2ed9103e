//! One typed definition per script: its keys and arguments in the order the
//! Lua reads them (see the header of each `.lua` file), and its reply.

use lockbroker_core::lease::Renewal;
use lockbroker_core::{
    ExtendOutcome, FairEntry, Fence, ForceReleaseOutcome, Holder, LeaseKind, LeaseToken, LockName,
    LockStatus, Principal, Release, ReleaseOutcome, StoreError, Ttl,
};

use super::{Reply, ScriptCall, ScriptContext, ScriptName};

mod acquire;
#[cfg(test)]
mod golden;
mod holders;
mod quorum;
mod sessions;
mod together;

use acquire::{holder_kind, read_holders};
pub use acquire::{quorum_acquire_text, with_epoch, AcquireCall, Acquired, HoldCall};
pub use holders::{HoldExtendCall, HoldReleaseCall};
pub use quorum::{AdoptFenceCall, Adoption, Epoch, EpochCall, ReadmitCall};
pub use sessions::{SessionForgetCall, SessionReadCall, SessionWriteCall};
pub use together::{AcquireTogetherCall, AcquiredTogether, ExtendPart, ExtendTogetherCall, Part};

/// The one key of a script that names the lock's other keys itself from
/// it (prelude.lua's `lock_key`): its lease hash.
fn lease_key(context: &ScriptContext, name: &LockName) -> Vec<String> {
    vec![context.keys.lease(name)]
}

/// What a script needs to announce a freed lock, after the script's own
/// arguments ([`ScriptContext::announcer_of`]).
fn with_announcement(
    context: &ScriptContext,
    name: &LockName,
    mut args: Vec<String>,
) -> Vec<String> {
    args.push(context.announcer_of(name));
    args
}

/// `extend.lua`: sets the remaining TTL of a held lease.
pub struct ExtendCall<'a> {
    /// The lock.
    pub name: &'a LockName,
    /// The lease's token.
    pub token: &'a LeaseToken,
    /// The new remaining TTL.
    pub ttl: Ttl,
    /// No expiry past acquisition plus this; 0 for no limit.
    pub max_hold_ms: u64,
}

impl<'a> ExtendCall<'a> {
    /// An extend of `token`'s lease of `name` to `ttl`, held no longer than
    /// `max_hold_ms` after its grant (0: no limit).
    pub fn new(name: &'a LockName, token: &'a LeaseToken, ttl: Ttl, max_hold_ms: u64) -> Self {
        Self {
            name,
            token,
            ttl,
            max_hold_ms,
        }
    }
}

impl ScriptCall for ExtendCall<'_> {
    type Output = ExtendOutcome;
    const SCRIPT: ScriptName = ScriptName::Extend;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        let mut keys = vec![context.keys.lease(self.name)];
        if context.quorum_node {
            keys.push(context.keys.horizon());
        }
        keys
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        vec![
            self.token.expose().to_owned(),
            self.ttl.as_millis().to_string(),
            self.max_hold_ms.to_string(),
            context.fence_idle_ms.to_string(),
        ]
    }

    fn decode(&self, reply: &mut Reply) -> Result<ExtendOutcome, StoreError> {
        decode_extended(reply)
    }
}

/// Reads what an extend answered, of any kind of lease.
fn decode_extended(reply: &mut Reply) -> Result<ExtendOutcome, StoreError> {
    Ok(match reply.int()? {
        1 => {
            let fence = Fence::new(reply.uint()?);
            let ttl_ms = reply.uint()?;
            let expires_at_ms = reply.uint()?;
            let owner = reply.optional_text()?;
            // hold_extend.lua adds the limit in force.
            let limit = match reply.has_more() {
                true => u32::try_from(reply.int()?).ok(),
                false => None,
            };
            ExtendOutcome::Extended(Renewal {
                fence,
                ttl_ms,
                expires_at_ms,
                validity_ms: ttl_ms,
                owner,
                limit,
            })
        }
        -1 => ExtendOutcome::MaxHoldExceeded {
            expires_in_ms: reply.uint()?,
        },
        -2 => ExtendOutcome::Released,
        -3 => ExtendOutcome::ForceReleased {
            by: Principal::from_stored(&reply.text()?),
        },
        0 => ExtendOutcome::Lost,
        other => return Err(unknown_code("extend", other)),
    })
}

/// A reply code no script answers with: a protocol error, never a guess.
pub(super) fn unknown_code(step: &str, code: i64) -> StoreError {
    StoreError::Protocol(format!("unknown {step} reply code {code}"))
}

/// `release.lua`: frees a held lock and announces it.
pub struct ReleaseCall<'a> {
    /// The lock.
    pub name: &'a LockName,
    /// The lease's token.
    pub token: &'a LeaseToken,
    /// Quorum mode, undoing a grant a majority did not make: the fair waiter
    /// it went to, put back in line at its arrival.
    pub requeue: Option<FairEntry<'a>>,
    /// Quorum mode: this undoes a grant a majority did not make, which
    /// leaves no release memo (its token may yet be granted on other nodes).
    pub undo: bool,
}

impl ScriptCall for ReleaseCall<'_> {
    type Output = ReleaseOutcome;
    const SCRIPT: ScriptName = ScriptName::Release;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        lease_key(context, self.name)
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        let own = vec![
            self.token.expose().to_owned(),
            if self.undo {
                "0".to_owned()
            } else {
                context.release_memo_ms.to_string()
            },
        ];
        let mut args = with_announcement(context, self.name, own);
        if let Some(waiter) = self.requeue {
            args.extend([
                waiter.waiter_id.to_owned(),
                waiter.arrived_at_us.to_string(),
                waiter.entry_ttl_ms.to_string(),
            ]);
        }
        args
    }

    fn decode(&self, reply: &mut Reply) -> Result<ReleaseOutcome, StoreError> {
        decode_released(reply)
    }
}

/// Reads what a release answered, of any kind of lease.
fn decode_released(reply: &mut Reply) -> Result<ReleaseOutcome, StoreError> {
    Ok(match reply.int()? {
        1 => ReleaseOutcome::Released(Release {
            fence: Fence::new(reply.uint()?),
            held_ms: u64::try_from(reply.int()?).ok(),
            acknowledged: None,
        }),
        -3 => ReleaseOutcome::ForceReleased {
            by: Principal::from_stored(&reply.text()?),
        },
        0 => ReleaseOutcome::Lost,
        other => return Err(unknown_code("release", other)),
    })
}

/// `status.lua`: reads a lock's or a semaphore's state.
pub struct StatusCall<'a> {
    /// The lock or semaphore.
    pub name: &'a LockName,
}

impl ScriptCall for StatusCall<'_> {
    type Output = LockStatus;
    const SCRIPT: ScriptName = ScriptName::Status;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        lease_key(context, self.name)
    }

    fn args(&self, _: &ScriptContext) -> Vec<String> {
        Vec::new()
    }

    fn decode(&self, reply: &mut Reply) -> Result<LockStatus, StoreError> {
        let mut status = LockStatus::free(None);
        status.held = reply.int()? == 1;
        status.owner = reply.optional_text()?;
        status.fence = u64::try_from(reply.int()?).ok().map(Fence::new);
        status.expires_in_ms = reply.uint()?;
        status.available_in_ms = reply.uint()?;
        let kind = holder_kind(self.name);
        status.mode = match reply.text()?.as_str() {
            "exclusive" => Some(LeaseKind::Exclusive),
            "holders" => Some(kind),
            _ => None,
        };
        status.holder_count = reply.uint()?;
        status.occupied = reply.uint()?;
        status.limit = u32::try_from(reply.int()?).ok();
        status.first_free_in_ms = reply.uint()?;
        status.waiting = reply.uint()?;
        status.holders = read_holders(reply, kind)?;
        if status.mode == Some(LeaseKind::Exclusive) {
            status.holder_count = 1;
            status.holders = vec![Holder {
                mode: LeaseKind::Exclusive,
                owner: status.owner.clone(),
                fence: status.fence.unwrap_or(Fence::new(0)),
                expires_in_ms: status.expires_in_ms,
                available_in_ms: status.available_in_ms,
            }];
        }
        Ok(status)
    }
}

/// `leave_queue.lua`: takes a fair waiter out of a lock's queue.
pub struct LeaveQueueCall<'a> {
    /// The lock.
    pub name: &'a LockName,
    /// The waiter leaving.
    pub waiter_id: &'a str,
}

impl ScriptCall for LeaveQueueCall<'_> {
    type Output = ();
    const SCRIPT: ScriptName = ScriptName::LeaveQueue;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        lease_key(context, self.name)
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        with_announcement(context, self.name, vec![self.waiter_id.to_owned()])
    }

    fn decode(&self, _: &mut Reply) -> Result<(), StoreError> {
        Ok(())
    }
}

/// `force_release.lua`: ends every lease of a lock or a semaphore.
pub struct ForceReleaseCall<'a> {
    /// The lock or semaphore.
    pub name: &'a LockName,
    /// The operator asking, named to the former holders.
    pub by: &'a Principal,
}

impl ScriptCall for ForceReleaseCall<'_> {
    type Output = ForceReleaseOutcome;
    const SCRIPT: ScriptName = ScriptName::ForceRelease;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        lease_key(context, self.name)
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        let mut args = with_announcement(context, self.name, Vec::new());
        args.extend([
            context.release_memo_ms.to_string(),
            self.by.as_str().to_owned(),
        ]);
        args
    }

    fn decode(&self, reply: &mut Reply) -> Result<ForceReleaseOutcome, StoreError> {
        let leases_ended = reply.uint()?;
        let fence = Fence::new(reply.uint()?);
        let owner = reply.optional_text()?;
        let mode = match reply.int()? {
            1 => LeaseKind::Exclusive,
            _ => holder_kind(self.name),
        };
        Ok(match leases_ended {
            0 => ForceReleaseOutcome::NotHeld,
            _ => ForceReleaseOutcome::Released {
                fence,
                owner,
                leases_ended,
                mode,
            },
        })
    }
}

/// `probe.lua`: checks that Redis takes writes.
pub struct ProbeCall;

impl ScriptCall for ProbeCall {
    type Output = ();
    const SCRIPT: ScriptName = ScriptName::Probe;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        vec![context.keys.probe()]
    }

    fn args(&self, _: &ScriptContext) -> Vec<String> {
        Vec::new()
    }

    fn decode(&self, _: &mut Reply) -> Result<(), StoreError> {
        Ok(())
    }
}
