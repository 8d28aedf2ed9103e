//! `acquire`, `extend`, `release` and `status`: one API call each, printed.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::cli::{AcquireArgs, ExtendArgs, LeaseArgs, ReleaseArgs, StatusArgs};
use crate::client::{AcquireOptions, Broker, REQUEST_TIMEOUT};
use crate::exit;
use crate::output::{Format, LEASE_FIELDS, RELEASE_FIELDS, RENEWAL_FIELDS, STATUS_FIELDS};

/// `lockctl acquire NAME`: prints the lease, token included.
pub async fn acquire(broker: &Broker, args: AcquireArgs) -> u8 {
    let format = match args.output.format() {
        Ok(format) => format,
        Err(message) => return usage(&message),
    };
    if let Err(message) = format.check(LEASE_FIELDS) {
        return usage(&message);
    }
    let options = lease_options(&args.lease, host_name());
    match broker.acquire(&args.name, &options).await {
        Ok(granted) => finish(&format, LEASE_FIELDS, Ok(granted.body)),
        Err(error) => finish(&format, LEASE_FIELDS, Err(error)),
    }
}

/// `lockctl extend NAME --ttl D`.
pub async fn extend(broker: &Broker, args: ExtendArgs) -> u8 {
    let (format, token) = match args.output.format().and_then(|format| {
        format.check(RENEWAL_FIELDS)?;
        Ok((format, args.token.read()?))
    }) {
        Ok(both) => both,
        Err(message) => return usage(&message),
    };
    let result = broker
        .extend(&args.name, &token, args.ttl, REQUEST_TIMEOUT)
        .await;
    finish(&format, RENEWAL_FIELDS, result)
}

/// `lockctl release NAME`.
pub async fn release(broker: &Broker, args: ReleaseArgs) -> u8 {
    let (format, token) = match args.output.format().and_then(|format| {
        format.check(RELEASE_FIELDS)?;
        Ok((format, args.token.read()?))
    }) {
        Ok(both) => both,
        Err(message) => return usage(&message),
    };
    tell_enclosing_run(&args.name, &token);
    let result = broker.release(&args.name, &token, REQUEST_TIMEOUT).await;
    finish(&format, RELEASE_FIELDS, result)
}

/// `lockctl status NAME`.
pub async fn status(broker: &Broker, args: StatusArgs) -> u8 {
    let format = match args.output.format() {
        Ok(format) => format,
        Err(message) => return usage(&message),
    };
    if let Err(message) = format.check(STATUS_FIELDS) {
        return usage(&message);
    }
    let result = broker.status(&args.name).await;
    finish(&format, STATUS_FIELDS, result)
}

/// The acquire request `args` describe; `owner` unless --owner is given.
pub fn lease_options(args: &LeaseArgs, owner: String) -> AcquireOptions {
    AcquireOptions {
        ttl: args.ttl,
        wait: args.wait.unwrap_or(Duration::ZERO),
        owner: Some(args.owner.clone().unwrap_or(owner)),
        lock_delay: args.lock_delay,
        fair: args.fair,
    }
}

/// This machine's name, for the default owner.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// Prints a bad-usage message and answers its exit code.
pub fn usage(message: &str) -> u8 {
    eprintln!("lockctl: {message}");
    exit::USAGE
}

fn finish(
    format: &Format,
    fields: &[&str],
    result: Result<serde_json::Value, crate::client::BrokerError>,
) -> u8 {
    match result {
        Ok(body) => {
            format.print(fields, &body);
            exit::OK
        }
        Err(error) => {
            format.report(&error);
            error.exit_code()
        }
    }
}

/// Inside `lockctl run`, releasing its own lease must not look like a lost
/// lease to the run: tell it first (SIGUSR1) so it stops renewing.
fn tell_enclosing_run(name: &str, token: &str) {
    let env = |key| std::env::var(key).ok();
    if env("LOCKBROKER_LOCK").as_deref() != Some(name)
        || env("LOCKBROKER_TOKEN").as_deref() != Some(token)
    {
        return;
    }
    let Some(pid) = env("LOCKBROKER_RUN_PID").and_then(|p| p.parse::<i32>().ok()) else {
        return;
    };
    // Only an ancestor: a stale variable must not signal an unrelated process.
    if is_ancestor(pid) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGUSR1);
    }
}

fn is_ancestor(pid: i32) -> bool {
    let mut current = nix::unistd::getppid().as_raw();
    for _ in 0..64 {
        if current == pid {
            return true;
        }
        if current <= 1 {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{current}/stat")) else {
            return false;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        match after_comm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
        {
            Some(parent) => current = parent,
            None => return false,
        }
    }
    false
}
