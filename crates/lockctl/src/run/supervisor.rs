//! The lease's clock while the command runs: when to renew, when to stop the
//! command, and why.
//!
//! One task drives everything from a single `select!`: the command's exit,
//! signals to forward, the next renewal and its answer, the moment the lease
//! would run out by the local monotonic clock, and the SIGKILL deadline once
//! the command is being stopped. The lease's local deadline is counted from
//! when the request that set it was *sent*, so it never outlasts the broker's.
//!
//! A run over several locks (`run --lock`) holds several leases taken at once
//! under one session: a renewal is then the session's keepalive (see
//! [`super::session`]), and the session's deadline is theirs. A lost session,
//! or a lost lease among them, stops the command as a single lost lease does.
//! Against a broker without sessions they are renewed together, one request
//! each sent side by side, and share one deadline, set only by a round in
//! which every renewal succeeded.

mod round;
mod stopping;

use std::future::Future;
use std::pin::Pin;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::oneshot;

use super::process::Running;
use super::session::{self, Session};
use super::signals::Signals;
use crate::client::{Broker, BrokerError, Family, LeaseKind};
use crate::duration::millis;

/// Why lockctl stops the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The lease was lost or could not be renewed in time.
    LeaseLost,
    /// `--max-hold` was reached.
    MaxHold,
    /// The broker's max hold ended the renewals and the lease ran out.
    BrokerMaxHold,
}

/// What a renewal's answer meant.
pub enum Renewed {
    /// Renewed; the deadlines moved on.
    Yes,
    /// The broker's max hold: no more renewals, the deadline stands.
    AtBrokerMaxHold,
    /// The lease is gone.
    Lost(BrokerError),
    /// No answer, or "not now": retry soon.
    Failed(BrokerError),
}

/// What one round of renewals answered: when it was sent, the TTL it asked
/// for, and the answer that counts (the first failure, if any; otherwise a
/// success with the shortest TTL granted), with the lock it is about.
pub struct Answer {
    pub sent: Instant,
    pub asked: Duration,
    /// The lock whose answer `result` is: the first one on success.
    pub lock: String,
    pub result: Result<Value, BrokerError>,
}

/// A round of renewals in flight.
pub type Renewal<'a> = Pin<Box<dyn Future<Output = Answer> + 'a>>;

/// One lease the run holds.
#[derive(Clone, Debug)]
pub struct Lease {
    pub name: String,
    pub token: String,
    pub fence: u64,
}

/// Where the command's exit status arrives.
pub type Exited = oneshot::Receiver<std::io::Result<ExitStatus>>;

/// The lease being held and the clock that goes with it.
pub struct Supervisor<'a> {
    pub broker: &'a Broker,
    /// What is held: it picks the routes renewals and the release go to.
    pub kind: LeaseKind,
    /// NAME's lease first, then those of `--lock` in the order given.
    pub leases: Vec<Lease>,
    /// The TTL each renewal asks for.
    pub ttl: Duration,
    pub verbose: bool,
    pub kill_after: Duration,
    /// The session the leases are held under; renewals keep it alive.
    pub session: Option<Session>,
    /// A tenth of the TTL: the command is stopped this long before the lease
    /// would run out by the local clock.
    margin: Duration,
    /// `--max-hold`, and when it is reached.
    max_hold: Option<(Duration, Instant)>,
    /// When to send the next renewal; `None` once renewing has stopped.
    renew_at: Option<Instant>,
    /// When to stop the command unless a renewal succeeds first.
    pub stop_at: Option<Instant>,
    /// What reaching `stop_at` means now.
    running_out: StopReason,
    /// Set once the command is being stopped.
    pub stopping: Option<StopReason>,
    /// When to SIGKILL the process group while stopping.
    kill_at: Option<Instant>,
    /// The command released the lease itself (told us with SIGUSR1).
    pub released_by_command: bool,
    /// Renewals have been failing since this report.
    failing: bool,
    /// The lock whose renewal failed or found its lease lost, last.
    trouble: Option<String>,
    /// The API key id that force-released the lease, when a renewal was
    /// told so: the stop line names it instead of a plain "lost".
    forced_by: Option<String>,
    /// The command has been started.
    pub running: bool,
    /// lockctl received SIGINT, SIGTERM or SIGHUP (and passed it on).
    pub interrupted: bool,
}

/// What [`Supervisor::new`] needs beyond the broker.
pub struct Held {
    pub kind: LeaseKind,
    /// At least one; NAME's first.
    pub leases: Vec<Lease>,
    /// The TTL each renewal asks for.
    pub ttl: Duration,
    pub verbose: bool,
    pub kill_after: Duration,
    /// `--max-hold`, counted from `acquired`.
    pub max_hold: Option<Duration>,
    /// When lockctl learned it holds the lease.
    pub acquired: Instant,
    /// The session the leases were taken under, if any.
    pub session: Option<Session>,
}

