//! `acquire_together.lua`: every lease of an acquire-all, or none, in one
//! step on one server; `extend_together.lua`: several leases renewed in
//! one step. Each lock's part is the call its own step makes
//! ([`AcquireCall`] or [`HoldCall`], [`ExtendCall`] or [`HoldExtendCall`]);
//! the reply carries each part's reply, read by that part's own decoding.

use lockbroker_core::{ExtendOutcome, LeaseKind, StoreError};

use super::super::{Reply, ScriptCall, ScriptContext, ScriptName};
use super::{unknown_code, AcquireCall, Acquired, ExtendCall, HoldCall, HoldExtendCall};

/// One lock of the set: an exclusive lease's acquire or a shared lease's
/// hold.
pub enum Part<'a> {
    /// `acquire.lua`.
    Exclusive(AcquireCall<'a>),
    /// `hold.lua`.
    Held(HoldCall<'a>),
}

impl<'a> Part<'a> {
    /// The part that takes the lease `call` asks for, by its kind.
    pub fn of(call: AcquireCall<'a>) -> Self {
        match call.params.kind {
            LeaseKind::Exclusive => Self::Exclusive(call),
            LeaseKind::Shared | LeaseKind::Permit => Self::Held(HoldCall(call)),
        }
    }

    fn step(&self) -> &'static str {
        match self {
            Self::Exclusive(_) => "1",
            Self::Held(_) => "2",
        }
    }

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        match self {
            Self::Exclusive(call) => call.keys(context),
            Self::Held(call) => call.keys(context),
        }
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        match self {
            Self::Exclusive(call) => call.args(context),
            Self::Held(call) => call.args(context),
        }
    }

    fn decode(&self, reply: &mut Reply) -> Result<Acquired, StoreError> {
        match self {
            Self::Exclusive(call) => call.decode(reply),
            Self::Held(call) => call.decode(reply),
        }
    }
}

/// What the step answered.
pub enum AcquiredTogether {
    /// Every part granted, in order.
    Granted(Vec<Acquired>),
    /// The part at `at` (from 0) was refused; nothing was granted.
    Refused {
        /// Its place.
        at: usize,
        /// Its answer.
        acquired: Acquired,
    },
}

/// The whole set's call.
pub struct AcquireTogetherCall<'a> {
    /// Every lock's part, in the order asked.
    pub parts: Vec<Part<'a>>,
}

impl ScriptCall for AcquireTogetherCall<'_> {
    type Output = AcquiredTogether;
    const SCRIPT: ScriptName = ScriptName::AcquireTogether;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        (self.parts.iter())
            .flat_map(|part| part.keys(context))
            .collect()
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        let mut header = vec![self.parts.len().to_string()];
        let mut args = Vec::new();
        for part in &self.parts {
            let (keys, own) = (part.keys(context), part.args(context));
            header.extend([
                part.step().to_owned(),
                keys.len().to_string(),
                own.len().to_string(),
            ]);
            args.extend(own);
        }
        header.extend(args);
        header
    }

    fn decode(&self, reply: &mut Reply) -> Result<AcquiredTogether, StoreError> {
        match reply.int()? {
            1 => {
                let mut all = Vec::with_capacity(self.parts.len());
                for part in &self.parts {
                    let length = usize::try_from(reply.uint()?).unwrap_or(usize::MAX);
                    all.push(part.decode(&mut reply.take(length)?)?);
                }
                Ok(AcquiredTogether::Granted(all))
            }
            0 => {
                let at = usize::try_from(reply.uint()?)
                    .unwrap_or(0)
                    .saturating_sub(1);
                let part = (self.parts.get(at))
                    .ok_or_else(|| StoreError::Protocol("refused a lock not asked".into()))?;
                let length = usize::try_from(reply.uint()?).unwrap_or(usize::MAX);
                let acquired = part.decode(&mut reply.take(length)?)?;
                Ok(AcquiredTogether::Refused { at, acquired })
            }
            other => Err(unknown_code("acquire together", other)),
        }
    }
}

/// One lease of a renewal of several: an exclusive lease's extend or a
/// shared lease's or permit's.
pub enum ExtendPart<'a> {
    /// `extend.lua`.
    Exclusive(ExtendCall<'a>),
    /// `hold_extend.lua`.
    Held(HoldExtendCall<'a>),
}

impl<'a> ExtendPart<'a> {
    /// The part that renews the lease `call` names, by its token's kind.
    pub fn of(call: ExtendCall<'a>) -> Self {
        match call.token.kind() {
            LeaseKind::Exclusive => Self::Exclusive(call),
            LeaseKind::Shared | LeaseKind::Permit => Self::Held(HoldExtendCall(call)),
        }
    }

    fn parts(&self, context: &ScriptContext) -> (&'static str, Vec<String>, Vec<String>) {
        match self {
            Self::Exclusive(call) => ("1", call.keys(context), call.args(context)),
            Self::Held(call) => ("2", call.keys(context), call.args(context)),
        }
    }

    fn decode(&self, reply: &mut Reply) -> Result<ExtendOutcome, StoreError> {
        match self {
            Self::Exclusive(call) => call.decode(reply),
            Self::Held(call) => call.decode(reply),
        }
    }
}

/// Several leases renewed in one step, each answering as its own extend.
pub struct ExtendTogetherCall<'a> {
    /// Every lease's part, in order.
    pub parts: Vec<ExtendPart<'a>>,
}

impl ScriptCall for ExtendTogetherCall<'_> {
    type Output = Vec<ExtendOutcome>;
    const SCRIPT: ScriptName = ScriptName::ExtendTogether;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        (self.parts.iter())
            .flat_map(|part| part.parts(context).1)
            .collect()
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        let mut header = vec![self.parts.len().to_string()];
        let mut args = Vec::new();
        for part in &self.parts {
            let (step, keys, own) = part.parts(context);
            header.extend([
                step.to_owned(),
                keys.len().to_string(),
                own.len().to_string(),
            ]);
            args.extend(own);
        }
        header.extend(args);
        header
    }

    fn decode(&self, reply: &mut Reply) -> Result<Vec<ExtendOutcome>, StoreError> {
        let mut all = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            let length = usize::try_from(reply.uint()?).unwrap_or(usize::MAX);
            all.push(part.decode(&mut reply.take(length)?)?);
        }
        Ok(all)
    }
}
