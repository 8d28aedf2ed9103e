//! The command line: flags, environment variables and the help text (the
//! long texts are in [`help`]).

mod election;
mod help;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::client::LeaseKind;
use crate::duration;
use crate::exit;
pub use election::{ElectArgs, WatchArgs};
use help::{ABOUT, ELECT_ABOUT, LONG_ABOUT, RUN_ABOUT, WATCH_ABOUT};

/// `lockctl`: the broker's client for ops scripts and cron.
#[derive(Parser, Debug)]
#[command(name = "lockctl", version, about = ABOUT, long_about = LONG_ABOUT, after_help = exit::TABLE)]
pub struct Cli {
    /// Broker base URL.
    #[arg(
        long,
        global = true,
        env = "LOCKBROKER_URL",
        default_value = "http://127.0.0.1:7700"
    )]
    pub url: String,

    /// API key, sent as `Authorization: Bearer`. Prefer the environment or
    /// --api-key-file: command lines are visible to other users in `ps`.
    #[arg(
        long,
        global = true,
        env = "LOCKBROKER_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,

    /// Read the API key from this file (used over --api-key).
    #[arg(
        long,
        global = true,
        env = "LOCKBROKER_API_KEY_FILE",
        value_name = "FILE"
    )]
    pub api_key_file: Option<PathBuf>,

    /// For an https:// broker: trust the certificates in this PEM file in
    /// addition to the system's roots: a private CA, or a self-signed
    /// broker's own certificate (e.g. from `openssl req -x509`).
    #[arg(long, global = true, env = "LOCKBROKER_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Acquire a lease (or a semaphore permit, with --limit) and print it,
    /// token included (keep the token secret).
    Acquire(AcquireArgs),
    /// Renew a lease (a permit with --semaphore): its remaining TTL becomes --ttl.
    Extend(ExtendArgs),
    /// Release a lease (a permit with --semaphore), freeing it at once.
    Release(ReleaseArgs),
    /// Show who holds a lock (a semaphore with --semaphore) and the last
    /// fence issued (never a token).
    Status(StatusArgs),
    /// Run a command while holding a lease, renewing it, and release at the end.
    #[command(long_about = RUN_ABOUT)]
    Run(RunArgs),
    /// Print a lock's changes as they happen (every lock under a prefix with
    /// --prefix), until interrupted.
    #[command(long_about = WATCH_ABOUT)]
    Watch(WatchArgs),
    /// Run a command only while this host is the leader: the holder of the
    /// lock NAME, renewed while the command runs; the fence is the term.
    #[command(long_about = ELECT_ABOUT)]
    Elect(ElectArgs),
    /// The process `run` and `elect` put between themselves and the command
    /// (see the run::guard module); not for use by hand.
    #[command(name = "__guard", hide = true)]
    Guard(GuardArgs),
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

/// How to print an answer.
#[derive(Args, Debug)]
pub struct OutputArgs {
    /// Print the broker's JSON answer (errors too, as {"error": ...}).
    #[arg(long, conflicts_with = "field")]
    pub json: bool,
    /// Print only this field's value, e.g. fence or held.
    #[arg(long, value_name = "NAME")]
    pub field: Option<String>,
    /// Start each printed variable with this instead of LOCK_ (e.g. JOB_ gives
    /// JOB_TOKEN, JOB_FENCE).
    #[arg(long, value_name = "PREFIX", conflicts_with_all = ["json", "field"])]
    pub prefix: Option<String>,
    /// Print the bare field names of older releases (token=, fence=, name=),
    /// which `eval` may let overwrite a script's own variables.
    #[arg(long, conflicts_with_all = ["json", "field", "prefix"])]
    pub unprefixed: bool,
}

/// How to ask for a lease (shared by `acquire` and `run`).
#[derive(Args, Debug)]
pub struct LeaseArgs {
    /// Lease TTL: it expires this long after the last renewal.
    #[arg(long, value_parser = duration::parse, default_value = "30s")]
    pub ttl: Duration,
    /// Wait up to this long for a busy lock.
    #[arg(long, value_parser = duration::parse)]
    pub wait: Option<Duration>,
    /// Holder name shown in status and busy answers [default: HOST, or HOST:PID for run].
    #[arg(long)]
    pub owner: Option<String>,
    /// After this lease expires unreleased, keep the lock unavailable this long.
    #[arg(long, value_parser = duration::parse)]
    pub lock_delay: Option<Duration>,
    /// Wait in line: first come, first served (needs a broker that supports it).
    #[arg(long)]
    pub fair: bool,
    /// Take a shared lease: it coexists with the lock's other shared leases,
    /// while an exclusive lease (the default) excludes every other.
    #[arg(long, conflicts_with = "limit")]
    pub shared: bool,
    /// Take a permit of the semaphore NAME, which lets at most N holders in at
    /// once (N >= 1; while permits are held, every holder must ask with the same N).
    #[arg(long, value_name = "N", value_parser = parse_limit)]
    pub limit: Option<u64>,
}

