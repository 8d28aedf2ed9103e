//! The command line: flags, environment variables and the help text.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::duration;
use crate::exit;

const ABOUT: &str = "Take, renew and give back lockbroker leases from the shell";

const LONG_ABOUT: &str = "\
Take, renew and give back lockbroker leases from the shell.

A lease is a lock with a TTL and a fence number that only grows. `lockctl run`
holds a lease exactly as long as a command runs (flock for a fleet); the other
subcommands are the API's four calls, for scripts that manage a lease by hand.

Durations are written 500ms, 1.5s, 30s, 1m30s, 10m or 2h.

Answers print as shell assignments for eval, each named LOCK_<FIELD>
(LOCK_TOKEN, LOCK_FENCE, ...; --prefix JOB_ names them JOB_TOKEN, ...), as the
broker's JSON with --json, or as one bare value with --field NAME.

A script that takes a lease by hand must keep its token, or it cannot release
it and the lock stays held until the TTL runs out (so never keep only
--field fence). Stop if the acquire fails, and release on the way out:
  lease=$(lockctl acquire nightly-report --ttl 5m) || exit
  eval \"$lease\"   # LOCK_TOKEN, LOCK_FENCE, LOCK_NAME, ...
  trap 'LOCKBROKER_TOKEN=$LOCK_TOKEN lockctl release nightly-report' EXIT
  ... work, handing \"$LOCK_FENCE\" to what it writes to ...
`lockctl run` does all of this for a command, and renews the lease too.";

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
    /// Acquire a lease and print it, token included (keep the token secret).
    Acquire(AcquireArgs),
    /// Renew a lease: its remaining TTL becomes --ttl.
    Extend(ExtendArgs),
    /// Release a lease, freeing the lock at once.
    Release(ReleaseArgs),
    /// Show who holds a lock and the last fence issued (never a token).
    Status(StatusArgs),
    /// Run a command while holding a lease, renewing it, and release at the end.
    #[command(long_about = RUN_ABOUT)]
    Run(RunArgs),
}

const RUN_ABOUT: &str = "\
Run a command while holding a lease: flock for a fleet.

lockctl acquires NAME, starts CMD with LOCKBROKER_LOCK, LOCKBROKER_FENCE and
LOCKBROKER_TOKEN (and LOCKBROKER_URL) in its environment, renews the lease every
third of its TTL, and releases it when CMD ends. It exits with CMD's exit code,
or 128+N if signal N ended CMD.

If the lock is busy: --if-busy fail (the default) exits 75, skip exits 0 without
running CMD (for cron: \"another instance is running\"), and --wait D waits up to D
for the lock first. When the lock is granted after a wait longer than a third
of the TTL, lockctl renews the lease once before starting CMD, so that its
clock counts from a request sent after the grant.

If a renewal answers lease_lost (the lease expired or was taken), lockctl sends
SIGTERM to CMD, SIGKILL after --kill-after, and exits 79. If the broker cannot be
reached, lockctl keeps retrying the renewal until the lease would expire by its
own monotonic clock less a safety margin of a tenth of the TTL (counted from
when the last successful request was sent), then stops CMD the same way and
exits 79.

With --max-hold D, lockctl renews as long as a renewal fits within D of
acquiring; the last one is shortened to end just past D (by the margin), and
when D is reached CMD, if still running, is stopped the same way and lockctl
exits 80. When the broker answers max_hold_exceeded, lockctl stops renewing; if
CMD is still running when the lease runs out (less the margin), it is stopped
the same way and lockctl exits 80.

CMD runs in its own process group and signals go to the whole group, so
`sh -c 'a; b'` is stopped as a whole. SIGINT, SIGTERM and SIGHUP sent to lockctl
are passed on to CMD; the lease is kept while CMD runs and released after. CMD
should not read from a terminal. If lockctl itself is killed with SIGKILL, CMD
keeps running without a lease.

To give the lease back before CMD ends, run `lockctl release \"$LOCKBROKER_LOCK\"`
inside CMD (LOCKBROKER_TOKEN is read from the environment): it tells lockctl to
stop renewing. Another client must send SIGUSR1 to $LOCKBROKER_RUN_PID before it
releases, or the next renewal counts as a lost lease.

The fence is the number to hand to whatever CMD writes to: a store that refuses
fences lower than the highest it has seen turns a stale holder into a no-op.

Example (crontab): every 5 minutes on every host, one run at a time fleet-wide:
  */5 * * * * lockctl run nightly-sync --ttl 1m --max-hold 2h --if-busy skip -- /usr/local/bin/sync.sh";

/// What `run` does when the lock is still busy after --wait.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfBusy {
    /// Exit 0 quietly without running the command.
    Skip,
    /// Wait up to --wait (required), then exit 75.
    Wait,
    /// Exit 75 (after --wait, if given).
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
    /// Lock name: 1-200 of A-Z a-z 0-9 . _ - :
    pub name: String,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `lockctl extend`.
#[derive(Args, Debug)]
pub struct ExtendArgs {
    /// Lock name.
    pub name: String,
    /// New remaining TTL (replaces, does not add).
    #[arg(long, value_parser = duration::parse, default_value = "30s")]
    pub ttl: Duration,
    #[command(flatten)]
    pub token: TokenArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `lockctl release`.
#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// Lock name.
    pub name: String,
    #[command(flatten)]
    pub token: TokenArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `lockctl status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Lock name.
    pub name: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `lockctl run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Lock name.
    pub name: String,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// What to do if the lock is still busy after --wait.
    #[arg(long, value_enum)]
    pub if_busy: Option<IfBusy>,
    /// Hold the lock at most this long: renewals stop there, and CMD is
    /// stopped then if still running (exit 80).
    #[arg(long, value_parser = duration::parse)]
    pub max_hold: Option<Duration>,
    /// After SIGTERM for a lost lease, SIGKILL CMD's process group this much later.
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
