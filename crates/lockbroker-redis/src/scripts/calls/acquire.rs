//! The grant scripts: `acquire.lua` for an exclusive lease, `hold.lua` for a
//! shared lease or a permit. Both take the same arguments and answer alike.

use lockbroker_core::{
    AcquireOutcome, AcquireParams, Blockers, Fence, Holder, Lease, LeaseKind, LeaseToken, LockName,
    Space, StoreError,
};

use fred::bytes_utils::Str;

use super::super::{CallText, Reply, ScriptCall, ScriptContext, ScriptName};
use super::unknown_code;

/// The arguments `acquire.lua` is always sent; the rest go only up to the
/// last that is not empty.
const ALWAYS_SENT: usize = 6;

/// Where among the arguments of `acquire.lua` and `hold.lua` (from 0) a
/// quorum node's epoch goes: first after those always sent, so that a
/// quorum node, sent it on every acquire, is sent none of the empty ones.
const EPOCH_ARG: usize = ALWAYS_SENT;

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

/// Quorum mode: the text of an acquire of `params` with the round's
/// `proposal`, by the script of its kind, made once for every node with a
/// stand-in epoch; [`with_epoch`] puts in each node's own.
pub fn quorum_acquire_text(
    params: &AcquireParams<'_>,
    proposal: u64,
    context: &ScriptContext,
) -> CallText {
    let call = AcquireCall {
        params,
        fence_floor: proposal,
        // Any epoch but none: an empty one would leave its place off.
        epoch: Some("-"),
    };
    match params.kind {
        LeaseKind::Exclusive => CallText::of(&call, context),
        LeaseKind::Shared | LeaseKind::Permit => CallText::of(&HoldCall(call), context),
    }
}

/// `text`, from [`quorum_acquire_text`], as the node in `epoch` is sent it:
/// the text of the same acquire made for that node alone.
pub fn with_epoch(text: &CallText, epoch: &str) -> CallText {
    text.with_arg(EPOCH_ARG, Str::from(epoch))
}

/// `hold.lua`: grants a shared lease or a permit, with the arguments of
/// [`AcquireCall`].
pub struct HoldCall<'a>(pub AcquireCall<'a>);

/// What an acquire answered, and whether the caller's floor (rather than
/// Redis's counter or clock) set the fence.
pub struct Acquired {
    /// Granted or busy.
    pub outcome: AcquireOutcome,
    /// Redis lost its data and its clock runs behind the last fence.
    pub floor_raised: bool,
    /// Quorum mode: the node granted nothing, because the fence it would
    /// issue runs ahead of the round's proposal (the outcome is then
    /// `Contended`).
    pub fence_ahead: Option<u64>,
}

impl AcquireCall<'_> {
    /// The lease hash, from which both scripts name the lock's other keys,
    /// then the node's own in quorum mode.
    fn all_keys(&self, context: &ScriptContext) -> Vec<String> {
        let keys = &context.keys;
        let mut all = vec![keys.lease(self.params.name)];
        if self.epoch.is_some() {
            all.extend([keys.horizon(), keys.epoch()]);
        }
        all
    }

    /// Every argument, in `acquire.lua`'s order: the six always needed,
    /// then those most requests leave empty.
    fn all_args(&self, context: &ScriptContext) -> Vec<String> {
        let params = self.params;
        let fair = params.fair;
        let args = vec![
            params.token.expose().to_owned(),
            params.ttl.as_millis().to_string(),
            params.lock_delay.as_millis().to_string(),
            context.fence_idle_ms.to_string(),
            self.fence_floor.to_string(),
            context.announcer_of(params.name),
            self.epoch.unwrap_or("").to_owned(),
            params.owner.map_or("", |o| o.as_str()).to_owned(),
            params.request_id.map_or("", |r| r.as_str()).to_owned(),
            params.principal.as_str().to_owned(),
            fair.map_or("", |f| f.waiter_id).to_owned(),
            fair.map_or(String::new(), |f| f.entry_ttl_ms.to_string()),
            // One server orders its queue by its own clock; the copies on a
            // quorum's nodes all order by the broker's, so they agree.
            match fair {
                Some(fair) if context.quorum_node => fair.arrived_at_us.to_string(),
                _ => String::new(),
            },
            if params.waits { "1" } else { "" }.to_owned(),
            if fair.is_some_and(|f| f.always) {
                "1"
            } else {
                ""
            }
            .to_owned(),
        ];
        debug_assert_eq!(args[EPOCH_ARG], self.epoch.unwrap_or(""));
        args
    }
}

