//! The guard: the process between lockctl and the command that makes the
//! command's whole process tree end with lockctl, and before the release.
//!
//! For each command it runs, lockctl starts itself again as the hidden
//! `lockctl __guard`. The guard asks for SIGTERM when lockctl dies (Linux's
//! parent-death signal; a fork does not inherit it, so it is set on a
//! process of lockctl's own rather than on the command), becomes the
//! subreaper of everything below it, and starts the command in a process
//! group of its own. It exits only once no descendant is left:
//! - the command exited: what it left behind gets SIGTERM, and SIGKILL
//!   after `--kill-after`, while lockctl keeps renewing the lease;
//! - SIGTERM (lockctl's SIGKILL-time, or lockctl died) or any other
//!   terminating signal: everything gets SIGKILL at once.
//!
//! lockctl forwards signals and stops the command by signalling its group
//! itself; from the guard it learns the group, a failure to start, and at
//! the end the command's wait status, over a pipe ([`Report`]). The guard
//! exits with the code lockctl would give for that status.

use std::fs::File;
use std::io::Write;
use std::os::fd::RawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use std::task::Poll;

use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;
use nix::unistd::{getppid, Pid};
use tokio::signal::unix::{self, SignalKind};

use super::tree;
use crate::cli::GuardArgs;
use crate::exit;

/// The name of the hidden subcommand.
pub const SUBCOMMAND: &str = "__guard";

/// The signals after which the guard ends the whole tree at once, rather
/// than die of them and leave it running.
const ENDING: [Signal; 6] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// What the guard tells lockctl, one line each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// The command runs, with this pid, which is also its process group.
    Started(Pid),
    /// The command could not be started: the exit code (126 or 127); the
    /// guard has said why on stderr.
    Failed(u8),
    /// The command's raw wait status; the last line, once no descendant is left.
    Exited(i32),
}

impl Report {
    fn line(self) -> String {
        match self {
            Self::Started(pid) => format!("started {pid}"),
            Self::Failed(code) => format!("failed {code}"),
            Self::Exited(raw) => format!("exited {raw}"),
        }
    }

    /// Reads one line of a report; `None` if it is not one.
    pub fn parse(line: &str) -> Option<Self> {
        let (word, value) = line.split_once(' ')?;
        match word {
            "started" => Some(Self::Started(Pid::from_raw(value.parse().ok()?))),
            "failed" => Some(Self::Failed(value.parse().ok()?)),
            "exited" => Some(Self::Exited(value.parse().ok()?)),
            _ => None,
        }
    }
}

/// `lockctl __guard --parent PID --report-fd N --kill-after D -- CMD...`
pub fn guard(args: &GuardArgs) -> u8 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(guard_command(args)),
        Err(error) => {
            eprintln!("lockctl: the command's guard cannot start: {error}");
            exit::SOFTWARE
        }
    }
}

async fn guard_command(args: &GuardArgs) -> u8 {
    // Caught before the parent-death signal can come. Caught, not blocked:
    // the command would inherit a blocked signal, but not a handler.
    let mut signals = match GuardSignals::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("lockctl: the command's guard cannot take its signals: {error}");
            return exit::SOFTWARE;
        }
    };
    if let Err(error) = follow_parent() {
        eprintln!("lockctl: the command's guard cannot follow lockctl: {error}");
        return exit::SOFTWARE;
    }
    // lockctl may have died before the parent-death signal was set: then
    // the guard has a new parent, and starts nothing.
    if getppid() != Pid::from_raw(args.parent) {
        return exit::SOFTWARE;
    }
    let mut report = Reporter::open(args.report_fd);
    let started = std::process::Command::new(&args.cmd.argv[0])
        .args(&args.cmd.argv[1..])
        .process_group(0)
        .spawn();
    let command = match started {
        Ok(child) => Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX)),
        Err(error) => {
            eprintln!(
                "lockctl: cannot run {}: {error}",
                args.cmd.argv[0].to_string_lossy()
            );
            let code = if error.kind() == std::io::ErrorKind::NotFound {
                exit::COMMAND_NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
            report.send(Report::Failed(code));
            return code;
        }
    };
    report.send(Report::Started(command));
    let Some(status) = watch(command, args.cmd.kill_after, &mut signals).await else {
        return exit::SOFTWARE;
    };
    report.send(Report::Exited(raw(status)));
    match status {
        WaitStatus::Exited(_, code) => u8::try_from(code & 0xff).unwrap_or(exit::SOFTWARE),
        WaitStatus::Signaled(_, signal, _) => {
            u8::try_from(128 + signal as i32).unwrap_or(exit::SOFTWARE)
        }
        _ => exit::SOFTWARE,
    }
}

