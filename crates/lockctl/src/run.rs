//! `lockctl run`: hold a lease for exactly as long as a command runs.
//!
//! One task drives everything from a single `select!`: the command's exit,
//! signals to forward, the next renewal and its answer, the moment the lease
//! would run out by the local monotonic clock, and the SIGKILL deadline once
//! the command is being stopped. The lease's local deadline is counted from
//! when the request that set it was *sent*, so it never outlasts the broker's.

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::pin::Pin;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

use crate::cli::{IfBusy, RunArgs};
use crate::client::{Broker, BrokerError, Granted};
use crate::commands::{host_name, lease_options, usage};
use crate::duration::millis;
use crate::exit;

/// How long to wait, after a renewal found the lease gone, for the command's
/// own "I released it" (SIGUSR1) that may have raced the renewal.
const RELEASED_BY_COMMAND_GRACE: Duration = Duration::from_millis(300);
/// Budget for the final release.
const RELEASE_BUDGET: Duration = Duration::from_secs(5);

/// Why lockctl stopped the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopReason {
    /// The lease was lost or could not be renewed in time.
    LeaseLost,
    /// Max hold reached and the lease ran out.
    MaxHold,
}

/// `lockctl run NAME ... -- CMD ARGS...`
pub async fn run(broker: &Broker, args: RunArgs) -> u8 {
    let if_busy = match (args.if_busy, args.lease.wait) {
        (Some(IfBusy::Wait), None) => {
            return usage("--if-busy wait needs --wait: how long to wait for the lock")
        }
        (Some(mode), _) => mode,
        (None, Some(_)) => IfBusy::Wait,
        (None, None) => IfBusy::Fail,
    };
    if args.lease.ttl < Duration::from_millis(30) {
        return usage("--ttl is too short to renew in time; use at least 30ms");
    }
    if args.max_hold == Some(Duration::ZERO) {
        return usage("--max-hold must be above 0");
    }
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("lockctl: cannot handle signals: {error}");
            return exit::SOFTWARE;
        }
    };
    let mut options = lease_options(
        &args.lease,
        format!("{}:{}", host_name(), std::process::id()),
    );
    if let Some(max_hold) = args.max_hold {
        options.ttl = options.ttl.min(max_hold);
    }

    let acquiring = broker.acquire(&args.name, &options);
    tokio::pin!(acquiring);
    let granted = loop {
        tokio::select! {
            granted = &mut acquiring => break granted,
            signal = signals.recv() => if signal != Signal::SIGUSR1 {
                eprintln!("lockctl: {signal} while acquiring {:?}; command not run", args.name);
                return signal_exit_code(signal);
            },
        }
    };
    let granted = match granted {
        Ok(granted) => granted,
        Err(error) if error.code() == "lock_busy" => {
            if if_busy == IfBusy::Skip {
                if args.verbose {
                    eprintln!("lockctl: {error}; skipped");
                }
                return exit::OK;
            }
            eprintln!("lockctl: {error}");
            return exit::BUSY;
        }
        Err(error) => {
            eprintln!("lockctl: {error}");
            return error.exit_code();
        }
    };
    let Some(lease) = Lease::from_granted(&granted, options.ttl) else {
        eprintln!("lockctl: unexpected answer: the acquire answer lacks token, fence or ttl_ms");
        return exit::SOFTWARE;
    };
    if args.verbose {
        eprintln!(
            "lockctl: acquired {:?} with fence {}, ttl {} ms",
            args.name,
            lease.fence,
            millis(lease.ttl)
        );
    }

    let mut supervisor = Supervisor::new(broker, &args, lease, granted.sent);
    let (pgid, exited) = match supervisor.spawn(&args.command) {
        Ok(child) => child,
        Err(error) => {
            eprintln!(
                "lockctl: cannot run {}: {error}",
                args.command[0].to_string_lossy()
            );
            supervisor.release_quietly().await;
            return if error.kind() == std::io::ErrorKind::NotFound {
                exit::COMMAND_NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
        }
    };
    let status = supervisor.supervise(pgid, exited, &mut signals).await;
    supervisor.finish(status).await
}

/// The lease being held.
struct Lease {
    token: String,
    fence: u64,
    ttl: Duration,
}

