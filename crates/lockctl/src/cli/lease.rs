//! The arguments of the one-shot subcommands (`acquire`, `extend`, `release`,
//! `status`) and the parts `run` shares with them: how to ask for a lease,
//! where its token comes from, and how to print an answer.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::client::LeaseKind;
use crate::duration;

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

/// `lockctl check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Lock name (semaphore name with --semaphore).
    pub name: String,
    /// The fence a request carries: exit 0 if a valid lease holds NAME with
    /// exactly this fence now, 1 if not.
    #[arg(value_parser = clap::value_parser!(u64).range(1..))]
    pub fence: u64,
    /// NAME is a semaphore: check a permit's fence.
    #[arg(long)]
    pub semaphore: bool,
    #[command(flatten)]
    pub output: OutputArgs,
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
pub(super) fn parse_limit(text: &str) -> Result<u64, String> {
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
