//! The steps of a holder set's leases (shared leases, permits) besides the
//! grant: `hold_extend.lua` and `hold_release.lua`. They answer as their
//! exclusive counterparts do.

use lockbroker_core::{ExtendOutcome, ReleaseOutcome, StoreError};

use super::super::{Reply, ScriptCall, ScriptContext, ScriptName};
use super::{decode_extended, decode_released, ExtendCall, ReleaseCall};

/// `hold_extend.lua`: sets the remaining TTL of a shared lease or a permit,
/// with the arguments of [`ExtendCall`].
pub struct HoldExtendCall<'a>(pub ExtendCall<'a>);

impl ScriptCall for HoldExtendCall<'_> {
    type Output = ExtendOutcome;
    const SCRIPT: ScriptName = ScriptName::HoldExtend;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        self.0.keys(context)
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        self.0.args(context)
    }

    fn decode(&self, reply: &mut Reply) -> Result<ExtendOutcome, StoreError> {
        decode_extended(reply)
    }
}

/// `hold_release.lua`: gives back a shared lease or a permit, with the
/// arguments of [`ReleaseCall`].
pub struct HoldReleaseCall<'a>(pub ReleaseCall<'a>);

impl ScriptCall for HoldReleaseCall<'_> {
    type Output = ReleaseOutcome;
    const SCRIPT: ScriptName = ScriptName::HoldRelease;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        self.0.keys(context)
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        self.0.args(context)
    }

    fn decode(&self, reply: &mut Reply) -> Result<ReleaseOutcome, StoreError> {
        decode_released(reply)
    }
}
