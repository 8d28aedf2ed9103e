//! The arguments of `watch` and `elect`: following a lock's changes, and
//! running a command only while this host leads.

use std::time::Duration;

use clap::Args;

use super::CmdArgs;
use crate::client::{Family, Watched};
use crate::duration;

/// `lockctl watch`.
#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Lock name (semaphore name with --semaphore; a name prefix with --prefix).
    pub name: String,
    /// Print each event as the broker's JSON, with its `type` and `id` added.
    #[arg(long)]
    pub json: bool,
    /// Watch every lock whose name starts with NAME (`""` for every lock).
    #[arg(long, conflicts_with = "semaphore")]
    pub prefix: bool,
    /// NAME is a semaphore: watch its permits.
    #[arg(long)]
    pub semaphore: bool,
}

impl WatchArgs {
    /// The stream these arguments ask for.
    pub fn watched(&self) -> Watched<'_> {
        match (self.prefix, self.semaphore) {
            (true, _) => Watched::Prefix(&self.name),
            (false, true) => Watched::Name(Family::Semaphores, &self.name),
            (false, false) => Watched::Name(Family::Locks, &self.name),
        }
    }
}

/// `lockctl elect`.
#[derive(Args, Debug)]
pub struct ElectArgs {
    /// Lock name: one leader at a time per name, fleet-wide.
    pub name: String,
    /// Lease TTL: a leader that stops renewing leads until this runs out.
    #[arg(long, value_parser = duration::parse, default_value = "10s")]
    pub ttl: Duration,
    /// After each term (CMD ended, or leadership lost), campaign again, until
    /// interrupted.
    #[arg(long)]
    pub again: bool,
    /// Holder name that followers see as the leader [default: HOST].
    #[arg(long)]
    pub owner: Option<String>,
    /// After a leader's lease expires unreleased, keep the lock unavailable
    /// this long before the next term.
    #[arg(long, value_parser = duration::parse)]
    pub lock_delay: Option<Duration>,
    #[command(flatten)]
    pub cmd: CmdArgs,
    /// Report campaigns, terms, renewal trouble and releases on stderr.
    #[arg(short, long)]
    pub verbose: bool,
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<Command, ErrorKind> {
        Cli::try_parse_from(std::iter::once("lockctl").chain(args.iter().copied()))
            .map(|cli| cli.command)
            .map_err(|error| error.kind())
    }

    fn watch(args: &[&str]) -> WatchArgs {
        match parse(args) {
            Ok(Command::Watch(watch)) => watch,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn elect(args: &[&str]) -> ElectArgs {
        match parse(args) {
            Ok(Command::Elect(elect)) => elect,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn watch_picks_one_lock_a_semaphore_or_a_prefix() {
        let one = watch(&["watch", "billing:42"]);
        assert_eq!(one.watched(), Watched::Name(Family::Locks, "billing:42"));
        assert!(!one.json);
        let semaphore = watch(&["watch", "etl", "--semaphore", "--json"]);
        assert_eq!(
            semaphore.watched(),
            Watched::Name(Family::Semaphores, "etl")
        );
        assert!(semaphore.json);
        let prefix = watch(&["watch", "--prefix", "billing:"]);
        assert_eq!(prefix.watched(), Watched::Prefix("billing:"));
        assert_eq!(
            watch(&["watch", "--prefix", ""]).watched(),
            Watched::Prefix("")
        );
    }

    #[test]
    fn watch_refuses_what_it_cannot_do() {
        assert_eq!(
            parse(&["watch", "x", "--prefix", "--semaphore"]).err(),
            Some(ErrorKind::ArgumentConflict)
        );
        assert_eq!(
            parse(&["watch"]).err(),
            Some(ErrorKind::MissingRequiredArgument)
        );
        // Output flags of the one-shot subcommands do not apply to a stream.
        assert_eq!(
            parse(&["watch", "x", "--field", "fence"]).err(),
            Some(ErrorKind::UnknownArgument)
        );
    }

    #[test]
    fn elect_defaults_and_flags() {
        let plain = elect(&["elect", "scheduler", "--", "run-scheduler"]);
        assert_eq!(plain.name, "scheduler");
        assert_eq!(plain.ttl, Duration::from_secs(10));
        assert!(!plain.again);
        assert_eq!(plain.owner, None);
        assert_eq!(plain.cmd.kill_after, Duration::from_secs(10));
        assert_eq!(plain.cmd.argv, ["run-scheduler"]);

        let full = elect(&[
            "elect",
            "scheduler",
            "--ttl",
            "3s",
            "--again",
            "--owner",
            "web-1",
            "--lock-delay",
            "1s",
            "-v",
            "--",
            "sh",
            "-c",
            "exec sched",
        ]);
        assert_eq!(full.ttl, Duration::from_secs(3));
        assert!(full.again && full.verbose);
        assert_eq!(full.owner.as_deref(), Some("web-1"));
        assert_eq!(full.lock_delay, Some(Duration::from_secs(1)));
        assert_eq!(full.cmd.argv, ["sh", "-c", "exec sched"]);
    }

    #[test]
    fn elect_needs_a_command_and_leaves_its_flags_to_it() {
        assert_eq!(
            parse(&["elect", "scheduler"]).err(),
            Some(ErrorKind::MissingRequiredArgument)
        );
        assert_eq!(
            parse(&["elect", "scheduler", "--ttl", "10", "--", "x"]).err(),
            Some(ErrorKind::ValueValidation)
        );
        // Only a lease that excludes every other makes a leader. (The flags
        // go before NAME here: after it, CMD takes values starting with `-`.)
        for flag in ["--shared", "--limit=2", "--max-hold=1h", "--wait=1m"] {
            assert_eq!(
                parse(&["elect", flag, "scheduler", "--", "x"]).err(),
                Some(ErrorKind::UnknownArgument),
                "{flag}"
            );
        }
        let passed_on = elect(&["elect", "s", "--", "cmd", "--again", "--ttl", "1s"]);
        assert!(!passed_on.again);
        assert_eq!(passed_on.cmd.argv, ["cmd", "--again", "--ttl", "1s"]);
    }
}
