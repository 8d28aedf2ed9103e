//! Stopping the command: a signal passed on or taken as the command's own
//! release, and SIGTERM then SIGKILL once the lease is lost, runs out or
//! reaches a max hold, with what lockctl tells the operator.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{StopReason, Supervisor};
use crate::duration::millis;
use crate::run::process::Running;
use crate::run::signals::Signals;

/// How long to wait, after a renewal found the lease gone, for the command's
/// own "I released it" (SIGUSR1) that may have raced the renewal.
const RELEASED_BY_COMMAND_GRACE: Duration = Duration::from_millis(300);

impl Supervisor<'_> {
    /// After a renewal found the lease gone: was it the command's own release?
    pub(super) async fn wait_for_own_release(
        &mut self,
        running: &Running,
        signals: &mut Signals,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + RELEASED_BY_COMMAND_GRACE;
        while !self.released_by_command {
            match tokio::time::timeout_at(deadline, signals.recv()).await {
                Ok(signal) => self.on_signal(signal, running),
                Err(_) => break,
            }
        }
        self.released_by_command
    }

    pub(super) fn on_signal(&mut self, signal: Signal, running: &Running) {
        if signal == Signal::SIGUSR1 {
            if !self.released_by_command && self.verbose {
                if self.several() {
                    eprintln!(
                        "lockctl: the command released one of its leases itself; no more \
                         renewals for {}",
                        self.shown()
                    );
                } else {
                    eprintln!(
                        "lockctl: the command released {:?} itself; no more renewals",
                        self.first().name
                    );
                }
            }
            self.released_by_command = true;
            self.renew_at = None;
            self.stop_at = None;
            return;
        }
        self.interrupted = true;
        if self.verbose {
            eprintln!("lockctl: passing {signal} on to the command");
        }
        running.signal(signal);
    }

    pub(super) fn begin_stop(&mut self, reason: StopReason, running: &Running) {
        if self.stopping.is_some() {
            return;
        }
        let signals = format!("SIGTERM, SIGKILL after {} ms", millis(self.kill_after));
        let duplicated = "treat its work as possibly duplicated";
        let lease = self.the_lease();
        match reason {
            StopReason::LeaseLost if self.failing => eprintln!(
                "lockctl: {lease} could not be renewed before it would expire; stopping the \
                 command ({signals}); {duplicated}"
            ),
            StopReason::LeaseLost => match &self.forced_by {
                Some(id) => eprintln!(
                    "lockctl: an operator force-released {lease} (key id {id:?}); stopping the \
                     command ({signals}); {duplicated}"
                ),
                None => eprintln!(
                    "lockctl: {lease} was lost; stopping the command ({signals}); {duplicated}"
                ),
            },
            StopReason::MaxHold => eprintln!(
                "lockctl: --max-hold reached: {} has been held for {} ms; stopping the command \
                 ({signals})",
                self.shown(),
                self.max_hold.map_or(0, |(hold, _)| millis(hold))
            ),
            StopReason::BrokerMaxHold => eprintln!(
                "lockctl: {lease} reached the broker's max hold and is running out; stopping \
                 the command ({signals})"
            ),
        }
        self.stopping = Some(reason);
        self.renew_at = None;
        self.stop_at = None;
        self.kill_at = Some(Instant::now() + self.kill_after);
        running.signal(Signal::SIGTERM);
    }
}
