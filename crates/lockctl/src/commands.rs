//! `acquire`, `extend`, `release` and `status`: one API call each, printed.
//! Each works on a lock or, with `--limit` / `--semaphore`, a semaphore.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::cli::{AcquireArgs, CheckArgs, ExtendArgs, LeaseArgs, ReleaseArgs, StatusArgs};
use crate::client::{AcquireOptions, Broker, BrokerError, Family, LeaseKind, REQUEST_TIMEOUT};
use crate::exit;
use crate::output::{
    Format, FENCE_CHECK_FIELDS, LEASE_FIELDS, PERMIT_FIELDS, RELEASE_FIELDS, RENEWAL_FIELDS,
    SEMAPHORE_STATUS_FIELDS, STATUS_FIELDS,
};

/// `lockctl acquire NAME`: prints the lease (or permit), token included.
pub async fn acquire(broker: &Broker, args: AcquireArgs) -> u8 {
    let format = match args.output.format() {
        Ok(format) => format,
        Err(message) => return usage(&message),
    };
    let options = lease_options(&args.lease, host_name());
    let fields = match options.kind {
        LeaseKind::Exclusive | LeaseKind::Shared => LEASE_FIELDS,
        LeaseKind::Permit { .. } => PERMIT_FIELDS,
    };
    if let Err(message) = format.check(fields) {
        return usage(&message);
    }
    match broker.acquire(&args.name, &options).await {
        Ok(granted) => finish(&format, fields, Ok(granted.body)),
        Err(error) => finish(&format, fields, Err(error)),
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
    let family = family_for(args.semaphore);
    let result = broker
        .extend(family, &args.name, &token, args.ttl, REQUEST_TIMEOUT)
        .await;
    let hint = family_hint(family, &result);
    let code = finish(&format, RENEWAL_FIELDS, result);
    if let Some(hint) = hint {
        eprintln!("lockctl: {hint}");
    }
    code
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
    let family = family_for(args.semaphore);
    if let Err(message) = tell_enclosing_run(family, &args.name, &token) {
        return usage(&message);
    }
    let result = broker
        .release(family, &args.name, &token, REQUEST_TIMEOUT)
        .await;
    let hint = family_hint(family, &result);
    let code = finish(&format, RELEASE_FIELDS, result);
    if let Some(hint) = hint {
        eprintln!("lockctl: {hint}");
    }
    code
}

/// `lockctl status NAME`: a LockStatus, or a SemaphoreStatus with --semaphore.
pub async fn status(broker: &Broker, args: StatusArgs) -> u8 {
    let format = match args.output.format() {
        Ok(format) => format,
        Err(message) => return usage(&message),
    };
    let family = family_for(args.semaphore);
    let fields = match family {
        Family::Locks => STATUS_FIELDS,
        Family::Semaphores => SEMAPHORE_STATUS_FIELDS,
    };
    if let Err(message) = format.check(fields) {
        return usage(&message);
    }
    let result = broker.status(family, &args.name).await;
    finish(&format, fields, result)
}

/// `lockctl check NAME FENCE`: prints the FenceCheck, and exits 0 when the
/// fence is current, [`exit::NOT_CURRENT`] when not.
pub async fn check(broker: &Broker, args: CheckArgs) -> u8 {
    let format = match args.output.format() {
        Ok(format) => format,
        Err(message) => return usage(&message),
    };
    if let Err(message) = format.check(FENCE_CHECK_FIELDS) {
        return usage(&message);
    }
    let family = family_for(args.semaphore);
    let result = broker.check_fence(family, &args.name, args.fence).await;
    let current =
        matches!(&result, Ok(body) if body.get("current") == Some(&serde_json::Value::Bool(true)));
    match finish(&format, FENCE_CHECK_FIELDS, result) {
        exit::OK if !current => exit::NOT_CURRENT,
        code => code,
    }
}

/// The routes `--semaphore` picks.
fn family_for(semaphore: bool) -> Family {
    if semaphore {
        Family::Semaphores
    } else {
        Family::Locks
    }
}

/// What to add to a refused `token`: a token sent to the other family's
/// routes is refused so, and the broker's message names the right route,
/// not the flag that picks it.
fn family_hint(
    family: Family,
    result: &Result<serde_json::Value, BrokerError>,
) -> Option<&'static str> {
    let error = result.as_ref().err()?;
    if error.code() != "invalid_request" || error.detail_str("field") != Some("token") {
        return None;
    }
    Some(match family {
        Family::Locks => "if the token is a semaphore permit's, add --semaphore",
        Family::Semaphores => "if the token is a lock lease's, leave out --semaphore",
    })
}