impl Lease {
    fn from_granted(granted: &Granted, asked: Duration) -> Option<Self> {
        let body = &granted.body;
        Some(Self {
            token: body.get("token")?.as_str()?.to_owned(),
            fence: body.get("fence")?.as_u64()?,
            ttl: body
                .get("ttl_ms")
                .and_then(Value::as_u64)
                .map_or(asked, Duration::from_millis),
        })
    }
}

/// A renewal in flight: when it was sent, the TTL it asked for, its answer.
type Renewal<'a> =
    Pin<Box<dyn Future<Output = (Instant, Duration, Result<Value, BrokerError>)> + 'a>>;

/// The state of one run.
struct Supervisor<'a> {
    broker: &'a Broker,
    name: String,
    lease: Lease,
    verbose: bool,
    kill_after: Duration,
    /// A tenth of the TTL: the command is stopped this long before the lease
    /// would run out by the local clock.
    margin: Duration,
    /// Acquisition time plus --max-hold.
    hold_until: Option<Instant>,
    /// When to send the next renewal; `None` once renewing has stopped.
    renew_at: Option<Instant>,
    /// When to stop the command unless a renewal succeeds first.
    stop_at: Option<Instant>,
    /// What running out means now: lost (renewals failing) or max hold.
    running_out: StopReason,
    /// Set once the command is being stopped.
    stopping: Option<StopReason>,
    /// When to SIGKILL the process group while stopping.
    kill_at: Option<Instant>,
    /// The command released the lease itself (told us with SIGUSR1).
    released_by_command: bool,
    /// Renewals have been failing since this report.
    failing: bool,
}

impl<'a> Supervisor<'a> {
    fn new(broker: &'a Broker, args: &RunArgs, lease: Lease, sent: Instant) -> Self {
        let margin = lease.ttl / 10;
        Self {
            broker,
            name: args.name.clone(),
            verbose: args.verbose,
            kill_after: args.kill_after,
            margin,
            hold_until: args.max_hold.map(|hold| sent + hold),
            renew_at: Some(sent + lease.ttl / 3),
            stop_at: Some(sent + lease.ttl - margin),
            running_out: StopReason::LeaseLost,
            stopping: None,
            kill_at: None,
            released_by_command: false,
            failing: false,
            lease,
        }
    }

    /// Starts the command in its own process group, with the lease in its
    /// environment; answers the group id and a receiver for its exit status.
    fn spawn(&self, command: &[OsString]) -> std::io::Result<(Pid, Exited)> {
        let mut child = std::process::Command::new(&command[0])
            .args(&command[1..])
            .env("LOCKBROKER_LOCK", &self.name)
            .env("LOCKBROKER_FENCE", self.lease.fence.to_string())
            .env("LOCKBROKER_TOKEN", &self.lease.token)
            .env("LOCKBROKER_URL", self.broker.base())
            .env("LOCKBROKER_RUN_PID", std::process::id().to_string())
            .process_group(0)
            .spawn()?;
        let pgid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let (tx, rx) = oneshot::channel();
        // std's blocking wait on a thread of its own keeps tokio's features lean.
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        Ok((pgid, rx))
    }

    /// Runs until the command exits; answers its exit status.
    async fn supervise(
        &mut self,
        pgid: Pid,
        mut exited: Exited,
        signals: &mut Signals,
    ) -> std::io::Result<ExitStatus> {
        let mut renewal: Option<Renewal<'a>> = None;
        loop {
            tokio::select! {
                biased;
                status = &mut exited => {
                    return status.unwrap_or_else(|_| Err(std::io::Error::other("wait thread ended")));
                }
                signal = signals.recv() => self.on_signal(signal, pgid),
                outcome = poll_renewal(renewal.as_mut()) => {
                    renewal = None;
                    self.on_renewal(outcome, pgid, signals).await;
                }
                () = sleep_until(self.renew_at), if renewal.is_none() && self.stopping.is_none() => {
                    self.renew_at = None;
                    renewal = self.renew();
                }
                () = sleep_until(self.stop_at), if self.stopping.is_none() => {
                    let reason = self.running_out;
                    self.begin_stop(reason, pgid);
                }
                () = sleep_until(self.kill_at) => {
                    self.kill_at = None;
                    eprintln!("lockctl: command still running {} ms after SIGTERM; sending SIGKILL",
                        millis(self.kill_after));
                    let _ = killpg(pgid, Signal::SIGKILL);
                }
            }
        }
    }

