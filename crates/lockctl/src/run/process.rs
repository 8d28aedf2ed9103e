//! Starting the command under its [`guard`](super::guard), and the handle
//! lockctl signals it by.
//!
//! The guard's exit is the command's end: it exits only once the command
//! and every process it left are gone, so the lease is released only then.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::{getpid, pipe2, Pid};
use tokio::sync::oneshot;

use super::guard::{Report, SUBCOMMAND};
use super::supervisor::Exited;
use super::tree;
use crate::duration::millis;
use crate::exit;

/// How long a signal for the command waits for the guard to report its
/// group; the report comes within milliseconds of the guard's start.
const REPORT_WAIT: Duration = Duration::from_secs(2);

/// The running command, as lockctl signals it.
pub struct Running {
    /// The guard process.
    guard: Pid,
    /// The guard's first report, once it came (`None`: it ended without one).
    first: Arc<OnceLock<Option<Report>>>,
}

impl Running {
    /// Sends `signal` to the command's process group.
    pub fn signal(&self, signal: Signal) {
        if let Some(group) = self.group() {
            let _ = killpg(group, signal);
        }
    }

    /// Ends the command's whole tree at once: the guard SIGKILLs its group
    /// and every descendant, and exits when they are gone.
    pub fn kill(&self) {
        let _ = kill(self.guard, Signal::SIGTERM);
    }

    /// After the guard ended: the exit code if it never started the command.
    pub fn not_started(&self) -> Option<u8> {
        match self.first.get() {
            Some(Some(Report::Failed(code))) => Some(*code),
            Some(Some(Report::Started(_))) => None,
            Some(_) | None => Some(exit::SOFTWARE),
        }
    }

    /// The command's process group (the command's own pid). lockctl goes on
    /// renewing while the guard starts, so a signal may come before the
    /// guard has reported: that one waits for the report.
    fn group(&self) -> Option<Pid> {
        let deadline = Instant::now() + REPORT_WAIT;
        loop {
            match self.first.get() {
                Some(Some(Report::Started(group))) => return Some(*group),
                Some(_) => return None,
                None if Instant::now() >= deadline => return None,
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
}

/// Starts `command` under a guard; `configure` sets its environment. On
/// failure, answers the exit code, having said why on stderr; a command the
/// guard cannot start is told by [`Running::not_started`] once it ended.
pub fn start(
    command: &[OsString],
    kill_after: Duration,
    configure: impl FnOnce(&mut Command),
) -> Result<(Running, Exited), u8> {
    let cannot = |error: &dyn std::fmt::Display| {
        eprintln!("lockctl: cannot start the command's guard: {error}");
        exit::SOFTWARE
    };
    become_subreaper();
    // The write end alone is inherited by the guard, which reopens it.
    let (report, write) = pipe2(OFlag::O_CLOEXEC).map_err(|error| cannot(&error))?;
    fcntl(&write, FcntlArg::F_SETFD(FdFlag::empty())).map_err(|error| cannot(&error))?;
    let mut guard = Command::new(guard_program().map_err(|error| cannot(&error))?);
    guard
        .arg0(
            std::env::args_os()
                .next()
                .unwrap_or_else(|| "lockctl".into()),
        )
        .arg(SUBCOMMAND)
        .arg("--parent")
        .arg(getpid().to_string())
        .arg("--report-fd")
        .arg(write.as_raw_fd().to_string())
        .arg("--kill-after")
        .arg(format!("{}ms", millis(kill_after)))
        .arg("--")
        .args(command)
        // Its own group: a terminal's ^C goes to lockctl, which passes it on.
        .process_group(0);
    configure(&mut guard);
    let child = guard.spawn().map_err(|error| cannot(&error))?;
    drop(write);

    let guard = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let first = Arc::new(OnceLock::new());
    let (exited_tx, exited) = oneshot::channel();
    // std's blocking reads and wait on a thread of its own keep tokio's features lean.
    let reported = Arc::clone(&first);
    std::thread::spawn(move || follow(child, report, &reported, exited_tx));
    Ok((Running { guard, first }, exited))
}

/// Reads the guard's report and waits for it: its first line goes to
/// `first`, the command's status at the end to `exited`.
fn follow(
    mut guard: Child,
    report: OwnedFd,
    first: &OnceLock<Option<Report>>,
    exited: oneshot::Sender<std::io::Result<ExitStatus>>,
) {
    let mut lines = BufReader::new(File::from(report))
        .lines()
        .map_while(Result::ok)
        .map(|line| Report::parse(&line));
    let report = lines.next().flatten();
    let _ = first.set(report);
    let Some(Report::Started(group)) = report else {
        let _ = guard.wait();
        if report.is_none() {
            eprintln!("lockctl: the command's guard ended before starting the command");
        }
        let _ = exited.send(Err(std::io::Error::other("the command was not started")));
        return;
    };
    let last = lines.last().flatten();
    let waited = guard.wait();
    let outcome = if let Some(Report::Exited(raw)) = last {
        Ok(ExitStatus::from_raw(raw))
    } else {
        // The guard was killed before the tree was gone: end it from here,
        // where its orphans came.
        tree::kill_all(group, group, &mut None);
        let how = waited.map_or_else(|error| error.to_string(), |status| status.to_string());
        Err(std::io::Error::other(format!(
            "its guard ended first ({how}); the command was killed"
        )))
    };
    let _ = exited.send(outcome);
}

/// The program the guard runs: lockctl itself. On Linux through
/// /proc/self/exe, which still works if the binary was replaced meanwhile.
fn guard_program() -> std::io::Result<std::path::PathBuf> {
    if cfg!(target_os = "linux") {
        Ok("/proc/self/exe".into())
    } else {
        std::env::current_exe()
    }
}

/// Makes lockctl the subreaper of the tree, so that if its guard is killed
/// the orphans come here to be ended (see [`follow`]).
fn become_subreaper() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_child_subreaper(true);
}
