//! `lockbroker-bench`: measures the broker on this machine, over loopback,
//! against processes it starts itself (a `redis-server` on a free port and
//! release builds of `lockbroker`), beside Redis driven directly with the
//! broker's own Lua scripts by the same client code.
//!
//! Subcommands:
//! - `latency`: one caller, sequential acquire + release pairs on one lock,
//!   on the broker and on direct Redis in alternating slices: p50/p90/p99.
//! - `throughput`: 1, 16 and 64 callers, each on a lock of its own, for a
//!   fixed duration: pairs/s and p50/p99, broker beside direct.
//! - `handoff`: time from a release's response to the next waiter's grant
//!   response, for a waiter on the same broker, on a second broker sharing the
//!   Redis, and for a client polling every 100 ms as redis-py's Lock does.
//! - `churn`: rounds of waiters arriving and leaving, and whether their memory
//!   comes back.
//! - `memory`: the broker's resident memory idle, under the 64-caller load
//!   and with many acquires waiting at once.
//! - `quorum`: quorum mode over 3 and 5 local Redis nodes beside single mode.
//! - `all`: each of the above in one run, then one table.
//!
//! Prints a human table and one JSON line per figure, and exits non-zero if
//! anything it measured went wrong (an error, a fence that did not grow).

mod client;
mod handoff;
mod http1;
mod load;
mod memory;
mod pairs;
mod procs;
mod quorum;
mod resp;
mod stats;

use std::process::ExitCode;
use std::time::Duration;

use stats::Table;

const USAGE: &str = "\
Usage: lockbroker-bench all|latency|throughput|handoff|memory|churn|quorum [OPTIONS]

Options:
  --duration SECS   time per target for each latency/throughput case and for
                    the memory load (default 6)
  --slices N        alternate broker and direct Redis in N slices (default 3)
  --rounds N        handoff rounds per case (default 200)
  --waiters N       waiting acquires in the memory and churn cases (default 10000)
  --waiter-rounds N rounds of waiters in the churn case (default 10)

Starts its own redis-server and lockbroker processes on free loopback ports.
Build first: cargo build --release -p lockbroker-server -p lockbroker-bench
(scripts/bench.sh does both, then runs `all`).";

/// What the command line chose.
pub struct Settings {
    /// Time per target for each pair case, and for the memory load.
    pub duration: Duration,
    /// Alternating slices the pair cases are split into.
    pub slices: u32,
    /// Handoff rounds per case.
    pub rounds: usize,
    /// Waiting acquires in the memory and churn cases.
    pub waiters: usize,
    /// Rounds of waiters in the churn case.
    pub waiter_rounds: usize,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |flag: &str, default: u64| -> Result<u64, String> {
        match args.iter().position(|a| a == flag) {
            Some(i) => args
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .ok_or(format!("{flag} needs a positive number")),
            None => Ok(default),
        }
    };
    let settings = (|| {
        Ok::<_, String>(Settings {
            duration: Duration::from_secs(number("--duration", 6)?),
            slices: u32::try_from(number("--slices", 3)?).map_err(|e| e.to_string())?,
            rounds: usize::try_from(number("--rounds", 200)?).map_err(|e| e.to_string())?,
            waiters: usize::try_from(number("--waiters", 10_000)?).map_err(|e| e.to_string())?,
            waiter_rounds: usize::try_from(number("--waiter-rounds", 10)?)
                .map_err(|e| e.to_string())?,
        })
    })();
    let settings = match settings {
        Ok(settings) => settings,
        Err(problem) => return usage(&problem),
    };
    let benches: &[&str] = match args.first().map(String::as_str) {
        Some("all") => &[
            "latency",
            "throughput",
            "handoff",
            "memory",
            "churn",
            "quorum",
        ],
        Some(one @ ("latency" | "throughput" | "handoff" | "memory" | "churn" | "quorum")) => {
            &[one]
        }
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => return usage("name a benchmark"),
    };
    match run(benches, &settings).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(errors) => {
            for error in errors {
                eprintln!("lockbroker-bench: {error}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Runs `benches` against one Redis and two brokers, going on after a failed
/// one so the table shows what did run; every failure is returned.
async fn run(benches: &[&str], settings: &Settings) -> Result<(), Vec<String>> {
    let one = |e: String| vec![e];
    let redis = procs::redis().map_err(one)?;
    let first = procs::broker(&redis).map_err(one)?;
    let second = procs::broker(&redis).map_err(one)?;
    let http = reqwest::Client::new();
    for broker in [&first, &second] {
        client::wait_ready(&http, &format!("http://127.0.0.1:{}", broker.port))
            .await
            .map_err(one)?;
    }
    let mut table = Table::default();
    let mut errors = Vec::new();
    for &bench in benches {
        let result = match bench {
            "latency" => pairs::latency(&redis, &first, settings, &mut table).await,
            "throughput" => pairs::throughput(&redis, &first, settings, &mut table).await,
            "handoff" => handoff::run(&first, &second, settings.rounds, &mut table).await,
            "memory" => memory::run(&redis, settings, &mut table).await,
            "quorum" => quorum::run(&first, settings, &mut table).await,
            _ => memory::churn(&redis, settings, &mut table).await,
        };
        if let Err(error) = result {
            errors.push(format!("{bench}: {error}"));
        }
    }
    table.print();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("lockbroker-bench: {problem}\n\n{USAGE}");
    ExitCode::from(64)
}