    /// Starts a renewal, or stops renewing once max hold is reached.
    fn renew(&mut self) -> Option<Renewal<'a>> {
        let now = Instant::now();
        let mut ttl = self.lease.ttl;
        if let Some(hold_until) = self.hold_until {
            let allowed = hold_until.saturating_duration_since(now);
            if allowed < Duration::from_millis(1) {
                self.reached_max_hold("--max-hold");
                return None;
            }
            ttl = ttl.min(allowed);
        }
        let broker = self.broker;
        let (name, token) = (self.name.clone(), self.lease.token.clone());
        let timeout =
            (self.lease.ttl / 5).clamp(Duration::from_millis(250), Duration::from_secs(10));
        Some(Box::pin(async move {
            let sent = Instant::now();
            let result = broker.extend(&name, &token, ttl, timeout).await;
            (sent, ttl, result)
        }))
    }

    async fn on_renewal(
        &mut self,
        (sent, asked, result): (Instant, Duration, Result<Value, BrokerError>),
        pgid: Pid,
        signals: &mut Signals,
    ) {
        if self.stopping.is_some() || self.released_by_command {
            return;
        }
        match result {
            Ok(body) => {
                let ttl = body
                    .get("ttl_ms")
                    .and_then(Value::as_u64)
                    .map_or(asked, Duration::from_millis);
                self.stop_at = Some(sent + ttl.saturating_sub(self.margin));
                if self.failing {
                    self.failing = false;
                    eprintln!("lockctl: renewed the lease on {:?} again", self.name);
                }
                if asked < self.lease.ttl {
                    // Shortened to end at --max-hold: this was the last renewal.
                    self.reached_max_hold("--max-hold");
                } else {
                    self.renew_at = Some(sent + self.lease.ttl / 3);
                }
            }
            Err(error) if error.code() == "lease_lost" => {
                if self.wait_for_own_release(pgid, signals).await {
                    return;
                }
                eprintln!("lockctl: {error}");
                self.begin_stop(StopReason::LeaseLost, pgid);
            }
            Err(error) if error.code() == "max_hold_exceeded" => {
                if let Some(left) = error.detail_u64("expires_in_ms") {
                    let broker_says = Instant::now() + Duration::from_millis(left);
                    self.stop_at = self
                        .stop_at
                        .map(|at| at.min(broker_says.checked_sub(self.margin).unwrap_or(at)));
                }
                self.reached_max_hold("the broker's max hold");
            }
            Err(error) => {
                let now = Instant::now();
                if !self.failing {
                    self.failing = true;
                    let left = self
                        .stop_at
                        .map_or(0, |at| millis(at.saturating_duration_since(now)));
                    eprintln!(
                        "lockctl: cannot renew the lease on {:?}: {error}; retrying, the command \
                         is stopped in {left} ms unless a renewal succeeds",
                        self.name
                    );
                }
                let retry =
                    (self.lease.ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
                self.renew_at = Some(now + retry);
            }
        }
    }

    /// After a renewal found the lease gone: was it the command's own release?
    async fn wait_for_own_release(&mut self, pgid: Pid, signals: &mut Signals) -> bool {
        let deadline = tokio::time::Instant::now() + RELEASED_BY_COMMAND_GRACE;
        while !self.released_by_command {
            match tokio::time::timeout_at(deadline, signals.recv()).await {
                Ok(signal) => self.on_signal(signal, pgid),
                Err(_) => break,
            }
        }
        self.released_by_command
    }

    fn reached_max_hold(&mut self, which: &str) {
        self.renew_at = None;
        self.running_out = StopReason::MaxHold;
        let left = self
            .stop_at
            .map_or(0, |at| millis(at.saturating_duration_since(Instant::now())));
        eprintln!(
            "lockctl: {which} reached for {:?}: no more renewals; the command is stopped in \
             {left} ms if still running",
            self.name
        );
    }

    fn on_signal(&mut self, signal: Signal, pgid: Pid) {
        if signal == Signal::SIGUSR1 {
            if !self.released_by_command && self.verbose {
                eprintln!(
                    "lockctl: the command released {:?} itself; no more renewals",
                    self.name
                );
            }
            self.released_by_command = true;
            self.renew_at = None;
            self.stop_at = None;
            return;
        }
        if self.verbose {
            eprintln!("lockctl: passing {signal} on to the command");
        }
        let _ = killpg(pgid, signal);
    }

    fn begin_stop(&mut self, reason: StopReason, pgid: Pid) {
        if self.stopping.is_some() {
            return;
        }
        let why = match reason {
            StopReason::LeaseLost if self.failing => {
                "the lease could not be renewed before it would expire"
            }
            StopReason::LeaseLost => "the lease was lost",
            StopReason::MaxHold => "the lease reached its max hold and is running out",
        };
        eprintln!(
            "lockctl: {why}; stopping the command (SIGTERM, SIGKILL after {} ms); \
             treat its work as possibly duplicated",
            millis(self.kill_after)
        );
        self.stopping = Some(reason);
        self.renew_at = None;
        self.stop_at = None;
        self.kill_at = Some(Instant::now() + self.kill_after);
        let _ = killpg(pgid, Signal::SIGTERM);
    }

    /// After the command ended: release, and choose the exit code.
    async fn finish(&self, status: std::io::Result<ExitStatus>) -> u8 {
        let code = match status {
            Ok(status) => status_exit_code(status),
            Err(error) => {
                eprintln!("lockctl: lost track of the command: {error}");
                exit::SOFTWARE
            }
        };
        if let Some(reason) = self.stopping {
            self.release_quietly().await;
            eprintln!("lockctl: the command was stopped (exit status {code})");
            return match reason {
                StopReason::LeaseLost => exit::LEASE_LOST,
                StopReason::MaxHold => exit::MAX_HOLD,
            };
        }
        if self.released_by_command {
            return code;
        }
        match self.release().await {
            Ok(()) => {
                if self.verbose {
                    eprintln!("lockctl: released {:?}", self.name);
                }
                code
            }
            Err(error) if error.code() == "lease_lost" => {
                eprintln!("lockctl: the command exited with {code}, but {error}");
                exit::LEASE_LOST
            }
            Err(error) => {
                eprintln!(
                    "lockctl: could not release {:?} ({error}); it expires on its own within {} ms",
                    self.name,
                    millis(self.lease.ttl)
                );
                code
            }
        }
    }

    /// Releases, retrying transient failures within [`RELEASE_BUDGET`]; a
    /// retried release of a lease already released still answers success.
    async fn release(&self) -> Result<(), BrokerError> {
        let deadline = Instant::now() + RELEASE_BUDGET;
        let mut pause = Duration::from_millis(100);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout = left.max(Duration::from_millis(100));
            match self
                .broker
                .release(&self.name, &self.lease.token, timeout)
                .await
            {
                Ok(_) => return Ok(()),
                Err(error) if error.is_transient() && Instant::now() + pause < deadline => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// One release attempt whose outcome does not matter (the lease may be
    /// gone already); it frees the lock early if it is not.
    async fn release_quietly(&self) {
        let _ = self
            .broker
            .release(&self.name, &self.lease.token, Duration::from_secs(2))
            .await;
    }
}

/// Where the command's exit status arrives.
type Exited = oneshot::Receiver<std::io::Result<ExitStatus>>;

async fn poll_renewal<'a>(
    renewal: Option<&mut Renewal<'a>>,
) -> (Instant, Duration, Result<Value, BrokerError>) {
    match renewal {
        Some(renewal) => renewal.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The shell's convention: the exit code, or 128+N for signal N.
fn status_exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::SOFTWARE),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(exit::SOFTWARE),
        (None, None) => exit::SOFTWARE,
    }
}

fn signal_exit_code(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(exit::SOFTWARE)
}

/// The signals lockctl handles while it runs a command.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    released: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            released: signal(SignalKind::user_defined1())?,
        })
    }

    /// The next signal: SIGINT, SIGTERM, SIGHUP, or SIGUSR1 ("released").
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
            _ = self.released.recv() => Signal::SIGUSR1,
        }
    }
}
