//! One acquire's attempt: its token, plan and place in line, made once from
//! the request and kept for every try of a waiting acquire.

use crate::error::LockError;
use crate::lease::{random_hex, unix_micros, LeaseKind, LeaseToken};
use crate::name::{LockName, Space};
use crate::policy::{AcquirePlan, AcquireRequest};
use crate::store::LockStore;
use crate::validation::ValidationError;

use super::LockService;

/// One waiting or non-waiting acquire: its token and, for a waiter, its
/// queue id, kept for every attempt.
pub(super) struct Attempt<'a> {
    pub(super) name: &'a LockName,
    pub(super) token: LeaseToken,
    pub(super) plan: AcquirePlan,
    /// A waiter's id in the store's queue, which it joins as
    /// [`crate::store::FairEntry::always`] says.
    pub(super) waiter_id: Option<Box<str>>,
    /// The waiter joins the store's queue whenever it is turned away: a fair
    /// waiter, and every waiting shared or permit request.
    pub(super) queues_always: bool,
    /// When the request arrived, in Unix microseconds: a waiter's place.
    pub(super) arrived_at_us: u64,
}

impl<S: LockStore> LockService<S> {
    /// The attempt `request` makes on `name`, once its plan is within the
    /// policy.
    pub(super) fn prepare<'a>(
        &self,
        name: &'a LockName,
        request: AcquireRequest,
        under_session: bool,
    ) -> Result<Attempt<'a>, LockError> {
        let plan = self.policy.plan(request, self.is_shutting_down())?;
        if (name.space() == Space::Semaphore) != (plan.kind == LeaseKind::Permit) {
            return Err(LockError::Invalid(ValidationError::new(
                "mode",
                format!(
                    "a {} takes no {} lease",
                    name.space().noun(),
                    plan.kind.as_str()
                ),
            )));
        }
        let waits = !plan.wait.is_zero();
        let waiter_id = waits.then(|| random_hex::<12>().into_boxed_str());
        // One token for every attempt of this request: an attempt that Redis ran
        // but whose answer was lost is recognised as ours by the next one.
        Ok(Attempt {
            name,
            token: if under_session {
                LeaseToken::generate_under_session(plan.kind)
            } else {
                LeaseToken::generate_for(plan.kind)
            },
            queues_always: plan.fair || plan.kind != LeaseKind::Exclusive,
            plan,
            // Only a waiter's place needs the clock.
            arrived_at_us: if waits { unix_micros() } else { 0 },
            waiter_id,
        })
    }
}
