//! `lockbroker-bench`: measures the broker on this machine, over loopback,
//! against processes it starts itself (a `redis-server` on a free port and
//! release builds of `lockbroker`).
//!
//! Subcommands:
//! - `handoff`: time from a release's response to the next waiter's grant
//!   response, for a waiter on the same broker, on a second broker sharing the
//!   Redis, and for a client polling every 100 ms as redis-py's Lock does.
//!
//! Prints a human table and one JSON line per figure, and exits non-zero if
//! anything it measured went wrong (an error, a fence that did not grow).

mod handoff;
mod procs;
mod stats;

use std::process::ExitCode;

const USAGE: &str = "\
Usage: lockbroker-bench handoff [--rounds N]

Starts its own redis-server and lockbroker processes on free loopback ports.
Build first: cargo build --release -p lockbroker-server -p lockbroker-bench";

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds = match args.iter().position(|a| a == "--rounds") {
        Some(i) => match args.get(i + 1).and_then(|v| v.parse().ok()) {
            Some(n) => n,
            None => return usage("--rounds needs a number"),
        },
        None => 200,
    };
    let result = match args.first().map(String::as_str) {
        Some("handoff") => handoff::run(rounds).await,
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => return usage("name a benchmark"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("lockbroker-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("lockbroker-bench: {problem}\n\n{USAGE}");
    ExitCode::from(64)
}
