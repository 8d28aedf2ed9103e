//! Telling expiries: each lease a stream watches ends with an `expired`
//! event when its TTL passes without an extend or a release, by this
//! broker's own timer (no store round trip).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use super::EventHub;

/// How long the task sleeps at most, to notice that its hub is gone.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Sleeps until the first watched expiry, tells it, and again, for as long
/// as anything but this task holds the hub.
pub(super) async fn tell_expiries(hub: Weak<EventHub>) {
    let Some(hub) = hub.upgrade() else {
        return;
    };
    while Arc::strong_count(&hub) > 1 {
        let changed = hub.expiries_changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let first = hub.lock().deadlines.keys().next().map(|(at, _)| *at);
        let wake_at = first.unwrap_or_else(|| Instant::now() + IDLE_CHECK);
        tokio::select! {
            () = sleep_until(wake_at.min(Instant::now() + IDLE_CHECK)) => expire_due(&hub),
            () = &mut changed => {}
        }
    }
}

/// Ends every watched lease whose expiry has passed.
fn expire_due(hub: &EventHub) {
    let now = Instant::now();
    let mut state = hub.lock();
    while let Some((&at, _)) = state.deadlines.first_key_value() {
        if at.0 > now {
            break;
        }
        let Some(key) = state.deadlines.remove(&at) else {
            break;
        };
        let Some(known) = state.leases.remove(&key) else {
            continue;
        };
        let (name, fence) = key;
        hub.emit(&mut state, known.expired(name, fence));
    }
}