impl<'a> Supervisor<'a> {
    /// A supervisor for a lease granted at `acquired`, with no deadline yet:
    /// call [`Self::set_deadline`] with the request that bounds the lease.
    pub fn new(broker: &'a Broker, held: Held) -> Self {
        Self {
            broker,
            kind: held.kind,
            leases: held.leases,
            ttl: held.ttl,
            verbose: held.verbose,
            kill_after: held.kill_after,
            session: held.session,
            margin: held.ttl / 10,
            max_hold: held.max_hold.map(|hold| (hold, held.acquired + hold)),
            renew_at: None,
            stop_at: None,
            running_out: StopReason::LeaseLost,
            stopping: None,
            kill_at: None,
            forced_by: None,
            released_by_command: false,
            failing: false,
            trouble: None,
            running: false,
            interrupted: false,
        }
    }

    /// The routes of the lease: the lock's, or the semaphore's for a permit.
    pub fn family(&self) -> Family {
        self.kind.family()
    }

    /// NAME's lease, which the command's LOCKBROKER_LOCK, _FENCE and _TOKEN
    /// describe.
    pub fn first(&self) -> &Lease {
        &self.leases[0]
    }

    /// Whether the run holds several leases (`run --lock`).
    pub fn several(&self) -> bool {
        self.leases.len() > 1
    }

    /// What is held, for messages: `"a"`, or `"a" and "b"` for several.
    pub fn shown(&self) -> String {
        let names: Vec<&str> = self
            .leases
            .iter()
            .map(|lease| lease.name.as_str())
            .collect();
        super::leases::shown(&names)
    }

    /// The lease a message is about: "the lease", or with several "the
    /// lease on NAME" for the one in trouble, or their session.
    fn the_lease(&self) -> String {
        match &self.trouble {
            Some(lock) if self.several() => self.about(lock),
            _ => "the lease".to_owned(),
        }
    }

    /// What an answer about `lock` is about: its lease, or with `""` the
    /// session of the run's leases.
    fn about(&self, lock: &str) -> String {
        match lock {
            "" => format!("the session of {}", self.shown()),
            lock => format!("the lease on {lock:?}"),
        }
    }

    /// A request sent at `sent` left the lease with `ttl` to live: stop the
    /// command a margin before that, or at `--max-hold` if that comes first
    /// (then this was the last renewal).
    pub fn set_deadline(&mut self, sent: Instant, ttl: Duration) {
        let by_lease = sent + ttl.saturating_sub(self.margin);
        match self.max_hold {
            Some((hold, hold_until)) if by_lease >= hold_until => {
                self.stop_at = Some(hold_until);
                self.running_out = StopReason::MaxHold;
                self.renew_at = None;
                if self.verbose {
                    let left = millis(hold_until.saturating_duration_since(Instant::now()));
                    eprintln!(
                        "lockctl: no more renewals for {}: its --max-hold of {} ms is reached \
                         in {left} ms, and the command is stopped then if still running",
                        self.shown(),
                        millis(hold)
                    );
                }
            }
            _ => {
                self.stop_at = Some(by_lease);
                self.running_out = StopReason::LeaseLost;
                self.renew_at = Some(sent + self.ttl / 3);
            }
        }
    }

