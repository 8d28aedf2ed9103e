//! The background task of one lease: it marks the lease lost when its local
//! deadline passes and, once renewing, extends it every TTL / 3.
//!
//! A renewal never asks for validity past the lease's maximum hold, so a hung
//! job loses the lock instead of keeping it. An unavailable broker is asked
//! again after a short pause, never past the deadline; `lease_lost` ends the
//! lease at once; `max_hold_exceeded` and any other refusal stop renewing and
//! let the lease run out.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use crate::error::{Error, LostReason};
use crate::lease::{LeaseEnd, Shared};

/// The longest pause between renewal retries while the broker cannot be reached.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// The shortest timeout a renewal gets, even right before the deadline.
pub(crate) const MIN_TIMEOUT: Duration = Duration::from_millis(50);

/// Runs until the lease ends.
pub(crate) async fn run(shared: Arc<Shared>) {
    loop {
        let (deadline, next_renewal) = {
            let state = shared.state();
            if state.end.is_some() {
                return;
            }
            (state.deadline, state.next_renewal)
        };
        tokio::select! {
            () = shared.ended.cancelled() => return,
            () = shared.wake.notified() => {}
            () = sleep_until(deadline) => expire_if_due(&shared),
            () = sleep_until(next_renewal.unwrap_or(deadline)), if next_renewal.is_some() => {
                renew_once(&shared).await;
            }
        }
    }
}

/// The deadline passed: unless an extend moved it meanwhile, the lease is lost.
fn expire_if_due(shared: &Shared) {
    let reason = {
        let state = shared.state();
        if state.end.is_some() || Instant::now() < state.deadline {
            return;
        }
        if state.at_max_hold {
            LostReason::MaxHold
        } else {
            LostReason::Expired
        }
    };
    shared.finish(LeaseEnd::Lost(reason));
}

/// One renewal and what it decides about the next.
async fn renew_once(shared: &Shared) {
    let now = Instant::now();
    let room = shared.hold_until.saturating_duration_since(now);
    if room < Duration::from_millis(1) {
        stop_at_max_hold(shared);
        return;
    }
    let ttl = shared.ttl.min(room);
    let remaining = shared.state().deadline.saturating_duration_since(now);
    let timeout = shared.client.inner.timeout.min(remaining).max(MIN_TIMEOUT);
    let interval = shared.ttl / 3;
    let next = match shared.extend(ttl, timeout).await {
        Ok(_) if ttl < shared.ttl => {
            // That renewal asked for what was left of the maximum hold.
            stop_at_max_hold(shared);
            return;
        }
        Ok((_, sent)) => sent + interval,
        Err(Error::LeaseLost { .. }) => return,
        Err(Error::MaxHoldExceeded { .. }) => {
            stop_at_max_hold(shared);
            return;
        }
        Err(error) if error.is_transient() => {
            let left = shared
                .state()
                .deadline
                .saturating_duration_since(Instant::now());
            Instant::now() + RETRY_PAUSE.min(interval / 2).min(left)
        }
        Err(_) => {
            // A refusal that asking again will not change: let it run out.
            shared.state().next_renewal = None;
            return;
        }
    };
    let mut state = shared.state();
    if state.end.is_none() && state.next_renewal.is_some() {
        state.next_renewal = Some(next);
    }
}

/// No more renewals: the lease runs out at its deadline as `MaxHold`.
fn stop_at_max_hold(shared: &Shared) {
    let mut state = shared.state();
    state.next_renewal = None;
    state.at_max_hold = true;
}
