//! `lockctl elect`: run a command only while this host is the leader.
//!
//! A campaign is an exclusive acquire that waits as long as it takes: one
//! acquire of [`CAMPAIGN_WAIT`] after another, each of which the broker caps
//! at its own max wait and [`Broker::acquire`] asks again within. A granted
//! lease is a term, held exactly as `lockctl run` holds its lease (through
//! [`super::hold`]); the lease's fence is the term.

use std::future::Future;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::signals::Signals;
use super::{hold, signal_exit_code, Plan};
use crate::cli::ElectArgs;
use crate::client::{AcquireOptions, Broker, BrokerError, Granted, LeaseKind};
use crate::commands::{host_name, usage};
use crate::duration::millis;
use crate::exit;

/// How long one campaign request asks to wait. The broker caps a wait at
/// its `locks.max_wait_ms` (60 s by default); a campaign outlasts any cap by
/// asking again, and a `lock_busy` at the end of a wait only starts the next.
const CAMPAIGN_WAIT: Duration = Duration::from_secs(60);
/// With `--again`, the pause between a term's end and the next campaign: a
/// command that fails at once does not spin, and a candidate already
/// waiting is granted the lock first.
const BETWEEN_TERMS: Duration = Duration::from_secs(1);
/// The first pause before asking an unavailable broker again; it doubles
/// up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest pause between campaign requests to an unavailable broker.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Why a campaign ended without a term.
enum Defeat {
    /// SIGINT, SIGTERM or SIGHUP arrived.
    Interrupted(Signal),
    /// A refusal that campaigning again cannot mend, with its exit code.
    Refused(u8),
}

/// `lockctl elect NAME ... -- CMD ARGS...`
pub async fn elect(broker: &Broker, args: ElectArgs) -> u8 {
    if args.ttl < Duration::from_millis(30) {
        return usage("--ttl is too short to renew in time; use at least 30ms");
    }
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("lockctl: cannot handle signals: {error}");
            return exit::SOFTWARE;
        }
    };
    let options = AcquireOptions {
        kind: LeaseKind::Exclusive,
        ttl: args.ttl,
        wait: CAMPAIGN_WAIT,
        owner: Some(args.owner.clone().unwrap_or_else(host_name)),
        lock_delay: args.lock_delay,
        fair: false,
        session: None,
    };
    let plan = Plan {
        names: std::slice::from_ref(&args.name),
        command: &args.cmd.argv,
        ttl: args.ttl,
        max_hold: None,
        kill_after: args.cmd.kill_after,
        verbose: args.verbose,
        session: None,
    };
    let mut at_start = true;
    loop {
        let campaigning = campaign(
            broker,
            &args.name,
            &options,
            at_start,
            args.verbose,
            &mut signals,
        );
        let granted = match campaigning.await {
            Ok(granted) => granted,
            // With --again, an interruption is how the campaigns end.
            Err(Defeat::Interrupted(_)) if args.again => return exit::OK,
            Err(Defeat::Interrupted(signal)) => {
                eprintln!(
                    "lockctl: {signal} while campaigning for {:?}; command not run",
                    args.name
                );
                return signal_exit_code(signal);
            }
            Err(Defeat::Refused(code)) => return code,
        };
        at_start = false;
        let ended = hold(broker, &options, &plan, &granted, &mut signals).await;
        if !args.again || ended.interrupted || ended.fatal {
            return ended.code;
        }
        if args.verbose {
            eprintln!(
                "lockctl: the term on {:?} ended (exit code {}); campaigning again in {} ms",
                args.name,
                ended.code,
                millis(BETWEEN_TERMS)
            );
        }
        if interruptible(tokio::time::sleep(BETWEEN_TERMS), &mut signals)
            .await
            .is_err()
        {
            return exit::OK;
        }
    }
}

/// One campaign: acquires `name`, asking again after every `lock_busy`
/// and, once the broker has answered, after every transient failure
/// (pausing up to [`MAX_BACKOFF`]); other refusals end it. The first
/// campaign of this lockctl (`at_start`) sends its first request without a
/// wait, so that a broker out of reach is reported at once (exit 69).
async fn campaign(
    broker: &Broker,
    name: &str,
    options: &AcquireOptions,
    at_start: bool,
    verbose: bool,
    signals: &mut Signals,
) -> Result<Granted, Defeat> {
    let mut first = at_start;
    let mut backoff = FIRST_BACKOFF;
    let mut failing = false;
    loop {
        let mut asking = options.clone();
        if first {
            asking.wait = Duration::ZERO;
        }
        let error = match interruptible(broker.acquire(name, &asking), signals).await? {
            Ok(granted) => return Ok(granted),
            Err(error) => error,
        };
        if error.is_busy() {
            if failing {
                eprintln!("lockctl: the broker answers again; campaigning for {name:?}");
            } else if first && verbose {
                eprintln!("lockctl: {}; campaigning", led_by(name, &error));
            }
            failing = false;
            backoff = FIRST_BACKOFF;
        } else if error.is_transient() && !first {
            if !failing {
                eprintln!(
                    "lockctl: cannot campaign for {name:?}: {error}; trying again until it can"
                );
                failing = true;
            }
            let pause = error.retry_after().unwrap_or(backoff).min(MAX_BACKOFF);
            interruptible(tokio::time::sleep(pause), signals).await?;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        } else {
            eprintln!("lockctl: {error}");
            return Err(Defeat::Refused(error.exit_code()));
        }
        first = false;
    }
}

/// Who leads `name`, from a `lock_busy` answer: its owner and term.
fn led_by(name: &str, busy: &BrokerError) -> String {
    let owner = busy.detail_str("owner").unwrap_or("an unnamed holder");
    match busy.detail_u64("fence") {
        Some(term) => format!("{name:?} is led by {owner}, term {term}"),
        None => format!("{name:?} is led by {owner}"),
    }
}

/// Runs `future` to its end unless SIGINT, SIGTERM or SIGHUP arrives first
/// (SIGUSR1, which only a command's own release sends, is ignored).
async fn interruptible<T>(
    future: impl Future<Output = T>,
    signals: &mut Signals,
) -> Result<T, Defeat> {
    tokio::pin!(future);
    loop {
        tokio::select! {
            output = &mut future => return Ok(output),
            signal = signals.recv() => if signal != Signal::SIGUSR1 {
                return Err(Defeat::Interrupted(signal));
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn busy(error: Value) -> BrokerError {
        let Value::Object(error) = error else {
            panic!("an object")
        };
        BrokerError::Rejected {
            status: 423,
            error,
            retry_after: None,
        }
    }

    #[test]
    fn a_busy_answer_names_the_leader_and_its_term() {
        let answer = busy(
            json!({"code": "lock_busy", "message": "m", "owner": "web-2",
                                 "fence": 1_795_954_817_685_497_u64}),
        );
        assert_eq!(
            led_by("scheduler", &answer),
            "\"scheduler\" is led by web-2, term 1795954817685497"
        );
        let unnamed = busy(json!({"code": "lock_busy", "message": "m", "owner": null}));
        assert_eq!(
            led_by("scheduler", &unnamed),
            "\"scheduler\" is led by an unnamed holder"
        );
    }
}