/// The acquire request `args` describe; `owner` unless --owner is given.
pub fn lease_options(args: &LeaseArgs, owner: String) -> AcquireOptions {
    AcquireOptions {
        kind: args.kind(),
        ttl: args.ttl,
        wait: args.wait.unwrap_or(Duration::ZERO),
        owner: Some(args.owner.clone().unwrap_or(owner)),
        lock_delay: args.lock_delay,
        fair: args.fair,
        session: None,
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

fn finish(format: &Format, fields: &[&str], result: Result<serde_json::Value, BrokerError>) -> u8 {
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

/// The most locks one acquire-all takes, so the most a run numbers.
const MAX_LOCKS_PER_RUN: usize = 32;

/// Inside `lockctl run`, releasing its own lease must not look like a lost
/// lease to the run: tell it first (SIGUSR1) so it stops renewing.
///
/// A release on the wrong routes would fail after the run stopped renewing,
/// leaving the command without a lease, so it is refused before both: the
/// run holds a permit exactly when it set LOCKBROKER_LIMIT.
///
/// A run over several locks names each lease in LOCKBROKER_LOCK_n and
/// LOCKBROKER_TOKEN_n too: releasing any of them tells it the same way.
fn tell_enclosing_run(family: Family, name: &str, token: &str) -> Result<(), String> {
    let env = |key: &str| std::env::var(key).ok();
    let is = |lock: &str, lease: &str| {
        env(lock).as_deref() == Some(name) && env(lease).as_deref() == Some(token)
    };
    let numbered = (1..=MAX_LOCKS_PER_RUN).any(|n| {
        is(
            &format!("LOCKBROKER_LOCK_{n}"),
            &format!("LOCKBROKER_TOKEN_{n}"),
        )
    });
    if !is("LOCKBROKER_LOCK", "LOCKBROKER_TOKEN") && !numbered {
        return Ok(());
    }
    if let Some(refusal) = wrong_routes(family, name, env("LOCKBROKER_LIMIT").is_some()) {
        return Err(refusal);
    }
    let Some(pid) = env("LOCKBROKER_RUN_PID").and_then(|p| p.parse::<i32>().ok()) else {
        return Ok(());
    };
    // Only an ancestor: a stale variable must not signal an unrelated process.
    if is_ancestor(pid) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGUSR1);
    }
    Ok(())
}

/// Why releasing the enclosing run's own lease on `family`'s routes is
/// refused: the run holds the other kind (a permit when `run_holds_a_permit`).
fn wrong_routes(family: Family, name: &str, run_holds_a_permit: bool) -> Option<String> {
    match (family, run_holds_a_permit) {
        (Family::Locks, true) => Some(format!(
            "the enclosing `lockctl run` holds a permit of semaphore {name:?}: add --semaphore"
        )),
        (Family::Semaphores, false) => Some(format!(
            "the enclosing `lockctl run` holds a lease on lock {name:?}: leave out --semaphore"
        )),
        (Family::Locks, false) | (Family::Semaphores, true) => None,
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_enclosing_runs_lease_is_released_on_its_own_routes_only() {
        assert_eq!(wrong_routes(Family::Locks, "job", false), None);
        assert_eq!(wrong_routes(Family::Semaphores, "etl", true), None);
        let refusal = wrong_routes(Family::Locks, "etl", true).unwrap_or_default();
        assert!(refusal.ends_with("add --semaphore"), "{refusal}");
        let refusal = wrong_routes(Family::Semaphores, "job", false).unwrap_or_default();
        assert!(refusal.ends_with("leave out --semaphore"), "{refusal}");
    }

    #[test]
    fn a_refused_token_gets_a_hint_at_the_flag() {
        let refused = |error: serde_json::Value| -> Result<serde_json::Value, BrokerError> {
            let serde_json::Value::Object(error) = error else {
                panic!("an object")
            };
            Err(BrokerError::Rejected {
                status: 400,
                error,
                retry_after: None,
            })
        };
        let token = refused(json!({"code": "invalid_request", "field": "token", "message": "m"}));
        let hint = family_hint(Family::Locks, &token).unwrap_or_default();
        assert!(hint.contains("add --semaphore"), "{hint}");
        let hint = family_hint(Family::Semaphores, &token).unwrap_or_default();
        assert!(hint.contains("leave out --semaphore"), "{hint}");

        let ttl = refused(json!({"code": "invalid_request", "field": "ttl_ms", "message": "m"}));
        assert_eq!(family_hint(Family::Locks, &ttl), None);
        assert_eq!(
            family_hint(Family::Locks, &Ok(json!({"released": true}))),
            None
        );
    }

    #[test]
    fn options_carry_the_kind_of_lease() {
        let mut args = LeaseArgs {
            ttl: Duration::from_secs(30),
            wait: None,
            owner: None,
            lock_delay: None,
            fair: false,
            shared: false,
            limit: Some(4),
        };
        let options = lease_options(&args, "host".to_owned());
        assert_eq!(options.kind, LeaseKind::Permit { limit: 4 });
        assert_eq!(options.owner.as_deref(), Some("host"));
        args.limit = None;
        args.shared = true;
        assert_eq!(
            lease_options(&args, "host".to_owned()).kind,
            LeaseKind::Shared
        );
    }
}
