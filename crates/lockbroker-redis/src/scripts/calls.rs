//! One typed definition per script: its keys and arguments in the order the
//! Lua reads them (see the header of each `.lua` file), and its reply.

use lockbroker_core::lease::Renewal;
use lockbroker_core::{
    AcquireOutcome, AcquireParams, ExtendOutcome, FairEntry, Fence, ForceReleaseOutcome, Holder,
    Lease, LeaseToken, LockName, LockStatus, Release, ReleaseOutcome, StoreError, Ttl,
};

use super::{Reply, ScriptCall, ScriptContext, ScriptName};

mod quorum;

pub use quorum::{AdoptFenceCall, Adoption, Epoch, EpochCall, ReadmitCall};

/// The keys of the scripts that may free a lock: its lease and fair queue.
fn queue_keys(context: &ScriptContext, name: &LockName) -> Vec<String> {
    let keys = &context.keys;
    vec![keys.lease(name), keys.queue(name), keys.queue_expiry(name)]
}

/// What a script needs to announce a freed lock: the channel, this broker's
/// id and the lock name, after the script's own arguments.
fn with_announcement(
    context: &ScriptContext,
    name: &LockName,
    mut args: Vec<String>,
) -> Vec<String> {
    args.extend([
        context.wake_channel_of(name),
        context.broker_id.clone(),
        name.as_str().to_owned(),
    ]);
    args
}

/// `acquire.lua`: grants the lock or reports what is in the way.
pub struct AcquireCall<'a> {
    /// The request.
    pub params: &'a AcquireParams<'a>,
    /// The highest fence the caller has seen; the fence will exceed it.
    pub fence_floor: u64,
    /// Quorum mode: the node's epoch as the broker knows it. A node with
    /// another, or one still out of majorities, grants nothing.
    pub epoch: Option<&'a str>,
}

/// What an acquire answered, and whether the caller's floor (rather than
/// Redis's counter or clock) set the fence.
pub struct Acquired {
    /// Granted or busy.
    pub outcome: AcquireOutcome,
    /// Redis lost its data and its clock runs behind the last fence.
    pub floor_raised: bool,
}

impl ScriptCall for AcquireCall<'_> {
    type Output = Acquired;
    const SCRIPT: ScriptName = ScriptName::Acquire;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        let (keys, name) = (&context.keys, self.params.name);
        let mut all = vec![
            keys.lease(name),
            keys.fence(name),
            keys.queue(name),
            keys.queue_expiry(name),
        ];
        if self.epoch.is_some() {
            all.extend([keys.horizon(), keys.epoch()]);
        }
        all
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        let params = self.params;
        let fair = params.fair;
        vec![
            params.token.expose().to_owned(),
            params.ttl.as_millis().to_string(),
            params.owner.map_or("", |o| o.as_str()).to_owned(),
            params.request_id.map_or("", |r| r.as_str()).to_owned(),
            params.lock_delay.as_millis().to_string(),
            context.fence_idle_ms.to_string(),
            self.fence_floor.to_string(),
            fair.map_or("", |f| f.waiter_id).to_owned(),
            fair.map_or(0, |f| f.entry_ttl_ms).to_string(),
            context.wake_channel_of(params.name),
            context.broker_id.clone(),
            params.name.as_str().to_owned(),
            params.principal.as_str().to_owned(),
            // One server orders its queue by its own clock; the copies on a
            // quorum's nodes all order by the broker's, so they agree.
            match fair {
                Some(fair) if context.quorum_node => fair.arrived_at_us.to_string(),
                _ => String::new(),
            },
            self.epoch.unwrap_or("").to_owned(),
            if params.waits { "1" } else { "" }.to_owned(),
        ]
    }

    fn decode(&self, reply: &mut Reply) -> Result<Acquired, StoreError> {
        let name = self.params.name;
        let granted = reply.int()?;
        if granted == -1 {
            return Err(StoreError::Unavailable(
                "the node restarted without its data and is out of majorities".into(),
            ));
        }
        if granted == 1 {
            let token = LeaseToken::parse(&reply.text()?)
                .map_err(|_| StoreError::Protocol("stored token is malformed".into()))?;
            let fence = Fence::new(reply.uint()?);
            let ttl_ms = reply.uint()?;
            let lease = Lease {
                name: name.clone(),
                token,
                fence,
                ttl_ms,
                expires_at_ms: reply.uint()?,
                validity_ms: ttl_ms,
                owner: reply.optional_text()?,
            };
            // A re-sent acquire answers without the flag: it raised nothing.
            let floor_raised = reply.has_more() && reply.int()? == 1;
            return Ok(Acquired {
                outcome: AcquireOutcome::Granted(lease),
                floor_raised,
            });
        }
        let holder = Holder {
            owner: reply.optional_text()?,
            fence: Fence::new(reply.uint()?),
            expires_in_ms: reply.uint()?,
            available_in_ms: reply.uint()?,
        };
        Ok(Acquired {
            outcome: AcquireOutcome::Busy {
                holder,
                queue_position: u64::try_from(reply.int()?).ok(),
            },
            floor_raised: false,
        })
    }
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

    fn args(&self, _: &ScriptContext) -> Vec<String> {
        vec![
            self.token.expose().to_owned(),
            self.ttl.as_millis().to_string(),
            self.max_hold_ms.to_string(),
        ]
    }

    fn decode(&self, reply: &mut Reply) -> Result<ExtendOutcome, StoreError> {
        Ok(match reply.int()? {
            1 => {
                let fence = Fence::new(reply.uint()?);
                let ttl_ms = reply.uint()?;
                ExtendOutcome::Extended(Renewal {
                    fence,
                    ttl_ms,
                    expires_at_ms: reply.uint()?,
                    validity_ms: ttl_ms,
                    owner: reply.optional_text()?,
                })
            }
            -1 => ExtendOutcome::MaxHoldExceeded {
                expires_in_ms: reply.uint()?,
            },
            -2 => ExtendOutcome::Released,
            _ => ExtendOutcome::Lost,
        })
    }
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
}

