//! `lockctl run`: hold a lease for exactly as long as a command runs.
//!
//! This module takes the lease, makes sure its local deadline is bounded by
//! a request sent after the grant, starts the command, and at the end
//! releases and picks the exit code; [`supervisor`] keeps the lease while
//! the command runs. An exclusive lease, a shared one (`--shared`) and a
//! semaphore permit (`--limit`) are held the same way; only the acquire body
//! and the routes differ (see [`crate::client::LeaseKind`]). [`elect`]
//! holds each term of a leader the same way, through [`hold`]. The command
//! runs under a [`guard`] process ([`process`]) that ends its whole tree
//! ([`tree`]) with lockctl, and before the lease is released.
//!
//! `run NAME --lock NAME2 ...` holds several locks for the whole run under one
//! [`session`]: one acquire-all takes a lease on each or on none under it,
//! the supervisor keeps the session alive (one keepalive for all of them),
//! and its close gives them back at the end. NAME's lease is the one
//! LOCKBROKER_LOCK, _FENCE and _TOKEN describe, as for a single lock.

pub mod elect;
pub mod guard;
mod leases;
mod process;
mod release;
mod session;
mod signals;
mod supervisor;
mod tree;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::cli::{IfBusy, RunArgs};
use crate::client::{AcquireOptions, Broker, Granted, LeaseKind};
use crate::commands::{host_name, lease_options, usage};
use crate::duration::millis;
use crate::exit;
use process::Running;
use release::{release, release_quietly};
use session::Session;
use signals::Signals;
use supervisor::{Exited, Held, Renewed, StopReason, Supervisor};

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
    let names = args.names();
    if let Some(twice) = names
        .iter()
        .enumerate()
        .find_map(|(at, name)| names[..at].contains(name).then_some(name))
    {
        return usage(&format!("{twice:?} is named twice; name each lock once"));
    }
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("lockctl: cannot handle signals: {error}");
            return exit::SOFTWARE;
        }
    };
    let ttl = args.lease.ttl;
    let mut options = lease_options(
        &args.lease,
        format!("{}:{}", host_name(), std::process::id()),
    );
    if let Some(max_hold) = args.max_hold {
        // No longer than needed to stop the command at the max hold.
        options.ttl = ttl.min(max_hold + ttl / 10);
    }

    // Several locks are held under one session, its TTL the leases'.
    let session = match names.len() {
        1 => None,
        _ => match session::open(broker, &options).await {
            Ok(session) => session,
            Err(error) => {
                eprintln!(
                    "lockctl: cannot open a session for {}: {error}",
                    leases::shown(&names)
                );
                return error.exit_code();
            }
        },
    };
    if let (Some(session), true) = (&session, args.verbose) {
        eprintln!(
            "lockctl: opened session {} for {}",
            session.id,
            leases::shown(&names)
        );
    }
    options.session = session.as_ref().map(|session| session.token.clone());
    let acquiring = async {
        match names.as_slice() {
            [name] => broker.acquire(name, &options).await,
            several => {
                let acquire_all = broker.acquire_all(several, &options);
                session::kept_while(broker, session.as_ref(), options.ttl, acquire_all).await
            }
        }
    };
    tokio::pin!(acquiring);
    let granted = loop {
        tokio::select! {
            granted = &mut acquiring => break granted,
            signal = signals.recv() => if signal != Signal::SIGUSR1 {
                eprintln!("lockctl: {signal} while acquiring {}; command not run", leases::shown(&names));
                session::close_quietly(broker, session.as_ref()).await;
                return signal_exit_code(signal);
            },
        }
    };
    if granted.is_err() {
        session::close_quietly(broker, session.as_ref()).await;
    }
    let granted = match granted {
        Ok(granted) => granted,
        Err(error) if error.is_busy() => {
            // With several locks, the broker names the one in the way.
            let busy = match error.detail_str("lock") {
                Some(lock) if names.len() > 1 => format!("{lock:?} is busy: {error}"),
                _ => error.to_string(),
            };
            if if_busy == IfBusy::Skip {
                if args.verbose {
                    eprintln!("lockctl: {busy}; skipped");
                }
                return exit::OK;
            }
            eprintln!("lockctl: {busy}");
            return exit::BUSY;
        }
        Err(error) => {
            eprintln!("lockctl: {error}");
            return error.exit_code();
        }
    };
    let plan = Plan {
        names: &names,
        command: &args.cmd.argv,
        ttl,
        max_hold: args.max_hold,
        kill_after: args.cmd.kill_after,
        verbose: args.verbose,
        session: session.as_ref(),
    };
    hold(broker, &options, &plan, &granted, &mut signals)
        .await
        .code
}