/// Where the token comes from: --token-file, --token, or LOCKBROKER_TOKEN.
#[derive(Args, Debug)]
pub struct TokenArgs {
    /// The lease token. Prefer LOCKBROKER_TOKEN or --token-file: command lines
    /// are visible to other users in `ps`.
    #[arg(long, env = "LOCKBROKER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read the token from this file, `-` for stdin (used over --token).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// `lockctl acquire`.
#[derive(Args, Debug)]
pub struct AcquireArgs {
    /// Lock name (semaphore name with --limit): 1-200 of A-Z a-z 0-9 . _ - :
    pub name: String,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `lockctl extend`.
#[derive(Args, Debug)]
pub struct ExtendArgs {
    /// Lock name (semaphore name with --semaphore).
    pub name: String,
    /// New remaining TTL (replaces, does not add).
    #[arg(long, value_parser = duration::parse, default_value = "30s")]
    pub ttl: Duration,
    /// NAME is a semaphore: renew a permit taken with `acquire --limit`.
    #[arg(long)]
    pub semaphore: bool,
    #[command(flatten)]
    pub token: TokenArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `lockctl release`.
#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// Lock name (semaphore name with --semaphore).
    pub name: String,
    /// NAME is a semaphore: release a permit taken with `acquire --limit`.
    #[arg(long)]
    pub semaphore: bool,
    #[command(flatten)]
    pub token: TokenArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `lockctl status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Lock name (semaphore name with --semaphore).
    pub name: String,
    /// NAME is a semaphore: show its limit, the permits held and available.
    #[arg(long)]
    pub semaphore: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `lockctl run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Lock name (semaphore name with --limit).
    pub name: String,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// What to do if the lock is busy (after --wait, if given).
    #[arg(long, value_enum)]
    pub if_busy: Option<IfBusy>,
    /// Hold the lock at most this long: renewals stop there, and CMD is
    /// stopped then if still running (exit 80).
    #[arg(long, value_parser = duration::parse)]
    pub max_hold: Option<Duration>,
    /// After SIGTERM for a lost lease or --max-hold, or to what CMD left
    /// running when it exited, SIGKILL CMD's whole process tree this much later.
    #[arg(long, value_parser = duration::parse, default_value = "10s")]
    pub kill_after: Duration,
    /// Report acquire, renewal trouble and release on stderr.
    #[arg(short, long)]
    pub verbose: bool,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
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
    /// How long what the command leaves behind has between SIGTERM and SIGKILL.
    #[arg(long, value_parser = duration::parse)]
    pub kill_after: Duration,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

impl OutputArgs {
    /// The chosen [`crate::output::Format`], or why `--prefix` is unusable.
    pub fn format(&self) -> Result<crate::output::Format, String> {
        use crate::output::{check_prefix, Format, Names, DEFAULT_PREFIX};
        Ok(match (&self.field, self.json) {
            (Some(field), _) => Format::Field(field.clone()),
            (None, true) => Format::Json,
            (None, false) if self.unprefixed => Format::Plain(Names::Unprefixed),
            (None, false) => Format::Plain(Names::Prefixed(match &self.prefix {
                Some(prefix) => check_prefix(prefix)?,
                None => DEFAULT_PREFIX.to_owned(),
            })),
        })
    }
}

impl LeaseArgs {
    /// What to acquire: a permit with --limit, a shared lease with --shared,
    /// else an exclusive lease.
    pub fn kind(&self) -> LeaseKind {
        match (self.limit, self.shared) {
            (Some(limit), _) => LeaseKind::Permit { limit },
            (None, true) => LeaseKind::Shared,
            (None, false) => LeaseKind::Exclusive,
        }
    }
}

/// Parses `--limit`: a semaphore that lets nobody in could never be acquired,
/// so 0 is refused here rather than by the broker.
fn parse_limit(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("a semaphore's limit must be 1 or more".to_owned()),
        Ok(limit) => Ok(limit),
        Err(_) => Err(format!("{text:?} is not a number of holders (1 or more)")),
    }
}

impl TokenArgs {
    /// The token from --token-file, --token or LOCKBROKER_TOKEN, trimmed.
    pub fn read(&self) -> Result<String, String> {
        let token = match (&self.token_file, &self.token) {
            (Some(path), _) => read_secret(path)?,
            (None, Some(token)) => token.trim().to_owned(),
            (None, None) => String::new(),
        };
        if token.is_empty() {
            return Err("no token: set LOCKBROKER_TOKEN, or pass --token-file or --token".into());
        }
        Ok(token)
    }
}

/// Reads a secret from a file (or stdin for `-`), without its trailing newline.
/// The error names the file, never its contents.
pub fn read_secret(path: &std::path::Path) -> Result<String, String> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    };
    text.map(|t| t.trim().to_owned())
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("lockctl").chain(args.iter().copied()))
    }

    /// Why `args` were refused, or `None` if they were not.
    fn refusal(args: &[&str]) -> Option<ErrorKind> {
        parse(args).err().map(|error| error.kind())
    }

    fn lease_kind(args: &[&str]) -> LeaseKind {
        match parse(args).map(|cli| cli.command) {
            Ok(Command::Run(run)) => run.lease.kind(),
            Ok(Command::Acquire(acquire)) => acquire.lease.kind(),
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn the_definitions_hold_together() {
        Cli::command().debug_assert();
    }

    #[test]
    fn each_if_busy_value_says_what_it_does() {
        let help = |value: IfBusy| {
            value
                .to_possible_value()
                .and_then(|possible| possible.get_help().map(ToString::to_string))
                .unwrap_or_default()
        };
        assert!(
            help(IfBusy::Skip).contains("exit 0"),
            "{}",
            help(IfBusy::Skip)
        );
        assert!(help(IfBusy::Wait).contains("up to --wait, which this needs"));
        assert!(help(IfBusy::Fail).contains("The default without --wait"));
        assert_ne!(help(IfBusy::Wait), help(IfBusy::Fail));
    }

    #[test]
    fn a_lease_is_exclusive_unless_shared_or_limited() {
        assert_eq!(
            lease_kind(&["run", "job", "--", "true"]),
            LeaseKind::Exclusive
        );
        assert_eq!(
            lease_kind(&["run", "job", "--shared", "--", "true"]),
            LeaseKind::Shared
        );
        assert_eq!(
            lease_kind(&["run", "job", "--limit", "3", "--", "true"]),
            LeaseKind::Permit { limit: 3 }
        );
        assert_eq!(
            lease_kind(&["acquire", "job", "--shared"]),
            LeaseKind::Shared
        );
        assert_eq!(
            lease_kind(&["acquire", "job", "--limit=1"]),
            LeaseKind::Permit { limit: 1 }
        );
    }

    #[test]
    fn shared_and_limit_conflict() {
        for args in [
            &["run", "job", "--shared", "--limit", "3", "--", "true"][..],
            &["run", "job", "--limit", "3", "--shared", "--", "true"],
            &["acquire", "job", "--shared", "--limit", "2"],
        ] {
            assert_eq!(refusal(args), Some(ErrorKind::ArgumentConflict), "{args:?}");
        }
    }

    #[test]
    fn a_limit_below_one_or_not_a_number_is_refused() {
        for limit in ["0", "x", "1.5"] {
            let args = ["run", "job", "--limit", limit, "--", "true"];
            assert_eq!(
                refusal(&args),
                Some(ErrorKind::ValueValidation),
                "{limit:?}"
            );
        }
        assert_eq!(
            parse_limit("0"),
            Err("a semaphore's limit must be 1 or more".to_owned())
        );
        assert_eq!(parse_limit("10000"), Ok(10_000));
    }

    #[test]
    fn flags_after_the_separator_belong_to_the_command() {
        let Ok(Command::Run(run)) =
            parse(&["run", "job", "--", "cmd", "--limit", "3"]).map(|cli| cli.command)
        else {
            panic!("a run");
        };
        assert_eq!(run.lease.kind(), LeaseKind::Exclusive);
        assert_eq!(run.command, ["cmd", "--limit", "3"]);
    }

    #[test]
    fn semaphore_selects_the_semaphore_routes_for_the_other_subcommands() {
        let semaphore = |args: &[&str]| match parse(args).map(|cli| cli.command) {
            Ok(Command::Extend(args)) => args.semaphore,
            Ok(Command::Release(args)) => args.semaphore,
            Ok(Command::Status(args)) => args.semaphore,
            other => panic!("{args:?}: {other:?}"),
        };
        assert!(semaphore(&["status", "s", "--semaphore"]));
        assert!(!semaphore(&["status", "s"]));
        assert!(semaphore(&["extend", "s", "--semaphore", "--token", "t"]));
        assert!(semaphore(&["release", "s", "--semaphore", "--token", "t"]));
        // A permit is taken with --limit; --semaphore alone says no limit.
        assert_eq!(
            refusal(&["acquire", "s", "--semaphore"]),
            Some(ErrorKind::UnknownArgument)
        );
    }
}