impl ScriptCall for ReleaseCall<'_> {
    type Output = ReleaseOutcome;
    const SCRIPT: ScriptName = ScriptName::Release;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        queue_keys(context, self.name)
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        let own = vec![
            self.token.expose().to_owned(),
            context.release_memo_ms.to_string(),
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
        Ok(match reply.int()? {
            1 => ReleaseOutcome::Released(Release {
                fence: Fence::new(reply.uint()?),
                held_ms: u64::try_from(reply.int()?).ok(),
                acknowledged: None,
            }),
            _ => ReleaseOutcome::Lost,
        })
    }
}

/// `status.lua`: reads a lock's state.
pub struct StatusCall<'a> {
    /// The lock.
    pub name: &'a LockName,
}

impl ScriptCall for StatusCall<'_> {
    type Output = LockStatus;
    const SCRIPT: ScriptName = ScriptName::Status;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        vec![context.keys.lease(self.name), context.keys.fence(self.name)]
    }

    fn args(&self, _: &ScriptContext) -> Vec<String> {
        Vec::new()
    }

    fn decode(&self, reply: &mut Reply) -> Result<LockStatus, StoreError> {
        Ok(LockStatus {
            held: reply.int()? == 1,
            owner: reply.optional_text()?,
            fence: u64::try_from(reply.int()?).ok().map(Fence::new),
            expires_in_ms: reply.uint()?,
            available_in_ms: reply.uint()?,
        })
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
        queue_keys(context, self.name)
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        with_announcement(context, self.name, vec![self.waiter_id.to_owned()])
    }

    fn decode(&self, _: &mut Reply) -> Result<(), StoreError> {
        Ok(())
    }
}

/// `force_release.lua`: ends whatever lease holds a lock.
pub struct ForceReleaseCall<'a> {
    /// The lock.
    pub name: &'a LockName,
}

impl ScriptCall for ForceReleaseCall<'_> {
    type Output = ForceReleaseOutcome;
    const SCRIPT: ScriptName = ScriptName::ForceRelease;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        queue_keys(context, self.name)
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        with_announcement(context, self.name, Vec::new())
    }

    fn decode(&self, reply: &mut Reply) -> Result<ForceReleaseOutcome, StoreError> {
        Ok(match reply.int()? {
            1 => ForceReleaseOutcome::Released {
                fence: Fence::new(reply.uint()?),
                owner: reply.optional_text()?,
            },
            _ => ForceReleaseOutcome::NotHeld,
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