/// How a granted lease is held: for `run`, and for each term of `elect`.
struct Plan<'p> {
    /// The locks, NAME first; one for `elect`.
    names: &'p [String],
    /// The command and its arguments.
    command: &'p [OsString],
    /// The TTL each renewal asks for.
    ttl: Duration,
    max_hold: Option<Duration>,
    kill_after: Duration,
    verbose: bool,
    /// The session the leases were taken under, if any.
    session: Option<&'p Session>,
}

/// How holding a lease ended.
struct Ended {
    /// The exit code of `lockctl run`.
    code: u8,
    /// lockctl received SIGINT, SIGTERM or SIGHUP meanwhile.
    interrupted: bool,
    /// Trying again would fail the same way: the command cannot be
    /// started, or the grant is not understood.
    fatal: bool,
}

impl Ended {
    /// The end of holding the lease `supervisor` kept.
    fn after(supervisor: &Supervisor<'_>, code: u8, fatal: bool) -> Self {
        Self {
            code,
            interrupted: supervisor.interrupted,
            fatal,
        }
    }
}

/// Holds a granted lease: bounds its deadline, starts the command, keeps
/// the lease while it runs, and at the end releases and picks the exit code.
async fn hold(
    broker: &Broker,
    options: &AcquireOptions,
    plan: &Plan<'_>,
    granted: &Granted,
    signals: &mut Signals,
) -> Ended {
    let Some((leases, granted_ms)) = leases::granted(&granted.body, plan.names) else {
        eprintln!("lockctl: unexpected answer: the acquire answer lacks token or fence");
        return Ended {
            code: exit::SOFTWARE,
            interrupted: false,
            fatal: true,
        };
    };
    let granted_ttl =
        granted_ms.map_or(options.ttl, |ms| options.ttl.min(Duration::from_millis(ms)));
    if plan.verbose {
        let fences: Vec<String> = leases
            .iter()
            .map(|lease| {
                format!(
                    "{} with fence {}",
                    describe(options.kind, &lease.name),
                    lease.fence
                )
            })
            .collect();
        eprintln!(
            "lockctl: acquired {}, ttl {} ms",
            fences.join(", "),
            millis(granted_ttl)
        );
    }
    // --max-hold counts from the request that bounds the lease: the acquire
    // itself, or after a long wait the moment the grant arrived.
    let late = answered_late(granted, granted_ttl);
    let acquired = if late { granted.received } else { granted.sent };
    let mut supervisor = Supervisor::new(
        broker,
        Held {
            kind: options.kind,
            leases,
            ttl: plan.ttl,
            verbose: plan.verbose,
            kill_after: plan.kill_after,
            max_hold: plan.max_hold,
            acquired,
            session: plan.session.cloned(),
        },
    );
    if let Err(code) = bound_the_lease(&mut supervisor, granted, granted_ttl, signals).await {
        return Ended::after(&supervisor, code, false);
    }

    let (running, exited) = match spawn(&supervisor, plan.command, plan.kill_after) {
        Ok(started) => started,
        Err(code) => {
            release_quietly(&supervisor).await;
            return Ended::after(&supervisor, code, true);
        }
    };
    supervisor.running = true;
    let status = supervisor.supervise(&running, exited, signals).await;
    if let Some(code) = running.not_started() {
        release_quietly(&supervisor).await;
        return Ended::after(&supervisor, code, true);
    }
    let code = finish(&supervisor, status).await;
    Ended::after(&supervisor, code, false)
}

