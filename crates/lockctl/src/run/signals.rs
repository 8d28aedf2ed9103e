//! The signals `lockctl run` handles while it holds a lease.

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

/// SIGINT, SIGTERM and SIGHUP (passed on to the command) and SIGUSR1 (the
/// command released the lease itself).
pub struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    released: tokio::signal::unix::Signal,
}

impl Signals {
    /// Takes over the four signals from their default actions.
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            released: signal(SignalKind::user_defined1())?,
        })
    }

    /// The next signal: SIGINT, SIGTERM, SIGHUP, or SIGUSR1 ("released").
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
            _ = self.released.recv() => Signal::SIGUSR1,
        }
    }
}
