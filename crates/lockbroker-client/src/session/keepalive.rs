//! The background task of one session: a keepalive every TTL / 3, each
//! success moving the deadline of the session and of every lease that was
//! under it when the keepalive was sent; the session is lost when a
//! keepalive answers `session_lost` or its local deadline passes.
//!
//! An unavailable broker is asked again after a short pause, never past the
//! deadline; any other refusal stops the keepalives and lets the session
//! run out. A lease the broker names as ended (an operator force-released
//! it, or it reached its maximum hold) is lost on its own, with
//! [`LostReason::LeaseLost`], when the name tells which lease it is; when a
//! keepalive renews fewer leases than are held, each is checked by its fence.

use std::sync::{Arc, Weak};
use std::time::Duration;

use lockbroker_api::SessionRenewalResponse;
use tokio::time::{sleep_until, Instant};

use super::{SessionEnd, SessionShared};
use crate::client::Family;
use crate::error::{Error, LostReason};
use crate::lease::{LeaseEnd, Shared};
// A keepalive is retried and timed as a lease's renewal is.
use crate::renew::{MIN_TIMEOUT, RETRY_PAUSE};

/// Runs until the session ends.
pub(super) async fn run(shared: Arc<SessionShared>) {
    loop {
        let (deadline, next) = {
            let state = shared.state();
            if state.end.is_some() {
                return;
            }
            (state.deadline, state.next_keepalive)
        };
        tokio::select! {
            () = shared.ended.cancelled() => return,
            () = shared.wake.notified() => {}
            () = sleep_until(deadline) => expire_if_due(&shared),
            () = sleep_until(next.unwrap_or(deadline)), if next.is_some() => {
                keep_once(&shared).await;
            }
        }
    }
}

/// The deadline passed: unless a keepalive moved it meanwhile, the session
/// is lost, and its leases with it.
fn expire_if_due(shared: &SessionShared) {
    {
        let state = shared.state();
        if state.end.is_some() || Instant::now() < state.deadline {
            return;
        }
    }
    shared.finish(SessionEnd::Lost(LostReason::Expired));
}

/// One keepalive and what it decides about the next.
async fn keep_once(shared: &SessionShared) {
    let (remaining, members) = {
        let state = shared.state();
        let remaining = state.deadline.saturating_duration_since(Instant::now());
        (remaining, state.leases.clone())
    };
    let timeout = shared.client.inner.timeout.min(remaining).max(MIN_TIMEOUT);
    let interval = shared.ttl / 3;
    let sent = Instant::now();
    let answer = (shared.client)
        .keep_token(&shared.id, &shared.token, timeout)
        .await;
    let next = match answer {
        Ok(kept) => {
            let interval = Duration::from_millis(kept.ttl_ms) / 3;
            let unaccounted = kept_alive(shared, &kept, sent, &members);
            check_each(&unaccounted).await;
            sent + interval
        }
        Err(Error::LeaseLost { .. }) => {
            // A close in flight says itself how the session ended.
            if !shared.state().closing {
                shared.finish(SessionEnd::Lost(LostReason::SessionLost));
            }
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
            shared.state().next_keepalive = None;
            return;
        }
    };
    let mut state = shared.state();
    if state.end.is_none() && state.next_keepalive.is_some() {
        state.next_keepalive = Some(next);
    }
}

/// A keepalive sent at `sent` succeeded: the session's deadline, and that
/// of each lease that was under it then (`members`), move to `sent` plus
/// the validity it answered; a lease it names as ended is lost.
///
/// Returns the leases to check on their own: when the broker renewed fewer
/// than are still held, an earlier answer that named an ended lease was
/// lost on its way, and the broker has forgotten that lease since, so no
/// answer will name it again: every one of them is checked then.
fn kept_alive(
    shared: &SessionShared,
    kept: &SessionRenewalResponse,
    sent: Instant,
    members: &[Weak<Shared>],
) -> Vec<Arc<Shared>> {
    let validity = Duration::from_millis(kept.validity_ms.min(kept.ttl_ms));
    {
        let mut state = shared.state();
        // Ended while the keepalive was in flight: it stays ended.
        if state.end.is_some() {
            return Vec::new();
        }
        state.deadline = sent + validity;
        state.expires_at_ms = kept.expires_at_ms;
    }
    let members: Vec<Arc<Shared>> = members.iter().filter_map(Weak::upgrade).collect();
    for ended in &kept.ended {
        let family = match ended.space.as_str() {
            "lock" => Family::Locks,
            "semaphore" => Family::Semaphores,
            _ => continue,
        };
        let mut named = (members.iter())
            .filter(|lease| lease.family == family && lease.name == ended.name)
            .filter(|lease| lease.state().end.is_none());
        // Two leases of one name (two shared ones) cannot be told apart:
        // the one still valid would be called lost. Neither is, then.
        if let (Some(lease), None) = (named.next(), named.next()) {
            if !lease.state().releasing {
                lease.finish(LeaseEnd::Lost(LostReason::LeaseLost));
            }
        }
    }
    let mut held = Vec::new();
    for lease in members {
        let mut state = lease.state();
        if state.end.is_none() {
            state.deadline = sent + validity;
            state.expires_at_ms = kept.expires_at_ms;
            state.last_sent = sent;
            if !state.releasing {
                drop(state);
                held.push(lease);
            }
        }
    }
    if kept.leases < held.len() as u64 {
        held
    } else {
        Vec::new()
    }
}

/// Checks the fence of each of `leases` on its own, and ends as lost those
/// whose fence is no longer current; a check the broker does not answer
/// decides nothing.
async fn check_each(leases: &[Arc<Shared>]) {
    for lease in leases {
        let checked = (lease.client)
            .fence_check(lease.family, &lease.name, lease.fence)
            .await;
        if let Ok(check) = checked {
            if !check.current && !lease.state().releasing {
                lease.finish(LeaseEnd::Lost(LostReason::LeaseLost));
            }
        }
    }
}
