//! The arguments of the subcommands that start a command: `run`, the hidden
//! `__guard` between lockctl and the command, and (in [`super::election`])
//! `elect`. The command itself and its SIGKILL grace are one [`CmdArgs`]
//! that all three flatten, so they parse and read the same everywhere.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::LeaseArgs;
use crate::duration;

/// The command to run and how it is stopped: shared by `run`, `elect` and
/// `__guard`, which passes on what `run` and `elect` were given.
#[derive(Args, Debug)]
pub struct CmdArgs {
    /// How long CMD's whole process tree has between SIGTERM and SIGKILL:
    /// when CMD is stopped (its lease lost or its time up), and for what it
    /// left running when it exited.
    #[arg(long, value_parser = duration::parse, default_value = "10s")]
    pub kill_after: Duration,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub argv: Vec<OsString>,
}

/// What `run` does when the lock is busy.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfBusy {
    /// Do not run CMD and exit 0, saying nothing (with -v, why): for cron,
    /// "another instance is running". With --wait, only once that wait ran out.
    Skip,
    /// Wait for the lock up to --wait, which this needs; if it is still busy
    /// then, do not run CMD and exit 75. The default when --wait is given.
    Wait,
    /// Do not run CMD and exit 75. The default without --wait; given --wait
    /// too, it waits first, as wait does (wait only insists on a --wait).
    Fail,
}

/// `lockctl run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Lock name (semaphore name with --limit).
    pub name: String,
    /// Hold this lock too, for the whole run (repeatable): NAME and every
    /// --lock are taken in one acquire-all, all of them or none (see below).
    #[arg(long = "lock", value_name = "NAME", conflicts_with_all = ["limit", "fair"])]
    pub locks: Vec<String>,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// What to do if the lock is busy (after --wait, if given).
    #[arg(long, value_enum)]
    pub if_busy: Option<IfBusy>,
    /// Hold the lock at most this long: renewals stop there, and CMD is
    /// stopped then if still running (exit 80).
    #[arg(long, value_parser = duration::parse)]
    pub max_hold: Option<Duration>,
    #[command(flatten)]
    pub cmd: CmdArgs,
    /// Report acquire, renewal trouble and release on stderr.
    #[arg(short, long)]
    pub verbose: bool,
}

impl RunArgs {
    /// Every lock the run holds: NAME, then each --lock in the order given.
    pub fn names(&self) -> Vec<String> {
        std::iter::once(&self.name)
            .chain(&self.locks)
            .cloned()
            .collect()
    }
}

/// `lockctl __guard`, started by `run` and `elect` only.
#[derive(Args, Debug)]
pub struct GuardArgs {
    /// The lockctl that started the guard: if it is not the guard's parent
    /// (it died already), the command is not started.
    #[arg(long)]
    pub parent: i32,
    /// The inherited write end of the pipe the guard reports on.
    #[arg(long)]
    pub report_fd: i32,
    #[command(flatten)]
    pub cmd: CmdArgs,
}