/// Waits for the command and every descendant to be gone, ending them as
/// the module says; answers the command's wait status.
async fn watch(
    command: Pid,
    kill_after: Duration,
    signals: &mut GuardSignals,
) -> Option<WaitStatus> {
    // The command leads its own process group.
    let group = command;
    let mut status = None;
    let mut kill_at = None;
    let GuardSignals { child, ending } = signals;
    loop {
        tokio::select! {
            _ = child.recv() => {
                let left = tree::reap_exited(command, group, &mut status);
                if status.is_none() {
                    continue;
                }
                if !left {
                    return status;
                }
                if kill_at.is_none() {
                    tree::signal_all(group, Signal::SIGTERM);
                    kill_at = Some(tokio::time::Instant::now() + kill_after);
                }
            }
            () = sleep_until(kill_at) => break,
            () = any_of(ending) => break,
        }
    }
    tree::kill_all(command, group, &mut status);
    status
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The signals the guard takes: SIGCHLD, and those it would die of.
struct GuardSignals {
    /// SIGCHLD: a child exited.
    child: unix::Signal,
    /// The [`ENDING`] signals.
    ending: Vec<unix::Signal>,
}

impl GuardSignals {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            child: unix::signal(SignalKind::child())?,
            ending: ENDING
                .into_iter()
                .map(|signal| unix::signal(SignalKind::from_raw(signal as i32)))
                .collect::<std::io::Result<_>>()?,
        })
    }
}

/// The next signal of any of `signals`.
async fn any_of(signals: &mut [unix::Signal]) {
    std::future::poll_fn(|context| {
        for signal in signals.iter_mut() {
            if signal.poll_recv(context).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    })
    .await;
}

/// The raw wait status `status` stands for, as `ExitStatus::from_raw` reads it.
fn raw(status: WaitStatus) -> i32 {
    match status {
        WaitStatus::Exited(_, code) => (code & 0xff) << 8,
        WaitStatus::Signaled(_, signal, core_dumped) => {
            signal as i32 | if core_dumped { 0x80 } else { 0 }
        }
        _ => 0,
    }
}

/// SIGTERM when lockctl dies, and the orphans of the tree handed here.
#[cfg(target_os = "linux")]
fn follow_parent() -> nix::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)?;
    nix::sys::prctl::set_child_subreaper(true)
}

/// Elsewhere no parent-death signal exists: the guard still ends the
/// command's group when lockctl asks or the command exits.
#[cfg(not(target_os = "linux"))]
fn follow_parent() -> nix::Result<()> {
    Ok(())
}

/// The write end of lockctl's report pipe.
struct Reporter(Option<File>);

impl Reporter {
    /// Reopens the inherited descriptor `fd` (a reopened file is closed when
    /// the command starts) and closes `fd` itself, which the command would
    /// inherit. Non-blocking: with lockctl gone, a write fails at once.
    fn open(fd: RawFd) -> Self {
        if fd <= 2 {
            return Self(None);
        }
        #[cfg(target_os = "linux")]
        let path = format!("/proc/self/fd/{fd}");
        #[cfg(not(target_os = "linux"))]
        let path = format!("/dev/fd/{fd}");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)
            .ok();
        let _ = nix::unistd::close(fd);
        Self(file)
    }

    fn send(&mut self, report: Report) {
        if let Some(file) = &mut self.0 {
            let _ = writeln!(file, "{}", report.line());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use super::*;

    #[test]
    fn a_report_reads_back_as_written() {
        for report in [
            Report::Started(Pid::from_raw(4242)),
            Report::Failed(127),
            Report::Exited(3 << 8),
        ] {
            assert_eq!(Report::parse(&report.line()), Some(report));
        }
        assert_eq!(Report::parse("started"), None);
        assert_eq!(Report::parse("exited x"), None);
        assert_eq!(Report::parse("stopped 1"), None);
    }

    #[test]
    fn the_raw_status_is_the_one_the_command_ended_with() {
        let pid = Pid::from_raw(1);
        let exited = ExitStatus::from_raw(raw(WaitStatus::Exited(pid, 3)));
        assert_eq!((exited.code(), exited.signal()), (Some(3), None));
        let killed = ExitStatus::from_raw(raw(WaitStatus::Signaled(pid, Signal::SIGKILL, false)));
        assert_eq!((killed.code(), killed.signal()), (None, Some(9)));
        let dumped = ExitStatus::from_raw(raw(WaitStatus::Signaled(pid, Signal::SIGSEGV, true)));
        assert_eq!(dumped.signal(), Some(11));
        assert!(dumped.core_dumped());
    }
}