/// Sets the lease's first local deadline. It must come from a request sent
/// after the broker granted the lease; the acquire's own send time bounds it
/// only when the answer came back soon. After a long wait (an answer later
/// than a third of the TTL, when the first renewal would be due), the lease
/// is renewed before the command starts and the deadline taken from that
/// renewal: counted from the acquire, a fresh lease would look expired.
/// On failure, answers the exit code (the command is not run).
async fn bound_the_lease(
    supervisor: &mut Supervisor<'_>,
    granted: &Granted,
    ttl: Duration,
    signals: &mut Signals,
) -> Result<(), u8> {
    if !answered_late(granted, ttl) {
        supervisor.set_deadline(granted.sent, ttl);
        return Ok(());
    }
    // The lease began at the latest when its answer arrived: renewals are
    // pointless after it would have expired counted from there.
    supervisor.stop_at = Some(granted.received + ttl - ttl / 10);
    loop {
        let Some(mut renewal) = supervisor.renew() else {
            eprintln!(
                "lockctl: --max-hold for {} ran out while waiting; command not run",
                supervisor.shown()
            );
            release_quietly(supervisor).await;
            return Err(exit::MAX_HOLD);
        };
        let outcome = loop {
            tokio::select! {
                outcome = &mut renewal => break outcome,
                signal = signals.recv() => if signal != Signal::SIGUSR1 {
                    eprintln!("lockctl: {signal} after acquiring {}; command not run", supervisor.shown());
                    supervisor.interrupted = true;
                    release_quietly(supervisor).await;
                    return Err(signal_exit_code(signal));
                },
            }
        };
        let give_up = supervisor.stop_at;
        match supervisor.apply(outcome) {
            Renewed::Yes | Renewed::AtBrokerMaxHold => return Ok(()),
            Renewed::Lost(error) => {
                eprintln!("lockctl: {error}; command not run");
                return Err(exit::LEASE_LOST);
            }
            Renewed::Failed(error) if give_up.is_none_or(|at| Instant::now() >= at) => {
                eprintln!(
                    "lockctl: could not renew {} after acquiring it ({error}); command not run",
                    supervisor.shown()
                );
                release_quietly(supervisor).await;
                return Err(error.exit_code());
            }
            Renewed::Failed(_) => {
                let retry = (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
                tokio::time::sleep(retry).await;
            }
        }
    }
}

/// Whether the grant arrived after its first renewal would be due.
fn answered_late(granted: &Granted, ttl: Duration) -> bool {
    granted.received >= granted.sent + ttl / 3
}

/// What the run holds, for messages.
fn describe(kind: LeaseKind, name: &str) -> String {
    match kind {
        LeaseKind::Exclusive => format!("{name:?}"),
        LeaseKind::Shared => format!("a shared lease on {name:?}"),
        LeaseKind::Permit { limit } => format!("a permit of semaphore {name:?} (limit {limit})"),
    }
}

/// Starts the command under its guard, with the lease in its environment;
/// answers the handle to signal it by and a receiver for its exit status,
/// or the exit code if the guard did not start.
///
/// LOCKBROKER_LIMIT is set exactly when the run holds a permit (and removed
/// otherwise, so that one inherited from an enclosing run does not stay):
/// `lockctl release` inside the command reads it to pick the routes.
/// LOCKBROKER_SESSION, the id of the session the leases are held under, is
/// set exactly when there is one.
fn spawn(
    supervisor: &Supervisor<'_>,
    command: &[OsString],
    kill_after: Duration,
) -> Result<(Running, Exited), u8> {
    let first = supervisor.first();
    process::start(command, kill_after, |process| {
        process
            .env("LOCKBROKER_LOCK", &first.name)
            .env("LOCKBROKER_FENCE", first.fence.to_string())
            .env("LOCKBROKER_TOKEN", &first.token)
            .env("LOCKBROKER_URL", supervisor.broker.base())
            .env("LOCKBROKER_RUN_PID", std::process::id().to_string());
        leases::export(process, &supervisor.leases);
        match &supervisor.session {
            Some(session) => process.env("LOCKBROKER_SESSION", &session.id),
            None => process.env_remove("LOCKBROKER_SESSION"),
        };
        match supervisor.kind {
            LeaseKind::Permit { limit } => process.env("LOCKBROKER_LIMIT", limit.to_string()),
            LeaseKind::Exclusive | LeaseKind::Shared => process.env_remove("LOCKBROKER_LIMIT"),
        };
    })
}

/// After the command ended: release, and choose the exit code.
async fn finish(supervisor: &Supervisor<'_>, status: std::io::Result<ExitStatus>) -> u8 {
    let code = match status {
        Ok(status) => status_exit_code(status),
        Err(error) => {
            eprintln!("lockctl: lost track of the command: {error}");
            exit::SOFTWARE
        }
    };
    if let Some(reason) = supervisor.stopping {
        release_quietly(supervisor).await;
        eprintln!("lockctl: the command was stopped (exit status {code})");
        return match reason {
            StopReason::LeaseLost => exit::LEASE_LOST,
            StopReason::MaxHold | StopReason::BrokerMaxHold => exit::MAX_HOLD,
        };
    }
    if supervisor.released_by_command {
        // With several, the command gave back one lease: the rest go now.
        if supervisor.several() {
            release_quietly(supervisor).await;
        }
        return code;
    }
    match release(supervisor).await {
        Ok(()) => {
            if supervisor.verbose {
                eprintln!("lockctl: released {}", supervisor.shown());
            }
            code
        }
        Err(error) if matches!(error.code(), "lease_lost" | "session_lost") => {
            eprintln!("lockctl: the command exited with {code}, but {error}");
            exit::LEASE_LOST
        }
        Err(error) => {
            eprintln!(
                "lockctl: could not release {} ({error}); it expires on its own within {} ms",
                supervisor.shown(),
                millis(supervisor.ttl)
            );
            code
        }
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
