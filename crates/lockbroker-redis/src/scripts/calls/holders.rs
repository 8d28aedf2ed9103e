//! The steps of a holder set's leases (shared leases, permits) besides the
//! grant: `hold_extend.lua` and `hold_release.lua`. They answer as their
//! exclusive counterparts do.

use lockbroker_core::{ExtendOutcome, LeaseToken, LockName, ReleaseOutcome, Ttl};
use lockbroker_core::{FairEntry, StoreError};

use super::super::{Reply, ScriptCall, ScriptContext, ScriptName};
use super::{decode_extended, decode_released, ReleaseCall};

/// `hold_extend.lua`: sets the remaining TTL of a shared lease or a permit.
pub struct HoldExtendCall<'a> {
    /// The lock or semaphore.
    pub name: &'a LockName,
    /// The lease's token.
    pub token: &'a LeaseToken,
    /// The new remaining TTL.
    pub ttl: Ttl,
    /// No expiry past acquisition plus this; 0 for no limit.
    pub max_hold_ms: u64,
}

impl ScriptCall for HoldExtendCall<'_> {
    type Output = ExtendOutcome;
    const SCRIPT: ScriptName = ScriptName::HoldExtend;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        let keys = &context.keys;
        let mut all = vec![keys.holders(self.name), keys.members(self.name)];
        if context.quorum_node {
            all.push(keys.horizon());
        }
        all
    }

    fn args(&self, _: &ScriptContext) -> Vec<String> {
        vec![
            self.token.expose().to_owned(),
            self.ttl.as_millis().to_string(),
            self.max_hold_ms.to_string(),
        ]
    }

    fn decode(&self, reply: &mut Reply) -> Result<ExtendOutcome, StoreError> {
        decode_extended(reply)
    }
}

/// `hold_release.lua`: gives back a shared lease or a permit, with the
/// arguments of [`ReleaseCall`].
pub struct HoldReleaseCall<'a>(pub ReleaseCall<'a>);

impl<'a> HoldReleaseCall<'a> {
    /// Releases `token`'s lease of `name`; in quorum mode, undoing a grant a
    /// majority did not make, puts the waiter it went to back in line.
    pub fn new(name: &'a LockName, token: &'a LeaseToken, requeue: Option<FairEntry<'a>>) -> Self {
        Self(ReleaseCall {
            name,
            token,
            requeue,
        })
    }
}

impl ScriptCall for HoldReleaseCall<'_> {
    type Output = ReleaseOutcome;
    const SCRIPT: ScriptName = ScriptName::HoldRelease;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        let (keys, name) = (&context.keys, self.0.name);
        vec![
            keys.holders(name),
            keys.members(name),
            keys.released(name),
            keys.queue(name),
            keys.queue_expiry(name),
        ]
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        self.0.args(context)
    }

    fn decode(&self, reply: &mut Reply) -> Result<ReleaseOutcome, StoreError> {
        decode_released(reply)
    }
}