    /// Starts a renewal. Under `--max-hold`, a renewal that would run past it
    /// is shortened to end a margin after it, so the command can be stopped
    /// right at the max hold with its lease still valid.
    pub fn renew(&mut self) -> Option<Renewal<'a>> {
        let now = Instant::now();
        let mut ttl = self.ttl;
        if let Some((_, hold_until)) = self.max_hold {
            if now >= hold_until {
                self.renew_at = None;
                return None;
            }
            // Whole milliseconds, rounded up, as the broker counts them: a
            // renewal that fits must end at the max hold, not a hair before.
            let fits = (hold_until + self.margin - now).as_micros().div_ceil(1_000);
            ttl = ttl.min(Duration::from_millis(
                u64::try_from(fits).unwrap_or(u64::MAX),
            ));
        }
        let (broker, family) = (self.broker, self.family());
        let leases = self.leases.clone();
        let timeout = (self.ttl / 5).clamp(Duration::from_millis(250), Duration::from_secs(10));
        if let Some(session) = &self.session {
            // A keepalive gives the session's TTL: a shorter `ttl` only
            // bounds the deadline it sets.
            return Some(session::keepalive(
                broker,
                session.clone(),
                leases,
                ttl,
                timeout,
            ));
        }
        Some(Box::pin(async move {
            let sent = Instant::now();
            let renewals = leases
                .iter()
                .map(|lease| broker.extend(family, &lease.name, &lease.token, ttl, timeout));
            let results = futures_util::future::join_all(renewals).await;
            let names = leases.into_iter().map(|lease| lease.name);
            let (lock, result) = round::what_counts(names.zip(results).collect());
            Answer {
                sent,
                asked: ttl,
                lock,
                result,
            }
        }))
    }

    /// Applies a renewal's answer to the deadlines.
    pub fn apply(&mut self, answer: Answer) -> Renewed {
        let Answer {
            sent,
            asked,
            lock,
            result,
        } = answer;
        if result.is_err() {
            self.trouble = Some(lock.clone());
        }
        match result {
            Ok(body) => {
                let ttl = body
                    .get("ttl_ms")
                    .and_then(Value::as_u64)
                    .map_or(asked, |ms| asked.min(Duration::from_millis(ms)));
                if self.failing {
                    self.failing = false;
                    let leases = if self.several() { "leases" } else { "lease" };
                    eprintln!("lockctl: renewed the {leases} on {} again", self.shown());
                }
                self.set_deadline(sent, ttl);
                Renewed::Yes
            }
            Err(error) if matches!(error.code(), "lease_lost" | "session_lost") => {
                self.forced_by = error.detail_str("force_released_by").map(str::to_owned);
                Renewed::Lost(error)
            }
            Err(error) if error.code() == "max_hold_exceeded" => {
                // The broker answered after `sent` with the time left then,
                // so the lease lasts at least until `sent` plus that.
                let left = error.detail_u64("expires_in_ms").map(Duration::from_millis);
                if let Some(left) = left {
                    let by_broker = sent + left.saturating_sub(self.margin);
                    self.stop_at = Some(self.stop_at.map_or(by_broker, |at| at.min(by_broker)));
                }
                self.renew_at = None;
                self.running_out = StopReason::BrokerMaxHold;
                let left = self
                    .stop_at
                    .map_or(0, |at| millis(at.saturating_duration_since(Instant::now())));
                let what = match lock.as_str() {
                    "" => format!("the session of {}", self.shown()),
                    lock => format!("{lock:?}"),
                };
                eprintln!(
                    "lockctl: the broker's max hold for {what} is reached: no more renewals; \
                     the command is stopped in {left} ms, as the lease runs out, if still running"
                );
                Renewed::AtBrokerMaxHold
            }
            Err(error) => {
                let now = Instant::now();
                if !self.failing {
                    self.failing = true;
                    let left = self
                        .stop_at
                        .map_or(0, |at| millis(at.saturating_duration_since(now)));
                    let then = if self.running {
                        "the command is stopped"
                    } else {
                        "lockctl gives up without running the command"
                    };
                    eprintln!(
                        "lockctl: cannot renew {}: {error}; retrying, and unless a renewal \
                         succeeds within {left} ms {then}",
                        self.about(&lock)
                    );
                }
                let retry =
                    (self.ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
                self.renew_at = Some(now + retry);
                Renewed::Failed(error)
            }
        }
    }

    /// Runs until the command exits; answers its exit status.
    pub async fn supervise(
        &mut self,
        running: &Running,
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
                signal = signals.recv() => self.on_signal(signal, running),
                outcome = poll_renewal(renewal.as_mut()) => {
                    renewal = None;
                    if self.stopping.is_none() && !self.released_by_command {
                        if let Renewed::Lost(error) = self.apply(outcome) {
                            if !self.wait_for_own_release(running, signals).await {
                                eprintln!("lockctl: {error}");
                                self.begin_stop(StopReason::LeaseLost, running);
                            }
                        }
                    }
                }
                () = sleep_until(self.renew_at), if renewal.is_none() && self.stopping.is_none() => {
                    self.renew_at = None;
                    renewal = self.renew();
                }
                () = sleep_until(self.stop_at), if self.stopping.is_none() => {
                    let reason = self.running_out;
                    self.begin_stop(reason, running);
                }
                () = sleep_until(self.kill_at) => {
                    self.kill_at = None;
                    eprintln!("lockctl: command still running {} ms after SIGTERM; sending SIGKILL",
                        millis(self.kill_after));
                    running.kill();
                }
            }
        }
    }
}

/// The next renewal's answer, or never if none is in flight.
pub async fn poll_renewal<'a>(renewal: Option<&mut Renewal<'a>>) -> Answer {
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