impl ScriptCall for AcquireCall<'_> {
    type Output = Acquired;
    const SCRIPT: ScriptName = ScriptName::Acquire;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        self.all_keys(context)
    }

    /// The arguments without the empty ones at the end: Redis turns every
    /// argument into a Lua string on every call, and most requests name no
    /// owner, request id or waiter.
    fn args(&self, context: &ScriptContext) -> Vec<String> {
        let mut args = self.all_args(context);
        while args.len() > ALWAYS_SENT && args.last().is_some_and(String::is_empty) {
            args.pop();
        }
        args
    }

    fn decode(&self, reply: &mut Reply) -> Result<Acquired, StoreError> {
        decode_acquired(self.params, reply)
    }
}

impl ScriptCall for HoldCall<'_> {
    type Output = Acquired;
    const SCRIPT: ScriptName = ScriptName::Hold;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        self.0.all_keys(context)
    }

    fn args(&self, context: &ScriptContext) -> Vec<String> {
        let mut args = self.0.all_args(context);
        args.push(self.0.params.limit.map_or(String::new(), |l| l.to_string()));
        args
    }

    fn decode(&self, reply: &mut Reply) -> Result<Acquired, StoreError> {
        decode_acquired(self.0.params, reply)
    }
}

/// Reads a grant, a busy answer, a limit conflict or a refusal by a node
/// out of good standing, of the request `params`.
fn decode_acquired(params: &AcquireParams<'_>, reply: &mut Reply) -> Result<Acquired, StoreError> {
    let name = params.name;
    let outcome = match reply.int()? {
        -1 => {
            return Err(StoreError::Unavailable(
                "the node restarted without its data and is out of majorities".into(),
            ))
        }
        -2 => {
            return Ok(Acquired {
                outcome: AcquireOutcome::Contended,
                floor_raised: false,
                fence_ahead: Some(reply.uint()?),
            })
        }
        -3 => AcquireOutcome::LimitConflict {
            limit: u32::try_from(reply.uint()?)
                .map_err(|_| StoreError::Protocol("limit out of range".into()))?,
        },
        // Granted to this request: its own token, TTL and owner.
        1 => {
            let fence = Fence::new(reply.uint()?);
            let expires_at_ms = reply.uint()?;
            let floor_raised = reply.int()? == 1;
            let ttl_ms = params.ttl.as_millis();
            let lease = Lease {
                name: name.clone(),
                token: params.token.clone(),
                fence,
                ttl_ms,
                expires_at_ms,
                validity_ms: ttl_ms,
                owner: params.owner.map(|owner| owner.as_str().to_owned()),
            };
            return Ok(Acquired {
                outcome: AcquireOutcome::Granted(lease),
                floor_raised,
                fence_ahead: None,
            });
        }
        // Held already by the same request, re-sent: the lease as it stands.
        2 => {
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
            return Ok(Acquired {
                outcome: AcquireOutcome::Granted(lease),
                floor_raised: false,
                fence_ahead: None,
            });
        }
        0 => {
            let holder = read_holder(reply, LeaseKind::Exclusive)?;
            let queue_position = u64::try_from(reply.int()?).ok();
            let blockers = match reply.text()?.as_str() {
                "exclusive" => Blockers::one(holder),
                "queue" => Blockers {
                    holders: read_holders(reply, holder_kind(name))?,
                    ..Blockers::queue(holder.fence)
                },
                "holders" => {
                    let kind = holder_kind(name);
                    let holders = read_holders(reply, kind)?;
                    Blockers {
                        holder: Holder {
                            mode: kind,
                            ..holder
                        },
                        holders,
                        limit: None,
                    }
                }
                other => {
                    return Err(StoreError::Protocol(format!(
                        "unknown acquire blocker {other:?}"
                    )))
                }
            };
            AcquireOutcome::Busy {
                blockers,
                queue_position,
            }
        }
        other => return Err(unknown_code("acquire", other)),
    };
    Ok(Acquired {
        outcome,
        floor_raised: false,
        fence_ahead: None,
    })
}

/// The kind of the leases in a name's holder set.
pub(super) fn holder_kind(name: &LockName) -> LeaseKind {
    match name.space() {
        Space::Lock | Space::Session => LeaseKind::Shared,
        Space::Semaphore => LeaseKind::Permit,
    }
}

/// One holder as the scripts list it: owner, fence, expires in, available in.
pub(super) fn read_holder(reply: &mut Reply, mode: LeaseKind) -> Result<Holder, StoreError> {
    Ok(Holder {
        mode,
        owner: reply.optional_text()?,
        fence: Fence::new(reply.uint()?),
        expires_in_ms: reply.uint()?,
        available_in_ms: reply.uint()?,
    })
}

/// Every holder left in the reply.
pub(super) fn read_holders(reply: &mut Reply, mode: LeaseKind) -> Result<Vec<Holder>, StoreError> {
    let mut holders = Vec::new();
    while reply.has_more() {
        holders.push(read_holder(reply, mode)?);
    }
    Ok(holders)
}
