//! The command line: flags, environment variables and the help text (the
//! long texts are in [`help`]). The subcommands' arguments are split by
//! kind: one-shot calls in [`lease`], what starts a command in [`child`]
//! and [`election`].

mod child;
mod election;
mod help;
mod lease;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::exit;
pub use child::{CmdArgs, GuardArgs, IfBusy, RunArgs};
pub use election::{ElectArgs, WatchArgs};
use help::{ABOUT, ELECT_ABOUT, LONG_ABOUT, RUN_ABOUT, WATCH_ABOUT};
pub use lease::{
    read_secret, AcquireArgs, CheckArgs, ExtendArgs, LeaseArgs, ReleaseArgs, StatusArgs,
};

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
    /// Check a fence: exit 0 while a valid lease carries exactly FENCE, 1 if not.
    ///
    /// For a resource that keeps no state of its own: exit 0 while a valid
    /// lease (a permit with --semaphore) carries exactly FENCE, 1 when none
    /// does. The answer can be stale by the time you act: after a 0, act at
    /// once and for less than the expires_in_ms it printed.
    Check(CheckArgs),
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::error::ErrorKind;
    use clap::{CommandFactory, ValueEnum};

    use super::lease::parse_limit;
    use super::*;
    use crate::client::LeaseKind;

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
        assert_eq!(run.cmd.argv, ["cmd", "--limit", "3"]);
    }

    #[test]
    fn lock_adds_locks_in_order_but_not_to_a_semaphore_or_a_fair_wait() {
        let Ok(Command::Run(run)) = parse(&[
            "run",
            "ledger:a",
            "--lock",
            "ledger:b",
            "--lock=ledger:c",
            "--",
            "cmd",
            "--lock",
            "x",
        ])
        .map(|cli| cli.command) else {
            panic!("a run");
        };
        assert_eq!(run.names(), ["ledger:a", "ledger:b", "ledger:c"]);
        assert_eq!(run.cmd.argv, ["cmd", "--lock", "x"]);
        for args in [
            &["run", "a", "--lock", "b", "--limit", "3", "--", "true"][..],
            &["run", "a", "--fair", "--lock", "b", "--", "true"],
        ] {
            assert_eq!(refusal(args), Some(ErrorKind::ArgumentConflict), "{args:?}");
        }
        assert_eq!(
            lease_kind(&["run", "a", "--lock", "b", "--shared", "--", "true"]),
            LeaseKind::Shared
        );
    }

    /// The command a subcommand was given to start, if it starts one.
    fn cmd(command: Command) -> Option<CmdArgs> {
        match command {
            Command::Run(run) => Some(run.cmd),
            Command::Elect(elect) => Some(elect.cmd),
            Command::Guard(guard) => Some(guard.cmd),
            _ => None,
        }
    }

    #[test]
    fn run_elect_and_the_guard_take_the_command_the_same_way() {
        for before in [
            &["run", "job"][..],
            &["elect", "job"],
            &["__guard", "--parent", "1", "--report-fd", "3"],
        ] {
            let mut args = before.to_vec();
            args.extend(["--kill-after", "2s", "--", "cmd", "--kill-after", "-x"]);
            let given = cmd(parse(&args).expect("parses").command).expect("a command");
            assert_eq!(given.kill_after, Duration::from_secs(2), "{args:?}");
            assert_eq!(given.argv, ["cmd", "--kill-after", "-x"], "{args:?}");
            let mut bare = before.to_vec();
            bare.push("--");
            assert_eq!(
                refusal(&bare),
                Some(ErrorKind::MissingRequiredArgument),
                "{bare:?}"
            );
        }
        // The flags read the same in each subcommand's --help.
        let help = |sub: &str, id: &str| {
            let cli = Cli::command();
            let arg = cli
                .find_subcommand(sub)
                .and_then(|sub| sub.get_arguments().find(|arg| arg.get_id() == id).cloned());
            arg.and_then(|arg| arg.get_help().map(ToString::to_string))
        };
        for id in ["kill_after", "argv"] {
            assert!(help("run", id).is_some(), "{id}");
            assert_eq!(help("run", id), help("elect", id), "{id}");
            assert_eq!(help("run", id), help("__guard", id), "{id}");
        }
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
